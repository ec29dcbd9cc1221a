(** The live web console of a member or of consortd: one self-contained page (inline CSS, JS and
    SVG; nothing fetched from elsewhere, so it works offline) and the JSON it polls.

    {v
    GET /              the page
    GET /api/status    {"node":S,"pid":N,"time":T,"groups":[GROUP,...]}
    v}

    where GROUP is what [consort status --json] says of a member (group, me, view, ltime,
    coordinator, members, rank, blocked, flow_blocked, seal) plus [counters] (by layer, the seal's
    drop counters included), [quorum] (null without Primary), [roles] and [history] (the last views,
    oldest first, each with the reason of every change). Read-only: any other method is answered
    405. Bounded as {!Serve.listen} is: 16 connections, 8 KiB a request, 10 s idle. *)

(** {1 View history} *)

type change = { member : string; what : string }
(** ["joined"], ["merged"], ["left"], or ["excluded: "] and the reason ([silent for 5.0 s]). *)

type entry = {
  t : float;  (** Unix time the view was installed here *)
  vid : string;
  ltime : int;
  members : string list;
  coordinator : string;
  changes : change list;
}

type history
(** The last views, at most [max] of them: the oldest is dropped when a new one comes. *)

val history : ?max:int -> unit -> history
(** Default 64. *)

val default_max : int

val changes : joined:string list -> left:string list -> why:(string * string) list -> change list
(** The changes of a view as {!Consort_group.Group.view_info} gives them: each member of [left] with
    its reason from [why] (["left"] when there is none); each member of [joined] as ["joined"], or
    as ["merged"] when two or more came at once (a view of several merged in). *)

val record : history -> entry -> unit

val entries : history -> entry list
(** Oldest first. *)

val max : history -> int
val history_json : history -> Yojson.Safe.t

(** {1 Rates} *)

type rates
(** The group's counters of messages sent and delivered, sampled (once a second), the last [span]
    intervals kept: what the page's live charts draw, from its first load. *)

val rates : ?span:int -> unit -> rates
(** Default 60. *)

val sample : rates -> t:float -> sent:int -> delivered:int -> unit
(** [sample r ~t ~sent ~delivered]: the counters (monotonic) at Unix time [t]. *)

val rates_json : rates -> Yojson.Safe.t
(** [[{"t":T,"sent":PER_S,"delivered":PER_S},...]], oldest first: one per interval between two
    samples. *)

(** {1 A group's object} *)

val group_json :
  status:(string * Yojson.Safe.t) list ->
  counters:(string * (string * int) list) list ->
  quorum:Yojson.Safe.t ->
  coordinator:string ->
  sequencer:string option ->
  token_holder:string option ->
  history ->
  rates ->
  Yojson.Safe.t
(** A GROUP object of [/api/status]: the member's [status] fields, then [counters], [quorum],
    [roles] (the coordinator, and the sequencer and the token holder where known, else null),
    [history], [history_max] and [rates]. *)

(** {1 Serving} *)

val page : string
(** The page. *)

val check_address : flag:string -> public:bool -> string -> (unit, string) result
(** [check_address ~flag ~public addr]: an address other than loopback ([127.0.0.0/8], [::1],
    [localhost]) is refused unless [public], with a one-line reason naming [flag]: the console names
    the groups and members, which Privacy hides on the wire. *)

val serve :
  ?max_connections:int ->
  ?idle:float ->
  Consort_engine.Loop.t ->
  Unix.sockaddr ->
  node:string ->
  (unit -> Yojson.Safe.t list) ->
  (Serve.t, string) result
(** [serve loop addr ~node groups] answers [GET /] with {!page} and [GET /api/status] with
    [groups ()] (each a GROUP object as above). *)

val answer : node:string -> (unit -> Yojson.Safe.t list) -> string -> string
(** The HTTP answer to one request (its request line and headers): what {!serve} does. *)
