(* consort-bench: the benchmarks, apart from the production binary. consort bench ARGS runs
   consort-bench ARGS (bin/main.ml); the benchmarks start the consort it names (Consort_bench.Exe). *)
open Cmdliner

let bench_layering iterations json =
  let rows = Consort_bench.Layering.run ~iterations () in
  Fmt.pr "Layering: a 16-byte message down and back up a stack, per message@.";
  Fmt.pr "%a" Consort_bench.Layering.pp_table rows;
  if json then print_endline (Consort_bench.Layering.to_json rows);
  0

let iterations =
  Arg.(
    value
    & opt Consort_cli.positive_int 200_000
    & info [ "iterations" ] ~docv:"N" ~doc:"Messages per round.")

let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.")

let layering =
  Cmd.v
    (Consort_cli.info ~path:"bench layering" "layering"
       ~doc:"Cost per message of 1, 5, 10 and 20 layers beside a direct call.")
    Term.(const bench_layering $ iterations $ json)

let bench_checksum () =
  let rows = Consort_net_bench.Checksum_bench.run () in
  Fmt.pr "Internet checksum (C stub) beside memcpy of the same bytes, same run:@.";
  Fmt.pr "%a" Consort_net_bench.Checksum_bench.pp_table rows;
  0

let bench_checksum =
  Cmd.v
    (Consort_cli.info ~path:"bench checksum" "checksum" ~doc:"Checksum GB/s beside memcpy GB/s.")
    Term.(const bench_checksum $ const ())

let () =
  Consort_cli.main
    (Cmd.group
       (Cmd.info "consort-bench" ~exits:Consort_cli.exits ~version:"0.1.0"
          ~doc:
            "Consort's benchmarks (also run as $(b,consort bench)); each prints its baseline \
             measured in the same run.")
       (layering :: bench_checksum :: Net_bench_cmd.cmd :: Net_bench_cmd.cmd_sim
      :: Consort_cap_bench.Rpc_bench.cmd :: Fs_bench.bench :: Proc_bench.bench
      :: Consort_kv_bench.Kv_bench.cmd :: Consort_capdir_bench.Dir_bench.cmd
      :: Consort_group_bench.Cli.commands))
