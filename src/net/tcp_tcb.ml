open Consort
open Tcp_types
include Tcp_tcb_intf

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b
let src = Logs.Src.create "consort.tcp" ~doc:"TCP"

module Log = (val Logs.src_log src : Logs.LOG)

module Make
    (Lower : LOWER)
    (P :
      PARAMS
        with type host = Lower.host
         and type lower_address = Lower.address
         and type lower_pattern = Lower.address_pattern) =
struct
  type host = Lower.host
  type lower = Lower.t
  type lower_connection = Lower.connection
  type lower_status = Lower.status

  module Host_tbl = Hashtbl.Make (struct
    type t = host

    let equal = P.equal_host
    let hash = Hashtbl.hash
  end)

  module Key_tbl = Hashtbl.Make (struct
    type t = host * int * int

    let equal (h, p, l) (h', p', l') = p = p' && l = l' && P.equal_host h h'
    let hash = Hashtbl.hash
  end)

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

  let local = P.local
  let pp_host = P.pp_host
  let clock = P.clock
  let rng = P.rng
  let pool = P.pool
  let pseudo_header = P.pseudo_header
  let lower_send = Lower.send
  let lower_close = Lower.close
  let lower_headroom = Lower.headroom
  let lower_max_packet = Lower.max_packet
  let never = max_int
  let now () = clock.now ()

  (* {2 Upcalls} *)

  let defer t f = Queue.push f t.upcalls

  let flush t =
    if not t.flushing then begin
      t.flushing <- true;
      Fun.protect
        ~finally:(fun () -> t.flushing <- false)
        (fun () ->
          while not (Queue.is_empty t.upcalls) do
            (Queue.pop t.upcalls) ()
          done)
    end

  let notify tcb st =
    match tcb.handler with Some h -> defer tcb.inst (fun () -> h.status tcb st) | None -> ()

  let report tcb st =
    if not tcb.reported then begin
      tcb.reported <- true;
      notify tcb st
    end

  let pp_connection ppf tcb =
    Fmt.pf ppf "%d-%a:%d %a" tcb.local_port P.pp_host tcb.remote_host tcb.remote_port pp_state
      tcb.state

  (* {2 Sequence-space helpers} *)

  let data_end tcb = Tcp_seq.add tcb.buf_seq (Tcp_sndbuf.length tcb.sndbuf)
  let fin_acked tcb = tcb.fin_queued && Tcp_seq.gt tcb.snd_una (data_end tcb)
  let flight tcb = Tcp_seq.sub tcb.snd_max tcb.snd_una
  let ts_now tcb = ((now () / 1_000_000) + tcb.ts_offset) land 0xFFFF_FFFF

  (* Payload bytes per segment: the peer's MSS and our link, less the
     options every data segment carries. *)
  let mss_base tcb = max 1 (min tcb.peer_mss (tcb.lower_max - Tcp_wire.min_header))
  let smss tcb = max 1 (mss_base tcb - if tcb.ts_ok then 12 else 0)
  let sack_max tcb = Tcp_options.sack_max ~ts:tcb.ts_ok

  let options_len tcb =
    let sack_blocks =
      if tcb.sack_ok && not (Tcp_reass.is_empty tcb.reass && tcb.dsack = None) then
        min (sack_max tcb) (Tcp_reass.block_count tcb.reass + if tcb.dsack = None then 0 else 1)
      else 0
    in
    Tcp_options.length ~ts:tcb.ts_ok ~sack_blocks

  let capacity tcb = max 1 (mss_base tcb - options_len tcb)
  let restart_rtx tcb = tcb.t_rtx <- now () + Tcp_rto.rto tcb.rto

  (* RACK-TLP runs on connections that agreed on SACK. *)
  let rack_on tcb = tcb.cfg.rack && tcb.sack_ok

  let can_send_data tcb =
    match tcb.state with
    | Established | Close_wait | Fin_wait_1 | Closing | Last_ack -> true
    | _ -> false

  (* {2 Connection table} *)

  let key tcb = (tcb.remote_host, tcb.remote_port, tcb.local_port)

  (* Queues where most entries are gone are rebuilt, so that they stay
     within a constant of the live count. *)
  let compact q still live =
    if Queue.length q > (2 * live) + 64 then begin
      let keep = Queue.fold (fun acc tcb -> if still tcb then tcb :: acc else acc) [] q in
      Queue.clear q;
      List.iter (fun tcb -> Queue.push tcb q) (List.rev keep)
    end

  let release_lower t host =
    match Host_tbl.find_opt t.lower_conns host with
    | Some r ->
        r.refs <- r.refs - 1;
        if r.refs <= 0 then begin
          Host_tbl.remove t.lower_conns host;
          lower_close r.lc
        end
    | None -> ()

  let acquire_lower t host lconn =
    match Host_tbl.find_opt t.lower_conns host with
    | Some r -> r.refs <- r.refs + 1
    | None -> Host_tbl.replace t.lower_conns host { lc = lconn; refs = 1 }

  (* The oldest writer refused by the memory budget tries again: a send
     buffer came back, or a connection behind a zero window can be reset
     for it. One at a time, so that memory coming back costs a retry, not
     one for every writer waiting. *)
  let wake_memory_waiters t =
    let rec go () =
      match Queue.take_opt t.waiting_memory with
      | Some w
        when w.alive && w.want_writable && (not w.fin_queued) && Tcp_sndbuf.allocated w.sndbuf = 0
        ->
          notify w Writable
      | Some _ -> go ()
      | None -> ()
    in
    go ()

  (* A send buffer's memory back in the budget (config.memory_limit): a
     writer waiting for it tries again. *)
  let release_sndbuf tcb =
    let held = Tcp_sndbuf.allocated tcb.sndbuf in
    let b = Tcp_sndbuf.take tcb.sndbuf in
    if held > 0 then begin
      let t = tcb.inst in
      t.sndbuf_bytes <- t.sndbuf_bytes - held;
      (* Under pressure (half the budget in use), kept for the next
         connection, up to an eighth of the budget: the memory is reused,
         not left to the GC (which frees it late: 300 buffers reset in a row
         passed a 16 MiB budget by 12 MiB of garbage). Out of pressure the
         spares go. *)
      let limit = t.config.memory_limit in
      if 2 * (t.sndbuf_bytes + t.rcv_bytes + held) < limit then begin
        t.spares <- [];
        t.spare_bytes <- 0
      end
      else if 8 * (t.spare_bytes + held) <= limit then begin
        t.spares <- b :: t.spares;
        t.spare_bytes <- t.spare_bytes + held
      end;
      wake_memory_waiters tcb.inst
    end

  (* Receive memory in the budget (config.memory_limit): a connection is
     charged what it holds, the bytes delivered and not yet read and the
     pool segments its out-of-order queue pins. *)
  let recharge tcb =
    let c = if tcb.alive then tcb.unconsumed + Tcp_reass.pinned tcb.reass else 0 in
    let t = tcb.inst in
    t.rcv_bytes <- t.rcv_bytes + c - tcb.rcv_charged;
    tcb.rcv_charged <- c

  (* The window a connection offers comes from its share of the budget.
     Without pressure (every connection could fill its receive buffer in
     what the send buffers leave) the share is the receive buffer; under
     pressure it is an equal part of what the send buffers leave, and no
     more than the connection holds now and what is free: the windows
     shrink as connections come (never below what was offered: RFC 9293
     does not take a window back). A connection that holds nothing keeps a
     segment's worth, so that every one makes progress. *)
  let receive_share tcb =
    let t = tcb.inst in
    let buffer = tcb.cfg.receive_buffer in
    let room = t.config.memory_limit - t.sndbuf_bytes in
    let n = Key_tbl.length t.conns in
    if n * buffer <= room then buffer
    else begin
      let fair = room / max 1 n and free = room - t.rcv_bytes in
      let share = min buffer (min fair (tcb.rcv_charged + max 0 free)) in
      let share = if tcb.unconsumed = 0 then max share (min buffer tcb.rcv_mss) else share in
      if share < buffer then t.counters.c_window_cut <- t.counters.c_window_cut + 1;
      share
    end

  (* The send buffer a connection takes, as the receive windows: the
     whole send_buffer while every connection could hold one in what
     received data leaves; under pressure an equal part of it, rounded down
     to a power of two (so that a share changes seldom as connections come
     and go), never below send_share_min (Linux's sk_stream_moderate_sndbuf
     keeps a floor too). *)
  let send_share tcb =
    let t = tcb.inst in
    let full = tcb.cfg.send_buffer in
    let room = t.config.memory_limit - t.rcv_bytes in
    let n = max 1 (Key_tbl.length t.conns) in
    if n * full <= room then full
    else
      let fair = max 1 (room / n) in
      let rec pow2 p = if 2 * p <= fair then pow2 (2 * p) else p in
      max (min full t.config.send_share_min) (min full (pow2 1))

  (* A peer that sends past the shares (into a window offered before the
     pressure, or beyond the window) is dropped once the budget is spent,
     as Linux drops when tcp_mem is exhausted; a connection holding nothing
     still takes the segment. *)
  let over_budget tcb n =
    let t = tcb.inst in
    (tcb.unconsumed > 0 || not (Tcp_reass.is_empty tcb.reass))
    && t.sndbuf_bytes + t.rcv_bytes + n > t.config.memory_limit

  let delete tcb =
    if tcb.alive then begin
      tcb.alive <- false;
      tcb.alarm_cancel ();
      Key_tbl.remove tcb.inst.conns (key tcb);
      release_lower tcb.inst tcb.remote_host;
      Tcp_reass.clear tcb.reass;
      recharge tcb;
      release_sndbuf tcb;
      compact tcb.inst.buffered (fun b -> b.alive) (Key_tbl.length tcb.inst.conns);
      Tcp_rack.clear tcb.rack;
      (match (tcb.listener, tcb.handler) with
      | Some l, None -> l.half_open <- l.half_open - 1
      | _ -> ());
      if tcb.orphan then begin
        tcb.orphan <- false;
        tcb.inst.n_orphans <- tcb.inst.n_orphans - 1;
        compact tcb.inst.orphans (fun o -> o.alive && o.orphan) tcb.inst.n_orphans
      end;
      Log.debug (fun m -> m "%a: deleted" pp_connection tcb)
    end

  let fail tcb e =
    (* A timeout after an ICMP soft error is that error (RFC 1122 4.2.3.9). *)
    let e = match (e, tcb.soft_error) with `Timeout, Some m -> `Unreachable m | _ -> e in
    report tcb (Failed e);
    delete tcb

  let is_orphan tcb = tcb.alive && tcb.orphan

  (* {2 Options} *)

  let take_syn_options tcb (h : Tcp_packet.t) =
    let o = Tcp_options.of_syn h.options in
    tcb.peer_mss <- (match o.mss with Some n when n > 0 -> max n tcb.cfg.min_mss | _ -> 536);
    (match o.wscale with
    | Some s when tcb.offer_ws ->
        tcb.ws_ok <- true;
        tcb.snd_wscale <- s
    | _ ->
        tcb.ws_ok <- false;
        tcb.offer_ws <- false;
        tcb.snd_wscale <- 0;
        tcb.rcv_wscale <- 0);
    tcb.sack_ok <- tcb.offer_sack && o.sack_permitted;
    tcb.offer_sack <- tcb.sack_ok;
    match o.ts_val with
    | Some v when tcb.offer_ts ->
        tcb.ts_ok <- true;
        tcb.ts_recent <- v;
        tcb.ts_recent_age <- now ()
    | _ ->
        tcb.ts_ok <- false;
        tcb.offer_ts <- false

  (* {2 Creating connections} *)

  (* What the keyed functions of {!Tcp_secret} hash: the remote end and the
     local port (the local address is the instance's). *)
  let tuple ~remote ~rport ~lport = Fmt.str "%a/%d/%d" P.pp_host remote rport lport

  let gen_isn t ~remote ~rport ~lport =
    Tcp_secret.isn t.secret ~tuple:(tuple ~remote ~rport ~lport) ~now:(now ())

  let rcv_mss_for cfg lower_max =
    match cfg.mss with
    | Some m -> max 1 (min m (lower_max - Tcp_wire.min_header))
    | None -> max 1 (lower_max - Tcp_wire.min_header)

  let new_tcb ?iss t ~cfg ~lconn ~remote ~rport ~lport ~listener ~state =
    let iss = match iss with Some i -> i | None -> gen_isn t ~remote ~rport ~lport in
    let lower_max = lower_max_packet lconn in
    let rcv_mss = rcv_mss_for cfg lower_max in
    let bbr =
      match cfg.congestion with Bbr -> Some (Tcp_bbr.create ()) | New_reno | Cubic -> None
    in
    let tcb =
      {
        inst = t;
        cfg;
        remote_host = remote;
        remote_port = rport;
        local_port = lport;
        lconn;
        listener;
        state;
        handler = None;
        alive = true;
        reported = false;
        iss;
        snd_una = iss;
        snd_nxt = iss;
        snd_max = iss;
        snd_wnd = 0;
        max_snd_wnd = 0;
        snd_wl1 = Tcp_seq.zero;
        snd_wl2 = Tcp_seq.zero;
        sndbuf = Tcp_sndbuf.create cfg.send_buffer;
        buf_seq = Tcp_seq.succ iss;
        fin_queued = false;
        app_closed = false;
        want_writable = false;
        irs = Tcp_seq.zero;
        rcv_nxt = Tcp_seq.zero;
        rcv_adv = Tcp_seq.zero;
        unconsumed = 0;
        rcv_charged = 0;
        reass = Tcp_reass.create ~max_segments:cfg.max_ooo_segments;
        ooo_fin = None;
        fin_received = false;
        rcv_mss;
        lower_max;
        pmtu_high = lower_max + 1;
        pmtu_max = lower_max;
        pmtu_raise_at = never;
        mtu_probe = None;
        n_mtu_probes = 0;
        mtu_probe_losses = 0;
        buffer_queued = false;
        peer_mss = 536;
        offer_ws = cfg.window_scale;
        offer_sack = cfg.sack;
        offer_ts = cfg.timestamps;
        snd_wscale = 0;
        rcv_wscale = (if cfg.window_scale then Tcp_window.scale_for cfg.receive_buffer else 0);
        ws_ok = false;
        sack_ok = false;
        ts_ok = false;
        ts_recent = 0;
        ts_recent_age = 0;
        ts_offset = Tcp_secret.ts_offset t.secret ~tuple:(tuple ~remote ~rport ~lport);
        last_ack_sent = Tcp_seq.zero;
        rto = Tcp_rto.create ~initial:cfg.initial_rto ~min:cfg.min_rto ~max:cfg.max_rto;
        rtt_seq = None;
        rtt_time = 0;
        cc = (match bbr with Some b -> Tcp_cc.of_bbr b | None -> Tcp_cc.create cfg.congestion);
        bbr;
        rate = None;
        pace_next = 0;
        t_pace = never;
        dupacks = 0;
        recover = iss;
        in_recovery = false;
        high_rxt = iss;
        syn_retransmitted = false;
        last_data_sent = 0;
        sack = Tcp_sack.create ();
        rack = Tcp_rack.create ();
        tlp_end = None;
        tlp_rexmit = false;
        tlp_ts = 0;
        ack_now = false;
        segs_unacked = 0;
        t_rtx = never;
        t_persist = never;
        t_delack = never;
        t_keep = never;
        t_2msl = never;
        t_tlp = never;
        t_reo = never;
        armed = never;
        alarm_gen = 0;
        alarm_cancel = (fun () -> ());
        retries = 0;
        persist_backoff = 0;
        persist_probes = 0;
        keep_probes = 0;
        challenge_second = -1;
        challenge_left = 0;
        tw = None;
        orphan = false;
        dsack = None;
        soft_error = None;
        last_recv = now ();
        nodelay = cfg.nodelay;
        keepalive = cfg.keepalive;
        bytes_acked = 0;
        bytes_delivered = 0;
        n_retrans = 0;
        n_fast = 0;
        undo_retrans = -1;
        undo_cwnd = 0;
        undo_ssthresh = 0;
        undo_marker = Tcp_seq.zero;
        n_undos = 0;
        n_timeouts = 0;
        n_probes = 0;
        prr_delivered = 0;
        prr_out = 0;
        prr_fs = 0;
        retrans_stamp = None;
        undo_rto = false;
        rxt_high = Tcp_seq.zero;
      }
    in
    Key_tbl.replace t.conns (key tcb) tcb;
    acquire_lower t remote lconn;
    tcb
end
