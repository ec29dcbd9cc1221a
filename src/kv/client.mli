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
