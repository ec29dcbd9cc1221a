(** The registry of the file server ({!Fs_sim}) scenarios. They take no tunables of their own:
    [check_params] accepts every set. *)

val registry : Consort_sim.Scenario.registry
