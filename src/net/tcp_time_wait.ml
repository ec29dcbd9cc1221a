open Tcp_types

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b

module Make (B : Tcp_tcb.S) = struct
  open B
  module O = Tcp_output.Make (B)

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
          (clock.at w.tw_deadline (fun () -> if gen = t.tw_gen then tw_expire t) : Clock.cancel)
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
    let pkt = Packet.create ~headroom:(hl + lower_headroom t.lower) pool 0 in
    Tcp_packet.encode_into hdr (Packet.push pkt hl);
    O.transmit t w.tw_lconn ~dst:w.tw_remote pkt

  let seg_ctl_len (h : Tcp_packet.t) = (if h.flags.syn then 1 else 0) + if h.flags.fin then 1 else 0

  (* A segment in TIME-WAIT (RFC 9293 section 3.10.7.4): RST ignored (RFC
     1337), a SYN above the old sequence space opens a new incarnation
     (section 3.6.1: [`Reopen], for the caller), a retransmitted FIN
     restarts 2 MSL, and anything but an in-order ACK is acknowledged. *)
  let tw_input t w (h : Tcp_packet.t) ~payload =
    if h.flags.rst then `Done
    else if
      h.flags.syn && (not h.flags.ack) && Tcp_seq.gt h.seq w.tw_rcv_nxt
      && Hashtbl.mem t.listeners w.tw_lport
    then `Reopen
    else begin
      let ts = Tcp_options.timestamp h.options in
      (match
         Tcp_verdict.paws ~ts_ok:w.tw_ts_ok ~rst:false ~syn:h.flags.syn ~ts_val:(Option.map fst ts)
           ~ts_recent:w.tw_ts_recent ~ts_recent_age:w.tw_ts_recent_age ~now:(now ())
       with
      | Missing -> ()
      | Stale -> tw_ack t w
      | Fresh ->
          (match ts with
          | Some (v, _)
            when w.tw_ts_ok && Tcp_seq.geq (Tcp_seq.of_int v) (Tcp_seq.of_int w.tw_ts_recent) ->
              w.tw_ts_recent <- v;
              w.tw_ts_recent_age <- now ()
          | _ -> ());
          if h.flags.fin then w.tw_expires <- now () + (2 * w.tw_msl);
          if not (payload + seg_ctl_len h = 0 && Tcp_seq.equal h.seq w.tw_rcv_nxt) then tw_ack t w);
      `Done
    end
end
