(** [consort cap ...]: capability services from the shell. *)

val cmd : int Cmdliner.Cmd.t

val bench : int Cmdliner.Cmd.t
(** [consort bench fs]. *)
