(* Mix and match below TCP: IPv4 on a point-to-point link (no Ethernet,
   no ARP) with ICMP, UDP and TCP over it; UDP straight over Ethernet;
   the transport checksum shared by UDP and TCP. *)

open Consort
open Consort_net
open Util

(* IPv4 on a point-to-point link, and the usual protocols over it: each
   one functor application. *)
module Link = P2p.Make (Device)
module Ip = Ipv4.Make (Link)
module Icmp_p = Icmp.Make (Ip)
module Udp_p = Udp.Make (Ip) (Checksum.On)

let ip_a = Ipv4_addr.v 192 168 7 1
let ip_b = Ipv4_addr.v 192 168 7 2
let ok = function Ok x -> x | Error e -> Alcotest.failf "%a" Protocol.pp_error e

type node = { link : Link.t; ip : Ip.t; icmp : Icmp_p.t; udp : Udp_p.t }

let node ~clock ~pool dev addr =
  let link = Link.create dev in
  let ip = Ip.create ~clock ~pool ~address:Ipv4_addr.Prefix.{ addr; len = 30 } link in
  { link; ip; icmp = Icmp_p.create ~clock ip; udp = Udp_p.create ip }

let p2p_pair () =
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = fresh_pool () in
  (* The wire carries IP datagrams as they are: no link header. *)
  let da, db =
    Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool (Mac_addr.local 1) (Mac_addr.local 2)
  in
  (vc, clock, pool, da, db, node ~clock ~pool da ip_a, node ~clock ~pool db ip_b)

let ipv4_point_to_point () =
  let vc, clock, pool, da, _, a, b = p2p_pair () in
  let frames = ref [] in
  let _ = clock in
  (* Ping. *)
  let replies = ref 0 in
  let c =
    ok
      (Icmp_p.active_open a.icmp { dst = ip_b; id = 9 } (fun _ ->
           {
             Icmp_p.receive = (fun _ p -> Packet.release p);
             status = (fun _ -> function Icmp.Echo_reply _ -> incr replies | _ -> ());
           }))
  in
  ok (Icmp_p.send c (Packet.of_string ~headroom:(Icmp_p.headroom a.icmp) pool "hello"));
  Clock.Virtual.run_until_idle vc;
  Alcotest.(check int) "ping answered, with no resolution first" 1 !replies;
  Icmp_p.close c;
  (* UDP echo, with datagrams that need fragments. *)
  ok
    (Udp_p.passive_open b.udp (Udp.Port 7) (fun _ ->
         { Udp_p.receive = (fun c p -> ignore (Udp_p.send c p)); status = (fun _ _ -> ()) }));
  let got = ref [] in
  let u =
    ok
      (Udp_p.active_open a.udp { dst = ip_b; dst_port = 7; src_port = 0 } (fun _ ->
           {
             Udp_p.receive =
               (fun _ p ->
                 got := Packet.to_string p :: !got;
                 Packet.release p);
             status = (fun _ _ -> ());
           }))
  in
  let data = [ "x"; String.make 1472 'a'; String.make 1481 'b'; String.make 20000 'c' ] in
  List.iter
    (fun d -> ok (Udp_p.send u (Packet.of_string ~headroom:(Udp_p.headroom a.udp) pool d)))
    data;
  Clock.Virtual.run_until_idle vc;
  Alcotest.(check (list int))
    "echoed, fragmented and reassembled" (List.map String.length data)
    (List.rev_map String.length !got);
  Alcotest.(check bool) "intact" true (List.rev !got = data);
  Alcotest.(check int) "fragments: 2 for 1481 bytes, 14 for 20000" 16 (Ip.query a.ip).fragments_sent;
  (* What crossed the wire: IP datagrams only. *)
  ignore frames;
  let sa = Device.stats da in
  Alcotest.(check int)
    "every frame sent was an IP datagram" (Link.query a.link).frames_out sa.tx_frames;
  Alcotest.(check int) "and every frame received" 0 (Link.query a.link).unknown;
  Alcotest.(check int) "no header pushed" 0 (Ip.headroom a.ip - Ipv4_wire.sizeof_ipv4);
  (* Garbage that is no IP datagram is counted and dropped. *)
  Device.deliver da (Packet.of_string pool "\x10 not an IP datagram");
  Alcotest.(check int) "unknown frame" 1 (Link.query a.link).unknown;
  Udp_p.close u;
  Clock.Virtual.run_until_idle vc;
  Alcotest.(check int) "no buffers in use" 0 (Pool.in_use pool)

(* TCP over IPv4 on the point-to-point link. *)
let tcp_point_to_point () =
  let vc, clock, pool, _, _, a, b = p2p_pair () in
  let tcp (n : node) local : (module T_flood.NODE) =
    let module P =
      (val Net_test_util.Tcp_params.ipv4 ~clock ~pool
             ~rng:(Rng.create (Ipv4_addr.to_int local))
             local)
    in
    let module T = Tcp.Make (Ipv4.Df (Ip)) (P) in
    let tcp = ok (T.create n.ip) in
    (module struct
      module T = T
      module Sock = Socket.Make (T)

      let tcp = tcp
    end)
  in
  T_flood.tcp_transfer ~dst:ip_b vc (tcp a ip_a) (tcp b ip_b) 300_000;
  Clock.Virtual.run_until_idle vc;
  Alcotest.(check int) "no buffers in use" 0 (Pool.in_use pool)

