open Consort
module Sim = Consort_engine.Sim
module G = Consort_group.Group.Make (Sim)

let () =
  Logs.set_reporter (Logs.format_reporter ());
  Logs.set_level (Some Logs.Info);
  let net = Sim.create ~seed:3 () in
  let names = [ "p0"; "p1"; "p2" ] in
  let layers = Consort_group.[ Gmp.layer; Slander.layer; Mnak.layer; Pt2pt.layer; Suspect.layer; Bottom.layer ] in
  let members =
    List.mapi
      (fun i addr ->
        let cb =
          {
            Consort_group.Group.view = (fun v -> Fmt.pr "%a %s: %a@." Time.pp (Sim.now net) addr Consort_group.Group.pp_view_info v);
            cast = (fun ~origin s -> Fmt.pr "%a %s: cast from %s: %s@." Time.pp (Sim.now net) addr origin s);
            send = (fun ~origin s -> Fmt.pr "%s: send from %s: %s@." addr origin s);
            block = (fun () -> Fmt.pr "%a %s: block@." Time.pp (Sim.now net) addr);
            exit = (fun () -> Fmt.pr "%s: exit@." addr);
          }
        in
        match G.join ~seed:i ~layers ~peers:names net ~group:"g" ~addr cb with
        | Ok g -> g
        | Error e -> failwith e)
      names
  in
  Sim.run ~until:(Time.of_sec 5.) net;
  List.iteri (fun i g -> G.cast g (Printf.sprintf "hello from %d" i)) members;
  Sim.run ~until:(Time.of_sec 6.) net;
  G.leave (List.nth members 1);
  Sim.run ~until:(Time.of_sec 10.) net;
  Fmt.pr "--- crash p2@.";
  Sim.crash net "p2";
  Sim.run ~until:(Time.of_sec 20.) net;
  Fmt.pr "--- restart p2@.";
  let g2 = match G.join ~seed:9 ~layers ~peers:names net ~group:"g" ~addr:"p2" {
            Consort_group.Group.view = (fun v -> Fmt.pr "%a p2': %a@." Time.pp (Sim.now net) Consort_group.Group.pp_view_info v);
            cast = (fun ~origin:_ _ -> ()); send = (fun ~origin:_ _ -> ()); block = ignore; exit = ignore } with Ok g -> g | Error e -> failwith e in
  Sim.run ~until:(Time.of_sec 30.) net;
  Fmt.pr "p2' final: %a@." Consort_group.Group.pp_view_info (G.view g2);
  List.iter (fun g -> if not (G.has_exited g) then Fmt.pr "final: %a@." Consort_group.Group.pp_view_info (G.view g)) members
