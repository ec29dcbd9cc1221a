(** A small server of requests on a listening socket, driven by a {!Consort_engine.Loop}: the
    control socket of a member and its metrics port. Everything a client can make it hold is
    bounded: connections (beyond the limit a new one is closed at once), the bytes of a request
    (beyond [max_request] the connection gets an error and is closed), and time (a connection idle
    for [idle] is closed). Answers are written with a bound on time too: a client that does not read
    them is dropped. *)

type framing =
  | Lines  (** each request is a line; each answer a line; the connection stays open *)
  | Http  (** one HTTP/1.x request, up to its blank line; one answer; then closed *)

type t

val listen :
  ?max_connections:int ->
  ?max_request:int ->
  ?idle:float ->
  ?later:(string -> ((string -> unit) -> unit) option) ->
  Consort_engine.Loop.t ->
  Unix.sockaddr ->
  framing ->
  (string -> string) ->
  (t, string) result
(** [listen loop addr framing answer] listens on [addr] (a Unix socket path is created with mode
    0600 and refused if a server answers there; a stale one is replaced) and answers each request
    with [answer request] ([request] without its line end; for [Http], the request line and
    headers). Defaults: 32 connections, 64 KiB per request, 30 s idle. An exception from [answer] is
    logged and the connection closed. With [Lines], a request for which [later request] is [Some f]
    is answered when [f] calls its argument (once; later calls are ignored), and the connection's
    next requests wait until then. *)

val address : t -> Unix.sockaddr
(** The address really bound (the port chosen for port 0). *)

val connections : t -> int
(** Connections open now. *)

val refused : t -> int
(** Connections closed at once for being over the limit, and requests over the size bound. *)

val close : t -> unit
(** Stops listening, closes every connection, removes a Unix socket file. *)

val request : ?timeout:float -> Unix.sockaddr -> string -> (string, string) result
(** [request addr line] connects, sends [line] and a newline, and reads the answer line (blocking,
    at most [timeout] seconds, default 5): the client side of [Lines]. Errors are one line. *)
