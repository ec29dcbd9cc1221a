open Consort
include Tcp_types

let src = Logs.Src.create "consort.tcp" ~doc:"TCP"

module Log = (val Logs.src_log src : Logs.LOG)

let never = max_int

module Make
    (Lower : LOWER)
    (P : PARAMS
           with type host = Lower.host
            and type lower_address = Lower.address
            and type lower_pattern = Lower.address_pattern) =
struct
  type host = Lower.host
  type lower = Lower.t
  type lower_status = Lower.status
  type tcp_address = { host : host; port : int; local_port : int option }
  type tcp_pattern = { port : int; from : host option }
  type address = tcp_address
  type address_pattern = tcp_pattern
  type nonrec status = status
  type nonrec control = control
  type info = stats

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
  }

  type t = {
    lower : Lower.t;
    mutable config : config;
    conns : tcb Key_tbl.t;
    listeners : (int, listener) Hashtbl.t;
    lower_conns : lower_ref Host_tbl.t;
    secret : Tcp_secret.t;
    mutable next_ephemeral : int;
    upcalls : (unit -> unit) Queue.t;
    mutable flushing : bool;
    icmp : Lower.status -> Tcp_icmp.t option;
    orphans : tcb Queue.t;  (** closed by the application, oldest first (some gone) *)
    mutable n_orphans : int;
    time_wait : tw Key_tbl.t;
    tw_queue : tw Queue.t;  (** by deadline *)
    mutable tw_armed : Time.t;
    mutable tw_gen : int;
    counters : counters;
  }

  (* The lower connection to a host, shared by the connections with it and
     closed when the last one goes (so that the layer below forgets a
     host that TCP no longer talks to). *)
  and lower_ref = { lc : Lower.connection; mutable refs : int }

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
    lconn : Lower.connection;
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
    reass : Tcp_reass.t;
    mutable ooo_fin : Tcp_seq.t option;
    mutable fin_received : bool;
    (* Options. *)
    rcv_mss : int;
    mutable lower_max : int;  (** the largest segment we send (RFC 1191, RFC 8899) *)
    mutable pmtu_high : int;  (** the smallest segment size known too big for the path *)
    mutable mtu_probe : (Tcp_seq.t * Tcp_seq.t * int) option;  (** in flight: its range, its size *)
    mutable n_mtu_probes : int;
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
    mutable dupacks : int;
    mutable recover : Tcp_seq.t;
    mutable in_recovery : bool;
    mutable high_rxt : Tcp_seq.t;
    mutable syn_retransmitted : bool;
    mutable last_data_sent : Time.t;
    sack : Tcp_sack.t;
    rack : Tcp_rack.t;
    mutable tlp_end : Tcp_seq.t option;  (** SND.MAX when a loss probe went, until its episode ends *)
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
    mutable n_timeouts : int;
    mutable n_probes : int;
  }

  (* TIME-WAIT as a small record: what it takes to acknowledge a
     retransmitted FIN and to recognise a new incarnation; the connection
     and its buffers are gone. *)
  and tw = {
    tw_remote : host;
    tw_rport : int;
    tw_lport : int;
    tw_lconn : Lower.connection;
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
  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let now () = P.clock.now ()

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
        min (sack_max tcb)
          (List.length (Tcp_reass.blocks tcb.reass) + if tcb.dsack = None then 0 else 1)
      else 0
    in
    Tcp_options.length ~ts:tcb.ts_ok ~sack_blocks

  let capacity tcb = max 1 (mss_base tcb - options_len tcb)

  (* {2 Timers} *)

  let restart_rtx tcb = tcb.t_rtx <- now () + Tcp_rto.rto tcb.rto

  (* RACK-TLP runs on connections that agreed on SACK. *)
  let rack_on tcb = tcb.cfg.rack && tcb.sack_ok

  (* The loss probe's timer (RFC 8985 section 7.2): two smoothed RTTs, plus
     the worst delayed ACK when one segment is out, at most the RTO; not
     armed in recovery, or while a probe's episode lasts. *)
  let arm_tlp tcb =
    tcb.t_tlp <- never;
    if
      rack_on tcb && (not tcb.in_recovery) && tcb.tlp_end = None
      && Tcp_seq.lt tcb.snd_una tcb.snd_max
      && (match tcb.state with Established | Close_wait | Fin_wait_1 | Closing | Last_ack -> true | _ -> false)
    then
      match Tcp_rto.srtt tcb.rto with
      | None -> ()
      | Some srtt ->
          let pto = 2 * srtt in
          let pto =
            if Tcp_seq.sub tcb.snd_max tcb.snd_una <= smss tcb then pto + Time.of_ms 200
            else pto + Time.of_ms 2
          in
          (* Never later than the RTO: the probe goes in its place (as
             Linux), without the backoff and the collapse of the window. *)
          tcb.t_tlp <- min (now () + pto) (tcb.t_rtx - 1)

  (* {2 Output} *)

  let advertise tcb ~syn =
    let field, edge =
      Tcp_window.advertise ~buffer:tcb.cfg.receive_buffer ~unconsumed:tcb.unconsumed
        ~rcv_nxt:tcb.rcv_nxt ~rcv_adv:tcb.rcv_adv ~rcv_mss:tcb.rcv_mss
        ~shift:(if syn then 0 else tcb.rcv_wscale)
    in
    if tcb.state <> Syn_sent then tcb.rcv_adv <- edge;
    field

  let checksum_into ~dst pkt =
    match P.pseudo_header with
    | None -> ()
    | Some f ->
        let cs = Packet.cstruct pkt in
        let init = f ~src:P.local ~dst ~len:(Cstruct.length cs) in
        Tcp_wire.set_checksum cs (Tcp_checksum.finish (Tcp_checksum.sum ~init cs))

  let transmit t lconn ~dst pkt =
    checksum_into ~dst pkt;
    t.counters.c_out <- t.counters.c_out + 1;
    match Lower.send lconn pkt with
    | Ok () -> ()
    | Error e -> Log.debug (fun m -> m "lower layer refused a segment: %a" Protocol.pp_error e)

  let syn_options tcb ~reply =
    Tcp_options.syn ~mss:tcb.rcv_mss
      ~wscale:(if tcb.offer_ws then Some tcb.rcv_wscale else None)
      ~sack:tcb.offer_sack
      ~ts:(if tcb.offer_ts then Some (ts_now tcb, if reply then tcb.ts_recent else 0) else None)

  let emit ?(syn = false) ?(fin = false) ?(rst = false) ?(ack = true) tcb ~seq ~len =
    let t = tcb.inst in
    let options =
      if syn then syn_options tcb ~reply:ack
      else
        Tcp_options.data
          ~ts:(if tcb.ts_ok && not rst then Some (ts_now tcb, tcb.ts_recent) else None)
          ~sack:
            (if tcb.sack_ok && (not rst) && not (Tcp_reass.is_empty tcb.reass && tcb.dsack = None)
             then begin
               (* A duplicate goes first, once (RFC 2883). *)
               let d = match tcb.dsack with Some b -> [ b ] | None -> [] in
               if d <> [] then t.counters.c_dsack_out <- t.counters.c_dsack_out + 1;
               tcb.dsack <- None;
               d @ Tcp_reass.sack_blocks tcb.reass ~max:(sack_max tcb - List.length d)
             end
             else [])
    in
    let window = if rst then 0 else advertise tcb ~syn in
    let psh = len > 0 && Tcp_seq.equal (Tcp_seq.add seq len) (data_end tcb) in
    let hdr =
      {
        Tcp_packet.src_port = tcb.local_port;
        dst_port = tcb.remote_port;
        seq;
        ack = (if ack then tcb.rcv_nxt else Tcp_seq.zero);
        flags = { Tcp_packet.no_flags with syn; fin; rst; ack; psh };
        window;
        urgent = 0;
        options;
      }
    in
    let hl = Tcp_packet.header_length hdr in
    let pkt = Packet.create ~headroom:(hl + Lower.headroom t.lower) P.pool len in
    if len > 0 then
      Tcp_sndbuf.blit_out tcb.sndbuf ~src_off:(Tcp_seq.sub seq tcb.buf_seq) (Packet.cstruct pkt)
        ~dst_off:0 ~len;
    Tcp_packet.encode_into hdr (Packet.push pkt hl);
    if ack then begin
      tcb.last_ack_sent <- tcb.rcv_nxt;
      tcb.ack_now <- false;
      tcb.segs_unacked <- 0;
      tcb.t_delack <- never
    end;
    if rst then t.counters.c_rst_out <- t.counters.c_rst_out + 1;
    Log.debug (fun m -> m "%a: send %a len %d" pp_connection tcb Tcp_packet.pp hdr len);
    transmit t tcb.lconn ~dst:tcb.remote_host pkt

  let initial_cwnd tcb =
    let smss = smss tcb in
    if tcb.syn_retransmitted then smss
    else
      match tcb.cfg.initial_window with
      | Some n -> max 1 n * smss
      | None -> if smss > 2190 then 2 * smss else if smss > 1095 then 3 * smss else 4 * smss

  (* Send a data segment (new or retransmitted) starting at [seq]. *)
  let send_data ?(probe = false) tcb ~seq ~len =
    (* RFC 5681 section 4.1: after an idle period longer than the RTO,
       start again from the initial window. *)
    if
      Tcp_seq.equal tcb.snd_una tcb.snd_max
      && Tcp_seq.geq seq tcb.snd_max
      && now () - tcb.last_data_sent > Tcp_rto.rto tcb.rto
    then Tcp_cc.on_idle tcb.cc ~initial:(initial_cwnd tcb);
    if len > 0 then tcb.last_data_sent <- now ();
    let fin =
      tcb.fin_queued && Tcp_seq.equal (Tcp_seq.add seq len) (data_end tcb)
      && tcb.state <> Syn_received
    in
    let seg_end = Tcp_seq.add seq (len + if fin then 1 else 0) in
    let fresh = Tcp_seq.gt seg_end tcb.snd_max in
    if Tcp_seq.lt seq tcb.snd_max then begin
      tcb.n_retrans <- tcb.n_retrans + 1;
      tcb.inst.counters.c_retrans <- tcb.inst.counters.c_retrans + 1;
      match tcb.rtt_seq with
      | Some r when Tcp_seq.between r ~low:seq ~high:seg_end -> tcb.rtt_seq <- None
      | _ -> ()
    end;
    if Tcp_seq.gt seg_end tcb.snd_max then begin
      tcb.t_persist <- never;
      tcb.persist_backoff <- 0;
      if tcb.rtt_seq = None then begin
        tcb.rtt_seq <- Some seq;
        tcb.rtt_time <- now ()
      end;
      tcb.snd_max <- seg_end
    end;
    if rack_on tcb && Tcp_seq.gt seg_end seq then Tcp_rack.sent ~fin tcb.rack ~seq ~end_:seg_end ~now:(now ());
    emit tcb ~fin ~seq ~len;
    if tcb.t_rtx = never then restart_rtx tcb;
    if fresh && not probe then arm_tlp tcb;
    seg_end

  let send_syn tcb =
    let ack = tcb.state = Syn_received in
    if Tcp_seq.leq tcb.snd_max tcb.iss && not tcb.syn_retransmitted then begin
      tcb.rtt_seq <- Some tcb.iss;
      tcb.rtt_time <- now ()
    end;
    emit tcb ~syn:true ~ack ~seq:tcb.iss ~len:0;
    if Tcp_seq.leq tcb.snd_max tcb.iss then tcb.snd_max <- Tcp_seq.succ tcb.iss;
    tcb.snd_nxt <- Tcp_seq.succ tcb.iss;
    if tcb.t_rtx = never then restart_rtx tcb

  let can_send_data tcb =
    match tcb.state with
    | Established | Close_wait | Fin_wait_1 | Closing | Last_ack -> true
    | _ -> false

  (* Skip over data the receiver already SACKed when going back after a
     timeout. *)
  let skip_sacked tcb =
    if tcb.sack_ok && Tcp_seq.lt tcb.snd_nxt tcb.snd_max then begin
      let s, _ = Tcp_sack.hole tcb.sack tcb.snd_nxt in
      tcb.snd_nxt <- Tcp_seq.min s tcb.snd_max
    end

  (* The next segment to send from [snd_nxt] under the windows, or
     nothing (Nagle, receiver window, congestion window). *)
  let next_new tcb ~budget ~force =
    skip_sacked tcb;
    let avail = Tcp_seq.sub (data_end tcb) tcb.snd_nxt in
    let cap = capacity tcb in
    let cap =
      if tcb.sack_ok && Tcp_seq.lt tcb.snd_nxt tcb.snd_max then
        match Tcp_sack.hole tcb.sack tcb.snd_nxt with
        | _, Some l -> min cap (Tcp_seq.sub l tcb.snd_nxt)
        | _, None -> cap
      else cap
    in
    let wnd = Tcp_seq.sub (Tcp_seq.add tcb.snd_una tcb.snd_wnd) tcb.snd_nxt in
    let wnd = if force then max wnd 1 else wnd in
    let usable = min wnd budget in
    let len = max 0 (min avail (min cap usable)) in
    let fin_pending =
      tcb.fin_queued && not (Tcp_seq.gt tcb.snd_nxt (data_end tcb))
    in
    if len > 0 then
      let retransmission = Tcp_seq.lt tcb.snd_nxt tcb.snd_max in
      let all = len = avail in
      if
        force || retransmission || len = cap
        || (all && (tcb.nodelay || Tcp_seq.equal tcb.snd_nxt tcb.snd_una || tcb.fin_queued))
        || (tcb.max_snd_wnd > 0 && len >= tcb.max_snd_wnd / 2 && len = usable)
      then Some len
      else None
    else if avail = 0 && fin_pending then Some 0
    else None

  (* {2 Path MTU probing (RFC 8899 section 5, RFC 4821)} *)

  (* The search stops when the size in use is this close to the smallest
     known too big. *)
  let probe_margin = 16

  (* The smallest segment the search goes down to. *)
  let pmtu_floor tcb = tcb.cfg.min_mss + Tcp_wire.min_header + if tcb.ts_ok then 12 else 0

  (* While the search is open, one segment of the middle size, of new
     data: only when there is enough to fill it and both windows allow it,
     never in recovery, one at a time. *)
  let send_mtu_probe tcb =
    if
      tcb.cfg.plpmtud && tcb.mtu_probe = None && (not tcb.in_recovery)
      && (tcb.state = Established || tcb.state = Close_wait)
      && tcb.pmtu_high - tcb.lower_max > probe_margin
      && tcb.lower_max - Tcp_wire.min_header < tcb.peer_mss
      && Tcp_seq.geq tcb.snd_nxt tcb.snd_max
    then begin
      let size = min ((tcb.lower_max + tcb.pmtu_high) / 2) (tcb.peer_mss + Tcp_wire.min_header) in
      let len = size - Tcp_wire.min_header - options_len tcb in
      let avail = Tcp_seq.sub (data_end tcb) tcb.snd_nxt in
      let wnd = Tcp_seq.sub (Tcp_seq.add tcb.snd_una tcb.snd_wnd) tcb.snd_nxt in
      let cwnd = Tcp_cc.cwnd tcb.cc - Tcp_seq.sub tcb.snd_nxt tcb.snd_una in
      if size > tcb.lower_max && len > capacity tcb && avail >= len && wnd >= len && cwnd >= len
      then begin
        let s = tcb.snd_nxt in
        let e = send_data tcb ~seq:s ~len in
        tcb.snd_nxt <- e;
        tcb.mtu_probe <- Some (s, e, size);
        tcb.n_mtu_probes <- tcb.n_mtu_probes + 1;
        Log.debug (fun m -> m "%a: path MTU probe of %d bytes" pp_connection tcb size);
        true
      end
      else false
    end
    else false

  let mtu_probe_failed tcb =
    match tcb.mtu_probe with
    | Some (_, _, size) ->
        tcb.mtu_probe <- None;
        tcb.pmtu_high <- min tcb.pmtu_high size;
        Log.debug (fun m -> m "%a: path MTU probe of %d bytes lost" pp_connection tcb size)
    | None -> ()

  (* The probe arrived (acknowledged or SACKed): the path carries it. *)
  let mtu_probe_check tcb =
    match tcb.mtu_probe with
    | Some (s, e, size)
      when Tcp_seq.geq tcb.snd_una e
           || tcb.sack_ok
              && Tcp_sack.unsacked_between tcb.sack (Tcp_seq.max s tcb.snd_una)
                   (Tcp_seq.min e (data_end tcb))
                 = 0 ->
        tcb.mtu_probe <- None;
        if size > tcb.lower_max then tcb.lower_max <- size;
        Log.debug (fun m -> m "%a: path MTU probe of %d bytes arrived" pp_connection tcb size)
    | _ -> ()

  let limited_transmit tcb = if tcb.in_recovery then 0 else min tcb.dupacks 2 * smss tcb

  let output ?(force = false) tcb =
    if tcb.alive then begin
      let sent = ref false in
      if can_send_data tcb then begin
        let smss = smss tcb in
        let continue = ref true and n = ref 0 and force = ref force in
        while !continue && !n < 10_000 do
          incr n;
          if tcb.in_recovery && tcb.sack_ok then begin
            let rack = rack_on tcb in
            let pipe =
              if rack then Tcp_rack.pipe tcb.rack
              else
                Tcp_sack.pipe tcb.sack ~una:tcb.snd_una ~high_rxt:tcb.high_rxt
                  ~high_data:tcb.snd_max ~smss
            in
            if Tcp_cc.cwnd tcb.cc - pipe < smss && not !force then continue := false
            else
              let rexmit s len =
                let len = max 1 (min len (Tcp_seq.sub tcb.snd_max s)) in
                let len = min len (Tcp_seq.sub (data_end tcb) s) in
                let e = send_data tcb ~seq:s ~len:(max 0 len) in
                tcb.high_rxt <- Tcp_seq.max tcb.high_rxt e;
                sent := true
              in
              (* With RACK, what it marked lost goes first, then new data;
                 RFC 6675's rules apply without it. *)
              match
                if rack then
                  match Tcp_rack.next_lost tcb.rack with
                  | Some (s, len) -> `Lost (s, min len (capacity tcb))
                  | None -> `None
                else Tcp_sack.next_seg tcb.sack ~una:tcb.snd_una ~high_rxt:tcb.high_rxt ~smss
              with
              | `Lost (s, len) -> rexmit s len
              | (`Unsacked _ | `None) as r -> (
                  let budget = Tcp_cc.cwnd tcb.cc - pipe in
                  match
                    if Tcp_seq.geq tcb.snd_nxt tcb.snd_max then next_new tcb ~budget ~force:false
                    else None
                  with
                  | Some len ->
                      tcb.snd_nxt <- send_data tcb ~seq:tcb.snd_nxt ~len;
                      sent := true
                  | None -> (
                      match r with
                      | `Unsacked (s, len) -> rexmit s len
                      | `None -> continue := false))
          end
          else begin
            let budget =
              if !force then max_int
              else Tcp_cc.cwnd tcb.cc + limited_transmit tcb - Tcp_seq.sub tcb.snd_nxt tcb.snd_una
            in
            if (not !force) && send_mtu_probe tcb then sent := true
            else
            match next_new tcb ~budget ~force:!force with
            | Some len ->
                let seq = tcb.snd_nxt in
                let e = send_data tcb ~seq ~len in
                tcb.snd_nxt <- Tcp_seq.max tcb.snd_nxt e;
                sent := true
            | None -> continue := false
          end;
          force := false
        done;
        (* Persist: data waits, nothing is in flight, and the window (or
           sender SWS avoidance) keeps it back. *)
        let avail = Tcp_seq.sub (data_end tcb) tcb.snd_nxt in
        if avail > 0 && Tcp_seq.equal tcb.snd_una tcb.snd_max && tcb.t_persist = never then begin
          tcb.t_rtx <- never;
          tcb.t_persist <- now () + Tcp_rto.rto tcb.rto
        end
      end;
      if tcb.ack_now && not !sent then begin
        match tcb.state with
        | Syn_sent | Closed | Listen -> ()
        | Syn_received -> send_syn tcb
        | _ -> emit tcb ~seq:tcb.snd_nxt ~len:0
      end
    end

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
          Lower.close r.lc
        end
    | None -> ()

  let acquire_lower t host lconn =
    match Host_tbl.find_opt t.lower_conns host with
    | Some r -> r.refs <- r.refs + 1
    | None -> Host_tbl.replace t.lower_conns host { lc = lconn; refs = 1 }

  let delete tcb =
    if tcb.alive then begin
      tcb.alive <- false;
      tcb.alarm_cancel ();
      Key_tbl.remove tcb.inst.conns (key tcb);
      release_lower tcb.inst tcb.remote_host;
      Tcp_reass.clear tcb.reass;
      Tcp_sndbuf.release tcb.sndbuf;
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

  let send_rst tcb =
    if tcb.alive then emit tcb ~rst:true ~ack:false ~seq:tcb.snd_max ~len:0

  (* {2 Limits} *)

  (* The oldest connection of [q] that [still] holds for, forgetting the
     others on the way. *)
  let rec oldest q still =
    match Queue.peek_opt q with
    | Some tcb when still tcb -> Some tcb
    | Some _ ->
        ignore (Queue.pop q : tcb);
        oldest q still
    | None -> None

  let evict tcb why =
    Log.debug (fun m -> m "%a: reset (%s)" pp_connection tcb why);
    send_rst tcb;
    fail tcb `Closed

  let is_orphan tcb = tcb.alive && tcb.orphan

  (* Room for one more connection under the global limit: the oldest
     orphan goes; connections the application holds are never reset to
     make room for a stranger (half-open ones are bounded per listener,
     and a listener answers with cookies when there is no room). *)
  let make_room t =
    let full () = Key_tbl.length t.conns >= t.config.max_connections in
    if full () then begin
      match oldest t.orphans is_orphan with
      | Some tcb -> evict tcb "connection limit, oldest orphan"
      | None -> ()
    end;
    not (full ())

  let orphaned tcb =
    let t = tcb.inst in
    if tcb.alive && not tcb.orphan then begin
      tcb.orphan <- true;
      t.n_orphans <- t.n_orphans + 1;
      Queue.push tcb t.orphans;
      compact t.orphans is_orphan t.n_orphans;
      if t.n_orphans > t.config.max_orphans then
        match oldest t.orphans is_orphan with
        | Some o -> evict o "orphan limit"
        | None -> ()
    end

  let enter_time_wait tcb =
    tcb.state <- Time_wait;
    tcb.t_rtx <- never;
    tcb.t_persist <- never;
    tcb.t_keep <- never;
    tcb.t_2msl <- now () + (2 * tcb.cfg.msl);
    report tcb Closed_normally

  (* {2 TIME-WAIT records} *)

  let tw_key w = (w.tw_remote, w.tw_rport, w.tw_lport)

  let tw_remove t w =
    if w.tw_live then begin
      w.tw_live <- false;
      (match Key_tbl.find_opt t.time_wait (tw_key w) with
      | Some w' when w' == w -> Key_tbl.remove t.time_wait (tw_key w)
      | _ -> ());
      release_lower t w.tw_remote
    end

  (* One alarm for all the records, at the deadline of the first in the
     queue. A record whose 2 MSL restarted goes back to the end, which keeps
     the queue in order of deadline (2 MSL from now is the latest). *)
  let rec tw_arm t =
    match Queue.peek_opt t.tw_queue with
    | Some w when w.tw_deadline < t.tw_armed ->
        t.tw_gen <- t.tw_gen + 1;
        t.tw_armed <- w.tw_deadline;
        let gen = t.tw_gen in
        ignore
          (P.clock.at w.tw_deadline (fun () -> if gen = t.tw_gen then tw_expire t) : Clock.cancel)
    | _ -> ()

  and tw_expire t =
    t.tw_armed <- never;
    let n = now () in
    let rec go () =
      match Queue.peek_opt t.tw_queue with
      | Some w when not w.tw_live ->
          ignore (Queue.pop t.tw_queue : tw);
          go ()
      | Some w when w.tw_deadline <= n ->
          ignore (Queue.pop t.tw_queue : tw);
          if w.tw_expires <= n then tw_remove t w
          else begin
            w.tw_deadline <- w.tw_expires;
            Queue.push w t.tw_queue
          end;
          go ()
      | _ -> ()
    in
    go ();
    tw_arm t

  (* A connection that entered TIME-WAIT, once the segment that took it
     there is answered, becomes a record. *)
  let to_time_wait tcb =
    let t = tcb.inst in
    if tcb.alive && tcb.state = Time_wait then
      if tcb.cfg.msl <= 0 then delete tcb
      else begin
        let w =
          {
            tw_remote = tcb.remote_host;
            tw_rport = tcb.remote_port;
            tw_lport = tcb.local_port;
            tw_lconn = tcb.lconn;
            tw_snd_nxt = tcb.snd_max;
            tw_rcv_nxt = tcb.rcv_nxt;
            tw_window =
              min 0xFFFF
                (Tcp_window.receive_window ~rcv_nxt:tcb.rcv_nxt ~rcv_adv:tcb.rcv_adv
                lsr tcb.rcv_wscale);
            tw_msl = tcb.cfg.msl;
            tw_ts_ok = tcb.ts_ok;
            tw_ts_offset = tcb.ts_offset;
            tw_ts_recent = tcb.ts_recent;
            tw_ts_recent_age = tcb.ts_recent_age;
            tw_expires = tcb.t_2msl;
            tw_deadline = tcb.t_2msl;
            tw_live = true;
          }
        in
        acquire_lower t tcb.remote_host tcb.lconn;
        delete tcb;
        tcb.tw <- Some w;
        (match Key_tbl.find_opt t.time_wait (tw_key w) with
        | Some old -> tw_remove t old
        | None -> ());
        Key_tbl.replace t.time_wait (tw_key w) w;
        Queue.push w t.tw_queue;
        tw_arm t
      end

  let tw_ack t w =
    let options =
      if w.tw_ts_ok then
        [
          Tcp_packet.Timestamp
            {
              value = ((now () / 1_000_000) + w.tw_ts_offset) land 0xFFFF_FFFF;
              echo = w.tw_ts_recent;
            };
        ]
      else []
    in
    let hdr =
      {
        Tcp_packet.src_port = w.tw_lport;
        dst_port = w.tw_rport;
        seq = w.tw_snd_nxt;
        ack = w.tw_rcv_nxt;
        flags = { Tcp_packet.no_flags with ack = true };
        window = w.tw_window;
        urgent = 0;
        options;
      }
    in
    let hl = Tcp_packet.header_length hdr in
    let pkt = Packet.create ~headroom:(hl + Lower.headroom t.lower) P.pool 0 in
    Tcp_packet.encode_into hdr (Packet.push pkt hl);
    transmit t w.tw_lconn ~dst:w.tw_remote pkt

  (* {2 Receiving} *)

  let deliver tcb pkt =
    let n = Packet.length pkt in
    tcb.bytes_delivered <- tcb.bytes_delivered + n;
    match tcb.handler with
    | Some h when not tcb.app_closed ->
        tcb.unconsumed <- tcb.unconsumed + n;
        defer tcb.inst (fun () -> h.receive tcb pkt)
    | _ -> Packet.release pkt

  let process_fin tcb =
    tcb.rcv_nxt <- Tcp_seq.succ tcb.rcv_nxt;
    tcb.fin_received <- true;
    tcb.ooo_fin <- None;
    tcb.ack_now <- true;
    notify tcb Peer_closed;
    match tcb.state with
    | Syn_received | Established -> tcb.state <- Close_wait
    | Fin_wait_1 -> if fin_acked tcb then enter_time_wait tcb else tcb.state <- Closing
    | Fin_wait_2 -> enter_time_wait tcb
    | _ -> ()

  let receive_data tcb seq pkt =
    if Tcp_seq.equal seq tcb.rcv_nxt then begin
      tcb.rcv_nxt <- Tcp_seq.add tcb.rcv_nxt (Packet.length pkt);
      deliver tcb pkt;
      let filled = ref false in
      let rec drain () =
        match Tcp_reass.pop tcb.reass tcb.rcv_nxt with
        | Some p ->
            filled := true;
            tcb.rcv_nxt <- Tcp_seq.add tcb.rcv_nxt (Packet.length p);
            deliver tcb p;
            drain ()
        | None -> ()
      in
      if not (Tcp_reass.is_empty tcb.reass) then drain ();
      (match tcb.ooo_fin with
      | Some f when Tcp_seq.equal f tcb.rcv_nxt && Tcp_reass.is_empty tcb.reass -> process_fin tcb
      | _ -> ());
      if !filled || not (Tcp_reass.is_empty tcb.reass) then tcb.ack_now <- true
      else begin
        tcb.segs_unacked <- tcb.segs_unacked + 1;
        if tcb.segs_unacked >= 2 || tcb.cfg.delayed_ack <= 0 then tcb.ack_now <- true
        else if tcb.t_delack = never then tcb.t_delack <- now () + tcb.cfg.delayed_ack
      end
    end
    else begin
      let len = Packet.length pkt in
      let truesize = Packet.truesize pkt in
      (match Tcp_reass.insert tcb.reass seq pkt with
      | `Stored ->
          (* Under pressure (the frames pin far more than the bytes they
             carry), the queue is copied compactly. *)
          if Tcp_reass.pinned tcb.reass > max (2 * tcb.cfg.receive_buffer) (8 * truesize) then begin
            Log.debug (fun m -> m "%a: out-of-order queue collapsed" pp_connection tcb);
            Tcp_reass.collapse tcb.reass P.pool
          end
      | `Duplicate -> if tcb.sack_ok then tcb.dsack <- Some (seq, Tcp_seq.add seq len)
      | `Full -> Log.debug (fun m -> m "%a: out-of-order queue full" pp_connection tcb));
      tcb.ack_now <- true
    end

  (* {2 Options} *)

  let find_ts = Tcp_options.timestamp
  let find_sack = Tcp_options.sack

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
    (match o.ts_val with
    | Some v when tcb.offer_ts ->
        tcb.ts_ok <- true;
        tcb.ts_recent <- v;
        tcb.ts_recent_age <- now ()
    | _ ->
        tcb.ts_ok <- false;
        tcb.offer_ts <- false)

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
    let lower_max = Lower.max_packet lconn in
    let rcv_mss = rcv_mss_for cfg lower_max in
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
        reass = Tcp_reass.create ~max_segments:cfg.max_ooo_segments;
        ooo_fin = None;
        fin_received = false;
        rcv_mss;
        lower_max;
        pmtu_high = lower_max + 1;
        mtu_probe = None;
        n_mtu_probes = 0;
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
        cc = Tcp_cc.create cfg.congestion;
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
        n_timeouts = 0;
        n_probes = 0;
      }
    in
    Key_tbl.replace t.conns (key tcb) tcb;
    acquire_lower t remote lconn;
    tcb

  (* Fast retransmit and recovery: after three duplicate ACKs, SACKed data
     past the lost (RFC 6675 IsLost), or a loss RACK detected ([rack]:
     then what RACK marked lost goes at once). *)
  let enter_recovery ?(rack = false) ?(cc = true) tcb =
    let smss = smss tcb in
    let flight_before = flight tcb in
    tcb.recover <- tcb.snd_max;
    tcb.in_recovery <- true;
    tcb.n_fast <- tcb.n_fast + 1;
    let una = tcb.snd_una in
    let len = min (capacity tcb) (max 0 (Tcp_seq.sub (data_end tcb) una)) in
    let len =
      match Tcp_sack.hole tcb.sack una with
      | _, Some l when tcb.sack_ok -> min len (Tcp_seq.sub l una)
      | _ -> len
    in
    Log.debug (fun m -> m "%a: fast retransmit at %a" pp_connection tcb Tcp_seq.pp una);
    (match tcb.mtu_probe with
    | Some (s, _, _) when Tcp_seq.equal s una -> mtu_probe_failed tcb
    | _ -> ());
    if cc then Tcp_cc.on_loss tcb.cc ~now:(now ()) ~flight:flight_before ~smss ~sack:tcb.sack_ok;
    tcb.t_tlp <- never;
    tcb.tlp_end <- None;
    if rack then output ~force:true tcb
    else begin
      let e = send_data tcb ~seq:una ~len in
      if tcb.sack_ok then tcb.high_rxt <- e
    end

  (* RACK's detection (RFC 8985 section 6.2 steps 4 and 5), after an ACK
     that delivered something or when its timer expires. *)
  let rack_detect tcb =
    if rack_on tcb then begin
      let srtt = match Tcp_rto.srtt tcb.rto with Some s -> s | None -> tcb.cfg.initial_rto in
      let reo_wnd =
        Tcp_rack.reo_wnd tcb.rack ~in_recovery:tcb.in_recovery ~dupacks:tcb.dupacks ~srtt
      in
      let lost, next = Tcp_rack.detect tcb.rack ~now:(now ()) ~reo_wnd in
      tcb.t_reo <- (match next with Some d -> d | None -> never);
      if lost > 0 then begin
        Log.debug (fun m -> m "%a: RACK: %d lost" pp_connection tcb lost);
        (* A lost path MTU probe says the path's size, not congestion
           (RFC 4821 section 7.5): alone, it is sent again smaller, the
           window kept. *)
        let probe_lost =
          match tcb.mtu_probe with
          | Some (s, _, _) when Tcp_rack.is_lost tcb.rack s ->
              mtu_probe_failed tcb;
              true
          | _ -> false
        in
        if not tcb.in_recovery then enter_recovery ~rack:true ~cc:(not (probe_lost && lost = 1)) tcb
      end
    end

  (* The loss probe (RFC 8985 section 7.3): a new segment if the receiver's
     window allows, else the last segment sent again; then the RTO. *)
  let tlp_expired tcb =
    if
      rack_on tcb && can_send_data tcb && (not tcb.in_recovery) && tcb.tlp_end = None
      && Tcp_seq.lt tcb.snd_una tcb.snd_max
    then begin
      let fresh =
        Tcp_seq.geq tcb.snd_nxt tcb.snd_max
        &&
        match next_new tcb ~budget:(capacity tcb) ~force:false with
        | Some len ->
            tcb.snd_nxt <- send_data ~probe:true tcb ~seq:tcb.snd_nxt ~len;
            true
        | None -> false
      in
      if not fresh then begin
        match Tcp_rack.last tcb.rack with
        | Some (s, e) ->
            let s = Tcp_seq.max s tcb.snd_una in
            let len =
              min (capacity tcb) (max 0 (Tcp_seq.sub (Tcp_seq.min e (data_end tcb)) s))
            in
            ignore (send_data ~probe:true tcb ~seq:s ~len : Tcp_seq.t)
        | None -> ()
      end;
      Log.debug (fun m -> m "%a: loss probe (%s)" pp_connection tcb (if fresh then "new" else "last"));
      tcb.n_probes <- tcb.n_probes + 1;
      tcb.tlp_end <- Some tcb.snd_max;
      tcb.tlp_rexmit <- not fresh;
      tcb.tlp_ts <- ts_now tcb;
      restart_rtx tcb
    end


  (* The end of a loss probe's episode (RFC 8985 section 7.4): a D-SACK
     says the probe was a duplicate; an ACK past it that the probe itself
     drew (its timestamp echo is the probe's or later) says that the probe
     repaired a loss, which the congestion window answers as any loss. *)
  let tlp_episode tcb (h : Tcp_packet.t) ~dsack =
    match tcb.tlp_end with
    | Some e ->
        if dsack && tcb.tlp_rexmit then tcb.tlp_end <- None
        else if Tcp_seq.geq h.ack e then begin
          let drawn_by_probe =
            match Tcp_options.timestamp h.options with
            | Some (_, echo) when tcb.ts_ok ->
                Tcp_seq.geq (Tcp_seq.of_int echo) (Tcp_seq.of_int tcb.tlp_ts)
            | _ -> true
          in
          if not tcb.tlp_rexmit then tcb.tlp_end <- None
          else if drawn_by_probe then begin
            tcb.tlp_end <- None;
            if not tcb.in_recovery then
              Tcp_cc.on_loss tcb.cc ~now:(now ()) ~flight:(Tcp_cc.cwnd tcb.cc) ~smss:(smss tcb)
                ~sack:true
          end
          else if Tcp_seq.gt h.ack e then tcb.tlp_end <- None
        end
    | None -> ()

  (* {2 Timers} *)

  let rto_expired tcb =
    let cfg = tcb.cfg in
    match tcb.state with
    | Syn_sent | Syn_received ->
        tcb.retries <- tcb.retries + 1;
        if tcb.retries > cfg.syn_retries then
          if tcb.state = Syn_received && tcb.listener <> None && tcb.handler = None then delete tcb
          else fail tcb `Timeout
        else begin
          Tcp_rto.backoff tcb.rto;
          tcb.syn_retransmitted <- true;
          tcb.rtt_seq <- None;
          tcb.n_retrans <- tcb.n_retrans + 1;
          tcb.inst.counters.c_retrans <- tcb.inst.counters.c_retrans + 1;
          restart_rtx tcb;
          send_syn tcb
        end
    | Established | Fin_wait_1 | Close_wait | Closing | Last_ack ->
        if Tcp_seq.lt tcb.snd_una tcb.snd_max then begin
          tcb.retries <- tcb.retries + 1;
          tcb.n_timeouts <- tcb.n_timeouts + 1;
          if tcb.retries > cfg.max_retransmits then begin
            send_rst tcb;
            fail tcb `Timeout
          end
          else begin
            if tcb.mtu_probe <> None then mtu_probe_failed tcb
            else if tcb.cfg.plpmtud && tcb.retries >= 2 && tcb.lower_max > pmtu_floor tcb then begin
              (* A black hole (RFC 8899 section 4.3): the same segment lost
                 twice to the timer; smaller segments, then the search. *)
              tcb.pmtu_high <- min tcb.pmtu_high tcb.lower_max;
              tcb.lower_max <- max (pmtu_floor tcb) (tcb.lower_max / 2);
              Log.debug (fun m -> m "%a: black hole? segments of %d bytes now" pp_connection tcb tcb.lower_max)
            end;
            let smss = smss tcb in
            Tcp_cc.on_rto tcb.cc ~flight:(flight tcb) ~smss ~first:(Tcp_rto.backoffs tcb.rto = 0);
            tcb.in_recovery <- false;
            tcb.dupacks <- 0;
            tcb.recover <- tcb.snd_max;
            tcb.high_rxt <- tcb.snd_una;
            if tcb.retries >= 2 then Tcp_sack.clear tcb.sack;
            Tcp_rack.mark_all_lost tcb.rack;
            tcb.t_tlp <- never;
            tcb.t_reo <- never;
            tcb.tlp_end <- None;
            Tcp_rto.backoff tcb.rto;
            tcb.rtt_seq <- None;
            tcb.snd_nxt <- tcb.snd_una;
            Log.debug (fun m -> m "%a: timeout, %a" pp_connection tcb Tcp_rto.pp tcb.rto);
            restart_rtx tcb;
            output ~force:true tcb
          end
        end
    | _ -> ()

  let persist_expired tcb =
    if
      can_send_data tcb
      && Tcp_seq.lt tcb.snd_nxt (data_end tcb)
      && Tcp_seq.equal tcb.snd_una tcb.snd_max
    then begin
      tcb.persist_probes <- tcb.persist_probes + 1;
      let limit = if tcb.app_closed then tcb.cfg.orphan_retries else tcb.cfg.max_retransmits in
      if tcb.persist_probes > limit then begin
        send_rst tcb;
        fail tcb `Timeout
      end
      else begin
        if tcb.snd_wnd = 0 then
          (* A probe the receiver must answer with its window: an
             already-acknowledged sequence number. *)
          emit tcb ~seq:(Tcp_seq.add tcb.snd_una (-1)) ~len:0
        else output ~force:true tcb;
        tcb.persist_backoff <- min (tcb.persist_backoff + 1) 16;
        if Tcp_seq.equal tcb.snd_una tcb.snd_max then
          tcb.t_persist <-
            now () + min tcb.cfg.max_rto (Tcp_rto.rto tcb.rto lsl tcb.persist_backoff)
      end
    end

  let keepalive_expired tcb =
    match (tcb.keepalive, tcb.state) with
    | Some k, (Established | Close_wait) ->
        let idle = now () - tcb.last_recv in
        if idle >= k.idle + (tcb.keep_probes * k.interval) then begin
          if tcb.keep_probes >= k.probes then begin
            send_rst tcb;
            fail tcb `Timeout
          end
          else begin
            tcb.keep_probes <- tcb.keep_probes + 1;
            emit tcb ~seq:(Tcp_seq.add tcb.snd_una (-1)) ~len:0;
            tcb.t_keep <- now () + k.interval
          end
        end
        else tcb.t_keep <- tcb.last_recv + k.idle + (tcb.keep_probes * k.interval)
    | _ -> tcb.t_keep <- never

  let on_alarm tcb =
    if tcb.alive then begin
      tcb.armed <- never;
      let n = now () in
      if tcb.t_2msl <= n then begin
        tcb.t_2msl <- never;
        report tcb Closed_normally;
        delete tcb
      end
      else begin
        if tcb.t_rtx <= n then begin
          tcb.t_rtx <- never;
          rto_expired tcb
        end;
        if tcb.alive && tcb.t_tlp <= n then begin
          tcb.t_tlp <- never;
          tlp_expired tcb
        end;
        if tcb.alive && tcb.t_reo <= n then begin
          tcb.t_reo <- never;
          rack_detect tcb
        end;
        if tcb.alive && tcb.t_persist <= n then begin
          tcb.t_persist <- never;
          persist_expired tcb
        end;
        if tcb.alive && tcb.t_delack <= n then begin
          tcb.t_delack <- never;
          tcb.ack_now <- true
        end;
        if tcb.alive && tcb.t_keep <= n then keepalive_expired tcb;
        if tcb.alive then output tcb
      end;
      flush tcb.inst
    end

  (* The one alarm of a connection is set for its earliest deadline after
     every event that may have moved one (a segment, an application call,
     an alarm). *)
  let rec schedule tcb =
    if tcb.alive then begin
      let d =
        min tcb.t_rtx
          (min tcb.t_persist
             (min tcb.t_delack (min tcb.t_keep (min tcb.t_2msl (min tcb.t_tlp tcb.t_reo)))))
      in
      if d < tcb.armed then begin
        tcb.alarm_cancel ();
        tcb.alarm_gen <- tcb.alarm_gen + 1;
        tcb.armed <- d;
        let gen = tcb.alarm_gen in
        tcb.alarm_cancel <-
          P.clock.at d (fun () ->
              if gen = tcb.alarm_gen then begin
                on_alarm tcb;
                schedule tcb
              end)
      end
    end

  let rec lower_handler t =
    {
      Lower.receive = (fun lc pkt -> input t lc pkt);
      status =
        (fun lc st ->
          match t.icmp st with
          | Some e ->
              icmp_input t lc e;
              flush t
          | None -> ());
    }

  (* An ICMP error about a segment this stack sent: believed only when it
     quotes a sequence number in flight (RFC 5927). A hard error aborts a
     connection being opened; soft errors are kept to be reported; a
     smaller path MTU shrinks the segments and resends what was in flight
     (RFC 1191). *)
  and icmp_input t lconn (e : Tcp_icmp.t) =
    let remote = Lower.remote lconn in
    match Key_tbl.find_opt t.conns (remote, e.dst_port, e.src_port) with
    | Some tcb when Tcp_seq.geq e.seq tcb.snd_una && Tcp_seq.lt e.seq tcb.snd_max -> (
        Log.debug (fun m -> m "%a: ICMP %a" pp_connection tcb Tcp_icmp.pp_kind e.kind);
        match e.kind with
        | Hard msg when tcb.state = Syn_sent -> fail tcb (`Unreachable msg)
        | Hard msg | Soft msg -> tcb.soft_error <- Some msg
        | Frag_needed mtu ->
            let mtu = max (tcb.cfg.min_mss + Tcp_wire.min_header) mtu in
            if mtu < tcb.lower_max then begin
              tcb.lower_max <- mtu;
              tcb.pmtu_high <- min tcb.pmtu_high (mtu + 1);
              tcb.mtu_probe <- None;
              if Tcp_seq.lt tcb.snd_una tcb.snd_max && can_send_data tcb then begin
                tcb.snd_nxt <- tcb.snd_una;
                output ~force:true tcb
              end;
              schedule tcb
            end)
    | _ -> ()

  (* {2 Segment arrival} *)

  and input t lconn pkt =
    t.counters.c_in <- t.counters.c_in + 1;
    let cs = Packet.cstruct pkt in
    let remote = Lower.remote lconn in
    let checksum_ok =
      match P.pseudo_header with
      | None -> true
      | Some f ->
          Tcp_checksum.valid
            (Tcp_checksum.sum ~init:(f ~src:remote ~dst:P.local ~len:(Cstruct.length cs)) cs)
    in
    if not checksum_ok then begin
      t.counters.c_bad_checksum <- t.counters.c_bad_checksum + 1;
      Packet.release pkt
    end
    else
      match Tcp_packet.decode cs with
      | Error e ->
          t.counters.c_malformed <- t.counters.c_malformed + 1;
          Log.debug (fun m -> m "malformed segment: %a" Tcp_packet.pp_error e);
          Packet.release pkt
      | Ok (h, hl) ->
          ignore (Packet.pull pkt hl : (unit, _) result);
          (* A host no connection talks to gets a provisional entry: a
             connection made for this segment takes it over, else it is
             closed once the segment is handled. *)
          if not (Host_tbl.mem t.lower_conns remote) then
            Host_tbl.replace t.lower_conns remote { lc = lconn; refs = 0 };
          if h.flags.rst then t.counters.c_rst_in <- t.counters.c_rst_in + 1;
          dispatch t lconn remote h pkt;
          (match Host_tbl.find_opt t.lower_conns remote with
          | Some r when r.refs <= 0 ->
              Host_tbl.remove t.lower_conns remote;
              Lower.close r.lc
          | _ -> ());
          (match Key_tbl.find_opt t.conns (remote, h.src_port, h.dst_port) with
          | Some tcb when tcb.state = Time_wait -> to_time_wait tcb
          | Some tcb -> schedule tcb
          | None -> ());
          flush t

  and dispatch t lconn remote (h : Tcp_packet.t) pkt =
    match Key_tbl.find_opt t.conns (remote, h.src_port, h.dst_port) with
    | Some tcb ->
        Log.debug (fun m -> m "%a: recv %a len %d" pp_connection tcb Tcp_packet.pp h (Packet.length pkt));
        segment_arrives tcb h pkt
    | None when Key_tbl.mem t.time_wait (remote, h.src_port, h.dst_port) ->
        tw_input t (Key_tbl.find t.time_wait (remote, h.src_port, h.dst_port)) lconn remote h pkt
    | None -> (
        match Hashtbl.find_opt t.listeners h.dst_port with
        | Some l when match l.l_from with None -> true | Some f -> P.equal_host f remote ->
            listen_input t l lconn remote h pkt
        | _ ->
            let payload = Packet.length pkt in
            Packet.release pkt;
            closed_input t lconn remote h ~payload)

  (* A segment in TIME-WAIT (RFC 9293 section 3.10.7.4): RST ignored (RFC
     1337), a SYN above the old sequence space opens a new incarnation
     (section 3.6.1), a retransmitted FIN restarts 2 MSL, and anything
     but an in-order ACK is acknowledged. *)
  and tw_input t w lconn remote (h : Tcp_packet.t) pkt =
    let payload = Packet.length pkt in
    if h.flags.rst then Packet.release pkt
    else if
      h.flags.syn && (not h.flags.ack) && Tcp_seq.gt h.seq w.tw_rcv_nxt
      && Hashtbl.mem t.listeners w.tw_lport
    then begin
      acquire_lower t remote lconn;
      tw_remove t w;
      dispatch t lconn remote h pkt;
      release_lower t remote
    end
    else begin
      Packet.release pkt;
      let ts = find_ts h.options in
      match
        Tcp_verdict.paws ~ts_ok:w.tw_ts_ok ~rst:false ~syn:h.flags.syn ~ts_val:(Option.map fst ts)
          ~ts_recent:w.tw_ts_recent ~ts_recent_age:w.tw_ts_recent_age ~now:(now ())
      with
      | Missing -> ()
      | Stale -> tw_ack t w
      | Fresh ->
          (match ts with
          | Some (v, _) when w.tw_ts_ok && Tcp_seq.geq (Tcp_seq.of_int v) (Tcp_seq.of_int w.tw_ts_recent) ->
              w.tw_ts_recent <- v;
              w.tw_ts_recent_age <- now ()
          | _ -> ());
          if h.flags.fin then w.tw_expires <- now () + (2 * w.tw_msl);
          if not (payload + seg_ctl_len h = 0 && Tcp_seq.equal h.seq w.tw_rcv_nxt) then tw_ack t w
    end

  (* A segment for no connection: RFC 9293 section 3.10.7.1. *)
  and closed_input t lconn remote (h : Tcp_packet.t) ~payload =
    t.counters.c_dropped <- t.counters.c_dropped + 1;
    if not h.flags.rst then begin
      let seq, ack, ack_flag =
        if h.flags.ack then (h.ack, Tcp_seq.zero, false)
        else (Tcp_seq.zero, Tcp_seq.add h.seq (payload + seg_ctl_len h), true)
      in
      send_raw t lconn ~dst:remote ~src_port:h.dst_port ~dst_port:h.src_port ~seq ~ack ~ack_flag
    end

  and seg_ctl_len (h : Tcp_packet.t) = (if h.flags.syn then 1 else 0) + if h.flags.fin then 1 else 0

  and send_raw t lconn ~dst ~src_port ~dst_port ~seq ~ack ~ack_flag =
    t.counters.c_rst_out <- t.counters.c_rst_out + 1;
    send_ctl t lconn ~dst
      (Tcp_packet.v ~src_port ~dst_port ~seq ~ack
         ~flags:{ Tcp_packet.no_flags with rst = true; ack = ack_flag }
         ())

  (* A segment sent without a connection: a RST, or a SYN-ACK carrying a
     cookie. *)
  and send_ctl t lconn ~dst hdr =
    let hl = Tcp_packet.header_length hdr in
    let pkt = Packet.create ~headroom:(hl + Lower.headroom t.lower) P.pool 0 in
    Tcp_packet.encode_into hdr (Packet.push pkt hl);
    transmit t lconn ~dst pkt

  (* The listener's queue is full: answer with a SYN cookie and keep
     nothing. Window scale and SACK-permitted travel in the low bits of the
     timestamp, so they are offered only when the peer sent a timestamp. *)
  and send_cookie t l lconn remote (h : Tcp_packet.t) =
    let cfg = t.config in
    let o = Tcp_options.of_syn h.options in
    let tuple = tuple ~remote ~rport:h.src_port ~lport:h.dst_port in
    let peer_mss = match o.mss with Some n when n > 0 -> n | _ -> 536 in
    let iss, _ = Tcp_secret.cookie t.secret ~tuple ~now:(now ()) ~peer_isn:h.seq ~mss:peer_mss in
    let ts = if cfg.timestamps then o.ts_val else None in
    let wscale = match ts with Some _ when cfg.window_scale -> o.wscale | _ -> None in
    let sack = ts <> None && cfg.sack && o.sack_permitted in
    let ts =
      Option.map
        (fun v ->
          let ts_now = ((now () / 1_000_000) + Tcp_secret.ts_offset t.secret ~tuple) land 0xFFFF_FFFF in
          (Tcp_secret.cookie_ts ~ts_now ~wscale ~sack, v))
        ts
    in
    let options =
      Tcp_options.syn
        ~mss:(rcv_mss_for cfg (Lower.max_packet lconn))
        ~wscale:(Option.map (fun _ -> Tcp_window.scale_for cfg.receive_buffer) wscale)
        ~sack ~ts
    in
    l.overflowed <- now ();
    t.counters.c_cookies_sent <- t.counters.c_cookies_sent + 1;
    send_ctl t lconn ~dst:remote
      {
        Tcp_packet.src_port = h.dst_port;
        dst_port = h.src_port;
        seq = iss;
        ack = Tcp_seq.succ h.seq;
        flags = { Tcp_packet.no_flags with syn = true; ack = true };
        window = min 0xFFFF cfg.receive_buffer;
        urgent = 0;
        options;
      }

  (* An ACK for a listener: the end of a handshake answered with a cookie
     (only while cookies were sent in the last two minutes). It becomes a
     connection in SYN-RECEIVED that the ACK then establishes. *)
  and cookie_ack t l lconn remote (h : Tcp_packet.t) pkt =
    let cfg = t.config in
    let n = now () in
    if (not cfg.syn_cookies) || h.flags.syn || n - l.overflowed > Time.of_sec 120. then false
    else
      let rport = h.src_port and lport = h.dst_port in
      let tuple = tuple ~remote ~rport ~lport in
      let peer_isn = Tcp_seq.add h.seq (-1) and iss = Tcp_seq.add h.ack (-1) in
      match Tcp_secret.check_cookie t.secret ~tuple ~now:n ~peer_isn ~cookie:iss with
      | None -> false
      | Some _ when not (make_room t) -> false
      | Some mss ->
          t.counters.c_cookies_ok <- t.counters.c_cookies_ok + 1;
          let tcb =
            new_tcb ~iss t ~cfg ~lconn ~remote ~rport ~lport ~listener:(Some l)
              ~state:Syn_received
          in
          l.half_open <- l.half_open + 1;
          tcb.irs <- peer_isn;
          tcb.rcv_nxt <- h.seq;
          tcb.rcv_adv <- Tcp_seq.add h.seq (min 0xFFFF cfg.receive_buffer);
          tcb.snd_nxt <- Tcp_seq.succ iss;
          tcb.snd_max <- Tcp_seq.succ iss;
          tcb.last_ack_sent <- h.seq;
          tcb.peer_mss <- mss;
          (match find_ts h.options with
          | Some (v, echo) when cfg.timestamps ->
              let ws, sack = Tcp_secret.cookie_ts_options ~echo in
              tcb.ts_ok <- true;
              tcb.ts_recent <- v;
              tcb.ts_recent_age <- n;
              (match ws with
              | Some s when cfg.window_scale ->
                  tcb.ws_ok <- true;
                  tcb.snd_wscale <- s
              | _ ->
                  tcb.offer_ws <- false;
                  tcb.rcv_wscale <- 0);
              tcb.sack_ok <- sack && cfg.sack;
              tcb.offer_sack <- tcb.sack_ok
          | _ ->
              tcb.offer_ts <- false;
              tcb.offer_ws <- false;
              tcb.rcv_wscale <- 0;
              tcb.offer_sack <- false);
          tcb.snd_wl1 <- h.seq;
          tcb.snd_wl2 <- iss;
          segment_arrives tcb h pkt;
          true

  and listen_input t l lconn remote (h : Tcp_packet.t) pkt =
    (* Data on a SYN is not accepted (nor acknowledged): the peer sends it
       again once the connection is up. *)
    if h.flags.rst then Packet.release pkt
    else if h.flags.ack then begin
      if not (cookie_ack t l lconn remote h pkt) then begin
        Packet.release pkt;
        send_raw t lconn ~dst:remote ~src_port:h.dst_port ~dst_port:h.src_port ~seq:h.ack
          ~ack:Tcp_seq.zero ~ack_flag:false
      end
    end
    else if h.flags.syn then begin
      Packet.release pkt;
      if l.half_open >= t.config.backlog || not (make_room t) then begin
        if t.config.syn_cookies then send_cookie t l lconn remote h
        else t.counters.c_dropped <- t.counters.c_dropped + 1
      end
      else begin
        let tcb =
          new_tcb t ~cfg:t.config ~lconn ~remote ~rport:h.src_port ~lport:h.dst_port
            ~listener:(Some l) ~state:Syn_received
        in
        l.half_open <- l.half_open + 1;
        tcb.irs <- h.seq;
        tcb.rcv_nxt <- Tcp_seq.succ h.seq;
        tcb.rcv_adv <- tcb.rcv_nxt;
        take_syn_options tcb h;
        tcb.snd_wnd <- h.window;
        tcb.max_snd_wnd <- h.window;
        tcb.snd_wl1 <- h.seq;
        tcb.snd_wl2 <- tcb.iss;
        send_syn tcb
      end
    end
    else begin
      Packet.release pkt;
      t.counters.c_dropped <- t.counters.c_dropped + 1
    end

  and segment_arrives tcb h pkt =
    tcb.last_recv <- now ();
    tcb.keep_probes <- 0;
    match tcb.state with
    | Syn_sent -> syn_sent_input tcb h pkt
    | Closed | Listen -> Packet.release pkt
    | _ -> synchronized_input tcb h pkt

  and syn_sent_input tcb (h : Tcp_packet.t) pkt =
    Packet.release pkt;
    let t = tcb.inst in
    let ack_bad = h.flags.ack && (Tcp_seq.leq h.ack tcb.iss || Tcp_seq.gt h.ack tcb.snd_max) in
    if ack_bad then begin
      if not h.flags.rst then
        send_raw t tcb.lconn ~dst:tcb.remote_host ~src_port:tcb.local_port
          ~dst_port:tcb.remote_port ~seq:h.ack ~ack:Tcp_seq.zero ~ack_flag:false
    end
    else if h.flags.rst then begin
      if h.flags.ack then fail tcb (`Refused "connection refused")
    end
    else if h.flags.syn then begin
      tcb.irs <- h.seq;
      tcb.rcv_nxt <- Tcp_seq.succ h.seq;
      tcb.rcv_adv <-
        Tcp_seq.add tcb.rcv_nxt (min 0xFFFF (max 0 (tcb.cfg.receive_buffer - tcb.unconsumed)));
      take_syn_options tcb h;
      tcb.snd_wnd <- h.window;
      tcb.max_snd_wnd <- h.window;
      tcb.snd_wl1 <- h.seq;
      tcb.snd_wl2 <- h.ack;
      if h.flags.ack then begin
        syn_acked tcb h.ack;
        tcb.state <- Established;
        Tcp_cc.set_cwnd tcb.cc (initial_cwnd tcb);
        notify tcb Connected;
        tcb.ack_now <- true;
        output tcb
      end
      else begin
        (* Simultaneous open. *)
        tcb.state <- Syn_received;
        tcb.t_rtx <- never;
        send_syn tcb
      end
    end

  and syn_acked tcb ack =
    (match tcb.rtt_seq with
    | Some _ when not tcb.syn_retransmitted -> Tcp_rto.sample tcb.rto (now () - tcb.rtt_time)
    | _ -> ());
    tcb.rtt_seq <- None;
    tcb.snd_una <- ack;
    if Tcp_seq.lt tcb.snd_nxt ack then tcb.snd_nxt <- ack;
    tcb.high_rxt <- ack;
    tcb.recover <- ack;
    tcb.retries <- 0;
    tcb.t_rtx <- never

  (* RFC 5961 section 7, per connection (a global count is the side
     channel of CVE-2016-5696), with a budget drawn each second between
     half the limit and the limit, so that an attacker cannot count it. *)
  and challenge_ack tcb =
    let t = tcb.inst in
    let second = now () / 1_000_000_000 in
    if second <> tcb.challenge_second then begin
      tcb.challenge_second <- second;
      let limit = max 0 tcb.cfg.challenge_ack_limit in
      let lo = (limit + 1) / 2 in
      tcb.challenge_left <- lo + Rng.int P.rng (limit - lo + 1)
    end;
    if tcb.challenge_left > 0 then begin
      tcb.challenge_left <- tcb.challenge_left - 1;
      t.counters.c_challenge <- t.counters.c_challenge + 1;
      tcb.ack_now <- true;
      output tcb
    end

  and synchronized_input tcb (h : Tcp_packet.t) pkt =
    let t = tcb.inst in
    let h =
      if
        tcb.state = Syn_received && h.flags.syn && h.flags.ack && (not h.flags.rst)
        && Tcp_seq.equal h.seq tcb.irs
        && Tcp_seq.equal h.ack tcb.snd_max
      then
        (* Simultaneous open: the peer's SYN-ACK acknowledges our SYN; its
           SYN is a repeat, already counted in RCV.NXT. *)
        { h with flags = { h.flags with syn = false }; seq = Tcp_seq.succ h.seq }
      else h
    in
    let payload = Packet.length pkt in
    let seg_len = payload + seg_ctl_len h in
    let ts = find_ts h.options in
    let drop () = Packet.release pkt in
    let drop_and_ack () =
      Packet.release pkt;
      if not h.flags.rst then begin
        tcb.ack_now <- true;
        output tcb
      end
    in
    let paws =
      Tcp_verdict.paws ~ts_ok:tcb.ts_ok ~rst:h.flags.rst ~syn:h.flags.syn
        ~ts_val:(Option.map fst ts) ~ts_recent:tcb.ts_recent ~ts_recent_age:tcb.ts_recent_age
        ~now:(now ())
    in
    let passive = tcb.listener <> None in
    if tcb.state = Syn_received && h.flags.syn && (not h.flags.ack) && Tcp_seq.equal h.seq tcb.irs
    then begin
      (* The peer did not get our SYN-ACK: send it again. *)
      drop ();
      send_syn tcb
    end
    else if
      tcb.state = Time_wait && h.flags.syn && (not h.flags.ack) && (not h.flags.rst)
      && Tcp_seq.gt h.seq tcb.rcv_nxt
      && Hashtbl.mem t.listeners tcb.local_port
    then begin
      (* A new incarnation of the connection (RFC 9293 3.6.1), over the
         same lower connection. *)
      acquire_lower t tcb.remote_host tcb.lconn;
      delete tcb;
      dispatch t tcb.lconn tcb.remote_host h pkt;
      release_lower t tcb.remote_host
    end
    else if paws = Tcp_verdict.Missing then begin
      (* RFC 7323 section 3.2: silently. *)
      t.counters.c_dropped <- t.counters.c_dropped + 1;
      drop ()
    end
    else if paws = Tcp_verdict.Stale then begin
      t.counters.c_dropped <- t.counters.c_dropped + 1;
      drop_and_ack ()
    end
    else begin
      (* Data already received: reported in the next ACK as a D-SACK. *)
      (let ds = if h.flags.syn then Tcp_seq.succ h.seq else h.seq in
       if tcb.sack_ok && payload > 0 && (not h.flags.rst) && Tcp_seq.lt ds tcb.rcv_nxt then
         tcb.dsack <- Some (ds, Tcp_seq.min (Tcp_seq.add ds payload) tcb.rcv_nxt));
      let wnd = Tcp_window.receive_window ~rcv_nxt:tcb.rcv_nxt ~rcv_adv:tcb.rcv_adv in
      let acceptable = Tcp_verdict.acceptable ~rcv_nxt:tcb.rcv_nxt ~rcv_wnd:wnd ~seq:h.seq ~seg_len in
      let zero_window_probe =
        (not acceptable)
        && Tcp_verdict.zero_window_probe ~rcv_nxt:tcb.rcv_nxt ~rcv_wnd:wnd ~seq:h.seq ~seg_len
             ~syn:h.flags.syn
      in
      let syn_verdict = Tcp_verdict.syn ~state:tcb.state ~passive in
      if h.flags.syn && (not h.flags.rst) && tcb.state <> Syn_received then begin
        (* RFC 5961 section 4: any SYN on a synchronized connection. *)
        drop ();
        challenge_ack tcb
      end
      else if (not acceptable) && not zero_window_probe then begin
        if tcb.state = Time_wait && h.flags.fin then tcb.t_2msl <- now () + (2 * tcb.cfg.msl);
        if not h.flags.rst then t.counters.c_dropped <- t.counters.c_dropped + 1;
        drop_and_ack ()
      end
      else begin
        (* Trim the segment to the window. *)
        let data_seq = if h.flags.syn then Tcp_seq.succ h.seq else h.seq in
        let front = max 0 (Tcp_seq.sub tcb.rcv_nxt data_seq) in
        let front = min front payload in
        if front > 0 then ignore (Packet.pull pkt front : (unit, _) result);
        let data_seq = Tcp_seq.add data_seq front in
        let room = max 0 (Tcp_seq.sub (Tcp_seq.add tcb.rcv_nxt wnd) data_seq) in
        let len = Packet.length pkt in
        let fin = ref h.flags.fin in
        if len > room then begin
          Packet.trim pkt room;
          fin := false
        end;
        if zero_window_probe then begin
          Packet.trim pkt 0;
          fin := false
        end;
        (match ts with
        | Some (v, _)
          when tcb.ts_ok
               && Tcp_verdict.update_ts_recent ~ts_val:v ~ts_recent:tcb.ts_recent ~seq:h.seq
                    ~last_ack_sent:tcb.last_ack_sent ->
            tcb.ts_recent <- v;
            tcb.ts_recent_age <- now ()
        | _ -> ());
        if h.flags.rst then begin
          drop ();
          (* RFC 1337: a RST does not cut TIME-WAIT short. *)
          if tcb.state <> Time_wait then
            match Tcp_verdict.rst ~rcv_nxt:tcb.rcv_nxt ~seq:h.seq with
            | Challenge_ack -> challenge_ack tcb
            | Reset -> (
                match tcb.state with
                | Syn_received when tcb.listener <> None -> delete tcb
                | Syn_received -> fail tcb (`Refused "connection refused")
                | Established | Fin_wait_1 | Fin_wait_2 | Close_wait -> fail tcb `Reset
                | _ ->
                    report tcb Closed_normally;
                    delete tcb)
        end
        else if h.flags.syn then begin
          (* SYN-RECEIVED, another SYN: RFC 9293 returns a passive
             connection to LISTEN. *)
          drop ();
          match syn_verdict with
          | Back_to_listen -> delete tcb
          | Syn_challenge_ack -> challenge_ack tcb
        end
        else if not h.flags.ack then drop ()
        else
          match ack_input tcb h ~payload:(Packet.length pkt) with
          | `Drop -> drop ()
          | `Continue ->
              if tcb.alive then begin
                (match tcb.state with
                | Established | Fin_wait_1 | Fin_wait_2 when Packet.length pkt > 0 ->
                    if tcb.app_closed then begin
                      (* RFC 1122 4.2.2.13: nobody will read it. *)
                      drop ();
                      send_rst tcb;
                      fail tcb `Closed
                    end
                    else receive_data tcb data_seq pkt
                | _ -> drop ());
                let fin_seq = Tcp_seq.add data_seq len in
                if !fin && tcb.alive && not tcb.fin_received then begin
                  match tcb.state with
                  | Established | Fin_wait_1 | Fin_wait_2 ->
                      if Tcp_seq.equal fin_seq tcb.rcv_nxt then process_fin tcb
                      else begin
                        tcb.ooo_fin <- Some fin_seq;
                        tcb.ack_now <- true
                      end
                  | _ -> ()
                end;
                if tcb.alive then begin
                  if zero_window_probe then tcb.ack_now <- true;
                  output tcb;
                  if tcb.state = Time_wait && tcb.cfg.msl <= 0 then delete tcb
                end
              end
      end
    end

  (* The ACK field, RFC 9293 section 3.10.7.4 fifth, with RFC 5961
     section 5 acceptability. *)
  and ack_input tcb (h : Tcp_packet.t) ~payload =
    let t = tcb.inst in
    if tcb.state = Syn_received then begin
      if Tcp_verdict.syn_received_ack ~snd_una:tcb.snd_una ~snd_max:tcb.snd_max ~ack:h.ack then begin
        tcb.state <- Established;
        syn_acked tcb h.ack;
        tcb.snd_wnd <- h.window lsl tcb.snd_wscale;
        tcb.max_snd_wnd <- max tcb.max_snd_wnd tcb.snd_wnd;
        tcb.snd_wl1 <- h.seq;
        tcb.snd_wl2 <- h.ack;
        Tcp_cc.set_cwnd tcb.cc (initial_cwnd tcb);
        (match tcb.listener with
        | Some l when tcb.handler = None ->
            l.half_open <- l.half_open - 1;
            tcb.handler <- Some (l.l_make tcb)
        | _ -> ());
        notify tcb Connected;
        if tcb.fin_queued then tcb.state <- Fin_wait_1;
        ack_established tcb h ~payload
      end
      else begin
        send_raw t tcb.lconn ~dst:tcb.remote_host ~src_port:tcb.local_port
          ~dst_port:tcb.remote_port ~seq:h.ack ~ack:Tcp_seq.zero ~ack_flag:false;
        `Drop
      end
    end
    else ack_established tcb h ~payload

  and ack_established tcb (h : Tcp_packet.t) ~payload =
    match
      Tcp_verdict.ack ~snd_una:tcb.snd_una ~snd_max:tcb.snd_max ~max_snd_wnd:tcb.max_snd_wnd
        ~ack:h.ack
    with
    | Too_new ->
        tcb.ack_now <- true;
        output tcb;
        `Drop
    | Too_old ->
        challenge_ack tcb;
        `Drop
    | Old | Duplicate | New _ -> begin
      process_ack tcb h ~payload;
      match tcb.state with
      | Fin_wait_1 when fin_acked tcb ->
          tcb.state <- Fin_wait_2;
          if tcb.app_closed then tcb.t_2msl <- now () + tcb.cfg.fin_wait_2_timeout;
          `Continue
      | Closing when fin_acked tcb ->
          enter_time_wait tcb;
          `Continue
      | Last_ack when fin_acked tcb ->
          report tcb Closed_normally;
          delete tcb;
          `Drop
      | _ -> `Continue
    end

  and process_ack tcb (h : Tcp_packet.t) ~payload =
    let smss = smss tcb in
    let win = h.window lsl tcb.snd_wscale in
    (* A receiver that keeps its window shut answers every probe; a
       connection the application closed gives up after its probes
       anyway. *)
    if (not tcb.app_closed) || win > 0 then tcb.persist_probes <- 0;
    let advanced = Tcp_seq.gt h.ack tcb.snd_una in
    let dsack_seen = ref false in
    let newly_sacked, has_sack =
      if tcb.sack_ok then
        match find_sack h.options with
        | Some bs ->
            (match bs with
            | (l, r) :: rest
              when Tcp_seq.leq r h.ack
                   || List.exists (fun (l', r') -> Tcp_seq.leq l' l && Tcp_seq.leq r r') rest ->
                (* RFC 2883: the first block reports a duplicate. *)
                dsack_seen := true;
                tcb.inst.counters.c_dsack_in <- tcb.inst.counters.c_dsack_in + 1
            | _ -> ());
            (Tcp_sack.update tcb.sack ~una:tcb.snd_una ~high:tcb.snd_max bs, true)
        | None -> (0, false)
      else (0, false)
    in
    if Tcp_seq.gt h.ack tcb.snd_una then begin
      let ack = h.ack in
      let acked = Tcp_seq.sub ack tcb.snd_una in
      (* Bytes of data (not SYN, not FIN) newly acknowledged. *)
      let lo = Tcp_seq.max tcb.snd_una tcb.buf_seq and hi = Tcp_seq.min ack (data_end tcb) in
      let data = max 0 (Tcp_seq.sub hi lo) in
      Tcp_sndbuf.drop tcb.sndbuf data;
      tcb.buf_seq <- Tcp_seq.add tcb.buf_seq data;
      tcb.bytes_acked <- tcb.bytes_acked + data;
      (* Round-trip time: a timed segment (Karn), else the echoed
         timestamp (RFC 7323 RTTM). *)
      (match tcb.rtt_seq with
      | Some r when Tcp_seq.gt ack r ->
          Tcp_rto.sample tcb.rto (now () - tcb.rtt_time);
          tcb.rtt_seq <- None
      | _ -> (
          match find_ts h.options with
          | Some (_, echo) when tcb.ts_ok && echo <> 0 ->
              let ms = Tcp_seq.sub (Tcp_seq.of_int (ts_now tcb)) (Tcp_seq.of_int echo) in
              if ms >= 0 then
                Tcp_rto.sample
                  ~weight:((flight tcb + (2 * smss) - 1) / (2 * smss))
                  tcb.rto (Time.of_ms ms)
          | _ -> ()));
      tcb.snd_una <- ack;
      if Tcp_seq.lt tcb.snd_nxt ack then tcb.snd_nxt <- ack;
      Tcp_sack.advance tcb.sack ack;
      if Tcp_seq.lt tcb.high_rxt ack then tcb.high_rxt <- ack;
      tcb.retries <- 0;
      if tcb.in_recovery then begin
        if Tcp_seq.geq ack tcb.recover then begin
          tcb.in_recovery <- false;
          Tcp_cc.on_recovered tcb.cc ~flight:(flight tcb) ~smss;
          tcb.dupacks <- 0
        end
        else if not tcb.sack_ok then begin
          (* NewReno partial ACK: retransmit the next hole, deflate. *)
          let len = min (capacity tcb) (max 1 (Tcp_seq.sub (data_end tcb) ack)) in
          let len = min len (max 0 (Tcp_seq.sub (data_end tcb) ack)) in
          ignore (send_data tcb ~seq:ack ~len : Tcp_seq.t);
          Tcp_cc.on_partial_ack tcb.cc ~acked ~smss
        end
      end
      else begin
        tcb.dupacks <- 0;
        Tcp_cc.on_ack tcb.cc ~now:(now ()) ~srtt:(Tcp_rto.srtt tcb.rto) ~acked ~smss
      end;
      if Tcp_seq.equal tcb.snd_una tcb.snd_max then tcb.t_rtx <- never else restart_rtx tcb;
      if tcb.want_writable && Tcp_sndbuf.space tcb.sndbuf > 0 && not tcb.fin_queued then begin
        tcb.want_writable <- false;
        notify tcb Writable
      end
    end
    else if Tcp_seq.equal h.ack tcb.snd_una then begin
      let dup =
        payload = 0 && (not h.flags.syn) && (not h.flags.fin) && win = tcb.snd_wnd
        && Tcp_seq.gt tcb.snd_max tcb.snd_una
        && ((not tcb.sack_ok) || newly_sacked > 0 || not has_sack)
      in
      if dup then begin
        tcb.dupacks <- tcb.dupacks + 1;
        if tcb.in_recovery then begin
          if not tcb.sack_ok then Tcp_cc.on_dupack tcb.cc ~smss
        end
        else if
          (* With RACK, time decides what is lost, not counts (as Linux). *)
          (not (rack_on tcb))
          && (tcb.dupacks >= 3 || (tcb.sack_ok && Tcp_sack.is_lost tcb.sack ~smss tcb.snd_una))
        then begin
          if tcb.sack_ok || Tcp_seq.geq tcb.snd_una tcb.recover then enter_recovery tcb
        end
      end
    end;
    if advanced || newly_sacked > 0 then mtu_probe_check tcb;
    if rack_on tcb then begin
      if !dsack_seen then Tcp_rack.dsack tcb.rack;
      tlp_episode tcb h ~dsack:!dsack_seen;
      if advanced || newly_sacked > 0 then begin
        Tcp_rack.ack tcb.rack ~una:tcb.snd_una ~sacked:(Tcp_sack.blocks tcb.sack) ~now:(now ());
        rack_detect tcb
      end;
      if advanced then arm_tlp tcb
    end;
    (* Window update (RFC 9293: SND.WL1 and SND.WL2). *)
    if
      Tcp_verdict.window_update ~snd_una:tcb.snd_una ~snd_wl1:tcb.snd_wl1 ~snd_wl2:tcb.snd_wl2
        ~seq:h.seq ~ack:h.ack
    then begin
      tcb.snd_wnd <- win;
      tcb.max_snd_wnd <- max tcb.max_snd_wnd win;
      tcb.snd_wl1 <- h.seq;
      tcb.snd_wl2 <- h.ack;
      if win > 0 && tcb.t_persist <> never then begin
        tcb.t_persist <- never;
        tcb.persist_backoff <- 0
      end
    end

  let arm_keepalive tcb =
    match tcb.keepalive with
    | Some k -> tcb.t_keep <- tcb.last_recv + k.idle
    | None -> tcb.t_keep <- never

  (* {2 The protocol signature} *)

  let create ?(config = default_config) ?secret ?icmp lower =
    let t =
      {
        lower;
        config;
        conns = Key_tbl.create 64;
        listeners = Hashtbl.create 8;
        lower_conns = Host_tbl.create 8;
        secret = Tcp_secret.create ?key:secret ();
        next_ephemeral = 0;
        upcalls = Queue.create ();
        icmp = (match icmp with Some f -> f | None -> fun _ -> None);
        orphans = Queue.create ();
        n_orphans = 0;
        time_wait = Key_tbl.create 64;
        tw_queue = Queue.create ();
        tw_armed = never;
        tw_gen = 0;
        flushing = false;
        counters =
          {
            c_in = 0;
            c_out = 0;
            c_retrans = 0;
            c_bad_checksum = 0;
            c_malformed = 0;
            c_rst_in = 0;
            c_rst_out = 0;
            c_challenge = 0;
            c_dropped = 0;
            c_cookies_sent = 0;
            c_cookies_ok = 0;
            c_dsack_out = 0;
            c_dsack_in = 0;
          };
      }
    in
    match Lower.passive_open lower P.lower_pattern (fun _ -> lower_handler t) with
    | Ok () -> Ok t
    | Error e -> Error e

  (* The lower connection to [host] and whether it is new (then the
     connection made with it takes it over, or the caller closes it). *)
  let lower_conn t host =
    match Host_tbl.find_opt t.lower_conns host with
    | Some r -> Ok (r.lc, false)
    | None -> (
        match Lower.active_open t.lower (P.lower_address host) (fun _ -> lower_handler t) with
        | Ok c -> Ok (c, true)
        | Error e -> Error e)

  (* RFC 6056 algorithm 3 (double-hash without the second table): a keyed
     offset per remote end, plus a counter. *)
  let ephemeral_port t host rport =
    let low = 49152 and count = 16384 in
    let offset =
      Tcp_secret.port_offset t.secret ~endpoints:(Fmt.str "%a/%d" P.pp_host host rport)
    in
    let rec go i =
      if i >= count then Error (`In_use "no ephemeral port left")
      else
        let p = low + ((offset + t.next_ephemeral + i) mod count) in
        if Key_tbl.mem t.conns (host, rport, p) || Key_tbl.mem t.time_wait (host, rport, p) then
          go (i + 1)
        else begin
          t.next_ephemeral <- t.next_ephemeral + i + 1;
          Ok p
        end
    in
    go 0

  let active_open t (a : address) make =
    if a.port <= 0 || a.port > 0xFFFF then Error (`Bad_address (string_of_int a.port))
    else
      match lower_conn t a.host with
      | Error e -> Error e
      | Ok (lconn, fresh) -> (
          let port =
            match a.local_port with
            | Some p
              when Key_tbl.mem t.conns (a.host, a.port, p)
                   || Key_tbl.mem t.time_wait (a.host, a.port, p) ->
                Error (`In_use (Fmt.str "local port %d" p))
            | Some p -> Ok p
            | None -> ephemeral_port t a.host a.port
          in
          match port with
          | Error e ->
              if fresh then Lower.close lconn;
              Error e
          | Ok _ when not (make_room t) ->
              if fresh then Lower.close lconn;
              Error (`In_use "connection limit")
          | Ok lport ->
              let tcb =
                new_tcb t ~cfg:t.config ~lconn ~remote:a.host ~rport:a.port ~lport ~listener:None
                  ~state:Syn_sent
              in
              tcb.handler <- Some (make tcb);
              arm_keepalive tcb;
              send_syn tcb;
              schedule tcb;
              flush t;
              Ok tcb)

  let passive_open t (p : address_pattern) make =
    if p.port <= 0 || p.port > 0xFFFF then Error (`Bad_address (string_of_int p.port))
    else if Hashtbl.mem t.listeners p.port then Error (`In_use (Fmt.str "port %d" p.port))
    else begin
      let l =
        {
          l_port = p.port;
          l_from = p.from;
          l_make =
            (fun tcb ->
              arm_keepalive tcb;
              make tcb);
          half_open = 0;
          overflowed = min_int;
        }
      in
      Hashtbl.replace t.listeners p.port l;
      Ok ()
    end

  let unlisten t port = Hashtbl.remove t.listeners port

  let write tcb ?(off = 0) ?len b =
    let len = match len with Some l -> l | None -> Cstruct.length b - off in
    if off < 0 || len < 0 || off + len > Cstruct.length b then invalid_arg "Tcp.write";
    match tcb.state with
    | (Syn_sent | Syn_received | Established | Close_wait) when tcb.alive && not tcb.fin_queued ->
        let n = Tcp_sndbuf.write tcb.sndbuf b ~off ~len in
        if n < len then tcb.want_writable <- true;
        if n > 0 then begin
          output tcb;
          schedule tcb
        end;
        flush tcb.inst;
        n
    | _ -> 0

  let send_space tcb =
    match tcb.state with
    | (Syn_sent | Syn_received | Established | Close_wait) when tcb.alive && not tcb.fin_queued ->
        Tcp_sndbuf.space tcb.sndbuf
    | _ -> 0

  let send tcb pkt =
    let n = Packet.length pkt in
    let result =
      if not (tcb.alive && (match tcb.state with
          | Syn_sent | Syn_received | Established | Close_wait -> true
          | _ -> false) && not tcb.fin_queued)
      then Error `Closed
      else if n > Tcp_sndbuf.space tcb.sndbuf then begin
        tcb.want_writable <- true;
        Error (`Too_big n)
      end
      else begin
        ignore (write tcb (Packet.cstruct pkt) : int);
        Ok ()
      end
    in
    Packet.release pkt;
    result

  let consume tcb n =
    if tcb.alive && n > 0 then begin
      let open_now = Tcp_window.receive_window ~rcv_nxt:tcb.rcv_nxt ~rcv_adv:tcb.rcv_adv in
      tcb.unconsumed <- max 0 (tcb.unconsumed - n);
      (match tcb.state with
      | Established | Fin_wait_1 | Fin_wait_2 ->
          if
            Tcp_window.update_after_read ~buffer:tcb.cfg.receive_buffer ~unconsumed:tcb.unconsumed
              ~open_now ~rcv_mss:tcb.rcv_mss ~shift:tcb.rcv_wscale
          then begin
            tcb.ack_now <- true;
            output tcb;
            schedule tcb
          end
      | _ -> ());
      flush tcb.inst
    end

  let shutdown_tcb tcb =
    if tcb.alive && not tcb.fin_queued then begin
      match tcb.state with
      | Syn_sent ->
          report tcb Closed_normally;
          delete tcb
      | Syn_received -> tcb.fin_queued <- true
      | Established ->
          tcb.fin_queued <- true;
          tcb.state <- Fin_wait_1;
          output tcb
      | Close_wait ->
          tcb.fin_queued <- true;
          tcb.state <- Last_ack;
          output tcb
      | _ -> ()
    end

  let shutdown tcb =
    shutdown_tcb tcb;
    schedule tcb;
    flush tcb.inst

  let close tcb =
    let unread =
      tcb.unconsumed > 0
      &&
      match tcb.state with
      | Syn_received | Established | Close_wait | Fin_wait_1 | Fin_wait_2 -> true
      | _ -> false
    in
    if tcb.alive && unread then begin
      (* RFC 1122 4.2.2.13 and RFC 9293 3.10.4: closing with data unread
         loses it, and the peer must know. *)
      tcb.app_closed <- true;
      send_rst tcb;
      fail tcb `Closed
    end
    else if tcb.alive then begin
      tcb.app_closed <- true;
      tcb.unconsumed <- 0;
      shutdown_tcb tcb;
      if tcb.alive && tcb.state = Fin_wait_2 then
        tcb.t_2msl <- now () + tcb.cfg.fin_wait_2_timeout;
      orphaned tcb;
      schedule tcb
    end;
    flush tcb.inst

  let abort tcb =
    (match tcb.tw with Some w -> tw_remove tcb.inst w | None -> ());
    if tcb.alive then begin
      (match tcb.state with
      | Syn_sent | Closed | Listen | Time_wait -> ()
      | _ -> send_rst tcb);
      tcb.reported <- true;
      delete tcb
    end;
    flush tcb.inst

  let max_packet tcb = send_space tcb
  let headroom t = Tcp_wire.max_header + Lower.headroom t.lower

  let control t = function
    | Set_config c ->
        t.config <- c;
        Ok ()
    | Abort_all ->
        let all = Key_tbl.fold (fun _ tcb acc -> tcb :: acc) t.conns [] in
        List.iter
          (fun tcb ->
            (match tcb.state with
            | Syn_sent | Closed | Listen | Time_wait -> ()
            | _ -> send_rst tcb);
            fail tcb `Reset)
          all;
        let tws = Key_tbl.fold (fun _ w acc -> w :: acc) t.time_wait [] in
        List.iter (tw_remove t) tws;
        flush t;
        Ok ()

  (* The heap words of a connection record and its small parts, rounded up. *)
  let tcb_bytes = 2048
  let tw_bytes = 160

  let query t =
    let c = t.counters in
    {
      segments_in = c.c_in;
      segments_out = c.c_out;
      retransmitted = c.c_retrans;
      bad_checksum = c.c_bad_checksum;
      malformed = c.c_malformed;
      resets_in = c.c_rst_in;
      resets_out = c.c_rst_out;
      challenge_acks = c.c_challenge;
      dropped = c.c_dropped;
      syn_cookies_sent = c.c_cookies_sent;
      syn_cookies_accepted = c.c_cookies_ok;
      memory =
        Key_tbl.fold
          (fun _ tcb acc ->
            acc + tcb_bytes + Tcp_sndbuf.allocated tcb.sndbuf + Tcp_reass.pinned tcb.reass)
          t.conns
          (Key_tbl.length t.time_wait * tw_bytes);
      active = Key_tbl.length t.conns + Key_tbl.length t.time_wait;
      orphans = t.n_orphans;
      dsacks_sent = c.c_dsack_out;
      dsacks_received = c.c_dsack_in;
    }

  let state tcb =
    if tcb.alive then tcb.state
    else match tcb.tw with Some w when w.tw_live -> Time_wait | _ -> Closed
  let local_port tcb = tcb.local_port
  let remote tcb = (tcb.remote_host, tcb.remote_port)

  let set_nodelay tcb b =
    tcb.nodelay <- b;
    if b then begin
      output tcb;
      schedule tcb
    end;
    flush tcb.inst

  let set_keepalive tcb k =
    tcb.keepalive <- k;
    tcb.keep_probes <- 0;
    arm_keepalive tcb;
    schedule tcb

  let info tcb =
    {
      state = state tcb;
      snd_mss = smss tcb;
      rcv_mss = tcb.rcv_mss;
      snd_wscale = (if tcb.ws_ok then Some tcb.snd_wscale else None);
      rcv_wscale = (if tcb.ws_ok then Some tcb.rcv_wscale else None);
      sack_ok = tcb.sack_ok;
      timestamps_ok = tcb.ts_ok;
      srtt = Tcp_rto.srtt tcb.rto;
      rttvar = Tcp_rto.rttvar tcb.rto;
      rto = Tcp_rto.rto tcb.rto;
      cwnd = Tcp_cc.cwnd tcb.cc;
      ssthresh = Tcp_cc.ssthresh tcb.cc;
      snd_wnd = tcb.snd_wnd;
      rcv_wnd = max 0 (Tcp_seq.sub tcb.rcv_adv tcb.rcv_nxt);
      unacked = flight tcb;
      unsent = max 0 (Tcp_seq.sub (data_end tcb) tcb.snd_nxt);
      unread = tcb.unconsumed;
      bytes_sent = tcb.bytes_acked;
      bytes_received = tcb.bytes_delivered;
      segments_retransmitted = tcb.n_retrans;
      fast_retransmits = tcb.n_fast;
      timeouts = tcb.n_timeouts;
      probes = tcb.n_probes;
      path_mtu = tcb.lower_max;
      mtu_probes = tcb.n_mtu_probes;
      ooo_segments = Tcp_reass.segments tcb.reass;
      soft_error = tcb.soft_error;
    }
end
