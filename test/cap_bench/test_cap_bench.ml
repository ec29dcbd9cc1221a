(* The RPC benchmark in a tiny configuration: it runs to the end and its
   figures are sane. *)
module B = Consort_cap_bench.Rpc_bench

let sane what lo hi x =
  if not (Float.is_finite x && x >= lo && x <= hi) then
    Alcotest.failf "%s: %.3f is not within [%g, %g]" what x lo hi

let tiny () =
  match B.run ~calls:20 ~transfers:2 ~rounds:1 () with
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
      sane "raw 60 KB per CPU s" 0.01 1e6 r.B.raw_big_cpu_mbps

let () = Alcotest.run "cap-bench" [ ("rpc", [ Alcotest.test_case "tiny run" `Quick tiny ]) ]
