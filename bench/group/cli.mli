(** The [consort bench] subcommands of the group benchmarks: [join], [failover], [rtt],
    [throughput], and [peer] (one process of [rtt] and [throughput], started by them). Each
    benchmark prints a table and, with [--json], one JSON line. *)

val commands : int Cmdliner.Cmd.t list
