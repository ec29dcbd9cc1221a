(** Files, directories and ports on this machine, for the programs and tests that run Consort's
    servers as real processes (the demos, the benchmarks, the end-to-end tests) and for the
    simulations that keep servers' disks. *)

val rm_rf : string -> unit
(** [rm_rf p] removes [p] and, if it is a directory, all below it; nothing if [p] does not exist.
    @raise Unix.Unix_error on any other failure. *)

val temp_dir : string -> string
(** [temp_dir prefix] is a new, empty directory (mode 0700) in the temporary directory, its name
    starting with [prefix]. *)

val with_scratch : string -> seed:int -> (string -> 'a) -> 'a
(** [with_scratch name ~seed f] is [f d] for a new, empty directory [d]
    ([consort-NAME-sim.PID.SEED]), removed with all it holds when [f] returns or raises. It is in
    [/dev/shm] when there is one (memory, not the disk), else in the temporary directory. *)

val read_file : string -> string
(** The whole file.

    @raise Sys_error if it cannot be read. *)

val write_file : string -> string -> unit
(** [write_file path s] makes [path] hold [s].

    @raise Sys_error if it cannot be written. *)

val contains : string -> string -> bool
(** [contains s sub]: [sub] is a substring of [s]. *)

val free_port : unit -> int
(** A UDP port on 127.0.0.1 that is free now (the system's choice). *)

(** Files that hold secrets or capabilities: created 0600 in 0700 directories whatever the umask
    (the modes are set explicitly after creation), and checked before a server uses them. *)
module Private : sig
  val dir_mode : int
  (** 0o700 *)

  val file_mode : int
  (** 0o600 *)

  val mkdir : string -> unit
  (** [mkdir d] makes [d] with mode 0700 (set explicitly); nothing if it exists.

      @raise Unix.Unix_error *)

  val mkdir_p : string -> unit
  (** [mkdir_p d] makes [d] and its missing parents, each with mode 0700.

      @raise Unix.Unix_error *)

  val openfile : string -> Unix.open_flag list -> Unix.file_descr
  (** [openfile path flags] is [Unix.openfile] with [O_CLOEXEC], creating with mode 0600, and then
      sets the mode to 0600 (a file that existed with a wider mode is narrowed).

      @raise Unix.Unix_error *)

  val write_file : string -> string -> unit
  (** [write_file path s] makes [path] hold [s], mode 0600.

      @raise Unix.Unix_error *)

  val exposed : string -> string option
  (** [exposed path] is [None] if [path] does not exist or only its owner may read, write or search
      it; otherwise one line saying so and how to fix it ([chmod 600] or [chmod 700]). *)

  val check : string list -> string option
  (** The first of [exposed] over the paths. *)
end
