(* Mnak and Pt2pt against peers that lie: numbers beyond the window or
   impossible, forged NAKs and statuses, a dead origin, a suspected member;
   and the place of repairs in the stack. *)

open Consort
module G = Consort_group
module H = Harness

(* {1 A single stack driven by hand} *)

open Single

let single = create
let advance = run_until
let enc = Codec.encode_string
let mnak h = enc G.Mnak.codec h
let pt2pt h = enc G.Pt2pt.codec h

let mnak_headers s =
  List.rev_map
    (fun (d, bytes) ->
      let _, h, _ = split G.Mnak.codec bytes in
      (d, h))
    !(s.sent)

let naks s =
  List.length (List.filter (function _, G.Mnak.Nak _ -> true | _ -> false) (mnak_headers s))

let window = G.Mnak.effective_window Params.empty

(* {1 Mnak} *)

let forged_data () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; G.Bottom.layer ] in
  Alcotest.(check bool)
    "default window holds Mflow's window of empty casts" true
    (window * G.Mflow.overhead >= Params.int Params.empty G.Mflow.Param.window);
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = max_int }) ^ "x");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 1 lsl 40 }) ^ "x");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = window }) ^ "x");
  feed s (from_send s 2 ^ mnak (G.Mnak.Retrans { origin = 1; seq = max_int }) ^ "x");
  feed s (from_send s 2 ^ mnak (G.Mnak.Retrans { origin = 1; seq = max_int - 1 }) ^ "x");
  Alcotest.(check int) "beyond the window" 5 (counter s "mnak" "beyond_window");
  Alcotest.(check int) "nothing kept" 0 (counter s "mnak" "buffered");
  Alcotest.(check int) "no timer armed" max_int (Stack.next_alarm s.st);
  advance s (Time.of_ms 500);
  Alcotest.(check int) "nothing sent" 0 (List.length !(s.sent));
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 0 }) ^ "a");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 1 }) ^ "b");
  Alcotest.(check int) "real casts delivered" 2 (List.length !(s.got));
  advance s (Time.of_sec 1.);
  Alcotest.(check int) "no NAK: no gap was made" 0 (naks s);
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* Casts above a gap, each as large as a datagram: what is kept early is
   bounded in bytes, the rest is dropped and asked for again later. *)
