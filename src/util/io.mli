(** The file-system primitives the store uses to make data durable.

    Every step that changes the disk goes through one of these functions, so a test can count the
    steps, stop the process at any one of them (a crash test kills itself with SIGKILL at step [n])
    or make a write fail as a full disk would. *)

type step =
  | Write of string  (** a chunk of at most {!chunk} bytes written to this file *)
  | Fsync of string  (** a file forced to the disk *)
  | Fsync_dir of string  (** a directory forced to the disk *)
  | Rename of string * string
  | Unlink of string

val pp_step : step Fmt.t

type t = {
  write : string -> Unix.file_descr -> bytes -> int -> int -> int;
      (** [write path fd buf off len] writes at most [len] bytes; raises [Unix.Unix_error]. *)
  fsync : string -> Unix.file_descr -> unit;
  fsync_dir : string -> unit;
  rename : string -> string -> unit;
  unlink : string -> unit;
}

val real : t
(** The operating system's calls. *)

val chunk : int
(** Writes go to the disk in chunks of this many bytes (64 KiB). *)

val hooked : (step -> unit) -> t -> t
(** [hooked f io] calls [f step] before each step of [io]. [f] may raise (for example
    [Unix.Unix_error (ENOSPC, _, _)]) or never return. *)

val counting : t -> t * (unit -> int)
(** [counting io] is [io] that counts its steps, and the count so far. *)

val pread : Unix.file_descr -> off:int -> bytes -> int -> int -> int
(** [pread fd ~off buf pos len] reads the bytes from [off] up to, not including, [off + len] of the
    file [fd] into [buf] at [pos], in as few system calls as the kernel allows (not in 64 KiB pieces
    as [Unix.read]), until [len] bytes or the end of the file, and is the number read. The file
    position is not used.
    @raise Unix.Unix_error on failure. *)

val write_string : Unix.file_descr -> string -> unit
(** [write_string fd s] writes all of [s] to [fd] with as few [write] calls as the kernel takes (not
    in 64 KiB pieces), waiting when [fd] is non-blocking and full.
    @raise Unix.Unix_error on failure. *)
