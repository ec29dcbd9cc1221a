(** Client-server groups (property [Cltsvr], Ensemble's client-server management): clients that send
    requests to a group of servers and hear notifications from them, without being members of the
    servers' view. The servers' views, flushes and failure detection involve the servers only, so
    that hundreds of clients do not slow their view changes.

    {2 How it works}

    A client opens a {e session} (a random id) with one server, its {e contact}, over datagrams
    ({!Group.client_magic}) on the server's member address. The contact casts what the client sends
    into the servers' group, which must run [Total] (the same order at every server) and [Agree] (a
    cast delivered only once every server holds it; property [Cltsvr] brings both); every server
    applies those casts to the session table in that order, so the table is the same at every
    server. A client that hears nothing from its contact for [cltsvr.failover] turns to the next
    server of its list and resumes its session there.

    {2 Guarantees}

    - {b Requests.} The requests of a session are numbered 1, 2, ... by the client. Every server
      delivers request [k] of a session ([request] callback) at most once, after request [k-1] and
      only after it, in the servers' total order (with virtual synchrony: servers that go on
      together from a view delivered the same requests in it). A request is acknowledged to the
      client once its contact delivered it, which with [Agree] is once every server holds it: a
      contact that crashes right after it acknowledged leaves the request with the servers that
      stay, which deliver it too. The client sends again what is not acknowledged, to another server
      after a failover, so a request survives the crash of the server it was given to: while the
      client runs and some server stays up, every request is delivered. At most [cltsvr.window]
      requests are unacknowledged ({!Make.Client.request} refuses beyond).
    - {b Notifications.} A server casts a notification to one session ({!Make.Server.notify}) or to
      all ({!Make.Server.notify_all}); every server numbers the notifications of each session in the
      total order, so number [n] is the same notification everywhere (with [Agree], a server numbers
      one only once every server holds it, so no number the client heard is given to another
      notification after its contact crashed). The client hears them in that order, each once
      ([note] callback); after a loss or a failover it asks its contact from the first it lacks, and
      hears those the servers still keep (the last [cltsvr.backlog]); older ones are told lost
      ([lost n]), never skipped silently.
    - {b Bounded state.} The servers hold at most [cltsvr.max_clients] sessions (an open beyond is
      refused: {!Busy_refused}), each with its two counters and at most [cltsvr.backlog]
      notifications; a server keeps, per client it is the contact of, an address and two numbers. A
      session no server has heard from for [cltsvr.client_timeout] (the client crashed or went away)
      is forgotten by every server, at the same point of the total order, within twice that time; a
      client that comes back after it is told its session expired ({!Expired_session}) and must open
      a new one; so a request is never delivered twice, even across an expiry. A client's [Bye]
      forgets its session at once.
    - Datagrams that do not decode, of another group or of another session are counted and dropped;
      nothing a client sends makes a server allocate beyond the bounds above.

    Limits: a server that joins the servers later (a restarted one) must get the session table by
    state transfer ([Xfer], {!Make.Server.take_state}), else it has none and its table disagrees; a
    partition of the servers that heals merges two session tables that may disagree. With [Auth]
    (and [Rekey]) the clients seal with the group's secret, as the servers' side channel does:
    whoever lacks it can open no session. *)

module Param : sig
  val max_clients : string
  (** ["cltsvr.max_clients"], default 1024 *)

  val backlog : string
  (** ["cltsvr.backlog"], default 64 notifications per session *)

  val window : string
  (** ["cltsvr.window"], default 32 requests not yet acknowledged *)

  val client_timeout : string
  (** ["cltsvr.client_timeout"], default 10 s *)

  val failover : string
  (** ["cltsvr.failover"], default 1 s *)

  val retry : string
  (** ["cltsvr.retry"], default 200 ms: resends, keepalives, checks *)

  val max_request : string
  (** ["cltsvr.max_request"], default 64 KiB *)
end

type refusal = Busy | Expired

(** Between a client and a server. *)
type wire =
  | Hello of { group : string; session : string; resumed : bool; heard : int }
  | Request of { group : string; session : string; seq : int; payload : string }
  | Bye of { group : string; session : string }
  | Welcome of { session : string; upto : int; notes : int }
  | Ack of { session : string; upto : int }
  | Note of { session : string; n : int; payload : string }
  | Gap of { session : string; first : int; last : int }
  | Refused of { session : string; why : refusal }

