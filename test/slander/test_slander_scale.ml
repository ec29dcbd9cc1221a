(* How many Slander casts one crash costs, in the simulator: groups of 8,
   32 and 64 members form, one member crashes, and the survivors install
   the view without it. Each survivor's failure detector finds the silence
   at about the same time; the suspicion must reach every member, but not
   be cast by each of them (n casts of n deliveries each, per crash). *)

open Consort
module V = Consort_sim_group.Vsync_sim
module Sim = Consort_engine.Sim
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))

let counter st key =
  match List.assoc_opt "slander" (Stack.counters st) with
  | Some cs -> Option.value ~default:0 (List.assoc_opt key cs)
  | None -> 0

type tally = { mutable casts : int; mutable received : int }

(* Counts survive the view change: a member's stack is replaced by the new
   view's, so each stack's last counts are added up when it goes. *)
let watch w =
  let n = V.nprocs w in
  let last = Array.make n None in
  let total = { casts = 0; received = 0 } in
  let sample () =
    for i = 0 to n - 1 do
      let cur = V.member w i in
      (match (last.(i), cur) with
      | Some (st, c, r), Some (_, st') when st == st' ->
          last.(i) <-
            Some (st, max c (counter st "slanders_sent"), max r (counter st "slanders_received"))
      | Some (_, c, r), _ ->
          total.casts <- total.casts + c;
          total.received <- total.received + r;
          last.(i) <- None
      | None, _ -> ());
      match (last.(i), cur) with
      | None, Some (_, st) ->
          last.(i) <- Some (st, counter st "slanders_sent", counter st "slanders_received")
      | _ -> ()
    done
  in
  let flush () =
    Array.iteri
      (fun i l ->
        match l with
        | Some (_, c, r) ->
            total.casts <- total.casts + c;
            total.received <- total.received + r;
            last.(i) <- None
        | None -> ())
      last
  in
  (sample, flush, total)

let size w i = Option.map (fun g -> Array.length (G.view g).members) (V.group w i)

(* Runs in steps of [step] until [ok], at most [bound]; whether [ok]. *)
let run_until w ~step ~bound ?(each = ignore) ok =
  let net = V.net w in
  let stop = Sim.now net + bound in
  let rec go () =
    each ();
    if ok () then true
    else if Sim.now net >= stop then false
    else begin
      Sim.run ~until:(Sim.now net + step) net;
      go ()
    end
  in
  go ()

(* One group of [n], formed; [crash] crashed at once, and [later] 4.9 s
   after, just before the others find the first crash (the members that
   would cast it first); the casts and deliveries of slanders from the
   crash to the view without them all. *)
let one ?(props = "vsync") ?(link = Sim.default_link) ?(later = []) ~seed ~crash n =
  let params = Params.set "sim.props" (Params.String props) Params.empty in
  let w = V.make ~params ~seed ~n ~link () in
  for i = 0 to n - 1 do
    V.at w (Rng.int (V.rng w) 300_000_000) (fun () -> V.start w i)
  done;
  let formed () = List.for_all (fun i -> size w i = Some n) (List.init n Fun.id) in
  if not (run_until w ~step:(Time.of_ms 100) ~bound:(Time.of_sec 120.) formed) then
    Alcotest.failf "%d members did not form one view" n;
  Sim.run ~until:(Sim.now (V.net w) + Time.of_sec 1.) (V.net w);
  let sample, flush, total = watch w in
  sample ();
  let t0 = Sim.now (V.net w) in
  List.iter (V.crash w) crash;
  if later <> [] then V.at w (t0 + Time.of_ms 4900) (fun () -> List.iter (V.crash w) later);
  let dead = crash @ later in
  let gone () =
    List.for_all
      (fun i -> List.mem i dead || size w i = Some (n - List.length dead))
      (List.init n Fun.id)
  in
  (* Nothing is suspected before the timeout (5 s): sample from 4 s on. *)
  Sim.run ~until:(t0 + Time.of_sec 4.) (V.net w);
  if not (run_until w ~step:(Time.of_ms 1) ~bound:(Time.of_sec 30.) ~each:sample gone) then
    Alcotest.failf "%d members: the crash of %a was not followed by a view without it" n
      Fmt.(list ~sep:comma int)
      crash;
  flush ();
  (Time.to_sec (Sim.now (V.net w) - t0), total)

(* Casts and deliveries per crash at most [c] and [c n]; the view without
   the crashed members within [bound] virtual seconds: the suspicion
   timeout (5 s, after the last crash), the longest wait before a cast
   (0.25 s) and the flush. *)
let check_linear ?props ?link ?(later = fun _ -> []) ?(c = 4) ?(bound = 5.4) ~crash_of label =
  let per =
    List.map
      (fun n ->
        let crash = crash_of n in
        let secs, t = one ?props ?link ~later:(later n) ~seed:n ~crash n in
        if secs > bound then
          Alcotest.failf "%s, %d members: view change after %.3f s (at most %.1f)" label n secs
            bound;
        Fmt.pr "%s, %d members: view change %.3f s, %d slander casts, %d deliveries@." label n secs
          t.casts t.received;
        (n, t))
      [ 8; 32; 64 ]
  in
  List.iter
    (fun (n, t) ->
      if t.casts < 1 then Alcotest.failf "%d members: the crash was never cast" n;
      if t.casts > c then
        Alcotest.failf "%d members: %d slander casts for the crashes (at most %d)" n t.casts c;
      if t.received > c * n then
        Alcotest.failf "%d members: %d slander deliveries for the crashes (at most %dn = %d)" n
          t.received c (c * n))
    per

let () =
  Alcotest.run "slander_scale"
    [
      ( "casts per crash",
        [
          Alcotest.test_case "vsync, one member crashes" `Quick (fun () ->
              check_linear ~crash_of:(fun n -> [ n - 1 ]) "vsync");
          Alcotest.test_case "vsync, slow links" `Quick (fun () ->
              (* A flush takes longer than the members' turns to cast: those
                 after the first hear their slanders before their turn. *)
              check_linear
                ~link:{ Sim.default_link with latency = Time.of_ms 20; jitter = Time.of_ms 5 }
                ~c:8 ~bound:5.8
                ~crash_of:(fun n -> [ n - 1 ])
                "vsync, 20-25 ms links");
          Alcotest.test_case "vsync, the coordinator crashes" `Quick (fun () ->
              check_linear ~crash_of:(fun _ -> [ 0 ]) "vsync, coordinator");
          Alcotest.test_case "vsync, the first accusers crash too" `Quick (fun () ->
              check_linear ~c:8 ~bound:10.3
                ~crash_of:(fun n -> [ n - 1 ])
                ~later:(fun _ -> [ 0; 1 ])
                "vsync, first accusers");
          Alcotest.test_case "vsync+Scale, one member crashes" `Quick (fun () ->
              check_linear ~props:"vsync+Scale" ~crash_of:(fun n -> [ n / 2 ]) "vsync+Scale");
          Alcotest.test_case "vsync+Scale, the first accusers crash too" `Quick (fun () ->
              check_linear ~props:"vsync+Scale" ~c:8 ~bound:10.3
                ~crash_of:(fun n -> [ n / 2 ])
                ~later:(fun n -> [ (n / 2) + 1 ])
                "vsync+Scale, first accusers");
        ] );
    ]
