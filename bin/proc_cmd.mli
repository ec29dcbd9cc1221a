(** [consort cap proc serve], [consort cap exec], [consort cap ps], [consort cap kill]: the process
    server and its tools. *)

val proc : int Cmdliner.Cmd.t
val exec : int Cmdliner.Cmd.t
val ps : int Cmdliner.Cmd.t
val kill : int Cmdliner.Cmd.t

val bench : int Cmdliner.Cmd.t
(** [consort bench proc]. *)
