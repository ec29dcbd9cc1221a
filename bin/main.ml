open Cmdliner

(* consort bench ARGS is consort-bench ARGS: the benchmarks are a separate executable (bench/bin),
   so that consort links no benchmark or test code. consort-bench is found beside this executable
   (installed, or bin/consort-bench in the build tree), else on PATH; it starts this consort
   (CONSORT_EXE) for its servers and members. *)
let executable f =
  Sys.file_exists f
  && (not (Sys.is_directory f))
  &&
  try
    Unix.access f [ Unix.X_OK ];
    true
  with Unix.Unix_error _ -> false

let consort_bench () =
  let beside = Filename.concat (Filename.dirname Sys.executable_name) "consort-bench" in
  if executable beside then Some beside
  else
    match Sys.getenv_opt "PATH" with
    | None -> None
    | Some p ->
        List.find_map
          (fun d ->
            let f = Filename.concat (if d = "" then "." else d) "consort-bench" in
            if executable f then Some f else None)
          (String.split_on_char ':' p)

let bench args =
  match consort_bench () with
  | None ->
      prerr_endline
        "consort bench: consort-bench is neither beside consort nor on PATH (make build makes it, \
         make install installs it)";
      exit Consort_cli.refused
  | Some exe -> (
      Unix.putenv "CONSORT_EXE" Sys.executable_name;
      try Unix.execv exe (Array.of_list (exe :: args))
      with Unix.Unix_error (e, _, _) ->
        Printf.eprintf "consort bench: %s: %s\n%!" exe (Unix.error_message e);
        exit Consort_cli.refused)

(* In consort's own help: the benchmarks' command, run by consort-bench. *)
let bench_cmd =
  let command =
    Arg.(required & pos 0 (some string) None & info [] ~docv:"COMMAND" ~doc:"The benchmark.")
  and args = Arg.(value & pos_right 0 string [] & info [] ~docv:"ARG") in
  Cmd.v
    (Cmd.info "bench" ~exits:Consort_cli.exits
       ~doc:
         "Benchmarks, run by the consort-bench executable ($(b,consort bench) $(i,ARGS) is \
          $(b,consort-bench) $(i,ARGS)); each prints its baseline measured in the same run. \
          $(b,consort bench --help) lists them.")
    Term.(const (fun c a -> bench (c :: a)) $ command $ args)

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
  if Array.length Sys.argv > 1 && Sys.argv.(1) = "bench" then
    bench (Array.to_list (Array.sub Sys.argv 2 (Array.length Sys.argv - 2)));
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
