(** A client of consortd: process groups through the daemon, with the shape of the in-process
    {!Consort_group.Group} API (the same callbacks, view and refusals).

    A connection is single-threaded and blocking: {!join}, {!cast}, {!send}, {!leave}, {!suspect}
    and {!switch} write a request and wait for its reply; upcalls that arrive meanwhile are queued,
    and the callbacks are called only from {!dispatch}, {!step} and {!run}, never from inside
    another call. {!cast_async} does not wait (for throughput): its result comes later, through
    [on_result], from {!dispatch}. *)

type t
(** A connection to the daemon. *)

val connect : ?name:string -> ?token_file:string -> string -> (t, string) result
(** [connect addr]: [addr] is a Unix socket path, or ["tcp:127.0.0.1:PORT"]. Says HELLO (protocol
    versions 1 and 2: with 2, a cast or send the daemon takes gets no reply); [name] names the
    client in the daemon's logs. Over TCP, the text of [token_file] (default: the file the
    environment variable [CONSORT_TOKEN_FILE] names, if set) goes in HELLO: a daemon with [--token]
    requires it; it is never sent on a Unix socket (checked by credentials instead). One-line
    errors. *)

val close : t -> unit
(** Closes the connection: the daemon fails the client's members out of their groups (they leave).
*)

val fd : t -> Unix.file_descr
(** For an event loop: readable when {!step} has something to read. *)

val closed : t -> string option
(** [Some reason] once the connection is gone. *)

type member

type join_error =
  | Refused of Consort_daemon.Wire.code * string  (** the daemon's code and reason *)
  | Disconnected of string

val pp_join_error : join_error Fmt.t

val join :
  ?props:Consort_group.Properties.t list ->
  ?params:string ->
  ?peers:string list ->
  ?on_sent:(vid:string -> [ `Cast | `Send of string ] -> string -> unit) ->
  ?on_lost:([ `Cast | `Send of string ] -> string -> string -> unit) ->
  t ->
  group:string ->
  Consort_group.Group.callbacks ->
  (member, join_error) result
(** [join conn ~group cb] joins [group] on the daemon ([props] default
    {!Consort_group.Properties.vsync}; [params] ["NAME=VALUE,..."]; [peers] where to look for the
    other members, default the daemon's). [on_sent] and [on_lost] are
    {!Consort_group.Group.Make.join}'s, reported by the daemon. *)

val me : member -> string

val view : member -> Consort_group.Group.view_info
(** The last view dispatched (a view of this member alone before the first). *)

val max_message : member -> int
val has_exited : member -> bool
val cast : member -> string -> (unit, Consort_group.Group.error) result
val send : member -> string -> string -> (unit, Consort_group.Group.error) result

val cast_async :
  ?on_result:((unit, Consort_group.Group.error) result -> unit) -> member -> string -> unit
(** Queues the cast without waiting for its reply: queued casts go out together at the next {!step}
    (or {!run}, or any other request), or once 64 KiB are queued; [on_result] is called from
    {!dispatch} once the daemon's answer is known: with protocol version 2, a refusal as soon as it
    comes, and [Ok] once a later reply shows the cast was taken (the client sends a PING after every
    64 casts, and from a {!step} that finds nothing to read). *)

val leave : member -> unit
val suspect : member -> string list -> unit
val block_ok : member -> unit

val switch :
  ?params:string ->
  member ->
  Consort_group.Properties.t list ->
  (unit, Consort_daemon.Wire.code * string) result

val ping : t -> (unit, string) result
(** A round trip to the daemon. *)

val dispatch : t -> unit
(** Calls the callbacks of the upcalls received so far. *)

val step : ?timeout:float -> t -> bool
(** Waits up to [timeout] seconds (default 0: no wait) for input, reads what there is, and
    dispatches. [false] once the connection is closed. *)

val set_spin : int -> unit
(** [set_spin us]: a {!step} that may wait first polls the connection for up to [us] microseconds
    (at most 10000) before it sleeps: what comes within it is read without the wake-up of a sleeping
    process. [0] (the default, or the environment's [CONSORT_CLIENT_SPIN_US]) sleeps at once. *)

val run : ?until:(unit -> bool) -> ?timeout:float -> t -> unit
(** Steps until [until ()], [timeout] seconds, or the connection closes. *)

val attach : t -> Consort_engine.Loop.t -> unit
(** [attach t loop] serves the connection from [loop] (the engine's epoll loop): upcalls are
    dispatched as they arrive, with no thread and no polling, and casts queued by {!cast_async} go
    out in the same round of the loop. Blocking calls ({!cast}, {!join}, ...) still wait for their
    reply; upcalls read meanwhile are dispatched from the loop just after. The descriptor is
    unwatched when the connection closes. *)
