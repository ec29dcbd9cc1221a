(** The types TCP shares with its users and its parts: states, upcall statuses, configuration,
    statistics, and the signatures of the lower layer, the functor parameters and the protocol. *)

(** {1 Shared types} *)

type state =
  | Closed
  | Listen
  | Syn_sent
  | Syn_received
  | Established
  | Fin_wait_1
  | Fin_wait_2
  | Close_wait
  | Closing
  | Last_ack
  | Time_wait

val pp_state : state Fmt.t

type status =
  | Connected  (** the three-way handshake completed *)
  | Writable  (** send space opened after a write found the buffer full *)
  | Peer_closed  (** the peer's FIN arrived: no more data will come *)
  | Closed_normally  (** both directions are closed (the last upcall) *)
  | Failed of Protocol.error  (** reset by the peer, refused or timed out (the last upcall) *)

val pp_status : status Fmt.t

(** Congestion control: NewReno (RFC 5681, RFC 6582), CUBIC (RFC 9438) or BBR v1 (model-based,
    paced: {!Tcp_bbr}). *)
type congestion = New_reno | Cubic | Bbr

val pp_congestion : congestion Fmt.t

type keepalive = { idle : Consort.Time.t; interval : Consort.Time.t; probes : int }

type config = {
  mss : int option;  (** MSS to advertise; default: lower layer's maximum minus 20 *)
  send_buffer : int;  (** bytes of send buffer per connection *)
  receive_buffer : int;  (** bytes of receive window per connection *)
  window_scale : bool;  (** offer RFC 7323 window scaling *)
  sack : bool;  (** offer SACK (RFC 2018, 6675) *)
  timestamps : bool;  (** offer timestamps (RFC 7323) *)
  nodelay : bool;  (** disable Nagle's algorithm on new connections *)
  delayed_ack : Consort.Time.t;  (** the delayed ACK timer; zero acks every segment *)
  initial_rto : Consort.Time.t;
  min_rto : Consort.Time.t;
  max_rto : Consort.Time.t;
  initial_window : int option;  (** in segments; default per RFC 5681 *)
  syn_retries : int;  (** SYN or SYN-ACK retransmissions before giving up *)
  max_retransmits : int;  (** data retransmissions of one segment before giving up *)
  msl : Consort.Time.t;  (** maximum segment lifetime; TIME_WAIT lasts twice it *)
  fin_wait_2_timeout : Consort.Time.t;  (** for connections closed by the application *)
  keepalive : keepalive option;  (** default for new connections *)
  max_ooo_segments : int;  (** bound of the out-of-order queue *)
  backlog : int;  (** half-open connections per listener *)
  challenge_ack_limit : int;
      (** challenge ACKs per second and connection (RFC 5961 section 7), at most; each second's
          budget is drawn between half of it and it *)
  congestion : congestion;
      (** of connections opened from now on; [Cubic] by default, as in Linux ([New_reno] or [Bbr]
          can be chosen) *)
  rack : bool;
      (** RACK-TLP (RFC 8985) on connections with SACK: time-based loss detection and tail loss
          probes; off, loss is detected by duplicate ACKs (RFC 6675) and tail losses wait for the
          RTO *)
  plpmtud : bool;
      (** packetization-layer path MTU discovery (RFC 8899, RFC 4821): a segment lost to two
          timeouts in a row makes the segments smaller (a black hole: a path that drops large
          packets and says nothing), then probes with larger ones find the size the path carries *)
  pmtu_raise : Consort.Time.t;
      (** how long a path MTU search stays closed below the largest size the lower layer (or ICMP)
          allows after a probe was lost, before it probes again (RFC 8899's PMTU_RAISE_TIMER) *)
  syn_cookies : bool;  (** answer SYNs with cookies when a listener's backlog is full *)
  min_mss : int;
      (** the smallest MSS taken from a peer (Linux's [tcp_min_snd_mss], 48): a peer asking for less
          gets that much (CVE-2019-11479) *)
  orphan_retries : int;
      (** window probes a connection closed by the application sends to a receiver that keeps its
          window shut, before it resets *)
  max_connections : int;
      (** connections at once (TIME-WAIT records apart); at the limit a new one resets the oldest
          orphan, or else it is refused (a SYN gets a cookie) *)
  max_orphans : int;
      (** connections closed by the application and not yet gone; over it the oldest is reset *)
  send_share_min : int;
      (** the smallest send buffer a connection takes under [memory_limit]'s pressure (default 16
          KiB, or [send_buffer] if smaller) *)
  memory_limit : int;
      (** bytes of send and receive buffers across the connections of an instance (default 128 MiB).
          A connection takes its send buffer at its first write: the whole [send_buffer] while every
          connection could hold one, else an equal share of what received data leaves (a power of
          two, never below [send_share_min]), and a buffer emptied of another size is given back, so
          shares shrink under pressure and grow back after it; when that would pass the limit, the
          oldest connections holding one behind a zero window are reset (as Linux's tcp_mem pressure
          does), and if none is, the write waits (writable once memory comes back). Received data
          held (delivered and not yet read, out of order) counts too: when the connections could not
          all fill their [receive_buffer] in what the send buffers leave, each offers a window from
          an equal share of it (and of what is free), and once the limit is spent a segment for a
          connection that already holds data is dropped (the peer sends it again); a connection
          holding nothing always takes one segment *)
}

val default_config : config
(** 256 KiB buffers, window scaling, SACK and timestamps on, 40 ms delayed ACK, RTO 1 s initially
    and within \[200 ms, 60 s\], MSL 30 s. *)

val pp_config : config Fmt.t

type conn_info = {
  state : state;
  snd_mss : int;  (** payload bytes per full segment sent *)
  rcv_mss : int;  (** the MSS this side advertised *)
  snd_wscale : int option;  (** the peer's shift, if scaling was agreed *)
  rcv_wscale : int option;  (** this side's shift, if scaling was agreed *)
  sack_ok : bool;
  timestamps_ok : bool;
  srtt : Consort.Time.t option;
  rttvar : Consort.Time.t option;
  rto : Consort.Time.t;
  cwnd : int;
  ssthresh : int;
  snd_wnd : int;  (** the peer's window, scaled *)
  rcv_wnd : int;  (** the window last advertised, scaled *)
  unacked : int;  (** bytes sent and not acknowledged *)
  unsent : int;  (** bytes written and not sent *)
  unread : int;  (** bytes delivered and not yet consumed *)
  bytes_sent : int;  (** application bytes acknowledged by the peer *)
  bytes_received : int;  (** application bytes delivered in order *)
  segments_retransmitted : int;
  fast_retransmits : int;
  undos : int;
      (** recoveries undone: D-SACKs showed all their retransmissions needless (RFC 3708) *)
  timeouts : int;
  probes : int;  (** tail loss probes sent (RFC 8985 section 7) *)
  path_mtu : int;  (** the largest segment (header included) the path is taken to carry *)
  mtu_probes : int;  (** path MTU probes sent (RFC 8899) *)
  ooo_segments : int;  (** segments in the out-of-order queue *)
  soft_error : string option;  (** the last ICMP soft error about the connection *)
}

val pp_conn_info : conn_info Fmt.t

type stats = {
  segments_in : int;
  segments_out : int;
  retransmitted : int;
  bad_checksum : int;
  malformed : int;
  resets_in : int;
  resets_out : int;
  challenge_acks : int;
  dropped : int;  (** segments for no connection, or rejected by a check *)
  active : int;  (** connections in the table now *)
  syn_cookies_sent : int;
  syn_cookies_accepted : int;  (** handshakes completed from a cookie *)
  memory : int;
      (** bytes held for connections: an estimate of each record, the send buffers allocated and the
          pool segments the receive queues pin *)
  orphans : int;  (** connections closed by the application, not yet gone *)
  dsacks_sent : int;  (** duplicates reported (RFC 2883) *)
  dsacks_received : int;  (** duplicates the peers reported: spurious retransmissions *)
  memory_resets : int;  (** connections behind a zero window reset for [memory_limit] *)
  memory_refused : int;  (** writes that waited for [memory_limit] *)
  send_memory : int;  (** bytes of send buffers allocated, within [memory_limit] *)
  receive_memory : int;
      (** bytes received and held: delivered and not yet read ([consume]), and the pool segments the
          out-of-order queues pin; within [memory_limit] with the send buffers, and a segment a
          connection *)
  windows_cut : int;  (** windows advertised smaller than [receive_buffer] for [memory_limit] *)
  memory_drops : int;  (** segments dropped because [memory_limit] was spent *)
  shares_cut : int;  (** send buffers taken smaller than [send_buffer] for [memory_limit] *)
  spares_reused : int;  (** send buffers taken from memory given back under pressure *)
}

val pp_stats : stats Fmt.t

type control =
  | Set_config of config  (** the configuration of connections opened from now on *)
  | Abort_all  (** reset every connection *)

(** {1 The lower layer and the parameters} *)

(** What TCP needs of the layer below: the generic signature, and the host a lower connection talks
    to (to demultiplex, and for the checksum's pseudo header). *)
module type LOWER = sig
  type host

  include Protocol.S

  val remote : connection -> host
end

(** The functor's parameters (Fox passes the pseudo-header checksum as a functor argument in the
    same way). *)
module type PARAMS = sig
  type host
  type lower_address
  type lower_pattern

  val local : host
  (** This stack's own address. *)

  val lower_address : host -> lower_address
  (** The lower layer's address of TCP at a host (for IP: the host and protocol 6). *)

  val lower_pattern : lower_pattern
  (** The lower layer's pattern for all of TCP's packets. *)

  val pseudo_header : (src:host -> dst:host -> len:int -> int) option
  (** The checksum policy: [Some f] checksums every segment, [f] giving the unfolded sum of the
      pseudo header for a segment of [len] bytes; [None] sends a zero checksum field and verifies
      nothing (for a lower layer with its own integrity check). *)

  val equal_host : host -> host -> bool
  val pp_host : host Fmt.t
  val clock : Clock.t

  val rng : Consort.Rng.t
  (** The draws that need not be secret (the challenge-ACK budget); sequence numbers, ports and
      timestamp offsets come from {!Tcp_secret}. *)

  val pool : Consort.Pool.t
  (** Where outgoing segments are allocated. *)
end

(** {1 The TCP protocol} *)

module type S = sig
  type host
  type lower

  type tcp_address = { host : host; port : int; local_port : int option }
  (** A peer for {!active_open}: its host and port, and the local port ([None]: an ephemeral one).
  *)

  type tcp_pattern = { port : int; from : host option }
  (** A passive open: the local port, and optionally the one host allowed. *)

  include
    Protocol.S
      with type address = tcp_address
       and type address_pattern = tcp_pattern
       and type status = status
       and type control = control
       and type info = stats

  type lower_status
  (** What the lower layer reports on its connections. *)

  val create :
    ?config:config ->
    ?secret:string ->
    ?icmp:(lower_status -> Tcp_icmp.t option) ->
    lower ->
    (t, Protocol.error) result
  (** [create lower] is a TCP instance receiving every TCP packet of [lower]. [secret] keys its
      initial sequence numbers, SYN cookies, timestamp offsets and port choice ({!Tcp_secret}); by
      default 32 bytes from the system's generator. [icmp] reads an ICMP error out of the lower
      layer's upcall ([Tcp_icmp.of_ipv4] over IPv4); without it ICMP errors are ignored. *)

  val write : connection -> ?off:int -> ?len:int -> Cstruct.t -> int
  (** [write c b] copies as much of [b] as the send buffer takes and returns that count; zero when
      full or when [config.memory_limit] refused the connection a send buffer (wait for [Writable]
      in both cases), or when the connection can no longer send. *)

  val send_space : connection -> int
  (** Bytes {!write} would take now. *)

  val consume : connection -> int -> unit
  (** [consume c n] tells TCP that the application has used [n] bytes of what was delivered: the
      receive window opens by that much. *)

  val shutdown : connection -> unit
  (** [shutdown c] sends a FIN after the data already written; receiving goes on. *)

  val unlisten : t -> int -> unit
  (** [unlisten t port] stops accepting connections on [port]. *)

  val state : connection -> state
  val info : connection -> conn_info
  val local_port : connection -> int
  val remote : connection -> host * int
  val set_nodelay : connection -> bool -> unit
  val set_keepalive : connection -> keepalive option -> unit
  val pp_connection : connection Fmt.t
end
