(* The README's process-group example: two members of "chat" in one
   process, over real UDP on 127.0.0.1. Each casts a greeting once the view
   holds both; each prints what it delivers; then both leave. Run with:
   dune exec examples/readme_group.exe *)

module Group = Consort_group.Group
module G = Group.Make (Consort_engine.Udp)

let loop = Consort_engine.Loop.create ()
let layers = Result.get_ok (Consort_group.Properties.(layers vsync))
let addrs = [ "127.0.0.1:7460"; "127.0.0.1:7461" ]
let delivered = ref 0 and left = ref 0

let member addr =
  let me = ref None in
  let callbacks =
    { Group.view =
        (fun v ->
          Fmt.pr "%s: view %s with %d members@." addr v.vid (Array.length v.members);
          if Array.length v.members = 2 then
            match G.cast (Option.get !me) ("hello from " ^ addr) with
            | Ok () -> ()                                       (* delivered to both, in this view *)
            | Error e -> Fmt.epr "refused: %a@." Group.pp_error e);  (* counted nowhere *)
      cast = (fun ~origin s -> Fmt.pr "%s: %s says %S@." addr origin s; incr delivered);
      send = (fun ~origin s -> Fmt.pr "%s: %s says %S to me@." addr origin s);
      block = ignore;                      (* a view change is flushing: casts wait *)
      flow = ignore;                       (* true: flow control asks to pause; false: go on *)
      exit = (fun () -> incr left) }
  in
  match G.join ~layers ~peers:addrs loop ~group:"chat" ~addr callbacks with
  | Ok g -> me := Some g; g
  | Error e -> Fmt.failwith "%s cannot join: %a" addr Group.pp_join_error e

let () =
  let a = member "127.0.0.1:7460" and b = member "127.0.0.1:7461" in
  Consort_engine.Loop.run loop ~timeout:(Consort.Time.of_sec 10.) ~until:(fun () -> !delivered = 4);
  G.leave a;
  G.leave b;
  Consort_engine.Loop.run loop ~timeout:(Consort.Time.of_sec 10.) ~until:(fun () -> !left = 2);
  if !delivered <> 4 then (Fmt.epr "only %d of 4 deliveries@." !delivered; exit 1)
