(** The registry of the capability RPC ({!Rpc_sim}) scenarios. They take no tunables of their own:
    [check_params] accepts every set. *)

val registry : Consort_sim.Scenario.registry
