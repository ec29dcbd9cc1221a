(** The directory server's state machine (Amoeba's SOAP semantics).

    A directory is an object of this server: rows that map a name to a capability set (up to
    [max_capset] capabilities, e.g. the replicas of one file), and for each row one rights mask per
    column (up to 4 columns, named when the directory is made: [owner], [group], [other] by
    default).

    {b Rights of a directory capability.} Bit [i] (0x01, 0x02, 0x04, 0x08) selects column [i];
    {!modify} (0x10) allows adding, replacing and re-masking rows and making directories from this
    one; {!delete} (0x20) allows removing rows. A lookup through a directory capability returns the
    row's capabilities narrowed to the union of the masks of the columns the capability selects:
    never more rights than that union. A stored capability is narrowed here when it already fits,
    when it is an owner capability (any server's: {!Consort_cap.Cap.restrict}) or when it names one
    of this server's directories (validated first); otherwise only its own server could narrow it,
    and the lookup gives [Withheld] in its place.

    Every change bumps the directory's sequence number; an [Install] adds or replaces several rows
    at once, all or none, optionally only if the directory is still at an expected sequence number.

    {b Garbage collection.} Every directory but the root has a lifetime: [Touch] sets it to
    [lifetime], [Age] (admin on the server capability, object 0) takes one from every directory and
    removes those at 0. [Refs] (admin on the server capability) gives a directory's stored
    capabilities unnarrowed, for the collector.

    Deterministic: replicas that apply the same operations in the same order hold the same state
    (the secrets of new directories are chosen by the caller and travel in [Create]). *)

module Cap = Consort_cap.Cap
module Rights = Consort_cap.Rights
module Port = Consort_cap.Port

val max_columns : int

val col : int -> Rights.t
(** [col i]: the right that selects column [i] (0 to 3). *)

val columns_mask : Rights.t
val modify : Rights.t
val delete : Rights.t
val root_obj : int
val default_columns : string list

(** What a row links, for its default masks. *)
type kind =
  | Directory  (** a directory of this server *)
  | File  (** an object of another server: a file *)
  | Server  (** a server's own capability (object 0), as linked under [/sys] *)

val kind_of : port:Port.t -> Cap.t -> kind
(** [kind_of ~port c]: [Server] if [c] names object 0, else [Directory] if [c] is on [port] (the
    directory server's), else [File]. *)

val default_masks : kind -> Rights.t list
(** The column masks (owner, group, other) a row gets unless told otherwise (the table in
    [src/capdir/README.md]): a directory [all : 0x06 : 0x04] (the group column sees the group and
    other columns, the other column the other column); a file [all : read : read]; a server
    [all : read : none] (never [create]: to hold the group view of a directory is not to store files
    or run programs on its servers). *)

type limits = {
  port : Port.t;  (** the server's port *)
  server_secret : Cap.Secret.t;  (** of the server object, 0 *)
  root_secret : Cap.Secret.t;  (** of the root directory, object {!root_obj} *)
  max_name : int;
  max_capset : int;
  max_rows : int;  (** per directory *)
  max_install : int;  (** rows per install *)
  max_dirs : int;
  max_total_rows : int;
  max_clients : int;  (** remembered for deduplication, the oldest forgotten first *)
  lifetime : int;  (** rounds of ageing an untouched directory survives *)
}

val default_limits : port:Port.t -> server_secret:Cap.Secret.t -> root_secret:Cap.Secret.t -> limits
(** Names up to 255 bytes, 4 capabilities a row, 10,000 rows a directory, 256 rows an install,
    100,000 directories, 1,000,000 rows, 10,000 clients, a lifetime of 8 rounds. *)

type row_spec = { name : string; masks : Rights.t list; caps : Cap.t list }
(** [masks]: one per column, missing ones are {!Rights.none}. *)

type op =
  | Lookup of { dir : Cap.t; name : string }
  | List of Cap.t  (** needs a column right *)
  | Create of {
      via : Cap.t;
      secret : string;
      columns : string list;
      link : (string * Rights.t list) option;
    }
      (** a new directory ([via] needs {!modify}), linked in [via] under a name when [link] is
          given, atomically *)
  | Install of { dir : Cap.t; expect : int option; rows : row_spec list }
  | Delete of { dir : Cap.t; name : string }
  | Chmod of { dir : Cap.t; name : string; masks : Rights.t list }
  | Touch of Cap.t
  | Refs of { server : Cap.t; dir : int }
  | Age of Cap.t

type entry = Narrowed of Cap.t | Withheld of Port.t

type error =
  | Capbad
  | Denied of string
  | Not_found of string
  | Exists of string
  | Conflict of int  (** the directory's sequence number now *)
  | Bad of string
  | Limit of string

type response =
  | Caps of entry list
  | Listing of { seq : int; columns : string list; rows : (string * Rights.t list) list }
  | Created of { cap : Cap.t; seq : int }  (** the owner capability; [via]'s sequence number *)
  | Done of int  (** the directory's sequence number after the change *)
  | Objects of Cap.t list
  | Aged of int list  (** the directories removed *)
  | Error of error

type t

val create : limits -> t
(** A server with its root directory only. *)

val limits : t -> limits
val root : t -> Cap.t
val server_cap : t -> Cap.t
val is_read : op -> bool

val check : limits -> op -> (unit, string) result
(** Refuses an operation over the limits or malformed (names, columns). *)

val execute : t -> op -> response

val apply : t -> client:int64 -> req:int -> op -> response * bool
(** As the key-value store's [Machine.apply]: reads change nothing; a retry of a client's last
    request gets its recorded response again; the [bool] says the state changed. *)

val dirs : t -> int
val mem : t -> int -> bool
val life : t -> int -> int option
val seq : t -> int -> int option
val objects : t -> int list

val secret : t -> int -> Cap.Secret.t option
(** The secret of the server (object 0) or of a directory. *)

val info : t -> int -> string
(** One line about the server (object 0) or a directory, for [std_info]. *)

val op_codec : op Consort.Codec.t
val response_codec : response Consort.Codec.t
val codec : limits -> t Consort.Codec.t
val digest : t -> string
val pp_error : error Fmt.t
val pp_response : response Fmt.t

(** This machine, for the key-value store's replication: [Store.Make], [Wire.Make],
    [Replica.Generic]. Its [default_limits] has a null port and secrets: a server always opens its
    store with its own. *)
module Rsm :
  Consort_kv.Rsm.MACHINE
    with type t = t
     and type op = op
     and type response = response
     and type limits = limits
