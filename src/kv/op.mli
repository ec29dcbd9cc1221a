(** Key-value operations, their responses, and their limits. *)

type t =
  | Get of string
  | Put of string * string  (** key, value *)
  | Del of string
  | Cas of { key : string; expect : string; set : string }
      (** put [set] if the value is [expect] *)

type response =
  | Ok  (** a put, a delete of a present key, a cas that took place *)
  | Value of string  (** a get of a present key *)
  | Not_found  (** a get or delete of an absent key *)
  | Cas_failed  (** a cas on an absent key or another value *)
  | Error of string  (** refused (a limit), certainly without effect *)

val key : t -> string
val is_read : t -> bool

val pp : t Fmt.t
(** The command as [consort kv shell] reads it: [put KEY VALUE]. *)

val pp_response : response Fmt.t
(** The result line of the CLI: [ok], [value V], [not-found], [cas-failed], [error: R]. *)

val codec : t Consort.Codec.t
val response_codec : response Consort.Codec.t

type limits = {
  max_key : int;  (** bytes in a key *)
  max_value : int;  (** bytes in a value *)
  max_keys : int;  (** keys held *)
  max_bytes : int;  (** bytes of keys and values held *)
  max_clients : int;  (** clients remembered for deduplication; the oldest is forgotten first *)
}

val default_limits : limits
(** Keys up to 1 KiB, values up to 64 KiB, 1,000,000 keys, 32 MiB, 100,000 clients. A state transfer
    may send the whole state in one cast, so the state must stay under the group's largest message
    ([frag.max_message], 64 MiB). *)

val check : limits -> t -> (unit, string) result
(** [check l op] refuses an operation whose key or values are over the limits. *)

val to_spec : t -> Consort_spec.Linearizable.op

val response_to_spec : response -> Consort_spec.Linearizable.response option
(** [None] for [Error]. *)

val parse : string list -> (t, string) result
(** [parse ["put"; "k"; "v"]]: the words of a command. *)
