module Scenario = Consort_sim.Scenario

(* With Debug in the stack, a violation the checking layers report fails the seed, with their
   report. *)
let checked (s : Scenario.t) =
  let run ?trace ~params ~seed () =
    let reports = ref [] in
    Consort_group.Chk.reset ();
    Consort_group.Chk.on_violation (fun v -> reports := v :: !reports);
    let o =
      Fun.protect ~finally:Consort_group.Chk.reset_handler (fun () -> s.run ?trace ~params ~seed ())
    in
    if !reports = [] then o
    else
      {
        o with
        violations =
          o.violations @ List.rev_map (Fmt.str "%a" Consort_group.Chk.pp_violation) !reports;
      }
  in
  { s with run }

let registry =
  {
    Scenario.area = "group";
    check_params = Vsync_sim.check_params;
    scenarios =
      List.map checked
        (Fifo_sim.scenarios @ Vsync_sim.scenarios @ Vsync_forged.scenarios @ Order_sim.scenarios
       @ Xfer_sim.scenarios @ Switch_sim.scenarios @ Migrate_sim.scenarios @ Cltsvr_sim.scenarios);
  }
