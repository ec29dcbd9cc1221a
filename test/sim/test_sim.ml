open Consort
module S = Consort_engine.Sim

let ms = Time.of_ms
let us = Time.of_us

let ok = function
  | Ok x -> x
  | Error e -> Alcotest.failf "unexpected transport error: %a" Transport.pp_error e

let no_leaks pool = Alcotest.(check int) "no leaked buffers" 0 (Pool.leak_check pool)

let link ?(latency = ms 1) ?(jitter = 0) ?(loss = 0.) ?(duplicate = 0.) ?(reorder = 0.)
    ?(reorder_delay = 0) () =
  { S.latency; jitter; loss; duplicate; reorder; reorder_delay }

(* An endpoint that records what it receives: (arrival time, source, bytes). *)
type peer = { conn : S.connection; got : (Time.t * string * string) list ref; closed : int ref }

let peer sim addr =
  let got = ref [] and closed = ref 0 in
  let conn =
    ok
      (S.open_ sim addr (fun _ ->
           {
             S.recv =
               (fun ~src v ->
                 got := (S.now sim, src, Iovec.to_string v) :: !got;
                 Iovec.release v);
             closed = (fun () -> incr closed);
           }))
  in
  { conn; got; closed }

let received p = List.rev !(p.got)
let payloads p = List.map (fun (_, _, s) -> s) (received p)

let send pool c ~dst s =
  let m = Msg.of_string pool s in
  let r = S.send c ~dst m in
  Msg.release m;
  r

let cast pool c ~dsts s =
  let m = Msg.of_string pool s in
  let r = S.cast c ~dsts m in
  Msg.release m;
  r

(* Determinism *)

(* Eight endpoints under loss, duplication, reordering, a partition and a
   crash with restart; receivers answer some datagrams. [work] seeds the
   workload's own choices, [seed] the simulator's. *)
let workload ?trace ?(tag = 'm') ~seed ~work () =
  let pool = Pool.create () in
  let sim =
    S.create ~seed ~pool
      ~link:(link ~jitter:(ms 3) ~loss:0.1 ~duplicate:0.1 ~reorder:0.1 ~reorder_delay:(ms 10) ())
      ()
  in
  S.set_trace_channel sim trace;
  S.set_link sim ~src:"p0" ~dst:"p1" (link ~latency:(ms 7) ~loss:0.3 ());
  let rng = Rng.create work in
  let n = 8 in
  let name i = Printf.sprintf "p%d" i in
  let conns = Array.make n None in
  let start i =
    let c =
      ok
        (S.open_ sim (name i) (fun c ->
             {
               S.recv =
                 (fun ~src v ->
                   let s = Iovec.to_string v in
                   Iovec.release v;
                   if String.length s < 12 && Rng.chance rng 0.5 then
                     ignore (send pool c ~dst:src (s ^ "+")));
               closed = ignore;
             }))
    in
    conns.(i) <- Some c
  in
  let conn i = Option.get conns.(i) in
  for i = 0 to n - 1 do
    start i
  done;
  for k = 0 to 299 do
    let time = us (Rng.int rng 200_000) in
    let i = Rng.int rng n in
    let body = Printf.sprintf "%c%d-%d" tag k (Rng.int rng 1000) in
    ignore
      (S.at sim time (fun () ->
           if Rng.bool rng then ignore (send pool (conn i) ~dst:(name (Rng.int rng n)) body)
           else
             ignore
               (cast pool (conn i) ~dsts:(List.init 3 (fun j -> name ((i + j + 1) mod n))) body)))
  done;
  ignore
    (S.at sim (ms 50) (fun () ->
         S.partition sim [ [ "p0"; "p1"; "p2"; "p3" ]; [ "p4"; "p5"; "p6"; "p7" ] ]));
  ignore (S.at sim (ms 80) (fun () -> S.crash sim "p2"));
  ignore (S.at sim (ms 100) (fun () -> start 2));
  ignore (S.at sim (ms 120) (fun () -> S.heal sim));
  S.run sim;
  let st = S.stats sim in
  no_leaks pool;
  (S.trace_hash sim, st)

let read_file f =
  let ic = open_in_bin f in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  s

