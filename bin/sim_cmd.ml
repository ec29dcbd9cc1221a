open Cmdliner
module Scenario = Consort_sim.Scenario

(* Every area's scenarios, in the order [consort sim --help] lists them. *)
let registries =
  [
    Consort_sim_group.Scenarios.registry;
    Consort_sim_cap.Scenarios.registry;
    Consort_sim_capfs.Scenarios.registry;
    Consort_sim_kv.Scenarios.registry;
    Consort_sim_capdir.Scenarios.registry;
  ]

let names = Scenario.names registries

let run scenario seeds seed trace quiet verbose params =
  if verbose > 0 then begin
    Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
    Logs.set_level (Some (if verbose > 1 then Logs.Debug else Logs.Info))
  end;
  match Option.fold ~none:(Ok Consort.Params.empty) ~some:Consort.Params.of_string params with
  | Error e ->
      Fmt.epr "consort sim: --params: %a@." Consort.Params.pp_error e;
      2
  | Ok params -> (
      match Scenario.check_params registries params with
      | Error e ->
          Fmt.epr "consort sim: --params: %s@." e;
          2
      | Ok () -> (
          match Scenario.find registries scenario with
          | None ->
              Fmt.epr "consort sim: unknown scenario %S (known: %s)@." scenario
                (String.concat ", " names);
              2
          | Some sc -> (
              if not quiet then Fmt.pr "scenario %s: %s@." scenario sc.doc;
              let first = Option.value seed ~default:1 in
              let seeds = match seed with Some _ when seeds = 0 -> 1 | _ -> max 1 seeds in
              (* The trace file: one that cannot be created or written (a
                 missing directory, a full disk) stops the run, one line, exit 2. *)
              let trace_error e =
                Fmt.epr "consort sim: --trace %s: %s@." (Option.get trace) e;
                2
              in
              match Option.map open_out trace with
              | exception Sys_error e -> trace_error e
              | oc -> (
                  let passed = ref 0 and failed = ref 0 in
                  (* Progress on a terminal only: one line on standard error, redrawn at
                     most 10 times a second, and at the first and last seed; cleared before
                     anything else is written and at the end. *)
                  let tty = seeds > 1 && Unix.isatty Unix.stderr in
                  let drawn = ref false and last = ref 0. in
                  let clear () =
                    if !drawn then begin
                      prerr_string "\r\027[K";
                      flush stderr;
                      drawn := false
                    end
                  in
                  let progress s =
                    let now = Unix.gettimeofday () in
                    if tty && (s = first || s = first + seeds - 1 || now -. !last >= 0.1) then begin
                      last := now;
                      Printf.eprintf "\r\027[Kconsort sim: seed %d of %d (%d passed, %d failed)%!"
                        (s - first + 1)
                        seeds !passed !failed;
                      drawn := true
                    end
                  in
                  match
                    for s = first to first + seeds - 1 do
                      progress s;
                      match
                        let o = sc.run ?trace:oc ~params ~seed:s () in
                        if o.violations <> [] then clear ();
                        o
                      with
                      | exception (Sys_error _ as e) when trace <> None -> raise e
                      | exception e ->
                          (* A seed that raises fails, and the others still run: the summary
                             counts every seed. *)
                          clear ();
                          incr failed;
                          Fmt.pr
                            "FAIL seed %d: exception %s@.  reproduce: consort sim --scenario %s \
                             --seeds 1 --seed %d@."
                            s (Printexc.to_string e) scenario s
                      | o when o.violations = [] ->
                          incr passed;
                          if seeds = 1 && not quiet then
                            Fmt.pr
                              "seed %d: %d sent, %d delivered, %d datagrams, last delivery at %a, \
                               trace %s@."
                              s o.sent o.delivered o.datagrams Consort.Time.pp o.end_time
                              o.trace_hash
                      | o ->
                          incr failed;
                          Fmt.pr
                            "FAIL seed %d: %d violation(s), first: %s@.  reproduce: consort sim \
                             --scenario %s --seeds 1 --seed %d --trace trace-%d.txt@."
                            s (List.length o.violations) (List.hd o.violations) scenario s s;
                          (* One seed: every violation. *)
                          if seeds = 1 then
                            List.iteri
                              (fun i v -> if i > 0 then Fmt.pr "  also: %s@." v)
                              o.violations
                    done;
                    clear ();
                    Option.iter close_out oc
                  with
                  | exception Sys_error e ->
                      clear ();
                      Option.iter close_out_noerr oc;
                      trace_error e
                  | () ->
                      Fmt.pr "%d passed, %d failed@." !passed !failed;
                      if !failed = 0 then 0 else 1))))

let scenario =
  Arg.(required & opt (some string) None & info [ "scenario" ] ~docv:"NAME" ~doc:"Scenario to run.")

let seeds =
  Arg.(
    value & opt Consort_cli.positive_int 1
    & info [ "seeds" ] ~docv:"N" ~doc:"Number of seeded schedules to run.")

let seed =
  Arg.(
    value
    & opt (some Consort_cli.natural) None
    & info [ "seed" ] ~docv:"S" ~doc:"First seed (default 1); seeds S to S+N-1 run.")

let trace =
  Arg.(
    value
    & opt (some string) None
    & info [ "trace" ] ~docv:"FILE" ~doc:"Write the network and application trace here.")

let quiet = Arg.(value & flag & info [ "quiet"; "q" ] ~doc:"Print only failures and the summary.")

let verbose =
  Arg.(
    value & flag_all
    & info [ "verbose"; "v" ]
        ~doc:"Log the layers' decisions on standard error (twice: everything).")
  |> Term.app (Term.const List.length)

let params =
  Arg.(
    value
    & opt (some string) None
    & info [ "params" ] ~docv:"NAME=VALUE,..."
        ~doc:
          "Override layer tunables for every member (see $(b,consort params)), e.g. \
           $(b,mflow.window=4096,suspect.timeout=2s).")

let cmd =
  let doc = "Run seeded schedules of a scenario in the simulator and check each trace." in
  let man =
    [
      `S Manpage.s_description;
      `P
        "Prints one line for each failing seed, with the command that reproduces it, then $(b,N \
         passed, M failed). Exits 1 if any seed failed.";
      `P ("Scenarios: " ^ String.concat ", " names ^ ".");
    ]
  in
  Cmd.v
    (Consort_cli.info ~path:"sim" "sim" ~doc ~man)
    Term.(const run $ scenario $ seeds $ seed $ trace $ quiet $ verbose $ params)
