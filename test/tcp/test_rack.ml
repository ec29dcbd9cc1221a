(* RACK-TLP (RFC 8985) on the in-memory network, in virtual time: a tail
   loss repaired by a loss probe in about a round trip instead of the RTO,
   reordering within the window not taken for loss, and the same runs
   without RACK-TLP as the baseline beside them. *)

open Consort

let kb = 1024
let delay = Time.of_ms 10
let link = { Mem.perfect with delay }

(* Drop the first transmission of every data segment from host 1 whose
   end lies in the last [tail] bytes of an [n]-byte transfer (the FIN with
   them): a tail loss. *)
let drop_tail ~n ~tail net (module _ : Node.S) =
  let isn = ref None and dropped = Hashtbl.create 8 in
  Mem.set_drop net
    (Some
       (fun ~src ~dst:_ frame ->
         src = 1
         &&
         match Tcp_packet.decode (Cstruct.of_string frame) with
         | Error _ -> false
         | Ok (h, hl) -> (
             if h.flags.syn then begin
               isn := Some h.seq;
               false
             end
             else
               match !isn with
               | None -> false
               | Some isn ->
                   let len = String.length frame - hl in
                   let off = Tcp_seq.sub h.seq isn - 1 in
                   let end_ = off + len in
                   if (len > 0 || h.flags.fin) && end_ > n - tail && not (Hashtbl.mem dropped off)
                   then begin
                     Hashtbl.replace dropped off ();
                     true
                   end
                   else false)))

let run ?(rack = true) ?(impairments = link) ?receiver_config ?prelude n =
  let config = { Tcp.default_config with rack } in
  Transfer.run ~config ?receiver_config ~impairments ?prelude ~seed:7 n

let ms t = Time.to_sec t *. 1000.

