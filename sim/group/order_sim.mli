(** Simulated scenarios of ordered delivery (total order with the sequencer and with the token,
    causal order, safe delivery) on the virtual synchrony stack: every run is checked with
    {!Consort_spec.Vsync} and with the matching checker of {!Consort_spec.Order}. *)

val names : string list
val describe : string -> string option

val run :
  ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> Vsync_sim.outcome option

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)
