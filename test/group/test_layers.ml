open Codec_props
open Consort
module G = Consort_group
module H = Harness

(* {1 Codecs} *)

let nat = QCheck.Gen.(oneof [ small_nat; map (fun x -> x land max_int) int ])
let u32 = QCheck.Gen.map (fun x -> x land 0xffff_ffff) QCheck.Gen.int

let bottom_gen =
  QCheck.Gen.(
    map3
      (fun cast group (origin, dst) ->
        if cast then G.Bottom.Cast { group; origin } else G.Bottom.Send { group; origin; dst })
      bool u32 (pair nat small_nat))

let pt2pt_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Pt2pt.No_hdr;
        map2 (fun seq ack -> G.Pt2pt.Data { seq; ack }) nat nat;
        map2
          (fun ack sack -> G.Pt2pt.Ack { ack; sack })
          nat
          (list_size (int_bound 16) (pair nat nat));
      ])

let mnak_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Mnak.No_hdr;
        map (fun seq -> G.Mnak.Data { seq }) nat;
        map2 (fun origin seq -> G.Mnak.Retrans { origin; seq }) nat nat;
        map2
          (fun origin ranges -> G.Mnak.Nak { origin; ranges })
          nat
          (list_size (int_bound 20) (pair nat nat));
        map2
          (fun busy vector -> G.Mnak.Status { busy; vector = Array.of_list vector })
          bool
          (list_size (int_bound 20) nat);
      ])

let codec_tests =
  [
    qtest (round_trip "bottom" G.Bottom.codec G.Bottom.pp_header bottom_gen);
    qtest (round_trip "pt2pt" G.Pt2pt.codec G.Pt2pt.pp_header pt2pt_gen);
    qtest (round_trip "mnak" G.Mnak.codec G.Mnak.pp_header mnak_gen);
    qtest (random_bytes "bottom" G.Bottom.codec [ G.Bottom.magic ]);
    qtest (random_bytes "pt2pt" G.Pt2pt.codec [ 0; 1; 2; 3 ]);
    qtest (random_bytes "mnak" G.Mnak.codec [ 0; 1; 2; 3; 4; 5 ]);
  ]

(* {1 A single stack driven by hand} *)

open Single

let single = create
let enc = Codec.encode_string
let src_t = Alcotest.testable Event.pp_src ( = )
let dst_t = Alcotest.testable Event.pp_dst ( = )
let pt2pt_t = Alcotest.testable G.Pt2pt.pp_header ( = )
let mnak_t = Alcotest.testable G.Mnak.pp_header ( = )
let got s = List.rev !(s.got)

(* {1 Bottom} *)

