(** [consort check-logs]: member logs checked against virtual synchrony. *)

val cmd : int Cmdliner.Cmd.t
