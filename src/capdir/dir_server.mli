(** A directory replica as a process: the replicated state machine ({!Dir.Rsm} over the key-value
    store's replication) on the group over kernel UDP, and the capability RPC
    ({!Consort_cap.Rpc_udp}) serving the directory's port, on one event loop. Every replica holds
    the same port key, so a client reaches whichever answers its locate; every request is ordered in
    the group and answered once every member has it on disk.

    The server and root secrets are derived from the port key (HMAC-SHA256), so that every replica
    starts from the same state: the root capability is printed at start. *)

module Store :
  Consort_kv.Store.S
    with type op = Dir.op
     and type response = Dir.response
     and type limits = Dir.limits
     and type machine = Dir.t

val dir_op : int
(** The RPC command: the request's data is [client, request number, operation] ({!request_codec}),
    the reply's an {!outcome}. *)

type outcome = Dir.response Consort_kv.Wire.outcome_

val request_codec : (int64 * int * Dir.op) Consort.Codec.t
val outcome_codec : outcome Consort.Codec.t
val limits_of_key : Consort_cap.Port.Key.t -> Dir.limits
val root_of_key : Consort_cap.Port.Key.t -> Consort_cap.Cap.t
val server_of_key : Consort_cap.Port.Key.t -> Consort_cap.Cap.t

val reply_of_request :
  (Dir.op Consort_kv.Wire.request_ -> (outcome -> unit) -> unit) ->
  string ->
  (Consort_cap.Header.t -> string -> unit) ->
  unit
(** [reply_of_request submit data k]: decodes a request, submits it, and calls [k] with the reply; a
    request that does not decode is [STD_ARGBAD] with one line saying why. *)

type config = {
  data : string;  (** the replica's store *)
  key : Consort_cap.Port.Key.t;  (** the directory's port key, the same at every replica *)
  bind : string;  (** the RPC's UDP address *)
  group_bind : string;  (** this replica's group address *)
  peers : string list;  (** the other replicas' group addresses *)
  params : Consort.Params.t;
  init : Consort_kv.Store.init;
      (** [New] for a replica of a brand-new directory cluster, [Join] for one that replaces a lost
          replica, both on an empty data directory; [Existing] otherwise ([--new], [--join],
          neither) *)
}

val default_params : string

val kind : string
(** ["capdir"]: the kind a replica's data directory has in its identity ({!Consort_datadir}). *)

val service : Consort_cap.Port.Key.t -> string
(** The directory service a key serves, ["capdir-PORT"]: the replicas' group, and the service their
    data directories' identity names. *)

val looks_like : string -> bool
(** [looks_like dir]: [dir] has a replica's store (a write-ahead log) written before identities
    existed; {!run} adopts it. *)

val run : ?on_ready:(unit -> unit) -> config -> (unit, string) result
(** Serves until SIGTERM or SIGINT, then leaves the group. The data directory's identity
    ({!Consort_datadir}: kind {!kind}, service {!service}) is checked first, minted in a new
    directory; another service's directory is refused. Then the store's own identity (the key-value
    store's: {!Consort_kv.Store.S.open_} with the group {!service} and [config.init]): an empty
    directory needs [New] or [Join], a directory with state refuses both, and the replication
    ({!Consort_kv.Replica.Generic}) gives no vote to a joining replica until it has caught up in a
    view that started an epoch, and stops a replica whose directory names another cluster than a
    quorum of the replicas. Fail-stop: a callback that raises (a write that failed: a full disk, an
    I/O error) stops the replica at once; it leaves the group and [Error] says why. *)

val init :
  data:string -> key:Consort_cap.Port.Key.t -> Consort_kv.Store.init -> (unit, string) result
(** [init ~data ~key how]: the checks and the identity {!run} writes at its first start with
    [config.init = how], without serving: a later [run] with [Existing] starts on it (for a command
    line that never changes, as a boot server's declaration). *)