let test_same_seed () =
  let file () = Filename.temp_file "consort-sim" ".trace" in
  let f1 = file () and f2 = file () in
  let run f =
    let oc = open_out f in
    let r = workload ~trace:oc ~seed:7 ~work:11 () in
    close_out oc;
    r
  in
  let h1, s1 = run f1 and h2, s2 = run f2 in
  let t1 = read_file f1 and t2 = read_file f2 in
  Sys.remove f1;
  Sys.remove f2;
  Alcotest.(check string) "same hash" h1 h2;
  Alcotest.(check bool) "same trace text" true (String.equal t1 t2);
  Alcotest.(check bool) "a real workload" true (s1.S.sent > 500 && s1.S.delivered > 300);
  Alcotest.(check bool)
    "every fault happened" true
    (s1.S.dropped_loss > 0 && s1.S.dropped_partition > 0 && s1.S.duplicated > 0);
  Alcotest.(check bool) "same counters" true (s1 = s2);
  let lines = List.length (String.split_on_char '\n' t1) - 1 in
  Alcotest.(check bool) "trace has a line per event" true (lines > s1.S.sent + s1.S.delivered)

(* The hash covers the bytes: the same run with one byte changed in every
   payload (same sizes, same choices) hashes differently; and it does not
   depend on whether a trace channel is set. *)
