(* What IPv4 and IPv6 share (Ip_common), attacked directly: connection tables, fragment
   reassembly (teardrop, overlap, ping of death, floods, limits) and the neighbour cache of ARP and
   neighbour discovery (retries, queues, limits, refreshes). *)

open Consort
open Consort_net

let ms n = Time.of_ms n

module Int_key = Ip_common.Int_key

(* Connection tables *)

module Conns = Ip_common.Conns (struct
  include Int_key

  type addr = int

  let make a proto = (a lsl 8) lor proto
  let equal_addr = Int.equal
end)

type handler = string

let nothing = "nothing"

let conn_table ?(max = 3) () =
  let now = ref 0 in
  let t =
    Conns.create ~protocol:"protocol" ~in_use:"IP protocol" ~idle:(Time.of_sec 10.)
      ~now:(fun () -> !now)
      max
  in
  (t, now)

let accept t peer =
  Conns.accept t ~ip:() ~nothing ~peer ~proto:17 |> Option.map (fun (c : _ Conns.conn) -> c.handler)

let listeners () =
  let t, _ = conn_table () in
  Alcotest.(check (option string)) "nobody listens" None (accept t 1);
  let ok = function Ok () -> true | Error _ -> false in
  Alcotest.(check bool)
    "any" true
    (ok (Conns.passive_open t ~protocol:17 ~source:None (fun _ -> "any")));
  Alcotest.(check bool)
    "from 5" true
    (ok (Conns.passive_open t ~protocol:17 ~source:(Some 5) (fun _ -> "five")));
  (match Conns.passive_open t ~protocol:17 ~source:(Some 5) (fun _ -> "again") with
  | Error (`In_use m) -> Alcotest.(check string) "named" "IP protocol 17" m
  | _ -> Alcotest.fail "a second listener for the same source");
  (match Conns.passive_open t ~protocol:256 ~source:None (fun _ -> "x") with
  | Error (`Bad_address m) -> Alcotest.(check string) "named" "protocol 256" m
  | _ -> Alcotest.fail "protocol 256");
  Alcotest.(check (option string)) "the listener of its source first" (Some "five") (accept t 5);
  Alcotest.(check (option string)) "else the one for anyone" (Some "any") (accept t 6);
  Alcotest.(check int) "two made" 2 (Conns.length t)

