(** [consort cap boot serve] and [consort cap boot check]: the boot server. *)

val cmd : int Cmdliner.Cmd.t