let early_bytes () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; G.Bottom.layer ] in
  let big = String.make 60_000 'b' in
  (* The bound: four times Mflow's window (and at least 1 MiB); casts
     enough to go 30 past it. *)
  let bound = max (1 lsl 20) (4 * Params.int Params.empty G.Mflow.Param.window) in
  let casts = (bound / 60_000) + 30 in
  for seq = 1 to casts do
    feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq }) ^ big)
  done;
  let kept = counter s "mnak" "buffered" in
  Alcotest.(check bool)
    (Printf.sprintf "at most %d bytes kept early (%d casts of 60 kB)" bound kept)
    true
    (kept >= 10 && kept * 60_000 <= bound && kept < casts);
  Alcotest.(check int) "the others dropped" (casts - kept) (counter s "mnak" "beyond_window");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 0 }) ^ "a");
  Alcotest.(check int) "the gap filled: the ones kept delivered" (kept + 1) (List.length !(s.got));
  for seq = kept + 1 to casts do
    feed s (from_send s 2 ^ mnak (G.Mnak.Retrans { origin = 1; seq }) ^ big)
  done;
  Alcotest.(check int) "room again for the rest" (casts + 1) (List.length !(s.got));
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let forged_status () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; G.Bottom.layer ] in
  Stack.cast s.st (Msg.of_string s.pool "mine");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = false; vector = [| 5; 0; 0 |] }));
  feed s (from_cast s 2 ^ mnak (G.Mnak.Status { busy = false; vector = [| max_int; 0; 0 |] }));
  Alcotest.(check int) "claims of casts never made" 2 (counter s "mnak" "impossible");
  Alcotest.(check int)
    "own cast not released on an impossible claim" 1 (counter s "mnak" "buffered");
  (* Rank 1 claims rank 2 made max_int casts; rank 2 says it made none. *)
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = false; vector = [| 1; 0; max_int |] }));
  feed s (from_cast s 2 ^ mnak (G.Mnak.Status { busy = false; vector = [| 1; 0; 0 |] }));
  Alcotest.(check int) "own cast stable, released" 0 (counter s "mnak" "buffered");
  advance s (Time.of_sec 1.);
  Alcotest.(check int) "the origin's own count closed the gap: no NAK" 0 (naks s);
  (* Without the origin's word, the claim is held to the window. *)
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = false; vector = [| 1; 0; max_int |] }));
  s.sent := [];
  advance s (Time.of_ms 1100);
  List.iter
    (function
      | _, G.Mnak.Nak { ranges; _ } ->
          List.iter
            (fun (a, b) ->
              Alcotest.(check bool) "NAK within the window" true (a >= 0 && b < window))
            ranges
      | _ -> ())
    (mnak_headers s);
  Alcotest.(check bool) "asked while the claim stood" true (naks s > 0);
  feed s (from_cast s 2 ^ mnak (G.Mnak.Status { busy = false; vector = [| 1; 0; 0 |] }));
  advance s (Time.of_ms 1200);
  s.sent := [];
  advance s (Time.of_ms 2200);
  Alcotest.(check int) "silent once the origin answered" 0 (naks s);
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let forged_naks () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; G.Bottom.layer ] in
  for i = 1 to 3 do
    Stack.cast s.st (Msg.of_string s.pool (string_of_int i))
  done;
  s.sent := [];
  let retrans () =
    List.length (List.filter (function _, G.Mnak.Retrans _ -> true | _ -> false) (mnak_headers s))
  in
  let nak =
    from_send s 2 ^ mnak (G.Mnak.Nak { origin = 0; ranges = [ (0, max_int); (max_int, max_int) ] })
  in
  feed s nak;
  Alcotest.(check int) "what is held, once" 3 (retrans ());
  feed s nak;
  feed s nak;
  Alcotest.(check int) "the same asker again at once: ignored" 3 (retrans ());
  Alcotest.(check int) "counted" 2 (counter s "mnak" "naks_ignored");
  feed s (from_send s 1 ^ mnak (G.Mnak.Nak { origin = 0; ranges = [ (1, 1) ] }));
  Alcotest.(check int) "another asker" 4 (retrans ());
  feed s (from_send s 2 ^ mnak (G.Mnak.Nak { origin = 1; ranges = [ (0, max_int) ] }));
  Alcotest.(check int) "nothing held of that origin" 4 (retrans ());
  s.clock := !(s.clock) + Time.of_ms 10;
  feed s nak;
  Alcotest.(check int) "after half a retry period, answered again" 7 (retrans ());
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* A layer under Mnak that passes everything and turns [Inject e] going
   down into [e] coming up: a failure detector driven by hand. *)
type Event.dn_ctl += Inject of Event.up_ctl

module Injector = struct
  type t = unit Layer.out
  type header = unit

  let name = "injector"
  let codec = Codec.unit
  let pp_header ppf () = Fmt.string ppf "-"
  let provides = []
  let requires = []
  let create _ out = out
  let up (t : t) src () msg = t.up src msg
  let up_ctl (t : t) e = t.up_ctl e
  let dn (t : t) dst msg = t.dn dst () msg
  let dn_ctl (t : t) = function Inject e -> t.up_ctl e | e -> t.dn_ctl e
  let timer _ _ = ()
  let counters _ = []
end

(* A flush under way: rank 0 got the last of three casts of rank 2, which
   is then suspected; rank 1 holds the other two, but its status, frozen at
   its own block, does not claim them. Before rank 0 blocks, nobody is worth
   asking; once it has blocked, the gap is asked of rank 1, and filled. *)
