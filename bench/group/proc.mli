(** Processes a benchmark starts: placed on CPUs, their standard output read line by line with the
    time each line arrived, and ended by PID.

    Times are seconds on the monotonic clock ({!now}). *)

type t

val now : unit -> float
(** [now ()] is the monotonic clock, in seconds from an arbitrary origin. *)

val can_pin : unit -> bool
(** [can_pin ()] is [true] when [taskset] is installed, so that [~cpu] in {!spawn} places processes.
*)

val placement : cpu:int option -> string
(** [placement ~cpu] describes where {!spawn} with [~cpu] runs: ["CPU 0"], or ["unpinned"]. *)

val spawn :
  ?cpu:int ->
  ?stdin:[ `Pipe | `Null ] ->
  ?stderr:string ->
  name:string ->
  string ->
  string list ->
  t
(** [spawn ~name exe args] starts [exe] with [args] (under [taskset -c cpu] when [cpu] is given and
    {!can_pin}), its standard output a pipe read by {!pump}, its standard input a pipe held open
    until {!close_input} ([`Pipe], the default) or [/dev/null], its standard error appended to the
    file [stderr] (default: discarded). *)

val name : t -> string

val spawned_at : t -> float
(** [spawned_at p] is the time just before [p] was created. *)

val lines : t -> (float * string) list
(** [lines p] is every complete line [p] has printed so far, oldest first, each with the time it was
    read. *)

val pump : t list -> timeout:float -> unit
(** [pump ps ~timeout] waits up to [timeout] seconds for output of [ps] and reads what is there. *)

val wait_until : t list -> timeout:float -> (unit -> bool) -> bool
(** [wait_until ps ~timeout f] pumps the output of [ps] until [f ()] holds ([true]) or [timeout]
    seconds have passed ([false]). *)

val close_input : t -> unit
(** [close_input p] closes [p]'s standard input (a member then leaves). *)

val write_line : t -> string -> bool
(** [write_line p s] writes [s] and a newline to [p]'s standard input without blocking; [false] if
    it was not written whole (input closed, pipe full, process gone: SIGPIPE must be ignored). *)

val kill : t -> unit
(** [kill p] sends SIGKILL to [p], by its PID, if it has not ended, and reaps it. *)

val finish : t list -> timeout:float -> bool
(** [finish ps ~timeout] waits up to [timeout] seconds for every process of [ps] to end by itself,
    reading its output to the end, then kills those still running; [true] if all ended by themselves
    with status 0. *)

val exit_ok : t -> bool
(** [exit_ok p] is [true] if [p] ended by itself with status 0. *)

val free_addresses : int -> string list
(** [free_addresses n] is [n] distinct ["127.0.0.1:PORT"] with ports the kernel just found free. *)

val temp_dir : string -> string
(** [temp_dir prefix] creates a fresh directory under the system's temporary directory. *)

val remove_dir : string -> unit
(** [remove_dir d] removes the files in [d], then [d]. *)

val read_tail : ?max:int -> string -> string
(** [read_tail f] is the last [max] bytes (default 2000) of file [f], or [""] if it cannot be read.
*)

val online_cpus : unit -> int
(** [online_cpus ()] is the number of CPUs the kernel has online (from
    [/sys/devices/system/cpu/online]), or 1 if unknown. *)
