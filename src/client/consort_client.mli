(** A client of consortd: process groups through the daemon, with the shape of the in-process
    [Consort_group.Group] API (callbacks, view and refusals of the same shape, defined here: a
    client links the daemon's wire format, not the group runtime).

    A connection is single-threaded and blocking: {!join}, {!val-cast}, {!val-send}, {!leave},
    {!suspect} and {!switch} write a request and wait for its reply; upcalls that arrive meanwhile
    are queued, and the callbacks are called only from {!dispatch}, {!step} and {!run}, never from
    inside another call. {!cast_async} does not wait (for throughput): its result comes later,
    through [on_result], from {!dispatch}. *)

type view_info = {
  vid : string;  (** ["LTIME:COORDINATOR"], the same at every member *)
  ltime : int;  (** increases at each view change *)
  members : string array;  (** member ids in rank order *)
  rank : int;  (** this member's rank *)
  coordinator : string;
  joined : string list;  (** members not in this member's previous view *)
  left : string list;  (** members of the previous view not in this one *)
  why : (string * string) list;  (** for each member of [left], why, as the daemon says it *)
}
(** A view as the application sees it (the fields of [Consort_group.Group.view_info]). *)

val pp_view_info : view_info Fmt.t

(** Why a message was refused (the daemon's refusal, as [error] says it). *)
type error =
  | Flow_control  (** flow control is full: wait for [flow false] *)
  | Too_big of { size : int; max : int }  (** over the largest message the group's stack carries *)
  | Not_member of string  (** [send]: the destination is not in the view *)
  | Leaving  (** {!leave} was called *)
  | Exited  (** this member has left the group, or the connection closed *)
  | Not_primary of string  (** the member's view is not primary (the string says why) *)

val pp_error : error Fmt.t

type callbacks = {
  view : view_info -> unit;  (** a view was installed; sending may resume *)
  cast : origin:string -> string -> unit;  (** a cast was delivered *)
  send : origin:string -> string -> unit;  (** a point-to-point message was delivered *)
  block : unit -> unit;  (** a view change started *)
  flow : bool -> unit;  (** [flow true]: stop sending; [flow false]: go on *)
  exit : unit -> unit;  (** this member has left the group *)
}

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
  ?props:string ->
  ?params:string ->
  ?peers:string list ->
  ?on_sent:(vid:string -> [ `Cast | `Send of string ] -> string -> unit) ->
  ?on_lost:([ `Cast | `Send of string ] -> string -> string -> unit) ->
  t ->
  group:string ->
  callbacks ->
  (member, join_error) result
(** [join conn ~group cb] joins [group] on the daemon ([props] the property set as [consort --props]
    writes it, ["vsync,Total"], checked by the daemon (a wrong one is [Refused] with [Bad_props]),
    default ["vsync"]; [params] ["NAME=VALUE,..."]; [peers] where to look for the other members,
    default the daemon's). [on_sent] and [on_lost] are [Consort_group.Group.Make.join]'s, reported
    by the daemon. *)

val me : member -> string

val view : member -> view_info
(** The last view dispatched (a view of this member alone before the first). *)

val max_message : member -> int
val has_exited : member -> bool
val cast : member -> string -> (unit, error) result
val send : member -> string -> string -> (unit, error) result

val cast_async : ?on_result:((unit, error) result -> unit) -> member -> string -> unit
(** Queues the cast without waiting for its reply: queued casts go out together at the next {!step}
    (or {!run}, or any other request), or once 64 KiB are queued; [on_result] is called from
    {!dispatch} once the daemon's answer is known: with protocol version 2, a refusal as soon as it
    comes, and [Ok] once a later reply shows the cast was taken (the client sends a PING after every
    64 casts, and from a {!step} that finds nothing to read). *)

val leave : member -> unit
val suspect : member -> string list -> unit
val block_ok : member -> unit

val switch : ?params:string -> member -> string -> (unit, Consort_daemon.Wire.code * string) result
(** [switch m props] switches [m]'s group to the stack of [props] (written as {!join}'s). *)

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
    out in the same round of the loop. Blocking calls ({!val-cast}, {!join}, ...) still wait for
    their reply; upcalls read meanwhile are dispatched from the loop just after. The descriptor is
    unwatched when the connection closes. *)
