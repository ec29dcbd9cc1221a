(* IPv6 on the in-memory pair: neighbour discovery, ICMPv6 echo and
   errors, UDP over IPv6 through the same UDP functor, fragments on
   receive (bounded), and a neighbour-cache flood. *)

open Consort
open Consort_net
open T_stack
module S = Ipstack
module Ip6 = Ipv6.Make (S.Eth)
module Udp6 = Udp.Over (Udp.Over_ipv6 (Ip6)) (Checksum.On)

let a6 = Ipv6_addr.of_string_exn "fd00::1"
let b6 = Ipv6_addr.of_string_exn "fd00::2"
let prefix6 a = Ipv6_addr.Prefix.{ addr = a; len = 64 }

type w6 = { w : world; ipa : Ip6.t; ipb : Ip6.t; ua : Udp6.t; ub : Udp6.t }

let world6 ?config () =
  let w = world () in
  let ipa = Ip6.create ?config ~address:(prefix6 a6) ~clock:w.clock ~pool:w.pool w.a.eth in
  let ipb = Ip6.create ?config ~address:(prefix6 b6) ~clock:w.clock ~pool:w.pool w.b.eth in
  { w; ipa; ipb; ua = Udp6.create ipa; ub = Udp6.create ipb }

let echo_request ~id ~seq payload =
  Printf.sprintf "\x80\x00\x00\x00%c%c%c%c%s"
    (Char.chr (id lsr 8))
    (Char.chr (id land 255))
    (Char.chr (seq lsr 8))
    (Char.chr (seq land 255))
    payload

