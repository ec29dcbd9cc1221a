(** Simulated scenarios of protocol switching ({!Consort_group.Group.Make.switch}): a group changes
    its stack at view boundaries while casts and sends flow, members crash and the network
    partitions; a member started on another stack is refused until the group switches to that stack.
    The logs are checked with {!Consort_spec.Vsync} (nothing lost, duplicated or reordered across a
    switch), and each view must run one stack at every member. *)

val names : string list
val describe : string -> string option

val run :
  ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> Vsync_sim.outcome option

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)
