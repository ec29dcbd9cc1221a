(* Total order, causal order and safe delivery in one view, over a faulty
   network (loss, duplication, reordering), with each protocol; and the
   Total layer given nonsense. View changes and flushes are exercised by
   the simulated scenarios (consort sim total-seq ...). *)

open Consort
module G = Consort_group
module H = Harness

let layers props =
  match G.Properties.layers props with
  | Ok l -> l
  | Error e -> Alcotest.failf "%a" G.Properties.pp_error e

(* [n] members each cast [k] payloads "ORIGIN.I" at random times; what
   each member delivers, in order. *)
let run_group ?(params = Params.empty) ~props ~seed ~n ~k () =
  let pool = Pool.create () in
  let got = Array.make n [] in
  (* Deliveries whose source is not the origin their payload names. *)
  let misnamed = ref 0 in
  let deliver i (src : Event.src) msg =
    (match src with
    | Event.Cast_from o ->
        let s = Msg.to_string msg in
        (match String.split_on_char '.' s with
        | o' :: _ when o' = string_of_int o -> ()
        | _ -> incr misnamed);
        got.(i) <- s :: got.(i)
    | _ -> ());
    Msg.release msg
  in
  let h = H.create ~params ~net:H.faulty ~seed ~pool ~n ~layers:(layers props) ~deliver () in
  let rng = Rng.create seed in
  for o = 0 to n - 1 do
    let times = List.sort compare (List.init k (fun _ -> Rng.int rng (Time.of_ms 400))) in
    List.iteri
      (fun i at ->
        H.at h
          (Time.of_ms 1 + at)
          (fun () -> Stack.cast (H.stack h o) (Msg.of_string pool (Printf.sprintf "%d.%d" o i))))
      times
  done;
  ignore (H.run ~until:(Time.of_sec 3.) h);
  let seqs = Array.map List.rev got in
  H.stop h;
  Alcotest.(check int) "no buffer leaked" 0 (Pool.leak_check pool);
  Alcotest.(check int) "every delivery names its origin" 0 !misnamed;
  seqs

let fifo seq =
  let next = Hashtbl.create 8 in
  List.for_all
    (fun s ->
      match String.split_on_char '.' s with
      | [ o; i ] ->
          let want = Option.value ~default:0 (Hashtbl.find_opt next o) in
          Hashtbl.replace next o (want + 1);
          int_of_string i = want
      | _ -> false)
    seq

let total protocol () =
  let params = Params.set "total.protocol" (Params.String protocol) Params.empty in
  List.iter
    (fun seed ->
      let seqs = run_group ~params ~props:[ G.Properties.Gmp; Total ] ~seed ~n:4 ~k:25 () in
      Array.iteri
        (fun i s ->
          Alcotest.(check int)
            (Printf.sprintf "seed %d: member %d delivers every cast" seed i)
            100 (List.length s);
          Alcotest.(check bool) "in each origin's order" true (fifo s);
          Alcotest.(check (list string))
            (Printf.sprintf "seed %d: member %d, the same order as member 0" seed i)
            seqs.(0) s)
        seqs)
    [ 1; 2; 3 ]

(* Without Total, members do not agree on one order: the test above can
   fail. *)
let fifo_only_disagrees () =
  let disagree =
    List.exists
      (fun seed ->
        let seqs = run_group ~props:[ G.Properties.Gmp ] ~seed ~n:4 ~k:25 () in
        Array.exists (fun s -> s <> seqs.(0)) seqs)
      [ 1; 2; 3 ]
  in
  Alcotest.(check bool) "some member orders differently" true disagree

let causal_and_safe () =
  let seqs = run_group ~props:[ G.Properties.Gmp; Causal; Agree ] ~seed:5 ~n:4 ~k:25 () in
  Array.iter
    (fun s ->
      Alcotest.(check int) "every cast delivered" 100 (List.length s);
      Alcotest.(check bool) "in each origin's order" true (fifo s))
    seqs

(* Safe delivery waits for a member that hears nothing: while member 3 is
   deaf, no cast of the others is delivered anywhere (member 3 does not
   hold it); once it hears again, every cast is delivered. *)
