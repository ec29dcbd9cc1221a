(* Path MTU discovery when ICMP is filtered (RFC 8899, RFC 4821), on the
   in-memory network: a path that silently drops every packet over a size
   (a black hole). The connection completes and finds the size; without
   packetization-layer probing it never gets a full segment through. *)

open Consort

let kb = 1024

(* Every segment over [limit] bytes (TCP header included) vanishes, both
   ways, and nobody says so. *)
let black_hole limit net (module _ : Node.S) =
  Mem.set_drop net (Some (fun ~src:_ ~dst:_ frame -> String.length frame > limit))

let run ?(plpmtud = true) ?(limit = Time.of_sec 3600.) hole n =
  let config = { Tcp.default_config with plpmtud } in
  Transfer.run ~config ~receiver_config:config ~limit ~prelude:(black_hole hole)
    ~impairments:{ Mem.perfect with delay = Time.of_ms 5 }
    ~seed:3 n

let finds hole () =
  let n = 1024 * kb in
  let r = run hole n in
  Logs.app (fun m ->
      m "black hole over %d bytes: path MTU %d after %d probes; %a" hole r.sender.path_mtu
        r.sender.mtu_probes Transfer.pp_result r);
  Alcotest.(check int) "every byte" n r.bytes;
  Alcotest.(check bool)
    (Fmt.str "the size found (%d) fits the path (%d)" r.sender.path_mtu hole)
    true (r.sender.path_mtu <= hole);
  Alcotest.(check bool)
    (Fmt.str "and is within 16 bytes of it (%d)" r.sender.path_mtu)
    true
    (r.sender.path_mtu > hole - 16);
  Alcotest.(check bool) "probes went" true (r.sender.mtu_probes > 0);
  Alcotest.(check bool) (Fmt.str "few timeouts (%d)" r.timeouts) true (r.timeouts <= 3)

let stuck_without () =
  match run ~plpmtud:false ~limit:(Time.of_sec 120.) 1000 (64 * kb) with
  | r ->
      Alcotest.failf "the transfer completed through a black hole without probing: %a"
        Transfer.pp_result r
  | exception Failure msg -> Logs.app (fun m -> m "without probing: %s" msg)

let tests =
  [
    Alcotest.test_case "a black hole at 1000 bytes: found, the transfer completes" `Quick
      (finds 1000);
    Alcotest.test_case "a black hole at 600 bytes" `Quick (finds 600);
    Alcotest.test_case "a black hole at 1400 bytes (just under the link's)" `Quick (finds 1400);
    Alcotest.test_case "without probing, nothing gets through a black hole" `Quick stuck_without;
  ]
