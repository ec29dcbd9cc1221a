open Codec_props
open Consort
module G = Consort_group
module Sim = Consort_engine.Sim
module Ep = Consort_engine.Endpoint.Make (Sim)

let ms = Time.of_ms
let sec = Time.of_sec
let interval = ms 250
let timeout = sec 5.
let detector = [ G.Suspect.layer; G.Bottom.layer ]
let full = [ G.Slander.layer; G.Mnak.layer; G.Pt2pt.layer; G.Suspect.layer; G.Bottom.layer ]
let enc = Codec.encode_string

let contains s sub =
  let n = String.length s and k = String.length sub in
  let rec go i = i + k <= n && (String.sub s i k = sub || go (i + 1)) in
  go 0

(* {1 Codecs} *)

let nat = QCheck.Gen.(oneof [ small_nat; map (fun x -> x land max_int) int ])
let ranks_gen = QCheck.Gen.(list_size (int_bound 20) nat)

let suspect_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Suspect.No_hdr;
        map (fun suspects -> G.Suspect.Heartbeat { suspects }) ranks_gen;
        map (fun ack -> G.Suspect.Probe { ack }) bool;
      ])

let slander_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Slander.No_hdr;
        map3
          (fun ranks reason kind -> G.Slander.Slander { ranks; reason; kind })
          ranks_gen
          (string_size (int_bound 100))
          (oneofl G.Gevent.[ Silent; Requested; Unresponsive ]);
      ])

let layouts () =
  Alcotest.(check string) "no header" "\000" (enc G.Suspect.codec G.Suspect.No_hdr);
  Alcotest.(check string)
    "heartbeat" "\001\002\001\200\001"
    (enc G.Suspect.codec (G.Suspect.Heartbeat { suspects = [ 1; 200 ] }));
  Alcotest.(check string)
    "slander" "\001\001\004\002hi"
    (enc G.Slander.codec
       (G.Slander.Slander { ranks = [ 4 ]; reason = "hi"; kind = G.Gevent.Silent }))

