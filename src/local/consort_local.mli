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