let safe_waits_for_deaf () =
  let pool = Pool.create () in
  let n = 4 and k = 10 in
  let deaf = ref true in
  let early = ref [] and got = Array.make n 0 in
  let deliver i (src : Event.src) msg =
    (match src with
    | Event.Cast_from o ->
        got.(i) <- got.(i) + 1;
        if !deaf && o <> 3 then early := (i, Msg.to_string msg) :: !early
    | _ -> ());
    Msg.release msg
  in
  let drop ~src:_ ~dst _ = !deaf && dst = 3 in
  let h =
    H.create ~net:H.perfect ~drop ~seed:9 ~pool ~n
      ~layers:(layers [ G.Properties.Gmp; Agree ])
      ~deliver ()
  in
  for o = 0 to n - 1 do
    for i = 0 to k - 1 do
      H.at h
        (Time.of_ms (1 + (i * 20)))
        (fun () -> Stack.cast (H.stack h o) (Msg.of_string pool (Printf.sprintf "%d.%d" o i)))
    done
  done;
  H.at h (Time.of_ms 1500) (fun () -> deaf := false);
  ignore (H.run ~until:(Time.of_sec 4.) h);
  Alcotest.(check (list (pair int string))) "nothing delivered that member 3 lacks" [] !early;
  Array.iteri
    (fun i c -> Alcotest.(check int) (Printf.sprintf "member %d delivers all" i) (n * k) c)
    got;
  Alcotest.(check bool) "stability from Mnak" true (H.counter h 0 "agree" "stability_events" > 0);
  H.stop h;
  Alcotest.(check int) "no buffer leaked" 0 (Pool.leak_check pool)

