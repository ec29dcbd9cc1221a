(* BBR (Tcp_bbr) and the delivery-rate samples it is driven by
   (Tcp_rate): the filters and the state machine on made-up samples, the
   samples on made-up sends and ACKs, and transfers over the in-memory
   network on virtual time. *)

open Consort

let smss = 1000
let ms = Time.of_ms

(* {1 Delivery-rate samples} *)

let seq n = Tcp_seq.of_int (1000 + n)
let get = function Some s -> s | None -> Alcotest.fail "no rate sample"

(* Segment [i] is bytes [i * smss, (i + 1) * smss). *)
let send r i ~now ~idle =
  Tcp_rate.sent r ~seq:(seq (i * smss)) ~end_:(seq ((i + 1) * smss)) ~now ~idle

(* A steady flow: ten segments in flight, one sent a millisecond, the ACK
   of each a 10 ms round trip later (and the next segment sent then). *)
let steady ?(n = 40) () =
  let r = Tcp_rate.create () in
  for i = 0 to 9 do
    send r i ~now:(ms i) ~idle:(i = 0)
  done;
  let samples = ref [] in
  for i = 0 to n - 1 do
    let now = ms (10 + i) in
    let s =
      get
        (Tcp_rate.ack r
           ~una:(seq ((i + 1) * smss))
           ~newly:[]
           ~total:((i + 1) * smss)
           ~inflight:(9 * smss) ~now)
    in
    samples := s :: !samples;
    send r (i + 10) ~now ~idle:false
  done;
  (r, List.rev !samples)

let rate_steady () =
  let r, samples = steady () in
  List.iteri
    (fun i (s : Tcp_rate.sample) ->
      Alcotest.(check int) (Fmt.str "RTT of ACK %d" i) (ms 10) s.rtt;
      Alcotest.(check int) (Fmt.str "acked by ACK %d" i) smss s.acked;
      if i >= 10 then begin
        (* Ten segments delivered in the 10 ms since the one acknowledged
           was sent: 1,000,000 bytes a second. *)
        Alcotest.(check int) (Fmt.str "delivered, sample %d" i) (10 * smss) s.delivered;
        Alcotest.(check int) (Fmt.str "interval, sample %d" i) (ms 10) s.interval;
        Alcotest.(check int) (Fmt.str "rate, sample %d" i) 1_000_000 (Tcp_rate.rate s)
      end)
    samples;
  Alcotest.(check int) "records: the ten in flight" 10 (Tcp_rate.records r)

(* ACKs that arrive together (compressed) do not make the rate higher
   than the sending rate: the interval is the longer of the send and ACK
   intervals. *)
let rate_ack_compression () =
  let r, _ = steady () in
  (* Segments 40 to 49 are in flight, sent at 40..49 ms; all their ACKs
     come at 50 ms, when the first is due. *)
  for i = 40 to 49 do
    let s =
      get
        (Tcp_rate.ack r
           ~una:(seq ((i + 1) * smss))
           ~newly:[]
           ~total:((i + 1) * smss)
           ~inflight:((49 - i) * smss)
           ~now:(ms 50))
    in
    let rate = Tcp_rate.rate s in
    if rate > 1_000_000 || rate < 900_000 then
      Alcotest.failf "compressed ACK of segment %d: %d bytes/s, not the 1,000,000 sent at" i rate
  done

(* A SACK delivers a segment: it makes the sample, once; the cumulative
   ACK that later covers it makes none of it. *)
let rate_sack () =
  let r = Tcp_rate.create () in
  for i = 0 to 9 do
    send r i ~now:(ms i) ~idle:(i = 0)
  done;
  (* Segment 0 lost: segments 1 and 2 SACKed at 11 and 12 ms. *)
  let s1 =
    get
      (Tcp_rate.ack r ~una:(seq 0)
         ~newly:[ (seq smss, seq (2 * smss)) ]
         ~total:smss ~inflight:(8 * smss) ~now:(ms 11))
  in
  Alcotest.(check int) "RTT of the SACKed segment" (ms 10) s1.rtt;
  Alcotest.(check int) "prior delivered" 0 s1.prior_delivered;
  Alcotest.(check int) "acked" smss s1.acked;
  (* Segment 0 retransmitted at 12 ms, acknowledged with 1 and 2 at 22 ms. *)
  send r 0 ~now:(ms 12) ~idle:false;
  let s =
    get
      (Tcp_rate.ack r
         ~una:(seq (3 * smss))
         ~newly:[ (seq (2 * smss), seq (3 * smss)) ]
         ~total:(3 * smss) ~inflight:(7 * smss) ~now:(ms 22))
  in
  Alcotest.(check int) "acked: segment 0 and 2" (2 * smss) s.acked;
  (* The most recently sent of those delivered is the retransmission (at
     12 ms): no RTT of it; segment 1, SACKed before, is not sampled again. *)
  Alcotest.(check int) "no RTT of a retransmission" (-1) s.rtt;
  Alcotest.(check int) "prior delivered: the count when it was sent again" smss s.prior_delivered;
  Alcotest.(check int) "delivered since" (2 * smss) s.delivered

