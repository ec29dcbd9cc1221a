(* The pure parts split out of the connection: the RFC 9293 3.10.7.4
   verdicts, window arithmetic, options, and congestion control, without
   the harness. *)

let seq = Tcp_seq.of_int
let check_int = Alcotest.(check int)
let check_bool = Alcotest.(check bool)
let case name f = Alcotest.test_case name `Quick f

let acceptable () =
  let a ~wnd ~s ~len =
    Tcp_verdict.acceptable ~rcv_nxt:(seq 1000) ~rcv_wnd:wnd ~seq:(seq s) ~seg_len:len
  in
  (* The four cases of the table. *)
  check_bool "empty, zero window, at RCV.NXT" true (a ~wnd:0 ~s:1000 ~len:0);
  check_bool "empty, zero window, elsewhere" false (a ~wnd:0 ~s:1001 ~len:0);
  check_bool "empty, in window" true (a ~wnd:100 ~s:1099 ~len:0);
  check_bool "empty, at the right edge" false (a ~wnd:100 ~s:1100 ~len:0);
  check_bool "empty, old" false (a ~wnd:100 ~s:999 ~len:0);
  check_bool "data, zero window" false (a ~wnd:0 ~s:1000 ~len:10);
  check_bool "data, starts in window" true (a ~wnd:100 ~s:1090 ~len:50);
  check_bool "data, ends in window" true (a ~wnd:100 ~s:990 ~len:11);
  check_bool "data, wholly old" false (a ~wnd:100 ~s:990 ~len:10);
  check_bool "data, beyond" false (a ~wnd:100 ~s:1100 ~len:10);
  check_bool "across the wrap" true
    (Tcp_verdict.acceptable ~rcv_nxt:(seq 0xFFFF_FFF0) ~rcv_wnd:100 ~seq:(seq 5) ~seg_len:1);
  check_bool "zero-window probe" true
    (Tcp_verdict.zero_window_probe ~rcv_nxt:(seq 7) ~rcv_wnd:0 ~seq:(seq 7) ~seg_len:1 ~syn:false);
  check_bool "not a probe: open window" false
    (Tcp_verdict.zero_window_probe ~rcv_nxt:(seq 7) ~rcv_wnd:10 ~seq:(seq 7) ~seg_len:1 ~syn:false)

let rst_and_syn () =
  let r s = Tcp_verdict.rst ~rcv_nxt:(seq 500) ~seq:(seq s) in
  check_bool "RST at RCV.NXT resets" true (r 500 = Reset);
  check_bool "RST in window challenges" true (r 501 = Challenge_ack);
  check_bool "SYN in SYN-RECEIVED, passive" true
    (Tcp_verdict.syn ~state:Tcp.Syn_received ~passive:true = Back_to_listen);
  check_bool "SYN in SYN-RECEIVED, active" true
    (Tcp_verdict.syn ~state:Tcp.Syn_received ~passive:false = Syn_challenge_ack);
  check_bool "SYN when established" true
    (Tcp_verdict.syn ~state:Tcp.Established ~passive:true = Syn_challenge_ack)

let ack () =
  let v a = Tcp_verdict.ack ~snd_una:(seq 1000) ~snd_max:(seq 2000) ~max_snd_wnd:500 ~ack:(seq a) in
  check_bool "beyond SND.MAX" true (v 2001 = Too_new);
  check_bool "at SND.MAX" true (v 2000 = New 1000);
  check_bool "new" true (v 1001 = New 1);
  check_bool "duplicate" true (v 1000 = Duplicate);
  check_bool "old within MAX.SND.WND" true (v 500 = Old);
  check_bool "older than MAX.SND.WND" true (v 499 = Too_old);
  check_bool "SYN-RECEIVED: acks the SYN" true
    (Tcp_verdict.syn_received_ack ~snd_una:(seq 9) ~snd_max:(seq 10) ~ack:(seq 10));
  check_bool "SYN-RECEIVED: acks nothing" false
    (Tcp_verdict.syn_received_ack ~snd_una:(seq 9) ~snd_max:(seq 10) ~ack:(seq 9));
  let w ~wl1 ~wl2 ~s ~a =
    Tcp_verdict.window_update ~snd_una:(seq 100) ~snd_wl1:(seq wl1) ~snd_wl2:(seq wl2) ~seq:(seq s)
      ~ack:(seq a)
  in
  check_bool "newer segment updates" true (w ~wl1:5 ~wl2:100 ~s:6 ~a:100);
  check_bool "same segment, newer ack updates" true (w ~wl1:5 ~wl2:100 ~s:5 ~a:101);
  check_bool "older segment does not" false (w ~wl1:5 ~wl2:100 ~s:4 ~a:120);
  check_bool "old ack does not" false (w ~wl1:5 ~wl2:90 ~s:6 ~a:99)

let paws () =
  let day = Consort.Time.of_sec 86400. in
  let p ?(ts_ok = true) ?(rst = false) ?(syn = false) ?(age = 0) ?(now = 1000) ts_val =
    Tcp_verdict.paws ~ts_ok ~rst ~syn ~ts_val ~ts_recent:100 ~ts_recent_age:age ~now
  in
  check_bool "newer passes" true (p (Some 101) = Fresh);
  check_bool "equal passes" true (p (Some 100) = Fresh);
  check_bool "older is stale" true (p (Some 99) = Stale);
  check_bool "older across the wrap is stale" true
    (Tcp_verdict.paws ~ts_ok:true ~rst:false ~syn:false ~ts_val:(Some 0xFFFF_FFF0) ~ts_recent:5
       ~ts_recent_age:0 ~now:0
    = Stale);
  check_bool "missing" true (p None = Missing);
  check_bool "missing on a SYN is fine" true (p ~syn:true None = Fresh);
  check_bool "a RST is never rejected" true (p ~rst:true (Some 1) = Fresh);
  check_bool "without timestamps nothing applies" true (p ~ts_ok:false None = Fresh);
  check_bool "a 25-day-old ts_recent no longer counts" true (p ~now:(25 * day) (Some 99) = Fresh);
  check_bool "update: newer, covering the last ACK" true
    (Tcp_verdict.update_ts_recent ~ts_val:101 ~ts_recent:100 ~seq:(seq 50) ~last_ack_sent:(seq 50));
  check_bool "no update: beyond the last ACK" false
    (Tcp_verdict.update_ts_recent ~ts_val:101 ~ts_recent:100 ~seq:(seq 51) ~last_ack_sent:(seq 50))

let window () =
  check_int "scale for 64 KiB - 1" 0 (Tcp_window.scale_for 0xFFFF);
  check_int "scale for 256 KiB" 3 (Tcp_window.scale_for (256 * 1024));
  check_int "scale at most 14" 14 (Tcp_window.scale_for max_int);
  let adv ~unconsumed ~adv =
    Tcp_window.advertise ~buffer:10_000 ~unconsumed ~rcv_nxt:(seq 1000) ~rcv_adv:(seq adv)
      ~rcv_mss:1000 ~shift:0
  in
  let f, e = adv ~unconsumed:0 ~adv:1000 in
  check_int "opens fully" 10_000 f;
  check_int "edge" 11_000 (Tcp_seq.to_int e);
  (* 500 bytes freed: less than one MSS, the window stays (no SWS). *)
  let f, e = adv ~unconsumed:9_500 ~adv:1000 in
  check_int "SWS avoidance keeps it shut" 0 f;
  check_int "edge unchanged" 1000 (Tcp_seq.to_int e);
  (* The edge announced is never withdrawn. *)
  let f, e = adv ~unconsumed:9_500 ~adv:4000 in
  check_int "keeps the announced edge" 3000 f;
  check_int "edge kept" 4000 (Tcp_seq.to_int e);
  let f, _ =
    Tcp_window.advertise ~buffer:(1 lsl 20) ~unconsumed:0 ~rcv_nxt:(seq 0) ~rcv_adv:(seq 0)
      ~rcv_mss:1000 ~shift:4
  in
  check_int "scaled field" 0xFFFF f;
  check_int "room" 50 (Tcp_window.send_room ~snd_una:(seq 100) ~snd_wnd:100 ~snd_nxt:(seq 150));
  check_bool "read opening a closed window updates" true
    (Tcp_window.update_after_read ~buffer:10_000 ~unconsumed:0 ~open_now:0 ~rcv_mss:1000 ~shift:0);
  check_bool "a small read does not" false
    (Tcp_window.update_after_read ~buffer:10_000 ~unconsumed:9_500 ~open_now:0 ~rcv_mss:1000
       ~shift:0)

let options () =
  let o =
    Tcp_options.of_syn
      Tcp_packet.[ Mss 1200; Window_scale 20; Sack_permitted; Timestamp { value = 7; echo = 0 } ]
  in
  check_bool "mss" true (o.mss = Some 1200);
  check_bool "wscale clamped to 14" true (o.wscale = Some 14);
  check_bool "sack" true o.sack_permitted;
  check_bool "ts" true (o.ts_val = Some 7);
  check_int "length ts + 3 blocks" 36 (Tcp_options.length ~ts:true ~sack_blocks:3);
  check_int "length ts" 12 (Tcp_options.length ~ts:true ~sack_blocks:0);
  check_int "sack max with ts" 3 (Tcp_options.sack_max ~ts:true);
  check_bool "syn order" true
    (Tcp_options.syn ~mss:1460 ~wscale:(Some 3) ~sack:true ~ts:(Some (1, 0))
    = Tcp_packet.[ Mss 1460; Window_scale 3; Sack_permitted; Timestamp { value = 1; echo = 0 } ])

let smss = 1000
let ms = Consort.Time.of_ms

let newreno () =
  let c = Tcp_cc.create Tcp.New_reno in
  Tcp_cc.set_cwnd c (4 * smss);
  Tcp_cc.on_ack c ~now:0 ~srtt:None ~acked:smss ~smss;
  check_int "slow start: one MSS per MSS acked" (5 * smss) (Tcp_cc.cwnd c);
  Tcp_cc.on_ack c ~now:0 ~srtt:None ~acked:(5 * smss) ~smss;
  check_int "slow start: at most 2 MSS per ACK" (7 * smss) (Tcp_cc.cwnd c);
  Tcp_cc.on_loss c ~now:0 ~flight:(10 * smss) ~smss ~sack:true;
  check_int "ssthresh half the flight" (5 * smss) (Tcp_cc.ssthresh c);
  check_int "cwnd = ssthresh with SACK" (5 * smss) (Tcp_cc.cwnd c);
  Tcp_cc.on_recovered c ~flight:(5 * smss) ~smss;
  (* Congestion avoidance: one MSS per window of data acknowledged. *)
  for _ = 1 to 5 do
    Tcp_cc.on_ack c ~now:0 ~srtt:None ~acked:smss ~smss
  done;
  check_int "one MSS per RTT" (6 * smss) (Tcp_cc.cwnd c);
  Tcp_cc.on_rto c ~flight:(6 * smss) ~smss ~first:true;
  check_int "RTO: one segment" smss (Tcp_cc.cwnd c);
  check_int "RTO: ssthresh" (3 * smss) (Tcp_cc.ssthresh c);
  Tcp_cc.on_loss c ~now:0 ~flight:(10 * smss) ~smss ~sack:false;
  check_int "inflated by three without SACK" (8 * smss) (Tcp_cc.cwnd c)

(* CUBIC: beta 0.7 on loss; the window climbs back to W_max around K, then
   probes beyond it; at a large window it grows faster than NewReno. *)
let cubic () =
  let c = Tcp_cc.create Tcp.Cubic in
  Tcp_cc.set_cwnd c (100 * smss);
  Tcp_cc.on_loss c ~now:0 ~flight:(100 * smss) ~smss ~sack:true;
  check_int "beta 0.7" (70 * smss) (Tcp_cc.cwnd c);
  check_int "ssthresh" (70 * smss) (Tcp_cc.ssthresh c);
  let rtt = ms 100 in
  (* K = cbrt(30 / 0.4) = 4.2 s. Drive one window of ACKs per RTT. *)
  let run c ~until =
    let now = ref 0 in
    while !now < until do
      let w = Tcp_cc.cwnd c / smss in
      for _ = 1 to w do
        Tcp_cc.on_ack c ~now:!now ~srtt:(Some rtt) ~acked:smss ~smss
      done;
      now := !now + rtt
    done
  in
  run c ~until:(Consort.Time.of_sec 2.);
  let w2 = Tcp_cc.cwnd c / smss in
  check_bool (Fmt.str "concave: below W_max after 2 s (%d)" w2) true (w2 > 80 && w2 < 100);
  run c ~until:(Consort.Time.of_sec 4.);
  let w4 = Tcp_cc.cwnd c / smss in
  check_bool (Fmt.str "plateau near W_max around K (%d)" w4) true (w4 >= 95 && w4 <= 102);
  let r = Tcp_cc.create Tcp.New_reno in
  Tcp_cc.set_cwnd r (100 * smss);
  Tcp_cc.on_loss r ~now:0 ~flight:(100 * smss) ~smss ~sack:true;
  run r ~until:(Consort.Time.of_sec 4.);
  check_bool
    (Fmt.str "CUBIC recovers faster than NewReno (%d vs %d)" w4 (Tcp_cc.cwnd r / smss))
    true
    (w4 > (Tcp_cc.cwnd r / smss) + 10);
  let c2 = Tcp_cc.create Tcp.Cubic in
  Tcp_cc.set_cwnd c2 (100 * smss);
  Tcp_cc.on_loss c2 ~now:0 ~flight:(100 * smss) ~smss ~sack:true;
  Tcp_cc.on_loss c2 ~now:0 ~flight:(70 * smss) ~smss ~sack:true;
  check_int "second loss" 49 (Tcp_cc.cwnd c2 / smss);
  Tcp_cc.on_rto c2 ~flight:0 ~smss ~first:true;
  check_int "RTO" smss (Tcp_cc.cwnd c2)

let tests =
  [
    case "acceptability of a segment (RFC 9293 3.10.7.4 first)" acceptable;
    case "RST and SYN verdicts (RFC 5961 3.2 and 4)" rst_and_syn;
    case "ACK verdicts and window update (RFC 9293, RFC 5961 5.2)" ack;
    case "PAWS and TS.Recent (RFC 7323)" paws;
    case "receive window, scaling and SWS avoidance" window;
    case "SYN and data options" options;
    case "NewReno windows (RFC 5681, RFC 6582)" newreno;
    case "CUBIC windows (RFC 9438)" cubic;
  ]