let gap_asked_in_flush () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; (module Injector : Layer.S); G.Bottom.layer ] in
  Stack.dn_ctl s.st G.Mnak.Track_stability;
  let casts_of_2 () =
    List.length (List.filter (function Event.Cast_from 2, _ -> true | _ -> false) !(s.got))
  in
  feed s (from_cast s 2 ^ mnak (G.Mnak.Data { seq = 2 }) ^ "c");
  Stack.dn_ctl s.st (Inject (G.Gevent.Suspect { ranks = [ 2 ]; reason = "by hand" }));
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = false; vector = [| 0; 0; 0 |] }));
  s.sent := [];
  advance s (Time.of_ms 500);
  Alcotest.(check int) "no flush: nobody asked for a suspected origin's casts" 0 (naks s);
  Stack.dn_ctl s.st (Event.Block_req { round = 1 });
  advance s (Time.of_sec 1.);
  let asked =
    List.filter_map
      (function Event.Send 1, G.Mnak.Nak { origin = 2; ranges } -> Some ranges | _ -> None)
      (mnak_headers s)
  in
  Alcotest.(check bool) "blocked: rank 1 asked for the gap" true (asked <> []);
  List.iter
    (fun ranges -> Alcotest.(check (list (pair int int))) "the whole gap" [ (0, 1) ] ranges)
    asked;
  List.iter
    (fun (seq, body) -> feed s (from_send s 1 ^ mnak (G.Mnak.Retrans { origin = 2; seq }) ^ body))
    [ (0, "a"); (1, "b") ];
  Alcotest.(check int) "the three casts of rank 2 delivered" 3 (casts_of_2 ());
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* Is this datagram a Mnak [Data] of number [seq] ([None]: any)? *)
let is_data ?(suspect = false) ?seq bytes =
  let cs = Cstruct.of_string bytes in
  match Codec.decode G.Bottom.codec cs 0 with
  | Ok (G.Bottom.Cast _, off) -> (
      let off =
        if not suspect then off
        else match Codec.decode G.Suspect.codec cs off with Ok (_, off') -> off' | Error _ -> off
      in
      match Codec.decode G.Mnak.codec cs off with
      | Ok (G.Mnak.Data { seq = s }, _) -> ( match seq with None -> true | Some q -> q = s)
      | _ -> false)
  | _ -> false

(* Rank 2 casts three times, then dies: rank 0 got none of it, rank 1 got
   the first and the last. Once rank 2 is suspected, rank 1 stops asking,
   and nobody waits for rank 2 to release its own casts. *)
let dead_origin () =
  let pool = Pool.create () in
  let params = Params.(empty |> set G.Suspect.Param.timeout (Time (Time.of_ms 300))) in
  let drop ~src ~dst bytes =
    src = 2
    && not (dst = 1 && (is_data ~suspect:true ~seq:0 bytes || is_data ~suspect:true ~seq:2 bytes))
    || dst = 2
  in
  let delivered = Array.make 3 0 in
  let deliver i _ msg =
    delivered.(i) <- delivered.(i) + 1;
    Msg.release msg
  in
  let h =
    H.create ~params ~fused:false ~net:H.perfect ~drop ~seed:1 ~pool ~n:3
      ~layers:[ G.Mnak.layer; G.Suspect.layer; G.Bottom.layer ]
      ~deliver ()
  in
  H.at h (Time.of_ms 1) (fun () ->
      for _ = 1 to 3 do
        Stack.cast (H.stack h 2) (Msg.of_string pool "from 2")
      done);
  H.at h (Time.of_ms 2) (fun () -> Stack.cast (H.stack h 0) (Msg.of_string pool "from 0"));
  ignore (H.run ~until:(Time.of_ms 200) h);
  let early = H.counter h 1 "mnak" "naks_sent" in
  Alcotest.(check bool) "rank 1 asks rank 2 while it is trusted" true (early > 0);
  Alcotest.(check bool)
    "rank 0 holds its cast for rank 2" true
    (H.counter h 0 "mnak" "buffered" >= 1);
  ignore (H.run ~until:(Time.of_sec 1.) h);
  Alcotest.(check int) "rank 2 suspected" 1 (H.counter h 1 "suspect" "suspected");
  let later = H.counter h 1 "mnak" "naks_sent" in
  ignore (H.run ~until:(Time.of_sec 5.) h);
  Alcotest.(check int) "no NAK to a suspected origin" later (H.counter h 1 "mnak" "naks_sent");
  Alcotest.(check int) "rank 0 released its cast without rank 2" 0 (H.counter h 0 "mnak" "buffered");
  Alcotest.(check int) "rank 1 delivered up to the gap" 2 delivered.(1);
  H.stop h;
  check_no_leaks pool

(* As [dead_origin], rank 0's cast held for rank 2 alone: it is released
   as rank 0 suspects rank 2, not at the next status of rank 1. Looked at
   every 100 us from the start. *)
let released_on_suspicion () =
  let pool = Pool.create () in
  let params = Params.(empty |> set G.Suspect.Param.timeout (Time (Time.of_ms 300))) in
  let drop ~src ~dst _ = src = 2 || dst = 2 in
  let deliver _ _ msg = Msg.release msg in
  let h =
    H.create ~params ~fused:false ~net:H.perfect ~drop ~seed:1 ~pool ~n:3
      ~layers:[ G.Mnak.layer; G.Suspect.layer; G.Bottom.layer ]
      ~deliver ()
  in
  H.at h (Time.of_ms 2) (fun () -> Stack.cast (H.stack h 0) (Msg.of_string pool "from 0"));
  let seen = ref None and held = ref 0 in
  for k = 1 to 10_000 do
    H.at h
      (k * Time.of_us 100)
      (fun () ->
        if H.counter h 0 "mnak" "buffered" > 0 then incr held;
        if !seen = None && H.counter h 0 "suspect" "suspected" > 0 then
          seen := Some (H.counter h 0 "mnak" "buffered"))
  done;
  ignore (H.run ~until:(Time.of_sec 1.) h);
  Alcotest.(check bool) "held while rank 2 was trusted" true (!held > 100);
  Alcotest.(check (option int)) "released as rank 2 was suspected" (Some 0) !seen;
  H.stop h;
  check_no_leaks pool

(* A cast above a gap arms the NAK for it at once: it goes out after
   [nak_delay] (2 ms), not after the next status (20 ms). *)
let nak_armed_by_gap () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; G.Bottom.layer ] in
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 1 }) ^ "b");
  advance s (Time.of_ms 5);
  Alcotest.(check int) "a NAK within 5 ms" 1 (naks s);
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 0 }) ^ "a");
  Alcotest.(check int) "both delivered" 2 (List.length !(s.got));
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* A burst of a full Mflow window of empty casts, its first cast lost to
   one member: every later one is buffered there, none dropped as beyond
   the window. *)
