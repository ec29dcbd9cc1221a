(* The in-memory pair and the impairment wrapper, frame by frame. *)

open Consort
open Consort_net
open Util

let ok = function Ok x -> x | Error e -> Alcotest.failf "%a" Protocol.pp_error e

type link = {
  vc : Clock.Virtual.clock;
  pool : Pool.t;
  tx : Device.t; (* impaired sender *)
  imp : Impair.t;
  got : (Time.t * string) list ref;
}

let link ?(seed = 1) config =
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = fresh_pool () in
  let a, b = Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool (Mac_addr.local 1) (Mac_addr.local 2) in
  let imp = Impair.wrap ~clock ~seed ~pool config a in
  let got = ref [] in
  Device.set_receive b (fun p ->
      got := (clock.now (), Packet.to_string p) :: !got;
      Packet.release p);
  { vc; pool; tx = Impair.device imp; imp; got }

let frames n = List.init n (fun i -> Printf.sprintf "frame %04d %s" i (String.make 50 'f'))

let send_all l fs =
  List.iter (fun f -> ok (Device.send l.tx (Packet.of_string l.pool f))) fs;
  Clock.Virtual.run_until_idle l.vc

let received l = List.rev_map snd !(l.got)

let done_ l =
  Clock.Virtual.run_until_idle l.vc;
  Alcotest.(check int) "no buffers in use" 0 (Pool.in_use l.pool);
  no_leaks l.pool

let pair_basics () =
  let l = link Impair.none in
  ok (Device.send l.tx (Packet.of_string l.pool "first"));
  Clock.Virtual.advance l.vc (Time.of_us 9);
  Alcotest.(check int) "not before the latency" 0 (List.length !(l.got));
  Clock.Virtual.advance l.vc (Time.of_us 1);
  Alcotest.(check (list string)) "after 10 us" [ "first" ] (received l);
  (match Device.send l.tx (Packet.of_string l.pool (String.make 1515 'x')) with
  | Error (`Too_big 1515) -> ()
  | _ -> Alcotest.fail "a frame over 1514 bytes was accepted");
  l.got := [];
  let fs = frames 100 in
  send_all l fs;
  Alcotest.(check (list string)) "in order" fs (received l);
  done_ l

let drops () =
  let l = link ~seed:3 { Impair.none with drop = 0.3 } in
  send_all l (frames 1000);
  let s = Impair.stats l.imp in
  let n = List.length (received l) in
  Alcotest.(check int) "delivered + dropped = sent" 1000 (n + s.dropped);
  Alcotest.(check bool)
    (Printf.sprintf "about 30%% dropped (%d)" s.dropped)
    true
    (s.dropped > 250 && s.dropped < 350);
  (* Deterministic: the same seed drops the same frames. *)
  let l' = link ~seed:3 { Impair.none with drop = 0.3 } in
  send_all l' (frames 1000);
  Alcotest.(check (list string)) "same seed, same frames" (received l) (received l');
  done_ l;
  done_ l'

let duplicates () =
  let l = link { Impair.none with duplicate = 1.0 } in
  let fs = frames 20 in
  send_all l fs;
  Alcotest.(check (list string)) "each twice" (List.concat_map (fun f -> [ f; f ]) fs) (received l);
  done_ l

let reordering_and_delay () =
  let l =
    link { Impair.none with reorder = 0.3; reorder_delay = Time.of_ms 1; delay = Time.of_ms 2 }
  in
  let fs = List.init 200 (fun i -> Printf.sprintf "%03d" i) in
  List.iteri
    (fun i f ->
      ok (Device.send l.tx (Packet.of_string l.pool f));
      if i mod 10 = 9 then Clock.Virtual.advance l.vc (Time.of_us 200))
    fs;
  Clock.Virtual.run_until_idle l.vc;
  let r = received l in
  Alcotest.(check (list string)) "nothing lost" fs (List.sort compare r);
  Alcotest.(check bool) "some out of order" true (r <> fs);
  Alcotest.(check bool) "reordered count" true ((Impair.stats l.imp).reordered > 30);
  let first_time = fst (List.nth (List.rev !(l.got)) 0) in
  Alcotest.(check bool) "delayed by at least 2 ms" true (first_time >= Time.of_ms 2);
  done_ l

let corruption () =
  let l = link { Impair.none with corrupt = 1.0 } in
  let fs = frames 50 in
  send_all l fs;
  let bits a b =
    let n = ref 0 in
    String.iteri
      (fun i c ->
        let x = Char.code c lxor Char.code b.[i] in
        for k = 0 to 7 do
          if x land (1 lsl k) <> 0 then incr n
        done)
      a;
    !n
  in
  List.iter2 (fun a b -> Alcotest.(check int) "one bit flipped" 1 (bits a b)) fs (received l);
  done_ l

let suite =
  [
    Alcotest.test_case "pair: latency, MTU, order" `Quick pair_basics;
    Alcotest.test_case "impair: seeded drops" `Quick drops;
    Alcotest.test_case "impair: duplication" `Quick duplicates;
    Alcotest.test_case "impair: reordering and delay" `Quick reordering_and_delay;
    Alcotest.test_case "impair: corruption flips one bit" `Quick corruption;
  ]
