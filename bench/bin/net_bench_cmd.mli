(** [consort bench tcp]: TCP throughput, latency and CPU per megabyte of Consort's stack over TAP
    beside a C TAP bridge and veth. *)

val cmd : int Cmdliner.Cmd.t

val cmd_sim : int Cmdliner.Cmd.t
(** [consort bench tcp-sim]: TCP on the in-memory network. *)
