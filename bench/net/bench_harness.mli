(** What the TCP benchmarks against the kernel ({!Tcp_bench}, {!Tcp_impair_bench}) share: failures
    as an exception, shell commands, the temporary directory their C helpers are compiled into,
    network namespaces and devices named after the process id, the kernel peers' sink and source,
    Consort's TCP over IPv4 on a {!Consort_net_unix.Up} stack, and the whole run: signals, cleanup
    whatever happens, and the check that nothing was left behind. *)

(** {1 Failures and commands} *)

exception Failed of string

val fail : ('a, unit, string, 'b) format4 -> 'a
(** [fail fmt ...] raises {!Failed} with the message. *)

val ok : ('a, string) result -> 'a
(** [ok r] is [r]'s value, or raises {!Failed} with its error. *)

val sh : ('a, unit, string, unit) format4 -> 'a
(** [sh fmt ...] runs a shell command; {!Failed} (with its output) if it fails. *)

val quiet : ('a, unit, string, unit) format4 -> 'a
(** [quiet fmt ...] runs a shell command, ignoring its output and status. *)

val check_interrupted : unit -> unit
(** Raises {!Failed} ["interrupted"] once {!Bench_proc.interrupted} is set. *)

val program : string -> unit -> bool
(** [program name ()]: the shell finds program [name]. *)

val impossible : root:string -> ((unit -> bool) * string) list -> string option
(** [impossible ~root needs] is why a benchmark cannot run here, if it cannot: not root
    (["not root: " ^ root]), no [/dev/net/tun], no [ip] program, or the reason of the first of
    [needs] that is not there, in order. *)

(** {1 The environment} *)

type env = {
  dir : string;  (** the temporary directory the C helpers are compiled into *)
  ns_prefix : string;  (** namespaces are [ns_prefix ^ PID ^ "-" ^ KIND] *)
  link_prefix : string;  (** devices are [link_prefix ^ KIND ^ PID] *)
  mutable namespaces : string list;  (** made so far, deleted by {!drop_namespaces} *)
  mutable links : string list;  (** devices to delete by name if still there *)
}

val tag : string
(** This process's id, in every name. *)

val link_name : env -> string -> string
(** [link_name env kind] is the device name of that kind. *)

val compile : env -> ?libs:string -> string -> string -> string
(** [compile env ?libs name source] writes [source] as [NAME.c] in [env.dir], compiles it with gcc
    (linking [libs]) and is the executable's path. The kernel peers' [peer_common.h] is there too.
*)

val new_ns : ?v6:bool -> env -> string -> string
(** [new_ns env kind] makes the namespace of that kind, with its loopback up and IPv6 off unless
    [v6] (default [false]), and remembers it. *)

val drop_namespaces : env -> unit
(** Deletes every namespace made (and the devices in them) and every device remembered. *)

val starts : string -> string -> bool
(** [starts prefix s]: [s] begins with [prefix]. *)

val namespaces : unit -> string list
(** Every network namespace that exists. *)

val link_names : unit -> string list
(** Every device of the root namespace. *)

val sweep_stale_namespaces : string -> unit
(** [sweep_stale_namespaces prefix] deletes the namespaces [prefix ^ PID ^ "-" ^ KIND] of processes
    no longer alive. *)

val sweep_stale_links : string list -> unit
(** [sweep_stale_links prefixes] deletes the devices [PREFIX ^ PID] of processes no longer alive. *)

(** {1 Kernel peers} *)

val fields : ?prefix:string -> string -> (string * string) list
(** The [key=value] words of the first line of a peer's output starting with [prefix] (default
    [RESULT]); {!Failed} if there is none. *)

val field : (string * string) list -> string -> string
val float_field : (string * string) list -> string -> float

val spawn_sink : string -> seconds:float -> string -> int -> Bench_proc.t
(** [spawn_sink exe ~seconds ns port]: the peer [exe]'s sink in namespace [ns], bounded by [seconds]
    plus 10. *)

val spawn_source :
  string -> ?cc:string -> bytes:int -> seconds:float -> string -> string -> int -> Bench_proc.t
(** [spawn_source exe ?cc ~bytes ~seconds ns host port]: the peer [exe]'s source in namespace [ns],
    its socket's congestion control [cc] if given (TCP_CONGESTION), else the namespace's default. *)

(** {1 Consort's stack} *)

val with_stack :
  mtu:int -> tap:string -> ?ip6:string -> ip:string -> (Consort_net_unix.Up.t -> 'a) -> 'a
(** [with_stack ~mtu ~tap ?ip6 ~ip f] is [f up] on Consort's stack started on a new TAP device [tap]
    with address [ip] (and [ip6]) and no UDP services, stopped when [f] returns or raises; {!Failed}
    if it cannot start. *)

val perr : string -> Consort_net.Protocol.error -> 'a
(** [perr what e] fails a loop callback: the failure is kept so that {!run_with} ends and reports
    it, and {!Failed} is raised. *)

val run_with : Consort_engine.Loop.t -> Bench_proc.t -> timeout:float -> (unit -> bool) -> unit
(** [run_with loop child ~timeout until] runs [loop] until [until ()] and the child's output has
    ended, a callback failed (then {!Failed}), the run is interrupted or [timeout] seconds pass. *)

val finish_with :
  Consort_engine.Loop.t ->
  Bench_proc.t ->
  timeout:float ->
  grace:float ->
  'a option ref ->
  string ->
  'a * string
(** [finish_with loop child ~timeout ~grace result what] is {!run_with} until [result] is set, then
    [child]'s end ({!Bench_proc.finish} within [grace] seconds): the result and [child]'s output.
    {!Failed} if [child] failed, or if [result] was not set ([what] did not finish). *)

module type TCP4 = sig
  module T :
    Consort_net.Tcp.S
      with type host = Consort_net.Ipv4_addr.t
       and type lower = Consort_net.Ipstack.Ip.t

  module Sock : module type of Consort_net.Socket.Make (T)

  val tcp : T.t
end

val tcp_config :
  ?congestion:Consort_net.Tcp.congestion -> buffer:int -> unit -> Consort_net.Tcp.config
(** Consort's TCP configuration with send and receive buffers of [buffer] bytes and the congestion
    control [congestion] (the stack's default unless given). *)

val tcp_created : ('a, Consort_net.Protocol.error) result -> 'a
(** The TCP instance made, or {!Failed} with why not. *)

val tcp4 :
  ?congestion:Consort_net.Tcp.congestion ->
  local:string ->
  seed:int ->
  buffer:int ->
  Consort_net_unix.Up.t ->
  (module TCP4)
(** Consort's TCP over IPv4 at address [local] on the stack, its send and receive buffers of
    [buffer] bytes, its random numbers from [seed], its congestion control [congestion]. *)

(** {1 A run} *)

val run :
  impossible:string option ->
  sweep:(unit -> unit) ->
  dir:string ->
  ns_prefix:string ->
  link_prefix:string ->
  programs:(env -> 'a) ->
  env_of:('a -> env) ->
  leftovers:(unit -> string list) ->
  ('a -> 'b) ->
  ('b, string) result
(** [run ~impossible ~sweep ~dir ~ns_prefix ~link_prefix ~programs ~env_of ~leftovers body] is
    [Error why] if [impossible]; else, with SIGINT and SIGTERM setting {!Bench_proc.interrupted}, it
    runs [sweep ()], makes the temporary directory [dir ^ PID], compiles the helpers with [programs]
    and runs [body] on what it returned. Whatever happens, every child is then killed, every
    namespace and device deleted, the directory removed and the signals restored. [Error] says what
    failed ({!Failed} or a system error) and what [leftovers ()] still finds. *)
