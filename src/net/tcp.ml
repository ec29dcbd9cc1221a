open Consort
include Tcp_types
module Log = Tcp_tcb.Log

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

module Make
    (Lower : LOWER)
    (P :
      PARAMS
        with type host = Lower.host
         and type lower_address = Lower.address
         and type lower_pattern = Lower.address_pattern) =
struct
  (* The records and the helpers every part shares; what goes out (and
     loss recovery, resets); TIME-WAIT records; timers; listeners. Each
     uses only those before it. *)
  module B = Tcp_tcb.Make (Lower) (P)
  include B

  type tcp_address = { host : host; port : int; local_port : int option }
  type tcp_pattern = { port : int; from : host option }
  type address = tcp_address
  type address_pattern = tcp_pattern
  type nonrec status = status
  type nonrec control = control
  type info = stats

  module O = Tcp_output.Make (B)
  open O
  module Tw = Tcp_time_wait.Make (B)
  open Tw
  module Timers = Tcp_timers.Make (B)
  open Timers
  module L = Tcp_listener.Make (B)

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

  let rec receive_data tcb seq pkt =
    if over_budget tcb (Packet.length pkt) then begin
      tcb.inst.counters.c_memory_drops <- tcb.inst.counters.c_memory_drops + 1;
      Packet.release pkt;
      tcb.ack_now <- true
    end
    else begin
      receive_in_budget tcb seq pkt;
      recharge tcb
    end

  and receive_in_budget tcb seq pkt =
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
              tcb.pmtu_max <- min tcb.pmtu_max mtu;
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
        Log.debug (fun m ->
            m "%a: recv %a len %d" pp_connection tcb Tcp_packet.pp h (Packet.length pkt));
        segment_arrives tcb h pkt
    | None when Key_tbl.mem t.time_wait (remote, h.src_port, h.dst_port) ->
        tw_input t (Key_tbl.find t.time_wait (remote, h.src_port, h.dst_port)) lconn remote h pkt
    | None -> (
        match Hashtbl.find_opt t.listeners h.dst_port with
        | Some l when match l.l_from with None -> true | Some f -> P.equal_host f remote -> (
            match L.listen_input t l lconn remote h pkt with
            | Some tcb -> segment_arrives tcb h pkt
            | None -> ())
        | _ ->
            let payload = Packet.length pkt in
            Packet.release pkt;
            closed_input t lconn remote h ~payload)

  and tw_input t w lconn remote (h : Tcp_packet.t) pkt =
    match Tw.tw_input t w h ~payload:(Packet.length pkt) with
    | `Reopen ->
        acquire_lower t remote lconn;
        tw_remove t w;
        dispatch t lconn remote h pkt;
        release_lower t remote
    | `Done -> Packet.release pkt

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
        send_raw t tcb.lconn ~dst:tcb.remote_host ~src_port:tcb.local_port ~dst_port:tcb.remote_port
          ~seq:h.ack ~ack:Tcp_seq.zero ~ack_flag:false
    end
    else if h.flags.rst then begin
      if h.flags.ack then fail tcb (`Refused "connection refused")
    end
    else if h.flags.syn then begin
      tcb.irs <- h.seq;
      tcb.rcv_nxt <- Tcp_seq.succ h.seq;
      tcb.rcv_adv <-
        Tcp_seq.add tcb.rcv_nxt (min 0xFFFF (max 0 (receive_share tcb - tcb.unconsumed)));
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
        && Tcp_seq.equal h.seq tcb.irs && Tcp_seq.equal h.ack tcb.snd_max
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
      let acceptable =
        Tcp_verdict.acceptable ~rcv_nxt:tcb.rcv_nxt ~rcv_wnd:wnd ~seq:h.seq ~seg_len
      in
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
          (* A bare FIN at RCV.NXT takes no room: taken at a zero window,
             as Linux does; a byte of data is not. *)
          Packet.trim pkt 0;
          if len > 0 then fin := false
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
                | (Established | Fin_wait_1 | Fin_wait_2) when Packet.length pkt > 0 ->
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
        send_raw t tcb.lconn ~dst:tcb.remote_host ~src_port:tcb.local_port ~dst_port:tcb.remote_port
          ~seq:h.ack ~ack:Tcp_seq.zero ~ack_flag:false;
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

  (* D-SACK-based undo (RFC 3708 section 3.2, RFC 4015; Linux's
     undo_retrans): each duplicate the peer reports of data at or above
     where the recovery began stands for a needless retransmission; when
     all of the recovery's are so reported, nothing was lost and the window
     reduction is undone (the recovery too, if still under way). *)
  and dsack_undo tcb ~smss l r =
    if
      tcb.undo_retrans > 0 && (not tcb.undo_rto) && Tcp_seq.geq l tcb.undo_marker
      && Tcp_seq.leq r tcb.snd_max && Tcp_seq.gt r l
    then begin
      let segs = (Tcp_seq.sub r l + smss - 1) / smss in
      tcb.undo_retrans <- tcb.undo_retrans - segs;
      if tcb.undo_retrans <= 0 then undo tcb "spurious recovery undone (D-SACK)"
    end

  and undo tcb why =
    Log.debug (fun m -> m "%a: %s" pp_connection tcb why);
    Tcp_cc.undo tcb.cc ~cwnd:tcb.undo_cwnd ~ssthresh:tcb.undo_ssthresh;
    tcb.undo_retrans <- -1;
    tcb.retrans_stamp <- None;
    tcb.n_undos <- tcb.n_undos + 1;
    if tcb.in_recovery then begin
      tcb.in_recovery <- false;
      tcb.prr_fs <- 0;
      tcb.dupacks <- 0
    end;
    (* What the episode marked lost is in flight again: RACK finds it lost
       again by time if it is (else, out of recovery, a segment marked lost
       and never sent again waits for the RTO). *)
    Tcp_rack.unmark_lost tcb.rack;
    if tcb.undo_rto then begin
      (* The timeout was spurious (RFC 4015's response): sending goes on
         with new data. *)
      tcb.undo_rto <- false;
      tcb.snd_nxt <- tcb.snd_max
    end

  (* Eifel detection (RFC 3522; Linux's tcp_packet_delayed): an ACK that
     acknowledges every retransmission of the episode and echoes a
     timestamp older than the first of them was drawn by the originals:
     none was needed, and the reduction is undone. *)
  and ts_undo tcb (h : Tcp_packet.t) =
    match (tcb.retrans_stamp, find_ts h.options) with
    | Some stamp, Some (_, echo)
      when tcb.ts_ok && tcb.undo_retrans > 0 && echo <> 0
           && Tcp_seq.lt (Tcp_seq.of_int echo) (Tcp_seq.of_int stamp)
           && Tcp_seq.geq h.ack tcb.rxt_high ->
        undo tcb "spurious retransmission undone (timestamp)"
    | _ -> ()

  and process_ack tcb (h : Tcp_packet.t) ~payload =
    let smss = smss tcb in
    let win = h.window lsl tcb.snd_wscale in
    (* A receiver that keeps its window shut answers every probe; a
       connection the application closed gives up after its probes
       anyway. *)
    if (not tcb.app_closed) || win > 0 then tcb.persist_probes <- 0;
    let advanced = Tcp_seq.gt h.ack tcb.snd_una in
    let una0 = tcb.snd_una and sacked0 = Tcp_sack.sacked_bytes tcb.sack and fast0 = tcb.n_fast in
    let dsack_seen = ref false and newly = ref [] in
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
                tcb.inst.counters.c_dsack_in <- tcb.inst.counters.c_dsack_in + 1;
                dsack_undo tcb ~smss l r
            | _ -> ());
            if rack_on tcb || tcb.bbr <> None then
              newly := Tcp_sack.newly tcb.sack ~una:tcb.snd_una ~high:tcb.snd_max bs;
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
      (* Under memory pressure an empty send buffer goes back to the budget;
         so does one that is not the connection's share now (the next write
         takes the share: smaller under pressure, whole after it). *)
      if
        Tcp_sndbuf.length tcb.sndbuf = 0
        && Tcp_sndbuf.allocated tcb.sndbuf > 0
        && ((not (Queue.is_empty tcb.inst.waiting_memory))
           || Tcp_sndbuf.capacity tcb.sndbuf <> send_share tcb)
      then release_sndbuf tcb;
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
      ts_undo tcb h;
      tcb.snd_una <- ack;
      if Tcp_seq.lt tcb.snd_nxt ack then tcb.snd_nxt <- ack;
      Tcp_sack.advance tcb.sack ack;
      if Tcp_seq.lt tcb.high_rxt ack then tcb.high_rxt <- ack;
      tcb.retries <- 0;
      if tcb.in_recovery then begin
        if Tcp_seq.geq ack tcb.recover then begin
          tcb.in_recovery <- false;
          if rack_on tcb then Tcp_rack.recovered tcb.rack;
          (* After PRR the window is the threshold, whatever is in flight
             (as Linux's tcp_end_cwnd_reduction). *)
          if tcb.prr_fs > 0 then Tcp_cc.set_cwnd tcb.cc (Tcp_cc.ssthresh tcb.cc)
          else Tcp_cc.on_recovered tcb.cc ~flight:(flight tcb) ~smss;
          tcb.prr_fs <- 0;
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
      if !dsack_seen then Tcp_rack.dsack tcb.rack ~una:tcb.snd_una ~nxt:tcb.snd_nxt;
      tlp_episode tcb h ~dsack:!dsack_seen;
      if advanced || newly_sacked > 0 then begin
        let echoed =
          match find_ts h.options with
          | Some (_, echo) when tcb.ts_ok && echo <> 0 ->
              let ms = Tcp_seq.sub (Tcp_seq.of_int (ts_now tcb)) (Tcp_seq.of_int echo) in
              if ms >= 0 then Some (Time.of_ms ((now () / 1_000_000) - ms)) else None
          | _ -> None
        in
        Tcp_rack.ack ?echoed tcb.rack ~una:tcb.snd_una ~newly:!newly
          ~sacked:(fun s e -> Tcp_sack.unsacked_between tcb.sack s e = 0)
          ~now:(now ());
        rack_detect ~on_ack:true tcb
      end;
      if advanced then arm_tlp tcb
    end;
    prr_ack ~entered:(tcb.n_fast <> fast0) tcb ~advanced
      ~delivered:(Tcp_seq.sub tcb.snd_una una0 + Tcp_sack.sacked_bytes tcb.sack - sacked0);
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
    end;
    (* A rate sample for BBR, after loss detection. *)
    match tcb.rate with
    | Some r when advanced || newly_sacked > 0 -> (
        let total = Tcp_seq.sub tcb.snd_una tcb.iss + Tcp_sack.sacked_bytes tcb.sack in
        let inflight = if rack_on tcb then Tcp_rack.pipe tcb.rack else flight tcb in
        match Tcp_rate.ack r ~una:tcb.snd_una ~newly:!newly ~total ~inflight ~now:(now ()) with
        | Some rs -> Option.iter (fun b -> Tcp_bbr.on_rate b rs ~smss) tcb.bbr
        | None -> ())
    | _ -> ()

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
        port_counters = Array.make 1024 0;
        upcalls = Queue.create ();
        icmp = (match icmp with Some f -> f | None -> fun _ -> None);
        orphans = Queue.create ();
        n_orphans = 0;
        buffered = Queue.create ();
        sndbuf_bytes = 0;
        rcv_bytes = 0;
        spares = [];
        spare_bytes = 0;
        waiting_memory = Queue.create ();
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
            c_memory_resets = 0;
            c_memory_refused = 0;
            c_window_cut = 0;
            c_memory_drops = 0;
            c_shares_cut = 0;
            c_spares_reused = 0;
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

  (* RFC 6056 algorithm 4 (double-hash): a keyed offset per remote end,
     plus a counter chosen among 1024 by another keyed hash of it, so that
     what one destination sees of the ports says nothing of connections to
     others. *)
  let ephemeral_port t host rport =
    let low = 49152 and count = 16384 in
    let endpoints = Fmt.str "%a/%d" P.pp_host host rport in
    let offset = Tcp_secret.port_offset t.secret ~endpoints in
    let index = Tcp_secret.port_index t.secret ~endpoints mod Array.length t.port_counters in
    let counter = t.port_counters.(index) in
    let rec go i =
      if i >= count then Error (`In_use "no ephemeral port left")
      else
        let p = low + ((offset + counter + i) mod count) in
        if Key_tbl.mem t.conns (host, rport, p) || Key_tbl.mem t.time_wait (host, rport, p) then
          go (i + 1)
        else begin
          t.port_counters.(index) <- (counter + i + 1) land 0xFFFF;
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

  (* The memory budget (config.memory_limit): a connection's send buffer,
     taken whole at its first write, is granted when it fits; else the
     oldest connections holding one behind a zero window are reset until it
     fits (Linux's tcp_mem pressure); else the writer waits for memory to
     come back (Tcp_tcb.delete wakes it). *)
  let zero_window_holder self v =
    v != self && v.alive
    && Tcp_sndbuf.allocated v.sndbuf > 0
    && v.snd_wnd = 0
    && Tcp_seq.lt v.snd_nxt (data_end v)

  let take_memory tcb =
    let t = tcb.inst in
    let need = send_share tcb in
    Tcp_sndbuf.resize tcb.sndbuf need;
    let need = Tcp_sndbuf.capacity tcb.sndbuf in
    let rec reclaim () =
      if t.sndbuf_bytes + t.rcv_bytes + need > t.config.memory_limit then
        (* First the buffers that hold nothing (no loss), then resets. *)
        match
          Queue.fold
            (fun acc v ->
              match acc with
              | Some _ -> acc
              | None ->
                  if
                    v != tcb && v.alive
                    && Tcp_sndbuf.allocated v.sndbuf > 0
                    && Tcp_sndbuf.length v.sndbuf = 0
                  then Some v
                  else None)
            None t.buffered
        with
        | Some v ->
            release_sndbuf v;
            reclaim ()
        | None -> (
            match
              Queue.fold
                (fun acc v ->
                  match acc with
                  | Some _ -> acc
                  | None -> if zero_window_holder tcb v then Some v else None)
                None t.buffered
            with
            | Some v ->
                Log.debug (fun m -> m "%a: reset for memory" pp_connection v);
                t.counters.c_memory_resets <- t.counters.c_memory_resets + 1;
                send_rst v;
                fail v `Timeout;
                reclaim ()
            | None -> ())
    in
    reclaim ();
    if t.sndbuf_bytes + t.rcv_bytes + need <= t.config.memory_limit then begin
      t.sndbuf_bytes <- t.sndbuf_bytes + need;
      if need < tcb.cfg.send_buffer then t.counters.c_shares_cut <- t.counters.c_shares_cut + 1;
      (* A spare of the size, else a part of a larger one (its rest stays a
         spare: shares smaller than the buffers given back reuse their
         memory rather than leave it to the GC); or else the spares go:
         those in use and the spares stay within the budget. *)
      (match List.partition (fun b -> Cstruct.length b = need) t.spares with
      | b :: rest, others ->
          Tcp_sndbuf.adopt tcb.sndbuf b;
          t.counters.c_spares_reused <- t.counters.c_spares_reused + 1;
          t.spares <- rest @ others;
          t.spare_bytes <- t.spare_bytes - need
      | [], _ -> (
          match List.partition (fun b -> Cstruct.length b > need) t.spares with
          | b :: rest, others ->
              Tcp_sndbuf.adopt tcb.sndbuf (Cstruct.sub b 0 need);
              t.counters.c_spares_reused <- t.counters.c_spares_reused + 1;
              t.spares <- Cstruct.shift b need :: (rest @ others);
              t.spare_bytes <- t.spare_bytes - need
          | [], _ -> ()));
      while t.sndbuf_bytes + t.spare_bytes > t.config.memory_limit && t.spares <> [] do
        match t.spares with
        | b :: rest ->
            t.spares <- rest;
            t.spare_bytes <- t.spare_bytes - Cstruct.length b
        | [] -> ()
      done;
      if not tcb.buffer_queued then begin
        tcb.buffer_queued <- true;
        Queue.push tcb t.buffered
      end;
      true
    end
    else begin
      t.counters.c_memory_refused <- t.counters.c_memory_refused + 1;
      tcb.want_writable <- true;
      Queue.push tcb t.waiting_memory;
      compact t.waiting_memory (fun w -> w.alive) (Key_tbl.length t.conns);
      false
    end

  let has_memory tcb = Tcp_sndbuf.allocated tcb.sndbuf > 0 || take_memory tcb

  let write tcb ?(off = 0) ?len b =
    let len = match len with Some l -> l | None -> Cstruct.length b - off in
    if off < 0 || len < 0 || off + len > Cstruct.length b then invalid_arg "Tcp.write";
    match tcb.state with
    | (Syn_sent | Syn_received | Established | Close_wait)
      when tcb.alive && (not tcb.fin_queued) && (len = 0 || has_memory tcb) ->
        let n = Tcp_sndbuf.write tcb.sndbuf b ~off ~len in
        tcb.want_writable <- n < len;
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
      if
        not
          (tcb.alive
          && (match tcb.state with
             | Syn_sent | Syn_received | Established | Close_wait -> true
             | _ -> false)
          && not tcb.fin_queued)
      then Error `Closed
      else if n > Tcp_sndbuf.space tcb.sndbuf || (n > 0 && not (has_memory tcb)) then begin
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
      recharge tcb;
      (match tcb.state with
      | Established | Fin_wait_1 | Fin_wait_2 ->
          if
            Tcp_window.update_after_read ~buffer:(receive_share tcb) ~unconsumed:tcb.unconsumed
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
      recharge tcb;
      shutdown_tcb tcb;
      if tcb.alive && tcb.state = Fin_wait_2 then tcb.t_2msl <- now () + tcb.cfg.fin_wait_2_timeout;
      orphaned tcb;
      schedule tcb
    end;
    flush tcb.inst

  let abort tcb =
    (match tcb.tw with Some w -> tw_remove tcb.inst w | None -> ());
    if tcb.alive then begin
      (match tcb.state with Syn_sent | Closed | Listen | Time_wait -> () | _ -> send_rst tcb);
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
          (fun _ tcb acc -> acc + tcb_bytes + Tcp_sndbuf.allocated tcb.sndbuf + tcb.rcv_charged)
          t.conns
          ((Key_tbl.length t.time_wait * tw_bytes) + t.spare_bytes);
      active = Key_tbl.length t.conns + Key_tbl.length t.time_wait;
      orphans = t.n_orphans;
      dsacks_sent = c.c_dsack_out;
      memory_resets = c.c_memory_resets;
      memory_refused = c.c_memory_refused;
      send_memory = t.sndbuf_bytes;
      receive_memory = t.rcv_bytes;
      windows_cut = c.c_window_cut;
      memory_drops = c.c_memory_drops;
      shares_cut = c.c_shares_cut;
      spares_reused = c.c_spares_reused;
      dsacks_received = c.c_dsack_in;
    }

  let state tcb =
    if tcb.alive then tcb.state
    else match tcb.tw with Some w when w.tw_live -> Time_wait | _ -> Closed

  let local_port (tcb : tcb) = tcb.local_port
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
      undos = tcb.n_undos;
      timeouts = tcb.n_timeouts;
      probes = tcb.n_probes;
      path_mtu = tcb.lower_max;
      mtu_probes = tcb.n_mtu_probes;
      ooo_segments = Tcp_reass.segments tcb.reass;
      soft_error = tcb.soft_error;
    }
end
