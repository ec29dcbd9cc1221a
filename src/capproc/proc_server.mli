(** The process server: starts OCaml bytecode programs named by process descriptors ({!Pd}) as
    children of this process, under [ocamlrun], with resource limits, their standard streams
    connected to the capabilities of the descriptor (virtual circuits, {!Consort_capvc}), each
    process an object with a capability (see {!Proc_proto}).

    For each [ps_exec]: the descriptor is decoded and checked (architecture [ocaml-bytecode],
    bounds); the program is read from its file server (at most [max_program] bytes), written under
    [DATA/run/], and checked: it must end with the bytecode trailer of the local [ocamlrun] (its
    magic number, read from the [ocamlrun] binary at start); then it runs as [ocamlrun FILE ARGS...]
    in a process group of its own, with RLIMIT_CPU, RLIMIT_AS and a run-time timer, an environment
    of only [PATH], [CAML_LD_LIBRARY_PATH] and the capability environment ({!Consort_capenv}). Each
    process uses its own RPC node, which locates the environment's ports at the caller's address,
    the descriptor's hints and the server's own locate list (answers are signed: a hint cannot
    redirect anything).

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
val running : t -> int

val shutdown : t -> unit
(** Kills every process still running (SIGKILL to its group) and waits for it. *)