let bottom_filters () =
  let s = single ~n:5 ~rank:0 [ G.Bottom.layer ] in
  let rng = Rng.create 3 in
  for _ = 1 to 1000 do
    feed s (String.init (Rng.int rng 30) (fun _ -> Char.chr (Rng.int rng 256)))
  done;
  let garbage = counter s "bottom" "garbage" in
  Alcotest.(check bool) "random bytes are garbage" true (garbage >= 995);
  Alcotest.(check int) "nothing delivered" 0 (List.length !(s.got));
  let other = enc G.Bottom.codec (G.Bottom.Cast { group = s.group lxor 1; origin = 1 }) in
  feed s (other ^ "x");
  Alcotest.(check int) "wrong group" 1 (counter s "bottom" "wrong_group");
  feed s (enc G.Bottom.codec (G.Bottom.Send { group = s.group; origin = 5; dst = 0 }) ^ "x");
  feed s (enc G.Bottom.codec (G.Bottom.Cast { group = s.group; origin = 1 lsl 40 }) ^ "x");
  Alcotest.(check int) "bad rank" 2 (counter s "bottom" "bad_rank");
  feed s (from_send s 0 ^ "x");
  Alcotest.(check int) "from self" 1 (counter s "bottom" "from_self");
  (* A send from a valid rank to another member (a capture replayed here):
     dropped. *)
  List.iter
    (fun dst ->
      feed s (enc G.Bottom.codec (G.Bottom.Send { group = s.group; origin = 4; dst }) ^ "x"))
    [ 1; 2; 3; 4; 5; 1 lsl 40 ];
  Alcotest.(check int) "a send to another rank" 6 (counter s "bottom" "misdirected");
  let good = from_cast s 3 in
  feed s (String.sub good 0 (String.length good - 1));
  feed s (String.make 1 (Char.chr (G.Bottom.magic + 1)) ^ String.sub good 1 (String.length good - 1));
  Alcotest.(check int)
    "truncated and wrong magic are garbage" (garbage + 2) (counter s "bottom" "garbage");
  Alcotest.(check int) "nothing delivered" 0 (List.length !(s.got));
  feed s (good ^ "hello");
  feed s (from_send s 4 ^ "world");
  Alcotest.(check (list (pair src_t string)))
    "valid datagrams delivered"
    [ (Event.Cast_from 3, "hello"); (Event.Send_from 4, "world") ]
    (got s);
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let bottom_down () =
  let s = single ~n:3 ~rank:1 [ G.Bottom.layer ] in
  Stack.cast s.st (Msg.of_string s.pool "c");
  Stack.send s.st 2 (Msg.of_string s.pool "s");
  Stack.send s.st 1 (Msg.of_string s.pool "self");
  Stack.send s.st 3 (Msg.of_string s.pool "outside");
  Alcotest.(check int) "bad destinations dropped" 2 (counter s "bottom" "bad_dst");
  let sent = List.rev !(s.sent) in
  Alcotest.(check (list (pair dst_t string)))
    "datagrams"
    [
      (Event.Cast, from_cast s 1 ^ "c");
      ( Event.Send 2,
        enc G.Bottom.codec (G.Bottom.Send { group = s.group; origin = 1; dst = 2 }) ^ "s" );
    ]
    sent;
  Alcotest.(check int) "magic first" G.Bottom.magic (Char.code (snd (List.hd sent)).[0]);
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* {1 Pt2pt, by hand} *)

let pt2pt_data s ~seq ~ack body =
  from_send s 1 ^ enc G.Pt2pt.codec (G.Pt2pt.Data { seq; ack }) ^ body

let pt2pt_ack ?(sack = []) s ack = from_send s 1 ^ enc G.Pt2pt.codec (G.Pt2pt.Ack { ack; sack })
let pt2pt_sent s = List.rev_map (fun (d, b) -> (d, split G.Pt2pt.codec b)) !(s.sent)

