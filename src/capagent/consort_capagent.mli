(** [consort cap agent]: [consort cap exec]'s RPC state kept warm for this user, serving the starts
    of the small C client [consort-exec] on a Unix socket.

    The agent holds no authority of its own: each request carries the command line and the variables
    and root file the command reads, as the client read them, and the client's standard streams
    (SCM_RIGHTS). Only connections from the agent's own uid are served (SO_PEERCRED); a foreign one
    gets one line and is counted. Requests are bounded ({!max_body}, {!max_args}) and parsed
    strictly; a bad one gets a one-line answer and the agent goes on. At most {!max_clients}
    connections are open at once and at most [max_running] programs run at once (default
    {!default_max_running}), each on nodes of its own kept for the next start: a start asked beyond
    that is answered [F] and runs in the caller's own client. *)

val magic : string
val max_body : int
val max_args : int
val max_clients : int
val default_max_running : int

type request = {
  home : string option;
  consort_root : string option;
  consort_locate : string option;
  consort_multicast : string option;
  root_file : string option;  (** [$HOME/.consort/root]'s contents, as the client read them *)
  argv : string list;  (** the command line, its name first *)
}

val encode : request -> string
(** The request on the wire: {!magic}, the body's length (4 bytes, big-endian), the body. *)

val decode : string -> (request, string) result
(** The body, strictly: every byte accounted for, 1 to {!max_args} arguments, no NUL. *)

val body_length : string -> (int, string) result
(** The length the 8 bytes of a request's head announce, at most {!max_body}. *)

val send_fds : Unix.file_descr -> string -> Unix.file_descr array -> int
(** [send_fds sock s fds] sends [s] with [fds] attached (at most 8): the bytes sent. *)

val default_socket : getenv:(string -> string option) -> (string, string) result
(** [$XDG_RUNTIME_DIR/consort/agent.sock], else [~/.consort/agent.sock]. *)

val serve : ?max_running:int -> socket:string option -> locate:string option -> unit -> int
(** Runs the agent until SIGTERM or SIGINT, or until its socket is removed or replaced (checked
    every 5 s), then once the programs running have ended: its exit status (2 and one line when it
    cannot start: the socket's directory is another user's or open to others, an agent serves it
    already, ...). *)

val cmd : int Cmdliner.Cmd.t
(** [consort cap agent]. *)
