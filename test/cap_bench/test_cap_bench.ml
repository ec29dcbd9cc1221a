(* The RPC benchmark in a tiny configuration: it runs to the end and its
   figures are sane. *)
module B = Consort_cap_bench.Rpc_bench

let sane what lo hi x =
  if not (Float.is_finite x && x >= lo && x <= hi) then
    Alcotest.failf "%s: %.3f is not within [%g, %g]" what x lo hi

let tiny () =
  match B.run ~calls:20 ~transfers:2 ~rounds:1 ~slices:1 () with
  | Error e -> Alcotest.fail e
  | Ok r ->
      sane "null RPC us" 1. 1e6 r.B.null_us;
      sane "raw round trip us" 1. 1e6 r.B.raw_rtt_us;
      sane "trans MB/s" 0.01 1e5 r.B.trans_mbps;
      sane "trans 8 KB MB/s" 0.01 1e5 r.B.trans_lan_mbps;
      sane "raw MB/s" 0.01 1e5 r.B.raw_mbps;
      sane "AES-GCM MB/s" 0.01 1e6 r.B.gcm_mbps;
      sane "ChaCha20-Poly1305 MB/s" 0.01 1e6 r.B.chacha_mbps;
      sane "trans per CPU s" 0.01 1e6 r.B.trans_cpu_mbps;
      sane "trans 8 KB per CPU s" 0.01 1e6 r.B.trans_lan_cpu_mbps;
      sane "raw per CPU s" 0.01 1e6 r.B.raw_cpu_mbps;
      sane "raw 60 KB per CPU s" 0.01 1e6 r.B.raw_big_cpu_mbps;
      sane "trans, server in its own process, MB/s" 0.01 1e5 r.B.trans_2p_mbps;
      sane "byte limit MB/s" 0.01 1e5 r.B.byte_limit_mbps;
      sane "byte limit CPU ms per MB" 0.001 1e4 r.B.byte_limit_cpu_ms;
      sane "trans client CPU ms per MB" 0.001 1e4 r.B.trans_2p_client_cpu_ms

(* The byte limit is taken only from a lossless raw flow: a line with lost
   datagrams, a late member, or no figure is refused, not reported. *)
let flow_lines () =
  let line ~lost ~late =
    Printf.sprintf
      "result bench=tput system=raw-udp mode=flow bytes=60000 count=2000 senders=1 members=2 \
       window=34 rcvbuf=4194304 m0_delivered=2000 m0_lost=0 m1_delivered=%d m1_lost=%d lost=%d \
       disorder=0 late=%d msgs_per_s=36000 mb_per_s=2160.0"
      (2000 - lost) lost lost late
  in
  (match B.flow_result (line ~lost:0 ~late:0) with
  | Ok m -> Alcotest.(check (float 1e-9)) "lossless flow's MB/s" 2160.0 m
  | Error e -> Alcotest.failf "a lossless flow refused: %s" e);
  List.iter
    (fun (what, l) ->
      match B.flow_result l with
      | Ok m -> Alcotest.failf "%s taken as the byte limit (%.1f MB/s)" what m
      | Error _ -> ())
    [
      ("a flow that lost 3 datagrams", line ~lost:3 ~late:0);
      ("a flow with a late member", line ~lost:0 ~late:1);
      ("an empty line", "");
      ("a line without mb_per_s", "result bench=tput lost=0 late=0 count=5");
      ("a usage message", "usage: udp_raw rtt --count N");
    ]

let () =
  Alcotest.run "cap-bench"
    [
      ( "rpc",
        [
          Alcotest.test_case "tiny run" `Quick tiny;
          Alcotest.test_case "byte limit only from a lossless flow" `Quick flow_lines;
        ] );
    ]
