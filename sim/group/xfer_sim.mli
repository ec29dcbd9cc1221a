(** Simulated scenarios of state transfer (property [Xfer]): members join a group whose state grows
    with large casts, the state streams to them in chunks while casts go on, givers crash midway.
    Every application keeps as its state the set of casts it applied (their payloads, so snapshots
    are large); {!Consort_spec.Xfer} checks every installed snapshot against a replay of its giver's
    deliveries, that no member applies a cast of its new view before its state, and that members
    ending in one view end with the same state; {!Consort_spec.Vsync} checks the logs. *)

val names : string list
val describe : string -> string option

val run :
  ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> Vsync_sim.outcome option

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)
