(** Simulated scenario of migration ({!Consort_group.Group.Make.migrate}): members of a group move
    to new addresses while casts and sends flow, while the view is stable, while it changes after a
    crash, while the crashed member rejoins, and twice in a row. The logs are checked with
    {!Consort_spec.Vsync}; no member that did not crash may be seen leaving a view; at the end every
    live member that moved is known by every other at its last address, every member has
    acknowledged its move, and the addresses it left are closed. *)

val names : string list
val describe : string -> string option

val run :
  ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> Vsync_sim.outcome option

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)