let flow_burst () =
  let pool = Pool.create () in
  let burst = Params.int Params.empty G.Mflow.Param.window / G.Mflow.overhead in
  let lost = ref false in
  let drop ~src ~dst bytes =
    src = 0 && dst = 2 && (not !lost) && is_data ~seq:0 bytes
    &&
    (lost := true;
     true)
  in
  let delivered = Array.make 3 0 in
  let deliver i _ msg =
    delivered.(i) <- delivered.(i) + 1;
    Msg.release msg
  in
  let h =
    H.create ~fused:false ~net:H.perfect ~drop ~seed:1 ~pool ~n:3
      ~layers:[ G.Mflow.layer; G.Mnak.layer; G.Bottom.layer ]
      ~deliver ()
  in
  H.at h (Time.of_ms 1) (fun () ->
      for _ = 1 to burst do
        Stack.cast (H.stack h 0) (Msg.empty ())
      done);
  Alcotest.(check bool) "quiescent" true (H.run ~until:(Time.of_sec 60.) h = `Quiescent);
  Alcotest.(check bool) "the first cast was lost" true !lost;
  Alcotest.(check bool)
    (Printf.sprintf "the burst was in flight at once (%d early)"
       (H.counter h 2 "mnak" "out_of_order"))
    true
    (H.counter h 2 "mnak" "out_of_order" >= burst - 1);
  Alcotest.(check int) "none beyond the window" 0 (H.counter h 2 "mnak" "beyond_window");
  Alcotest.(check (array int)) "all delivered" [| burst; burst; burst |] delivered;
  H.stop h;
  check_no_leaks pool

(* {1 Pt2pt} *)

let pt2pt_forged () =
  let s = single ~n:2 ~rank:0 [ G.Pt2pt.layer; G.Bottom.layer ] in
  for i = 1 to 3 do
    Stack.send s.st 1 (Msg.of_string s.pool (string_of_int i))
  done;
  Alcotest.(check int) "three unacknowledged" 3 (counter s "pt2pt" "unacked");
  feed s (from_send s 1 ^ pt2pt (G.Pt2pt.Data { seq = 1 lsl 40; ack = 3 }) ^ "x");
  feed s (from_send s 1 ^ pt2pt (G.Pt2pt.Data { seq = max_int; ack = 3 }) ^ "x");
  Alcotest.(check int) "beyond the window" 2 (counter s "pt2pt" "beyond_window");
  Alcotest.(check int) "its acknowledgement not taken" 3 (counter s "pt2pt" "unacked");
  feed s (from_send s 1 ^ pt2pt (G.Pt2pt.Ack { ack = max_int; sack = [] }));
  feed s (from_send s 1 ^ pt2pt (G.Pt2pt.Data { seq = 0; ack = 4 }) ^ "y");
  Alcotest.(check int) "acknowledgements of messages never sent" 2 (counter s "pt2pt" "impossible");
  Alcotest.(check int) "still unacknowledged" 3 (counter s "pt2pt" "unacked");
  Alcotest.(check int) "nothing delivered" 0 (List.length !(s.got));
  feed s (from_send s 1 ^ pt2pt (G.Pt2pt.Ack { ack = 1; sack = [ (2, max_int) ] }));
  Alcotest.(check int) "a true acknowledgement" 1 (counter s "pt2pt" "unacked");
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* {1 The stack} *)

let order () =
  let d = G.Properties.describe G.Properties.vsync in
  let has sub =
    let n = String.length sub in
    let rec go i = i + n <= String.length d && (String.sub d i n = sub || go (i + 1)) in
    go 0
  in
  Alcotest.(check bool) (d ^ ": Mnak under Pt2pt") true (has "pt2pt:mnak:suspect:bottom")

(* Casts only, over a lossy network, Pt2pt above Mnak: the repairs never
   pass through Pt2pt. *)
let repairs_unreliable () =
  let pool = Pool.create () in
  let deliver _ _ msg = Msg.release msg in
  let naks = ref 0 in
  for seed = 1 to 3 do
    let h =
      H.create ~seed ~pool ~n:4 ~layers:[ G.Pt2pt.layer; G.Mnak.layer; G.Bottom.layer ] ~deliver ()
    in
    for o = 0 to 3 do
      for k = 0 to 49 do
        H.at h
          (Time.of_ms (1 + (k * 3) + o))
          (fun () -> Stack.cast (H.stack h o) (Msg.of_string pool "c"))
      done
    done;
    Alcotest.(check bool) "quiescent" true (H.run ~until:(Time.of_sec 600.) h = `Quiescent);
    for i = 0 to 3 do
      naks := !naks + H.counter h i "mnak" "naks_sent";
      Alcotest.(check int) "no Pt2pt acknowledgement" 0 (H.counter h i "pt2pt" "acks_sent");
      Alcotest.(check int) "no Pt2pt retransmission" 0 (H.counter h i "pt2pt" "retransmissions");
      Alcotest.(check int) "every cast stable" 0 (H.counter h i "mnak" "buffered")
    done;
    H.stop h
  done;
  Alcotest.(check bool) "losses were repaired" true (!naks > 0);
  check_no_leaks pool