let test_hash_covers_bytes () =
  let f = Filename.temp_file "consort-sim" ".trace" in
  let oc = open_out f in
  let traced, st = workload ~trace:oc ~seed:7 ~work:11 () in
  close_out oc;
  Sys.remove f;
  let plain, st' = workload ~seed:7 ~work:11 () in
  let other, st'' = workload ~tag:'n' ~seed:7 ~work:11 () in
  Alcotest.(check string) "a trace channel changes nothing" traced plain;
  Alcotest.(check bool) "the same events" true (st = st' && st = st'');
  Alcotest.(check bool) "other bytes, other hash" false (String.equal plain other)

let test_different_seeds () =
  let h1, _ = workload ~seed:7 ~work:11 () in
  let h2, _ = workload ~seed:8 ~work:11 () in
  let h3, _ = workload ~seed:7 ~work:12 () in
  Alcotest.(check bool) "simulator seed matters" true (h1 <> h2);
  Alcotest.(check bool) "workload matters" true (h1 <> h3)

(* Link faults *)

let test_loss () =
  let pool = Pool.create () in
  let sim = S.create ~seed:42 ~pool ~link:(link ~loss:0.3 ()) () in
  let a = peer sim "a" and b = peer sim "b" in
  let n = 10_000 in
  for i = 1 to n do
    ok (send pool a.conn ~dst:"b" (string_of_int i))
  done;
  S.run sim;
  let got = List.length !(b.got) in
  let lost = n - got in
  let st = S.stats sim in
  Alcotest.(check int) "sent" n st.S.sent;
  Alcotest.(check int) "losses counted" lost st.S.dropped_loss;
  Alcotest.(check int) "delivered counted" got st.S.delivered;
  if lost < 2700 || lost > 3300 then Alcotest.failf "lost %d of %d with loss 0.3" lost n;
  Alcotest.(check int) "query sent" n (S.query a.conn).S.sent;
  Alcotest.(check int) "query received" got (S.query b.conn).S.received;
  no_leaks pool

let test_duplicate () =
  let pool = Pool.create () in
  let sim = S.create ~seed:3 ~pool ~link:(link ~jitter:(ms 2) ~duplicate:0.5 ()) () in
  let a = peer sim "a" and b = peer sim "b" in
  let n = 1000 in
  for i = 1 to n do
    ok (send pool a.conn ~dst:"b" (string_of_int i))
  done;
  S.run sim;
  let count = Hashtbl.create n in
  List.iter
    (fun s -> Hashtbl.replace count s (1 + Option.value ~default:0 (Hashtbl.find_opt count s)))
    (payloads b);
  let twice = Hashtbl.fold (fun _ k acc -> if k = 2 then acc + 1 else acc) count 0 in
  let st = S.stats sim in
  Alcotest.(check int) "every datagram arrives" n (Hashtbl.length count);
  Alcotest.(check int) "duplicates counted" twice st.S.duplicated;
  Alcotest.(check int) "arrivals" (n + twice) (List.length !(b.got));
  if twice < 400 || twice > 600 then Alcotest.failf "%d duplicates of %d with 0.5" twice n;
  no_leaks pool

let inversions l =
  let a = Array.of_list l in
  let k = ref 0 in
  for i = 1 to Array.length a - 1 do
    if a.(i) < a.(i - 1) then incr k
  done;
  !k

let arrival_order ~reorder =
  let pool = Pool.create () in
  let sim = S.create ~seed:5 ~pool ~link:(link ~reorder ~reorder_delay:(ms 5) ()) () in
  let a = peer sim "a" and b = peer sim "b" in
  for i = 0 to 999 do
    ignore (S.at sim (us (100 * i)) (fun () -> ok (send pool a.conn ~dst:"b" (string_of_int i))))
  done;
  S.run sim;
  let order = List.map int_of_string (payloads b) in
  no_leaks pool;
  order

let test_reorder () =
  let fifo = arrival_order ~reorder:0. in
  Alcotest.(check (list int)) "without reordering, FIFO" (List.init 1000 Fun.id) fifo;
  let order = arrival_order ~reorder:0.2 in
  Alcotest.(check int) "all arrive" 1000 (List.length order);
  Alcotest.(check (list int)) "same set" (List.init 1000 Fun.id) (List.sort compare order);
  Alcotest.(check bool) "out of order" true (inversions order > 50)

let test_latency () =
  let pool = Pool.create () in
  let sim = S.create ~seed:9 ~pool ~link:(link ~latency:(ms 5) ~jitter:(ms 2) ()) () in
  let a = peer sim "a" and b = peer sim "b" in
  S.set_link sim ~src:"b" ~dst:"a" (link ~latency:(ms 40) ());
  for i = 0 to 499 do
    ignore
      (S.at sim
         (us (37 * i))
         (fun () ->
           ok (send pool a.conn ~dst:"b" (string_of_int (S.now sim)));
           ok (send pool b.conn ~dst:"a" (string_of_int (S.now sim)))))
  done;
  S.run sim;
  let delays p = List.map (fun (t, _, s) -> t - int_of_string s) (received p) in
  let ab = delays b and ba = delays a in
  Alcotest.(check int) "all arrive" 500 (List.length ab);
  List.iter
    (fun d -> if d < ms 5 || d > ms 7 then Alcotest.failf "delay %a outside [5ms, 7ms]" Time.pp d)
    ab;
  Alcotest.(check bool)
    "jitter varies" true
    (List.fold_left max 0 ab - List.fold_left min max_int ab > ms 1);
  Alcotest.(check bool) "override on b->a" true (List.for_all (fun d -> d = ms 40) ba);
  Alcotest.(check bool) "link reads back" true ((S.link sim ~src:"b" ~dst:"a").S.latency = ms 40);
  S.clear_link sim ~src:"b" ~dst:"a";
  Alcotest.(check bool) "cleared" true ((S.link sim ~src:"b" ~dst:"a").S.latency = ms 5);
  no_leaks pool

(* Partitions and crashes *)

let test_partition () =
  let pool = Pool.create () in
  let sim = S.create ~seed:1 ~pool ~link:(link ~latency:(ms 10) ()) () in
  let p = Array.init 6 (fun i -> peer sim (Printf.sprintf "p%d" i)) in
  let sent k = Printf.sprintf "%d" k in
  (* In flight when the partition starts at 5ms: dropped on arrival. *)
  ok (send pool p.(0).conn ~dst:"p2" "inflight");
  ok (send pool p.(0).conn ~dst:"p1" "inflight-same-side");
  ignore (S.at sim (ms 5) (fun () -> S.partition sim [ [ "p0"; "p1" ]; [ "p2"; "p3"; "p4" ] ]));
  ignore
    (S.at sim (ms 6) (fun () ->
         ok (send pool p.(0).conn ~dst:"p1" (sent 1));
         ok (send pool p.(0).conn ~dst:"p2" (sent 2));
         ok (send pool p.(3).conn ~dst:"p4" (sent 3));
         ok (send pool p.(4).conn ~dst:"p1" (sent 4));
         ok (send pool p.(5).conn ~dst:"p0" (sent 5));
         ok (send pool p.(5).conn ~dst:"p5" (sent 6))));
  ignore (S.at sim (ms 30) (fun () -> S.heal sim));
  ignore (S.at sim (ms 31) (fun () -> ok (send pool p.(0).conn ~dst:"p2" "healed")));
  S.run ~until:(ms 20) sim;
  Alcotest.(check bool) "partitioned" false (S.reachable sim ~src:"p0" ~dst:"p3");
  Alcotest.(check bool) "same side" true (S.reachable sim ~src:"p3" ~dst:"p2");
  Alcotest.(check bool) "unlisted is alone" false (S.reachable sim ~src:"p5" ~dst:"p0");
  Alcotest.(check bool) "self" true (S.reachable sim ~src:"p5" ~dst:"p5");
  Alcotest.(check int) "clock at until" (ms 20) (S.now sim);
  S.run sim;
  Alcotest.(check (list string)) "p1" [ "inflight-same-side"; "1" ] (payloads p.(1));
  Alcotest.(check (list string)) "p2" [ "healed" ] (payloads p.(2));
  Alcotest.(check (list string)) "p4" [ "3" ] (payloads p.(4));
  Alcotest.(check (list string)) "p0" [] (payloads p.(0));
  Alcotest.(check (list string)) "p5" [ "6" ] (payloads p.(5));
  let st = S.stats sim in
  Alcotest.(check int) "partition drops" 4 st.S.dropped_partition;
  Alcotest.(check bool) "healed" true (S.reachable sim ~src:"p0" ~dst:"p3");
  Alcotest.check_raises "listed twice" (Invalid_argument "Sim.partition: p1 listed twice")
    (fun () -> S.partition sim [ [ "p1" ]; [ "p1" ] ]);
  no_leaks pool

let test_crash () =
  let pool = Pool.create () in
  let sim = S.create ~seed:1 ~pool ~link:(link ~latency:(ms 10) ()) () in
  let a = peer sim "a" and b = peer sim "b" in
  ok (send pool a.conn ~dst:"b" "before");
  ignore (S.at sim (ms 5) (fun () -> S.crash sim "b"));
  S.run ~until:(ms 5) sim;
  Alcotest.(check int) "closed called" 1 !(b.closed);
  Alcotest.(check bool) "not open" false (S.is_open sim "b");
  (match send pool b.conn ~dst:"a" "zombie" with
  | Error `Closed -> ()
  | _ -> Alcotest.fail "send from a crashed endpoint must fail with Closed");
  (match S.control b.conn (S.Drop_filter None) with
  | Error `Closed -> ()
  | _ -> Alcotest.fail "control on a crashed endpoint must fail");
  ok (send pool a.conn ~dst:"b" "while-down");
  (* Restart at 6ms, before "before" (sent at 0) would arrive at 10ms. *)
  S.run ~until:(ms 6) sim;
  let b' = peer sim "b" in
  ok (send pool a.conn ~dst:"b" "after");
  ok (send pool b'.conn ~dst:"a" "back");
  S.run sim;
  Alcotest.(check (list string)) "old incarnation got nothing" [] (payloads b);
  Alcotest.(check (list string)) "new incarnation" [ "while-down"; "after" ] (payloads b');
  Alcotest.(check (list string)) "a hears the restarted b" [ "back" ] (payloads a);
  Alcotest.(check int) "crashed drops" 1 (S.stats sim).S.dropped_crashed;
  Alcotest.(check int) "closed once" 1 !(b.closed);
  (match
     S.open_ sim "b" (fun _ -> { S.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
   with
  | Error (`Address_in_use "b") -> ()
  | _ -> Alcotest.fail "second open must fail");
  (* Down and still down at arrival. *)
  S.crash sim "b";
  ok (send pool a.conn ~dst:"b" "to-dead");
  ok (send pool a.conn ~dst:"nobody" "to-nobody");
  S.run sim;
  let st = S.stats sim in
  Alcotest.(check int) "crashed drops" 2 st.S.dropped_crashed;
  Alcotest.(check int) "unbound drops" 1 st.S.dropped_unbound;
  (* Close calls closed and frees the address. *)
  S.close a.conn;
  S.close a.conn;
  Alcotest.(check int) "close calls closed once" 1 !(a.closed);
  Alcotest.(check bool) "address free" false (S.is_open sim "a");
  ignore (peer sim "a");
  no_leaks pool

(* Timers *)

let test_timers () =
  let sim = S.create () in
  let fired = ref [] in
  let mark k () = fired := (k, S.now sim) :: !fired in
  Alcotest.(check bool) "empty step" false (S.step sim);
  let _ = S.at sim (ms 5) (mark "a") in
  let _ = S.at sim (ms 3) (mark "b") in
  let c = S.at sim (ms 4) (mark "c") in
  let _ = S.at sim (ms 3) (mark "d") in
  let _ =
    S.at sim (ms 1) (fun () ->
        mark "e" ();
        ignore (S.at sim 0 (mark "past")))
  in
  let _ = S.at sim (ms 9) (mark "late") in
  Alcotest.(check int) "pending" 6 (S.pending sim);
  S.cancel c;
  S.cancel c;
  Alcotest.(check int) "pending after cancel" 5 (S.pending sim);
  S.run ~max_events:3 sim;
  Alcotest.(check int) "max_events" 3 (List.length !fired);
  S.run ~until:(ms 6) sim;
  Alcotest.(check int) "clock at until" (ms 6) (S.now sim);
  Alcotest.(check int) "late still pending" 1 (S.pending sim);
  S.run sim;
  Alcotest.(check (list (pair string int)))
    "order"
    [ ("e", ms 1); ("past", ms 1); ("b", ms 3); ("d", ms 3); ("a", ms 5); ("late", ms 9) ]
    (List.rev !fired);
  Alcotest.(check int) "nothing left" 0 (S.pending sim)

(* Random schedules and cancellations come out in (time, insertion) order. *)
let qtest ?(count = 300) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| 17 |]) t)

let prop_timer_order =
  qtest "timers fire in time then insertion order"
    QCheck.(list (pair (int_bound 50) bool))
    (fun plan ->
      let sim = S.create () in
      let fired = ref [] in
      let timers =
        List.mapi
          (fun i (time, _) -> (i, time, S.at sim time (fun () -> fired := i :: !fired)))
          plan
      in
      List.iter2 (fun (_, _, tm) (_, cancel) -> if cancel then S.cancel tm) timers plan;
      let expected =
        List.filter_map
          (fun ((i, time, _), (_, cancel)) -> if cancel then None else Some (time, i))
          (List.combine timers plan)
        |> List.sort compare |> List.map snd
      in
      S.run sim;
      List.rev !fired = expected)

(* Limits and controls *)

let test_mtu () =
  let pool = Pool.create () in
  let sim = S.create ~mtu:100 ~pool () in
  let a = peer sim "a" and b = peer sim "b" in
  (match send pool a.conn ~dst:"b" (String.make 101 'x') with
  | Error (`Too_big (101, 100)) -> ()
  | _ -> Alcotest.fail "101 bytes over an MTU of 100 must fail");
  (match cast pool a.conn ~dsts:[ "b"; "c" ] (String.make 200 'x') with
  | Error (`Too_big (200, 100)) -> ()
  | _ -> Alcotest.fail "cast over the MTU must fail");
  ok (send pool a.conn ~dst:"b" (String.make 100 'y'));
  S.run sim;
  Alcotest.(check (list string)) "only the one that fits" [ String.make 100 'y' ] (payloads b);
  Alcotest.(check int) "mtu drops" 3 (S.stats sim).S.dropped_mtu;
  Alcotest.(check int) "query mtu" 100 (S.query a.conn).S.mtu;
  Alcotest.(check int) "query dropped" 3 (S.query a.conn).S.dropped;
  no_leaks pool

let test_controls () =
  let pool = Pool.create () in
  let sim = S.create ~pool () in
  let a = peer sim "a" and b = peer sim "b" and c = peer sim "c" in
  ok
    (S.control b.conn
       (S.Drop_filter (Some (fun ~src cs -> src = "a" && Cstruct.get_char cs 0 = 'd'))));
  ok (cast pool a.conn ~dsts:[ "b"; "c" ] "drop me");
  ok (cast pool a.conn ~dsts:[ "b"; "c" ] "keep me");
  ok (cast pool c.conn ~dsts:[ "b" ] "dear b");
  ok (cast pool a.conn ~dsts:[] "nobody");
  S.run sim;
  Alcotest.(check (list string)) "b filtered" [ "keep me"; "dear b" ] (payloads b);
  Alcotest.(check (list string)) "c unfiltered" [ "drop me"; "keep me" ] (payloads c);
  Alcotest.(check (list string)) "sources" [ "a"; "c" ] (List.map (fun (_, s, _) -> s) (received b));
  Alcotest.(check int) "filter drops" 1 (S.stats sim).S.dropped_filter;
  Alcotest.(check int) "b dropped" 1 (S.query b.conn).S.dropped;
  ok (S.control b.conn (S.Drop_filter None));
  ok (send pool a.conn ~dst:"b" "drop me");
  S.run sim;
  Alcotest.(check int) "filter removed" 3 (List.length !(b.got));
  (match S.control a.conn (S.Join_multicast "g") with
  | Error (`Unsupported _) -> ()
  | _ -> Alcotest.fail "multicast must be unsupported");
  Alcotest.(check bool) "no multicast" false (S.query a.conn).S.multicast;
  Alcotest.(check (result string string)) "address" (Ok "p0") (S.address_of_string "p0");
  Alcotest.(check bool) "empty address" true (Result.is_error (S.address_of_string ""));
  no_leaks pool

(* Scale *)

let test_many_endpoints () =
  let pool = Pool.create () in
  let sim = S.create ~seed:99 ~pool ~link:(link ~jitter:(ms 2) ()) () in
  let n = 300 in
  let name i = Printf.sprintf "n%d" i in
  let counts = Array.make n 0 in
  let conns =
    Array.init n (fun i ->
        ok
          (S.open_ sim (name i) (fun _ ->
               {
                 S.recv =
                   (fun ~src:_ v ->
                     counts.(i) <- counts.(i) + 1;
                     Iovec.release v);
                 closed = ignore;
               })))
  in
  let rng = Rng.create 4 in
  for i = 0 to n - 1 do
    for k = 0 to 99 do
      let dst = name (Rng.int rng n) in
      ignore
        (S.at sim
           (us (Rng.int rng 100_000))
           (fun () -> ok (send pool conns.(i) ~dst (string_of_int k))))
    done;
    ignore
      (S.at sim (ms 50) (fun () ->
           ok (cast pool conns.(i) ~dsts:(List.filter (( <> ) (name i)) (List.init n name)) "all")))
  done;
  S.run sim;
  let total = Array.fold_left ( + ) 0 counts in
  let st = S.stats sim in
  Alcotest.(check int) "sent" ((n * 100) + (n * (n - 1))) st.S.sent;
  Alcotest.(check int) "all delivered" st.S.sent total;
  Alcotest.(check int) "delivered counted" total st.S.delivered;
  Alcotest.(check bool) "everyone heard the casts" true (Array.for_all (fun k -> k >= n - 1) counts);
  Array.iter S.close conns;
  no_leaks pool

(* Conservation: every datagram accepted is delivered or dropped once the
   queue is empty, under every fault. *)
let test_conservation () =
  let _, st = workload ~seed:3 ~work:5 () in
  Alcotest.(check int)
    "sent + duplicated = delivered + dropped" (st.S.sent + st.S.duplicated)
    (st.S.delivered + S.dropped st - st.S.dropped_mtu)

(* A stack bound with Endpoint *)

module E = Consort_engine.Endpoint.Make (S)

let fired : (int * Time.t) list ref = ref []

(* A layer that needs only raw datagrams: it tags each message with one
   byte and rings three times, every 10ms. *)
module Tick = struct
  type header = int

  type t = {
    out : int Layer.out;
    rank : int;
    mutable next : Time.t;
    mutable rings : int;
    mutable seen : int;
    mutable garbage : int;
  }

  let name = "tick"
  let codec = Codec.uint8
  let pp_header = Fmt.int
  let provides = []
  let requires = [ Contract.net ]
  let tag = 0x5a
  let period = ms 10

  let create (ctx : Layer.ctx) out =
    let next = ctx.now () + period in
    out.Layer.alarm next;
    { out; rank = ctx.view.View.rank; next; rings = 0; seen = 0; garbage = 0 }

  let up t src h msg =
    if h = tag then begin
      t.seen <- t.seen + 1;
      t.out.up src msg
    end
    else begin
      t.garbage <- t.garbage + 1;
      Msg.release msg
    end

  let up_ctl t e = t.out.up_ctl e
  let dn t dst msg = t.out.dn dst tag msg
  let dn_ctl t e = t.out.dn_ctl e

  let timer t now =
    if t.rings < 3 then
      if now >= t.next then begin
        fired := (t.rank, now) :: !fired;
        t.rings <- t.rings + 1;
        t.next <- now + period;
        if t.rings < 3 then t.out.alarm t.next
      end
      else t.out.alarm t.next

  let counters t = [ ("seen", t.seen); ("garbage", t.garbage) ]
end

module Top = Layer.Pass (struct
  let name = "top"
end)

let test_endpoint () =
  let pool = Pool.create () in
  let sim = S.create ~seed:2 ~pool () in
  fired := [];
  let members = [| "p0"; "p1"; "p2" |] in
  let delivered = ref [] in
  let layers = [ (module Top : Layer.S); (module Tick : Layer.S) ] in
  let eps =
    Array.init 3 (fun rank ->
        let app =
          {
            Stack.deliver =
              (fun _ msg ->
                delivered := (rank, S.now sim, Msg.to_string msg) :: !delivered;
                Msg.release msg);
            ctl = ignore;
          }
        in
        match
          E.create ~pool sim ~view:(View.v ~group:"g" ~members ~rank ()) ~seed:rank ~layers ~app ()
        with
        | Ok e -> e
        | Error e -> Alcotest.failf "endpoint: %a" Consort_engine.Endpoint.pp_error e)
  in
  E.cast eps.(0) (Msg.of_string pool "hello");
  ignore (S.at sim (ms 15) (fun () -> E.send eps.(1) 2 (Msg.of_string pool "direct")));
  S.run ~until:(ms 100) sim;
  let got = List.sort compare !delivered in
  Alcotest.(check (list (triple int int string)))
    "deliveries in virtual time"
    [ (1, ms 1, "hello"); (2, ms 1, "hello"); (2, ms 16, "direct") ]
    got;
  Alcotest.(check (list (pair int int)))
    "alarms in virtual time"
    (List.concat_map (fun r -> [ (r, ms 10); (r, ms 20); (r, ms 30) ]) [ 0; 1; 2 ])
    (List.sort compare !fired);
  let seen r = List.assoc "seen" (List.assoc "tick" (Stack.counters (E.stack eps.(r)))) in
  Alcotest.(check (list int)) "tick saw its tag" [ 0; 1; 2 ] (List.map seen [ 0; 1; 2 ]);
  Alcotest.(check int) "no send errors" 0 (E.send_errors eps.(0));
  Array.iter E.close eps;
  S.run sim;
  Alcotest.(check int) "queue drained" 0 (S.pending sim);
  no_leaks pool

let () =
  Iovec.set_checked true;
  Alcotest.run "sim"
    [
      ( "determinism",
        [
          Alcotest.test_case "same seed, same trace" `Quick test_same_seed;
          Alcotest.test_case "different seeds, different traces" `Quick test_different_seeds;
          Alcotest.test_case "the hash covers the bytes" `Quick test_hash_covers_bytes;
          Alcotest.test_case "conservation of datagrams" `Quick test_conservation;
        ] );
      ( "links",
        [
          Alcotest.test_case "loss" `Quick test_loss;
          Alcotest.test_case "duplication" `Quick test_duplicate;
          Alcotest.test_case "reordering" `Quick test_reorder;
          Alcotest.test_case "latency and jitter" `Quick test_latency;
        ] );
      ( "faults",
        [
          Alcotest.test_case "partition and heal" `Quick test_partition;
          Alcotest.test_case "crash and restart" `Quick test_crash;
        ] );
      ("time", [ Alcotest.test_case "timers and cancel" `Quick test_timers; prop_timer_order ]);
      ( "limits",
        [
          Alcotest.test_case "mtu" `Quick test_mtu;
          Alcotest.test_case "drop filter and controls" `Quick test_controls;
          Alcotest.test_case "300 endpoints" `Quick test_many_endpoints;
        ] );
      ("endpoint", [ Alcotest.test_case "stack over the simulator" `Quick test_endpoint ]);
    ]
