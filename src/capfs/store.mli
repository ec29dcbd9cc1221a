(** An immutable file store with the semantics of Amoeba's Bullet file server.

    A file is created, possibly changed while it is {e uncommitted}, then {e committed}, after which
    it never changes again. Only committed files can be read. Changing a committed file ([modify],
    [insert], [delete]) gives a new uncommitted file, a copy with the change; changing an
    uncommitted file changes it in place. Every operation that writes takes two flags: [commit]
    commits the result, [safe] (Bullet's safety flag) makes the operation return only when the
    committed file is on the disk.

    Uncommitted files live in memory, bounded in number and bytes, and are destroyed when they stay
    idle longer than [idle_timeout]. Committed files live in a directory:
    - [blobs/HASH]: the bytes of a file, named by their SHA-256; files with the same bytes share one
      blob;
    - [meta/OBJ]: one record per committed file (object number, secret, blob hash, size), ending
      with the SHA-256 of the record;
    - [server]: the secret of the server object (object 0);
    - [tmp/]: files being written; [corrupt/]: what recovery set aside.

    A commit writes into [tmp/], then (with [safe]) fsyncs the file, renames it into place and
    fsyncs the directory, first the blob, then the record. On {!open_}, recovery removes leftovers
    from [tmp/], checks every record and every blob against its checksum, moves what fails into
    [corrupt/] (it is never served and never deleted) and reports each such file in one {!finding}.

    Each object has a secret (32 bytes from the random source) that the server uses to check
    capabilities; {!revoke} changes it. The store does not check capabilities itself.

    A store is used by one thread. [open_] takes a lock on the directory so that two processes never
    share one. *)

type obj = int
(** An object number. Files are numbered from 1; 0 is the server object. *)

type error =
  [ `Not_found  (** no such file (never was, destroyed, aged away) *)
  | `Not_committed  (** the file is still being written: it cannot be read *)
  | `Bad_range  (** an offset or length outside the file *)
  | `Too_many_uncommitted  (** the limit on uncommitted files is reached *)
  | `Too_large  (** the file, or all uncommitted bytes, would pass their limit *)
  | `No_space  (** the disk is full; nothing already committed is lost *)
  | `Io of string  (** another error from the operating system *) ]

val pp_error : error Fmt.t

type config = {
  max_uncommitted_files : int;
  max_uncommitted_bytes : int;  (** the sum of the sizes of all uncommitted files *)
  max_file_size : int;
  idle_timeout : Consort.Time.t;
      (** an uncommitted file not used for this long is destroyed by {!age} *)
  lifetime : int;
      (** rounds of garbage collection ({!gc_age}) a committed file survives untouched; 0: committed
          files never age *)
}

val default_config : config
(** 1024 uncommitted files, 1 GiB of uncommitted bytes, files up to 1 GiB, idle timeout 10 minutes,
    a lifetime of 24 rounds (Amoeba's). *)

(** What recovery found and did, one line each. *)
type finding =
  | Temp_removed of string  (** a file left in [tmp/] by an interrupted write *)
  | Corrupt_record of string * string
      (** a record that fails its checks, and why; moved to [corrupt/] *)
  | Corrupt_blob of string * string
      (** a blob whose bytes do not match its hash, and why; moved to [corrupt/] *)
  | Missing_blob of obj * string  (** a record whose blob is gone or corrupt; moved to [corrupt/] *)
  | Orphan_removed of string
      (** a blob no record refers to (a commit interrupted before its record) *)
  | Unknown_file of string  (** a file that has no place in the store; moved to [corrupt/] *)
  | Server_record_replaced of string
      (** the server record failed its checks; a new server secret was made *)

val pp_finding : finding Fmt.t

val is_damage : finding -> bool
(** [is_damage f] is [true] for a torn or corrupt file ([Corrupt_*], [Missing_blob], [Unknown_file],
    [Server_record_replaced]), [false] for the cleanups an interrupted write leaves normally. *)

type t

val open_ :
  ?config:config ->
  ?io:Consort_util.Io.t ->
  ?random:(int -> string) ->
  clock:(unit -> Consort.Time.t) ->
  string ->
  (t * finding list, [ `Io of string | `Locked ]) result
(** [open_ ~clock dir] opens (creating it if needed) and recovers the store in [dir]. [random n]
    gives [n] random bytes for secrets (default: [/dev/urandom]); [clock] gives the time for aging.
    [`Locked] if another process has the store open. The directories it makes are 0700, the files it
    writes 0600, whatever the umask; it refuses ([`Io], one line saying how to fix it) a server
    file, [meta/] directory or record that another user could read or write. *)

val close : t -> unit
(** [close t] releases the lock and open files. Uncommitted files are lost. *)

val disk_error : t -> string option
(** [disk_error t] is the first error a durable write met (a full disk, an I/O error, a failed
    fsync), if any: that write was refused, and nothing acknowledged before is lost. A server stops
    on it (fail-stop: [consort cap fs serve] answers the request that met it, then exits 2). A
    failed fsync is fatal to the store too: it is never retried, and every later write is refused
    with [`Io] (after a failed fsync the state of the page cache is unknown). *)

val create : t -> commit:bool -> safe:bool -> string -> (obj, error) result
(** [create t ~commit ~safe data] makes a new file holding [data]. *)

val read : t -> obj -> off:int -> len:int -> (string, error) result
(** [read t obj ~off ~len] is at most [len] bytes from [off] (fewer at the end of the file).
    [`Bad_range] if [off] is past the end or [len < 0]. *)

val read_into : t -> obj -> off:int -> bytes -> int -> int -> (int, error) result
(** [read_into t obj ~off buf pos len] reads like {!read} into [buf] at [pos] and returns how many
    bytes it read. *)

val size : t -> obj -> (int, error) result
(** The size of a committed file. *)

val modify : t -> obj -> off:int -> string -> commit:bool -> safe:bool -> (obj, error) result
(** [modify t obj ~off data] overwrites from [off] (which may be the end of the file; the file grows
    if [data] goes past it). It returns the file changed: [obj] itself if [obj] is uncommitted, a
    new file if it is committed. *)

val insert : t -> obj -> off:int -> string -> commit:bool -> safe:bool -> (obj, error) result
(** [insert t obj ~off data] inserts [data] before byte [off]; as {!modify}. *)

val delete : t -> obj -> off:int -> len:int -> commit:bool -> safe:bool -> (obj, error) result
(** [delete t obj ~off ~len] removes [len] bytes from [off]; as {!modify}. *)

val commit : t -> obj -> safe:bool -> (unit, error) result
(** [commit t obj ~safe] commits an uncommitted file (a no-op on a committed one, except that [safe]
    waits until it is on the disk). If this fails, or a change with [~commit:true] fails to commit,
    the file stays uncommitted (with the change made) and can be committed again. *)

val destroy : t -> obj -> (unit, error) result
(** [destroy t obj] removes a file, committed or not; its blob goes when no other file shares it. *)

val touch : t -> obj -> (unit, error) result
(** [touch t obj] restarts the idle time of an uncommitted file, and gives a committed one its whole
    lifetime again. *)

val gc_age : t -> obj list
(** [gc_age t] is one round of garbage collection, as in Amoeba: every committed file loses one
    round of its lifetime, and those left with none are destroyed (and returned). Lifetimes are kept
    in memory only: after a restart every file has its whole lifetime, which can only delay a
    collection, never make one early. A collector calls it ([std_age]) only after a round that
    touched every reachable object. *)

val life : t -> obj -> int option
(** The rounds left to a committed file. *)

val age : t -> obj list
(** [age t] destroys the uncommitted files idle longer than the timeout and returns them. *)

val mem : t -> obj -> bool

val committed : t -> obj -> bool option
(** [committed t obj] is [None] if there is no such file. *)

val secret : t -> obj -> string option
(** [secret t obj] is the object's secret; object 0 is the server. *)

val revoke : ?secret:string -> t -> obj -> (string, error) result
(** [revoke t obj] gives the object a new secret (durably for a committed file and the server), so
    that every capability made with the old one fails, and is that secret: [secret] (32 bytes) if
    given, a random one otherwise. *)

val files : t -> obj list
(** Every committed file, in increasing order. *)

val digest : t -> obj -> string option
(** The SHA-256 (binary) of a committed file's bytes. *)

type stats = {
  committed_files : int;
  blobs : int;
  blob_bytes : int;  (** bytes on disk, each shared blob counted once *)
  uncommitted_files : int;
  uncommitted_bytes : int;
}

val stats : t -> stats
val pp_stats : stats Fmt.t