(* Pings [dst] from [ip]; the replies' payloads. *)
let ping (x : w6) ip dst n =
  let got = ref [] in
  let c =
    ok
      (Ip6.active_open ip { dst; proto = 58 } (fun _ ->
           {
             Ip6.receive =
               (fun _ p ->
                 let s = Packet.to_string p in
                 if Char.code s.[0] = 129 then got := String.sub s 8 (String.length s - 8) :: !got;
                 Packet.release p);
             status = (fun _ _ -> ());
           }))
  in
  for i = 1 to n do
    ok
      (Ip6.send c
         (Packet.of_string ~headroom:(Ip6.headroom ip) x.w.pool
            (echo_request ~id:7 ~seq:i (Printf.sprintf "ping %d" i))));
    run x.w
  done;
  Ip6.close c;
  List.rev !got

let ping6 () =
  let x = world6 () in
  Alcotest.(check (list string))
    "three replies" [ "ping 1"; "ping 2"; "ping 3" ] (ping x x.ipa b6 3);
  Alcotest.(check (option string))
    "A resolved B by neighbour discovery"
    (Some (Mac_addr.to_string mac_b))
    (Option.map Mac_addr.to_string (Ip6.lookup x.ipa b6));
  Alcotest.(check (option string))
    "B learnt A from the solicitation"
    (Some (Mac_addr.to_string mac_a))
    (Option.map Mac_addr.to_string (Ip6.lookup x.ipb a6));
  let ia = Ip6.query x.ipa and ib = Ip6.query x.ipb in
  Alcotest.(check int) "one solicitation" 1 ia.version.solicitations_sent;
  Alcotest.(check int) "one advertisement" 1 ib.version.advertisements_sent;
  Alcotest.(check int) "three echo replies" 3 ib.version.echo_replies_sent;
  (* Link-local addresses work with no configured address. *)
  Alcotest.(check (list string))
    "link-local ping" [ "ping 1" ]
    (ping x x.ipb (Ip6.link_local x.ipa) 1);
  Alcotest.(check string)
    "link-local from the MAC" "fe80::ff:fe00:1"
    (Ipv6_addr.to_string (Ip6.link_local x.ipa));
  finish x.w

let udp6_collect () =
  let got = ref [] in
  ( got,
    fun _ ->
      {
        Udp6.receive =
          (fun _ p ->
            got := Packet.to_string p :: !got;
            Packet.release p);
        status = (fun _ _ -> ());
      } )

let udp6 () =
  let x = world6 () in
  ok
    (Udp6.passive_open x.ub (Udp.Port 7) (fun _ ->
         { Udp6.receive = (fun c p -> ignore (Udp6.send c p)); status = (fun _ _ -> ()) }));
  let got, h = udp6_collect () in
  let c = ok (Udp6.active_open x.ua { dst = b6; dst_port = 7; src_port = 0 } h) in
  let data = List.init 20 (fun i -> String.make (1 + (i * 70)) (Char.chr (65 + i))) in
  (* Neighbour discovery first: while it runs only 16 packets wait. *)
  List.iteri
    (fun i d ->
      ok (Udp6.send c (Packet.of_string ~headroom:(Udp6.headroom x.ua) x.w.pool d));
      if i = 0 then run x.w)
    data;
  run x.w;
  Alcotest.(check (list string)) "echoed over IPv6" data (List.rev !got);
  (* Above the link's MTU the datagram goes in fragments (RFC 8200
     section 4.5), both ways, and comes back whole; over 65,535 bytes with
     the fragment header it is too big. *)
  got := [];
  let big =
    List.map
      (fun n -> String.init n (fun i -> Char.chr (i * 7 land 0xff)))
      [ 1453; 4000; 20000; 60000 ]
  in
  List.iter
    (fun d -> ok (Udp6.send c (Packet.of_string ~headroom:(Udp6.headroom x.ua) x.w.pool d)))
    big;
  run x.w;
  Alcotest.(check (list int))
    "fragmented and echoed whole" (List.map String.length big) (List.rev_map String.length !got);
  Alcotest.(check bool) "the same bytes" true (List.rev !got = big);
  Alcotest.(check bool)
    "over 65,535 bytes: too big" true
    (match
       Udp6.send c
         (Packet.of_string ~headroom:(Udp6.headroom x.ua) x.w.pool (String.make 65528 'x'))
     with
    | Error (`Too_big _) -> true
    | _ -> false);
  (* Port unreachable comes back as ICMPv6 and reaches the sender. *)
  let told = ref [] in
  let d =
    ok
      (Udp6.active_open x.ua { dst = b6; dst_port = 9999; src_port = 0 } (fun _ ->
           {
             Udp6.receive = (fun _ p -> Packet.release p);
             status = (fun _ (Udp.Unreachable u) -> told := u :: !told);
           }))
  in
  ok (Udp6.send d (Packet.of_string ~headroom:(Udp6.headroom x.ua) x.w.pool "anyone?"));
  run x.w;
  Alcotest.(check (list string))
    "port unreachable" [ "port unreachable" ]
    (List.map (Fmt.to_to_string Icmp_packet.pp_unreachable) !told);
  (* A zero UDP checksum is refused over IPv6. *)
  let before = (Udp6.query x.ub).bad in
  let frame =
    Ethernet_packet.to_string
      { dst = mac_b; src = mac_a; ethertype = 0x86dd }
      (let udp = Udp_packet.to_string { src_port = 5; dst_port = 7 } "no sum" in
       let h = Bytes.make 40 '\000' in
       Bytes.set h 0 '\x60';
       Bytes.set_uint16_be h 4 (String.length udp);
       Bytes.set h 6 '\017';
       Bytes.set h 7 '\064';
       Bytes.blit_string (Ipv6_addr.to_octets a6) 0 h 8 16;
       Bytes.blit_string (Ipv6_addr.to_octets b6) 0 h 24 16;
       Bytes.to_string h ^ udp)
  in
  Device.deliver x.w.dev_b (packet x.w frame);
  run x.w;
  Alcotest.(check int) "zero checksum refused" (before + 1) (Udp6.query x.ub).bad;
  Udp6.close c;
  Udp6.close d;
  finish x.w

(* A UDP datagram from A to B's port, cut into IPv6 fragments. *)
let udp6_datagram payload =
  let len = 8 + String.length payload in
  let pseudo = Transport_checksum.ipv6 ~src:a6 ~dst:b6 ~proto:17 ~len in
  Udp_packet.to_string ~pseudo { src_port = 5000; dst_port = 4000 } payload

let frag_frame ~id ~off ~more ~next chunk =
  let h = Bytes.make 48 '\000' in
  Bytes.set h 0 '\x60';
  Bytes.set_uint16_be h 4 (8 + String.length chunk);
  Bytes.set h 6 '\044';
  Bytes.set h 7 '\064';
  Bytes.blit_string (Ipv6_addr.to_octets a6) 0 h 8 16;
  Bytes.blit_string (Ipv6_addr.to_octets b6) 0 h 24 16;
  Bytes.set h 40 (Char.chr next);
  Bytes.set_uint16_be h 42 (off lor if more then 1 else 0);
  Bytes.set_int32_be h 44 (Int32.of_int id);
  Ethernet_packet.to_string
    { dst = mac_b; src = mac_a; ethertype = 0x86dd }
    (Bytes.to_string h ^ chunk)

let fragments6 () =
  let reassembly =
    { Ipv4.timeout = Time.of_sec 10.; max_bytes = 32 * 1024; max_fragments = 8; max_datagrams = 4 }
  in
  let x = world6 ~config:{ Ipv6.default_config with reassembly } () in
  let got, h = udp6_collect () in
  ok (Udp6.passive_open x.ub (Udp.Port 4000) h);
  let inject s = Device.deliver x.w.dev_b (packet x.w s) in
  let d = udp6_datagram (String.init 3000 (fun i -> Char.chr (i land 255))) in
  (* Out of order, with a duplicate. *)
  inject (frag_frame ~id:1 ~off:1456 ~more:true ~next:17 (String.sub d 1456 1456));
  inject (frag_frame ~id:1 ~off:0 ~more:true ~next:17 (String.sub d 0 1456));
  inject (frag_frame ~id:1 ~off:0 ~more:true ~next:17 (String.sub d 0 1456));
  inject
    (frag_frame ~id:1 ~off:2912 ~more:false ~next:17 (String.sub d 2912 (String.length d - 2912)));
  Alcotest.(check (list int)) "reassembled" [ 3000 ] (List.map String.length !got);
  Alcotest.(check int) "counted" 1 (Ip6.query x.ipb).reassembled;
  (* Overlap (RFC 5722): the datagram is dropped. *)
  inject (frag_frame ~id:2 ~off:0 ~more:true ~next:17 (String.sub d 0 16));
  inject (frag_frame ~id:2 ~off:8 ~more:false ~next:17 (String.sub d 8 16));
  Alcotest.(check int) "overlap dropped" 1 (Ip6.query x.ipb).reassembly_dropped;
  (* Bounds: 6 datagrams started, only 4 kept, the rest time out. *)
  for id = 10 to 15 do
    inject (frag_frame ~id ~off:0 ~more:true ~next:17 (String.make 1000 'x'))
  done;
  Alcotest.(check int) "two over the datagram limit" 3 (Ip6.query x.ipb).reassembly_dropped;
  advance x.w (Time.of_sec 11.);
  Alcotest.(check int) "four timed out" 4 (Ip6.query x.ipb).reassembly_timeouts;
  Alcotest.(check int) "their buffers released" 0 (Pool.in_use x.w.pool);
  Alcotest.(check int) "one datagram delivered in all" 1 (List.length !got);
  finish x.w

(* Solicitations from 20,000 random neighbours: the cache stays bounded
   and A is still served. *)
let nd_flood () =
  let x = world6 () in
  let st = Random.State.make [| 6 |] in
  let ns ~src ~mac =
    let body = Bytes.make 32 '\000' in
    Bytes.set body 0 '\135';
    Bytes.blit_string (Ipv6_addr.to_octets b6) 0 body 8 16;
    Bytes.set body 24 '\001';
    Bytes.set body 25 '\001';
    for i = 0 to 5 do
      Bytes.set body (26 + i) (Char.chr ((Mac_addr.to_int mac lsr (8 * (5 - i))) land 255))
    done;
    let dst = Ipv6_addr.solicited_node b6 in
    let sum = Transport_checksum.ipv6 ~src ~dst ~proto:58 ~len:32 in
    let ck = Checksum.digest ~init:sum (Cstruct.of_bytes body) in
    Bytes.set_uint16_be body 2 ck;
    let h = Bytes.make 40 '\000' in
    Bytes.set h 0 '\x60';
    Bytes.set_uint16_be h 4 32;
    Bytes.set h 6 '\058';
    Bytes.set h 7 '\255';
    Bytes.blit_string (Ipv6_addr.to_octets src) 0 h 8 16;
    Bytes.blit_string (Ipv6_addr.to_octets dst) 0 h 24 16;
    Ethernet_packet.to_string
      { dst = Ipv6_addr.multicast_mac dst; src = mac; ethertype = 0x86dd }
      (Bytes.to_string h ^ Bytes.to_string body)
  in
  Iovec.set_checked false;
  for i = 1 to 20_000 do
    let src =
      Ipv6_addr.of_octets_exn
        ("\xfd\000\000\000\000\000\000\000"
        ^ String.init 8 (fun _ -> Char.chr (Random.State.int st 256)))
    in
    let mac =
      Mac_addr.of_int ((Random.State.bits st lsl 16) land 0xfcff_ffff_ffff lor 0x0200_0000_0000)
    in
    Device.deliver x.w.dev_b (packet x.w (ns ~src ~mac));
    if i mod 100 = 0 then advance x.w (Time.of_ms 1)
  done;
  Iovec.set_checked true;
  let i = Ip6.query x.ipb in
  Alcotest.(check int) "every solicitation answered" 20_000 i.version.advertisements_sent;
  Alcotest.(check bool)
    (Fmt.str "neighbour cache bounded (%d)" (List.length i.version.neighbours))
    true
    (List.length i.version.neighbours <= 1024);
  Alcotest.(check (list string)) "A still served" [ "ping 1" ] (ping x x.ipa b6 1);
  finish x.w

let martians6 () =
  let x = world6 () in
  let got, h = udp6_collect () in
  ok (Udp6.passive_open x.ub (Udp.Port 4000) h);
  let from src =
    let d =
      Udp_packet.to_string
        ~pseudo:(Transport_checksum.ipv6 ~src ~dst:b6 ~proto:17 ~len:10)
        { src_port = 1; dst_port = 4000 } "hi"
    in
    let h = Bytes.make 40 '\000' in
    Bytes.set h 0 '\x60';
    Bytes.set_uint16_be h 4 (String.length d);
    Bytes.set h 6 '\017';
    Bytes.set h 7 '\064';
    Bytes.blit_string (Ipv6_addr.to_octets src) 0 h 8 16;
    Bytes.blit_string (Ipv6_addr.to_octets b6) 0 h 24 16;
    Ethernet_packet.to_string
      { dst = mac_b; src = mac_a; ethertype = 0x86dd }
      (Bytes.to_string h ^ d)
  in
  List.iter
    (fun a -> Device.deliver x.w.dev_b (packet x.w (from (Ipv6_addr.of_string_exn a))))
    [ "::1"; "ff02::1"; "fd00::2" ];
  Alcotest.(check int) "none delivered" 0 (List.length !got);
  Alcotest.(check int) "counted bad" 3 (Ip6.query x.ipb).bad;
  Device.deliver x.w.dev_b (packet x.w (from a6));
  Alcotest.(check int) "a good one passes" 1 (List.length !got);
  finish x.w

(* Extension headers (RFC 8200 4.1, 4.2): a UDP datagram from A to B
   behind a chain of [(header, options)], each header's options padded to
   its length by the caller (6 + 8k bytes). *)
let with_headers chain =
  let d = udp6_datagram "opts" in
  let protos = List.map fst chain @ [ 17 ] in
  let exts =
    List.mapi
      (fun i (_, opts) ->
        let len = 2 + String.length opts in
        assert (len mod 8 = 0);
        String.make 1 (Char.chr (List.nth protos (i + 1)))
        ^ String.make 1 (Char.chr ((len / 8) - 1))
        ^ opts)
      chain
  in
  let body = String.concat "" exts ^ d in
  let h = Bytes.make 40 '\000' in
  Bytes.set h 0 '\x60';
  Bytes.set_uint16_be h 4 (String.length body);
  Bytes.set h 6 (Char.chr (List.hd protos));
  Bytes.set h 7 '\064';
  Bytes.blit_string (Ipv6_addr.to_octets a6) 0 h 8 16;
  Bytes.blit_string (Ipv6_addr.to_octets b6) 0 h 24 16;
  Ethernet_packet.to_string
    { dst = mac_b; src = mac_a; ethertype = 0x86dd }
    (Bytes.to_string h ^ body)

(* Six bytes of options: Pad1, an option of type [ty] with one byte of data, PadN of two. *)
let opts ty = "\000" ^ String.make 1 (Char.chr ty) ^ "\001\000" ^ "\001\000"

let ext_headers6 () =
  let x = world6 () in
  let got, h = udp6_collect () in
  ok (Udp6.passive_open x.ub (Udp.Port 4000) h);
  let send chain = Device.deliver x.w.dev_b (packet x.w (with_headers chain)) in
  let delivered () = List.length !got and errors () = (Ip6.query x.ipb).icmp_errors_sent in
  (* Padding and an unknown option whose type says skip it (00): delivered. *)
  send [ (0, opts 0x1e) ];
  send [ (0, opts 0x05); (60, opts 0x1e) ];
  Alcotest.(check int) "skippable options: delivered" 2 (delivered ());
  (* Unknown, type 01: discarded, no error. *)
  send [ (60, opts 0x42) ];
  Alcotest.(check int) "01: discarded" 2 (delivered ());
  Alcotest.(check int) "01: no error" 0 (errors ());
  (* Unknown 0xC2 (11, the jumbo payload, which this stack does not take): discarded, a parameter
     problem to a unicast source. *)
  send [ (60, opts 0xC2) ];
  Alcotest.(check int) "0xC2: discarded" 2 (delivered ());
  Alcotest.(check int) "0xC2: parameter problem sent" 1 (errors ());
  send [ (0, opts 0x82) ];
  Alcotest.(check int) "10: discarded" 2 (delivered ());
  Alcotest.(check int) "10: parameter problem sent" 2 (errors ());
  (* A hop-by-hop header that is not first: discarded, unrecognized next header. *)
  send [ (60, opts 0x1e); (0, opts 0x1e) ];
  Alcotest.(check int) "hop-by-hop not first: discarded" 2 (delivered ());
  Alcotest.(check int) "hop-by-hop not first: parameter problem" 3 (errors ());
  (* An option running past its header. *)
  send [ (60, "\001\002\000\000\001\009") ];
  Alcotest.(check int) "an option past its header: discarded" 2 (delivered ());
  send [ (60, opts 0x1e) ];
  Alcotest.(check int) "and the next good one delivered" 3 (delivered ());
  finish x.w

let addresses () =
  let t s = Ipv6_addr.to_string (Ipv6_addr.of_string_exn s) in
  List.iter
    (fun (i, o) -> Alcotest.(check string) i o (t i))
    [
      ("2001:db8:0:0:0:0:2:1", "2001:db8::2:1");
      ("2001:DB8::1", "2001:db8::1");
      ("::", "::");
      ("::1", "::1");
      ("1::", "1::");
      ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1");
      ("2001:0:0:1:0:0:0:1", "2001:0:0:1::1");
      ("::ffff:10.0.0.1", "::ffff:a00:1");
      ("fe80::ff:fe00:1", "fe80::ff:fe00:1");
    ];
  List.iter
    (fun s ->
      Alcotest.(check bool) ("refused: " ^ s) true (Result.is_error (Ipv6_addr.of_string s)))
    [
      "";
      ":";
      ":::";
      "1::2::3";
      "1:2:3:4:5:6:7:8:9";
      "12345::";
      "g::";
      "1:2:3:4:5:6:7";
      "::1:";
      ":1::";
    ];
  Alcotest.(check string)
    "solicited node" "ff02::1:ff00:2"
    (Ipv6_addr.to_string (Ipv6_addr.solicited_node b6));
  Alcotest.(check bool) "prefix" true (Ipv6_addr.Prefix.mem b6 (prefix6 a6));
  Alcotest.(check bool)
    "not in prefix" false
    (Ipv6_addr.Prefix.mem (Ipv6_addr.of_string_exn "fd01::2") (prefix6 a6))

let address_roundtrip =
  Util.qtest "IPv6 text form round trip"
    QCheck.(string_of_size (Gen.return 16))
    (fun s ->
      let a = Ipv6_addr.of_octets_exn s in
      Ipv6_addr.equal a (Ipv6_addr.of_string_exn (Ipv6_addr.to_string a)))

(* First fragments that never complete: the oldest are given up and a
   real fragmented datagram still gets through. *)
let fragment_flood6 () =
  let x = world6 () in
  let got, h = udp6_collect () in
  ok (Udp6.passive_open x.ub (Udp.Port 4000) h);
  for id = 1 to 5000 do
    Device.deliver x.w.dev_b
      (packet x.w (frag_frame ~id:(id + 100) ~off:0 ~more:true ~next:17 (String.make 1000 'f')))
  done;
  let d = udp6_datagram (String.make 1500 'r') in
  Device.deliver x.w.dev_b
    (packet x.w (frag_frame ~id:1 ~off:0 ~more:true ~next:17 (String.sub d 0 1000)));
  Device.deliver x.w.dev_b
    (packet x.w
       (frag_frame ~id:1 ~off:1000 ~more:false ~next:17
          (String.sub d 1000 (String.length d - 1000))));
  Alcotest.(check (list int)) "the real datagram reassembled" [ 1500 ] (List.map String.length !got);
  Alcotest.(check bool)
    "the oldest given up" true
    ((Ip6.query x.ipb).reassembly_dropped >= 5000 - 64);
  advance x.w (Time.of_sec 61.);
  finish x.w

let suite =
  [
    Alcotest.test_case "a flood of IPv6 fragments: the oldest given up" `Quick fragment_flood6;
    Alcotest.test_case "addresses: text forms" `Quick addresses;
    address_roundtrip;
    Alcotest.test_case "ping6 with neighbour discovery" `Quick ping6;
    Alcotest.test_case "UDP over IPv6, port unreachable" `Quick udp6;
    Alcotest.test_case "IPv6 fragments: reassembly and bounds" `Quick fragments6;
    Alcotest.test_case "neighbour solicitation flood: bounded" `Quick nd_flood;
    Alcotest.test_case "IPv6 martian sources refused" `Quick martians6;
    Alcotest.test_case "IPv6 options and hop-by-hop as RFC 8200 says" `Quick ext_headers6;
  ]
