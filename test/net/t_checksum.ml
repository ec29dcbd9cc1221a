open Consort_net
open Util

(* RFC 1071 section 3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2. *)
let rfc1071 () =
  let cs = cs_of_list [ 0x00; 0x01; 0xf2; 0x03; 0xf4; 0xf5; 0xf6; 0xf7 ] in
  Alcotest.(check int) "C sum" 0xddf2 (Checksum.sum cs);
  Alcotest.(check int) "reference sum" 0xddf2 (Checksum.Reference.sum cs);
  Alcotest.(check int) "checksum" 0x220d (Checksum.digest cs)

(* A real IPv4 header (Wikipedia's example), checksum b861. *)
let ipv4_header () =
  let cs =
    cs_of_list
      [
        0x45;
        0x00;
        0x00;
        0x73;
        0x00;
        0x00;
        0x40;
        0x00;
        0x40;
        0x11;
        0x00;
        0x00;
        0xc0;
        0xa8;
        0x00;
        0x01;
        0xc0;
        0xa8;
        0x00;
        0xc7;
      ]
  in
  Alcotest.(check int) "checksum" 0xb861 (Checksum.digest cs);
  Cstruct.BE.set_uint16 cs 10 0xb861;
  Alcotest.(check bool) "valid once filled in" true (Checksum.valid cs)

let odd_and_small () =
  Alcotest.(check int) "empty" 0 (Checksum.sum Cstruct.empty);
  Alcotest.(check int) "one byte is the high byte" 0xab00 (Checksum.sum (cs_of_list [ 0xab ]));
  Alcotest.(check int) "three bytes" (0x0102 + 0x0300) (Checksum.sum (cs_of_list [ 1; 2; 3 ]));
  Alcotest.(check int)
    "all ones" 0xffff
    (Checksum.sum (Cstruct.of_string (String.make 1000 '\xff')));
  Alcotest.(check int) "init carried" 0x0001 (Checksum.sum ~init:0xffff (cs_of_list [ 0; 1 ]));
  let big = Cstruct.of_string (String.init 9001 (fun i -> Char.chr (i * 7 land 255))) in
  Alcotest.(check int)
    "sum_sub"
    (Checksum.sum (Cstruct.sub big 3 4001))
    (Checksum.sum_sub big ~off:3 ~len:4001)

(* Summing in two pieces at an even split equals summing at once. *)
let pieces () =
  let b = Cstruct.of_string (String.init 301 (fun i -> Char.chr (((i * 13) + 5) land 255))) in
  let whole = Checksum.sum b in
  let a = Checksum.sum (Cstruct.sub b 0 120) and c = Checksum.sum (Cstruct.sub b 120 181) in
  Alcotest.(check int) "add" whole (Checksum.add a c);
  Alcotest.(check int) "init" whole (Checksum.sum ~init:a (Cstruct.sub b 120 181))

let adjust () =
  let b = Cstruct.of_string (String.init 40 (fun i -> Char.chr (i * 5))) in
  Cstruct.BE.set_uint16 b 10 0;
  let ck = Checksum.digest b in
  let old_word = Cstruct.BE.get_uint16 b 4 in
  Cstruct.BE.set_uint16 b 4 0x1234;
  let ck' = Checksum.adjust ~checksum:ck ~old_word ~new_word:0x1234 in
  Alcotest.(check int) "RFC 1624 update" (Checksum.digest b) ck'

let pseudo () =
  (* Pseudo-header summed as bytes equals the arithmetic one. *)
  let src = Ipv4_addr.v 10 0 0 1 and dst = Ipv4_addr.v 192 168 1 200 in
  let h = Cstruct.create 12 in
  Ipv4_addr.set h 0 src;
  Ipv4_addr.set h 4 dst;
  Cstruct.set_uint8 h 9 17;
  Cstruct.BE.set_uint16 h 10 1234;
  Alcotest.(check int)
    "pseudo" (Checksum.sum h)
    (Checksum.pseudo_ipv4 ~src ~dst ~proto:17 ~len:1234)

let agree =
  qtest "C and OCaml sums agree (random bytes, offsets, lengths, init)" ~count:2000
    QCheck.(quad (string_of_size Gen.(0 -- 3000)) small_nat small_nat (int_bound 0x3fff_ffff))
    (fun (s, a, b, init) ->
      let n = String.length s in
      let off = if n = 0 then 0 else a mod (n + 1) in
      let len = if n - off = 0 then 0 else b mod (n - off + 1) in
      let cs = Cstruct.sub (Cstruct.of_string s) off len in
      Checksum.sum ~init cs = Checksum.Reference.sum ~init cs)

let agree_long =
  qtest "C and OCaml agree on long buffers of 0xff" ~count:50
    QCheck.(int_range 0 70000)
    (fun n ->
      let cs = Cstruct.of_string (String.make n '\xff') in
      Checksum.sum cs = Checksum.Reference.sum cs)

(* Past the vector code's 2 MiB block, so its 32-bit lanes are flushed. *)
let large () =
  let st = Random.State.make [| 7 |] in
  let s = String.init ((5 * 1024 * 1024) + 77) (fun _ -> Char.chr (Random.State.int st 256)) in
  let cs = Cstruct.of_string s in
  Alcotest.(check int) "5 MiB" (Checksum.Reference.sum cs) (Checksum.sum cs);
  let cs = Cstruct.sub cs 1 (Cstruct.length cs - 1) in
  Alcotest.(check int) "5 MiB, odd start" (Checksum.Reference.sum cs) (Checksum.sum cs)

let suite =
  [
    Alcotest.test_case "RFC 1071 example" `Quick rfc1071;
    Alcotest.test_case "IPv4 header" `Quick ipv4_header;
    Alcotest.test_case "odd lengths, init, sub" `Quick odd_and_small;
    Alcotest.test_case "sum in pieces" `Quick pieces;
    Alcotest.test_case "incremental update" `Quick adjust;
    Alcotest.test_case "pseudo-header" `Quick pseudo;
    Alcotest.test_case "large buffers" `Quick large;
    agree;
    agree_long;
  ]
