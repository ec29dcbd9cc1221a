(** The file server's operations from the client side, over any blocking [trans] (the RPC's, or a
    direct call to {!Fs_server.handle} in tests).

    Large files travel in chunks: [put] creates an uncommitted file with the first chunk, appends
    the others with [BS_MODIFY], then commits it with [BS_COMMIT] and the safety flag; [get] reads
    chunk after chunk. An append to an uncommitted file is idempotent (the same bytes at the same
    offset) and so is a commit, so they may be resent after a lost reply; a create is not, and is
    never resent. (An append that also committed would not be: resent to a file its first copy
    committed, it would make a new file.) A file that fits in one chunk is created committed in one
    request. *)

open Consort_cap

type trans = idempotent:bool -> Header.t -> string -> (Header.t * string, Rpc_error.t) result

type error =
  [ `Refused of Status.t  (** the server said no: bad capability, too few rights, not found, ... *)
  | `Rpc of Rpc_error.t  (** no reply: see [Rpc_error.outcome] *)
  | `Bad_reply of string  (** the server's reply makes no sense *)
  | `Interrupted of int * bool * Rpc_error.t
    (** a {!put} cut short after this many bytes were sent, while the file was still uncommitted
        ([false]) or during the request that commits it ([true]: it may have been stored) *)
  | `Cut of int * Rpc_error.t
    (** a {!get} whose server became unreachable after this many of the file's bytes were given to
        [output]: the output is incomplete *) ]

val pp_error : error Fmt.t

val outcome : error -> [ `Refused | `Unknown ]
(** [`Refused] when the request was certainly not carried out (the server refused it, or it never
    reached a server), [`Unknown] otherwise (an interrupted {!put} among them: its uncommitted file
    is left to age away on the server, or it may even have been committed; and a {!get} cut short).
*)

val chunk : int
(** 1 MiB. *)

val put :
  trans ->
  server:Cap.t ->
  ?chunk:int ->
  ?progress:(int -> unit) ->
  size:int ->
  (bytes -> int -> int -> int) ->
  (Cap.t, error) result
(** [put trans ~server ~size input] stores [size] bytes read with [input buf off len] (which returns
    how many it read, 0 at the end) as a committed, safe file and is its owner capability, sending
    [chunk] bytes (default {!chunk}) per request. [progress n] is told the bytes sent so far. *)

val get :
  trans -> ?progress:(int -> int -> unit) -> Cap.t -> (string -> unit) -> (int, error) result
(** [get trans cap output] reads the whole file, giving its bytes to [output] in order, and is its
    size. [progress done total]. *)

type async_trans =
  idempotent:bool -> Header.t -> string -> ((Header.t * string, Rpc_error.t) result -> unit) -> unit
(** A [trans] that answers through a callback, such as [Rpc.Make(T).trans]. *)

val get_pipelined :
  async_trans array ->
  run:((unit -> bool) -> unit) ->
  ?read_size:int ->
  ?progress:(int -> int -> unit) ->
  Cap.t ->
  (string -> unit) ->
  (int, error) result
(** [get_pipelined lanes ~run cap output] is {!get} with one read outstanding on each lane (give
    each lane its own session, such as its own RPC node, so that the server works on the next read
    while the client takes in the last); [run cond] must run the lanes' event loop until [cond ()].
    Reads are of [read_size] bytes (default and at most {!Fs_proto.max_read}), given to [output] in
    order; at most one per lane is held. *)

val size : trans -> Cap.t -> (int, error) result
val read : trans -> Cap.t -> off:int -> len:int -> (string, error) result

val restrict : trans -> Cap.t -> Rights.t -> (Cap.t, error) result
(** [restrict trans cap mask]: locally for an owner capability, by [std_restrict] otherwise. *)

val revoke : trans -> Cap.t -> Cap.Secret.t -> (Cap.t, error) result
(** [revoke trans cap secret] gives [cap]'s object (a file, or the server: object 0) the new
    [secret], with [BS_REVOKE]; [cap] needs every right. Every capability made with the old secret
    fails from then on; the result is the new owner capability, [Cap.owner] of [secret]. Sent again
    after an unknown outcome, it is answered as done. *)

val destroy : trans -> Cap.t -> (unit, error) result
val info : trans -> Cap.t -> (string, error) result
val touch : trans -> Cap.t -> (unit, error) result
val age : trans -> Cap.t -> (unit, error) result
val status : trans -> Cap.t -> (string, error) result