let rate_app_limited () =
  let r = Tcp_rate.create () in
  send r 0 ~now:0 ~idle:true;
  Tcp_rate.app_limited r ~inflight:smss;
  send r 1 ~now:(ms 1) ~idle:false;
  let s0 = get (Tcp_rate.ack r ~una:(seq smss) ~newly:[] ~total:smss ~inflight:smss ~now:(ms 10)) in
  Alcotest.(check bool) "sent before the mark: not limited" false s0.app_limited;
  let s1 =
    get (Tcp_rate.ack r ~una:(seq (2 * smss)) ~newly:[] ~total:(2 * smss) ~inflight:0 ~now:(ms 11))
  in
  Alcotest.(check bool) "sent after it: application-limited" true s1.app_limited;
  send r 2 ~now:(ms 12) ~idle:true;
  let s2 =
    get (Tcp_rate.ack r ~una:(seq (3 * smss)) ~newly:[] ~total:(3 * smss) ~inflight:0 ~now:(ms 22))
  in
  Alcotest.(check bool) "sent after the marked data was delivered: not limited" false s2.app_limited

(* {1 BBR on made-up samples} *)

(* A BBR fed with samples: one per call of [round], each a round trip (a
   sample whose segment was sent after the round began), of [bw] bytes a
   second over [rtt]. *)
type feed = { b : Tcp_bbr.t; mutable total : int; mutable now : Time.t }

let feed () =
  let b = Tcp_bbr.create () in
  Tcp_bbr.set_cwnd b (10 * smss);
  { b; total = 0; now = 0 }

let sample ?(app_limited = false) ?(rtt = ms 10) ?inflight f ~bw =
  let interval = rtt in
  let delivered = bw * interval / 1_000_000_000 in
  let prior = f.total in
  f.total <- f.total + delivered;
  f.now <- f.now + interval;
  let inflight = Option.value inflight ~default:delivered in
  let rs =
    {
      Tcp_rate.delivered;
      interval;
      rtt;
      app_limited;
      prior_delivered = prior;
      acked = delivered;
      total = f.total;
      inflight;
      now = f.now;
    }
  in
  Tcp_bbr.on_rate f.b rs ~smss;
  rs

let mode = Alcotest.testable Tcp_bbr.pp_mode ( = )

let bw_filter () =
  let f = feed () in
  ignore (sample f ~bw:5_000_000 : Tcp_rate.sample);
  Alcotest.(check int) "the first sample" 5_000_000 (Tcp_bbr.btl_bw f.b);
  ignore (sample f ~bw:2_000_000 : Tcp_rate.sample);
  Alcotest.(check int) "a lower sample leaves the maximum" 5_000_000 (Tcp_bbr.btl_bw f.b);
  (* The 5 MB/s sample stays for 10 rounds in all. *)
  for i = 3 to 10 do
    ignore (sample f ~bw:2_000_000 : Tcp_rate.sample);
    Alcotest.(check int) (Fmt.str "round %d" i) 5_000_000 (Tcp_bbr.btl_bw f.b)
  done;
  ignore (sample f ~bw:2_000_000 : Tcp_rate.sample);
  Alcotest.(check int) "forgotten after 10 rounds" 2_000_000 (Tcp_bbr.btl_bw f.b);
  (* An application-limited sample counts only if it raises the maximum. *)
  ignore (sample f ~app_limited:true ~bw:1_000_000 : Tcp_rate.sample);
  ignore (sample f ~app_limited:true ~bw:3_000_000 : Tcp_rate.sample);
  Alcotest.(check int) "a higher application-limited sample" 3_000_000 (Tcp_bbr.btl_bw f.b)

