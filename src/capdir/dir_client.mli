(** A client of the directory server over any blocking capability RPC ([trans]): each call carries
    this client's number and a request number, so a request resent to another replica after a crash
    takes effect once. *)

type trans =
  idempotent:bool ->
  Consort_cap.Header.t ->
  string ->
  (Consort_cap.Header.t * string, Consort_cap.Rpc_error.t) result

type error =
  [ `Refused of string  (** certainly not done *)
  | `Unknown of string  (** may have been done *)
  | `Dir of Dir.error  (** the directory's answer *) ]

val pp_error : error Fmt.t

type t

val create : ?client:int64 -> trans -> t
(** A random client number unless [client]. *)

val trans : t -> trans
val call : t -> Dir.op -> (Dir.response, error) result
val lookup : t -> Consort_cap.Cap.t -> string -> (Dir.entry list, error) result

val resolve : t -> Consort_cap.Cap.t -> string -> (Consort_cap.Cap.t, error Path.error) result
(** [resolve t root path]: {!Path.resolve} through this server. *)
