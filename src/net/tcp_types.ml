open Consort

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

let pp_state ppf s =
  Fmt.string ppf
    (match s with
    | Closed -> "CLOSED"
    | Listen -> "LISTEN"
    | Syn_sent -> "SYN-SENT"
    | Syn_received -> "SYN-RECEIVED"
    | Established -> "ESTABLISHED"
    | Fin_wait_1 -> "FIN-WAIT-1"
    | Fin_wait_2 -> "FIN-WAIT-2"
    | Close_wait -> "CLOSE-WAIT"
    | Closing -> "CLOSING"
    | Last_ack -> "LAST-ACK"
    | Time_wait -> "TIME-WAIT")

type status = Connected | Writable | Peer_closed | Closed_normally | Failed of Protocol.error

let pp_status ppf = function
  | Connected -> Fmt.string ppf "connected"
  | Writable -> Fmt.string ppf "writable"
  | Peer_closed -> Fmt.string ppf "peer closed"
  | Closed_normally -> Fmt.string ppf "closed"
  | Failed e -> Fmt.pf ppf "failed: %a" Protocol.pp_error e

type congestion = New_reno | Cubic | Bbr

let pp_congestion ppf = function
  | New_reno -> Fmt.string ppf "newreno"
  | Cubic -> Fmt.string ppf "cubic"
  | Bbr -> Fmt.string ppf "bbr"

type keepalive = { idle : Time.t; interval : Time.t; probes : int }

type config = {
  mss : int option;
  send_buffer : int;
  receive_buffer : int;
  window_scale : bool;
  sack : bool;
  timestamps : bool;
  nodelay : bool;
  delayed_ack : Time.t;
  initial_rto : Time.t;
  min_rto : Time.t;
  max_rto : Time.t;
  initial_window : int option;
  syn_retries : int;
  max_retransmits : int;
  msl : Time.t;
  fin_wait_2_timeout : Time.t;
  keepalive : keepalive option;
  max_ooo_segments : int;
  backlog : int;
  challenge_ack_limit : int;
  congestion : congestion;
  rack : bool;
  plpmtud : bool;
  pmtu_raise : Consort.Time.t;
  syn_cookies : bool;
  min_mss : int;
  orphan_retries : int;
  max_connections : int;
  max_orphans : int;
  send_share_min : int;
  memory_limit : int;
}

let default_config =
  {
    mss = None;
    send_buffer = 256 * 1024;
    receive_buffer = 256 * 1024;
    window_scale = true;
    sack = true;
    timestamps = true;
    nodelay = false;
    delayed_ack = Time.of_ms 40;
    initial_rto = Time.of_ms 1000;
    min_rto = Time.of_ms 200;
    max_rto = Time.of_sec 60.;
    initial_window = None;
    syn_retries = 6;
    max_retransmits = 15;
    msl = Time.of_sec 30.;
    fin_wait_2_timeout = Time.of_sec 60.;
    keepalive = None;
    max_ooo_segments = 1024;
    backlog = 128;
    challenge_ack_limit = 10;
    congestion = Cubic;
    rack = true;
    plpmtud = true;
    pmtu_raise = Consort.Time.of_sec 600.;
    syn_cookies = true;
    min_mss = 48;
    orphan_retries = 8;
    max_connections = 16384;
    max_orphans = 4096;
    send_share_min = 16 * 1024;
    memory_limit = 128 * 1024 * 1024;
  }

let pp_config ppf c =
  Fmt.pf ppf
    "@[<v>mss %a@,\
     buffers send %d receive %d@,\
     wscale %b sack %b timestamps %b nodelay %b@,\
     delayed ack %a@,\
     rto initial %a min %a max %a@,\
     msl %a@]"
    Fmt.(option ~none:(any "auto") int)
    c.mss c.send_buffer c.receive_buffer c.window_scale c.sack c.timestamps c.nodelay Time.pp
    c.delayed_ack Time.pp c.initial_rto Time.pp c.min_rto Time.pp c.max_rto Time.pp c.msl

type conn_info = {
  state : state;
  snd_mss : int;
  rcv_mss : int;
  snd_wscale : int option;
  rcv_wscale : int option;
  sack_ok : bool;
  timestamps_ok : bool;
  srtt : Time.t option;
  rttvar : Time.t option;
  rto : Time.t;
  cwnd : int;
  ssthresh : int;
  snd_wnd : int;
  rcv_wnd : int;
  unacked : int;
  unsent : int;
  unread : int;
  bytes_sent : int;
  bytes_received : int;
  segments_retransmitted : int;
  fast_retransmits : int;
  undos : int;
  timeouts : int;
  probes : int;
  path_mtu : int;
  mtu_probes : int;
  ooo_segments : int;
  soft_error : string option;
}

