open Consort_net
open Util

let mac =
  QCheck.Gen.(
    map
      (fun n -> Mac_addr.of_int n)
      (int_bound 0x3fff_ffff >>= fun a -> map (fun b -> (a lsl 18) lor b) (int_bound 0x3ffff)))

let ip =
  QCheck.Gen.(
    map2 (fun a b -> Ipv4_addr.of_int ((a lsl 16) lor b)) (int_bound 0xffff) (int_bound 0xffff))

let u16 = QCheck.Gen.int_bound 0xffff
let u8 = QCheck.Gen.int_bound 0xff
let payload = QCheck.Gen.(string_size (0 -- 200))

let no_raise name decode =
  qtest ~count:2000
    ("random bytes never raise: " ^ name)
    QCheck.(string_of_size Gen.(0 -- 100))
    (fun s ->
      (try ignore (decode (Cstruct.of_string s))
       with e -> QCheck.Test.fail_reportf "raised %s" (Printexc.to_string e));
      true)

let ethernet_roundtrip =
  let gen =
    QCheck.Gen.(map3 (fun dst src ethertype -> Ethernet_packet.{ dst; src; ethertype }) mac mac u16)
  in
  qtest "ethernet round trip"
    (QCheck.make
       ~print:(Fmt.to_to_string Fmt.(pair Ethernet_packet.pp string))
       QCheck.Gen.(pair gen payload))
    (fun (h, p) ->
      match Ethernet_packet.decode (Cstruct.of_string (Ethernet_packet.to_string h p)) with
      | Ok (h', p') -> Ethernet_packet.equal h h' && Cstruct.to_string p' = p
      | Error _ -> false)

let arp_roundtrip =
  let gen =
    QCheck.Gen.(
      map
        (fun (op, sha, spa, (tha, tpa)) ->
          Arp_packet.{ op = (if op then Request else Reply); sha; spa; tha; tpa })
        (quad bool mac ip (pair mac ip)))
  in
  qtest "arp round trip"
    (QCheck.make ~print:(Fmt.to_to_string Arp_packet.pp) gen)
    (fun a -> Arp_packet.decode (Cstruct.of_string (Arp_packet.to_string a)) = Ok a)

let ipv4_gen =
  QCheck.Gen.(
    map
      (fun ((tos, id, df, mf), (fo, ttl, proto), (src, dst), opts) ->
        Ipv4_packet.
          {
            tos;
            id;
            df;
            mf;
            frag_offset = fo * 8;
            ttl;
            proto;
            src;
            dst;
            options = String.make (4 * opts) '\001';
          })
      (quad (quad u8 u16 bool bool) (triple (int_bound 0x1fff) u8 u8) (pair ip ip) (int_bound 10)))

