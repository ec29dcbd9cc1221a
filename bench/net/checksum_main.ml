let () =
  Fmt.pr "%a" Consort_net_bench.Checksum_bench.pp_table (Consort_net_bench.Checksum_bench.run ())
