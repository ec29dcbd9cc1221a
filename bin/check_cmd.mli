(** [consort check-logs]: member logs checked against virtual synchrony. *)

val cmd : int Cmdliner.Cmd.t

val check : int Cmdliner.Cmd.t
(** [consort check]: the same command, under the name operators expect. *)
