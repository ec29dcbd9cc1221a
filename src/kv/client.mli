(** A client of the replicated store over TCP, with blocking calls.

    A call tries the servers in turn: a server that cannot be reached or that refuses (no quorum,
    busy) is skipped; when the connection is lost or the answer is late after the request went out,
    the same request (same client id and request number) is sent to the next server, so that a write
    takes effect at most once. After each round of every server it pauses 0.5 s (a view change may
    be under way), unless the deadline would then leave no time: a call that every server refused
    (no quorum, disk full) is then answered [Refused] at once, never [Unknown] for a timeout it ran
    into itself. *)

type t

val create : ?timeout:float -> string list -> (t, string) result
(** [create servers] is a client with a fresh random id. [timeout] (default 15 s) bounds each call.
    [Error] if an address does not parse. *)

val call : t -> Op.t -> Wire.outcome
val close : t -> unit

(** {1 Pipelining} *)

type item =
  | Op of Op.t * (Wire.outcome -> unit)  (** a request, and what to do with its outcome *)
  | Note of (unit -> unit)  (** nothing to send: called when its turn comes *)

val max_depth : int
(** {!Server.max_pipeline} (32): what a replica takes under way on one connection. *)

val pipeline : ?depth:int -> t -> (unit -> item option) -> unit
(** [pipeline t next] sends the requests [next] gives on one connection without waiting for their
    answers, with at most [depth] (default 8, between 1 and {!max_depth}) items taken from [next]
    and not yet handed back; it calls each item's function once, in the order [next] gave them
    (answers that come out of order wait for the ones before), and returns once [next] gave [None]
    and every item is handed back. Answers are matched to requests by request number; each request
    under way has a client id of its own (a replica's deduplication table keeps one request per
    client). A replica keeps a connection's order: a request is ordered after every write sent
    before it on the connection (so a get sees the put pipelined before it).

    Errors are per request, and nothing is retried: a refusal is [Refused]; when the connection is
    lost or a request's answer is later than [timeout] after it was sent, every request under way on
    it is [Unknown] (it may or may not have taken effect) and the items after it go to the next
    server; a request that no server took (each tried once) is [Refused].

    Writes to a connection the server closed raise SIGPIPE: the caller ignores it (the command line
    does). *)
