(* A process group in the simulator: three members join "chat", cast to
   each other, one leaves, one crashes and the last one carries on alone.
   Over real UDP the same code runs with Consort_engine.Udp in place of
   Sim (see `consort member`). Run with: dune exec examples/group_chat.exe *)

open Consort
module Sim = Consort_engine.Sim
module Group = Consort_group.Group
module G = Group.Make (Sim)

let () =
  let net = Sim.create ~seed:42 () in
  let layers = match Consort_group.Properties.(layers vsync) with Ok l -> l | Error e -> Fmt.failwith "%a" Consort_group.Properties.pp_error e in
  Fmt.pr "stack: %s@." (Stack.describe layers);
  let addrs = [ "alice"; "bob"; "carol" ] in
  let join addr =
    let say fmt = Fmt.pr ("%a %s: " ^^ fmt ^^ "@.") Time.pp (Sim.now net) addr in
    let callbacks =
      {
        Group.view = (fun v -> say "view %s: [%s]" v.vid (String.concat ", " (Array.to_list v.members)));
        cast = (fun ~origin s -> say "%s says %S" origin s);
        send = (fun ~origin s -> say "%s whispers %S" origin s);
        block = (fun () -> say "blocked for a view change");
        flow = (fun blocked -> if blocked then say "flow control: wait before sending more");
        exit = (fun () -> say "left");
      }
    in
    match G.join ~peers:addrs ~layers net ~group:"chat" ~addr callbacks with
    | Ok g -> g
    | Error e -> Fmt.failwith "%s cannot join: %a" addr Group.pp_join_error e
  in
  let alice = join "alice" and bob = join "bob" and carol = join "carol" in
  let at s f = ignore (Sim.at net (Time.of_sec s) f) in
  (* A message is accepted, or refused with a reason (flow control full,
     too big, not a member, leaving) and then counted by no one. *)
  let said who = function
    | Ok () -> ()
    | Error e -> Fmt.pr "%s: refused: %a@." who Group.pp_error e
  in
  at 1.0 (fun () -> said "alice" (G.cast alice "hello everyone"));
  at 1.0 (fun () -> said "bob" (G.cast bob "hi alice"));
  at 1.5 (fun () -> said "carol" (G.send carol (G.me alice) "psst"));
  at 2.0 (fun () -> G.leave bob);
  at 3.0 (fun () -> Sim.crash net "carol");
  Sim.run ~until:(Time.of_sec 12.) net;
  ignore carol;
  Fmt.pr "alice's final view: %a@." Group.pp_view_info (G.view alice)