(* What the tests that cut member 0's datagrams to member 3 share: the cut
   (on while [!cut]), each member's casts delivered (newest first) and the
   harness's [deliver] and [drop] for them. *)
let orders_cut_to_3 n =
  let cut = ref true in
  let got = Array.make n [] in
  let deliver i (src : Event.src) msg =
    (match src with Event.Cast_from _ -> got.(i) <- Msg.to_string msg :: got.(i) | _ -> ());
    Msg.release msg
  in
  let drop ~src ~dst _ = !cut && src = 0 && dst = 3 in
  (cut, got, deliver, drop)

(* A flood while the sequencer's datagrams to member 3 are lost: member 3
   gets the casts (and returns credit for them) but not their order. What
   waits there for its place stays within total.held and the flow control
   windows (the senders are slowed down to it), instead of growing with the
   flood; once the order gets through, every cast is delivered, in one
   order. *)
let total_held_bounded () =
  let pool = Pool.create () in
  let n = 4 and k = 2000 and size = 2000 in
  let cut, got, deliver, drop = orders_cut_to_3 n in
  let params = Result.get_ok (Params.of_string "total.held=65536,mflow.window=65536") in
  let h =
    H.create ~params ~net:H.perfect ~drop ~seed:3 ~pool ~n
      ~layers:(layers [ G.Properties.Gmp; Flow; Total ])
      ~deliver ()
  in
  let body = String.make size 'x' in
  for o = 1 to 2 do
    for i = 0 to k - 1 do
      H.at h
        (Time.of_ms 1 + (i * Time.of_ms 1 / 2))
        (fun () ->
          Stack.cast (H.stack h o) (Msg.of_string pool (Printf.sprintf "%d.%d.%s" o i body)))
    done
  done;
  H.at h (Time.of_ms 2500) (fun () -> cut := false);
  ignore (H.run ~until:(Time.of_sec 4.5) h);
  let peak = H.counter h 3 "total" "held_peak" in
  Alcotest.(check bool)
    (Printf.sprintf "held at member 3 within bounds (%d bytes)" peak)
    true
    (peak <= 65536 + (3 * 65536) + (4 * size));
  Alcotest.(check bool) "credit held back" true (H.counter h 3 "total" "credit_held" > 0);
  let seqs = Array.map List.rev got in
  Array.iteri
    (fun i s ->
      Alcotest.(check int) (Printf.sprintf "member %d delivers all" i) (2 * k) (List.length s))
    seqs;
  Array.iteri
    (fun i s -> Alcotest.(check bool) (Printf.sprintf "member %d: one order" i) true (s = seqs.(0)))
    seqs;
  H.stop h;
  Alcotest.(check int) "no buffer leaked" 0 (Pool.leak_check pool)

(* Casts held while the sequencer's orders do not reach member 3: many
   of each origin wait there at once (the ring that keeps them grows
   several times over), then the orders come and every one goes up in its
   origin's order and in member 0's order; on the fused path and on the
   layered one, and no buffer is leaked. *)
let total_held_many fused () =
  let pool = Pool.create () in
  let n = 4 and k = 150 in
  let cut, got, deliver, drop = orders_cut_to_3 n in
  let h =
    H.create ~fused ~net:H.perfect ~drop ~seed:5 ~pool ~n
      ~layers:(layers [ G.Properties.Gmp; Total ])
      ~deliver ()
  in
  for o = 1 to 3 do
    for i = 0 to k - 1 do
      H.at h
        (Time.of_ms 1 + (i * Time.of_ms 1))
        (fun () -> Stack.cast (H.stack h o) (Msg.of_string pool (Printf.sprintf "%d.%d" o i)))
    done
  done;
  H.at h (Time.of_ms 400) (fun () -> cut := false);
  ignore (H.run ~until:(Time.of_sec 3.) h);
  Alcotest.(check bool)
    (Printf.sprintf "casts waited at member 3 (%d bytes)" (H.counter h 3 "total" "held_peak"))
    true
    (H.counter h 3 "total" "held_peak" >= 3 * 32 * String.length "1.1");
  let seqs = Array.map List.rev got in
  Array.iteri
    (fun i s ->
      Alcotest.(check int) (Printf.sprintf "member %d delivers all" i) (3 * k) (List.length s);
      Alcotest.(check bool) (Printf.sprintf "member %d: each origin's order" i) true (fifo s);
      Alcotest.(check (list string)) (Printf.sprintf "member %d: one order" i) seqs.(0) s)
    seqs;
  H.stop h;
  Alcotest.(check int) "no buffer leaked" 0 (Pool.leak_check pool)

(* {1 Nonsense} *)

let nonsense () =
  let pool = Pool.create () in
  let view = View.v ~group:"test" ~members:[| "m0"; "m1"; "m2" |] ~rank:1 () in
  List.iter
    (fun protocol ->
      let params = Params.set "total.protocol" (Params.String protocol) Params.empty in
      let ctx = { Layer.view; rng = Rng.create 1; params; pool; now = (fun () -> 0) } in
      let ups = ref 0 in
      let out =
        {
          Layer.up =
            (fun _ m ->
              incr ups;
              Msg.release m);
          up_ctl = ignore;
          dn = (fun _ _ m -> Msg.release m);
          dn_ctl = ignore;
          alarm = ignore;
        }
      in
      let t = G.Total.create ctx out in
      let feed src h = G.Total.up t src h (Msg.of_string pool "x") in
      feed (Event.Cast_from 1) (G.Total.Order [ (7, 1) ]);
      feed (Event.Cast_from 0) (G.Total.Order [ (1, 0) ]);
      feed (Event.Cast_from 2) (G.Total.Order [ (1, 1) ]);
      feed (Event.Cast_from 9) G.Total.Data;
      feed (Event.Cast_from 1) (G.Total.Stamped (1 lsl 40));
      feed (Event.Cast_from 1) (G.Total.Stamped 3);
      feed (Event.Cast_from 1) (G.Total.Stamped 3);
      feed (Event.Send_from 0) (G.Total.Token { next = 0; idle = 0 });
      feed (Event.Send_from 0) (G.Total.Token { next = 0; idle = 0 });
      let nonsense = List.assoc "nonsense" (G.Total.counters t) in
      Alcotest.(check bool) (protocol ^ ": nonsense counted") true (nonsense >= 4);
      Alcotest.(check int) (protocol ^ ": nothing delivered") 0 !ups;
      G.Total.dn_ctl t Event.Stop)
    [ "sequencer"; "token" ];
  Alcotest.(check int) "no leak" 0 (Pool.leak_check pool)

(* Small views: a group of one (the sequencer alone, its casts come back
   to it) and of two, with the whole virtual synchrony stack. *)
let small protocol n () =
  let params = Params.set "total.protocol" (Params.String protocol) Params.empty in
  List.iter
    (fun seed ->
      let seqs =
        run_group ~params ~props:(G.Properties.vsync @ [ G.Properties.Total ]) ~seed ~n ~k:25 ()
      in
      Array.iteri
        (fun i s ->
          Alcotest.(check int)
            (Printf.sprintf "seed %d: member %d delivers every cast" seed i)
            (25 * n) (List.length s);
          Alcotest.(check (list string)) "the same order as member 0" seqs.(0) s)
        seqs)
    [ 1; 2; 3 ]

(* Agree alone, driven by hand as member 0 of 3: a cast from member 1 held
   until Mnak says every member holds it. After Gmp's Block, a cast that
   becomes stable may still be missing at a member the flush excludes:
   nothing comes up in the regular view, and what is held comes up at
   Stop, after the flush (Synced). [block] says whether Block comes before
   the stability event; without it, that event delivers the cast. *)
let agree_by_hand ~block () =
  let pool = Pool.create () in
  let view = View.v ~group:"test" ~members:[| "m0"; "m1"; "m2" |] ~rank:0 () in
  let ctx = { Layer.view; rng = Rng.create 1; params = Params.empty; pool; now = (fun () -> 0) } in
  let got = ref [] in
  let out =
    {
      Layer.up =
        (fun _ msg ->
          got := Msg.to_string msg :: !got;
          Msg.release msg);
      up_ctl = ignore;
      dn = (fun _ _ msg -> Msg.release msg);
      dn_ctl = ignore;
      alarm = ignore;
    }
  in
  let a = G.Agree.create ctx out in
  let cast s =
    G.Agree.up a (Event.Cast_from 1) G.Agree.Data (Msg.create (Iovecs.of_string pool s))
  in
  cast "a";
  (* Member 0 holds one cast of member 1; no member holds it everywhere yet. *)
  G.Agree.up_ctl a (G.Mnak.Stable { stable = [| 0; 0; 0 |]; received = [| 0; 1; 0 |] });
  Alcotest.(check (list string)) "not safe yet: held" [] !got;
  if block then G.Agree.up_ctl a G.Gmp.Block;
  G.Agree.up_ctl a (G.Mnak.Stable { stable = [| 0; 1; 0 |]; received = [| 0; 1; 0 |] });
  if block then begin
    Alcotest.(check (list string)) "after Block, nothing comes up before Stop" [] !got;
    G.Agree.up_ctl a G.Gmp.Synced;
    G.Agree.dn_ctl a Event.Stop;
    Alcotest.(check (list string)) "delivered at Stop, after the flush" [ "a" ] !got
  end
  else begin
    Alcotest.(check (list string)) "safe: delivered in the view" [ "a" ] !got;
    G.Agree.dn_ctl a Event.Stop
  end;
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool)

