(* TCP on the stack's own lower layers, over the in-memory wire with a
   virtual clock: over IPv4 (with the pseudo-header checksum) through
   impairments that drop, duplicate, reorder and corrupt frames; and
   straight over Ethernet with checksums off (Fox's Fig. 2), on an
   ethertype of its own beside IP on the same wire. *)

open Consort

let mac_a = Mac_addr.of_string_exn "02:00:00:00:00:0a"
let mac_b = Mac_addr.of_string_exn "02:00:00:00:00:0b"
let ip_a = Ipv4_addr.of_string_exn "10.1.0.1"
let ip_b = Ipv4_addr.of_string_exn "10.1.0.2"
let prefix ip = Result.get_ok (Ipv4_addr.Prefix.of_string (Ipv4_addr.to_string ip ^ "/24"))
let tcp_ethertype = 0x88B5

type world = {
  vc : Clock.Virtual.clock;
  clock : Clock.t;
  pool : Pool.t;
  a : Ipstack.t;
  b : Ipstack.t;
}

(* A device that passes [d]'s frames through [drop] on the way out: those
   for which it holds vanish, and [reply] may answer one (a router's ICMP
   error): the frame it gives comes back to the sender a millisecond later. *)
let filtered ~clock ~pool ?(reply = fun _ -> None) drop d =
  let out = ref None in
  let send p =
    let f = Packet.cstruct p in
    if drop f then begin
      (match (reply f, !out) with
      | Some frame, Some o ->
          ignore
            (clock.Clock.at
               (clock.now () + Time.of_ms 1)
               (fun () -> Device.deliver o (Packet.of_string pool frame))
              : Clock.cancel)
      | _ -> ());
      Packet.release p;
      Ok ()
    end
    else Device.send d p
  in
  let o = Device.v ~name:(Device.name d) ~mac:(Device.mac d) ~mtu:(Device.mtu d) ~send () in
  out := Some o;
  Device.set_receive d (Device.deliver o);
  o

let world ?(drop = fun _ -> false) ?reply ~seed impair =
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = Pool.create ~name:"stacks" () in
  let da, db = Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool mac_a mac_b in
  let da = filtered ~clock ~pool ?reply drop da and db = filtered ~clock ~pool drop db in
  let wrap seed d = Impair.device (Impair.wrap ~clock ~seed ~pool impair d) in
  let a = Ipstack.create ~clock ~pool ~address:(prefix ip_a) (wrap seed da) in
  let b = Ipstack.create ~clock ~pool ~address:(prefix ip_b) (wrap (seed + 1) db) in
  { vc; clock; pool; a; b }

module type NODE = sig
  type host

  module T : Tcp.S with type host = host
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
end

let over_ip ?config ?icmp w (s : Ipstack.t) local ~seed : (module NODE with type host = Ipv4_addr.t)
    =
  let module P =
    (val Net_test_util.Tcp_params.ipv4 ~clock:w.clock ~pool:w.pool ~rng:(Rng.create seed) local)
  in
  let module T = Tcp.Make (Ipv4.Df (Ipstack.Ip)) (P) in
  let tcp = Result.get_ok (T.create ?config ?icmp s.ip) in
  (module struct
    type host = Ipv4_addr.t

    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

(* TCP over IPv6 through the same functor: the IPv6 pseudo-header
   checksum, ICMPv6 errors read by {!Tcp_icmp.of_ipv6}. *)
let over_ip6 w (s : Ipstack.t) local ~seed : (module NODE with type host = Ipv6_addr.t) =
  let ip6 =
    Ipstack.Ip6.create
      ~address:Ipv6_addr.Prefix.{ addr = local; len = 64 }
      ~clock:w.clock ~pool:w.pool s.eth
  in
  let module P =
    (val Net_test_util.Tcp_params.ipv6 ~clock:w.clock ~pool:w.pool ~rng:(Rng.create seed) local)
  in
  let module T = Tcp.Make (Ipstack.Ip6) (P) in
  let tcp = Result.get_ok (T.create ~icmp:Tcp_icmp.of_ipv6 ip6) in
  (module struct
    type host = Ipv6_addr.t

    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

let over_ethernet w (s : Ipstack.t) local ~seed : (module NODE with type host = Mac_addr.t) =
  let module P = struct
    type host = Mac_addr.t
    type lower_address = Ethernet.address
    type lower_pattern = Ethernet.address_pattern

    let local = local
    let lower_address h = { Ethernet.dst = h; ethertype = tcp_ethertype }
    let lower_pattern = Ethernet.Ethertype tcp_ethertype
    let pseudo_header = None
    let equal_host = Mac_addr.equal
    let pp_host = Mac_addr.pp
    let clock = w.clock
    let rng = Rng.create seed
    let pool = w.pool
  end in
  let module T = Tcp.Make (Ipstack.Eth) (P) in
  let tcp = Result.get_ok (T.create s.eth) in
  (module struct
    type host = Mac_addr.t

    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

(* Send [n] bytes from A to B's port 80 and check them all; returns A's
   and B's TCP counters. *)
let bulk (type h) w (module A : NODE with type host = h) (module B : NODE with type host = h)
    (dst : h) n =
  let data = Tcp_harness.Transfer.payload ~seed:n n in
  let l = Result.get_ok (B.Sock.listen B.tcp 80) in
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
                if Cstruct.to_string (Cstruct.sub buf 0 k) <> Bytes.sub_string data !got k then
                  Alcotest.failf "bytes differ near %d" !got;
                got := !got + k;
                loop ())
        in
        loop ());
  Socket.Promise.upon (A.Sock.connect A.tcp dst 80) (function
    | Error e -> Alcotest.failf "connect: %a" Protocol.pp_error e
    | Ok s ->
        Socket.Promise.upon
          (A.Sock.write s (Cstruct.of_bytes data))
          (function
            | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e
            | Ok () ->
                A.Sock.shutdown s;
                Socket.Promise.upon (A.Sock.closed s) (fun r -> if r = Ok () then incr closed)));
  Clock.Virtual.run_until_idle ~limit:(Time.of_sec 3600.) w.vc;
  Alcotest.(check int) "bytes" n !got;
  Alcotest.(check bool) "end of stream" true !eof;
  Alcotest.(check int) "both closed" 2 !closed;
  Alcotest.(check int) "no buffer in use" 0 (Pool.in_use w.pool);
  (A.T.query A.tcp, B.T.query B.tcp)

let over_ipv4 () =
  let w =
    world ~seed:3
      {
        Impair.none with
        drop = 0.02;
        duplicate = 0.02;
        reorder = 0.05;
        corrupt = 0.02;
        reorder_delay = Time.of_ms 3;
        delay = Time.of_ms 1;
      }
  in
  let a = over_ip w w.a ip_a ~seed:1 and b = over_ip w w.b ip_b ~seed:2 in
  let sa, sb = bulk w a b ip_b (2 * 1024 * 1024) in
  Alcotest.(check bool)
    "corrupted segments caught by the checksum" true
    (sa.bad_checksum + sb.bad_checksum > 0);
  Alcotest.(check bool) "losses repaired" true (sa.retransmitted > 0)

(* Every TCP datagram leaves with Don't Fragment; a path that drops every
   datagram over 1000 bytes without a word (ICMP filtered) is found by
   probing, and the transfer completes. *)
let black_hole_ipv4 () =
  let tcp = ref 0 and without_df = ref 0 and dropped = ref 0 in
  let drop f =
    let ip = Cstruct.shift f 14 in
    if Cstruct.BE.get_uint16 f 12 = 0x0800 && Cstruct.get_uint8 ip 9 = 6 then begin
      incr tcp;
      if Cstruct.get_uint8 ip 6 land 0x40 = 0 then incr without_df
    end;
    let big = Cstruct.length ip > 1000 in
    if big then incr dropped;
    big
  in
  let w = world ~drop ~seed:5 { Impair.none with delay = Time.of_ms 2 } in
  let a = over_ip w w.a ip_a ~seed:1 and b = over_ip w w.b ip_b ~seed:2 in
  let sa, _ = bulk w a b ip_b (1024 * 1024) in
  Logs.app (fun m ->
      m "%d TCP datagrams, %d without DF, %d dropped by the black hole; %a" !tcp !without_df
        !dropped Tcp.pp_stats sa);
  Alcotest.(check bool) "TCP was seen" true (!tcp > 500);
  Alcotest.(check int) "DF on every TCP datagram" 0 !without_df;
  Alcotest.(check bool) "the black hole swallowed the first segments" true (!dropped > 0);
  Alcotest.(check bool) "and few others (probes)" true (!dropped < 40)

(* A router on the path whose next hop takes 1000 bytes: it drops every
   larger datagram from A and answers with ICMP fragmentation needed
   quoting, as RFC 792 has it, the IP header and the first 8 bytes of the
   payload only (so the quoted total length is over what is quoted). IPv4
   path MTU discovery alone (no probing) must shrink the segments and the
   transfer must complete without a timeout. *)
let pmtu_ipv4_icmp () =
  let router = Ipv4_addr.of_string_exn "10.1.0.254" in
  let errors = ref 0 in
  let big f = Cstruct.BE.get_uint16 f 12 = 0x0800 && Cstruct.length f - 14 > 1000 in
  let reply f =
    let ip = Cstruct.shift f 14 in
    if Cstruct.get_uint8 ip 9 <> 6 then None
    else begin
      incr errors;
      let hlen = Cstruct.get_uint8 ip 0 land 15 * 4 in
      let quote = Cstruct.to_string (Cstruct.sub ip 0 (hlen + 8)) in
      let icmp = Icmp_packet.to_string (Dest_unreachable (Frag_needed { mtu = 1000 })) quote in
      let hdr = Ipv4_packet.v ~proto:1 ~src:router ~dst:ip_a () in
      let eth = Bytes.create 16 in
      Bytes.set_int64_be eth 0 (Int64.of_int (Mac_addr.to_int mac_a lsl 16));
      Bytes.set_int64_be eth 6 (Int64.of_int (Mac_addr.to_int mac_b lsl 16));
      Bytes.set_uint16_be eth 12 0x0800;
      let eth = Bytes.sub eth 0 14 in
      Some (Bytes.to_string eth ^ Ipv4_packet.to_string hdr icmp)
    end
  in
  let w = world ~drop:big ~reply ~seed:7 { Impair.none with delay = Time.of_ms 2 } in
  let config = { Tcp.default_config with plpmtud = false; max_retransmits = 4 } in
  let a = over_ip ~config ~icmp:Tcp_icmp.of_ipv4 w w.a ip_a ~seed:1
  and b = over_ip ~config w w.b ip_b ~seed:2 in
  let sa, _ = bulk w a b ip_b (512 * 1024) in
  Logs.app (fun m -> m "%d ICMP errors sent by the router; %a" !errors Tcp.pp_stats sa);
  Alcotest.(check bool) "the router answered" true (!errors > 0);
  Alcotest.(check bool) (Fmt.str "few errors (%d): the size was learnt" !errors) true (!errors < 40);
  Alcotest.(check bool)
    (Fmt.str "few retransmissions (%d)" sa.retransmitted)
    true (sa.retransmitted < 40)

let ip6_a = Ipv6_addr.of_string_exn "fd01::a"
let ip6_b = Ipv6_addr.of_string_exn "fd01::b"

let over_ipv6 () =
  let w =
    world ~seed:6
      {
        Impair.none with
        drop = 0.02;
        duplicate = 0.02;
        reorder = 0.05;
        corrupt = 0.02;
        reorder_delay = Time.of_ms 3;
        delay = Time.of_ms 1;
      }
  in
  let a = over_ip6 w w.a ip6_a ~seed:1 and b = over_ip6 w w.b ip6_b ~seed:2 in
  let sa, sb = bulk w a b ip6_b (2 * 1024 * 1024) in
  Alcotest.(check bool)
    "corrupted segments caught by the checksum" true
    (sa.bad_checksum + sb.bad_checksum > 0);
  Alcotest.(check bool) "losses repaired" true (sa.retransmitted > 0)

let over_raw_ethernet () =
  let w = world ~seed:4 { Impair.none with drop = 0.02; duplicate = 0.02; delay = Time.of_ms 1 } in
  let a = over_ethernet w w.a mac_a ~seed:1 and b = over_ethernet w w.b mac_b ~seed:2 in
  let sa, sb = bulk w a b mac_b (2 * 1024 * 1024) in
  Alcotest.(check int) "no checksum, so none bad" 0 (sa.bad_checksum + sb.bad_checksum);
  Alcotest.(check bool) "losses repaired" true (sa.retransmitted > 0)

let tests =
  [
    Alcotest.test_case "over IPv4 and Ethernet, with loss, duplication, reordering, corruption"
      `Quick over_ipv4;
    Alcotest.test_case "straight over Ethernet, checksums off (Fox Fig. 2)" `Quick over_raw_ethernet;
    Alcotest.test_case "over IPv6 (same functor), with loss, duplication, reordering, corruption"
      `Quick over_ipv6;
    Alcotest.test_case "over IPv4: DF on every segment; a black hole found by probing" `Quick
      black_hole_ipv4;
    Alcotest.test_case "over IPv4: ICMP fragmentation needed quoting 8 bytes shrinks segments"
      `Quick pmtu_ipv4_icmp;
  ]
