(** [consort bench kv]: key-value operations per second and latency (p50,
    p99) with 3 replicas, beside 1 replica and beside etcd (3 members on
    loopback), running the same operations from the same number of
    client processes. *)

val cmd : int Cmdliner.Cmd.t
