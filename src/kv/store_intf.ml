(** The signature of {!Store}, shared by its interface and implementation. *)

type 'op command = 'op Rsm.command = { client : int64; req : int; op : 'op }

type finding =
  | Torn_tail of { file : string; offset : int; dropped : int; why : string }
      (** the log's tail from [offset] ([dropped] bytes) was cut off *)
  | Temp_removed of string  (** a snapshot or log being replaced when the process stopped *)

type failure =
  | Disk_full of string  (** ENOSPC or EDQUOT: what was being written *)
  | Io_error of string  (** any other error of a write, an fsync or a rename: what and why *)
  | Wrong_dir of string
      (** the data directory belongs to another cluster than the group's replicas: which *)

exception Failed of failure
(** Raised by every step that makes data durable ({!S.sync}, {!S.promise_to}, {!S.install}) when the
    disk refuses it. After it the store refuses every later sync (a failed fsync leaves the page
    cache in an unknown state: it is never retried): the process must stop acknowledging and exit.
*)

(** How a replica starts on its data directory ([kv serve]'s [--new], [--join], neither). *)
type init =
  | Existing  (** the directory holds this replica's state (refused if empty) *)
  | New  (** an empty directory, for a replica of a brand-new cluster *)
  | Join  (** an empty directory, for a replica that replaces a lost one *)

(** What the directory's identity says of this replica. *)
type membership =
  | Fresh  (** started with [New]: no epoch started yet *)
  | Member of string  (** a replica of this cluster (its id) *)
  | Joining  (** started with [Join]: not caught up yet; no vote *)
  | Legacy  (** a directory made before identities, or a store opened without one *)

module type S = sig
  type op
  type response
  type limits
  type machine
  type cmd = op command
  type t

  val open_ :
    ?io:Consort_util.Io.t ->
    ?limits:limits ->
    ?snapshot_bytes:int ->
    ?retain:int ->
    ?identity:string * init ->
    string ->
    (t * finding list, string) result
  (** [open_ dir] opens or creates the store in [dir] and recovers it. [snapshot_bytes] (default 8
      MiB) is the log size that triggers a snapshot; [retain] (default 10,000) the number of recent
      writes kept in memory (at most 16 MiB of them) to bring a lagging replica up to date without a
      snapshot.

      [identity] ([group], [init]): the directory's file [identity] names the store type, the group
      and the cluster; a directory of another store type or group is refused with one line naming
      both. An empty directory needs [New] or [Join]; a directory with state refuses both. Without
      [identity] the file is neither read nor written ({!val-membership} is [Legacy]). *)

  val membership : t -> membership

  val set_member : t -> string -> unit
  (** [set_member t cluster] records, durably before it returns, that this replica is a member of
      [cluster] with a vote (once caught up in a view that started an epoch).
      @raise Failed on an I/O error. *)

  val close : t -> unit
  val dir : t -> string
  val machine : t -> machine

  val seq : t -> int
  (** The number of the last write applied. *)

  val chain : t -> string
  (** A digest of the whole log, chained write by write: two stores with the same {!seq} and chain
      hold the same writes. *)

  val chain_at : t -> int -> string option
  (** [chain_at t s]: the chain after write [s], if [s] is the last write or one kept in memory
      before it. *)

  val epoch : t -> int
  (** The last epoch started (0 for a new store). *)

  val history : t -> (int * int) list
  (** Epochs known, newest first, each with the sequence number after which it started. *)

  val execute : t -> cmd -> response
  (** [execute t c] applies [c]; a write that changes the state is logged with the next sequence
      number (not yet synced). *)

  val promise : t -> int
  (** The greatest epoch this store promised (see {!promise_to}); 0 at first. *)

  val promise_to : t -> int -> unit
  (** [promise_to t e] records, durably before it returns, that this replica took part in the start
      of epoch [e] (a later one must be greater). It survives snapshots. *)

  val start_epoch : t -> int -> unit
  (** [start_epoch t e] records that epoch [e] starts after {!seq}. *)

  val adopt : t -> epoch:int -> history:(int * int) list -> unit
  (** [adopt t ~epoch ~history], after {!apply_entries} brought this log up to another's ([epoch],
      [history]: its {!epoch} and {!history}): records that one's epochs newer than this one's last.
  *)

  val apply_entries : t -> (int * cmd) list -> unit
  (** [apply_entries t l] applies writes numbered after {!seq}, logging them; those numbered at or
      below {!seq} are skipped.
      @raise Invalid_argument on a gap. *)

  val entries_since : t -> int -> (int * cmd) list option
  (** [entries_since t s] is the writes after [s] kept in memory, in order, or [None] if some are
      not kept any more. *)

  val dirty : t -> bool
  (** Whether there are writes not yet synced. *)

  val sync : t -> unit
  (** [sync t] writes and fsyncs what was logged since the last sync (and perhaps takes a snapshot).
      What was logged stays pending until both the write and the fsync succeed; a write that fails
      part way is cut back off the log (no torn record is left before later ones).
      @raise Failed on an I/O error, and on every call after one. *)

  (** {2 Group commit}

      A replica under load syncs apart from its work: {!sync_start} writes what is pending to the
      log and gives the fsync that makes it durable, to run while the replica goes on (in another
      thread, or later); what is logged meanwhile waits for the next one. {!sync_finish} takes the
      outcome. Nothing written is durable before its fsync returns successfully. *)

  type fsync = {
    fd : Unix.file_descr;  (** the log, for a runner that calls fsync(2) itself (real disks) *)
    needed : bool;
        (** false when nothing was written since the last fsync started, and none runs: it may be
            skipped *)
    run : unit -> unit;  (** the fsync through the store's {!Consort_util.Io.t} *)
  }

  val sync_start : t -> fsync
  (** [sync_start t] writes what was logged since the last sync (a write that fails part way is cut
      back off the log) and is the fsync that covers it and everything written before; the log's
      descriptor stays open until every fsync started is finished.
      @raise Failed on an I/O error, and on every call after one. *)

  val sync_finish : t -> (unit, exn) result -> unit
  (** [sync_finish t outcome]: the fsync started last by {!sync_start}, in order, has returned
      [outcome]; perhaps takes a snapshot.
      @raise Failed if it failed ([Unix.Unix_error]), and on every sync after. *)

  val failed : t -> failure option
  (** The I/O error that stopped this store, if any. *)

  val snapshot : t -> string
  (** The whole state, encoded. *)

  val install : t -> string -> (unit, string) result
  (** [install t s] replaces the state by a snapshot taken by {!snapshot} (here or elsewhere),
      durably, before it returns. *)

  val cmd_codec : cmd Consort.Codec.t
  val entry_codec : (int * cmd) Consort.Codec.t
end
