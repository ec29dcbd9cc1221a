(** A replica's state on disk: a write-ahead log and snapshots.

    Directory layout:
    - [wal]: a magic line, then records, each
      [length (4 bytes, big endian) | MD5 of the payload (8 bytes) | payload]: a write (its sequence
      number, client, request number and operation), or the start of an epoch (a primary view of the
      group whose members agreed on the state);
    - [snapshot]: the same framing around the whole state (sequence number, epoch, epoch history,
      map, deduplication table), replaced atomically (written to [snapshot.tmp], synced, renamed,
      the directory synced);
    - [lock]: held (with [lockf]) while a process has the store open;
    - [identity] (when opened with one): [consort-data-dir 1], then the lines [store NAME],
      [group NAME] and [member CLUSTER-ID] (or [member fresh], [member joining]), replaced
      atomically.

    Writes are applied to the state machine at once and buffered; {!sync} writes them and fsyncs the
    log: a reply may go out only after it. On an I/O error (a full disk, EIO, a failed fsync) the
    buffer is kept, a partly written record is cut back off the log, and the store raises {!Failed}
    then and at every later sync: the replica stops. When the log grows past [snapshot_bytes],
    {!sync} writes a snapshot and starts an empty log.

    On {!open_}, a record that is cut short, fails its checksum or does not decode ends the log: it
    and everything after it are the torn tail, cut off and reported in one {!finding}. A snapshot
    that fails its checks is never used: {!open_} refuses the directory. *)

type 'op command = 'op Rsm.command = { client : int64; req : int; op : 'op }

type finding = Store_intf.finding =
  | Torn_tail of { file : string; offset : int; dropped : int; why : string }
      (** the log's tail from [offset] ([dropped] bytes) was cut off *)
  | Temp_removed of string  (** a snapshot or log being replaced when the process stopped *)

type failure = Store_intf.failure =
  | Disk_full of string  (** ENOSPC or EDQUOT *)
  | Io_error of string  (** any other error of a write, an fsync or a rename *)
  | Wrong_dir of string  (** the directory belongs to another cluster than the group's replicas *)

type init = Store_intf.init = Existing | New | Join
type membership = Store_intf.membership = Fresh | Member of string | Joining | Legacy

exception Failed of failure
(** = {!Store_intf.Failed}: the disk refused a step; see {!S.sync}. *)

val pp_finding : finding Fmt.t

val pp_failure : failure Fmt.t
(** [disk full (...)] or [io-error: ...]. *)

val failure_of_unix : string -> Unix.error -> failure
(** [failure_of_unix what e]: ENOSPC and EDQUOT are a full disk, the rest I/O errors. *)

val is_damage : finding -> bool

module type S = Store_intf.S
(** A store for any replicated state machine ({!Rsm.MACHINE}); the key-value store's is
    [Make (Machine.Rsm)], included below. *)

module Make (M : Rsm.MACHINE) :
  S
    with type op = M.op
     and type response = M.response
     and type limits = M.limits
     and type machine = M.t

include
  S
    with type op = Op.t
     and type response = Op.response
     and type limits = Op.limits
     and type machine = Machine.t
