(** A simulated disk for the simulator's scenarios: an {!Io.t} over real files (in the scenario's
    scratch directory) that injects the faults production storage has, from a seeded random state:

    - a full disk: once the disk has taken [budget] bytes, a write stores what still fits (a short
      write) and the next raises [ENOSPC];
    - [EIO] on a write (nothing written), at a given rate;
    - a failed fsync ([EIO]), at a given rate: what it was to make durable is then lost at the next
      crash, as Linux may drop the dirty pages of a failed fsync;
    - at a crash ({!crash}): every file loses what was written to it since its last successful
      fsync, except, for some files, a random prefix of it (a torn write), as LazyFS does for real
      file systems.

    Renames and the creation of files are taken as durable at once (the stores fsync the directory
    right after); the loss of a rename not followed by a directory fsync is not modelled.

    The same disk serves every incarnation of a process: {!crash} between them. *)

type config = {
  budget : int option;  (** bytes the disk takes in all before it is full; [None]: never full *)
  eio_rate : float;  (** chance that a write fails with [EIO] *)
  fsync_fail_rate : float;  (** chance that an fsync (of a file or a directory) fails *)
}

val no_faults : config

type t

val create : Random.State.t -> config -> t
(** A disk whose faults are drawn from this random state (which the scenario owns). *)

val io : t -> Io.t
(** The disk's primitives: {!Io.real} with the faults, and the bookkeeping of what is durable. *)

val set_config : t -> config -> unit
(** Changes the faults from now on (a disk replaced or grown, faults over). A budget counts the
    bytes written from the disk's creation. *)

val written : t -> int
(** Bytes written so far. *)

val faults : t -> int
(** Faults injected so far (full-disk refusals, write errors, failed fsyncs). *)

val crash : t -> int
(** The machine stops: every file written since its last successful fsync goes back to its size
    then, plus, for some, a random part of what followed (a torn write). The number of files cut. *)
