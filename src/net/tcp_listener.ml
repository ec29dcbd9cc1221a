open Consort
open Tcp_types

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b

module Make (B : Tcp_tcb.S) = struct
  open B
  open Tcp_output.Make (B)

  (* The listener's queue is full: answer with a SYN cookie and keep
     nothing. Window scale and SACK-permitted travel in the low bits of the
     timestamp, so they are offered only when the peer sent a timestamp. *)
  let send_cookie t l lconn remote (h : Tcp_packet.t) =
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
          let ts_now =
            ((now () / 1_000_000) + Tcp_secret.ts_offset t.secret ~tuple) land 0xFFFF_FFFF
          in
          (Tcp_secret.cookie_ts ~ts_now ~wscale ~sack, v))
        ts
    in
    let options =
      Tcp_options.syn
        ~mss:(rcv_mss_for cfg (lower_max_packet lconn))
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
     connection in SYN-RECEIVED, which the caller gives the ACK to
     establish it. *)
  let cookie_ack t l lconn remote (h : Tcp_packet.t) =
    let cfg = t.config in
    let n = now () in
    if (not cfg.syn_cookies) || h.flags.syn || n - l.overflowed > Time.of_sec 120. then None
    else
      let rport = h.src_port and lport = h.dst_port in
      let tuple = tuple ~remote ~rport ~lport in
      let peer_isn = Tcp_seq.add h.seq (-1) and iss = Tcp_seq.add h.ack (-1) in
      match Tcp_secret.check_cookie t.secret ~tuple ~now:n ~peer_isn ~cookie:iss with
      | None -> None
      | Some _ when not (make_room t) -> None
      | Some mss ->
          t.counters.c_cookies_ok <- t.counters.c_cookies_ok + 1;
          let tcb =
            new_tcb ~iss t ~cfg ~lconn ~remote ~rport ~lport ~listener:(Some l) ~state:Syn_received
          in
          l.half_open <- l.half_open + 1;
          tcb.irs <- peer_isn;
          tcb.rcv_nxt <- h.seq;
          tcb.rcv_adv <- Tcp_seq.add h.seq (min 0xFFFF cfg.receive_buffer);
          tcb.snd_nxt <- Tcp_seq.succ iss;
          tcb.snd_max <- Tcp_seq.succ iss;
          tcb.last_ack_sent <- h.seq;
          tcb.peer_mss <- mss;
          (match Tcp_options.timestamp h.options with
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
          Some tcb

  let listen_input t l lconn remote (h : Tcp_packet.t) pkt =
    (* Data on a SYN is not accepted (nor acknowledged): the peer sends it
       again once the connection is up. *)
    if h.flags.rst then begin
      Packet.release pkt;
      None
    end
    else if h.flags.ack then begin
      match cookie_ack t l lconn remote h with
      | Some tcb -> Some tcb
      | None ->
          Packet.release pkt;
          send_raw t lconn ~dst:remote ~src_port:h.dst_port ~dst_port:h.src_port ~seq:h.ack
            ~ack:Tcp_seq.zero ~ack_flag:false;
          None
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
      end;
      None
    end
    else begin
      Packet.release pkt;
      t.counters.c_dropped <- t.counters.c_dropped + 1;
      None
    end
end
