(* bench_peers: the OCaml half of `make bench-peers` (bench/peers/README.md). *)
open Cmdliner

let stack_cost iterations rounds out =
  let run ~iterations ~rounds () =
    let module C = Consort_peers_bench.Stack_cost in
    (* COST_ONLY=df (or dl): the default stack's fused (or layered) row alone; sf (or sl): its
       sends; harness: the harness with no stack; by-layer: the default stack built up one layer
       at a time from the bottom, both paths (COST_LAYERS=k: the lowest k layers alone, fused). *)
    match Sys.getenv_opt "COST_ONLY" with
    | Some "harness" ->
        let ns, w = C.harness_alone ~iterations ~rounds in
        Ok
          [
            {
              C.stack = "the harness alone (no stack)";
              path = "none";
              layers = 0;
              ns_per_msg = ns;
              words_per_msg = w;
              major_words_per_msg = 0.;
            };
          ]
    | Some "by-layer" -> (
        match Sys.getenv_opt "COST_LAYERS" with
        | None -> C.by_layer ~iterations ~rounds ()
        | Some k -> (
            match int_of_string_opt k with
            | Some k when k >= 1 -> C.by_layer ~only:k ~iterations ~rounds ()
            | _ -> Error ("COST_LAYERS: expected a number of layers, got " ^ k)))
    | Some "df" -> C.run_default ~iterations ~rounds ~fused:true ()
    | Some "dl" -> C.run_default ~iterations ~rounds ~fused:false ()
    | Some "sf" -> C.run_default ~iterations ~rounds ~send:true ~fused:true ()
    | Some "sl" -> C.run_default ~iterations ~rounds ~send:true ~fused:false ()
    | _ -> C.run ~iterations ~rounds ()
  in
  match run ~iterations ~rounds () with
  | Error e ->
      Printf.eprintf "bench_peers stack-cost: %s\n" e;
      1
  | Ok rows ->
      List.iter
        (fun (r : Consort_peers_bench.Stack_cost.row) ->
          Printf.printf
            "%-60s %-8s %3d layers %8.0f ns/msg %7.1f minor words/msg %.3f major words/msg\n"
            r.stack r.path r.layers r.ns_per_msg r.words_per_msg r.major_words_per_msg)
        rows;
      List.iter print_endline (Consort_peers_bench.Stack_cost.ratios rows);
      (match out with
      | Some f -> Yojson.Safe.to_file f (Consort_peers_bench.Stack_cost.to_json rows)
      | None -> print_endline (Yojson.Safe.to_string (Consort_peers_bench.Stack_cost.to_json rows)));
      0

let stack_cost_cmd =
  let iterations =
    Arg.(value & opt int 50_000 & info [ "iterations" ] ~docv:"N" ~doc:"Casts per round.")
  in
  let rounds =
    Arg.(value & opt int 3 & info [ "rounds" ] ~docv:"N" ~doc:"Rounds; the fastest is kept.")
  in
  let out =
    Arg.(
      value
      & opt (some string) None
      & info [ "json" ] ~docv:"FILE" ~doc:"Write the rows as JSON to FILE.")
  in
  Cmd.v
    (Cmd.info "stack-cost"
       ~doc:
         "Cost per message of the default (vsync) stack, the total-order stack (vsync+Total) and \
          of a 10-layer stack, two members' stacks back to back in one process.")
    Term.(const stack_cost $ iterations $ rounds $ out)

let report dir out svg =
  match Consort_peers_bench.Report.run ?svg ~dir ~out () with
  | Ok () -> 0
  | Error e ->
      Printf.eprintf "bench_peers report: %s\n" e;
      1

let report_cmd =
  let dir =
    Arg.(
      required
      & opt (some string) None
      & info [ "dir" ] ~docv:"DIR" ~doc:"The results directory written by bench-peers.sh.")
  in
  let out =
    Arg.(
      value
      & opt (some string) None
      & info [ "json" ] ~docv:"FILE" ~doc:"Also write the table as JSON to FILE.")
  in
  let svg =
    Arg.(
      value
      & opt (some string) None
      & info [ "svg" ] ~docv:"FILE"
          ~doc:"Also write the throughput table as an SVG chart (bars of payload MB/s) to FILE.")
  in
  Cmd.v
    (Cmd.info "report"
       ~doc:"Print the table of make bench-peers from a results directory, and write it as JSON.")
    Term.(const report $ dir $ out $ svg)

let () =
  exit
    (Cmd.eval'
       (Cmd.group
          (Cmd.info "bench_peers" ~doc:"Consort beside its peers (make bench-peers).")
          [ stack_cost_cmd; report_cmd ]))