let pt2pt_orders () =
  let params = Params.(empty |> set G.Pt2pt.Param.window (Int 4)) in
  let s = single ~params [ G.Pt2pt.layer; G.Bottom.layer ] in
  feed s (pt2pt_data s ~seq:1 ~ack:0 "b");
  Alcotest.(check int) "early message held" 0 (List.length !(s.got));
  feed s (pt2pt_data s ~seq:0 ~ack:0 "a");
  feed s (pt2pt_data s ~seq:0 ~ack:0 "a");
  Alcotest.(check int) "duplicate counted" 1 (counter s "pt2pt" "duplicates");
  (match pt2pt_sent s with
  | [ (Event.Send 1, (_, h, "")) ] ->
      Alcotest.check pt2pt_t "ack on duplicate" (G.Pt2pt.Ack { ack = 2; sack = [] }) h
  | l -> Alcotest.failf "expected one ack, got %d datagrams" (List.length l));
  feed s (pt2pt_data s ~seq:6 ~ack:0 "g");
  Alcotest.(check int) "beyond the window" 1 (counter s "pt2pt" "beyond_window");
  feed s (pt2pt_data s ~seq:2 ~ack:0 "c");
  Alcotest.(check (list (pair src_t string)))
    "in order, once"
    [ (Event.Send_from 1, "a"); (Event.Send_from 1, "b"); (Event.Send_from 1, "c") ]
    (got s);
  Alcotest.(check int) "out of order" 1 (counter s "pt2pt" "out_of_order");
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let pt2pt_acks () =
  let s = single [ G.Pt2pt.layer; G.Bottom.layer ] in
  feed s (pt2pt_data s ~seq:0 ~ack:0 "a");
  Alcotest.(check int) "no ack at once" 0 (List.length !(s.sent));
  Alcotest.(check int) "ack delayed 5ms" (Time.of_ms 5) (Stack.next_alarm s.st);
  advance s (Time.of_ms 5);
  (match pt2pt_sent s with
  | [ (_, (_, h, _)) ] ->
      Alcotest.check pt2pt_t "delayed ack" (G.Pt2pt.Ack { ack = 1; sack = [] }) h
  | _ -> Alcotest.fail "expected one ack");
  feed s (pt2pt_data s ~seq:1 ~ack:0 "b");
  Stack.send s.st 1 (Msg.of_string s.pool "reply");
  advance s (Time.of_ms 10);
  (match pt2pt_sent s with
  | [ _; (Event.Send 1, (_, h, body)) ] ->
      Alcotest.check pt2pt_t "piggybacked" (G.Pt2pt.Data { seq = 0; ack = 2 }) h;
      Alcotest.(check string) "body" "reply" body
  | _ -> Alcotest.fail "expected the ack then one data message");
  Alcotest.(check int) "one ack sent" 1 (counter s "pt2pt" "acks_sent");
  Stack.send s.st 0 (Msg.of_string s.pool "me");
  Alcotest.(check (pair src_t string)) "send to self" (Event.Send_from 0, "me") (List.hd !(s.got));
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let pt2pt_backoff () =
  let params =
    Params.(
      empty
      |> set G.Pt2pt.Param.rto (Time (Time.of_ms 20))
      |> set G.Pt2pt.Param.max_rto (Time (Time.of_ms 80)))
  in
  let s = single ~params [ G.Pt2pt.layer; G.Bottom.layer ] in
  Stack.send s.st 1 (Msg.of_string s.pool "x");
  let times = ref [ 0 ] in
  for _ = 1 to 4 do
    let at = Stack.next_alarm s.st in
    advance s at;
    times := at :: !times
  done;
  Alcotest.(check (list int))
    "retransmission times"
    (List.map Time.of_ms [ 0; 20; 60; 140; 220 ])
    (List.rev !times);
  let sent = pt2pt_sent s in
  Alcotest.(check int) "five copies" 5 (List.length sent);
  List.iter
    (fun (d, (_, h, body)) ->
      Alcotest.check dst_t "to 1" (Event.Send 1) d;
      Alcotest.check pt2pt_t "same header" (G.Pt2pt.Data { seq = 0; ack = 0 }) h;
      Alcotest.(check string) "same body" "x" body)
    sent;
  Alcotest.(check int) "retransmissions" 4 (counter s "pt2pt" "retransmissions");
  feed s (pt2pt_ack s 1);
  Alcotest.(check int) "released on ack" 0 (counter s "pt2pt" "unacked");
  advance s (Stack.next_alarm s.st);
  Alcotest.(check int) "timer off" max_int (Stack.next_alarm s.st);
  Alcotest.(check int) "no more copies" 5 (List.length !(s.sent));
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let pt2pt_sack () =
  let s = single [ G.Pt2pt.layer; G.Bottom.layer ] in
  feed s (pt2pt_data s ~seq:2 ~ack:0 "c");
  feed s (pt2pt_data s ~seq:4 ~ack:0 "e");
  feed s (pt2pt_data s ~seq:5 ~ack:0 "f");
  advance s (Time.of_ms 5);
  (match pt2pt_sent s with
  | [ (_, (_, h, _)) ] ->
      Alcotest.check pt2pt_t "early ones listed"
        (G.Pt2pt.Ack { ack = 0; sack = [ (2, 2); (4, 5) ] })
        h
  | _ -> Alcotest.fail "expected one ack");
  s.sent := [];
  List.iter (fun b -> Stack.send s.st 1 (Msg.of_string s.pool b)) [ "0"; "1"; "2"; "3" ];
  feed s (pt2pt_ack ~sack:[ (2, 2) ] s 1);
  Alcotest.(check int) "acknowledged ones released" 2 (counter s "pt2pt" "unacked");
  s.sent := [];
  advance s (Stack.next_alarm s.st);
  Alcotest.(check (list string))
    "only the missing ones resent" [ "1"; "3" ]
    (List.filter_map
       (function _, (_, G.Pt2pt.Data _, body) -> Some body | _ -> None)
       (pt2pt_sent s));
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* {1 Mnak, by hand} *)

