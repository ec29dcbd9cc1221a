(* The TCP benchmark on its own: tcp_main.exe [BYTES [RR_COUNT]]. *)

module B = Consort_net_bench.Tcp_bench

let () =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some Logs.Info);
  let arg i d = if Array.length Sys.argv > i then int_of_string Sys.argv.(i) else d in
  let cfg = { B.default with bytes = arg 1 B.default.bytes; rr_count = arg 2 B.default.rr_count } in
  match B.run ~progress:(fun s -> Fmt.epr "bench tcp: %s@." s) cfg with
  | Ok r ->
      Fmt.pr "%a" B.pp_table r;
      print_endline (B.to_json r)
  | Error e ->
      Fmt.epr "bench tcp: %s@." e;
      exit 1
