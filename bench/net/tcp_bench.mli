(** TCP throughput, request/response latency and CPU per megabyte: Consort's stack on a TAP device
    against a kernel socket, beside two kernel sockets through a minimal C TAP bridge (the same I/O
    path: one read and one write per frame) and two kernel sockets over a veth pair with offloads
    off, all measured in one run.

    The run creates network namespaces, TAP and veth devices (named after the process id) and
    removes them all before it returns, whether it succeeded or not. The kernel ends are a small C
    program, and the bridge another, compiled with gcc into a temporary directory (removed too).
    Every transfer is bounded in bytes and in time. Needs root. *)

type config = {
  bytes : int;  (** bytes per bulk transfer *)
  seconds : float;  (** time bound of each transfer and of each request/response run *)
  rr_size : int;  (** bytes per request and per response *)
  rr_count : int;  (** request/response round trips measured (after a warm-up) *)
  mtu : int;  (** MTU of every link *)
  buffer : int;  (** Consort's TCP send and receive buffers, bytes *)
  rounds : int;  (** transfers per setup; the fastest counts *)
}

val default : config
(** 200 MB per transfer within 20 s, best of 3 rounds; 20 000 round trips of 64 bytes; MTU 1500; 1
    MiB buffers. *)

type cpu = { who : string; user : float; sys : float }
(** CPU seconds of one process over a transfer ([consort]: this process, running the stack;
    [source], [sink]: the kernel peers; [bridge]). *)

type flow = {
  bytes : int;  (** bytes the receiver got *)
  secs : float;  (** from the receiver's first byte to the end of the stream *)
  cpu : cpu list;  (** every process involved *)
  machine : float;
      (** busy CPU seconds of the whole machine over the transfer (/proc/stat), other load included
      *)
  rates : float list;  (** Mbit/s of every round, in order; the figures above are the fastest's *)
}

type rr = {
  size : int;
  rounds : int;
  min_us : float;
  median_us : float;
  p99_us : float;
  mean_us : float;
}
(** Round-trip times measured by the kernel client, in microseconds. *)

type report = {
  config : config;
  consort_in : flow;  (** kernel -> Consort *)
  consort_out : flow;  (** Consort -> kernel *)
  consort_rr : rr;  (** the kernel pings, Consort echoes; every process on CPU 0 *)
  consort_rr_any : rr;  (** the same, each process where the scheduler puts it *)
  bridge : flow;
  bridge_rr : rr;
  bridge_rr_any : rr;
  veth : flow;
  veth_rr : rr;
  veth_rr_any : rr;
  offloads : string;  (** the veth devices' offload settings as reported *)
  ethtool : bool;  (** whether the ethtool program was there (else its ioctl was used) *)
}

val impossible : unit -> string option
(** [impossible ()] is why the benchmark cannot run here (not root, no [/dev/net/tun], no [ip] or
    [gcc]), if it cannot. *)

val leftovers : unit -> string list
(** [leftovers ()] is every namespace and device of this process's runs that still exists (empty
    after {!run} returns). *)

val run : ?progress:(string -> unit) -> config -> (report, string) result
(** [run cfg] runs every measurement, calling [progress] before each, and removes what it created;
    it first removes what runs of processes no longer alive left behind. [Error] says what failed
    (or why it cannot run, or what was left behind). *)

val mbit_s : flow -> float
(** Megabits (10{^ 6}) per second. *)

val cpu_ms_per_mb : flow -> float
(** CPU milliseconds of all the processes involved per megabyte moved. *)

val machine_ms_per_mb : flow -> float
(** Busy CPU milliseconds of the whole machine per megabyte moved. *)

val throughput_ratios : report -> float * float
(** Consort's throughput in and out over the bridge's. *)

val latency_ratio : report -> float
(** Consort's median round trip over the bridge's, every process on CPU 0. *)

val meets_targets : report -> bool
(** Both throughput ratios at least 0.7 and the latency ratio at most 1.5. *)

val pp_table : report Fmt.t
(** The figures, the ratios and the targets, as a table. *)

val to_json : report -> string
(** The headline figures as one line of JSON. *)
