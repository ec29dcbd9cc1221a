(* A group inside an Lwt program: two members over real UDP on
   127.0.0.1:7493-7494, their loop driven by Lwt's own (Consort_lwt), with
   no thread and no polling. Lwt code waits for the view, casts, and waits
   for the deliveries, while a ticker (any other Lwt work) keeps running.
   Run with: dune exec examples/lwt_group.exe *)

module Group = Consort_group.Group
module G = Group.Make (Consort_engine.Udp)

let ( let* ) = Lwt.bind
let loop = Consort_engine.Loop.create ()
let attached = Consort_lwt.attach loop
let layers = Result.get_ok (Consort_group.Properties.(layers vsync))
let addrs = [ "127.0.0.1:7493"; "127.0.0.1:7494" ]
let members_seen = ref 0 and delivered = ref 0 and left = ref 0

let member addr =
  let callbacks =
    { Group.view = (fun v -> members_seen := Array.length v.members);
      cast = (fun ~origin s -> Fmt.pr "%s: %s says %S@." addr origin s; incr delivered);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = (fun () -> incr left) }
  in
  match G.join ~layers ~peers:addrs loop ~group:"lwt-chat" ~addr callbacks with
  | Ok g -> g
  | Error e -> Fmt.failwith "%s cannot join: %a" addr Group.pp_join_error e

let within secs what p =
  Lwt.pick [ p; (let* () = Lwt_unix.sleep secs in Lwt.fail_with ("timed out waiting for " ^ what)) ]

let () =
  let a = member "127.0.0.1:7493" and b = member "127.0.0.1:7494" in
  let ticks = ref 0 in
  let rec ticker () = incr ticks; let* () = Lwt_unix.sleep 0.01 in ticker () in
  let program =
    let* () = within 10. "a view of two" (Consort_lwt.wait attached (fun () -> !members_seen = 2)) in
    ignore (G.cast a "hello from Lwt");
    let* () = within 10. "two deliveries" (Consort_lwt.wait attached (fun () -> !delivered = 2)) in
    G.leave a;
    G.leave b;
    within 10. "both to leave" (Consort_lwt.wait attached (fun () -> !left = 2))
  in
  Lwt_main.run (Lwt.pick [ program; ticker () ]);
  Consort_lwt.detach attached;
  Fmt.pr "done: the ticker ran %d times meanwhile, the loop was stepped %d times@." !ticks (Consort_lwt.steps attached)
