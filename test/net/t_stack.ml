(* Two stacks over the in-memory pair, driven by the virtual clock. *)

open Consort
open Consort_net
open Util
module S = Ipstack

let ip_a = Ipv4_addr.v 10 0 0 1
let ip_b = Ipv4_addr.v 10 0 0 2
let mac_a = Mac_addr.local 1
let mac_b = Mac_addr.local 2
let prefix a = Ipv4_addr.Prefix.{ addr = a; len = 24 }

type world = {
  vc : Clock.Virtual.clock;
  clock : Clock.t;
  pool : Pool.t;
  a : S.t;
  b : S.t;
  dev_a : Device.t; (* the device under A's stack (after wrappers) *)
  dev_b : Device.t;
  impair_a : Impair.t;
  impair_b : Impair.t;
}

let world ?(seed = 1) ?(impair = Impair.none) ?arp ?reassembly ?pcap () =
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = fresh_pool () in
  let da, db = Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool mac_a mac_b in
  let ia = Impair.wrap ~clock ~seed ~pool impair da in
  let ib = Impair.wrap ~clock ~seed:(seed + 1000) ~pool impair db in
  let dev_a = Impair.device ia and dev_b = Impair.device ib in
  let dev_a = match pcap with Some w -> Pcap.wrap w dev_a | None -> dev_a in
  let a = S.create ?arp ?reassembly ~clock ~pool ~address:(prefix ip_a) dev_a in
  let b = S.create ?arp ?reassembly ~clock ~pool ~address:(prefix ip_b) dev_b in
  { vc; clock; pool; a; b; dev_a; dev_b; impair_a = ia; impair_b = ib }

let run w = Clock.Virtual.run_until_idle w.vc
let advance w d = Clock.Virtual.advance w.vc d

let finish w =
  run w;
  Alcotest.(check int) "no buffers in use" 0 (Pool.in_use w.pool);
  no_leaks w.pool

let ok = function Ok x -> x | Error e -> Alcotest.failf "%a" Protocol.pp_error e
let packet w s = Packet.of_string w.pool s

let udp_collect () =
  let got = ref [] in
  let handler _ =
    {
      S.Udp.receive =
        (fun _ p ->
          got := Packet.to_string p :: !got;
          Packet.release p);
      status = (fun _ _ -> ());
    }
  in
  (got, handler)

(* An echo server: each datagram is sent back to its sender, in place. *)
let udp_echo (s : S.t) port =
  ok
    (S.Udp.passive_open s.udp (Udp.Port port) (fun _ ->
         { S.Udp.receive = (fun c p -> ignore (S.Udp.send c p)); status = (fun _ _ -> ()) }))

let arp_resolution () =
  let w = world () in
  Alcotest.(check (option string))
    "not yet" None
    (Option.map Mac_addr.to_string (S.Arp.lookup w.a.arp ip_b));
  let got, h = udp_collect () in
  udp_echo w.b 7;
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  ok (S.Udp.send c (packet w "one"));
  ok (S.Udp.send c (packet w "two"));
  run w;
  Alcotest.(check (list string))
    "both queued behind ARP, delivered in order" [ "one"; "two" ] (List.rev !got);
  Alcotest.(check (option string))
    "A resolved B"
    (Some (Mac_addr.to_string mac_b))
    (Option.map Mac_addr.to_string (S.Arp.lookup w.a.arp ip_b));
  Alcotest.(check (option string))
    "B learnt A from the request"
    (Some (Mac_addr.to_string mac_a))
    (Option.map Mac_addr.to_string (S.Arp.lookup w.b.arp ip_a));
  let ia = S.Arp.query w.a.arp and ib = S.Arp.query w.b.arp in
  Alcotest.(check int) "an announcement and one request" 2 ia.requests_sent;
  Alcotest.(check int) "one reply" 1 ib.replies_sent;
  Alcotest.(check int) "B only announced itself" 1 ib.requests_sent;
  S.Udp.close c;
  finish w

let arp_expiry () =
  let arp = { Arp.default_config with ttl = Time.of_sec 5. } in
  let w = world ~arp () in
  udp_echo w.b 7;
  let got, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  ok (S.Udp.send c (packet w "x"));
  run w;
  advance w (Time.of_sec 4.);
  Alcotest.(check bool) "still cached at 4 s" true (S.Arp.lookup w.a.arp ip_b <> None);
  advance w (Time.of_sec 2.);
  Alcotest.(check bool) "expired at 6 s" true (S.Arp.lookup w.a.arp ip_b = None);
  ok (S.Udp.send c (packet w "y"));
  run w;
  Alcotest.(check (list string)) "delivered after resolving again" [ "x"; "y" ] (List.rev !got);
  Alcotest.(check int) "an announcement and two requests" 3 (S.Arp.query w.a.arp).requests_sent;
  finish w

let arp_unresolved () =
  let w = world () in
  let nobody = Ipv4_addr.v 10 0 0 99 in
  let told = ref 0 in
  let c =
    ok
      (S.Ip.active_open w.a.ip { dst = nobody; proto = 253 } (fun _ ->
           { S.Ip.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> incr told) }))
  in
  (* 20 packets while resolving: the queue keeps 16, requests stay one a second. *)
  for i = 1 to 20 do
    ok (S.Ip.send c (packet w (string_of_int i)))
  done;
  advance w (Time.of_ms 2500);
  Alcotest.(check int)
    "an announcement and three requests in 2.5 s" 4 (S.Arp.query w.a.arp).requests_sent;
  run w;
  let i = S.Arp.query w.a.arp in
  Alcotest.(check int) "still three requests" 4 i.requests_sent;
  Alcotest.(check int) "failed once" 1 i.resolution_failed;
  Alcotest.(check int) "all 20 dropped (4 by the queue limit)" 20 i.queue_dropped;
  Alcotest.(check int) "B saw the requests but never answered" 0 (S.Arp.query w.b.arp).replies_sent;
  S.Ip.close c;
  finish w