(* UDP straight over Ethernet, on an ethertype of its own: the same UDP
   functor over a lower layer that is not IP (no pseudo-header). *)
module Eth = Ethernet.Make (Device)

module Eth_lower = struct
  include Eth

  let equal_host = Mac_addr.equal
  let udp_address h = { Ethernet.dst = h; ethertype = 0x88b6 }
  let udp_pattern = Ethernet.Ethertype 0x88b6
  let pseudo_header _ ~len:_ = 0
  let zero_checksum_ok = true
  let max_payload = 1500 - Udp_wire.sizeof_udp
  let port_unreachable _ p = Packet.release p
  let unreachable (s : Ethernet.status) = match s with _ -> .
end

module Udp_eth = Udp.Over (Eth_lower) (Checksum.On)

let udp_over_ethernet () =
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = fresh_pool () in
  let mac_a = Mac_addr.local 1 and mac_b = Mac_addr.local 2 in
  let da, db = Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool mac_a mac_b in
  let ea = Eth.create da and eb = Eth.create db in
  let ua = Udp_eth.create ea and ub = Udp_eth.create eb in
  ok
    (Udp_eth.passive_open ub (Udp.Port 7) (fun _ ->
         { Udp_eth.receive = (fun c p -> ignore (Udp_eth.send c p)); status = (fun _ _ -> ()) }));
  let got = ref [] in
  let c =
    ok
      (Udp_eth.active_open ua { dst = mac_b; dst_port = 7; src_port = 5000 } (fun _ ->
           {
             Udp_eth.receive =
               (fun c p ->
                 got := (Udp_eth.remote c, Packet.to_string p) :: !got;
                 Packet.release p);
             status = (fun _ _ -> ());
           }))
  in
  ok (Udp_eth.send c (Packet.of_string ~headroom:(Udp_eth.headroom ua) pool "over ethernet"));
  Clock.Virtual.run_until_idle vc;
  Alcotest.(check (list (pair string string)))
    "echoed by MAC and port"
    [ (Mac_addr.to_string mac_b ^ ":7", "over ethernet") ]
    (List.map (fun ((m, p), s) -> (Mac_addr.to_string m ^ ":" ^ string_of_int p, s)) !got);
  (* A corrupted datagram is caught by the checksum (no pseudo-header). *)
  let frame =
    Ethernet_packet.to_string
      { dst = mac_b; src = mac_a; ethertype = 0x88b6 }
      (Udp_packet.to_string ~pseudo:0 { src_port = 5000; dst_port = 7 } "bad")
  in
  let b = Bytes.of_string frame in
  Bytes.set b (Bytes.length b - 1) 'X';
  Device.deliver db (Packet.of_string pool (Bytes.to_string b));
  Alcotest.(check int) "bad checksum counted" 1 (Udp_eth.query ub).bad;
  Udp_eth.close c;
  Clock.Virtual.run_until_idle vc;
  Alcotest.(check int) "no buffers in use" 0 (Pool.in_use pool)

let transport_checksum =
  qtest "checksum: fill then valid; one bit flipped is caught"
    QCheck.(pair (string_of_size Gen.(8 -- 200)) (int_bound 0xffff))
    (fun (s, pseudo) ->
      let seg = Cstruct.of_string s in
      Transport_checksum.fill ~zero:0xffff ~pseudo ~field:6 seg;
      let good = Transport_checksum.valid ~pseudo seg in
      let ck = Cstruct.BE.get_uint16 seg 6 in
      Cstruct.set_uint8 seg 0 (Cstruct.get_uint8 seg 0 lxor 1);
      good && ck <> 0 && not (Transport_checksum.valid ~pseudo seg))

let transport_checksum_matches_udp () =
  (* The same bytes as the UDP codec's own checksum over IPv4. *)
  let pseudo = Transport_checksum.ipv4 ~src:ip_a ~dst:ip_b ~proto:17 ~len:(8 + 5) in
  let d = Udp_packet.to_string ~pseudo { src_port = 1; dst_port = 2 } "hello" in
  let seg = Cstruct.of_string d in
  Alcotest.(check bool) "codec's checksum valid" true (Transport_checksum.valid ~pseudo seg);
  let copy = Cstruct.of_string d in
  Transport_checksum.fill ~zero:0xffff ~pseudo ~field:6 copy;
  Alcotest.(check string) "same field" d (Cstruct.to_string copy)

let suite =
  [
    Alcotest.test_case "IPv4 on a point-to-point link: ping, UDP, fragments, no ARP" `Quick
      ipv4_point_to_point;
    Alcotest.test_case "TCP over IPv4 on a point-to-point link" `Quick tcp_point_to_point;
    Alcotest.test_case "UDP straight over Ethernet" `Quick udp_over_ethernet;
    transport_checksum;
    Alcotest.test_case "checksum: the same as the UDP codec's" `Quick transport_checksum_matches_udp;
  ]
