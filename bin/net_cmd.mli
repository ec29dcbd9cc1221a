(** [consort net ...]: the TCP/IP stack on a TAP device. *)

val cmd : int Cmdliner.Cmd.t
