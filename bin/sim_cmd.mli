(** [consort sim]: seeded schedules of a scenario, checked by the specs. *)

val cmd : int Cmdliner.Cmd.t
