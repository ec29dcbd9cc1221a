(** [consort cap ...]: capability services from the shell. *)

val cmd : int Cmdliner.Cmd.t