let pp_conn_info ppf i =
  let o = Fmt.(option ~none:(any "-") int) in
  Fmt.pf ppf
    "%a mss %d/%d wscale %a/%a%s%s rtt %a/%a rto %a cwnd %d ssthresh %d snd_wnd %d rcv_wnd %d \
     unacked %d unsent %d unread %d sent %d received %d retrans %d fast %d undone %d timeouts %d \
     probes %d"
    pp_state i.state i.snd_mss i.rcv_mss o i.snd_wscale o i.rcv_wscale
    (if i.sack_ok then " sack" else "")
    (if i.timestamps_ok then " ts" else "")
    Fmt.(option ~none:(any "-") Time.pp)
    i.srtt
    Fmt.(option ~none:(any "-") Time.pp)
    i.rttvar Time.pp i.rto i.cwnd i.ssthresh i.snd_wnd i.rcv_wnd i.unacked i.unsent i.unread
    i.bytes_sent i.bytes_received i.segments_retransmitted i.fast_retransmits i.undos i.timeouts
    i.probes

type stats = {
  segments_in : int;
  segments_out : int;
  retransmitted : int;
  bad_checksum : int;
  malformed : int;
  resets_in : int;
  resets_out : int;
  challenge_acks : int;
  dropped : int;
  active : int;
  syn_cookies_sent : int;
  syn_cookies_accepted : int;
  memory : int;
  orphans : int;
  dsacks_sent : int;
  dsacks_received : int;
  memory_resets : int;
  memory_refused : int;
  send_memory : int;
  receive_memory : int;
  windows_cut : int;
  memory_drops : int;
  shares_cut : int;
  spares_reused : int;
}

let pp_stats ppf s =
  Fmt.pf ppf
    "in %d out %d retransmitted %d bad checksum %d malformed %d rst in %d out %d challenge acks %d \
     dropped %d active %d syn cookies %d/%d memory %d orphans %d dsack %d/%d memory resets %d \
     refused %d send %d receive %d windows cut %d drops %d shares cut %d spares reused %d"
    s.segments_in s.segments_out s.retransmitted s.bad_checksum s.malformed s.resets_in s.resets_out
    s.challenge_acks s.dropped s.active s.syn_cookies_accepted s.syn_cookies_sent s.memory s.orphans
    s.dsacks_received s.dsacks_sent s.memory_resets s.memory_refused s.send_memory s.receive_memory
    s.windows_cut s.memory_drops s.shares_cut s.spares_reused

type control = Set_config of config | Abort_all

module type LOWER = sig
  type host

  include Protocol.S

  val remote : connection -> host
end

module type PARAMS = sig
  type host
  type lower_address
  type lower_pattern

  val local : host
  val lower_address : host -> lower_address
  val lower_pattern : lower_pattern
  val pseudo_header : (src:host -> dst:host -> len:int -> int) option
  val equal_host : host -> host -> bool
  val pp_host : host Fmt.t
  val clock : Clock.t
  val rng : Rng.t
  val pool : Pool.t
end

module type S = sig
  type host
  type lower
  type tcp_address = { host : host; port : int; local_port : int option }
  type tcp_pattern = { port : int; from : host option }

  include
    Protocol.S
      with type address = tcp_address
       and type address_pattern = tcp_pattern
       and type status = status
       and type control = control
       and type info = stats

  type lower_status

  val create :
    ?config:config ->
    ?secret:string ->
    ?icmp:(lower_status -> Tcp_icmp.t option) ->
    lower ->
    (t, Protocol.error) result

  val write : connection -> ?off:int -> ?len:int -> Cstruct.t -> int
  val send_space : connection -> int
  val consume : connection -> int -> unit
  val shutdown : connection -> unit
  val unlisten : t -> int -> unit
  val state : connection -> state
  val info : connection -> conn_info
  val local_port : connection -> int
  val remote : connection -> host * int
  val set_nodelay : connection -> bool -> unit
  val set_keepalive : connection -> keepalive option -> unit
  val pp_connection : connection Fmt.t
end