let mnak_by_hand () =
  let s = single ~n:3 ~rank:0 [ G.Mnak.layer; G.Bottom.layer ] in
  let mnak h = enc G.Mnak.codec h in
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 0 }) ^ "a");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Data { seq = 0 }) ^ "a");
  Alcotest.(check int) "duplicate" 1 (counter s "mnak" "duplicates");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = false; vector = [| 0; 3 |] }));
  feed s (from_send s 2 ^ mnak (G.Mnak.Data { seq = 0 }) ^ "z");
  Alcotest.(check int) "malformed" 2 (counter s "mnak" "malformed");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = true; vector = [| 0; 3; 0 |] }));
  Alcotest.(check int) "NAK after its delay" (Time.of_ms 2) (Stack.next_alarm s.st);
  s.sent := [];
  advance s (Time.of_ms 2);
  (match List.rev_map (fun (d, b) -> (d, split G.Mnak.codec b)) !(s.sent) with
  | [ (d, (_, h, _)) ] ->
      Alcotest.check dst_t "to the origin" (Event.Send 1) d;
      Alcotest.check mnak_t "missing range" (G.Mnak.Nak { origin = 1; ranges = [ (1, 2) ] }) h
  | l -> Alcotest.failf "expected one NAK, got %d datagrams" (List.length l));
  feed s (from_send s 1 ^ mnak (G.Mnak.Retrans { origin = 1; seq = 2 }) ^ "c");
  feed s (from_send s 1 ^ mnak (G.Mnak.Retrans { origin = 1; seq = 1 }) ^ "b");
  Stack.cast s.st (Msg.of_string s.pool "mine");
  Alcotest.(check (list (pair src_t string)))
    "in order, own cast delivered locally"
    [
      (Event.Cast_from 1, "a");
      (Event.Cast_from 1, "b");
      (Event.Cast_from 1, "c");
      (Event.Cast_from 0, "mine");
    ]
    (got s);
  s.sent := [];
  feed s (from_send s 2 ^ mnak (G.Mnak.Nak { origin = 1; ranges = [ (1, 1); (7, 9) ] }));
  feed s (from_send s 2 ^ mnak (G.Mnak.Nak { origin = 0; ranges = [ (0, 1 lsl 50) ] }));
  (match List.rev_map (fun (d, b) -> (d, split G.Mnak.codec b)) !(s.sent) with
  | [ (d1, (_, h1, b1)); (d2, (_, h2, b2)) ] ->
      Alcotest.check dst_t "to the asker" (Event.Send 2) d1;
      Alcotest.check mnak_t "another origin's cast" (G.Mnak.Retrans { origin = 1; seq = 1 }) h1;
      Alcotest.(check string) "its body" "b" b1;
      Alcotest.check dst_t "to the asker" (Event.Send 2) d2;
      Alcotest.check mnak_t "own cast" (G.Mnak.Retrans { origin = 0; seq = 0 }) h2;
      Alcotest.(check string) "its body" "mine" b2
  | l -> Alcotest.failf "expected two retransmissions, got %d datagrams" (List.length l));
  Alcotest.(check int) "buffered until stable" 4 (counter s "mnak" "buffered");
  feed s (from_cast s 1 ^ mnak (G.Mnak.Status { busy = false; vector = [| 1; 3; 0 |] }));
  feed s (from_cast s 2 ^ mnak (G.Mnak.Status { busy = false; vector = [| 1; 2; 0 |] }));
  Alcotest.(check int) "stable ones released" 3 (counter s "mnak" "stable_released");
  Alcotest.(check int) "one left" 1 (counter s "mnak" "buffered");
  Stack.dn_ctl s.st Event.Stop;
  Alcotest.(check int) "released on stop" 0 (counter s "mnak" "buffered");
  check_no_leaks s.pool

(* {1 End to end, over the faulty network} *)

(* Checks, at each member, exactly-once FIFO delivery of numbered casts and
   sends whose bodies say who sent them and their number. *)
