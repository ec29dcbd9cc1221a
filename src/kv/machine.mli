(** The replicated state machine: a map from keys to values, and the last request of each client
    with its response, so that a retried write takes effect once. Deterministic: replicas that apply
    the same writes in the same order hold the same state. *)

type t

val create : Op.limits -> t
val limits : t -> Op.limits

val apply : t -> client:int64 -> req:int -> Op.t -> Op.response * bool
(** [apply t ~client ~req op] carries out [op]. Reads change nothing. For a write, the [bool] is
    [true] when the state changed (the write must be logged): [false] for a retry of the client's
    last request (its recorded response is given again) or an older one ([Error]). Limits reached
    give [Error] responses, recorded like others. *)

val read : t -> string -> string option
val keys : t -> int
val bytes : t -> int
val clients : t -> int

val codec : Op.limits -> t Consort.Codec.t
(** The whole state, for snapshots. *)

val digest : t -> string
(** A hash of the map and the deduplication table (for tests). *)

val bindings : t -> (string * string) list
(** Sorted by key. *)

(** This machine, for {!Store.Make}, {!Wire.Make} and [Replica.Generic]. *)
module Rsm :
  Rsm.MACHINE
    with type t = t
     and type op = Op.t
     and type response = Op.response
     and type limits = Op.limits