(* Total's token protocol driven by hand as member 0 of 3: two casts of
   member 1 stamped with places 3 and 5 wait behind a gap (the holder that
   stamped places 0-2 crashed); at the end of the view, after the flush,
   they come up in the order of their places, so in member 1's FIFO
   order. *)
let token_tail_in_place_order () =
  let pool = Pool.create () in
  let view = View.v ~group:"test" ~members:[| "m0"; "m1"; "m2" |] ~rank:0 () in
  let params = Params.set "total.protocol" (Params.String "token") Params.empty in
  let ctx = { Layer.view; rng = Rng.create 1; params; pool; now = (fun () -> 0) } in
  let got = ref [] in
  let out =
    {
      Layer.up =
        (fun _ msg ->
          got := Msg.to_string msg :: !got;
          Msg.release msg);
      up_ctl = ignore;
      dn = (fun _ _ msg -> Msg.release msg);
      dn_ctl = ignore;
      alarm = ignore;
    }
  in
  let t = G.Total.create ctx out in
  G.Total.up t (Event.Cast_from 1) (G.Total.Stamped 3) (Msg.of_string pool "b1");
  G.Total.up t (Event.Cast_from 1) (G.Total.Stamped 5) (Msg.of_string pool "b2");
  Alcotest.(check (list string)) "behind a gap: held" [] !got;
  G.Total.up_ctl t G.Gmp.Synced;
  G.Total.dn_ctl t Event.Stop;
  Alcotest.(check (list string))
    "at the end of the view, in place order" [ "b1"; "b2" ] (List.rev !got);
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool)

let () =
  Alcotest.run "ordering"
    [
      ( "one view",
        [
          Alcotest.test_case "Total, sequencer" `Quick (total "sequencer");
          Alcotest.test_case "Total, token" `Quick (total "token");
          Alcotest.test_case "Total, sequencer, a view of one" `Quick (small "sequencer" 1);
          Alcotest.test_case "Total, token, a view of one" `Quick (small "token" 1);
          Alcotest.test_case "Total, sequencer, a view of two" `Quick (small "sequencer" 2);
          Alcotest.test_case "Total, token, a view of two" `Quick (small "token" 2);
          Alcotest.test_case "FIFO alone disagrees" `Quick fifo_only_disagrees;
          Alcotest.test_case "Causal and Agree deliver everything" `Quick causal_and_safe;
          Alcotest.test_case "Agree waits for a deaf member" `Quick safe_waits_for_deaf;
          Alcotest.test_case "Agree: a stability event delivers" `Quick (agree_by_hand ~block:false);
          Alcotest.test_case "Total, token: the end of a view in place order" `Quick
            token_tail_in_place_order;
          Alcotest.test_case "Agree: nothing safe after Block before Stop" `Quick
            (agree_by_hand ~block:true);
          Alcotest.test_case "Total: what waits for its order is bounded" `Quick total_held_bounded;
          Alcotest.test_case "Total: many casts held, fused" `Quick (total_held_many true);
          Alcotest.test_case "Total: many casts held, layered" `Quick (total_held_many false);
        ] );
      ("nonsense", [ Alcotest.test_case "Total headers" `Quick nonsense ]);
    ]