let bounded () =
  let t, now = conn_table ~max:3 () in
  ignore
    (Conns.passive_open t ~protocol:17 ~source:None (fun (c : _ Conns.conn) -> string_of_int c.peer));
  List.iter (fun p -> ignore (accept t p)) [ 1; 2; 3 ];
  (* 1 used again: 2 is now the least recently used. *)
  ignore (Conns.find t (Conns.key 1 17));
  ignore (accept t 4);
  Alcotest.(check int) "bounded" 3 (Conns.length t);
  Alcotest.(check int) "one evicted" 1 (Conns.evicted t);
  Alcotest.(check bool) "the least recently used went" true (Conns.find t (Conns.key 2 17) = None);
  Alcotest.(check bool) "the one in use stayed" true (Conns.find t (Conns.key 1 17) <> None);
  (* An active open pins a passively made connection: a flood does not push it out. *)
  let c =
    match Conns.active_open t ~ip:() ~nothing ~route:(fun _ -> Ok ()) 3 17 (fun _ -> "new") with
    | Ok c -> c
    | Error _ -> Alcotest.fail "active open"
  in
  Alcotest.(check string) "the same connection, its handler kept" "3" c.handler;
  Alcotest.(check int) "two users" 2 c.users;
  List.iter (fun p -> ignore (accept t p)) [ 10; 11; 12; 13; 14 ];
  Alcotest.(check bool)
    "pinned: the same" true
    (match Conns.find t (Conns.key 3 17) with Some c' -> c' == c | None -> false);
  Alcotest.(check int) "pinned beside a full cache" 4 (Conns.length t);
  Conns.close t c;
  Alcotest.(check bool) "one user left: kept" true (Conns.find t (Conns.key 3 17) <> None);
  Conns.close t c;
  Alcotest.(check bool) "the last user closed: forgotten" true (Conns.find t (Conns.key 3 17) = None);
  (* Idle ones go. *)
  now := Time.of_sec 11.;
  Conns.expire t;
  Alcotest.(check int) "idle dropped" 0 (Conns.length t);
  (* No route: nothing made. *)
  (match
     Conns.active_open t ~ip:() ~nothing
       ~route:(fun _ -> Error (`Unreachable "no route"))
       9 17
       (fun _ -> "x")
   with
  | Error (`Unreachable _) -> ()
  | _ -> Alcotest.fail "no route");
  Alcotest.(check int) "nothing made" 0 (Conns.length t)

(* Reassembly *)

module Reasm = Ip_common.Reassembly (Int_key)

let header = 8
let limits = { Ip_common.timeout = ms 1000; max_bytes = 256; max_fragments = 4; max_datagrams = 4 }

let reasm ?(limits = limits) () =
  let pool = Util.fresh_pool () in
  let v = Clock.Virtual.create () in
  let r =
    Reasm.create ~clock:(Clock.Virtual.clock v) ~pool ~headroom:Packet.default_headroom
      ~max_payload:1024 limits
  in
  (r, pool, v)

(* A fragment: [header] bytes of header, then [len] bytes of [c]. *)
let frag pool len c = Packet.of_string pool (String.make header 'h' ^ String.make len c)

let add r pool k ~off ~more ?(meta = off) len c =
  Reasm.add r k ~off ~more ~header ~meta (frag pool len c)

let held what = function
  | Reasm.Held -> ()
  | Bad -> Alcotest.failf "%s: bad" what
  | Complete _ -> Alcotest.failf "%s: complete" what

let whole what = function
  | Reasm.Complete (p, meta) ->
      let s = Packet.to_string p in
      Packet.release p;
      (s, meta)
  | _ -> Alcotest.failf "%s: not complete" what

let reorder () =
  let r, pool, _ = reasm () in
  held "last" (add r pool 1 ~off:16 ~more:false 5 'c');
  held "middle" (add r pool 1 ~off:8 ~more:true 8 'b');
  held "a duplicate, ignored" (add r pool 1 ~off:8 ~more:true 8 'x');
  let s, meta = whole "first" (add r pool 1 ~off:0 ~more:true ~meta:42 8 'a') in
  Alcotest.(check string) "in order" "aaaaaaaabbbbbbbbccccc" s;
  Alcotest.(check int) "what the first fragment said" 42 meta;
  Alcotest.(check int) "counted" 1 (Reasm.reassembled r);
  Alcotest.(check int) "nothing dropped" 0 (Reasm.dropped r);
  Util.no_leaks pool

let malformed () =
  let r, pool, _ = reasm () in
  let bad what v = match v with Reasm.Bad -> () | _ -> Alcotest.failf "%s: not bad" what in
  bad "empty" (add r pool 1 ~off:0 ~more:true 0 'a');
  bad "not a multiple of 8 before the end" (add r pool 1 ~off:0 ~more:true 12 'a');
  (* Ping of death: a fragment ending past the largest datagram. *)
  bad "past the maximum" (add r pool 1 ~off:1016 ~more:false 16 'a');
  Alcotest.(check int) "nothing started" 0 (Reasm.dropped r);
  Util.no_leaks pool

let hostile () =
  let r, pool, _ = reasm () in
  (* Teardrop: the second fragment starts inside the first. *)
  held "first" (add r pool 1 ~off:0 ~more:true 16 'a');
  held "overlapping" (add r pool 1 ~off:8 ~more:false 16 'b');
  Alcotest.(check int) "the datagram given up" 1 (Reasm.dropped r);
  held "a new one, same key" (add r pool 1 ~off:8 ~more:false 4 'b');
  let s, _ = whole "completed afresh" (add r pool 1 ~off:0 ~more:true 8 'a') in
  Alcotest.(check string) "afresh" "aaaaaaaabbbb" s;
  (* Two ends that disagree. *)
  held "an end" (add r pool 2 ~off:16 ~more:false 8 'c');
  held "another end" (add r pool 2 ~off:24 ~more:false 8 'c');
  Alcotest.(check int) "given up" 2 (Reasm.dropped r);
  (* A fragment past a known end. *)
  held "an end" (add r pool 3 ~off:8 ~more:false 8 'c');
  held "past it" (add r pool 3 ~off:16 ~more:true 8 'c');
  Alcotest.(check int) "given up" 3 (Reasm.dropped r);
  (* Too many fragments. *)
  List.iter (fun off -> held "within" (add r pool 4 ~off ~more:true 8 'd')) [ 0; 8; 16; 24 ];
  held "the fifth" (add r pool 4 ~off:32 ~more:false 8 'd');
  Alcotest.(check int) "given up" 4 (Reasm.dropped r);
  Util.no_leaks pool

let floods () =
  let r, pool, v = reasm () in
  (* Six first fragments that never complete: the two started longest ago are given up. *)
  for k = 1 to 6 do
    held "first" (add r pool k ~off:0 ~more:true 8 'f')
  done;
  Alcotest.(check int) "two over the datagram limit" 2 (Reasm.dropped r);
  held "1 given up: starts again" (add r pool 1 ~off:8 ~more:false 8 'g');
  Alcotest.(check int) "which gives up 3" 3 (Reasm.dropped r);
  let s, _ = whole "6 was kept" (add r pool 6 ~off:8 ~more:false 8 'g') in
  Alcotest.(check string) "6" "ffffffffgggggggg" s;
  (* Bytes: 192 of 256 held by one datagram; another's 72 gives it up. *)
  Clock.Virtual.advance v (ms 2000);
  Alcotest.(check int) "the others timed out" 3 (Reasm.timeouts r);
  Util.no_leaks pool;
  List.iter (fun off -> held "big" (add r pool 10 ~off ~more:true 48 'b')) [ 0; 48; 96; 144 ];
  held "over the byte limit" (add r pool 11 ~off:0 ~more:true 72 's');
  Alcotest.(check int) "the oldest gave its room" 4 (Reasm.dropped r);
  let s, _ = whole "the new one completes" (add r pool 11 ~off:72 ~more:false 8 't') in
  Alcotest.(check int) "whole" 80 (String.length s);
  (* One datagram alone over the limit is given up itself. *)
  held "alone" (add r pool 12 ~off:0 ~more:true 200 'a');
  held "too much" (add r pool 12 ~off:200 ~more:true 64 'a');
  Alcotest.(check int) "given up" 5 (Reasm.dropped r);
  Util.no_leaks pool;
  (* A datagram completed before its timeout is not counted as timed out. *)
  held "first" (add r pool 20 ~off:0 ~more:true 8 'a');
  ignore (whole "done" (add r pool 20 ~off:8 ~more:false 8 'b'));
  Clock.Virtual.advance v (ms 2000);
  Alcotest.(check int) "no more timeouts" 3 (Reasm.timeouts r);
  Util.no_leaks pool

(* Neighbour cache *)

module Nb = Ip_common.Neighbours (Int_key)

let nb_config =
  {
    Ip_common.ttl = ms 10_000;
    refresh = ms 2000;
    retry_interval = ms 1000;
    retries = 3;
    queue_limit = 2;
    max_queued = 4;
    max_entries = 8;
    max_pending = 2;
  }

let neighbours ?(config = nb_config) () =
  let pool = Util.fresh_pool () in
  let v = Clock.Virtual.create () in
  let gave_up = ref [] in
  let nb =
    Nb.create ~clock:(Clock.Virtual.clock v) ~packet:snd
      ~gave_up:(fun k waiting -> gave_up := (k, List.map fst waiting) :: !gave_up)
      config
  in
  (nb, pool, v, gave_up)

let mac n = Mac_addr.local n
let pkt pool = Packet.of_string pool "x"

let retries () =
  let nb, pool, v, gave_up = neighbours () in
  let asked = ref 0 in
  let solicit _ = incr asked in
  Nb.wait nb 1 ("a", pkt pool) ~solicit;
  Nb.wait nb 1 ("b", pkt pool) ~solicit;
  Alcotest.(check int) "asked once, at once" 1 !asked;
  Clock.Virtual.advance v (ms 999);
  Alcotest.(check int) "not before the interval" 1 !asked;
  Clock.Virtual.advance v (ms 1);
  Alcotest.(check int) "again after it" 2 !asked;
  Clock.Virtual.advance v (ms 10_000);
  Alcotest.(check int) "[retries] times in all" 3 !asked;
  Alcotest.(check (list (pair int (list string))))
    "given up, told what waited"
    [ (1, [ "a"; "b" ]) ]
    !gave_up;
  Alcotest.(check int) "failed" 1 (Nb.resolution_failed nb);
  Alcotest.(check int) "dropped" 2 (Nb.queue_dropped nb);
  Alcotest.(check int) "nothing waits" 0 (Nb.queued nb);
  Util.no_leaks pool

let learning () =
  let nb, pool, v, gave_up = neighbours () in
  let sent = ref [] in
  let transmit m (s, p) =
    Packet.release p;
    sent := (m, s) :: !sent
  in
  let solicit _ = () in
  Nb.learn nb 7 (mac 7) ~create:false ~transmit;
  Alcotest.(check bool) "not asked about: not learnt" true (Nb.lookup nb 7 = None);
  Nb.wait nb 7 ("a", pkt pool) ~solicit;
  Nb.wait nb 7 ("b", pkt pool) ~solicit;
  Nb.wait nb 7 ("c", pkt pool) ~solicit;
  Alcotest.(check int) "[queue_limit] per address: the oldest dropped" 1 (Nb.queue_dropped nb);
  Nb.learn nb 7 (mac 7) ~create:false ~transmit;
  Alcotest.(check bool) "asked about: learnt" true (Nb.lookup nb 7 = Some (mac 7));
  Alcotest.(check (list string)) "what waited sent, in order" [ "b"; "c" ] (List.rev_map snd !sent);
  Alcotest.(check bool) "to it" true (List.for_all (fun (m, _) -> m = mac 7) !sent);
  Alcotest.(check int) "nothing waits" 0 (Nb.queued nb);
  Clock.Virtual.advance v (ms 5000);
  (* Sent to, close to its expiry: refreshed, once an interval. *)
  let refreshed = ref 0 in
  let refresh _ _ = incr refreshed in
  Alcotest.(check bool) "in use" true (Nb.resolve nb 7 ~refresh = Some (mac 7));
  Alcotest.(check int) "not yet" 0 !refreshed;
  Clock.Virtual.advance v (ms 3500);
  ignore (Nb.resolve nb 7 ~refresh);
  ignore (Nb.resolve nb 7 ~refresh);
  Alcotest.(check int) "refreshed once" 1 !refreshed;
  Clock.Virtual.advance v (ms 1000);
  ignore (Nb.resolve nb 7 ~refresh);
  Alcotest.(check int) "again an interval later" 2 !refreshed;
  Clock.Virtual.advance v (ms 1000);
  Alcotest.(check bool) "expired" true (Nb.resolve nb 7 ~refresh = None);
  (* Static entries are not learnt over; removing gives up a resolution. *)
  Nb.add_static nb 8 (mac 8);
  Nb.learn nb 8 (mac 9) ~create:true ~transmit;
  Alcotest.(check bool) "static kept" true (Nb.lookup nb 8 = Some (mac 8));
  Nb.wait nb 9 ("d", pkt pool) ~solicit;
  Nb.remove nb 9;
  Alcotest.(check (list (pair int (list string)))) "removed: given up" [ (9, [ "d" ]) ] !gave_up;
  Alcotest.(check bool) "not known" false (Nb.known nb 9);
  Util.no_leaks pool

let limits () =
  let config = { nb_config with queue_limit = 3; max_queued = 3; max_pending = 2 } in
  let nb, pool, _, gave_up = neighbours ~config () in
  let solicit _ = () in
  let wait k s = Nb.wait nb k (s, pkt pool) ~solicit in
  let check_gave_up what l =
    Alcotest.(check (list (pair int (list string)))) what l (List.rev !gave_up)
  in
  (* [max_pending]: a third resolution gives up the oldest. *)
  wait 1 "a";
  wait 2 "b";
  wait 3 "c";
  check_gave_up "the oldest resolution given up" [ (1, [ "a" ]) ];
  Alcotest.(check (list bool))
    "2 and 3 under way" [ false; true; true ]
    (List.map (Nb.known nb) [ 1; 2; 3 ]);
  (* [max_queued]: when full, the resolution started longest ago is given up. *)
  wait 3 "c2";
  wait 3 "c3";
  check_gave_up "2 gave its room" [ (1, [ "a" ]); (2, [ "b" ]) ];
  Alcotest.(check int) "three wait" 3 (Nb.queued nb);
  (* [queue_limit]: an address's oldest packet goes. *)
  wait 3 "c4";
  Alcotest.(check int) "still three" 3 (Nb.queued nb);
  Alcotest.(check int) "dropped: a, b, c" 3 (Nb.queue_dropped nb);
  Nb.remove nb 3;
  check_gave_up "removed" [ (1, [ "a" ]); (2, [ "b" ]); (3, [ "c2"; "c3"; "c4" ]) ];
  Util.no_leaks pool;
  (* Full, the oldest resolution being the one waited on: its own oldest packet goes. *)
  let nb, pool, _, gave_up = neighbours ~config () in
  let wait k s = Nb.wait nb k (s, pkt pool) ~solicit in
  wait 3 "x";
  wait 4 "y";
  wait 4 "z";
  wait 3 "w";
  Alcotest.(check (list (pair int (list string)))) "nobody given up" [] !gave_up;
  Alcotest.(check int) "x dropped" 1 (Nb.queue_dropped nb);
  Nb.remove nb 3;
  Nb.remove nb 4;
  Alcotest.(check (list (pair int (list string))))
    "what was left"
    [ (4, [ "y"; "z" ]); (3, [ "w" ]) ]
    !gave_up;
  Util.no_leaks pool

(* Counters: one record for both versions, each counter in its own place of the info and of
   both printers (every count different, so that two swapped show). *)
let counters () =
  let c = Ip_common.counters () in
  c.sent <- 1;
  c.received <- 2;
  c.bad <- 3;
  c.not_for_us <- 4;
  c.no_route <- 5;
  c.unknown_protocol <- 6;
  c.fragments_sent <- 7;
  c.fragments_received <- 8;
  c.icmp_errors_sent <- 9;
  let info v = Ip_common.info c ~mtu:1500 ~reassembly:(10, 11, 12) ~connections:(13, 14) v in
  let v4 : Ipv4.v4 =
    {
      address = Result.get_ok (Ipv4_addr.Prefix.of_string "10.0.0.1/24");
      gateway = Some (Ipv4_addr.of_string_exn "10.0.0.254");
      bad_source = 15;
    }
  in
  Alcotest.(check string)
    "IPv4"
    "10.0.0.1/24 via 10.0.0.254 mtu 1500: sent 1 received 2; dropped: 3 bad (15 bad source), 4 not \
     for us, 5 no route, 6 unknown protocol; fragments 7 out 8 in, 10 reassembled, 11 given up, 12 \
     timed out; 9 ICMP errors sent; 13 connections (14 evicted)"
    (Fmt.str "%a" Ipv4.pp_info (info v4));
  let v6 : Ipv6.v6 =
    {
      addresses = [ Ipv6_addr.link_local_of_mac (Mac_addr.of_int 0x02_0000_000001) ];
      neighbours = [];
      solicitations_sent = 16;
      solicitations_received = 17;
      advertisements_sent = 18;
      advertisements_received = 19;
      resolution_failed = 20;
      queue_dropped = 21;
      echo_replies_sent = 22;
      icmp_errors_received = 23;
    }
  in
  Alcotest.(check string)
    "IPv6"
    "fe80::ff:fe00:1 mtu 1500: sent 1 received 2; dropped: 3 bad, 4 not for us, 5 no route, 6 \
     unknown protocol; 0 neighbours, NS 16 out 17 in, NA 18 out 19 in, 20 failed, 21 dropped from \
     queues; 22 echo replies, ICMPv6 errors 9 out 23 in; fragments 7 out 8 in, 10 reassembled, 11 \
     given up, 12 timed out; 13 connections (14 evicted)"
    (Fmt.str "%a" Ipv6.pp_info (info v6))

let suite =
  [
    Alcotest.test_case "connections: listeners by source, then for anyone" `Quick listeners;
    Alcotest.test_case "connections: bounded, pinned by an active open, closed by the last user"
      `Quick bounded;
    Alcotest.test_case "reassembly: out of order, duplicates, what the first fragment says" `Quick
      reorder;
    Alcotest.test_case "reassembly: malformed fragments and the ping of death" `Quick malformed;
    Alcotest.test_case "reassembly: teardrop, disagreeing ends, too many fragments" `Quick hostile;
    Alcotest.test_case "reassembly: floods of datagrams and bytes, timeouts" `Quick floods;
    Alcotest.test_case "neighbours: retries, then given up" `Quick retries;
    Alcotest.test_case "neighbours: learning, queues, refreshes, static entries" `Quick learning;
    Alcotest.test_case "neighbours: resolutions and waiting packets bounded" `Quick limits;
    Alcotest.test_case "counters: one record, each count in its place for both versions" `Quick
      counters;
  ]