let startup_exit () =
  let f = feed () in
  (* Growing 30% a round: Startup goes on. *)
  let bw = ref 1_000_000 in
  for _ = 1 to 8 do
    ignore (sample f ~bw:!bw : Tcp_rate.sample);
    bw := !bw * 13 / 10
  done;
  Alcotest.check mode "growing: still Startup" Tcp_bbr.Startup (Tcp_bbr.mode f.b);
  let top = Tcp_bbr.btl_bw f.b in
  (* Less than 25% over the last growth: three rounds and Startup ends. *)
  ignore (sample f ~bw:(top * 12 / 10) ~inflight:(100 * smss) : Tcp_rate.sample);
  ignore (sample f ~bw:(top * 122 / 100) ~inflight:(100 * smss) : Tcp_rate.sample);
  Alcotest.check mode "two rounds without 25% growth" Tcp_bbr.Startup (Tcp_bbr.mode f.b);
  Alcotest.(check bool) "not full yet" false (Tcp_bbr.full_bw_reached f.b);
  ignore (sample f ~bw:(top * 124 / 100) ~inflight:(100 * smss) : Tcp_rate.sample);
  Alcotest.(check bool) "full bandwidth after three" true (Tcp_bbr.full_bw_reached f.b);
  Alcotest.check mode "Drain" Tcp_bbr.Drain (Tcp_bbr.mode f.b);
  Alcotest.(check (float 1e-9))
    "Drain's pacing gain" (1. /. Tcp_bbr.high_gain) (Tcp_bbr.pacing_gain f.b);
  (* Drain ends when what is in flight is down to the bandwidth-delay
     product. *)
  let bw = Tcp_bbr.btl_bw f.b in
  let bdp = bw / 100 in
  ignore (sample f ~bw ~inflight:(3 * bdp) : Tcp_rate.sample);
  Alcotest.check mode "still draining" Tcp_bbr.Drain (Tcp_bbr.mode f.b);
  ignore (sample f ~bw ~inflight:bdp : Tcp_rate.sample);
  Alcotest.check mode "ProbeBW" Tcp_bbr.Probe_bw (Tcp_bbr.mode f.b);
  Alcotest.(check bool) "a cycle's gain, not the drain phase" true (Tcp_bbr.pacing_gain f.b <> 0.75)

(* A model at [bw] over a 10 ms round trip, in ProbeBW. *)
let probe_bw ~bw =
  let f = feed () in
  for _ = 1 to 4 do
    ignore (sample f ~bw ~inflight:(bw / 100) : Tcp_rate.sample)
  done;
  for _ = 1 to 2 do
    ignore (sample f ~bw ~inflight:(bw / 100) : Tcp_rate.sample)
  done;
  Alcotest.check mode "ProbeBW" Tcp_bbr.Probe_bw (Tcp_bbr.mode f.b);
  f

