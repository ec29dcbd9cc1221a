(** The process server: starts OCaml bytecode programs named by process descriptors ({!Pd}) as
    children of this process, under [ocamlrun], confined and with resource limits, their standard
    streams connected to the capabilities of the descriptor (virtual circuits, {!Consort_capvc}),
    each process an object with a capability (see {!Proc_proto}).

    For each [ps_exec]: the descriptor is decoded and checked (architecture [ocaml-bytecode],
    bounds); the program is read from its file server (at most [max_program] bytes) into
    [DATA/cache/SHA256.byte] (kept for the next start with the same capability and size, at most 32
    programs), and checked: it must end with the bytecode trailer of the local [ocamlrun]. It runs
    as [ocamlrun /proc/self/fd/4 ARGS...] (the program open on descriptor 4):

    - as [user] (uid, gid, no supplementary groups, no-new-privileges), never root when [user] is
      set;
    - in a private working directory [DATA/run/OBJ-RANDOM] (0700, the user's; [DATA] itself is the
      server's), removed at the end;
    - with descriptors 0-2 (its circuits' pipes), 3 (its capabilities, read once by
      {!Consort_capenv}) and 4 (its own program) and no other; no capability in its environment;
    - in a cgroup of its own (cgroup v2, or the v1 [pids] and [cpuacct] hierarchies, when [cgroups]
      and the host allow: see {!Cgroup}): CPU time counted for the whole tree, at most [max_tree]
      processes ([pids.max]), every member killed at the end;
    - in a PID namespace of its own with its own [/proc] when [namespaces] and the host allow:
      [setsid] does not leave it, only its own processes are visible, and when the program ends (or
      the server dies) everything it started is killed;
    - with RLIMIT_CPU, RLIMIT_AS (each process), RLIMIT_NOFILE ([max_files]), and RLIMIT_NPROC
      ([max_tree], counted per user by the kernel) where no pids cgroup bounds the tree;
    - stopped, with the limit named, when the tree's CPU time passes the limit (its cgroup's, else
      its process group's from [/proc]), when the run time passes, and 2 s after its caller hung up.

    Without a cgroup or a namespace the guarantee is weaker: a process that calls [setsid] leaves
    the process group, its CPU time is not counted, and it survives the program (see the README).

    Bounds: [max_processes] at once (ended ones are kept [keep] for [ps_wait], then forgotten);
    every limit at most the server's maximum; 4 waiters per process; the stderr tail kept to tell an
    out-of-memory end is 512 bytes. *)

type config = {
  data : string;  (** a directory of this server's own *)
  ocamlrun : string;  (** default ["/usr/bin/ocamlrun"], or [ocamlrun] found in [PATH] *)
  max_processes : int;  (** default 32 *)
  max_program : int;  (** bytes, default 64 MiB *)
  default_limits : Pd.limits;  (** cpu 60 s, memory 1 GiB, run time 1 hour *)
  max_limits : Pd.limits;  (** cpu 1 hour, memory 4 GiB, run time 1 day *)
  keep : Consort.Time.t;  (** ended processes are kept this long (default 60 s) *)
  hold : Consort.Time.t;  (** a ps_wait is held this long at most (default 10 s) *)
  fetch_timeout : Consort.Time.t;  (** a program not read within this is refused (default 60 s) *)
  locate : string list;  (** the server's own locate list, for every process's node *)
  rpc : Consort_cap.Rpc.config;
  user : (int * int) option;
      (** the uid and gid programs run as ([None]: the server's own; default [None]) *)
  max_tree : int;  (** processes in a program's tree (default 64) *)
  max_files : int;  (** open files of each process (default 256) *)
  namespaces : bool;  (** a PID namespace per program, if the host allows (default true) *)
  cgroups : bool;  (** a cgroup per program, if the host allows (default true) *)
}

val default_config : data:string -> config

type t

val create :
  config ->
  Consort_engine.Loop.t ->
  Consort_cap.Rpc_udp.node ->
  Consort_cap.Port.Key.t ->
  (t, string) result
(** Serves the key's port on the node. [Error] if [ocamlrun] cannot be read or [DATA/run] cannot be
    made. *)

val server_cap : t -> Consort_cap.Cap.t

val confinement : t -> string
(** One line: what confines the programs on this host (user, namespace, cgroups). *)

val running : t -> int

val shutdown : t -> unit
(** Kills every process still running (SIGKILL to its group) and waits for it. *)