module Check = struct
  type t = {
    n : int;
    casts : int array; (* made by each origin *)
    sends : int array array; (* [sends.(o).(d)]: from [o] to [d] *)
    cast_next : int array array; (* [cast_next.(i).(o)] at receiver [i] *)
    send_next : int array array;
    mutable errors : string list;
    mutable delivered : int;
  }

  let create n =
    {
      n;
      casts = Array.make n 0;
      sends = Array.make_matrix n n 0;
      cast_next = Array.make_matrix n n 0;
      send_next = Array.make_matrix n n 0;
      errors = [];
      delivered = 0;
    }

  let error t fmt =
    Fmt.kstr (fun s -> if List.length t.errors < 10 then t.errors <- s :: t.errors) fmt

  let deliver t i src msg =
    let body = Msg.to_string msg in
    Msg.release msg;
    t.delivered <- t.delivered + 1;
    let expect next o k =
      if k <> next.(i).(o) then
        error t "member %d: %S from %d, expected number %d" i body o next.(i).(o);
      next.(i).(o) <- k + 1
    in
    match (String.split_on_char ':' body, src) with
    | [ "c"; o; k; _ ], Event.Cast_from r when int_of_string o = r ->
        expect t.cast_next r (int_of_string k)
    | [ "s"; o; k; _ ], Event.Send_from r when int_of_string o = r ->
        expect t.send_next r (int_of_string k)
    | _ -> error t "member %d: unexpected %S (%a)" i body Event.pp_src src

  let body kind o k pad = Printf.sprintf "%s:%d:%d:%s" kind o k (String.make pad '.')

  (* Member [o] casts [k] at [time]; calls must come in time order per member. *)
  let cast t h pool rng o time =
    let k = t.casts.(o) in
    t.casts.(o) <- k + 1;
    let b = body "c" o k (Rng.int rng 64) in
    H.at h time (fun () -> Stack.cast (H.stack h o) (Msg.of_string pool b))

  let send t h pool rng o d time =
    let k = t.sends.(o).(d) in
    t.sends.(o).(d) <- k + 1;
    let b = body "s" o k (Rng.int rng 64) in
    H.at h time (fun () -> Stack.send (H.stack h o) d (Msg.of_string pool b))

  let complete t =
    Alcotest.(check (list string)) "delivery errors" [] (List.rev t.errors);
    for i = 0 to t.n - 1 do
      for o = 0 to t.n - 1 do
        if t.cast_next.(i).(o) <> t.casts.(o) then
          Alcotest.failf "member %d delivered %d of %d casts from %d" i
            t.cast_next.(i).(o)
            t.casts.(o) o;
        if t.send_next.(i).(o) <> t.sends.(o).(i) then
          Alcotest.failf "member %d delivered %d of %d sends from %d" i
            t.send_next.(i).(o)
            t.sends.(o).(i)
            o
      done
    done
end

(* Sorted random times in [0, span), grouped into bursts of 50 ms. *)
let times rng count span =
  let buckets = max 1 (span / Time.of_ms 50) in
  List.sort compare (List.init count (fun _ -> Rng.int rng buckets * Time.of_ms 50))

type workload = { casts : int; sends : int; span : Time.t }

let run_group ?params ?fused ?(net = H.faulty) ?drop ~seed ~pool ~layers ~n w check_after =
  let ck = Check.create n in
  let h =
    H.create ?params ?fused ~net ?drop ~seed ~pool ~n ~layers ~deliver:(Check.deliver ck) ()
  in
  let rng = Rng.create (seed + 99) in
  for o = 0 to n - 1 do
    List.iter (fun time -> Check.cast ck h pool rng o time) (times rng w.casts w.span);
    List.iter
      (fun time -> Check.send ck h pool rng o (Rng.int rng n) time)
      (times rng w.sends w.span)
  done;
  (match H.run ~until:(Time.of_sec 600.) ~max_steps:5_000_000 h with
  | `Quiescent -> ()
  | `Timeout -> Alcotest.failf "seed %d: no quiescence by %a" seed Time.pp (H.now h));
  Check.complete ck;
  check_after h;
  H.stop h

let seeds n = List.init n (fun i -> i + 1)

let pt2pt_idle h =
  for i = 0 to 4 do
    Alcotest.(check int) "pt2pt unacked" 0 (H.counter h i "pt2pt" "unacked");
    Alcotest.(check int) "pt2pt buffered" 0 (H.counter h i "pt2pt" "buffered")
  done

let mnak_idle h =
  for i = 0 to 4 do
    Alcotest.(check int) "mnak buffered after quiescence" 0 (H.counter h i "mnak" "buffered")
  done