(* {1 mnak_tree: stability gathered up a tree (Scale)} *)

let reports s =
  List.filter_map (function Event.Send p, G.Mnak.Report _ -> Some p | _ -> None) (mnak_headers s)

let cover n ranks =
  String.init
    ((n + 7) / 8)
    (fun i ->
      Char.chr
        (List.fold_left (fun a r -> if r / 8 = i then a lor (1 lsl (r mod 8)) else a) 0 ranks))

let report s ~from ~ranks low =
  let n = Array.length low in
  feed s
    (from_send s from
    ^ mnak
        (G.Mnak.Report
           {
             busy = false;
             cover = cover n ranks;
             low;
             high = Array.copy low;
             who = Array.make n from;
           }))

let tree_root () =
  (* Rank 0 is the root of a tree of 3 (fanout 2): its children are 1 and 2. *)
  let params = Params.set G.Mnak.Param.fanout (Params.Int 2) Params.empty in
  let s = single ~params ~n:3 ~rank:0 [ G.Mnak.tree_layer; G.Bottom.layer ] in
  Stack.cast s.st (Msg.of_string s.pool "mine");
  advance s (Time.of_ms 30);
  Alcotest.(check bool)
    "the root asks for reports" true
    (List.exists (function _, G.Mnak.Stability { busy; _ } -> busy | _ -> false) (mnak_headers s));
  report s ~from:1 ~ranks:[ 1 ] [| 1; 0; 0 |];
  advance s (Time.of_ms 60);
  Alcotest.(check int) "one child of two: own cast kept" 1 (counter s "mnak_tree" "buffered");
  Alcotest.(check bool)
    "no stability cast names the cast held by all" true
    (List.for_all
       (function G.Mnak.Stability { stable; _ } -> stable.(0) = 0 | _ -> true)
       (List.map snd (mnak_headers s)));
  report s ~from:2 ~ranks:[ 2 ] [| 1; 0; 0; 0 |];
  Alcotest.(check int)
    "a report with vectors that do not fit the view is dropped" 1
    (counter s "mnak_tree" "malformed");
  Alcotest.(check int) "still kept" 1 (counter s "mnak_tree" "buffered");
  report s ~from:2 ~ranks:[ 2 ] [| 1; 0; 0 |];
  advance s (Time.of_ms 100);
  Alcotest.(check int) "both children: released" 0 (counter s "mnak_tree" "buffered");
  Alcotest.(check bool)
    "and the root cast it as stable" true
    (List.exists
       (function G.Mnak.Stability { stable; _ } -> stable.(0) = 1 | _ -> false)
       (List.map snd (mnak_headers s)));
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let tree_member () =
  (* Rank 2 of 5, fanout 2: its parent is rank 0, its children 5 and 6 do
     not exist. A report from rank 4 (a child of 1) is not its to take. *)
  let params = Params.set G.Mnak.Param.fanout (Params.Int 2) Params.empty in
  let s = single ~params ~n:5 ~rank:2 [ G.Mnak.tree_layer; G.Bottom.layer ] in
  report s ~from:4 ~ranks:[ 4 ] [| 0; 0; 0; 0; 0 |];
  Alcotest.(check int)
    "a report from another's child is dropped" 1
    (counter s "mnak_tree" "malformed");
  Stack.cast s.st (Msg.of_string s.pool "x");
  advance s (Time.of_ms 30);
  Alcotest.(check (list int))
    "busy: reports to its parent only" [ 0 ]
    (List.sort_uniq compare (reports s));
  (* The root says rank 1 holds 3 casts of rank 4, which this member lacks. *)
  feed s
    (from_cast s 0
    ^ mnak
        (G.Mnak.Stability
           {
             busy = true;
             stable = [| 0; 0; 0; 0; 0 |];
             high = [| 0; 0; 1; 0; 3 |];
             who = [| 0; 0; 2; 0; 1 |];
           }));
  s.sent := [];
  advance s (Time.of_ms 200);
  Alcotest.(check bool)
    "a lost tail shows as a gap and is asked for" true
    (List.exists (function _, G.Mnak.Nak { origin = 4; _ } -> true | _ -> false) (mnak_headers s));
  (* A stability that claims casts of this member it never made is dropped. *)
  feed s
    (from_cast s 0
    ^ mnak
        (G.Mnak.Stability
           {
             busy = false;
             stable = [| 0; 0; 9; 0; 0 |];
             high = [| 0; 0; 9; 0; 0 |];
             who = [| 0; 0; 2; 0; 1 |];
           }));
  Alcotest.(check int) "impossible" 1 (counter s "mnak_tree" "impossible");
  Alcotest.(check int) "own cast still kept" 1 (counter s "mnak_tree" "buffered");
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let () =
  Iovec.set_checked true;
  Alcotest.run "repair"
    [
      ( "mnak",
        [
          Alcotest.test_case "numbers beyond the window change nothing" `Quick forged_data;
          Alcotest.test_case "casts kept early are bounded in bytes" `Quick early_bytes;
          Alcotest.test_case "statuses: impossible claims dropped, others held to the window" `Quick
            forged_status;
          Alcotest.test_case "NAKs: bounded answers, repeated ones ignored" `Quick forged_naks;
          Alcotest.test_case "a dead origin: no NAK once suspected, stability without it" `Quick
            dead_origin;
          Alcotest.test_case "a full Mflow window of empty casts fits the window" `Quick flow_burst;
          Alcotest.test_case "a suspicion releases at once what waited for the suspected" `Quick
            released_on_suspicion;
          Alcotest.test_case "a cast above a gap arms its NAK at once" `Quick nak_armed_by_gap;
          Alcotest.test_case "in a flush, a dead origin's gap is asked of the others" `Quick
            gap_asked_in_flush;
          Alcotest.test_case "tree: the root declares stability only once all are covered" `Quick
            tree_root;
          Alcotest.test_case "tree: reports to the parent; gaps from the root's word" `Quick
            tree_member;
        ] );
      ( "pt2pt",
        [ Alcotest.test_case "numbers checked before any state changes" `Quick pt2pt_forged ] );
      ( "stack",
        [
          Alcotest.test_case "vsync puts Mnak under Pt2pt" `Quick order;
          Alcotest.test_case "repairs travel below Pt2pt" `Quick repairs_unreliable;
        ] );
    ]
