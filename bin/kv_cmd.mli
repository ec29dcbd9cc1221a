val cmd : int Cmdliner.Cmd.t
