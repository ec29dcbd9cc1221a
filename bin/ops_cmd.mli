(** [consort status], [consort counters], [consort cast], [consort send]: a running member's state
    and counters, and messages from the command line, through its control socket
    ([consort member --control PATH]). *)

val commands : Cmdliner.Cmd.Exit.code Cmdliner.Cmd.t list
