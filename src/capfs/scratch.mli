(** Scratch directories for simulations that keep servers' disks: in [/dev/shm] when there is one
    (memory, not the disk), else in the temporary directory. *)

val rm_rf : string -> unit
(** [rm_rf p] removes [p] and, if it is a directory, all below it; nothing if [p] does not exist.
    @raise Unix.Unix_error on any other failure. *)

val with_dir : string -> seed:int -> (string -> 'a) -> 'a
(** [with_dir name ~seed f] is [f d] for a new, empty directory [d] ([consort-NAME-sim.PID.SEED]),
    removed with all it holds when [f] returns or raises. *)
