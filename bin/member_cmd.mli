(** [consort member], [consort stack] and [consort keygen]. *)

val member : int Cmdliner.Cmd.t
val stack : int Cmdliner.Cmd.t
val keygen : int Cmdliner.Cmd.t
