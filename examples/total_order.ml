(* Total order over real UDP: three members of "orders" in one process,
   on 127.0.0.1:7490-7492, with the properties vsync and Total. Once the
   view holds all three, each casts four messages at once; every member
   delivers the twelve casts in one same order, which the program checks
   before all three leave. Run with: dune exec examples/total_order.exe *)

module Group = Consort_group.Group
module G = Group.Make (Consort_engine.Udp)
module P = Consort_group.Properties

let loop = Consort_engine.Loop.create ()
let layers = Result.get_ok (P.layers (P.vsync @ [ P.Total ]))
let addrs = [ "127.0.0.1:7490"; "127.0.0.1:7491"; "127.0.0.1:7492" ]
let per_member = 4
let total = per_member * List.length addrs
let left = ref 0

(* Each member's deliveries, in the order it delivered them. *)
let delivered = Hashtbl.create 3

let member addr =
  let me = ref None and cast_yet = ref false in
  Hashtbl.replace delivered addr [];
  let callbacks =
    { Group.view =
        (fun v ->
          Fmt.pr "%s: view %s with %d members@." addr v.vid (Array.length v.members);
          if Array.length v.members = 3 && not !cast_yet then begin
            cast_yet := true;
            for i = 1 to per_member do
              match G.cast (Option.get !me) (Fmt.str "%s #%d" addr i) with
              | Ok () -> ()
              | Error e -> Fmt.epr "%s: refused: %a@." addr Group.pp_error e
            done
          end);
      cast = (fun ~origin:_ s -> Hashtbl.replace delivered addr (s :: Hashtbl.find delivered addr));
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = (fun () -> incr left) }
  in
  match G.join ~layers ~peers:addrs loop ~group:"orders" ~addr callbacks with
  | Ok g -> me := Some g; g
  | Error e -> Fmt.failwith "%s cannot join: %a" addr Group.pp_join_error e

let () =
  Fmt.pr "stack: %s@." (P.describe (P.vsync @ [ P.Total ]));
  let members = List.map member addrs in
  let all_in () = Hashtbl.fold (fun _ l ok -> ok && List.length l = total) delivered true in
  Consort_engine.Loop.run loop ~timeout:(Consort.Time.of_sec 20.) ~until:all_in;
  let orders = List.map (fun a -> List.rev (Hashtbl.find delivered a)) addrs in
  List.iter G.leave members;
  Consort_engine.Loop.run loop ~timeout:(Consort.Time.of_sec 10.) ~until:(fun () -> !left = 3);
  match orders with
  | first :: rest when List.length first = total && List.for_all (( = ) first) rest ->
      Fmt.pr "all 3 members delivered the %d casts in one order:@.  %s@." total (String.concat ", " first)
  | _ ->
      List.iter2 (fun a o -> Fmt.epr "%s delivered %d: %s@." a (List.length o) (String.concat ", " o)) addrs orders;
      exit 1
