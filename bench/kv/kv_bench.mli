(** [consort bench kv]: key-value operations per second and latency (p50, p99) with 3 replicas,
    beside 1 replica and beside etcd (3 members on loopback), running the same operations from the
    same number of client processes. *)

val cmd : int Cmdliner.Cmd.t

(** {1 For other benchmarks}

    The directory server's, beside this one. *)

type result = { name : string; ops : int; seconds : float; p50 : float; p99 : float; failed : int }

val load :
  name:string -> clients:int -> seconds:float -> dir:string -> (int -> int -> bool) -> result
(** [load ~name ~clients ~seconds ~dir connect]: [clients] processes (forked), client [c] running
    [connect c] first, then the operation it gives on [0, 1, ...] one at a time for [seconds];
    latencies in ms. *)

val consort_cluster : ?params:string list -> dir:string -> n:int -> unit -> int list * string list
(** [n] key-value replicas as processes: their pids and client addresses. *)

val consort_ready : string list -> bool
val spawn : ?out:string -> string -> string list -> int
val stop : int list -> unit
val free_port : Unix.socket_type -> int
val rm_rf : string -> unit
val key : int -> int -> string
val value : string