(* The receiver acknowledges every segment, so that its delayed ACK does
   not add to the probe's wait. *)
let tail_loss () =
  let n = 200 * kb and tail = 3 * 1400 in
  let receiver_config = { Tcp.default_config with delayed_ack = 0 } in
  let clean = run ~receiver_config n in
  let rack = run ~receiver_config ~prelude:(drop_tail ~n ~tail) n in
  let base = run ~receiver_config ~rack:false ~prelude:(drop_tail ~n ~tail) n in
  Logs.app (fun m ->
      m
        "clean %.1f ms; tail loss: RACK-TLP %.1f ms (%d probes, %d timeouts), without %.1f ms (%d \
         timeouts)"
        (ms clean.virtual_time) (ms rack.virtual_time) rack.sender.probes rack.timeouts
        (ms base.virtual_time) base.timeouts);
  Alcotest.(check int) "no loss, no probe retransmission" 0 clean.retransmitted;
  Alcotest.(check bool) "the tail was lost" true (rack.retransmitted >= 3);
  Alcotest.(check int) "RACK-TLP: no timeout" 0 rack.timeouts;
  Alcotest.(check bool) "RACK-TLP: a probe went" true (rack.sender.probes >= 1);
  (* The RTT is 20 ms: the probe goes two after the last ACK, its SACK
     comes back one later, and the three segments go again in two more
     (the halved window takes two at once): 100 ms, or 120 ms with room;
     the RTO would be 200 ms at least. *)
  let extra = rack.virtual_time - clean.virtual_time in
  Alcotest.(check bool)
    (Fmt.str "RACK-TLP: the tail costs %.1f ms, under 120 ms" (ms extra))
    true
    (extra < Time.of_ms 120);
  Alcotest.(check bool) "without RACK-TLP: the RTO repairs it" true (base.timeouts >= 1);
  Alcotest.(check bool)
    "without RACK-TLP: the tail costs at least the minimum RTO" true
    (base.virtual_time - clean.virtual_time >= Time.of_ms 200)

(* One segment in the middle lost: RACK marks it after a round trip and a
   quarter, without waiting for three duplicate ACKs or the RTO. *)
let drop_one ~at net (module _ : Node.S) =
  let isn = ref None and done_ = ref false in
  Mem.set_drop net
    (Some
       (fun ~src ~dst:_ frame ->
         src = 1 && (not !done_)
         &&
         match Tcp_packet.decode (Cstruct.of_string frame) with
         | Error _ -> false
         | Ok (h, hl) -> (
             if h.flags.syn then (
               isn := Some h.seq;
               false)
             else
               match !isn with
               | Some isn when String.length frame > hl && Tcp_seq.sub h.seq isn - 1 >= at ->
                   done_ := true;
                   true
               | _ -> false)))

let middle_loss () =
  let n = 100 * kb in
  let r = run ~prelude:(drop_one ~at:(60 * kb)) n in
  Alcotest.(check int) "one retransmission" 1 r.retransmitted;
  Alcotest.(check int) "no timeout" 0 r.timeouts;
  Alcotest.(check int) "one recovery" 1 r.fast_retransmits

(* Frames delayed by up to 3 ms on a 20 ms round trip. The first time, as
   RFC 8985 has it, three segments SACKed past a hole make it lost; the
   D-SACK then shows reordering, and from there RACK waits a quarter of the
   minimum RTT, which covers the delays: a few retransmissions in the first recovery.
   Without RACK-TLP (duplicate ACKs decide), or with a reordering window of
   zero, each overtaken segment is sent again. *)
let reordering () =
  let impairments = { link with reorder = 0.05; jitter = Time.of_ms 3 } in
  let r = run ~impairments (1024 * kb) and off = run ~rack:false ~impairments (1024 * kb) in
  Logs.app (fun m -> m "reordering: RACK-TLP %a" Transfer.pp_result r);
  Logs.app (fun m -> m "reordering: without %a" Transfer.pp_result off);
  Alcotest.(check bool) "reordering makes duplicate ACKs retransmit" true (off.retransmitted >= 6);
  Alcotest.(check bool)
    (Fmt.str "RACK: a third of the spurious retransmissions at most (%d)" r.retransmitted)
    true
    (3 * r.retransmitted <= off.retransmitted);
  Alcotest.(check bool) "RACK: one or two recoveries" true (r.fast_retransmits <= 2);
  Alcotest.(check int) "no timeout" 0 r.timeouts

(* Spurious retransmissions undone (RFC 3708 and 4015 style, and RFC 3522
   with timestamps): reordering
   alone (no frame lost) makes RACK retransmit before it has learnt the
   reordering; the D-SACKs that follow show every retransmission of the
   episode was needless, and the window reductions are undone: the sender
   ends with the slow-start threshold it started with, as over a perfect
   link (without the undo, each recovery halves it for good). *)
let undo_spurious () =
  let impairments = { link with reorder = 0.05; jitter = Time.of_ms 3 } in
  let perfect = run (1024 * kb) in
  List.iter
    (fun (seed, timestamps) ->
      (* Without timestamps, D-SACKs alone undo (with them, the echoed
         timestamp often undoes first, RFC 3522). *)
      let config = { Tcp.default_config with timestamps } in
      let r = Transfer.run ~config ~impairments ~seed (1024 * kb) in
      Logs.app (fun m -> m "undo, seed %d: %a" seed Transfer.pp_result r);
      Alcotest.(check bool)
        (Fmt.str "seed %d: retransmitted (%d), and the peer reported them" seed r.retransmitted)
        true
        (r.retransmitted > 0 && r.fast_retransmits > 0);
      Alcotest.(check int) (Fmt.str "seed %d: no timeout" seed) 0 r.timeouts;
      Alcotest.(check int)
        (Fmt.str "seed %d: each recovery undone" seed)
        r.fast_retransmits r.sender.undos;
      Alcotest.(check int)
        (Fmt.str "seed %d: the threshold as over a perfect link" seed)
        perfect.sender.ssthresh r.sender.ssthresh)
    [ (1, true); (2, true); (3, true); (4, true); (1, false); (2, false); (3, false); (4, false) ]

(* Random loss over many short transfers, where a lost tail is common:
   RACK-TLP repairs most tails with a probe where duplicate ACKs must wait
   for the RTO. *)
let short_transfers () =
  let impairments = { link with loss = 0.01 } in
  let total rack =
    List.fold_left
      (fun (vt, rto, probes) seed ->
        let r =
          Transfer.run ~config:{ Tcp.default_config with rack } ~impairments ~seed (64 * kb)
        in
        (vt + r.virtual_time, rto + r.timeouts, probes + r.sender.probes))
      (0, 0, 0)
      (List.init 200 (fun i -> 100 + i))
  in
  let vt_on, rto_on, probes_on = total true and vt_off, rto_off, _ = total false in
  Logs.app (fun m ->
      m
        "200 x 64 KiB at 1%% loss: RACK-TLP %.0f ms, %d timeouts, %d probes; without %.0f ms, %d \
         timeouts"
        (ms vt_on) rto_on probes_on (ms vt_off) rto_off);
  Alcotest.(check bool) "probes went" true (probes_on > 0);
  Alcotest.(check bool) "without RACK-TLP, tails wait for the RTO" true (rto_off >= 4);
  Alcotest.(check bool) "RACK-TLP: half the timeouts at most" true (2 * rto_on <= rto_off);
  Alcotest.(check bool) "RACK-TLP: less time in all" true (vt_on < vt_off)

let tests =
  [
    Alcotest.test_case "a tail loss costs a probe and a round trip, not the RTO" `Quick tail_loss;
    Alcotest.test_case "a loss in the middle is found by time, once" `Quick middle_loss;
    Alcotest.test_case "reordering inside the window is not loss" `Quick reordering;
    Alcotest.test_case "spurious retransmissions undone by D-SACK" `Quick undo_spurious;
    Alcotest.test_case "short transfers at 1% loss: probes instead of timeouts" `Quick
      short_transfers;
  ]
