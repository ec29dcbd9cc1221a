(** Status queries of the group runtime ({!Group.Make}): what this member answers when another
    member of its view asks for its status (the application's status handler's document, or the view
    as the runtime knows it; at most {!max_answers} answers a second; a document over
    {!Side.max_status} bytes is replaced by an error), and the queries this member has out (at most
    {!max_queries}, each waiting for the other members of the view it was asked in, finished by
    their answers or by its timeout). The runtime checks who asks and where the answer goes; this
    module keeps the counts and the queries. ['timer] is the transport's timer. *)

type 'timer t

val max_queries : int
val max_answers : int
val create : unit -> 'timer t

val set_handler : 'timer t -> (unit -> string) -> unit
(** What this member answers from now on. *)

val json_string : string -> string
(** A JSON string literal of [s]. *)

val mine : 'timer t -> default:(unit -> string) -> string
(** This member's status: the handler's document ([default ()] when there is no handler or it
    raises), or an error document if it is over {!Side.max_status} bytes. *)

val may_answer : 'timer t -> now:Consort.Time.t -> bool
(** Whether one more answer may go out in the second [now] falls in; if so it is counted. *)

type 'timer query

type outcome = ((string * (string, string) result) list, string) result
(** Every member of the view with its answer, or the reason it has none. *)

val refusal : 'timer t -> string option
(** Why no other query may start now: {!max_queries} are out. *)

val start :
  'timer t ->
  nonce:string ->
  vid:string ->
  members:string array ->
  me:string * string ->
  timeout:Consort.Time.t ->
  (outcome -> unit) ->
  'timer query
(** A query of the members of view [vid] under [nonce], [me] (this member and its own status)
    answered already (after {!refusal} said none). *)

val waiting : 'timer query -> string list
(** The members whose answer the query still waits for. *)

val set_timer : 'timer query -> 'timer -> unit
(** The query's timeout timer, cancelled when it finishes first. *)

val finish : 'timer t -> cancel:('timer -> unit) -> 'timer query -> unit
(** Ends the query (if still out): its continuation gets every answer, and for each member that did
    not answer "no answer within" its timeout. *)

val answer :
  'timer t -> cancel:('timer -> unit) -> vid:string -> nonce:string -> eid:string -> string -> bool
(** An answer of member [eid] to the query under [nonce] in view [vid]: [false] when no query waits
    for it (the runtime counts it as garbage). The query finishes with its last answer. *)

val ask :
  'timer t ->
  nonce:string ->
  vid:string ->
  members:string array ->
  me:string * string ->
  timeout:Consort.Time.t ->
  cancel:('timer -> unit) ->
  at:((unit -> unit) -> 'timer) ->
  ask:(int -> string -> unit) ->
  (outcome -> unit) ->
  unit
(** A query ({!start}) of the members of view [vid] (by rank), this member ([fst me]) answered
    already: finished at once if no other member is in the view, else its timeout armed
    ([at finish]) and [ask rank eid] called for each other member, in rank order. *)

val default :
  group:string ->
  me:string ->
  vid:string ->
  members:string array ->
  rank:int ->
  blocked:bool ->
  string
(** What a member whose application reports nothing answers: the view as the runtime knows it, a
    JSON document ([group], [me], [view], [members], [rank], [blocked]). *)
