open Consort
open Tcp_types
module Log = Tcp_tcb.Log

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

module Make (B : Tcp_tcb.S) = struct
  open B

  (* The loss probe's timer (RFC 8985 section 7.2): two smoothed RTTs, plus
     the worst delayed ACK when one segment is out, at most the RTO; not
     armed in recovery, or while a probe's episode lasts. *)
  let arm_tlp tcb =
    tcb.t_tlp <- never;
    if
      rack_on tcb && (not tcb.in_recovery) && tcb.tlp_end = None
      && Tcp_seq.lt tcb.snd_una tcb.snd_max
      &&
      match tcb.state with
      | Established | Close_wait | Fin_wait_1 | Closing | Last_ack -> true
      | _ -> false
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
      Tcp_window.advertise ~buffer:(receive_share tcb) ~unconsumed:tcb.unconsumed
        ~rcv_nxt:tcb.rcv_nxt ~rcv_adv:tcb.rcv_adv ~rcv_mss:tcb.rcv_mss
        ~shift:(if syn then 0 else tcb.rcv_wscale)
    in
    if tcb.state <> Syn_sent then tcb.rcv_adv <- edge;
    field

  let checksum_into ~dst pkt =
    match pseudo_header with
    | None -> ()
    | Some f ->
        let cs = Packet.cstruct pkt in
        let init = f ~src:local ~dst ~len:(Cstruct.length cs) in
        Tcp_wire.set_checksum cs (Tcp_checksum.finish (Tcp_checksum.sum ~init cs))

  let transmit t lconn ~dst pkt =
    checksum_into ~dst pkt;
    t.counters.c_out <- t.counters.c_out + 1;
    match lower_send lconn pkt with
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
    let pkt = Packet.create ~headroom:(hl + lower_headroom t.lower) pool len in
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

  (* Pacing (BBR): a data segment of [len] bytes went; the next may go
     [len] / rate later. Sending late (a timer fires when it can) earns a
     credit of up to a millisecond of data, or two segments, sent at once,
     as Linux's pacing sends up to a millisecond of data together. *)
  let pacing_rate tcb = match tcb.bbr with Some b -> Tcp_bbr.pacing_rate b | None -> 0

  let pace_sent tcb len =
    let rate = pacing_rate tcb in
    if rate > 0 && len > 0 then begin
      let n = now () in
      let credit = max (Time.of_ms 1) (2 * smss tcb * 1_000_000_000 / rate) in
      tcb.pace_next <- max tcb.pace_next (n - credit) + (len * 1_000_000_000 / rate)
    end

  (* Whether pacing holds the next data segment back (its timer armed). *)
  let paced tcb =
    pacing_rate tcb > 0
    && tcb.pace_next > now ()
    &&
    (tcb.t_pace <- tcb.pace_next;
     true)

  (* Delivery-rate records (draft-cheng-iccrg-delivery-rate-estimation)
     for a congestion control that takes rate samples. *)
  let rate_sent tcb ~seq ~seg_end ~idle =
    if tcb.bbr <> None && Tcp_seq.gt seg_end seq then begin
      let r =
        match tcb.rate with
        | Some r -> r
        | None ->
            let r = Tcp_rate.create () in
            tcb.rate <- Some r;
            r
      in
      Tcp_rate.sent r ~seq ~end_:seg_end ~now:(now ()) ~idle
    end

  (* Send a data segment (new or retransmitted) starting at [seq]. *)
  let send_data ?(probe = false) tcb ~seq ~len =
    let idle = Tcp_seq.equal tcb.snd_una tcb.snd_max in
    (* RFC 5681 section 4.1: after an idle period longer than the RTO,
       start again from the initial window. *)
    if
      Tcp_seq.equal tcb.snd_una tcb.snd_max
      && Tcp_seq.geq seq tcb.snd_max
      && now () - tcb.last_data_sent > Tcp_rto.rto tcb.rto
    then Tcp_cc.on_idle tcb.cc ~initial:(initial_cwnd tcb);
    if len > 0 then tcb.last_data_sent <- now ();
    let fin =
      tcb.fin_queued
      && Tcp_seq.equal (Tcp_seq.add seq len) (data_end tcb)
      && tcb.state <> Syn_received
    in
    let seg_end = Tcp_seq.add seq (len + if fin then 1 else 0) in
    let fresh = Tcp_seq.gt seg_end tcb.snd_max in
    if tcb.in_recovery then tcb.prr_out <- tcb.prr_out + Tcp_seq.sub seg_end seq;
    if Tcp_seq.lt seq tcb.snd_max then begin
      (* Eifel (RFC 3522): the first retransmission of an episode that may
         be undone is stamped; an ACK echoing an older timestamp was drawn
         by the original. *)
      if tcb.undo_retrans >= 0 && tcb.ts_ok && tcb.retrans_stamp = None then
        tcb.retrans_stamp <- Some (ts_now tcb);
      tcb.rxt_high <- Tcp_seq.max tcb.rxt_high (Tcp_seq.min seg_end tcb.snd_max);
      tcb.n_retrans <- tcb.n_retrans + 1;
      if tcb.undo_retrans >= 0 then tcb.undo_retrans <- tcb.undo_retrans + 1;
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
    if rack_on tcb && Tcp_seq.gt seg_end seq then
      Tcp_rack.sent ~fin tcb.rack ~seq ~end_:seg_end ~now:(now ());
    rate_sent tcb ~seq ~seg_end ~idle;
    emit tcb ~fin ~seq ~len;
    pace_sent tcb len;
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
    let fin_pending = tcb.fin_queued && not (Tcp_seq.gt tcb.snd_nxt (data_end tcb)) in
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
     never in recovery, one at a time. [`Wait] when only the segments in
     flight keep the congestion window from taking it: new data waits for
     them to drain (as Linux's tcp_mtu_probe does), else small segments
     would fill every opening and the probe never go. *)
  let send_mtu_probe tcb =
    (* A search closed below what the lower layer allows opens again when
       the raise timer has run out (RFC 8899 section 5.2): a lost probe may
       have been lost to congestion, or the path may have changed. *)
    if
      tcb.pmtu_high - tcb.lower_max <= probe_margin
      && tcb.lower_max < tcb.pmtu_max
      && now () >= tcb.pmtu_raise_at
    then begin
      tcb.pmtu_high <- tcb.pmtu_max + 1;
      tcb.pmtu_raise_at <- never
    end;
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
        `Sent
      end
      else if
        size > tcb.lower_max
        && len > capacity tcb
        && avail >= len && wnd >= len
        && Tcp_cc.cwnd tcb.cc >= len
        && Tcp_seq.lt tcb.snd_una tcb.snd_nxt
      then `Wait
      else `No
    end
    else `No

  (* A size is too big when probes of it are lost [max_probes] times in a
     row (RFC 8899 section 5.1.2, MAX_PROBES): one loss may be the path's
     ordinary loss, and would close the search below the path MTU. *)
  let max_probes = 3

  let mtu_probe_failed tcb =
    match tcb.mtu_probe with
    | Some (_, _, size) ->
        tcb.mtu_probe <- None;
        tcb.mtu_probe_losses <- tcb.mtu_probe_losses + 1;
        if tcb.mtu_probe_losses >= max_probes then begin
          tcb.mtu_probe_losses <- 0;
          tcb.pmtu_high <- min tcb.pmtu_high size;
          tcb.pmtu_raise_at <- now () + tcb.cfg.pmtu_raise
        end;
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
        tcb.mtu_probe_losses <- 0;
        if size > tcb.lower_max then tcb.lower_max <- size;
        Log.debug (fun m -> m "%a: path MTU probe of %d bytes arrived" pp_connection tcb size)
    | _ -> ()

  let limited_transmit tcb = if tcb.in_recovery then 0 else min tcb.dupacks 2 * smss tcb

  (* Bytes in flight during a SACK recovery: RACK's count, or RFC 6675's
     SetPipe without it. *)
  let recovery_pipe tcb =
    if rack_on tcb then Tcp_rack.pipe tcb.rack
    else
      Tcp_sack.pipe tcb.sack ~una:tcb.snd_una ~high_rxt:tcb.high_rxt ~high_data:tcb.snd_max
        ~smss:(smss tcb)

  (* Proportional rate reduction (RFC 6937, PRR-SSRB as Linux's
     tcp_cwnd_reduction): on each ACK of a SACK recovery with a loss-based
     congestion control, the window becomes what is in flight plus what
     may go now: while more than ssthresh is in flight, ssthresh/RecoverFS
     of what the peer received since the recovery began, less what was
     sent since; below it, what was delivered and not yet answered (at
     least this ACK's data, a segment more when SND.UNA advanced), up to
     ssthresh. [delivered]: the bytes this ACK newly acknowledged or
     SACKed; [entered]: the recovery began at this ACK, which counted them
     already. *)
  let prr_ack ?(entered = false) tcb ~delivered ~advanced =
    if tcb.in_recovery && tcb.prr_fs > 0 && (delivered > 0 || entered) then begin
      let smss = smss tcb in
      if not entered then tcb.prr_delivered <- tcb.prr_delivered + delivered;
      let pipe = recovery_pipe tcb in
      let ssthresh = Tcp_cc.ssthresh tcb.cc in
      let sndcnt =
        if pipe > ssthresh then
          (((ssthresh * tcb.prr_delivered) + tcb.prr_fs - 1) / tcb.prr_fs) - tcb.prr_out
        else
          min (ssthresh - pipe)
            (max (tcb.prr_delivered - tcb.prr_out) delivered + if advanced then smss else 0)
      in
      Tcp_cc.set_cwnd tcb.cc (pipe + max 0 sndcnt)
    end

  let output ?(force = false) tcb =
    if tcb.alive then begin
      let sent = ref false in
      if can_send_data tcb then begin
        let smss = smss tcb in
        let continue = ref true and n = ref 0 and force = ref force in
        while !continue && !n < 10_000 do
          incr n;
          if (not !force) && paced tcb then continue := false
          else if tcb.in_recovery && tcb.sack_ok then begin
            let rack = rack_on tcb in
            let pipe = recovery_pipe tcb in
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
                      match r with `Unsacked (s, len) -> rexmit s len | `None -> continue := false))
          end
          else begin
            let budget =
              if !force then max_int
              else Tcp_cc.cwnd tcb.cc + limited_transmit tcb - Tcp_seq.sub tcb.snd_nxt tcb.snd_una
            in
            match if !force then `No else send_mtu_probe tcb with
            | `Sent -> sent := true
            | `Wait -> continue := false
            | `No -> (
                match next_new tcb ~budget ~force:!force with
                | Some len ->
                    let seq = tcb.snd_nxt in
                    let e = send_data tcb ~seq ~len in
                    tcb.snd_nxt <- Tcp_seq.max tcb.snd_nxt e;
                    sent := true
                | None -> continue := false)
          end;
          force := false
        done;
        (* Nothing more to send though the window allows: the rate samples
           until what is in flight is delivered are application-limited. *)
        (match tcb.rate with
        | Some r
          when (not tcb.in_recovery)
               && Tcp_seq.geq tcb.snd_nxt (data_end tcb)
               && flight tcb < Tcp_cc.cwnd tcb.cc ->
            Tcp_rate.app_limited r ~inflight:(flight tcb)
        | _ -> ());
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

  (* A segment sent without a connection: a RST, or a SYN-ACK carrying a
     cookie. *)
  let send_ctl t lconn ~dst hdr =
    let hl = Tcp_packet.header_length hdr in
    let pkt = Packet.create ~headroom:(hl + lower_headroom t.lower) pool 0 in
    Tcp_packet.encode_into hdr (Packet.push pkt hl);
    transmit t lconn ~dst pkt

  let send_raw t lconn ~dst ~src_port ~dst_port ~seq ~ack ~ack_flag =
    t.counters.c_rst_out <- t.counters.c_rst_out + 1;
    send_ctl t lconn ~dst
      (Tcp_packet.v ~src_port ~dst_port ~seq ~ack
         ~flags:{ Tcp_packet.no_flags with rst = true; ack = ack_flag }
         ())

  (* {2 Limits} *)

  let send_rst tcb = if tcb.alive then emit tcb ~rst:true ~ack:false ~seq:tcb.snd_max ~len:0

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
        match oldest t.orphans is_orphan with Some o -> evict o "orphan limit" | None -> ()
    end

  (* Fast retransmit and recovery: after three duplicate ACKs, SACKed data
     past the lost (RFC 6675 IsLost), or a loss RACK detected ([rack]:
     then what RACK marked lost goes at once). *)
  let enter_recovery ?(rack = false) ?(cc = true) ?(on_ack = true) tcb =
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
    if cc then begin
      (* What an undo restores, should D-SACKs show every retransmission
         of this recovery needless (RFC 3708, RFC 4015). *)
      tcb.undo_cwnd <- Tcp_cc.cwnd tcb.cc;
      tcb.undo_ssthresh <- Tcp_cc.ssthresh tcb.cc;
      tcb.undo_retrans <- 0;
      tcb.undo_marker <- una;
      tcb.undo_rto <- false;
      tcb.retrans_stamp <- None;
      tcb.rxt_high <- una;
      Tcp_cc.on_loss tcb.cc ~now:(now ()) ~flight:flight_before ~smss ~sack:tcb.sack_ok
    end;
    (* PRR from here (RFC 6937, RecoverFS the flight before the recovery):
       the window is set on each ACK, from this one on ([on_ack]): only the
       first retransmission goes now. What the peer SACKed above SND.UNA
       counts as delivered in this recovery: it arrived after the lost
       segment was sent, and RACK waited a round trip for it before saying
       lost. (Counted from zero, as Linux does, a loss found when most of
       the flight is SACKed leaves almost nothing in flight and few ACKs to
       come: lost, they leave the RTO.) *)
    tcb.prr_delivered <- (if tcb.sack_ok then Tcp_sack.sacked_bytes tcb.sack else 0);
    tcb.prr_out <- 0;
    tcb.prr_fs <- (if cc && tcb.sack_ok && Tcp_cc.loss_based tcb.cc then max 1 flight_before else 0);
    if tcb.prr_fs > 0 then begin
      Tcp_cc.set_cwnd tcb.cc (min (Tcp_cc.cwnd tcb.cc) (recovery_pipe tcb));
      (* Begun by RACK's timer, no ACK is sure to follow: PRR at once, with
         RFC 6937's segment more below ssthresh. *)
      if not on_ack then prr_ack ~entered:true tcb ~delivered:0 ~advanced:true
    end;
    tcb.t_tlp <- never;
    tcb.tlp_end <- None;
    if rack then output ~force:true tcb
    else begin
      let e = send_data tcb ~seq:una ~len in
      if tcb.sack_ok then tcb.high_rxt <- e
    end

  (* RACK's detection (RFC 8985 section 6.2 steps 4 and 5), after an ACK
     that delivered something or when its timer expires. *)
  let rack_detect ?(on_ack = false) tcb =
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
        if not tcb.in_recovery then
          enter_recovery ~rack:true ~cc:(not (probe_lost && lost = 1)) ~on_ack tcb
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
            let len = min (capacity tcb) (max 0 (Tcp_seq.sub (Tcp_seq.min e (data_end tcb)) s)) in
            ignore (send_data ~probe:true tcb ~seq:s ~len : Tcp_seq.t)
        | None -> ()
      end;
      Log.debug (fun m ->
          m "%a: loss probe (%s)" pp_connection tcb (if fresh then "new" else "last"));
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
end
