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

let bench_cmd =
  let layering =
    Cmd.v
      (Consort_cli.info ~path:"bench layering" "layering"
         ~doc:"Cost per message of 1, 5, 10 and 20 layers beside a direct call.")
      Term.(const bench_layering $ iterations $ json)
  in
  Cmd.group
    (Cmd.info "bench" ~exits:Consort_cli.exits
       ~doc:"Benchmarks; each prints its baseline measured in the same run.")
    (layering :: Net_cmd.bench_checksum :: Net_bench_cmd.cmd :: Net_bench_cmd.cmd_sim
   :: Consort_cap_bench.Rpc_bench.cmd :: Cap_cmd.bench :: Proc_cmd.bench
   :: Consort_kv_bench.Kv_bench.cmd :: Consort_capdir_bench.Dir_bench.cmd
   :: Consort_group_bench.Cli.commands)

let params () =
  List.iter
    (fun (name, v, doc) ->
      Fmt.pr "%-28s %-10s %s@." name (Fmt.str "%a" Consort.Params.pp_value v) doc)
    (Consort.Params.registered ());
  0

let params_cmd =
  Cmd.v
    (Consort_cli.info ~path:"params" "params"
       ~doc:"List every registered layer tunable with its default.")
    Term.(const params $ const ())

let () =
  let doc = "reliable distributed systems from small, typed protocol layers" in
  Consort_cli.main
    (Cmd.group
       (Cmd.info "consort" ~exits:Consort_cli.exits ~version:"0.1.0" ~doc)
       ([
          Demo_cmd.demo;
          Member_cmd.member;
          Member_cmd.stack;
          Member_cmd.keygen;
          Sim_cmd.cmd;
          Check_cmd.cmd;
          Check_cmd.check;
          Net_cmd.cmd;
          bench_cmd;
          params_cmd;
          Demo_cmd.peer;
          Cap_cmd.cmd;
          Kv_cmd.cmd;
        ]
       @ Ops_cmd.commands))
