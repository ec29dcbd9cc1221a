(** Control groups for the process server's programs: a directory per server ([consort-proc-PID],
    made under the server's own cgroup; those of servers no longer running are removed when another
    starts), one per program under it.

    Where the unified (v2) hierarchy is mounted and writable, a program's tree is in its own v2
    cgroup: its CPU time is [cpu.stat]'s [usage_usec], and [cgroup.kill] ends every member at once.
    Where the [pids] controller is enabled in v2 its [pids.max] bounds the tree; else the v1 [pids]
    hierarchy is used if it is mounted, and the v1 [cpuacct] one for CPU time if v2 has no
    [cpu.stat]. What is missing is left out ({!describe} says what is there). *)

type t

type prog = private {
  dirs : string list;
  procs : string list;  (** the [cgroup.procs] files a program's first process joins *)
  v2dir : string option;
  pids_dir : string option;
  cpu : [ `V2 of string | `V1 of string | `None ];
  mutable cpu0 : int;
  mutable refused0 : int;
}

val none : t

val setup : name:string -> t
(** Makes the server's directories where it can; never fails. *)

val describe : t -> string

val make : t -> string -> nproc:int -> (prog, string) result
(** [make t leaf ~nproc]: a program's directories, [pids.max] = [nproc]. *)

val limits_pids : prog -> bool
val counts_cpu : prog -> bool

val cpu_usec : prog -> int option
(** CPU time used by every process that ran in the group since it was made or {!renew}ed. *)

val pids_refused : prog -> int
(** Forks refused for [pids.max] since the group was made or {!renew}ed. *)

val empty : prog -> bool
(** No process in the group: v2 [cgroup.events] says [populated 0], every [cgroup.procs] is read and
    empty, and [pids.current] (where there is one) is 0 (a killed process not yet reaped is still
    charged there). *)

val renew : prog -> nproc:int -> bool
(** [renew p ~nproc]: makes an emptied group the next program's, as {!make} would: only if it is
    {!empty}; [pids.max] = [nproc] written again, and the CPU time and refused forks counted from
    now ({!cpu_usec}, {!pids_refused} read the difference: the kernel's counters cannot be reset).
    [false] (the group must not be used) if it is not empty or a file cannot be written or read. *)

val count : prog -> int option
(** Processes now in the group. *)

val kill : prog -> unit
(** SIGKILL to every member ([cgroup.kill], or each member, again until none is left). *)

val remove : prog -> bool
(** Removes the directories; [false] if one is still busy. *)

val teardown : t -> unit