let ipv4_roundtrip =
  qtest "ipv4 round trip"
    (QCheck.make
       ~print:(Fmt.to_to_string Fmt.(pair Ipv4_packet.pp string))
       QCheck.Gen.(pair ipv4_gen payload))
    (fun (h, p) ->
      let s = Ipv4_packet.to_string h p in
      (* Ethernet padding after the datagram is dropped. *)
      match Ipv4_packet.decode (Cstruct.of_string (s ^ "\000\000\000")) with
      | Ok (h', p') -> Ipv4_packet.equal h h' && Cstruct.to_string p' = p
      | Error (`Msg m) -> QCheck.Test.fail_reportf "%s" m)

let ipv4_corrupt =
  qtest "ipv4 header with a flipped bit is rejected"
    (QCheck.make QCheck.Gen.(triple ipv4_gen (int_bound 159) payload))
    (fun (h, bit, p) ->
      let cs = Cstruct.of_string (Ipv4_packet.to_string h p) in
      let byte = bit / 8 in
      Cstruct.set_uint8 cs byte (Cstruct.get_uint8 cs byte lxor (1 lsl (bit land 7)));
      match Ipv4_packet.decode cs with Ok _ -> false | Error _ -> true)

let icmp_gen =
  QCheck.Gen.(
    oneof
      [
        map2 (fun id seq -> Icmp_packet.Echo_request { id; seq }) u16 u16;
        map2 (fun id seq -> Icmp_packet.Echo_reply { id; seq }) u16 u16;
        map
          (fun u -> Icmp_packet.Dest_unreachable u)
          (oneofl
             Icmp_packet.
               [ Net; Host; Protocol; Port; Frag_needed { mtu = 1400 }; Other_unreachable 13 ]);
        map (fun code -> Icmp_packet.Time_exceeded { code }) u8;
        map2
          (fun ty rest -> Icmp_packet.Other { ty; code = 7; rest })
          (oneofl [ 5; 13; 42 ])
          (int_bound 0x3fff_ffff);
      ])

let icmp_roundtrip =
  qtest "icmp round trip"
    (QCheck.make
       ~print:(Fmt.to_to_string Fmt.(pair Icmp_packet.pp string))
       QCheck.Gen.(pair icmp_gen payload))
    (fun (m, p) ->
      match Icmp_packet.decode (Cstruct.of_string (Icmp_packet.to_string m p)) with
      | Ok (m', p') -> Icmp_packet.equal m m' && Cstruct.to_string p' = p
      | Error _ -> false)

let udp_roundtrip =
  qtest "udp round trip, with and without checksum"
    (QCheck.make QCheck.Gen.(quad u16 u16 payload (pair ip ip)))
    (fun (src_port, dst_port, p, (a, b)) ->
      let h = Udp_packet.{ src_port; dst_port } in
      let pseudo = Checksum.pseudo_ipv4 ~src:a ~dst:b ~proto:17 ~len:(8 + String.length p) in
      let ok pseudo s =
        match Udp_packet.decode ?pseudo (Cstruct.of_string s) with
        | Ok (h', p') -> Udp_packet.equal h h' && Cstruct.to_string p' = p
        | Error _ -> false
      in
      ok (Some pseudo) (Udp_packet.to_string ~pseudo h p)
      && ok (Some pseudo) (Udp_packet.to_string h p)
      && ok None (Udp_packet.to_string ~pseudo h p))

let udp_bad_checksum () =
  let a = Ipv4_addr.v 10 0 0 1 and b = Ipv4_addr.v 10 0 0 2 in
  let pseudo = Checksum.pseudo_ipv4 ~src:a ~dst:b ~proto:17 ~len:13 in
  let s = Bytes.of_string (Udp_packet.to_string ~pseudo { src_port = 1; dst_port = 2 } "hello") in
  Bytes.set s 10 'X';
  match Udp_packet.decode ~pseudo (Cstruct.of_bytes s) with
  | Ok _ -> Alcotest.fail "corrupted datagram accepted"
  | Error _ -> ()

let addresses () =
  Alcotest.(check string)
    "ip" "192.168.7.1"
    (Ipv4_addr.to_string (Ipv4_addr.of_string_exn "192.168.7.1"));
  Alcotest.(check bool) "bad ip" true (Result.is_error (Ipv4_addr.of_string "1.2.3.256"));
  Alcotest.(check bool) "bad ip 2" true (Result.is_error (Ipv4_addr.of_string "1.2.3"));
  let p = Result.get_ok (Ipv4_addr.Prefix.of_string "10.1.2.3/24") in
  Alcotest.(check string)
    "netmask" "255.255.255.0"
    (Ipv4_addr.to_string (Ipv4_addr.Prefix.netmask p));
  Alcotest.(check string)
    "broadcast" "10.1.2.255"
    (Ipv4_addr.to_string (Ipv4_addr.Prefix.broadcast p));
  Alcotest.(check bool) "mem" true (Ipv4_addr.Prefix.mem (Ipv4_addr.v 10 1 2 99) p);
  Alcotest.(check bool) "not mem" false (Ipv4_addr.Prefix.mem (Ipv4_addr.v 10 1 3 99) p);
  Alcotest.(check bool)
    "bad prefix" true
    (Result.is_error (Ipv4_addr.Prefix.of_string "10.1.2.3/33"));
  Alcotest.(check string)
    "mac" "02:ab:00:00:00:ff"
    (Mac_addr.to_string (Mac_addr.of_string_exn "02:AB:00:00:00:ff"));
  Alcotest.(check bool) "bad mac" true (Result.is_error (Mac_addr.of_string "02:ab:00:00:00:-1"));
  Alcotest.(check bool) "broadcast is group" true (Mac_addr.is_group Mac_addr.broadcast);
  Alcotest.(check bool) "local is unicast" false (Mac_addr.is_group (Mac_addr.local 7))

(* IPv4 and IPv6 prefixes, read by one parser: the lengths each allows, the errors each says. *)
let prefixes () =
  let v4 s =
    match Ipv4_addr.Prefix.of_string s with
    | Ok p -> Ipv4_addr.Prefix.to_string p
    | Error (`Msg m) -> "error: " ^ m
  and v6 s =
    match Ipv6_addr.Prefix.of_string s with
    | Ok p -> Ipv6_addr.Prefix.to_string p
    | Error (`Msg m) -> "error: " ^ m
  in
  let check f cases = List.iter (fun (s, want) -> Alcotest.(check string) s want (f s)) cases in
  check v4
    [
      ("10.1.2.3/0", "10.1.2.3/0");
      ("10.1.2.3/32", "10.1.2.3/32");
      ("10.1.2.3/33", "error: bad prefix length in \"10.1.2.3/33\"");
      ("10.1.2.3/+8", "error: bad prefix length in \"10.1.2.3/+8\"");
      ("10.1.2.3/-0", "error: bad prefix length in \"10.1.2.3/-0\"");
      ("10.1.2.3/", "error: bad prefix length in \"10.1.2.3/\"");
      ("10.1.2.3", "error: bad prefix \"10.1.2.3\": expected ADDR/LEN");
    ];
  Alcotest.(check bool)
    "a bad IPv4 address is an error" true
    (Result.is_error (Ipv4_addr.Prefix.of_string "10.1.2/8"));
  check v6
    [
      ("2001:db8::1/0", "2001:db8::1/0");
      ("2001:db8::1/128", "2001:db8::1/128");
      ("2001:db8::1/64", "2001:db8::1/64");
      ("2001:db8::1/129", "error: \"2001:db8::1/129\": a prefix length is 0 to 128");
      ("2001:db8::1/+64", "error: \"2001:db8::1/+64\": a prefix length is 0 to 128");
      ("2001:db8::1/-0", "error: \"2001:db8::1/-0\": a prefix length is 0 to 128");
      ("2001:db8::1", "error: \"2001:db8::1\": expected ADDRESS/LENGTH");
    ];
  Alcotest.(check bool)
    "a bad IPv6 address is an error" true
    (Result.is_error (Ipv6_addr.Prefix.of_string "2001:db8:::1/64"))

let suite =
  [
    Alcotest.test_case "addresses" `Quick addresses;
    Alcotest.test_case "prefixes: IPv4 and IPv6, one parser" `Quick prefixes;
    ethernet_roundtrip;
    arp_roundtrip;
    ipv4_roundtrip;
    ipv4_corrupt;
    icmp_roundtrip;
    udp_roundtrip;
    Alcotest.test_case "udp bad checksum" `Quick udp_bad_checksum;
    no_raise "ethernet" Ethernet_packet.decode;
    no_raise "arp" Arp_packet.decode;
    no_raise "ipv4" (Ipv4_packet.decode ~verify:false);
    no_raise "ipv4 (checked)" (Ipv4_packet.decode ~verify:true);
    no_raise "ipv4 (version 4 forced)" (fun cs ->
        if Cstruct.length cs > 0 then
          Cstruct.set_uint8 cs 0 (0x40 lor (Cstruct.get_uint8 cs 0 land 0xf));
        Ipv4_packet.decode ~verify:false cs);
    no_raise "icmp" Icmp_packet.decode;
    no_raise "udp" (Udp_packet.decode ~pseudo:0);
  ]
