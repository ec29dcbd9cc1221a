(** [consort member] and [consort stack]. *)

val member : int Cmdliner.Cmd.t
val stack : int Cmdliner.Cmd.t
