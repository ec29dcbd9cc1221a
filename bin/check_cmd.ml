open Cmdliner
module Vsync = Consort_spec.Vsync

let run quiescent merged files =
  match Vsync.check_files ~quiescent ~require_merge:merged files with
  | Ok s ->
      Fmt.pr "virtual synchrony holds: %a@." Vsync.pp_summary s;
      0
  | Error problems ->
      let unreadable = List.filter (function Vsync.Unreadable _ -> true | Vsync.Violation _ -> false) problems in
      if unreadable <> [] then (
        List.iter (fun p -> Fmt.epr "consort check-logs: %a@." Vsync.pp_file_problem p) unreadable;
        2)
      else (
        List.iter (fun p -> Fmt.pr "%a@." Vsync.pp_file_problem p) problems;
        Fmt.pr "%d violation(s)@." (List.length problems);
        1)

let cmd =
  let files = Arg.(non_empty & pos_all string [] & info [] ~docv:"LOG" ~doc:"Member logs (consort member --log).") in
  let quiescent =
    Arg.(
      value & flag
      & info [ "quiescent" ]
          ~doc:"The run ended quietly: members alive at the end in one view must have delivered each other's messages.")
  in
  let merged =
    Arg.(value & flag & info [ "merged" ] ~doc:"Partitions healed: members alive at the end must share one view.")
  in
  let doc = "Check member logs against virtual synchrony." in
  let man =
    [
      `S Manpage.s_description;
      `P
        "Reads the logs of every member incarnation of a run (one file each, in the format $(b,consort member --log) writes) and checks them together: agreed views, the same casts delivered by members that go on together, same-view, FIFO, once-only delivery without gaps, nothing sent between a block and the next view, and no wedge.";
      `P "Prints a summary and exits 0 if the logs hold; otherwise one line per violation and exits 1; exits 2 if a log cannot be read.";
    ]
  in
  Cmd.v (Cmd.info "check-logs" ~doc ~man) Term.(const run $ quiescent $ merged $ files)
