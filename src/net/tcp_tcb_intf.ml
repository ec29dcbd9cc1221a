(* The signature of {!Tcp_tcb.Make}: a TCP instance's records (the
   instance, listeners, connections, TIME-WAIT records), what the other
   parts of TCP need of the lower layer and the parameters, and the helpers
   they share. *)

open Consort
open Tcp_types

module type S = sig
  type host
  type lower
  type lower_connection
  type lower_status

  module Host_tbl : Hashtbl.S with type key = host
  module Key_tbl : Hashtbl.S with type key = host * int * int

  type counters = {
    mutable c_in : int;
    mutable c_out : int;
    mutable c_retrans : int;
    mutable c_bad_checksum : int;
    mutable c_malformed : int;
    mutable c_rst_in : int;
    mutable c_rst_out : int;
    mutable c_challenge : int;
    mutable c_dropped : int;
    mutable c_cookies_sent : int;
    mutable c_cookies_ok : int;
    mutable c_dsack_out : int;
    mutable c_dsack_in : int;
    mutable c_memory_resets : int;
    mutable c_memory_refused : int;
    mutable c_window_cut : int;
    mutable c_memory_drops : int;
    mutable c_shares_cut : int;
    mutable c_spares_reused : int;
  }

  type t = {
    lower : lower;
    mutable config : config;
    conns : tcb Key_tbl.t;
    listeners : (int, listener) Hashtbl.t;
    lower_conns : lower_ref Host_tbl.t;
    secret : Tcp_secret.t;
    port_counters : int array;
        (** ephemeral port counters, one per destination hashed (RFC 6056 algorithm 4) *)
    upcalls : (unit -> unit) Queue.t;
    mutable flushing : bool;
    icmp : lower_status -> Tcp_icmp.t option;
    orphans : tcb Queue.t;  (** closed by the application, oldest first (some gone) *)
    mutable n_orphans : int;
    buffered : tcb Queue.t;  (** connections holding a send buffer, oldest first (some gone) *)
    mutable sndbuf_bytes : int;  (** the memory of every send buffer *)
    mutable spares : Cstruct.t list;
        (** send buffers given back, kept for the next (within the budget with those in use), so
            that memory is reused rather than left for the GC *)
    mutable spare_bytes : int;
    mutable rcv_bytes : int;
        (** receive memory: what connections hold unread and the windows they have open *)
    waiting_memory : tcb Queue.t;  (** writers the memory budget refused a send buffer *)
    time_wait : tw Key_tbl.t;
    tw_queue : tw Queue.t;  (** by deadline *)
    mutable tw_armed : Time.t;
    mutable tw_gen : int;
    counters : counters;
  }

  (* The lower connection to a host, shared by the connections with it and
     closed when the last one goes (so that the layer below forgets a
     host that TCP no longer talks to). *)
  and lower_ref = { lc : lower_connection; mutable refs : int }

  and listener = {
    l_port : int;
    l_from : host option;
    l_make : tcb -> handler;
    mutable half_open : int;
    mutable overflowed : Time.t;  (** when SYN cookies were last sent *)
  }

  and tcb = {
    inst : t;
    cfg : config;
    remote_host : host;
    remote_port : int;
    local_port : int;
    lconn : lower_connection;
    listener : listener option;
    mutable state : state;
    mutable handler : handler option;
    mutable alive : bool;
    mutable reported : bool;
    (* Send sequence space. *)
    iss : Tcp_seq.t;
    mutable snd_una : Tcp_seq.t;
    mutable snd_nxt : Tcp_seq.t;
    mutable snd_max : Tcp_seq.t;
    mutable snd_wnd : int;
    mutable max_snd_wnd : int;
    mutable snd_wl1 : Tcp_seq.t;
    mutable snd_wl2 : Tcp_seq.t;
    sndbuf : Tcp_sndbuf.t;
    mutable buf_seq : Tcp_seq.t;
    mutable fin_queued : bool;
    mutable app_closed : bool;
    mutable want_writable : bool;
    (* Receive sequence space. *)
    mutable irs : Tcp_seq.t;
    mutable rcv_nxt : Tcp_seq.t;
    mutable rcv_adv : Tcp_seq.t;
    mutable unconsumed : int;
    mutable rcv_charged : int;  (** this connection's part of [rcv_bytes] *)
    reass : Tcp_reass.t;
    mutable ooo_fin : Tcp_seq.t option;
    mutable fin_received : bool;
    (* Options. *)
    rcv_mss : int;
    mutable lower_max : int;  (** the largest segment we send (RFC 1191, RFC 8899) *)
    mutable pmtu_high : int;  (** the smallest segment size known too big for the path *)
    mutable pmtu_max : int;  (** the largest segment the lower layer (or ICMP) allows *)
    mutable pmtu_raise_at : Time.t;  (** when a closed search below [pmtu_max] opens again *)
    mutable mtu_probe : (Tcp_seq.t * Tcp_seq.t * int) option;  (** in flight: its range, its size *)
    mutable n_mtu_probes : int;
    mutable mtu_probe_losses : int;  (** probes of the size being tried lost in a row *)
    mutable buffer_queued : bool;  (** in the instance's [buffered] queue *)
    mutable peer_mss : int;
    mutable offer_ws : bool;
    mutable offer_sack : bool;
    mutable offer_ts : bool;
    mutable snd_wscale : int;
    mutable rcv_wscale : int;
    mutable ws_ok : bool;
    mutable sack_ok : bool;
    mutable ts_ok : bool;
    mutable ts_recent : int;
    mutable ts_recent_age : Time.t;
    ts_offset : int;
    mutable last_ack_sent : Tcp_seq.t;
    (* Round-trip time. *)
    rto : Tcp_rto.t;
    mutable rtt_seq : Tcp_seq.t option;
    mutable rtt_time : Time.t;
    (* Congestion control. *)
    cc : Tcp_cc.t;
    bbr : Tcp_bbr.t option;  (** [cc]'s state when it is BBR: rate samples and pacing *)
    mutable rate : Tcp_rate.t option;
        (** delivery-rate records, made at the first segment sent if [bbr] is there *)
    mutable pace_next : Time.t;  (** when pacing lets the next data segment go *)
    mutable t_pace : Time.t;  (** the pacing timer *)
    mutable dupacks : int;
    mutable recover : Tcp_seq.t;
    mutable in_recovery : bool;
    mutable high_rxt : Tcp_seq.t;
    mutable syn_retransmitted : bool;
    mutable last_data_sent : Time.t;
    sack : Tcp_sack.t;
    rack : Tcp_rack.t;
    mutable tlp_end : Tcp_seq.t option;
        (** SND.MAX when a loss probe went, until its episode ends *)
    mutable tlp_rexmit : bool;  (** the probe sent old data again *)
    mutable tlp_ts : int;  (** our timestamp when it went *)
    (* Acknowledgements. *)
    mutable ack_now : bool;
    mutable segs_unacked : int;
    (* Timers: deadlines, [never] when off. *)
    mutable t_rtx : Time.t;
    mutable t_persist : Time.t;
    mutable t_delack : Time.t;
    mutable t_keep : Time.t;
    mutable t_2msl : Time.t;
    mutable t_tlp : Time.t;  (** the loss probe (RFC 8985 section 7) *)
    mutable t_reo : Time.t;  (** RACK's reordering timer *)
    mutable armed : Time.t;
    mutable alarm_gen : int;
    mutable alarm_cancel : Clock.cancel;
    mutable retries : int;
    mutable persist_backoff : int;
    mutable persist_probes : int;
    mutable keep_probes : int;
    mutable challenge_second : int;
    mutable challenge_left : int;
    mutable tw : tw option;  (** its TIME-WAIT record, once in TIME-WAIT *)
    mutable orphan : bool;  (** counted in [n_orphans] *)
    mutable dsack : (Tcp_seq.t * Tcp_seq.t) option;  (** a duplicate to report (RFC 2883) *)
    mutable soft_error : string option;
    mutable last_recv : Time.t;
    mutable nodelay : bool;
    mutable keepalive : keepalive option;
    (* Counters. *)
    mutable bytes_acked : int;
    mutable bytes_delivered : int;
    mutable n_retrans : int;
    mutable n_fast : int;
    mutable undo_retrans : int;
        (** retransmissions of the recovery not yet reported needless by a D-SACK; -1: none to undo
        *)
    mutable undo_cwnd : int;  (** the windows before the recovery *)
    mutable undo_ssthresh : int;
    mutable undo_marker : Tcp_seq.t;  (** SND.UNA when the recovery began *)
    mutable n_undos : int;
    mutable n_timeouts : int;
    mutable n_probes : int;
    (* Proportional rate reduction (RFC 6937) in a SACK recovery. *)
    mutable prr_delivered : int;  (** bytes delivered to the peer since the recovery began *)
    mutable prr_out : int;  (** bytes sent since *)
    mutable prr_fs : int;  (** the window before the recovery (Linux's prior_cwnd) *)
    mutable retrans_stamp : int option;
        (** our timestamp of the first retransmission of a recovery or timeout, while it may be
            undone (Eifel detection, RFC 3522) *)
    mutable undo_rto : bool;  (** the episode to undo began with a timeout *)
    mutable rxt_high : Tcp_seq.t;  (** the end of the episode's highest retransmission *)
  }

  (* TIME-WAIT as a small record: what it takes to acknowledge a
     retransmitted FIN and to recognise a new incarnation; the connection
     and its buffers are gone. *)
  and tw = {
    tw_remote : host;
    tw_rport : int;
    tw_lport : int;
    tw_lconn : lower_connection;
    tw_snd_nxt : Tcp_seq.t;
    tw_rcv_nxt : Tcp_seq.t;
    tw_window : int;  (** the window field to send *)
    tw_msl : Time.t;
    tw_ts_ok : bool;
    tw_ts_offset : int;
    mutable tw_ts_recent : int;
    mutable tw_ts_recent_age : Time.t;
    mutable tw_expires : Time.t;
    mutable tw_deadline : Time.t;  (** its place in the queue *)
    mutable tw_live : bool;
  }

  and connection = tcb

  and handler = {
    receive : connection -> Packet.t -> unit;
    status : connection -> Tcp_types.status -> unit;
  }

  (** {1 The lower layer and the parameters} *)

  val local : host
  val pp_host : host Fmt.t
  val clock : Clock.t
  val rng : Rng.t
  val pool : Pool.t
  val pseudo_header : (src:host -> dst:host -> len:int -> int) option
  val lower_send : lower_connection -> Packet.t -> (unit, Protocol.error) result
  val lower_close : lower_connection -> unit
  val lower_headroom : lower -> int
  val lower_max_packet : lower_connection -> int

  (** {1 Time and upcalls} *)

  val never : Time.t
  (** A deadline that never comes. *)

  val now : unit -> Time.t

  val defer : t -> (unit -> unit) -> unit
  (** [defer t f] queues the upcall [f], made by {!flush}. *)

  val flush : t -> unit
  (** Makes the queued upcalls (not from inside one). *)

  val notify : tcb -> status -> unit

  val report : tcb -> status -> unit
  (** [report] notifies the last status, once. *)

  val pp_connection : tcb Fmt.t

  (** {1 Sequence space and segment sizes} *)

  val data_end : tcb -> Tcp_seq.t
  val fin_acked : tcb -> bool
  val flight : tcb -> int
  val ts_now : tcb -> int
  val mss_base : tcb -> int
  val smss : tcb -> int
  val sack_max : tcb -> int
  val options_len : tcb -> int
  val capacity : tcb -> int
  val can_send_data : tcb -> bool
  val rack_on : tcb -> bool
  val restart_rtx : tcb -> unit

  (** {1 The connection table} *)

  val key : tcb -> host * int * int
  val compact : tcb Queue.t -> (tcb -> bool) -> int -> unit
  val acquire_lower : t -> host -> lower_connection -> unit
  val release_lower : t -> host -> unit
  val wake_memory_waiters : t -> unit
  val release_sndbuf : tcb -> unit

  val recharge : tcb -> unit
  (** [rcv_bytes] brought up to date with what the connection holds now. *)

  val receive_share : tcb -> int
  (** The receive buffer the connection may advertise a window for now. *)

  val send_share : tcb -> int
  (** The send buffer the connection takes at its next first write. *)

  val over_budget : tcb -> int -> bool
  (** Whether [n] more bytes received would pass the budget (a connection that holds nothing
      received always takes a segment). *)

  val delete : tcb -> unit
  val fail : tcb -> Protocol.error -> unit
  val is_orphan : tcb -> bool

  (** {1 Creating connections} *)

  val tuple : remote:host -> rport:int -> lport:int -> string
  val rcv_mss_for : config -> int -> int

  val new_tcb :
    ?iss:Tcp_seq.t ->
    t ->
    cfg:config ->
    lconn:lower_connection ->
    remote:host ->
    rport:int ->
    lport:int ->
    listener:listener option ->
    state:state ->
    tcb

  val take_syn_options : tcb -> Tcp_packet.t -> unit
end
