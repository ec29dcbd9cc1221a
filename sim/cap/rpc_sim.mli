(** Simulated scenarios of the capability RPC, checked for at-most-once execution.

    [rpc-at-most-once]: one server port and three clients over a lossy simulated network (loss,
    duplication, reordering, jitter, all drawn from the seed); the server crashes and restarts a few
    times (same key, fresh memory), some requests are long (alive probes), some large (streamed in
    fragments). Every request is unique and not idempotent. The checker asserts that each request
    was carried out at most once, that every success reported to a client was carried out exactly
    once with the right reply, that every error said to mean "not carried out" is true, and that
    every transaction ended with exactly one outcome. *)

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;  (** transactions started *)
  delivered : int;  (** transactions that succeeded *)
  datagrams : int;
  end_time : Consort.Time.t;
}

val names : string list
val describe : string -> string option

val run : ?trace:out_channel -> string -> seed:int -> outcome option
(** [None] if no scenario has that name. *)

val run_at_most_once : ?trace:out_channel -> seed:int -> unit -> outcome
(** The scenario itself. *)

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry (they take no tunables). *)
