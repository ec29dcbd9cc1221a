(* Floods from strangers on the in-memory pair: random source MACs,
   spoofed IPv4 sources, ARP from random addresses. The tables stay under
   their bounds, the heap stays under a bound, and a real client (A) can
   still ping B, exchange UDP with it, and connect and transfer over TCP. *)

open Consort
open Consort_net
open T_stack
module S = Ipstack

(* TCP over the stack's IPv4, as an application would build it. *)
module type NODE = sig
  module T : Tcp.S with type host = Ipv4_addr.t
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
end

let tcp_on w (s : S.t) local : (module NODE) =
  let module P =
    (val Net_test_util.Tcp_params.ipv4 ~clock:w.clock ~pool:w.pool
           ~rng:(Rng.create (Ipv4_addr.to_int local))
           local)
  in
  let module T = Tcp.Make (Ipv4.Df (S.Ip)) (P) in
  let tcp = ok (T.create s.ip) in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

(* A sends [n] bytes to B's port 80 over TCP; B checks every byte. *)
let tcp_transfer ?(dst = ip_b) vc (module A : NODE) (module B : NODE) n =
  let data = String.init n (fun i -> Char.chr (((i * 31) + (i lsr 8)) land 255)) in
  let l = ok (B.Sock.listen B.tcp 80) in
  let got = ref 0 and eof = ref false and closed = ref 0 in
  Socket.Promise.upon (B.Sock.accept l) (function
    | Error e -> Alcotest.failf "accept: %a" Protocol.pp_error e
    | Ok s ->
        let buf = Cstruct.create 16384 in
        let rec loop () =
          Socket.Promise.upon (B.Sock.read s buf) (function
            | Error e -> Alcotest.failf "read: %a" Protocol.pp_error e
            | Ok 0 ->
                eof := true;
                B.Sock.close s;
                Socket.Promise.upon (B.Sock.closed s) (fun r -> if r = Ok () then incr closed)
            | Ok k ->
                if Cstruct.to_string (Cstruct.sub buf 0 k) <> String.sub data !got k then
                  Alcotest.failf "bytes differ near %d" !got;
                got := !got + k;
                loop ())
        in
        loop ());
  Socket.Promise.upon (A.Sock.connect A.tcp dst 80) (function
    | Error e -> Alcotest.failf "connect: %a" Protocol.pp_error e
    | Ok s ->
        Socket.Promise.upon
          (A.Sock.write s (Cstruct.of_string data))
          (function
            | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e
            | Ok () ->
                A.Sock.shutdown s;
                Socket.Promise.upon (A.Sock.closed s) (fun r -> if r = Ok () then incr closed)));
  let clock = Clock.Virtual.clock vc in
  Clock.Virtual.run_until_idle ~limit:(clock.now () + Time.of_sec 600.) vc;
  Alcotest.(check int) "TCP: bytes received" n !got;
  Alcotest.(check bool) "TCP: end of stream" true !eof;
  Alcotest.(check int) "TCP: both closed" 2 !closed

let ping_once w =
  let replies = ref 0 in
  let c =
    ok
      (S.Icmp.active_open w.a.icmp { dst = ip_b; id = 0x4242 } (fun _ ->
           {
             S.Icmp.receive = (fun _ p -> Packet.release p);
             status =
               (fun _ -> function Icmp.Echo_reply _ -> incr replies | Icmp.Icmp_error _ -> ());
           }))
  in
  ok (S.Icmp.send c (Packet.of_string ~headroom:(S.Icmp.headroom w.a.icmp) w.pool "are you there"));
  advance w (Time.of_sec 1.);
  S.Icmp.close c;
  !replies

let udp_echo_once w =
  let got, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  ok (S.Udp.send c (packet w "still here"));
  advance w (Time.of_sec 1.);
  S.Udp.close c;
  !got

let rand_mac st =
  let x = (Random.State.bits st lsl 30) lor Random.State.bits st in
  (* Unicast, not one of the pair's. *)
  Mac_addr.of_int (x land 0xfeff_ffff_ffff lor 0x0200_0000_0000)

let martian i = i lsr 24 = 0 || i lsr 24 = 127 || i lsr 24 >= 224

let rand_ip st =
  let rec go () =
    let i = (Random.State.bits st lsl 2) lxor Random.State.bits st land 0xffff_ffff in
    if martian i || i = Ipv4_addr.to_int ip_a || i = Ipv4_addr.to_int ip_b then go ()
    else Ipv4_addr.of_int i
  in
  go ()

let eth ~src ty payload = Ethernet_packet.to_string { dst = mac_b; src; ethertype = ty } payload

(* Flood frames are templates stamped with their source addresses in
   place (and the IP header checksum redone): building each from scratch
   would cost more than the stack takes to drop it. *)
let udp_template port =
  eth ~src:mac_a Ethernet_wire.ethertype_ipv4
    (Ipv4_packet.to_string
       (Ipv4_packet.v ~proto:17 ~src:ip_a ~dst:ip_b ())
       (Udp_packet.to_string { src_port = 1234; dst_port = port } "flood"))

let echo_template =
  eth ~src:mac_a Ethernet_wire.ethertype_ipv4
    (Ipv4_packet.to_string
       (Ipv4_packet.v ~proto:1 ~src:ip_a ~dst:ip_b ())
       (Icmp_packet.to_string (Echo_request { id = 1; seq = 1 }) "ping"))

let arp_template =
  eth ~src:mac_a Ethernet_wire.ethertype_arp
    (Arp_packet.to_string
       { op = Request; sha = mac_a; spa = ip_a; tha = Mac_addr.zero; tpa = ip_b })

let stamp w template ~mac ~ip =
  let p = Packet.of_string w.pool template in
  let cs = Packet.cstruct p in
  Ethernet_wire.set_src cs mac;
  let body = Cstruct.shift cs Ethernet_wire.sizeof_ethernet in
  if Ethernet_wire.get_ethertype cs = Ethernet_wire.ethertype_arp then begin
    Arp_wire.set_sha body mac;
    Arp_wire.set_spa body ip
  end
  else begin
    Ipv4_wire.set_src body ip;
    Ipv4_wire.set_checksum body 0;
    Ipv4_wire.set_checksum body (Checksum.digest (Cstruct.sub body 0 Ipv4_wire.sizeof_ipv4))
  end;
  p

let live_bytes () =
  Gc.compact ();
  (Gc.stat ()).live_words * (Sys.word_size / 8)

let flood_n = 100_000

(* The bounds the stack promises with its default limits. *)
let max_eth_peers = 2 * 1024 (* IPv4 and ARP *)
let max_ip_connections = 4096
let max_arp = 1024 + 64 + 1 (* and the static entry for the subnet broadcast *)
let max_heap_growth = 8 * 1024 * 1024

let flood () =
  let w = world () in
  udp_echo w.b 7;
  ok
    (S.Udp.passive_open w.b.udp (Udp.Port 9) (fun _ ->
         { S.Udp.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }));
  (* A is a known client before the flood. *)
  Alcotest.(check int) "ping before the flood" 1 (ping_once w);
  let st = Random.State.make [| 17 |] in
  let inject p = Device.deliver w.dev_b p in
  let udp9 = udp_template 9 and udp4444 = udp_template 4444 in
  let before = live_bytes () in
  let t0 = Unix.gettimeofday () in
  (* Checked mode records a backtrace per buffer: too slow for 220,000
     frames. Buffers are still counted ([finish] checks none is left). *)
  Iovec.set_checked false;
  for i = 1 to flood_n do
    (* Random source MAC and spoofed IPv4 source, to an open and a closed port. *)
    inject (stamp w (if i land 1 = 0 then udp9 else udp4444) ~mac:(rand_mac st) ~ip:(rand_ip st));
    (* ARP requests for B from random addresses. *)
    inject (stamp w arp_template ~mac:(rand_mac st) ~ip:(rand_ip st));
    (* Pings from spoofed neighbours: each answer needs a resolution. *)
    if i mod 5 = 0 then
      inject
        (stamp w echo_template ~mac:(rand_mac st)
           ~ip:(Ipv4_addr.v 10 0 0 (3 + Random.State.int st 250)));
    if i mod 100 = 0 then advance w (Time.of_ms 1)
  done;
  Iovec.set_checked true;
  let growth = live_bytes () - before in
  let e = S.Eth.query w.b.eth and ip = S.Ip.query w.b.ip and arp = S.Arp.query w.b.arp in
  Fmt.pr
    "after %d x 3 flood frames: %d Ethernet peers (%d evicted), %d IPv4 connections (%d evicted), \
     %d ARP entries; heap +%d KiB; %d pool segments in use (%.1f s)@."
    flood_n e.peers e.peers_evicted ip.connections ip.connections_evicted (List.length arp.entries)
    (growth / 1024) (Pool.in_use w.pool)
    (Unix.gettimeofday () -. t0);
  Alcotest.(check bool)
    (Fmt.str "Ethernet peers bounded (%d)" e.peers)
    true (e.peers <= max_eth_peers);
  Alcotest.(check bool)
    "Ethernet peers evicted" true
    (e.peers_evicted >= (2 * flood_n) - max_eth_peers);
  Alcotest.(check bool)
    (Fmt.str "IPv4 connections bounded (%d)" ip.connections)
    true
    (ip.connections <= max_ip_connections);
  Alcotest.(check bool)
    "IPv4 connections evicted" true
    (ip.connections_evicted >= flood_n - max_ip_connections);
  Alcotest.(check bool)
    (Fmt.str "ARP entries bounded (%d)" (List.length arp.entries))
    true
    (List.length arp.entries <= max_arp);
  Alcotest.(check bool)
    (Fmt.str "heap growth bounded (%d bytes)" growth)
    true (growth <= max_heap_growth);
  Alcotest.(check bool) "pool segments bounded" true (Pool.in_use w.pool <= 16);
  Alcotest.(check int)
    "every flood datagram to port 9 delivered" (flood_n / 2) (S.Udp.query w.b.udp).datagrams_in;
  (* Right after the flood, and again once every resolution has given up. *)
  Alcotest.(check int) "ping right after the flood" 1 (ping_once w);
  Alcotest.(check (list string)) "UDP echo right after the flood" [ "still here" ] (udp_echo_once w);
  run w;
  Alcotest.(check int) "ping" 1 (ping_once w);
  Alcotest.(check (list string)) "UDP echo" [ "still here" ] (udp_echo_once w);
  let a = tcp_on w w.a ip_a and b = tcp_on w w.b ip_b in
  tcp_transfer w.vc a b (1024 * 1024);
  finish w

(* A client that keeps talking stays in every table while a flood churns
   through them: its TCP connection, made before, goes on after. *)
let flood_during_transfer () =
  let w = world () in
  let a = tcp_on w w.a ip_a and b = tcp_on w w.b ip_b in
  let st = Random.State.make [| 18 |] in
  let udp9 = udp_template 9 in
  (* Flood B from a timer while the transfer runs. *)
  let sent = ref 0 in
  let rec flood () =
    if !sent < 20_000 then begin
      Iovec.set_checked false;
      Fun.protect ~finally:(fun () -> Iovec.set_checked true) @@ fun () ->
      for _ = 1 to 200 do
        incr sent;
        Device.deliver w.dev_b (stamp w udp9 ~mac:(rand_mac st) ~ip:(rand_ip st));
        Device.deliver w.dev_b (stamp w arp_template ~mac:(rand_mac st) ~ip:(rand_ip st))
      done;
      let (_ : Clock.cancel) = w.clock.at (w.clock.now () + Time.of_ms 1) flood in
      ()
    end
  in
  ok
    (S.Udp.passive_open w.b.udp (Udp.Port 9) (fun _ ->
         { S.Udp.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }));
  let (_ : Clock.cancel) = w.clock.at (Time.of_ms 1) flood in
  tcp_transfer w.vc a b (4 * 1024 * 1024);
  Alcotest.(check int) "the whole flood went in" 20_000 !sent;
  Alcotest.(check bool)
    "it churned the tables" true
    ((S.Ip.query w.b.ip).connections_evicted > 10_000);
  finish w

let martians () =
  let w = world () in
  let got = ref 0 in
  ok
    (S.Udp.passive_open w.b.udp (Udp.Port 9) (fun _ ->
         {
           S.Udp.receive =
             (fun _ p ->
               incr got;
               Packet.release p);
           status = (fun _ _ -> ());
         }));
  let bad =
    [
      Ipv4_addr.any;
      Ipv4_addr.v 127 0 0 1;
      Ipv4_addr.v 127 9 9 9;
      Ipv4_addr.v 224 0 0 1;
      Ipv4_addr.v 239 1 2 3;
      Ipv4_addr.broadcast;
      Ipv4_addr.v 10 0 0 255;
      ip_b;
      Ipv4_addr.v 240 0 0 1;
    ]
  in
  let udp9 = udp_template 9 in
  List.iter (fun ip -> Device.deliver w.dev_b (stamp w udp9 ~mac:mac_a ~ip)) bad;
  run w;
  Alcotest.(check int) "none delivered" 0 !got;
  Alcotest.(check int) "each counted" (List.length bad) (S.Ip.query w.b.ip).version.bad_source;
  Alcotest.(check int) "no ICMP error about them" 0 (S.Ip.query w.b.ip).icmp_errors_sent;
  (* A group source MAC is refused by Ethernet. *)
  Device.deliver w.dev_b (stamp w udp9 ~mac:(Mac_addr.of_int 0x0100_5e00_0001) ~ip:ip_a);
  Alcotest.(check int) "group source MAC" 1 (S.Eth.query w.b.eth).bad_source;
  Device.deliver w.dev_b (stamp w udp9 ~mac:mac_a ~ip:ip_a);
  Alcotest.(check int) "a good one passes" 1 !got;
  finish w

(* An entry in use is refreshed by unicast before it expires: a steady
   flow never goes back to broadcast resolution. An unused one expires. *)
let arp_refresh () =
  let arp = { Arp.default_config with ttl = Time.of_sec 5.; refresh = Time.of_sec 2. } in
  let w = world ~arp () in
  udp_echo w.b 7;
  let got, h = udp_collect () in
  let c = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  for i = 1 to 200 do
    ok (S.Udp.send c (packet w (string_of_int i)));
    advance w (Time.of_ms 100)
  done;
  Alcotest.(check int) "all echoed" 200 (List.length !got);
  let i = S.Arp.query w.a.arp in
  Alcotest.(check int)
    "one announcement, one broadcast resolution in 20 s" 2 (i.requests_sent - i.refreshes);
  Alcotest.(check int) "no packet waited" 0 i.queue_dropped;
  (* Each side's refresh also refreshes the other's entry (a request
     teaches its sender): B never resolved A by broadcast either. *)
  let ib = S.Arp.query w.b.arp in
  Alcotest.(check int) "B: only its announcement" 1 (ib.requests_sent - ib.refreshes);
  let r = i.refreshes + ib.refreshes in
  Alcotest.(check bool)
    (Fmt.str "refreshed by unicast, about every 3 s (%d)" r)
    true
    (r >= 5 && r <= 8);
  (* Silence: the entry expires. *)
  advance w (Time.of_sec 6.);
  Alcotest.(check bool) "unused entry expired" true (S.Arp.lookup w.a.arp ip_b = None);
  S.Udp.close c;
  finish w

(* Resolutions under way are bounded: sending to 500 silent neighbours
   keeps at most [max_pending] of them and [max_queued] packets, and a
   real neighbour is still resolved. *)
let arp_pending_bound () =
  let w = world () in
  let c k =
    ok
      (S.Ip.active_open w.a.ip
         { dst = Ipv4_addr.v 10 0 1 k; proto = 253 }
         (fun _ -> { S.Ip.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }))
  in
  ignore (S.Ip.control w.a.ip (Ipv4.Set_address Ipv4_addr.Prefix.{ addr = ip_a; len = 16 }));
  ignore (S.Ip.control w.b.ip (Ipv4.Set_address Ipv4_addr.Prefix.{ addr = ip_b; len = 16 }));
  let conns = List.init 250 (fun k -> c (k + 1)) in
  List.iter
    (fun c ->
      for _ = 1 to 5 do
        ignore (S.Ip.send c (packet w "x"))
      done)
    conns;
  let i = S.Arp.query w.a.arp in
  let pending = List.length (List.filter (fun (_, m) -> m = None) i.entries) in
  Alcotest.(check bool)
    (Fmt.str "at most 64 pending (%d)" pending)
    true
    (pending > 0 && pending <= 64);
  Alcotest.(check int)
    "and the static entry for the subnet's broadcast (the old one removed)" 1
    (List.length i.entries - pending);
  Alcotest.(check bool)
    (Fmt.str "at most 256 packets held (%d)" i.waiting)
    true
    (i.waiting > 200 && i.waiting <= 256);
  Alcotest.(check int) "the others dropped" (1250 - i.waiting) i.queue_dropped;
  udp_echo w.b 7;
  let got, h = udp_collect () in
  let u = ok (S.Udp.active_open w.a.udp { dst = ip_b; dst_port = 7; src_port = 0 } h) in
  ok (S.Udp.send u (packet w "real"));
  advance w (Time.of_ms 100);
  Alcotest.(check (list string)) "the real neighbour resolved" [ "real" ] !got;
  S.Udp.close u;
  List.iter S.Ip.close conns;
  finish w

(* First fragments of datagrams that never complete, from 5,000
   spoofed sources: reassembly gives up the oldest, and a real fragmented
   datagram still gets through. *)
let fragment_flood () =
  let w = world () in
  let got, h = udp_collect () in
  ok (S.Udp.passive_open w.b.udp (Udp.Port 4000) h);
  let st = Random.State.make [| 19 |] in
  let inject s = Device.deliver w.dev_b (packet w s) in
  for id = 1 to 5000 do
    inject (frag_frame ~src:(rand_ip st) ~id ~off:0 ~more:true (String.make 1000 'f'))
  done;
  let dgram = Udp_packet.to_string { src_port = 1; dst_port = 4000 } (String.make 2000 'q') in
  inject (frag_frame ~src:ip_a ~id:7 ~off:0 ~more:true (String.sub dgram 0 1000));
  inject (frag_frame ~src:ip_a ~id:7 ~off:1000 ~more:true (String.sub dgram 1000 1000));
  inject (frag_frame ~src:ip_a ~id:7 ~off:2000 ~more:false (String.sub dgram 2000 8));
  Alcotest.(check (list int)) "the real datagram reassembled" [ 2000 ] (List.map String.length !got);
  let i = S.Ip.query w.b.ip in
  Alcotest.(check bool)
    (Fmt.str "the oldest given up (%d)" i.reassembly_dropped)
    true
    (i.reassembly_dropped >= 5000 - Ipv4.default_reassembly.max_datagrams);
  Alcotest.(check bool) "buffers bounded" true (Pool.in_use w.pool <= 2);
  advance w (Time.of_sec 31.);
  finish w

(* Entries nobody uses are reclaimed after their idle timeout, not only
   when the table is full. *)
let idle_reclaimed () =
  let w = world () in
  ok
    (S.Udp.passive_open w.b.udp (Udp.Port 9) (fun _ ->
         { S.Udp.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }));
  let st = Random.State.make [| 20 |] in
  let udp9 = udp_template 9 in
  for _ = 1 to 1000 do
    Device.deliver w.dev_b (stamp w udp9 ~mac:(rand_mac st) ~ip:(rand_ip st))
  done;
  Alcotest.(check int) "1000 IPv4 connections" 1000 (S.Ip.query w.b.ip).connections;
  Alcotest.(check int) "1000 Ethernet peers" 1000 (S.Eth.query w.b.eth).peers;
  (* Ethernet forgets after 300 s, IPv4 after 600 s of silence. *)
  advance w (Time.of_sec 601.);
  Device.deliver w.dev_b (stamp w udp9 ~mac:(rand_mac st) ~ip:(rand_ip st));
  Alcotest.(check int) "IPv4: only the newest" 1 (S.Ip.query w.b.ip).connections;
  Alcotest.(check int) "Ethernet: only the newest" 1 (S.Eth.query w.b.eth).peers;
  Alcotest.(check int) "all counted as evicted" 1000 (S.Ip.query w.b.ip).connections_evicted;
  finish w

let suite =
  [
    Alcotest.test_case "idle peers and connections reclaimed" `Quick idle_reclaimed;
    Alcotest.test_case "a flood of fragments: the oldest given up" `Quick fragment_flood;
    Alcotest.test_case "flood of MACs, spoofed sources, ARP: bounded, still served" `Quick flood;
    Alcotest.test_case "a TCP transfer through a flood" `Quick flood_during_transfer;
    Alcotest.test_case "martian source addresses refused" `Quick martians;
    Alcotest.test_case "ARP entries in use refreshed, unused expire" `Quick arp_refresh;
    Alcotest.test_case "ARP resolutions under way bounded" `Quick arp_pending_bound;
  ]
