(** The registry of the process-group scenarios: [pt2pt-lossy], [mnak-lossy] ({!Fifo_sim}), the
    vsync-* family ({!Vsync_sim}, {!Vsync_forged}, {!Order_sim}, {!Xfer_sim}, {!Switch_sim},
    {!Migrate_sim}) and the client-server groups ({!Cltsvr_sim}).

    Each run starts from cleared checking layers: with Debug in the stack, a violation a checking
    layer ({!Consort_group.Chk}) reports fails the seed, with its report. [check_params] is
    {!Vsync_sim.check_params}. *)

val registry : Consort_sim.Scenario.registry