let pt2pt_end_to_end () =
  let pool = Pool.create () in
  let retrans = ref 0 in
  List.iter
    (fun seed ->
      run_group ~seed ~pool ~layers:[ G.Pt2pt.layer; G.Bottom.layer ] ~n:5
        { casts = 0; sends = 500; span = Time.of_sec 1. }
        (fun h ->
          pt2pt_idle h;
          for i = 0 to 4 do
            retrans := !retrans + H.counter h i "pt2pt" "retransmissions"
          done))
    (seeds 20);
  Alcotest.(check bool) "losses were repaired" true (!retrans > 0);
  check_no_leaks pool

let mnak_end_to_end () =
  let pool = Pool.create () in
  let naks = ref 0 in
  List.iter
    (fun seed ->
      run_group ~seed ~pool ~layers:[ G.Mnak.layer; G.Bottom.layer ] ~n:5
        { casts = 500; sends = 0; span = Time.of_sec 1. }
        (fun h ->
          mnak_idle h;
          for i = 0 to 4 do
            naks := !naks + H.counter h i "mnak" "naks_sent"
          done))
    (seeds 20);
  Alcotest.(check bool) "losses were repaired" true (!naks > 0);
  check_no_leaks pool

let combined layers () =
  let pool = Pool.create () in
  List.iter
    (fun seed ->
      run_group ~seed ~pool ~layers ~n:5
        { casts = 200; sends = 200; span = Time.of_sec 1. }
        (fun h ->
          pt2pt_idle h;
          mnak_idle h))
    (seeds 5);
  check_no_leaks pool

(* Windows far smaller than the bursts: early messages beyond them are
   dropped and must come again. *)
let small_windows () =
  let pool = Pool.create () in
  let params =
    Params.(
      empty |> set G.Pt2pt.Param.window (Int 8)
      |> set G.Pt2pt.Param.ack_every (Int 4)
      |> set G.Mnak.Param.window (Int 16)
      |> set G.Mflow.Param.window (Int 1024))
  in
  let beyond = ref 0 in
  List.iter
    (fun seed ->
      run_group ~params ~seed ~pool
        ~layers:[ G.Pt2pt.layer; G.Mnak.layer; G.Bottom.layer ]
        ~n:5
        { casts = 100; sends = 100; span = Time.of_ms 200 }
        (fun h ->
          pt2pt_idle h;
          mnak_idle h;
          for i = 0 to 4 do
            beyond :=
              !beyond + H.counter h i "pt2pt" "beyond_window" + H.counter h i "mnak" "beyond_window"
          done))
    (seeds 3);
  Alcotest.(check bool) "windows were exceeded" true (!beyond > 0);
  check_no_leaks pool

let mnak_alone () =
  let s = single ~n:1 [ G.Mnak.layer; G.Bottom.layer ] in
  Stack.cast s.st (Msg.of_string s.pool "solo");
  Alcotest.(check (list (pair src_t string)))
    "delivered to itself"
    [ (Event.Cast_from 0, "solo") ]
    (got s);
  Alcotest.(check int) "stable at once" 0 (counter s "mnak" "buffered");
  Alcotest.(check int) "no timer" max_int (Stack.next_alarm s.st);
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

(* The last cast of a burst is lost to everyone: only statuses reveal it. *)
let mnak_tail_loss () =
  let pool = Pool.create () in
  let drop ~src ~dst:_ bytes =
    src = 0
    &&
    let cs = Cstruct.of_string bytes in
    match Codec.decode G.Bottom.codec cs 0 with
    | Ok (G.Bottom.Cast _, off) -> (
        match Codec.decode G.Mnak.codec cs off with
        | Ok (G.Mnak.Data { seq = 9 }, _) -> true
        | _ -> false)
    | _ -> false
  in
  run_group ~fused:false ~net:H.perfect ~drop ~seed:1 ~pool ~layers:[ G.Mnak.layer; G.Bottom.layer ]
    ~n:3
    { casts = 10; sends = 0; span = Time.of_ms 1 }
    (fun h ->
      for i = 1 to 2 do
        Alcotest.(check bool) "asked for the tail" true (H.counter h i "mnak" "naks_sent" > 0)
      done;
      Alcotest.(check int)
        "all buffers released" 0
        (List.fold_left ( + ) 0 (List.init 3 (fun i -> H.counter h i "mnak" "buffered"))));
  check_no_leaks pool

