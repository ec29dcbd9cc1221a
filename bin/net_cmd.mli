(** [consort net ...]: the TCP/IP stack on a TAP device. *)

val cmd : int Cmdliner.Cmd.t
val bench_checksum : int Cmdliner.Cmd.t
