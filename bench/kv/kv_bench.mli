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

val consort_cluster :
  ?params:string list -> ?verbose:bool -> dir:string -> n:int -> unit -> int list * string list
(** [n] key-value replicas as processes: their pids and client addresses. *)

val consort_ready : string list -> bool
val spawn : ?out:string -> string -> string list -> int
val stop : int list -> unit
val free_port : Unix.socket_type -> int
val rm_rf : string -> unit
val key : int -> int -> string
val value : string

(** {1 The comparison with etcd} *)

val wait_all :
  ?now:(unit -> float) ->
  ?sleep:(float -> unit) ->
  timeout:float ->
  name:('m -> string) ->
  probe:('m -> (unit, string) Stdlib.result) ->
  'm list ->
  (unit, string) Stdlib.result
(** [wait_all ~timeout ~name ~probe members]: [Ok] once [probe] succeeds for every member in one
    pass (probed again every 0.3 s); [Error] naming each member not ready, with its probe's error,
    after [timeout] seconds, or for no member. *)

type measure = {
  system : string;
  clients : int;  (** connections *)
  depth : int;  (** operations under way on each connection (1: one client a connection) *)
  ops : int;  (** operations done in the measured time *)
  failed : int;  (** failed operations, warm-up included *)
  seconds : float;
  p50 : float;  (** ms *)
  p99 : float;
  first_error : string;
}

type outcome = Measured of measure | Not_measured of string  (** why *)

val verdict : measure -> (measure, string) Stdlib.result
(** [Error "discarded: ..."] for a run with any failed operation, or none done: such a run gives no
    figure and no ratio. *)

val report : ((int * int) * outcome * outcome) list -> string list
(** The lines for ((clients, depth), consort, etcd) runs ("8 clients", "8 x 8 pipelined"): one per
    run (a figure, or why there is none), then one ratio per number of clients, only where both runs
    hold. *)

type failover = { fname : string; blocked : (float, string) Stdlib.result }

val to_json :
  header:(string * Yojson.Safe.t) list ->
  load_start:string ->
  load_end:string ->
  ((int * int) * outcome * outcome) list ->
  failover list ->
  Yojson.Safe.t
(** The results file: runs (figures only for those that hold), ratios, failover. *)

val sequencer : string list -> (int, string) Stdlib.result
(** The index of the replica that orders (the view's coordinator), told from the replicas' logs
    written with [--verbose]. *)
