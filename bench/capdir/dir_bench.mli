(** [consort bench dir]: directory lookups and installs per second and latency (p50, p99) with 3
    replicas, beside the key-value store's gets and puts with 3 replicas, the same client processes,
    in the same run; each directory figure is printed with its ratio to the store's. *)

val cmd : int Cmdliner.Cmd.t