val wire_codec : wire Consort.Codec.t

(** Among the servers, as casts of their group. *)
type env =
  | Open of { session : string }
  | Req of { session : string; seq : int; payload : string }
  | Notify of { session : string option; payload : string }
  | Alive of { sessions : string list }  (** the sessions a server hears from, cast periodically *)
  | Forget of { session : string; why : string; mentions : int option }
      (** forget the session, unless the casts about it delivered so far are no longer [mentions]
          (then it was heard of since) *)

val env_codec : env Consort.Codec.t

type error =
  | Flow_control  (** the window of requests, or the group's flow control, is full *)
  | Too_big of { size : int; max : int }
  | Unknown_client of string
  | Closed
  | Not_running

val pp_error : error Fmt.t

type attach_error =
  | No_total of string  (** the servers' stack (named) has no [Total] *)
  | No_agree of string  (** the servers' stack (named) has no [Agree] (safe delivery) *)

val pp_attach_error : attach_error Fmt.t

(** What a client hears of its session. *)
type status =
  | Connected of string  (** a server (its address) welcomed the session *)
  | Busy_refused  (** the servers hold [cltsvr.max_clients] sessions; the client asks again *)
  | Expired_session  (** the servers forgot the session: the client is closed *)
  | Failing_over of string  (** no answer from the contact: turning to this server *)

val pp_status : status Fmt.t

module Make (T : Consort.Transport.S) : sig
  module Server : sig
    type t

    type callbacks = {
      request : client:string -> seq:int -> string -> unit;
          (** request [seq] of session [client] *)
      opened : client:string -> unit;
      closed : client:string -> why:string -> unit;  (** forgotten: ["silent"] or ["said bye"] *)
      noted : client:string -> n:int -> string -> unit;
          (** notification [n] of session [client] was numbered here *)
      cast : origin:string -> string -> unit;  (** the application's own casts ({!val-cast}) *)
    }

    val create : ?params:Consort.Params.t -> T.t -> group:string -> callbacks -> t

    val callbacks : t -> Group.callbacks -> Group.callbacks
    (** The callbacks to give {!Group.Make.join}: the group's casts go through the server first. *)

    val attach : t -> Group.Make(T).t -> (unit, attach_error) result
    (** After the join: the member's address serves clients. *)

    val cast : t -> string -> (unit, error) result
    (** An application cast among the servers (delivered by [cast]). *)

    val notify : t -> client:string -> string -> (unit, error) result
    val notify_all : t -> string -> (unit, error) result
    val take_state : t -> string

    val install_state : t -> string -> unit
    (** The session table, for state transfer (property [Xfer]): give them to {!Group.Make.join}
        ([take_state], [install_state]; composed with the application's own state, if any), so that
        a server that joins the servers later (a restarted one) gets the table before any cast of
        its view. *)

    val stop : t -> unit
    val sessions : t -> int
    val clients : t -> string list

    val upto : t -> string -> int option
    (** Requests of this session delivered here. *)

    val contacts : t -> int
    val counters : t -> (string * int) list
  end

  module Client : sig
    type t

    type callbacks = {
      note : string -> unit;  (** the next notification *)
      lost : int -> unit;
          (** that many notifications, next in order, are lost (out of the backlog) *)
      status : status -> unit;
    }

    val connect :
      ?params:Consort.Params.t ->
      ?seed:int ->
      T.t ->
      group:string ->
      addr:string ->
      servers:string list ->
      callbacks ->
      (t, string) result
    (** [connect tr ~group ~addr ~servers cb] opens [addr] and a session with one of [servers] (the
        servers' member addresses). [Error] is one line. *)

    val request : t -> string -> (int, error) result
    (** The request's number. *)

    val close : t -> unit
    (** Says bye: the servers forget the session. *)

    val crash : t -> unit
    (** Stops at once, telling no one (for tests). *)

    val session : t -> string
    val acked : t -> int
    val heard : t -> int
    val outstanding : t -> int
    val server : t -> string
    val is_closed : t -> bool
    val failovers : t -> int
  end
end
