open Tcp_types
module Log = Tcp_tcb.Log

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

module Make (B : Tcp_tcb.S) = struct
  open B
  open Tcp_output.Make (B)

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
                 twice to the timer; smaller segments, then the search, up
                 to what the lower layer allows: the loss may have been an
                 outage, which says nothing of the size. *)
              tcb.pmtu_high <- tcb.pmtu_max + 1;
              tcb.lower_max <- max (pmtu_floor tcb) (tcb.lower_max / 2);
              Log.debug (fun m ->
                  m "%a: black hole? segments of %d bytes now" pp_connection tcb tcb.lower_max)
            end;
            let smss = smss tcb in
            (* A first timeout may be undone by the timestamps (Eifel,
               RFC 3522 and 4015), not by D-SACKs (its retransmissions go
               back N): the windows before it are kept, or before the
               recovery it interrupts. A timeout backed off is not undone. *)
            if Tcp_rto.backoffs tcb.rto = 0 && tcb.ts_ok then begin
              if tcb.undo_retrans < 0 then begin
                tcb.undo_cwnd <- Tcp_cc.cwnd tcb.cc;
                tcb.undo_ssthresh <- Tcp_cc.ssthresh tcb.cc;
                tcb.undo_marker <- tcb.snd_una;
                tcb.retrans_stamp <- None;
                tcb.rxt_high <- tcb.snd_una;
                tcb.undo_retrans <- 0
              end;
              tcb.undo_rto <- true
            end
            else tcb.undo_retrans <- -1;
            tcb.prr_fs <- 0;
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
        (* Behind a zero window: a writer waiting for memory may have this
           connection reset for it. *)
        if not (Queue.is_empty tcb.inst.waiting_memory) then wake_memory_waiters tcb.inst;
        if tcb.snd_wnd = 0 then
          (* A probe the receiver must answer with its window: an
             already-acknowledged sequence number. *)
          emit tcb ~seq:(Tcp_seq.add tcb.snd_una (-1)) ~len:0
        else output ~force:true tcb;
        tcb.persist_backoff <- min (tcb.persist_backoff + 1) 16;
        if Tcp_seq.equal tcb.snd_una tcb.snd_max then
          tcb.t_persist <- now () + min tcb.cfg.max_rto (Tcp_rto.rto tcb.rto lsl tcb.persist_backoff)
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
        if tcb.t_pace <= n then tcb.t_pace <- never;
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
      let d = min d tcb.t_pace in
      if d < tcb.armed then begin
        tcb.alarm_cancel ();
        tcb.alarm_gen <- tcb.alarm_gen + 1;
        tcb.armed <- d;
        let gen = tcb.alarm_gen in
        tcb.alarm_cancel <-
          clock.at d (fun () ->
              if gen = tcb.alarm_gen then begin
                on_alarm tcb;
                schedule tcb
              end)
      end
    end

  let arm_keepalive tcb =
    match tcb.keepalive with
    | Some k -> tcb.t_keep <- tcb.last_recv + k.idle
    | None -> tcb.t_keep <- never
end
