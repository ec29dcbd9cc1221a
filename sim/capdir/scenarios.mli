(** The registry of the directory server ({!Dir_sim}, {!Gc_sim}) scenarios. They take no tunables of
    their own: [check_params] accepts every set. *)

val registry : Consort_sim.Scenario.registry
