(** [consort bench proc]: process start latency through a process server. *)

val bench : int Cmdliner.Cmd.t