(* A frame from a third host claiming A's address: A answers with a
   gratuitous reply; a gratuitous ARP for a cached host updates the entry. *)
let arp_gratuitous () =
  let w = world () in
  let intruder = Mac_addr.local 66 in
  let garp ~sha ~ip =
    Ethernet_packet.to_string
      { dst = Mac_addr.broadcast; src = sha; ethertype = Ethernet_wire.ethertype_arp }
      (Arp_packet.to_string { op = Request; sha; spa = ip; tha = Mac_addr.zero; tpa = ip })
  in
  let sent = ref [] in
  let pc = Pcap.of_channel ~clock:w.clock (open_out_bin Filename.null) in
  ignore pc;
  Device.deliver w.dev_a (packet w (garp ~sha:intruder ~ip:ip_a));
  run w;
  let ia = S.Arp.query w.a.arp in
  Alcotest.(check int) "conflict seen" 1 ia.conflicts;
  Alcotest.(check int) "defended with a reply" 1 ia.replies_sent;
  Alcotest.(check int) "once" 1 ia.replies_sent;
  (* B heard the defence (a broadcast reply) but had no entry for A: a
     gratuitous reply only updates existing entries. *)
  Alcotest.(check bool) "B did not learn A from it" true (S.Arp.lookup w.b.arp ip_a = None);
  (* Now B resolves A, then A's address moves to a new MAC by gratuitous ARP. *)
  ignore (S.Arp.control w.b.arp (Arp.Add_static (Ipv4_addr.v 10 0 0 50, Mac_addr.local 50)));
  let c =
    ok
      (S.Ip.active_open w.b.ip { dst = ip_a; proto = 253 } (fun _ ->
           { S.Ip.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }))
  in
  ok (S.Ip.send c (packet w "hi"));
  run w;
  Alcotest.(check (option string))
    "B resolved A"
    (Some (Mac_addr.to_string mac_a))
    (Option.map Mac_addr.to_string (S.Arp.lookup w.b.arp ip_a));
  let moved = Mac_addr.local 77 in
  Device.deliver w.dev_b (packet w (garp ~sha:moved ~ip:ip_a));
  run w;
  Alcotest.(check (option string))
    "entry updated by gratuitous ARP"
    (Some (Mac_addr.to_string moved))
    (Option.map Mac_addr.to_string (S.Arp.lookup w.b.arp ip_a));
  ignore sent;
  S.Ip.close c;
  finish w

let ping () =
  let w = world () in
  let replies = ref [] and payloads = ref [] in
  let c =
    ok
      (S.Icmp.active_open w.a.icmp { dst = ip_b; id = 0x1234 } (fun _ ->
           {
             S.Icmp.receive =
               (fun _ p ->
                 payloads := Packet.to_string p :: !payloads;
                 Packet.release p);
             status =
               (fun _ -> function
                 | Icmp.Echo_reply { seq; rtt } -> replies := (seq, rtt) :: !replies
                 | Icmp.Icmp_error _ -> Alcotest.fail "unexpected ICMP error");
           }))
  in
  for i = 0 to 2 do
    ok
      (S.Icmp.send c
         (Packet.of_string ~headroom:(S.Icmp.headroom w.a.icmp) w.pool (Printf.sprintf "ping %d" i)));
    run w
  done;
  Alcotest.(check (list int)) "three replies in order" [ 0; 1; 2 ] (List.rev_map fst !replies);
  Alcotest.(check (list string))
    "payloads echoed" [ "ping 0"; "ping 1"; "ping 2" ] (List.rev !payloads);
  (* Link latency 10 us each way; the first also waited for ARP. *)
  Alcotest.(check int) "rtt of a resolved ping" (Time.of_us 20) (snd (List.hd !replies));
  let ib = S.Icmp.query w.b.icmp in
  Alcotest.(check int) "B answered three" 3 ib.echo_replies_out;
  S.Icmp.close c;
  finish w

let udp_both_ways () =
  let w = world () in
  udp_echo w.a 7;
  udp_echo w.b 7;
  let from_a, ha = udp_collect () and from_b, hb = udp_collect () in
  let ca = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 5000 } ha) in
  let cb = ok (S.Udp.active_open w.b.udp { dst = ip_a; dst_port = 7; src_port = 6000 } hb) in
  ok (S.Udp.send ca (packet w "a0"));
  run w;
  from_a := [];
  for i = 1 to 50 do
    ok (S.Udp.send ca (packet w (Printf.sprintf "a%d" i)));
    ok (S.Udp.send cb (packet w (String.make i 'b')))
  done;
  run w;
  Alcotest.(check (list string))
    "A's datagrams echoed"
    (List.init 50 (fun i -> Printf.sprintf "a%d" (i + 1)))
    (List.rev !from_a);
  Alcotest.(check (list string))
    "B's datagrams echoed"
    (List.init 50 (fun i -> String.make (i + 1) 'b'))
    (List.rev !from_b);
  Alcotest.(check (pair string int))
    "remote" ("10.0.0.2", 7)
    (let a, p = S.Udp.remote ca in
     (Ipv4_addr.to_string a, p));
  Alcotest.(check bool)
    "port in use" true
    (Result.is_error (S.Udp.passive_open w.a.udp (Udp.Port 7) (fun _ -> assert false)));
  S.Udp.close ca;
  S.Udp.close cb;
  finish w