let codec_tests =
  [
    qtest (round_trip "suspect" G.Suspect.codec G.Suspect.pp_header suspect_gen);
    qtest (round_trip "slander" G.Slander.codec G.Slander.pp_header slander_gen);
    qtest (random_bytes "suspect" G.Suspect.codec [ 0; 1; 2; 3 ]);
    qtest (random_bytes "slander" G.Slander.codec [ 0; 1; 2; 3 ]);
    Alcotest.test_case "header layouts" `Quick layouts;
  ]

(* {1 A single stack driven by hand} *)

open Single

let single ?params ?(n = 3) ?rank layers = create ?params ~group:"fd" ~n ?rank layers

(* The Suspect events that reached the application, oldest first. *)
let ctl s =
  List.rev
    (List.filter_map
       (function t, G.Gevent.Suspect { ranks; reason } -> Some (t, ranks, reason) | _ -> None)
       !(s.ctl))

(* Mnak numbers of the casts fed to each stack from each rank. *)
let seqs : (Stack.t * int array) list ref = ref []

let next_seq s r =
  let a =
    match List.assq_opt s.st !seqs with
    | Some a -> a
    | None ->
        let a = Array.make 64 0 in
        seqs := (s.st, a) :: !seqs;
        a
  in
  let seq = a.(r) in
  a.(r) <- seq + 1;
  seq

let bottom_cast s r = enc G.Bottom.codec (G.Bottom.Cast { group = s.group; origin = r })

let bottom_send s r =
  enc G.Bottom.codec
    (G.Bottom.Send { group = s.group; origin = r; dst = (Stack.view s.st).View.rank })

let heartbeat s r suspects =
  bottom_cast s r ^ enc G.Suspect.codec (G.Suspect.Heartbeat { suspects })

(* [codec]'s header of an outgoing datagram, and the offset just after it. *)
let split codec bytes =
  let _, h, rest = split codec bytes in
  (h, String.length bytes - String.length rest)

let heartbeats_sent s =
  List.rev
    (List.filter_map
       (fun (d, b) ->
         match (d, split G.Suspect.codec b) with
         | Event.Cast, (G.Suspect.Heartbeat { suspects }, _) -> Some suspects
         | _ -> None)
       !(s.sent))

let ctl_t = Alcotest.(list (triple int (list int) string))
let src_t = Alcotest.testable Event.pp_src ( = )

let stop s =
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* Heartbeats from [ranks], every interval from [from] to [until]. *)
let beats s ~from ~until ranks =
  let rec go t =
    if t <= until then begin
      run_until s t;
      List.iter (fun r -> feed s (heartbeat s r [])) ranks;
      go (t + interval)
    end
  in
  go from

let suspect_by_hand () =
  let s = single ~n:3 ~rank:0 detector in
  Alcotest.(check int) "first heartbeat due at once" 0 (Stack.next_alarm s.st);
  run_until s 0;
  Alcotest.(check (list (list int))) "one empty heartbeat" [ [] ] (heartbeats_sent s);
  Alcotest.(check int) "next one an interval later" interval (Stack.next_alarm s.st);
  run_until s (sec 1.);
  feed s (bottom_cast s 1 ^ enc G.Suspect.codec G.Suspect.No_hdr ^ "data");
  Alcotest.(check (list (pair src_t string)))
    "messages pass through"
    [ (Event.Cast_from 1, "data") ]
    (List.rev !(s.got));
  run_until s (sec 2.);
  feed s (heartbeat s 2 []);
  Alcotest.(check int) "heartbeat counted" 1 (counter s "suspect" "heartbeats_received");
  run_until s (sec 5.999);
  Alcotest.check ctl_t "nobody suspected yet" [] (ctl s);
  run_until s (sec 6.1);
  Alcotest.check ctl_t "rank 1 suspected 5 s after its last message"
    [ (sec 6., [ 1 ], "silent for 5.0 s") ]
    (ctl s);
  run_until s (sec 7.1);
  Alcotest.check ctl_t "then rank 2"
    [ (sec 6., [ 1 ], "silent for 5.0 s"); (sec 7., [ 2 ], "silent for 5.0 s") ]
    (ctl s);
  let beats = heartbeats_sent s in
  Alcotest.(check int) "a heartbeat every 250 ms" 29 (List.length beats);
  Alcotest.(check (list int)) "heartbeats carry the suspicions" [ 1; 2 ] (List.nth beats 28);
  Alcotest.(check (list int)) "set grows as suspicions come" [ 1 ] (List.nth beats 27);
  feed s (heartbeat s 1 [ 0; 2; 17 ]);
  Alcotest.(check int)
    "life after suspicion counted" 1
    (counter s "suspect" "heard_after_suspicion");
  Alcotest.(check int)
    "a suspected member's accusations are not judged" 0
    (counter s "suspect" "accusations_rejected" + counter s "suspect" "accusers_blamed");
  Stack.dn_ctl s.st (G.Gevent.Suspect_request { ranks = [ 0; 17 ]; reason = "operator" });
  Alcotest.(check int) "suspicion of self counted" 1 (counter s "suspect" "self_suspicions");
  Alcotest.(check int) "rank outside the view counted" 1 (counter s "suspect" "bad_rank");
  run_until s (sec 30.);
  Alcotest.(check int) "each rank suspected once" 2 (List.length (ctl s));
  Alcotest.(check int) "by silence" 2 (counter s "suspect" "by_silence");
  feed s (bottom_cast s 1 ^ "\007junk");
  feed s (bottom_cast s 1 ^ "\001\005\001");
  Alcotest.(check int) "bad headers are garbage" 2 (counter s "suspect" "garbage");
  Stack.dn_ctl s.st Event.Stop;
  let n = List.length !(s.sent) in
  run_until s (sec 40.);
  Alcotest.(check int) "silent after stop" n (List.length !(s.sent));
  Alcotest.(check int) "no more alarms" max_int (Stack.next_alarm s.st);
  check_no_leaks s.pool

let gossip = "suspected by 2 (heartbeat) and silent here too"

let suspect_gossip_and_requests () =
  let s = single ~n:5 ~rank:0 detector in
  (* Ranks 2 and 4 are heard; 1 and 3 are silent here too. *)
  beats s ~from:0 ~until:(sec 3.) [ 2; 4 ];
  feed s (heartbeat s 4 [ 2 ]);
  Alcotest.check ctl_t "not adopted: rank 2 is heard here" [] (ctl s);
  Alcotest.(check int) "rejected" 1 (counter s "suspect" "accusations_rejected");
  feed s (heartbeat s 2 [ 1; 1; 3 ]);
  Alcotest.check ctl_t "adopted from a heartbeat" [ (sec 3., [ 1; 3 ], gossip) ] (ctl s);
  Alcotest.(check int) "gossiped" 2 (counter s "suspect" "gossiped");
  Stack.dn_ctl s.st (G.Gevent.Suspect_request { ranks = [ 2; 0; 9; 1 ]; reason = "operator" });
  Alcotest.check ctl_t "request adopted, new ranks only"
    [ (sec 3., [ 1; 3 ], gossip); (sec 3., [ 2 ], "operator") ]
    (ctl s);
  Alcotest.(check int) "requested" 1 (counter s "suspect" "requested");
  Alcotest.(check int) "self" 1 (counter s "suspect" "self_suspicions");
  Alcotest.(check int) "bad rank" 1 (counter s "suspect" "bad_rank");
  run_until s (sec 3.25);
  (* Heartbeats carry what this member found silent, not what it was asked
     to suspect: their suspicions are judged as silences. *)
  Alcotest.(check (list int))
    "next heartbeat carries the silent ones, not the requested" [ 1; 3 ]
    (List.hd (List.rev (heartbeats_sent s)));
  run_until s (sec 20.);
  Alcotest.check ctl_t "rank 4 by silence, nothing repeated"
    [ (sec 3., [ 1; 3 ], gossip); (sec 3., [ 2 ], "operator"); (sec 8., [ 4 ], "silent for 5.0 s") ]
    (ctl s);
  Alcotest.(check int) "suspected gauge" 4 (counter s "suspect" "suspected");
  stop s

(* A member that stops hearing names the others one by one: it is the
   one suspected, as soon as it has named most of them. *)
let suspect_deaf_accuser () =
  let s = single ~n:5 ~rank:0 detector in
  beats s ~from:0 ~until:(sec 8.) [ 1; 2; 3; 4 ];
  feed s (heartbeat s 4 [ 1 ]);
  Alcotest.check ctl_t "one accused, heard here: nothing" [] (ctl s);
  feed s (heartbeat s 4 [ 0; 1 ]);
  Alcotest.check ctl_t "half of the others: not yet" [] (ctl s);
  feed s (heartbeat s 4 [ 0; 1; 2 ]);
  Alcotest.check ctl_t "most of the view: the accuser is suspected"
    [ (sec 8., [ 4 ], "suspects 3 of the 4 other members, some of which this member hears") ]
    (ctl s);
  Alcotest.(check int) "blamed" 1 (counter s "suspect" "accusers_blamed");
  (* An application's request is adopted whoever is heard. *)
  Stack.dn_ctl s.st
    (G.Gevent.Accusation
       { accuser = 3; ranks = [ 1 ]; reason = "operator"; kind = G.Gevent.Requested });
  Alcotest.(check (list int))
    "requested: adopted" [ 4; 1 ]
    (List.concat_map (fun (_, r, _) -> r) (ctl s));
  stop s

let judge () =
  let j ?(me = 0) ?(n = 5) ?(all = []) ?vouches ?self ~hears ~kind accuser ranks =
    let v = G.Suspect.judge ~n ~me ~hears ?vouches ?self ~accuser ~kind ~all ranks in
    (v.G.Suspect.adopt, v.blame_accuser)
  in
  let r = Alcotest.(pair (list int) bool) in
  let nobody _ = false and everyone _ = true in
  let open G.Gevent in
  Alcotest.check r "a crash: nobody hears it" ([ 3 ], false) (j ~hears:nobody ~kind:Silent 1 [ 3 ]);
  Alcotest.check r "heard here: not adopted, not blamed" ([], false)
    (j ~hears:everyone ~kind:Silent 1 [ 3 ]);
  Alcotest.check r "self, the accuser, outside the view: never" ([], false)
    (j ~hears:nobody ~kind:Silent 1 [ 0; 1; 7; -1 ]);
  Alcotest.check r "most of the view, this member included: blamed" ([], true)
    (j ~hears:everyone ~kind:Silent 4 [ 0; 1; 2 ]);
  Alcotest.check r "most of the view, counting what it said before" ([], true)
    (j ~hears:everyone ~all:[ 1; 2 ] ~kind:Silent 4 [ 3 ]);
  Alcotest.check r "a partition of 2 against 3: adopted"
    ([ 2; 3; 4 ], false)
    (j ~hears:(fun r -> r = 1) ~kind:Silent 1 [ 2; 3; 4 ]);
  Alcotest.check r "unresponsive, a minority: adopted though heard" ([ 3 ], false)
    (j ~hears:everyone ~kind:Unresponsive 1 [ 3 ]);
  Alcotest.check r "unresponsive, most of the view: blamed" ([], true)
    (j ~hears:everyone ~kind:Unresponsive 1 [ 0; 2; 3 ]);
  Alcotest.check r "requested: adopted whatever"
    ([ 2; 3 ], false)
    (j ~hears:everyone ~kind:Requested 1 [ 0; 2; 3 ]);
  Alcotest.check r "two members: the other accuses this one" ([], true)
    (j ~n:2 ~hears:everyone ~kind:Silent 1 [ 0 ]);
  (* Starved together: this member was paused and hears the others again
     only since a moment ago; the member that went on is right. *)
  Alcotest.check r "starved here: heard again, not vouched for, accused here: not blamed" ([], false)
    (j ~hears:everyone ~vouches:nobody ~self:false ~kind:Silent 4 [ 0; 1; 2 ]);
  Alcotest.check r "starved others, this one ran: blamed for accusing it" ([], true)
    (j ~hears:everyone ~vouches:nobody ~self:true ~kind:Silent 4 [ 0; 1; 2 ]);
  Alcotest.check r "this one starved, vouches for one accused: blamed" ([], true)
    (j ~hears:everyone ~vouches:(fun r -> r = 2) ~self:false ~kind:Silent 4 [ 0; 1; 2 ]);
  Alcotest.check r "starved members not heard here: adopted"
    ([ 1; 2 ], false)
    (j ~hears:nobody ~vouches:nobody ~self:false ~kind:Silent 4 [ 0; 1; 2 ])

let suspect_alone () =
  let s = single ~n:1 ~rank:0 detector in
  Alcotest.(check int) "no alarm" max_int (Stack.next_alarm s.st);
  Stack.dn_ctl s.st (G.Gevent.Suspect_request { ranks = [ 0 ]; reason = "me" });
  Alcotest.(check int) "self" 1 (counter s "suspect" "self_suspicions");
  Alcotest.(check int) "nothing sent" 0 (List.length !(s.sent));
  Alcotest.check ctl_t "nothing reported" [] (ctl s);
  stop s

let pause_by_hand () =
  (* Heard until 2 s, then not scheduled until 12 s: nobody suspected. *)
  let s = single ~n:3 ~rank:0 detector in
  beats s ~from:0 ~until:(sec 2.) [ 1; 2 ];
  s.clock := sec 12.;
  Stack.timer s.st !(s.clock);
  Alcotest.check ctl_t "no suspicion on waking" [] (ctl s);
  Alcotest.(check int) "pause noticed" 1 (counter s "suspect" "pauses");
  beats s ~from:(sec 12.1) ~until:(sec 30.) [ 1 ];
  Alcotest.check ctl_t "the silent one suspected after a full timeout of running time"
    [ (sec 16.75, [ 2 ], "silent for 5.0 s") ]
    (ctl s);
  stop s;
  (* Rank 2 already silent for 4.5 s when the pause starts: one more interval. *)
  let s = single ~n:3 ~rank:0 detector in
  beats s ~from:0 ~until:(sec 4.5) [ 1 ];
  s.clock := sec 14.5;
  Stack.timer s.st !(s.clock);
  Alcotest.check ctl_t "not at once" [] (ctl s);
  beats s ~from:(sec 14.6) ~until:(sec 20.) [ 1 ];
  Alcotest.check ctl_t "one interval after waking"
    [ (sec 14.75, [ 2 ], "silent for 5.0 s") ]
    (ctl s);
  stop s;
  (* Without the rule (a pause threshold of an hour) everyone is suspected on waking. *)
  let params = Params.(empty |> set G.Suspect.Param.pause (Time (sec 3600.))) in
  let s = single ~params ~n:3 ~rank:0 detector in
  beats s ~from:0 ~until:(sec 2.) [ 1; 2 ];
  s.clock := sec 12.;
  Stack.timer s.st !(s.clock);
  Alcotest.check ctl_t "all suspected without the rule"
    [ (sec 12., [ 1; 2 ], "silent for 10.0 s") ]
    (ctl s);
  stop s

(* Slander over Mnak over Suspect, fed by hand. *)
let slander_cast s r h =
  let seq = next_seq s r in
  bottom_cast s r
  ^ enc G.Suspect.codec G.Suspect.No_hdr
  ^ enc G.Mnak.codec (G.Mnak.Data { seq })
  ^ enc G.Slander.codec h

let slanders_sent s =
  List.rev
    (List.filter_map
       (fun (d, b) ->
         let cs = Cstruct.of_string b in
         match (d, split G.Suspect.codec b) with
         | Event.Cast, (G.Suspect.No_hdr, off) -> (
             match Codec.decode G.Mnak.codec cs off with
             | Ok (G.Mnak.Data _, off) -> (
                 match Codec.decode G.Slander.codec cs off with
                 | Ok (G.Slander.Slander { ranks; reason; _ }, _) -> Some (ranks, reason)
                 | _ -> None)
             | _ -> None)
         | _ -> None)
       !(s.sent))

let slander_stack = [ G.Slander.layer; G.Mnak.layer; G.Suspect.layer; G.Bottom.layer ]

let slander_by_hand () =
  (* Suspicions raised here are cast and reported once. *)
  let s = single ~n:3 ~rank:0 slander_stack in
  run_until s (sec 6.);
  Alcotest.check ctl_t "reported" [ (sec 5., [ 1; 2 ], "silent for 5.0 s") ] (ctl s);
  Alcotest.(check (list (pair (list int) string)))
    "cast to the group"
    [ ([ 1; 2 ], "silent for 5.0 s") ]
    (slanders_sent s);
  Alcotest.(check int) "slanders sent" 1 (counter s "slander" "slanders_sent");
  stop s;
  (* Slanders received; nonsense counted; requests. *)
  let s = single ~n:4 ~rank:0 slander_stack in
  run_until s (sec 1.);
  feed s
    (slander_cast s 1
       (G.Slander.Slander { ranks = [ 2; 9 ]; reason = "because"; kind = G.Gevent.Silent }));
  Alcotest.check ctl_t "judged below: rank 2 is heard here" [] (ctl s);
  run_until s (sec 1.9);
  Alcotest.check ctl_t "not within the grace period" [] (ctl s);
  run_until s (sec 2.1);
  Alcotest.check ctl_t "adopted after it, the reason names who and why"
    [ (sec 2., [ 2 ], "suspected by 1 (because) for 1.0 s, though heard here") ]
    (ctl s);
  Alcotest.(check (list (pair (list int) string)))
    "adopted suspicions are cast again"
    [ ([ 2 ], "suspected by 1 (because) for 1.0 s, though heard here") ]
    (slanders_sent s);
  feed s
    (slander_cast s 3
       (G.Slander.Slander { ranks = [ 2 ]; reason = "again"; kind = G.Gevent.Silent }));
  Alcotest.(check int) "not reported twice" 1 (List.length (ctl s));
  Alcotest.(check int) "slanders received" 2 (counter s "slander" "slanders_received");
  feed s
    (bottom_send s 3
    ^ enc G.Suspect.codec G.Suspect.No_hdr
    ^ enc G.Mnak.codec G.Mnak.No_hdr
    ^ enc G.Slander.codec
        (G.Slander.Slander { ranks = [ 1 ]; reason = "p2p"; kind = G.Gevent.Silent }));
  Alcotest.(check int) "slander not cast is malformed" 1 (counter s "slander" "malformed");
  feed s
    (bottom_send s 3
    ^ enc G.Suspect.codec G.Suspect.No_hdr
    ^ enc G.Mnak.codec G.Mnak.No_hdr
    ^ enc G.Slander.codec G.Slander.No_hdr
    ^ "hello");
  Alcotest.(check (list (pair src_t string)))
    "messages pass through"
    [ (Event.Send_from 3, "hello") ]
    (List.rev !(s.got));
  s.sent := [];
  Stack.dn_ctl s.st (G.Gevent.Suspect_request { ranks = [ 3; 2; 0; 9 ]; reason = "operator" });
  Alcotest.check ctl_t "request reported once, new ranks only"
    [
      (sec 2., [ 2 ], "suspected by 1 (because) for 1.0 s, though heard here");
      (sec 2.1, [ 3 ], "operator");
    ]
    (ctl s);
  Alcotest.(check int) "self" 1 (counter s "slander" "self_suspicions");
  Alcotest.(check int) "bad rank" 1 (counter s "slander" "bad_rank");
  Alcotest.(check (list (pair (list int) string)))
    "and cast"
    [ ([ 3 ], "operator") ]
    (slanders_sent s);
  Alcotest.(check int) "the detector below adopted it too" 2 (counter s "suspect" "suspected");
  run_until s (sec 20.);
  Alcotest.check ctl_t "rank 1 later, by silence"
    [
      (sec 2., [ 2 ], "suspected by 1 (because) for 1.0 s, though heard here");
      (sec 2.1, [ 3 ], "operator");
      (sec 6., [ 1 ], "silent for 5.0 s");
    ]
    (ctl s);
  Alcotest.(check int) "gauge" 3 (counter s "slander" "suspected");
  stop s

(* Arbitrary input never raises, and every Suspect names valid other ranks, each once. *)
type input =
  | Bytes of int * string
  | Beat of int * int list
  | Slandr of int * int list
  | Request of int list
  | Wait of int

let fuzz =
  let open QCheck.Gen in
  let rank = oneof [ int_bound 5; nat ] in
  let input =
    frequency
      [
        (2, map2 (fun r s -> Bytes (r, s)) (int_bound 3) (string_size (int_bound 20)));
        (3, map2 (fun r l -> Beat (r, l)) (int_bound 3) (list_size (int_bound 5) rank));
        (3, map2 (fun r l -> Slandr (r, l)) (int_bound 3) (list_size (int_bound 5) rank));
        (1, map (fun l -> Request l) (list_size (int_bound 5) rank));
        (2, map (fun ms -> Wait ms) (int_bound 3000));
      ]
  in
  QCheck.Test.make ~count:300 ~name:"any input: no exception, each valid rank reported once"
    (QCheck.make (list_size (int_bound 60) input))
    (fun inputs ->
      let s = single ~n:4 ~rank:1 slander_stack in
      List.iter
        (function
          | Bytes (r, b) -> feed s (bottom_cast s r ^ b)
          | Beat (r, l) -> feed s (heartbeat s r l)
          | Slandr (r, ranks) ->
              if r <> 1 then
                feed s
                  (slander_cast s r
                     (G.Slander.Slander { ranks; reason = "x"; kind = G.Gevent.Silent }))
          | Request ranks -> Stack.dn_ctl s.st (G.Gevent.Suspect_request { ranks; reason = "r" })
          | Wait d -> run_until s (!(s.clock) + ms d))
        inputs;
      run_until s (!(s.clock) + sec 10.);
      let all = List.concat_map (fun (_, r, _) -> r) (ctl s) in
      Stack.dn_ctl s.st Event.Stop;
      List.sort compare all = [ 0; 2; 3 ])

(* {1 A group over an in-memory network with crashes and pauses} *)

type seen = { at : Time.t; who : int; ranks : int list; reason : string }

module Net = struct
  module Q = Map.Make (struct
    type t = Time.t * int

    let compare (a, i) (b, j) = if a <> b then compare a b else compare i j
  end)

  type event = Datagram of int * Iovec.t | Action of (unit -> unit)

  type member = {
    mutable crashed : bool;
    mutable paused : bool;
    mutable keep : bool; (* datagrams arriving during a pause wait in the socket *)
    held : Iovec.t Queue.t;
  }

  type t = {
    mutable now : Time.t;
    mutable queue : event Q.t;
    mutable id : int;
    rng : Rng.t;
    loss : float;
    drop : src:int -> dst:int -> string -> bool;
    pool : Pool.t;
    members : member array;
    mutable stacks : Stack.t array;
    mutable seen : seen list; (* newest first *)
    mutable delivered : int;
  }

  let push t time ev =
    t.id <- t.id + 1;
    t.queue <- Q.add (time, t.id) ev t.queue

  let at t time f = push t time (Action f)
  let runnable t i = (not t.members.(i).crashed) && not t.members.(i).paused

  let transmit t i dst msg =
    let v = Msg.to_iovec t.pool msg in
    Msg.release msg;
    let n = Array.length t.stacks in
    let dsts =
      match dst with
      | Event.Cast -> List.filter (fun j -> j <> i) (List.init n Fun.id)
      | Event.Send j -> [ j ]
    in
    List.iter
      (fun j ->
        if (not (t.drop ~src:i ~dst:j (Iovec.to_string v))) && not (Rng.chance t.rng t.loss) then
          push t (t.now + Time.of_us 100 + Rng.int t.rng (ms 5)) (Datagram (j, Iovec.retain v)))
      dsts;
    Iovec.release v

  let create ?(params = Params.empty) ?(loss = 0.) ?(drop = fun ~src:_ ~dst:_ _ -> false) ~seed
      ~pool ~n layers =
    let t =
      {
        now = 0;
        queue = Q.empty;
        id = 0;
        rng = Rng.create seed;
        loss;
        drop;
        pool;
        members =
          Array.init n (fun _ ->
              { crashed = false; paused = false; keep = true; held = Queue.create () });
        stacks = [||];
        seen = [];
        delivered = 0;
      }
    in
    let members = Array.init n (Printf.sprintf "m%d") in
    let make i =
      let view = View.v ~group:"fd" ~members ~rank:i () in
      let ctx =
        { Layer.view; rng = Rng.create ((seed * 1000) + i); params; pool; now = (fun () -> t.now) }
      in
      let deliver _ msg =
        t.delivered <- t.delivered + 1;
        Msg.release msg
      in
      let ctl = function
        | G.Gevent.Suspect { ranks; reason } ->
            t.seen <- { at = t.now; who = i; ranks; reason } :: t.seen
        | _ -> ()
      in
      match Stack.create ctx layers ~net:(transmit t i) ~app:{ Stack.deliver; ctl } with
      | Ok s -> s
      | Error e -> Alcotest.fail e
    in
    t.stacks <- Array.init n make;
    t

  let crash t i time =
    at t time (fun () ->
        let m = t.members.(i) in
        m.crashed <- true;
        Queue.iter Iovec.release m.held;
        Queue.clear m.held)

  (* Member [i] is not scheduled from [from] to [until]: no timer call, and
     datagrams either wait in its socket ([keep]) or are lost. On waking its
     timer runs first, then the datagrams that waited. *)
  let pause t i ~from ~until ~keep =
    at t from (fun () ->
        t.members.(i).paused <- true;
        t.members.(i).keep <- keep);
    at t until (fun () ->
        let m = t.members.(i) in
        m.paused <- false;
        let st = t.stacks.(i) in
        if Stack.next_alarm st <= t.now then Stack.timer st t.now;
        Queue.iter (fun v -> Stack.recv st (Msg.of_iovec v)) m.held;
        Queue.clear m.held)

  (* Every member that runs casts a small message every [period] until [until]. *)
  let workload t ~period ~until =
    Array.iteri
      (fun i _ ->
        let rec next time =
          if time < until then
            at t time (fun () ->
                if runnable t i then Stack.cast t.stacks.(i) (Msg.of_string t.pool "work");
                next (time + period))
        in
        next (period + ms i))
      t.stacks

  let next_alarm t =
    let a = ref max_int in
    Array.iteri (fun i s -> if runnable t i then a := min !a (Stack.next_alarm s)) t.stacks;
    !a

  let run t ~until =
    let rec loop steps =
      let q =
        match Q.min_binding_opt t.queue with Some ((time, _), _) -> time | None -> max_int
      in
      let a = next_alarm t in
      if min q a > until then t.now <- until
      else if steps > 5_000_000 then Alcotest.fail "too many steps"
      else begin
        if a <= q then begin
          t.now <- max t.now a;
          Array.iteri
            (fun i s -> if runnable t i && Stack.next_alarm s <= t.now then Stack.timer s t.now)
            t.stacks
        end
        else begin
          let ((time, _) as key), ev = Q.min_binding t.queue in
          t.queue <- Q.remove key t.queue;
          t.now <- max t.now time;
          match ev with
          | Action f -> f ()
          | Datagram (j, v) ->
              let m = t.members.(j) in
              if m.crashed then Iovec.release v
              else if m.paused then if m.keep then Queue.push v m.held else Iovec.release v
              else Stack.recv t.stacks.(j) (Msg.of_iovec v)
        end;
        loop (steps + 1)
      end
    in
    loop 0

  let stop t =
    Array.iter (fun s -> Stack.dn_ctl s Event.Stop) t.stacks;
    Array.iter
      (fun m ->
        Queue.iter Iovec.release m.held;
        Queue.clear m.held)
      t.members;
    Q.iter (fun _ ev -> match ev with Datagram (_, v) -> Iovec.release v | Action _ -> ()) t.queue;
    t.queue <- Q.empty

  let counter t i = counter_of t.stacks.(i)
end

(* What member [who] reported, oldest first; the ranks it suspected, sorted. *)
let reports seen who = List.rev (List.filter (fun s -> s.who = who) seen)

let suspected seen who =
  List.sort_uniq compare (List.concat_map (fun s -> s.ranks) (reports seen who))

let first_report seen who r =
  match List.find_opt (fun s -> List.mem r s.ranks) (reports seen who) with
  | Some s -> s
  | None -> Alcotest.failf "member %d never suspected %d" who r

let pp_seen ppf s =
  Fmt.pf ppf "%a: %d suspects [%a] (%s)" Time.pp s.at s.who
    Fmt.(list ~sep:comma int)
    s.ranks s.reason

let no_reports what seen =
  if seen <> [] then Alcotest.failf "%s: %a" what Fmt.(list ~sep:semi pp_seen) (List.rev seen)

let no_false_suspicion_under_loss () =
  let pool = Pool.create () in
  let run layers seed =
    let t = Net.create ~loss:0.3 ~seed ~pool ~n:5 layers in
    if List.length layers > 2 then Net.workload t ~period:(ms 100) ~until:(sec 60.);
    Net.run t ~until:(sec 60.);
    no_reports (Printf.sprintf "seed %d" seed) t.seen;
    for i = 0 to 4 do
      let received = Net.counter t i "suspect" "heartbeats_received" in
      let sent = Net.counter t i "suspect" "heartbeats_sent" in
      Alcotest.(check bool)
        (Printf.sprintf "about 70%% of 4 x %d heartbeats arrive (%d)" sent received)
        true
        (received > 4 * sent * 6 / 10 && received < 4 * sent * 8 / 10)
    done;
    if List.length layers > 2 then Alcotest.(check bool) "work delivered" true (t.delivered > 10_000);
    Net.stop t
  in
  List.iter (run detector) [ 1; 2; 3; 4 ];
  List.iter (run full) [ 5; 6 ];
  check_no_leaks pool

let pause_in_a_group () =
  let pool = Pool.create () in
  let run ?params layers keep =
    let t = Net.create ?params ~seed:3 ~pool ~n:5 layers in
    Net.pause t 2 ~from:(sec 5.) ~until:(sec 15.) ~keep;
    Net.run t ~until:(sec 25.);
    let seen = t.seen in
    let pauses = Net.counter t 2 "suspect" "pauses" in
    Net.stop t;
    (seen, pauses)
  in
  List.iter
    (fun (layers, keep) ->
      let seen, pauses = run layers keep in
      Alcotest.(check int) "pause noticed" 1 pauses;
      no_reports "the member that slept" (reports seen 2);
      List.iter
        (fun i ->
          Alcotest.(check (list int)) "the others suspect the sleeper" [ 2 ] (suspected seen i))
        [ 0; 1; 3; 4 ])
    [ (detector, true); (detector, false); (full, true); (full, false) ];
  let params = Params.(empty |> set G.Suspect.Param.pause (Time (sec 3600.))) in
  let seen, _ = run ~params detector true in
  Alcotest.(check (list int))
    "without the rule the sleeper suspects everyone" [ 0; 1; 3; 4 ] (suspected seen 2);
  check_no_leaks pool

(* Member 0 cannot hear member 4; the heartbeats of 0 that carry suspicions
   are lost, so only Slander can tell the others. *)
let slander_spreads () =
  let pool = Pool.create () in
  let drop ~src ~dst bytes =
    (src = 4 && dst = 0)
    || src = 0
       &&
       match split G.Suspect.codec bytes with
       | G.Suspect.Heartbeat { suspects = _ :: _ }, _ -> true
       | _ -> false
  in
  List.iter
    (fun seed ->
      let t = Net.create ~loss:0.2 ~drop ~seed ~pool ~n:5 full in
      Net.run t ~until:(sec 9.);
      let seen = t.seen in
      (match reports seen 0 with
      | [ { ranks = [ 4 ]; reason; at; _ } ] ->
          Alcotest.(check bool) "0 finds 4 silent" true (contains reason "silent for");
          Alcotest.(check bool) "after the timeout" true (at >= timeout && at <= timeout + interval);
          for i = 1 to 3 do
            match reports seen i with
            | [ s ] ->
                Alcotest.(check (list int)) "only 4" [ 4 ] s.ranks;
                (* The others still hear 4: they adopt 0's suspicion only
                   after the grace period, in case 0 is the faulty one. *)
                Alcotest.(check bool)
                  (Printf.sprintf "reason names 0 and why: %S" s.reason)
                  true
                  (contains s.reason "suspected by 0 (silent for");
                Alcotest.(check bool)
                  "after the grace period" true
                  (s.at >= at + sec 1. && s.at - at < sec 2.)
            | l -> Alcotest.failf "member %d: %a" i Fmt.(list ~sep:semi pp_seen) l
          done
      | l -> Alcotest.failf "member 0: %a" Fmt.(list ~sep:semi pp_seen) l);
      no_reports "the suspected member" (reports seen 4);
      Alcotest.(check bool)
        "4 heard it is suspected" true
        (Net.counter t 4 "suspect" "accusations_rejected" >= 1);
      Net.stop t)
    [ 1; 2; 3 ];
  check_no_leaks pool

(* Without Slander, the heartbeats spread the suspicion. *)
let heartbeats_spread () =
  let pool = Pool.create () in
  let drop ~src ~dst _ = src = 4 && dst = 0 in
  let t = Net.create ~drop ~seed:1 ~pool ~n:5 detector in
  Net.run t ~until:(sec 9.);
  let s0 = first_report t.seen 0 4 in
  for i = 1 to 3 do
    match reports t.seen i with
    | [ s ] ->
        Alcotest.(check (list int)) "only 4" [ 4 ] s.ranks;
        Alcotest.(check string)
          "from 0's heartbeat" "suspected by 0 (heartbeat) for 1.0 s, though heard here" s.reason;
        Alcotest.(check bool)
          "after the grace period, within an interval" true
          (s.at - s0.at >= sec 1. && s.at - s0.at <= sec 1. + interval + ms 6)
    | l -> Alcotest.failf "member %d: %a" i Fmt.(list ~sep:semi pp_seen) l
  done;
  no_reports "the suspected member" (reports t.seen 4);
  Net.stop t;
  check_no_leaks pool

let request_reaches_all () =
  let pool = Pool.create () in
  List.iter
    (fun seed ->
      let t = Net.create ~loss:0.2 ~seed ~pool ~n:5 full in
      Net.at t (sec 1.) (fun () ->
          Stack.dn_ctl t.stacks.(2)
            (G.Gevent.Suspect_request { ranks = [ 1; 7; 2 ]; reason = "operator" }));
      Net.run t ~until:(sec 4.);
      (match reports t.seen 2 with
      | [ s ] ->
          Alcotest.check ctl_t "at once where asked"
            [ (sec 1., [ 1 ], "operator") ]
            [ (s.at, s.ranks, s.reason) ]
      | l -> Alcotest.failf "member 2: %a" Fmt.(list ~sep:semi pp_seen) l);
      Alcotest.(check int) "nonsense: outside" 1 (Net.counter t 2 "slander" "bad_rank");
      Alcotest.(check int) "nonsense: self" 1 (Net.counter t 2 "slander" "self_suspicions");
      List.iter
        (fun i ->
          match reports t.seen i with
          | [ s ] ->
              Alcotest.(check (list int)) "rank 1" [ 1 ] s.ranks;
              (* Directly, or from a member that adopted it first and passed
                 it on as a request. *)
              let suffix = "asked at rank 2: operator" in
              let ls = String.length s.reason and lx = String.length suffix in
              Alcotest.(check bool)
                (Printf.sprintf "reason %S" s.reason)
                true
                (ls >= lx && String.sub s.reason (ls - lx) lx = suffix);
              Alcotest.(check bool) "within a second" true (s.at - sec 1. < sec 1.)
          | l -> Alcotest.failf "member %d: %a" i Fmt.(list ~sep:semi pp_seen) l)
        [ 0; 3; 4 ];
      no_reports "the suspected member" (reports t.seen 1);
      Alcotest.(check bool) "it heard" true (Net.counter t 1 "suspect" "accusations_rejected" >= 1);
      Net.stop t)
    [ 1; 2; 3 ];
  check_no_leaks pool

(* A request naming most of the view (a coordinator's "did not
   acknowledge view"), while the original is late to one of the accused:
   the members that adopted it pass it on as a request, in their slanders
   and not in their heartbeats, so that member does not take them for
   slanderers of most of the view, which they would be if it came as
   their own finding of silence. *)
let request_passed_on () =
  let pool = Pool.create () in
  List.iter
    (fun seed ->
      let now = ref 0 in
      (* Rank 0's datagrams to rank 3 are lost for 600 ms after the
         request: 3 hears of it from the others first. *)
      let drop ~src ~dst _ = src = 0 && dst = 3 && !now >= sec 1. && !now < sec 1. + ms 600 in
      let t = Net.create ~drop ~seed ~pool ~n:5 full in
      let rec clock () =
        now := t.now;
        if t.now < sec 6. then Net.at t (t.now + ms 1) clock
      in
      Net.at t 0 clock;
      Net.at t (sec 1.) (fun () ->
          Stack.dn_ctl t.stacks.(0)
            (G.Gevent.Suspect_request { ranks = [ 2; 3; 4 ]; reason = "did not acknowledge view" }));
      Net.run t ~until:(sec 6.);
      let blamed =
        List.filter (fun s -> contains s.reason "some of which this member hears") t.seen
      in
      no_reports "members blamed for passing a request on" blamed;
      Alcotest.(check int) "no accuser blamed at 3" 0 (Net.counter t 3 "suspect" "accusers_blamed");
      Net.stop t)
    [ 1; 2; 3 ];
  check_no_leaks pool

(* {1 Over the simulator: crashes and partitions} *)

type sim_group = { net : Sim.t; eps : Ep.t array; seen : seen list ref }

let sim_group ?(link = Sim.default_link) ~seed ~pool ~n layers =
  let net = Sim.create ~seed ~pool ~link () in
  let members = Array.init n (Printf.sprintf "p%d") in
  let seen = ref [] in
  let endpoint rank =
    let view = View.v ~group:"fd" ~members ~rank () in
    let ctl = function
      | G.Gevent.Suspect { ranks; reason } ->
          seen := { at = Sim.now net; who = rank; ranks; reason } :: !seen
      | _ -> ()
    in
    match
      Ep.create ~pool net ~view ~seed:(seed + rank) ~layers
        ~app:{ Stack.deliver = (fun _ m -> Msg.release m); ctl }
        ()
    with
    | Ok ep -> ep
    | Error e -> Alcotest.failf "%a" Consort_engine.Endpoint.pp_error e
  in
  { net; eps = Array.init n endpoint; seen }

let sim_stop g =
  Array.iter
    (fun ep -> if Ep.is_closed ep then Stack.dn_ctl (Ep.stack ep) Event.Stop else Ep.close ep)
    g.eps

let crash_detected () =
  let pool = Pool.create () in
  let crash_at = sec 4. in
  List.iter
    (fun (layers, seed) ->
      let link = { Sim.default_link with loss = 0.1; jitter = ms 2 } in
      let g = sim_group ~link ~seed ~pool ~n:5 layers in
      ignore (Sim.at g.net crash_at (fun () -> Sim.crash g.net "p3"));
      Sim.run ~until:(sec 30.) g.net;
      let seen = !(g.seen) in
      no_reports "the crashed member" (reports seen 3);
      List.iter
        (fun i ->
          Alcotest.(check (list int))
            (Printf.sprintf "seed %d: member %d suspects 3 only" seed i)
            [ 3 ] (suspected seen i);
          let s = first_report seen i 3 in
          let after = s.at - crash_at in
          Alcotest.(check bool)
            (Fmt.str "seed %d: member %d after %a" seed i Time.pp after)
            true
            (after > timeout - sec 1. && after <= timeout + interval))
        [ 0; 1; 2; 4 ];
      sim_stop g)
    [ (detector, 1); (detector, 2); (detector, 3); (full, 4); (full, 5) ];
  check_no_leaks pool

let partition_detected () =
  let pool = Pool.create () in
  let split_at = sec 3. in
  List.iter
    (fun (link, seed) ->
      let g = sim_group ~link ~seed ~pool ~n:5 full in
      ignore
        (Sim.at g.net split_at (fun () ->
             Sim.partition g.net [ [ "p0"; "p1" ]; [ "p2"; "p3"; "p4" ] ]));
      Sim.run ~until:(sec 20.) g.net;
      let seen = !(g.seen) in
      let other i = if i < 2 then [ 2; 3; 4 ] else [ 0; 1 ] in
      for i = 0 to 4 do
        Alcotest.(check (list int))
          (Printf.sprintf "member %d suspects the other side" i)
          (other i) (suspected seen i);
        List.iter
          (fun r ->
            let s = first_report seen i r in
            let after = s.at - split_at in
            Alcotest.(check bool)
              (Fmt.str "member %d suspects %d after %a" i r Time.pp after)
              true
              (after > timeout - sec 1. && after <= timeout + interval))
          (other i)
      done;
      sim_stop g)
    [ (Sim.default_link, 1); ({ Sim.default_link with loss = 0.1; jitter = ms 3 }, 2) ];
  check_no_leaks pool

(* A silent rank is probed directly for the last [suspect.verify] of the
   timeout, once per interval, and an answer saves it. *)
let suspect_probes () =
  let s = single ~n:3 ~rank:0 detector in
  let probes () =
    List.length
      (List.filter
         (fun (d, b) ->
           match (d, split G.Suspect.codec b) with
           | Event.Send 1, (G.Suspect.Probe { ack = false }, _) -> true
           | _ -> false)
         !(s.sent))
  in
  beats s ~from:0 ~until:(sec 3.9) [ 2 ];
  Alcotest.(check int) "no probe before the last second" 0 (probes ());
  beats s ~from:(sec 4.) ~until:(sec 4.6) [ 2 ];
  Alcotest.(check bool) "probed once per interval within it" true (probes () >= 2);
  feed s (bottom_send s 1 ^ enc G.Suspect.codec (G.Suspect.Probe { ack = true }));
  beats s ~from:(sec 4.75) ~until:(sec 6.) [ 2 ];
  Alcotest.check ctl_t "the answer saved it" [] (ctl s);
  Alcotest.(check int) "counted" (probes ()) (counter s "suspect" "probes");
  stop s

(* {1 Ringfd: the ring failure detector of Scale} *)

let ring = [ G.Ringfd.layer; G.Bottom.layer ]
let ring_beat s r = bottom_send s r ^ enc G.Ringfd.codec G.Ringfd.Heartbeat
let ring_ack s r = bottom_send s r ^ enc G.Ringfd.codec (G.Ringfd.Probe { ack = true })

(* The destinations of the Ringfd datagrams with header [h] sent so far. *)
let ring_sent s h =
  List.sort compare
    (List.filter_map
       (fun (d, b) ->
         match (d, split G.Ringfd.codec b) with
         | Event.Send r, (h', _) when h' = h -> Some r
         | _ -> None)
       !(s.sent))

(* Heartbeats from [ranks], every interval from [from] to [until]. *)
let ring_beats s ~from ~until ranks =
  let rec go t =
    if t <= until then begin
      run_until s t;
      List.iter (fun r -> feed s (ring_beat s r)) ranks;
      go (t + interval)
    end
  in
  go from

let verdicts s =
  List.rev
    (List.filter_map
       (function _, G.Gevent.Flush_verdict { accept; _ } -> Some accept | _ -> None)
       !(s.ctl))

let accuse s accuser ranks =
  Stack.dn_ctl s.st
    (G.Gevent.Accusation { accuser; ranks; reason = "heartbeat"; kind = G.Gevent.Silent })

let ring_neighbours () =
  let gone r = r = 5 in
  Alcotest.(check (list int))
    "successors skip the gone" [ 6; 7; 0 ]
    (G.Ringfd.successors ~n:8 ~gone ~k:3 4);
  Alcotest.(check (list int))
    "predecessors wrap" [ 0; 7; 6 ]
    (G.Ringfd.predecessors ~n:8 ~gone ~k:3 1);
  Alcotest.(check (list int))
    "fewer when the ring is small" [ 1 ]
    (G.Ringfd.successors ~n:2 ~gone:(fun _ -> false) ~k:3 0)

let ringfd_by_hand () =
  let s = single ~n:8 ~rank:3 ring in
  run_until s 0;
  Alcotest.(check (list int))
    "one heartbeat to each of 3 successors, none to the others" [ 4; 5; 6 ]
    (ring_sent s G.Ringfd.Heartbeat);
  (* Ranks 2 and 1 beat; 0, watched too, is silent. *)
  ring_beats s ~from:0 ~until:(sec 6.) [ 2; 1 ];
  Alcotest.check ctl_t "the silent watched rank, after the timeout"
    [ (sec 5., [ 0 ], "silent for 5.0 s or more") ]
    (ctl s);
  Alcotest.(check bool)
    "probed before suspected" true
    (List.mem 0 (ring_sent s (G.Ringfd.Probe { ack = false })));
  Alcotest.(check int) "3 watched again (7 replaces 0)" 3 (counter s "ringfd" "watched");
  (* 7 is watched from 5 s on: a full timeout from then. *)
  ring_beats s ~from:(sec 6.25) ~until:(sec 9.5) [ 2; 1 ];
  Alcotest.(check int) "7 not suspected before its timeout" 1 (List.length (ctl s));
  ring_beats s ~from:(sec 9.75) ~until:(sec 10.5) [ 2; 1 ];
  Alcotest.(check (list (list int)))
    "then 7" [ [ 0 ]; [ 7 ] ]
    (List.map (fun (_, r, _) -> r) (ctl s));
  let before = List.length !(s.sent) in
  run_until s (sec 10.75);
  Alcotest.(check int)
    "heartbeats stay point-to-point to 3 members" 3
    (List.length !(s.sent) - before);
  stop s

let ringfd_corroboration () =
  let s = single ~n:8 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 6.) [ 0; 1; 2 ];
  (* Rank 6 is watched by 7, 0 and 1, not by 3: one report is not enough. *)
  accuse s 7 [ 6 ];
  Alcotest.check ctl_t "one report of a rank this member does not watch: waits" [] (ctl s);
  Alcotest.(check int) "counted" 1 (counter s "ringfd" "accusations_waiting");
  accuse s 7 [ 6 ];
  Alcotest.check ctl_t "the same accuser twice is still one" [] (ctl s);
  accuse s 0 [ 6 ];
  Alcotest.(check (list (list int)))
    "a second accuser: adopted" [ [ 6 ] ]
    (List.map (fun (_, r, _) -> r) (ctl s));
  (* Rank 4 reports 2 and 1 silent: this member watches both and hears them
     all along: 4 is the one that does not hear. *)
  ring_beats s ~from:(sec 6.25) ~until:(sec 7.) [ 0; 1; 2 ];
  accuse s 4 [ 1; 2 ];
  Alcotest.(check (list (list int)))
    "a twice contradicted accuser is suspected, not the accused" [ [ 6 ]; [ 4 ] ]
    (List.map (fun (_, r, _) -> r) (ctl s));
  Alcotest.(check int) "blamed" 1 (counter s "ringfd" "accusers_blamed");
  accuse s 4 [ 5 ];
  Alcotest.(check int) "a suspected accuser is not heard" 2 (List.length (ctl s));
  stop s

let ringfd_flush () =
  let s = single ~n:8 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 6.) [ 0; 1; 2 ];
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 5 ] });
  Alcotest.(check (list bool)) "a rank not watched, not suspected: refused" [ false ] (verdicts s);
  Alcotest.(check (list int)) "and probed" [ 5 ] (ring_sent s (G.Ringfd.Probe { ack = false }));
  run_until s (sec 6.5);
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 5 ] });
  Alcotest.(check (list bool)) "still within the probe's time" [ false; false ] (verdicts s);
  ring_beats s ~from:(sec 6.75) ~until:(sec 7.5) [ 0; 1; 2 ];
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 5 ] });
  Alcotest.(check (list bool)) "silent to the probe: confirmed" [ false; false; true ] (verdicts s);
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 6 ] });
  feed s (ring_ack s 6);
  ring_beats s ~from:(sec 7.75) ~until:(sec 8.25) [ 0; 1; 2 ];
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 6 ] });
  Alcotest.(check (list bool))
    "a rank that answers is not confirmed (within suspect.grace of the coordinator's claim)"
    [ false; false; true; false; false ]
    (verdicts s);
  (* The coordinator ranks below 6 and has claimed its exclusion for suspect.grace (1 s): one of
     the two cannot reach the other, and the view cannot keep both (ringfd.mli, one-way faults). *)
  ring_beats s ~from:(sec 8.5) ~until:(sec 9.) [ 0; 1; 2 ];
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 6 ] });
  Alcotest.(check bool)
    "a rank above the coordinator, claimed for the grace period: confirmed" true
    (List.nth (verdicts s) 5);
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 1 ] });
  Alcotest.(check bool) "nor a watched rank heard here" false (List.nth (verdicts s) 6);
  Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord = 0; excluded = [ 3 ] });
  Alcotest.(check bool)
    "nor this member on the coordinator's word alone" false
    (List.nth (verdicts s) 7);
  stop s

(* A member deaf to the coordinator must not break the group. Its own
   exclusion, claimed for the grace period by a coordinator that ranks above
   this member (a coordinator only because it suspects it): refused; by
   one that ranks below: accepted. And a member whose flush this member
   refused (it excluded a rank heard here) and which then calls the members
   unresponsive is the one suspected, not the members it names. *)
let ringfd_deaf_coordinator () =
  let judge s coord excluded =
    Stack.dn_ctl s.st (G.Gevent.Judge_flush { coord; excluded });
    List.nth (verdicts s) (List.length (verdicts s) - 1)
  in
  let s = single ~n:8 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 6.) [ 0; 1; 2 ];
  Alcotest.(check bool) "rank 4 excludes this member: refused" false (judge s 4 [ 3 ]);
  ring_beats s ~from:(sec 6.25) ~until:(sec 8.) [ 0; 1; 2 ];
  Alcotest.(check bool)
    "rank 4, above this member, after the grace period: still refused" false (judge s 4 [ 3 ]);
  stop s;
  let s = single ~n:8 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 6.) [ 0; 1; 2 ];
  Alcotest.(check bool) "rank 2 excludes this member: not at once" false (judge s 2 [ 3 ]);
  ring_beats s ~from:(sec 6.25) ~until:(sec 8.) [ 0; 1; 2 ];
  Alcotest.(check bool)
    "rank 2, below this member, after the grace period: accepted" true (judge s 2 [ 3 ]);
  stop s;
  let s = single ~n:8 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 6.) [ 0; 1; 2 ];
  Alcotest.(check bool) "rank 0 excludes rank 1, heard here: refused" false (judge s 0 [ 1 ]);
  Stack.dn_ctl s.st
    (G.Gevent.Accusation
       { accuser = 0; ranks = [ 1; 2 ]; reason = "did not answer flush 0.1"; kind = Unresponsive });
  Alcotest.(check (list (list int)))
    "the refused coordinator is suspected, not the members it calls unresponsive" [ [ 0 ] ]
    (List.map (fun (_, r, _) -> r) (ctl s));
  Alcotest.(check int) "blamed" 1 (counter s "ringfd" "accusers_blamed");
  stop s

let ringfd_cut_off () =
  let s = single ~n:12 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 2.) [ 0; 1; 2 ];
  (* Cut off: nothing arrives any more. *)
  run_until s (sec 7.1);
  let probed = ring_sent s (G.Ringfd.Probe { ack = false }) in
  Alcotest.(check bool) "members beyond the ring probed" true (List.exists (fun r -> r > 3) probed);
  run_until s (sec 9.);
  Alcotest.(check int) "found cut off" 1 (counter s "ringfd" "isolated");
  Alcotest.(check int) "every other member suspected" 11 (counter s "ringfd" "suspected");
  stop s;
  (* Its three neighbours crash, the rest answer: not cut off. *)
  let s = single ~n:12 ~rank:3 ring in
  ring_beats s ~from:0 ~until:(sec 2.) [ 0; 1; 2 ];
  let rec go t =
    if t <= sec 9. then begin
      run_until s t;
      List.iter
        (fun r -> if r > 3 then feed s (ring_ack s r))
        (ring_sent s (G.Ringfd.Probe { ack = false }));
      go (t + ms 50)
    end
  in
  go (sec 2.05);
  Alcotest.(check int) "not cut off" 0 (counter s "ringfd" "isolated");
  Alcotest.(check (list int))
    "only the silent neighbours suspected" [ 0; 1; 2 ]
    (List.sort compare (List.concat_map (fun (_, r, _) -> r) (ctl s)));
  stop s

let () =
  Iovec.set_checked true;
  Alcotest.run "fd"
    [
      ("codecs", codec_tests);
      ( "suspect",
        [
          Alcotest.test_case "heartbeats, proof of life, suspicion once per rank" `Quick
            suspect_by_hand;
          Alcotest.test_case "judges suspicions from heartbeats, adopts requests" `Quick
            suspect_gossip_and_requests;
          Alcotest.test_case "a group of one" `Quick suspect_alone;
          Alcotest.test_case "a member that hears nobody is the one suspected" `Quick
            suspect_deaf_accuser;
          Alcotest.test_case "judging accusations" `Quick judge;
          Alcotest.test_case "a pause of this member is forgiven" `Quick pause_by_hand;
          Alcotest.test_case "a silent rank is probed before it is suspected" `Quick suspect_probes;
        ] );
      ( "ringfd",
        [
          Alcotest.test_case "ring neighbours" `Quick ring_neighbours;
          Alcotest.test_case "heartbeats to k successors, silence of a watched rank" `Quick
            ringfd_by_hand;
          Alcotest.test_case "silence corroborated by two; a deaf accuser blamed" `Quick
            ringfd_corroboration;
          Alcotest.test_case "flush exclusions: probed, confirmed only when silent" `Quick
            ringfd_flush;
          Alcotest.test_case "a cut-off member finds out; crashed neighbours are no cut" `Quick
            ringfd_cut_off;
          Alcotest.test_case "a member deaf to the coordinator breaks nothing" `Quick
            ringfd_deaf_coordinator;
        ] );
      ( "slander",
        [ Alcotest.test_case "casts, reports, counts nonsense" `Quick slander_by_hand; qtest fuzz ]
      );
      ( "group",
        [
          Alcotest.test_case "no false suspicion under 30% loss, 60 s, 6 seeds" `Quick
            no_false_suspicion_under_loss;
          Alcotest.test_case "a 10 s pause: the sleeper suspects nobody" `Quick pause_in_a_group;
          Alcotest.test_case "slander spreads one member's suspicion to all" `Quick slander_spreads;
          Alcotest.test_case "heartbeats spread suspicions without slander" `Quick heartbeats_spread;
          Alcotest.test_case "a request from the application reaches all" `Quick request_reaches_all;
          Alcotest.test_case "a request of most of the view, passed on, is no slander" `Quick
            request_passed_on;
        ] );
      ( "simulator",
        [
          Alcotest.test_case "a crashed member is suspected by all, in time" `Quick crash_detected;
          Alcotest.test_case "each side of a partition suspects the other" `Quick partition_detected;
        ] );
    ]
