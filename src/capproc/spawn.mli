(** Starting a child (a C stub around fork and execve): its own process group, the three descriptors
    given as 0, 1 and 2 and no other, no core files, and optional limits. *)

val spawn :
  ?cpu_seconds:int ->
  ?address_space:int ->
  ?die_with_parent:int ->
  string ->
  string array ->
  string array ->
  Unix.file_descr * Unix.file_descr * Unix.file_descr ->
  int
(** [spawn prog argv env (stdin, stdout, stderr)] is the child's pid. [cpu_seconds]: RLIMIT_CPU
    (SIGXCPU, then SIGKILL a second later); [address_space]: RLIMIT_AS in bytes; [die_with_parent]:
    an OCaml signal number the child gets if this process dies. [prog] is a path, or a name looked
    up in [PATH].
    @raise Unix.Unix_error if it cannot fork or [prog] is not found. *)

type confinement = {
  uid : int;  (** -1: keep the server's *)
  gid : int;  (** -1: keep *)
  cwd : string;  (** the working directory ("" : keep) *)
  cgroups : string list;  (** [cgroup.procs] files the child joins before anything else *)
  nproc : int;  (** RLIMIT_NPROC (0: none; counted per user by the kernel) *)
  nofile : int;  (** RLIMIT_NOFILE (0: keep) *)
  pid_namespace : bool;  (** try a new PID namespace (with its own /proc) *)
}

type started = {
  pid : int;
  namespace : bool;  (** the child is the init of a new PID namespace *)
  status : Unix.file_descr option;
      (** in a namespace: where its init writes the program's wait status (4 bytes, little-endian)
          before it exits *)
}

val spawn_confined :
  ?cpu_seconds:int ->
  ?address_space:int ->
  ?die_with_parent:int ->
  ?caps_fd:Unix.file_descr ->
  ?program_fd:Unix.file_descr ->
  confinement ->
  string ->
  string array ->
  string array ->
  Unix.file_descr * Unix.file_descr * Unix.file_descr ->
  started
(** Like {!spawn}, confined: the child joins [cgroups], gets a PID namespace of its own if it can
    (then it is an init that starts the program, reaps orphans and reports the program's status;
    when it ends, the kernel kills everything left in the namespace; [/proc] is mounted anew, so
    only the namespace's processes are visible), its rlimits (and RLIMIT_NOFILE, RLIMIT_NPROC),
    [cwd], the user [uid]/[gid] with no supplementary groups, no-new-privileges and the death signal
    (after the user changed). [caps_fd] becomes descriptor 3 and [program_fd] 4; no other descriptor
    is inherited.
    @raise Failure with one line if the child could not be started as asked (which step, why).
    @raise Unix.Unix_error if it cannot fork. *)

(** {2 Spares}

    A confined child made before its program is known: it has joined its cgroups (in a v1 hierarchy
    the join waits for an RCU grace period, milliseconds), and is the init of a PID and mount
    namespace of its own with its own [/proc] where it can be, so that a start only hands it the
    program. It waits as root, its standard streams on [/dev/null], with no other descriptor than
    its socket to this process, and dies with this process (the death signal, and end of file on its
    socket). Each spare serves one program. *)

type spare

type zygote
(** A child forked once that makes spares (a clone with [CLONE_PARENT]: they are this process's
    children). A clone copies the page tables of the process that makes it, and each page they share
    is copied at the first write while the clone waits: made by the zygote, which writes nothing,
    neither falls on this process. The zygote runs only C code, holds no descriptor but its socket,
    and dies with this process. *)

val zygote : unit -> zygote
(** @raise Unix.Unix_error if it cannot fork. *)

val zygote_pid : zygote -> int

val zygote_fd : zygote -> Unix.file_descr
(** Readable when the answer to a {!request} is there. *)

val zygote_gone : zygote -> bool
(** Stopped: found gone (spares are then made by this process) or {!stop_zygote}. *)

val stop_zygote : zygote -> unit
(** Kills and reaps it. *)

val prepare :
  ?zygote:zygote ->
  ?die_with_parent:int ->
  cgroups:string list ->
  pid_namespace:bool ->
  unit ->
  spare
(** Starts a spare (at once: it gets ready on its own), by [zygote] if given and still there (else
    here, and a zygote found gone is stopped). [cgroups]: the [cgroup.procs] files it joins;
    [pid_namespace]: try a PID namespace, as {!spawn_confined}.
    @raise Unix.Unix_error if it cannot clone. *)

val request :
  ?zygote:zygote ->
  ?die_with_parent:int ->
  cgroups:string list ->
  pid_namespace:bool ->
  unit ->
  unit ->
  spare
(** {!prepare} in two steps: asks the zygote, and the function returned reads its answer (it blocks
    until there is one: call it once {!zygote_fd} is readable to wait for nothing; one request at a
    time). Without a zygote the spare is made at once.
    @raise Unix.Unix_error as {!prepare} does, from either step. *)

val spare_pid : spare -> int
val spare_namespace : spare -> bool

val spare_alive : spare -> bool
(** Not yet handed a program nor discarded, and still running (a dead one is reaped). *)

val discard : spare -> unit
(** Kills and reaps a spare not handed a program. *)

val start_spare :
  ?cpu_seconds:int ->
  ?address_space:int ->
  ?die_with_parent:int ->
  ?caps_fd:Unix.file_descr ->
  ?program_fd:Unix.file_descr ->
  spare ->
  confinement ->
  string ->
  string array ->
  string array ->
  Unix.file_descr * Unix.file_descr * Unix.file_descr ->
  started
(** As {!spawn_confined}, by the spare (which must not have served before), after waiting until it
    is ready: the confinement's [cgroups] and [pid_namespace] are those the spare was made with; the
    rest, limits and descriptors are applied now. The child is then the caller's to reap (its pid is
    {!spare_pid}).
    @raise Failure
      with one line if the spare could not get ready or the program could not be started as asked.
    @raise Invalid_argument if the spare served before. *)
