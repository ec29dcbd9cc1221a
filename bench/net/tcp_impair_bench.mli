(** TCP throughput through the impairment relay ([impair_relay.c]: loss, reordering, delay,
    duplication, rate limit, MTU black hole, seeded), as [consort bench tcp --impair SPEC] runs it:
    over IPv4 and over IPv6, kernel to Consort and Consort to kernel through one relay, beside
    kernel to kernel through another relay running the same program with the same impairment, in the
    same run; every transfer checked by SHA-256 at both ends.

    Consort's stack runs on a TAP device whose interface the relay reads and writes through an
    AF_PACKET socket (in a namespace of its own with no address); the kernel's end is a TAP device
    the relay made, in another namespace. Kernel to kernel, both ends are TAP devices of the relay.
    The kernel ends ([hash_peer.c]) and the relay are compiled with gcc into a temporary directory.
    Every namespace, device and file made is removed before {!run} returns; every transfer is
    bounded in time. Needs root.

    Like for like: the TAP devices take no offloads from the relay (no [IFF_VNET_HDR]), so the
    kernel segments before the relay and every frame through it is at most the MTU (the relay's
    largest frame is reported); and the kernel's senders run [config.kernel_cc], CUBIC unless asked
    otherwise, Linux's own default, whatever the host's default is (this machine's is BBR, which
    does not answer random loss with a smaller window; {!report.host_cc}). *)

type config = {
  impair : string;  (** the relay's SPEC, for example [loss=2%,reorder=5%,delay=1ms] *)
  bytes : int;  (** bytes per transfer *)
  seconds : float;  (** time bound of each transfer *)
  mtu : int;  (** MTU of every link *)
  buffer : int;  (** Consort's TCP send and receive buffers, bytes *)
  ipv6 : bool;  (** over IPv6 too *)
  kernel_cc : string;  (** the kernel senders' congestion control (TCP_CONGESTION) *)
  consort_cc : Consort_net.Tcp.congestion;  (** Consort's sender's congestion control *)
}

val consort_ccs : (string * Consort_net.Tcp.congestion) list
(** Consort's congestion controls by name: cubic, newreno, bbr. *)

val default : config
(** [loss=2%,reorder=5%,delay=1ms], 100 MB within 300 s, MTU 1500, 1 MiB buffers, IPv4 and IPv6,
    kernel senders with CUBIC. *)

type relay = {
  frames : int;  (** frames in, both directions *)
  lost : int;
  reordered : int;
  duplicated : int;
  blackholed : int;
  queue_drops : int;
  write_drops : int;  (** frames the next hop would not take: lost too *)
  socket_drops : int;  (** frames the relay's AF_PACKET socket dropped before it read them *)
  device_drops : int;
      (** frames the TAP devices on either side dropped (their queues full: [tx_dropped]) *)
  max_frame : int;  (** the largest frame the relay took, bytes with the Ethernet header *)
}
(** What one relay did, both directions, over every transfer through it. *)

type flow = {
  bytes : int;  (** bytes the receiver got, SHA-256 equal to what was sent *)
  secs : float;  (** from the receiver's first byte to the end of the stream *)
  sha256 : string;
  retransmitted : int;  (** Consort's connection: segments retransmitted (0 kernel to kernel) *)
  timeouts : int;  (** Consort's connection: retransmission timeouts *)
  undos : int;  (** Consort's connection: recoveries undone by D-SACKs *)
}

type family = {
  name : string;  (** "IPv4" or "IPv6" *)
  consort_in : flow;  (** kernel -> Consort *)
  consort_out : flow;  (** Consort -> kernel *)
  kernel : flow;  (** kernel -> kernel *)
  consort_relay : relay;
  kernel_relay : relay;
}

type report = {
  config : config;
  spec : string;  (** as the relay understood it *)
  host_cc : string;  (** the host's default congestion control, for the record *)
  families : family list;
}

val impossible : unit -> string option
(** Why the benchmark cannot run here (not root, no [/dev/net/tun], no [ip], [gcc] or OpenSSL's
    headers), if it cannot. *)

val check_cc : string -> (unit, string) result
(** [check_cc name] is [Ok ()] if [name] can name a kernel congestion control (lower-case letters,
    digits and [_], at most 15). *)

val check_spec : string -> (unit, string) result
(** [check_spec s] is [Ok ()] if [s] has the relay's SPEC syntax (keys [loss], [dup], [reorder],
    [delay], [jitter], [reorder_delay], [rate], [queue], [mtu], [seed]); [Error] says what is wrong
    in one line. *)

val run : ?progress:(string -> unit) -> config -> (report, string) result
val mbit_s : flow -> float

val ratios : family -> float * float
(** Consort's throughput in and out over kernel to kernel's. *)

val meets_target : report -> bool
(** Every ratio at least 0.7. *)

val pp_table : report Fmt.t
val to_json : report -> string