let port_unreachable () =
  let w = world () in
  let status = ref [] in
  let c =
    ok
      (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 9999; src_port = 0 } (fun _ ->
           {
             S.Udp.receive = (fun _ p -> Packet.release p);
             status = (fun _ (Udp.Unreachable u) -> status := u :: !status);
           }))
  in
  ok (S.Udp.send c (packet w "anyone?"));
  run w;
  Alcotest.(check int) "B counted it" 1 (S.Udp.query w.b.udp).no_port;
  Alcotest.(check int) "B sent one ICMP error" 1 (S.Ip.query w.b.ip).icmp_errors_sent;
  Alcotest.(check (list string))
    "A told: port unreachable" [ "port unreachable" ]
    (List.map (Fmt.to_to_string Icmp_packet.pp_unreachable) !status);
  S.Udp.close c;
  finish w

let protocol_unreachable () =
  let w = world () in
  let errors = ref [] in
  let c =
    ok
      (S.Ip.active_open w.a.ip { dst = ip_b; proto = 200 } (fun _ ->
           {
             S.Ip.receive = (fun _ p -> Packet.release p);
             status = (fun _ (Ipv4.Icmp_error { error; _ }) -> errors := error :: !errors);
           }))
  in
  ok (S.Ip.send c (packet w "proto 200"));
  run w;
  Alcotest.(check (list string))
    "protocol unreachable" [ "protocol unreachable" ]
    (List.map (Fmt.to_to_string Icmp_packet.pp) !errors);
  S.Ip.close c;
  finish w

