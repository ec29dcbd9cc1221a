(** What a replicated state machine gives {!Store.Make}, {!Wire.Make} and [Replica.Generic]: the
    key-value store's {!Machine} is one, the directory server's another. *)

module type MACHINE = sig
  type t
  type op
  type response
  type limits

  val name : string
  (** In the magic lines of the log and the snapshot: ["kv"] gives [consort-kv-wal 1]. *)

  val default_limits : limits
  val create : limits -> t
  val limits : t -> limits

  val apply : t -> client:int64 -> req:int -> op -> response * bool
  (** Deterministic; reads change nothing; a client's retried last request gets its recorded
      response again. The [bool]: the state changed (the write must be logged). *)

  val is_read : op -> bool
  (** The operation changes nothing, whatever the state ([apply] gives [false] and records nothing
      of it): the replica answers it through a read marker, from the state at the marker's place in
      the order, instead of ordering it ([fun _ -> false] orders every operation). *)

  val check : limits -> op -> (unit, string) result
  (** Refuses an operation over the limits before it is ordered. *)

  val op_size : op -> int
  (** About the bytes an operation holds in memory. *)

  val op_codec : op Consort.Codec.t
  val response_codec : response Consort.Codec.t
  val pp_response : response Fmt.t

  val codec : limits -> t Consort.Codec.t
  (** The whole state, for snapshots. *)
end

type 'op command = { client : int64; req : int; op : 'op }
