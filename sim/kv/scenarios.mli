(** The registry of the key-value store ({!Kv_sim}) scenarios. They take no tunables of their own:
    [check_params] accepts every set. *)

val registry : Consort_sim.Scenario.registry