(* A long steady run: stability keeps buffers small all along. *)
let mnak_bounded () =
  let pool = Pool.create () in
  let n = 5 and per_member = 600 in
  let ck = Check.create n in
  let h =
    H.create ~seed:5 ~pool ~n ~layers:[ G.Mnak.layer; G.Bottom.layer ] ~deliver:(Check.deliver ck)
      ()
  in
  let rng = Rng.create 11 in
  for o = 0 to n - 1 do
    for k = 0 to per_member - 1 do
      Check.cast ck h pool rng o ((k * Time.of_ms 20) + Rng.int rng (Time.of_ms 10))
    done
  done;
  let peak = ref 0 and steps = ref 0 in
  let every () =
    incr steps;
    if !steps mod 200 = 0 then
      for i = 0 to n - 1 do
        peak := max !peak (H.counter h i "mnak" "buffered")
      done
  in
  Alcotest.(check bool) "quiescent" true (H.run ~until:(Time.of_sec 600.) ~every h = `Quiescent);
  Check.complete ck;
  Alcotest.(check bool)
    (Printf.sprintf "peak of %d buffered casts is a small part of %d" !peak (n * per_member))
    true
    (!peak > 0 && !peak < n * per_member / 10);
  mnak_idle h;
  H.stop h;
  check_no_leaks pool

(* Once everything is stable, members fall silent. *)
let mnak_quiet () =
  let pool = Pool.create () in
  run_group ~net:H.perfect ~seed:3 ~pool ~layers:[ G.Mnak.layer; G.Bottom.layer ] ~n:5
    { casts = 1; sends = 0; span = Time.of_ms 1 }
    (fun h ->
      let statuses =
        List.fold_left ( + ) 0 (List.init 5 (fun i -> H.counter h i "mnak" "status_sent"))
      in
      Alcotest.(check bool) (Printf.sprintf "few statuses (%d)" statuses) true (statuses <= 20);
      mnak_idle h);
  check_no_leaks pool

let () =
  Iovec.set_checked true;
  Alcotest.run "layers"
    [
      ("codecs", codec_tests);
      ( "bottom",
        [
          Alcotest.test_case "drops and counts garbage" `Quick bottom_filters;
          Alcotest.test_case "stamps outgoing datagrams" `Quick bottom_down;
        ] );
      ( "pt2pt",
        [
          Alcotest.test_case "orders, suppresses duplicates, bounds the window" `Quick pt2pt_orders;
          Alcotest.test_case "delays and piggybacks acknowledgements" `Quick pt2pt_acks;
          Alcotest.test_case "retransmits with exponential backoff" `Quick pt2pt_backoff;
          Alcotest.test_case "acknowledges selectively, resends only what is missing" `Quick
            pt2pt_sack;
          Alcotest.test_case "exactly-once FIFO over a faulty network, 20 seeds" `Quick
            pt2pt_end_to_end;
        ] );
      ( "mnak",
        [
          Alcotest.test_case "NAKs, retransmits, releases stable casts" `Quick mnak_by_hand;
          Alcotest.test_case "a group of one" `Quick mnak_alone;
          Alcotest.test_case "recovers a lost tail through statuses" `Quick mnak_tail_loss;
          Alcotest.test_case "falls silent when stable" `Quick mnak_quiet;
          Alcotest.test_case "exactly-once FIFO over a faulty network, 20 seeds" `Quick
            mnak_end_to_end;
          Alcotest.test_case "bounded buffers in a long run" `Quick mnak_bounded;
        ] );
      ( "stacks",
        [
          Alcotest.test_case "pt2pt:mnak:bottom, casts and sends" `Quick
            (combined [ G.Pt2pt.layer; G.Mnak.layer; G.Bottom.layer ]);
          Alcotest.test_case "mnak:pt2pt:bottom, casts and sends" `Quick
            (combined [ G.Mnak.layer; G.Pt2pt.layer; G.Bottom.layer ]);
          Alcotest.test_case "small windows" `Quick small_windows;
        ] );
    ]