let pacing_follows_model () =
  let f = feed () in
  Alcotest.(check int) "not paced before a sample" 0 (Tcp_bbr.pacing_rate f.b);
  ignore (sample f ~bw:2_000_000 : Tcp_rate.sample);
  let expect gain bw = int_of_float (gain *. float bw *. 0.99) in
  Alcotest.(check int)
    "Startup: 2/ln 2 times the bandwidth"
    (expect Tcp_bbr.high_gain 2_000_000)
    (Tcp_bbr.pacing_rate f.b);
  ignore (sample f ~bw:4_000_000 : Tcp_rate.sample);
  Alcotest.(check int)
    "follows the bandwidth"
    (expect Tcp_bbr.high_gain 4_000_000)
    (Tcp_bbr.pacing_rate f.b);
  (* A first sample of a connection that had little to send: the rate is
     at least Startup's gain times the initial window over the RTT. *)
  let f0 = feed () in
  ignore (sample f0 ~app_limited:true ~bw:1_000 : Tcp_rate.sample);
  let floor = int_of_float (Tcp_bbr.high_gain *. float (10 * smss) /. 0.01) in
  if Tcp_bbr.pacing_rate f0.b < floor then
    Alcotest.failf "paced at %d bytes/s after a sample of 1,000, under %d"
      (Tcp_bbr.pacing_rate f0.b) floor;
  let f = probe_bw ~bw:5_000_000 in
  (* Through a whole gain cycle, the rate is the phase's gain times the
     bandwidth (in flight: what the phase's rate makes). *)
  let gains = ref [] in
  for _ = 1 to 24 do
    let inflight = int_of_float (Tcp_bbr.pacing_gain f.b *. 50_000.) + (3 * smss) in
    ignore (sample f ~bw:5_000_000 ~inflight : Tcp_rate.sample);
    let g = Tcp_bbr.pacing_gain f.b in
    gains := g :: !gains;
    Alcotest.(check int)
      "the phase's gain times the bandwidth" (expect g 5_000_000) (Tcp_bbr.pacing_rate f.b)
  done;
  Alcotest.(check bool) "probes up (1.25)" true (List.mem 1.25 !gains);
  Alcotest.(check bool) "drains (0.75)" true (List.mem 0.75 !gains);
  (* The window: twice the bandwidth-delay product, and the budget. *)
  let bdp = 5_000_000 / 100 in
  let w = Tcp_bbr.cwnd f.b in
  if w < 2 * bdp || w > (2 * bdp) + (5 * smss) then
    Alcotest.failf "window %d, not twice the BDP (%d) and a few segments" w bdp

let probe_rtt () =
  let f = probe_bw ~bw:5_000_000 in
  let w = Tcp_bbr.cwnd f.b in
  (* 10 s of samples, none with a round trip below the 10 ms minimum. *)
  let rounds = (Time.to_sec Tcp_bbr.min_rtt_window /. 0.011 |> int_of_float) - 10 in
  for _ = 1 to rounds do
    ignore (sample f ~rtt:(ms 11) ~bw:5_000_000 ~inflight:(5_000_000 / 100) : Tcp_rate.sample)
  done;
  Alcotest.check mode "no ProbeRTT before 10 s" Tcp_bbr.Probe_bw (Tcp_bbr.mode f.b);
  let entered = ref false in
  for _ = 1 to 20 do
    if not !entered then begin
      ignore (sample f ~rtt:(ms 11) ~bw:5_000_000 ~inflight:(5_000_000 / 100) : Tcp_rate.sample);
      entered := Tcp_bbr.mode f.b = Tcp_bbr.Probe_rtt
    end
  done;
  Alcotest.(check bool) "ProbeRTT after 10 s without a new minimum" true !entered;
  if f.now < Tcp_bbr.min_rtt_window then Alcotest.failf "entered at %a" Time.pp f.now;
  Alcotest.(check int) "4 segments in flight at most" (4 * smss) (Tcp_bbr.cwnd f.b);
  (* Still 4 segments: 200 ms and a round trip, then back to ProbeBW with
     the window it had. *)
  let start = f.now in
  while Tcp_bbr.mode f.b = Tcp_bbr.Probe_rtt && f.now < start + Time.of_sec 1. do
    ignore (sample f ~rtt:(ms 11) ~bw:5_000_000 ~inflight:(4 * smss) : Tcp_rate.sample);
    if Tcp_bbr.mode f.b = Tcp_bbr.Probe_rtt then
      Alcotest.(check int) "ProbeRTT's window" (4 * smss) (Tcp_bbr.cwnd f.b)
  done;
  let took = f.now - start in
  if took < Tcp_bbr.probe_rtt_time || took > Tcp_bbr.probe_rtt_time + ms 40 then
    Alcotest.failf "ProbeRTT took %a, not 200 ms and a round trip" Time.pp took;
  Alcotest.check mode "back to ProbeBW" Tcp_bbr.Probe_bw (Tcp_bbr.mode f.b);
  Alcotest.(check bool) "the window back" true (Tcp_bbr.cwnd f.b >= w);
  Alcotest.(check (option int))
    "the minimum RTT measured again"
    (Some (ms 11))
    (Tcp_bbr.min_rtt f.b)

(* Loss: packet conservation for a round, then the window of before. *)
let loss_keeps_window () =
  let f = probe_bw ~bw:5_000_000 in
  let w = Tcp_bbr.cwnd f.b in
  Tcp_bbr.on_loss f.b ~now:f.now ~flight:w ~smss ~sack:true;
  (* The ACK that showed the loss: 2 segments delivered, 40 in flight. *)
  let rs = sample f ~rtt:(ms 10) ~bw:200_000 ~inflight:(40 * smss) in
  Alcotest.(check int) "in flight plus delivered" ((40 * smss) + rs.acked) (Tcp_bbr.cwnd f.b);
  let before = Tcp_bbr.cwnd f.b in
  ignore (sample f ~rtt:(ms 10) ~bw:200_000 ~inflight:(38 * smss) : Tcp_rate.sample);
  Alcotest.(check bool) "never below in flight plus delivered" true (Tcp_bbr.cwnd f.b >= before);
  Tcp_bbr.on_recovered f.b ~flight:(30 * smss) ~smss;
  Alcotest.(check bool) "the window of before the loss" true (Tcp_bbr.cwnd f.b >= w);
  Alcotest.(check int) "the bandwidth estimate kept" 5_000_000 (Tcp_bbr.btl_bw f.b)

(* {1 Transfers on virtual time} *)

let mb = 1024 * 1024
let link = 12_500_000 (* bytes a second: 100 Mbit/s *)

let impairments loss =
  {
    Mem.loss;
    reorder = 0.;
    duplicate = 0.;
    jitter = ms 3;
    delay = ms 5;
    rate = Some link;
    queue = 100 * 1500;
  }

let run congestion loss =
  Transfer.run
    ~config:{ Tcp.default_config with congestion; send_buffer = mb; receive_buffer = mb }
    ~impairments:(impairments loss) ~seed:3 (8 * mb)

let rate (r : Transfer.result) = float r.bytes /. Time.to_sec r.virtual_time

(* 2% random loss on a 100 Mbit/s link with a 10 ms round trip: CUBIC
   takes each loss for congestion and collapses; BBR keeps near the link
   rate (on virtual time). *)
let under_loss () =
  let b = run Tcp.Bbr 0.02 and c = run Tcp.Cubic 0.02 in
  Logs.app (fun m -> m "BBR: %a@.CUBIC: %a" Transfer.pp_result b Transfer.pp_result c);
  if rate b < 0.7 *. float link then
    Alcotest.failf "BBR at %.2f MB/s, under 70%% of the link's %.1f"
      (rate b /. 1e6)
      (float link /. 1e6);
  if rate b < 3. *. rate c then
    Alcotest.failf "BBR at %.2f MB/s, not three times CUBIC's %.2f" (rate b /. 1e6) (rate c /. 1e6)

(* The bench's impairment: 2% loss and 5% reordering (2 ms of jitter on
   top), on the same path: no timeout, and still three times CUBIC. *)
let under_loss_and_reorder () =
  let run congestion =
    Transfer.run
      ~config:{ Tcp.default_config with congestion; send_buffer = mb; receive_buffer = mb }
      ~impairments:{ (impairments 0.02) with reorder = 0.05 }
      ~seed:1 (8 * mb)
  in
  let b = run Tcp.Bbr and c = run Tcp.Cubic in
  Logs.app (fun m -> m "BBR: %a@.CUBIC: %a" Transfer.pp_result b Transfer.pp_result c);
  Alcotest.(check int) "no retransmission timeout" 0 b.timeouts;
  if rate b < 3. *. rate c then
    Alcotest.failf "BBR at %.2f MB/s, not three times CUBIC's %.2f" (rate b /. 1e6) (rate c /. 1e6)

(* Without loss, pacing keeps the bottleneck's queue of 100 segments (less
   than the bandwidth-delay product) from overflowing but in Startup,
   whose gain of 2.9 fills it once: under 5% of the segments dropped (198
   of 5,800 with this seed; 802 with pacing off), and the link used. *)
let paced () =
  let b = run Tcp.Bbr 0. in
  Logs.app (fun m -> m "BBR: %a" Transfer.pp_result b);
  let segments = b.bytes / 1448 in
  if b.net.queue_drops * 20 > segments then
    Alcotest.failf "%d of %d segments dropped at the bottleneck" b.net.queue_drops segments;
  if rate b < 0.8 *. float link then Alcotest.failf "BBR at %.2f MB/s" (rate b /. 1e6)

let tests =
  [
    Alcotest.test_case "rate samples of a steady flow" `Quick rate_steady;
    Alcotest.test_case "rate samples under ACK compression" `Quick rate_ack_compression;
    Alcotest.test_case "rate samples of SACKed and retransmitted segments" `Quick rate_sack;
    Alcotest.test_case "application-limited rate samples" `Quick rate_app_limited;
    Alcotest.test_case "the bandwidth filter: a maximum over 10 rounds" `Quick bw_filter;
    Alcotest.test_case "Startup ends after 3 rounds without 25% growth, Drain, ProbeBW" `Quick
      startup_exit;
    Alcotest.test_case "the pacing rate and window follow the model" `Quick pacing_follows_model;
    Alcotest.test_case "ProbeRTT after 10 s without a new minimum RTT" `Quick probe_rtt;
    Alcotest.test_case "loss: packet conservation, then the window of before" `Quick
      loss_keeps_window;
    Alcotest.test_case "2% loss: BBR near the link rate, three times CUBIC" `Quick under_loss;
    Alcotest.test_case "2% loss and 5% reordering: no timeout, three times CUBIC" `Quick
      under_loss_and_reorder;
    Alcotest.test_case "paced: the bottleneck's queue overflows only in Startup" `Quick paced;
  ]
