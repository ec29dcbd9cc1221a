open Cmdliner
module Vsync = Consort_spec.Vsync
module Order = Consort_spec.Order

(* The ordering properties asked for, over the logs (already read once,
   without error, by the virtual synchrony check). *)
let order_problems ~total ~causal ~safe ~evs files =
  let logs =
    List.filter_map
      (fun path ->
        match Consort_spec.Log.read_file path with
        | Ok (e :: _ as evs) -> Some (Consort_spec.Log.me e, evs)
        | Ok [] | Error _ -> None)
      files
  in
  let one on name pp f =
    if not on then []
    else
      match f logs with
      | Ok () ->
          Fmt.pr "%s holds@." name;
          []
      | Error vs -> List.map (Fmt.str "%a" pp) vs
  in
  let t = one total "total order" Order.pp_violation Order.check_total in
  let c = one causal "causal order" Order.pp_violation Order.check_causal in
  let s = one safe "safe delivery" Order.pp_violation Order.check_safe in
  let e =
    one evs "extended virtual synchrony" Consort_spec.Evs.pp_violation Consort_spec.Evs.check
  in
  t @ c @ s @ e

let run quiescent merged total causal safe evs files =
  match Vsync.check_files ~quiescent ~require_merge:merged files with
  | Ok s -> (
      Fmt.pr "virtual synchrony holds: %a@." Vsync.pp_summary s;
      match order_problems ~total ~causal ~safe ~evs files with
      | [] -> 0
      | vs ->
          List.iter (fun v -> Fmt.pr "%s@." v) vs;
          Fmt.pr "%d violation(s)@." (List.length vs);
          1)
  | Error problems ->
      let unreadable =
        List.filter (function Vsync.Unreadable _ -> true | Vsync.Violation _ -> false) problems
      in
      if unreadable <> [] then (
        List.iter (fun p -> Fmt.epr "consort check-logs: %a@." Vsync.pp_file_problem p) unreadable;
        2)
      else (
        List.iter (fun p -> Fmt.pr "%a@." Vsync.pp_file_problem p) problems;
        Fmt.pr "%d violation(s)@." (List.length problems);
        1)

let cmd =
  let files =
    Arg.(
      non_empty & pos_all string [] & info [] ~docv:"LOG" ~doc:"Member logs (consort member --log).")
  in
  let quiescent =
    Arg.(
      value & flag
      & info [ "quiescent" ]
          ~doc:
            "The run ended quietly: members alive at the end in one view must have delivered each \
             other's messages.")
  in
  let merged =
    Arg.(
      value & flag
      & info [ "merged" ] ~doc:"Partitions healed: members alive at the end must share one view.")
  in
  let total =
    Arg.(
      value & flag
      & info [ "total" ]
          ~doc:
            "Also check total order (the stack had $(b,Total)): members that go on together \
             delivered the same sequence of casts, and one order fits every member's deliveries \
             before its flush.")
  in
  let causal =
    Arg.(
      value & flag & info [ "causal" ] ~doc:"Also check causal order (the stack had $(b,Causal)).")
  in
  let safe =
    Arg.(
      value & flag
      & info [ "safe" ]
          ~doc:
            "Also check safe delivery (the stack had $(b,Agree)): a cast delivered before the \
             flush was delivered in its view by every member that did not crash.")
  in
  let evs =
    Arg.(
      value & flag
      & info [ "evs" ]
          ~doc:
            "Also check extended virtual synchrony (the stack had $(b,Evs), and the logs its \
             transitional views): each view change has a transitional view, the members of both \
             views; a cast delivered before it was delivered in its view by every member that did \
             not crash, one delivered after it by every member of the transitional view that did \
             not crash.")
  in
  let doc =
    "Check member logs against virtual synchrony (and total order, causal order, safe delivery)."
  in
  let man =
    [
      `S Manpage.s_description;
      `P
        "Reads the logs of every member incarnation of a run (one file each, in the format \
         $(b,consort member --log) writes) and checks them together: agreed views, the same casts \
         delivered by members that go on together, same-view, FIFO, once-only delivery without \
         gaps, nothing sent between a block and the next view, and no wedge.";
      `P
        "Prints a summary and exits 0 if the logs hold; otherwise one line per violation and exits \
         1; exits 2 if a log cannot be read.";
    ]
  in
  let term = Term.(const run $ quiescent $ merged $ total $ causal $ safe $ evs $ files) in
  ( Cmd.v (Consort_cli.info ~path:"check-logs" "check-logs" ~doc ~man) term,
    Cmd.v (Consort_cli.info ~path:"check" "check" ~doc:(doc ^ " The same as check-logs.") ~man) term
  )

let cmd, check = cmd