let random_string st n = String.init n (fun _ -> Char.chr (Random.State.int st 256))

let fragmentation () =
  let w = world () in
  udp_echo w.b 7;
  let got, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  let st = Random.State.make [| 3 |] in
  let sizes = [ 1472; 1473; 2960; 5000; 65507 ] in
  let data = List.map (random_string st) sizes in
  ignore (S.Arp.control w.a.arp (Arp.Add_static (ip_b, mac_b)));
  ignore (S.Arp.control w.b.arp (Arp.Add_static (ip_a, mac_a)));
  List.iter (fun d -> ok (S.Udp.send c (packet w d))) data;
  run w;
  Alcotest.(check (list int)) "every size echoed" sizes (List.rev_map String.length !got);
  Alcotest.(check bool) "intact" true (data = List.rev !got);
  let ia = S.Ip.query w.a.ip and ib = S.Ip.query w.b.ip in
  (* With the UDP header, 1472 fits in 1480; 1473 needs 2 fragments, 2960
     needs 3, 5000 needs 4 and 65507 needs 45 (both ways). *)
  Alcotest.(check int) "fragments sent by A" (2 + 3 + 4 + 45) ia.fragments_sent;
  Alcotest.(check int) "fragments sent by B" (2 + 3 + 4 + 45) ib.fragments_sent;
  Alcotest.(check int) "reassembled by B" 4 ib.reassembled;
  Alcotest.(check bool)
    "too big" true
    (match S.Udp.send c (packet w (String.make 65508 'x')) with
    | Error (`Too_big _) -> true
    | _ -> false);
  S.Udp.close c;
  finish w

let fragmentation_with_loss () =
  let w =
    world ~seed:11 ~impair:{ Impair.none with drop = 0.05; duplicate = 0.05; reorder = 0.1 } ()
  in
  udp_echo w.b 7;
  let got, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  let st = Random.State.make [| 4 |] in
  let data = List.init 100 (fun i -> Printf.sprintf "%03d" i ^ random_string st 4000) in
  ignore (S.Arp.control w.a.arp (Arp.Add_static (ip_b, mac_b)));
  ignore (S.Arp.control w.b.arp (Arp.Add_static (ip_a, mac_a)));
  List.iter
    (fun d ->
      ok (S.Udp.send c (packet w d));
      advance w (Time.of_ms 5))
    data;
  run w;
  let got = List.rev !got in
  let n = List.length got in
  Alcotest.(check bool) (Printf.sprintf "most echoed (%d of 100)" n) true (n > 40 && n < 100);
  List.iter
    (fun d -> if not (List.mem d data) then Alcotest.fail "a datagram came back altered")
    got;
  let ib = S.Ip.query w.b.ip and ia = S.Ip.query w.a.ip in
  Alcotest.(check bool)
    "incomplete datagrams timed out" true
    (ib.reassembly_timeouts + ia.reassembly_timeouts > 0);
  Alcotest.(check int) "nothing left in reassembly (all released)" 0 (Pool.in_use w.pool);
  S.Udp.close c;
  finish w

(* Crafted fragments straight into B's device. *)
let frag_frame ~src ~id ~off ~more payload =
  let h = { (Ipv4_packet.v ~proto:17 ~src ~dst:ip_b ()) with id; frag_offset = off; mf = more } in
  Ethernet_packet.to_string
    { dst = mac_b; src = mac_a; ethertype = Ethernet_wire.ethertype_ipv4 }
    (Ipv4_packet.to_string h payload)

let reassembly_limits () =
  let reassembly =
    { Ipv4.timeout = Time.of_sec 10.; max_bytes = 32 * 1024; max_fragments = 8; max_datagrams = 4 }
  in
  let w = world ~reassembly () in
  let inject s = Device.deliver w.dev_b (packet w s) in
  let q () = S.Ip.query w.b.ip in
  (* Datagram limit: 6 first fragments, only 4 kept. *)
  for id = 1 to 6 do
    inject (frag_frame ~src:ip_a ~id ~off:0 ~more:true (String.make 1000 'x'))
  done;
  Alcotest.(check int) "two over the datagram limit" 2 (q ()).reassembly_dropped;
  advance w (Time.of_sec 11.);
  Alcotest.(check int) "four timed out" 4 (q ()).reassembly_timeouts;
  Alcotest.(check int) "their buffers released" 0 (Pool.in_use w.pool);
  (* Fragment-count limit: 9 fragments of one datagram. *)
  for k = 0 to 8 do
    inject (frag_frame ~src:ip_a ~id:100 ~off:(k * 8) ~more:true (String.make 8 'y'))
  done;
  Alcotest.(check int) "the ninth fragment drops it" 3 (q ()).reassembly_dropped;
  (* Byte limit: 32 KiB in all. *)
  for k = 0 to 3 do
    inject (frag_frame ~src:ip_a ~id:(200 + k) ~off:0 ~more:true (String.make 1480 'z'));
    for j = 1 to 7 do
      inject (frag_frame ~src:ip_a ~id:(200 + k) ~off:(j * 1480) ~more:true (String.make 1480 'z'))
    done
  done;
  Alcotest.(check bool) "byte limit reached" true ((q ()).reassembly_dropped > 3);
  advance w (Time.of_sec 11.);
  (* Overlap: a fragment covering part of another drops the datagram. *)
  let before = (q ()).reassembly_dropped in
  inject (frag_frame ~src:ip_a ~id:300 ~off:0 ~more:true (String.make 16 'a'));
  inject (frag_frame ~src:ip_a ~id:300 ~off:8 ~more:false (String.make 16 'b'));
  Alcotest.(check int) "overlap dropped" (before + 1) (q ()).reassembly_dropped;
  (* An exact duplicate is ignored and the datagram completes. *)
  let got, h = udp_collect () in
  ok (S.Udp.passive_open w.b.udp (Udp.Port 4000) h);
  let dgram = Udp_packet.to_string { src_port = 1; dst_port = 4000 } (String.make 32 'q') in
  inject (frag_frame ~src:ip_a ~id:400 ~off:0 ~more:true (String.sub dgram 0 16));
  inject (frag_frame ~src:ip_a ~id:400 ~off:0 ~more:true (String.sub dgram 0 16));
  inject (frag_frame ~src:ip_a ~id:400 ~off:16 ~more:false (String.sub dgram 16 24));
  Alcotest.(check (list string)) "reassembled despite a duplicate" [ String.make 32 'q' ] !got;
  advance w (Time.of_sec 11.);
  Alcotest.(check int) "nothing pending" 0 (Pool.in_use w.pool);
  finish w

let garbage () =
  let w = world () in
  let st = Random.State.make [| 99 |] in
  let eth ty payload =
    Ethernet_packet.to_string { dst = mac_b; src = Mac_addr.local 5; ethertype = ty } payload
  in
  for i = 0 to 2999 do
    let body = random_string st (Random.State.int st 120) in
    let frame =
      match i mod 6 with
      | 0 -> body (* anything *)
      | 1 -> eth Ethernet_wire.ethertype_ipv4 body
      | 2 -> eth Ethernet_wire.ethertype_arp body
      | 3 -> eth Ethernet_wire.ethertype_ipv4 ("\x45" ^ body)
      | 4 ->
          (* A valid IP header for B with a garbage UDP or ICMP payload. *)
          let proto = if i mod 12 = 4 then 17 else 1 in
          eth Ethernet_wire.ethertype_ipv4
            (Ipv4_packet.to_string
               (Ipv4_packet.v ~proto ~src:(Ipv4_addr.v 10 0 0 5) ~dst:ip_b ())
               body)
      | _ -> String.sub body 0 (min 13 (String.length body))
    in
    Device.deliver w.dev_b (packet w frame)
  done;
  run w;
  let e = S.Eth.query w.b.eth and i = S.Ip.query w.b.ip in
  Alcotest.(check bool) "runts counted" true (e.runts > 0);
  Alcotest.(check bool) "bad IP counted" true (i.bad > 0);
  Alcotest.(check bool) "bad ARP counted" true ((S.Arp.query w.b.arp).bad > 0);
  Alcotest.(check bool) "bad ICMP counted" true ((S.Icmp.query w.b.icmp).bad > 0);
  Alcotest.(check bool) "bad UDP counted" true ((S.Udp.query w.b.udp).bad > 0);
  (* And the stack still works. *)
  let got, h = udp_collect () in
  udp_echo w.b 7;
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  ok (S.Udp.send c (packet w "still alive"));
  run w;
  Alcotest.(check (list string)) "echo after garbage" [ "still alive" ] !got;
  S.Udp.close c;
  finish w

let corruption () =
  let w = world ~seed:5 ~impair:{ Impair.none with corrupt = 0.2 } () in
  udp_echo w.b 7;
  let got, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  let data =
    List.init 200 (fun i ->
        Printf.sprintf "datagram %d %s" i (String.make 200 (Char.chr (65 + (i mod 26)))))
  in
  List.iter
    (fun d ->
      ok (S.Udp.send c (packet w d));
      advance w (Time.of_ms 1))
    data;
  run w;
  List.iter
    (fun d -> if not (List.mem d data) then Alcotest.failf "corrupted datagram delivered: %S" d)
    !got;
  let corrupted = (Impair.stats w.impair_a).corrupted + (Impair.stats w.impair_b).corrupted in
  Alcotest.(check bool) "some corrupted" true (corrupted > 20);
  Alcotest.(check bool) "some delivered" true (List.length !got > 100);
  S.Udp.close c;
  finish w

let pcap () =
  let path = Filename.temp_file "consort-net" ".pcap" in
  Fun.protect ~finally:(fun () -> Sys.remove path) @@ fun () ->
  let vc = Clock.Virtual.create () in
  let writer = Pcap.create ~clock:(Clock.Virtual.clock vc) path in
  let w = world ~pcap:writer () in
  udp_echo w.b 7;
  let _, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  ok (S.Udp.send c (packet w "captured"));
  run w;
  Pcap.close writer;
  match Pcap.Reader.read path with
  | Error (`Msg m) -> Alcotest.fail m
  | Ok frames ->
      Alcotest.(check int)
        "two announcements, ARP request, reply, datagram, echo" 6 (List.length frames);
      (match Ethernet_packet.decode (Cstruct.of_string (snd (List.nth frames 2))) with
      | Ok (h, arp) ->
          Alcotest.(check int) "third is ARP" Ethernet_wire.ethertype_arp h.ethertype;
          Alcotest.(check bool)
            "a request for B" true
            (match Arp_packet.decode arp with
            | Ok { op = Request; tpa; _ } -> tpa = ip_b
            | _ -> false)
      | Error _ -> Alcotest.fail "bad first frame");
      let last = snd (List.nth frames 5) in
      Alcotest.(check bool)
        "last carries the echo" true
        (let n = String.length last in
         String.sub last (n - 8) 8 = "captured");
      S.Udp.close c;
      finish w

let suite =
  [
    Alcotest.test_case "ARP resolution, queued packets" `Quick arp_resolution;
    Alcotest.test_case "ARP entry expiry" `Quick arp_expiry;
    Alcotest.test_case "ARP gives up, rate-limited, queue limit" `Quick arp_unresolved;
    Alcotest.test_case "ARP conflict defended, gratuitous update" `Quick arp_gratuitous;
    Alcotest.test_case "ping" `Quick ping;
    Alcotest.test_case "UDP both ways" `Quick udp_both_ways;
    Alcotest.test_case "UDP port unreachable" `Quick port_unreachable;
    Alcotest.test_case "IP protocol unreachable" `Quick protocol_unreachable;
    Alcotest.test_case "fragmentation and reassembly" `Quick fragmentation;
    Alcotest.test_case "fragments with loss, duplication, reordering" `Quick fragmentation_with_loss;
    Alcotest.test_case "reassembly limits and timeouts" `Quick reassembly_limits;
    Alcotest.test_case "garbage frames counted and dropped" `Quick garbage;
    Alcotest.test_case "corrupted frames never delivered" `Quick corruption;
    Alcotest.test_case "pcap capture" `Quick pcap;
  ]
