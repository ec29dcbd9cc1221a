(** Running a program on a process server, from the caller's side: its standard streams over virtual
    circuits that the caller hosts, its exit code back. *)

open Consort_cap

type outcome = { kind : Proc_proto.kind; code : int; text : string }

type error =
  [ `Refused of Status.t * string  (** the server refused (nothing runs): why *)
  | `Unknown of string  (** the server became unreachable: the program may be running *) ]

val pp_error : error Fmt.t

type circuits
(** A port for the circuits of many starts, kept open: the process server reaches every start's
    circuits with the session it opened for the first (no locate, no handshake). Each start has
    circuits of its own (their own capabilities), hung up when the start ends: a program of an
    earlier start that still holds them is refused and never writes into a later start's. *)

val circuits : Rpc_udp.node -> circuits
(** [circuits node] serves a new port on [node] (its loop answers it from then on). *)

val close_circuits : circuits -> unit

val exec :
  Rpc_udp.node ->
  ?control:Rpc_udp.node ->
  ?circuits:circuits ->
  server:Cap.t ->
  program:Cap.t ->
  ?args:string list ->
  ?caps:(string * Cap.t) list ->
  ?limits:Pd.limits ->
  ?hints:string list ->
  ?stdin:Unix.file_descr ->
  ?stdout:(string -> unit) ->
  ?stderr:(string -> unit) ->
  ?interrupt:(unit -> bool) ->
  ?hangup:(unit -> bool) ->
  ?started:(Cap.t -> unit) ->
  unit ->
  (outcome, error) result
(** [exec node ~server ~program ()] runs [program] (a bytecode file's capability) on the process
    server [server] and waits for its end. Its standard input comes from [stdin] (none: the program
    reads end of file at once), its output goes to [stdout] and [stderr] (default: this process's),
    all of it passed on before [exec] returns. [interrupt ()] is asked every 50 ms; [true] sends an
    interrupt (SIGINT for the program: over its input circuit, or asked of the server when it has no
    input). [hangup ()] is asked as often: [true] (the caller this runs for is gone) stops answering
    on the circuits, so that the server hangs up on the program as on a dead caller (SIGHUP, then
    killed), and asks for SIGHUP at once (on [control], when given). [started] is told the process's
    capability once it runs. [caps] are more named capabilities ([root], ...). [control], a second
    node on the same loop, carries the SIGINT requests (the first node's session with the server is
    taken by the held [ps_wait] meanwhile). [circuits] (made on [node]) hosts the circuits, else a
    port of this start's own does (when it has no room for two more, too). Runs the node's loop; not
    for use inside a callback. *)

val start :
  Rpc_udp.node ->
  ?control:Rpc_udp.node ->
  ?circuits:circuits ->
  server:Cap.t ->
  program:Cap.t ->
  ?args:string list ->
  ?caps:(string * Cap.t) list ->
  ?limits:Pd.limits ->
  ?hints:string list ->
  ?stdin:Unix.file_descr ->
  ?stdout:(string -> unit) ->
  ?stderr:(string -> unit) ->
  ?output:(string -> (unit -> unit) -> unit) * (string -> (unit -> unit) -> unit) ->
  ?interrupt:(unit -> bool) ->
  ?hangup:(unit -> bool) ->
  ?started:(Cap.t -> unit) ->
  ((outcome, error) result -> unit) ->
  unit
(** [start node ... k]: {!exec} without waiting: [k] is called once, from the node's loop, with what
    [exec] would return (or at once, when nothing could be sent). Several starts run at once on one
    loop, each on a node of its own (a node's session with the server carries one transaction at a
    time: a start's held [ps_wait] would hold up another's [ps_exec]), each with its [circuits] made
    on its own node. [output] (instead of [stdout] and [stderr]): writers that call their
    continuation once the bytes are written; a circuit is read again only then, so a caller slow to
    take its output holds up its own program only. *)
