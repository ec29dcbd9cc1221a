(** [consort bench fs]: reading a file from the file server beside [cat]. *)

val bench : int Cmdliner.Cmd.t
