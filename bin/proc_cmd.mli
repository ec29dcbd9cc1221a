(** [consort cap proc serve], [consort cap exec], [consort cap ps], [consort cap kill]: the process
    server and its tools. *)

val proc : int Cmdliner.Cmd.t
val exec : int Cmdliner.Cmd.t
val agent : int Cmdliner.Cmd.t
val ps : int Cmdliner.Cmd.t
val kill : int Cmdliner.Cmd.t

val program_user : string option -> ((int * int) option, string) result
(** The user a process server runs programs as ([--user]): as root, the named user (default
    [consort-run]), never root; otherwise [None] (the server's own). *)
