open Consort
module Sim = Consort_engine.Sim
module V = Vsync_sim
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))

let s = Time.of_sec

(* What the run saw: each process's addresses in its current incarnation
   (newest first), the moves made, and the members that left a view. *)
type obs = {
  addrs : string list array;
  mutable moves : int;
  mutable next : int; (* fresh addresses *)
  mutable left : (string * string * string) list; (* who saw, which member left, in which view *)
  mutable problems : string list;
}

(* Members of a group move; a member alone does not (discovery goes to
   the configured addresses, which every other member may have left). *)
let move w obs i =
  match V.group w i with
  | Some g when V.is_alive w i && Array.length (G.view g).Consort_group.Group.members > 1 -> (
      obs.next <- obs.next + 1;
      let dst = Printf.sprintf "%s.m%d" (V.addr w i) obs.next in
      V.note w "%d %s moves to %s" (Sim.now (V.net w)) (G.me g) dst;
      match G.migrate g dst with
      | Ok () ->
          obs.moves <- obs.moves + 1;
          obs.addrs.(i) <- dst :: obs.addrs.(i)
      | Error e ->
          obs.problems <-
            Fmt.str "%s: move to %s refused: %a" (G.me g) dst Consort_group.Group.pp_migrate_error e
            :: obs.problems)
  | _ -> ()

(* A crash takes every address the process listens at. *)
let crash w obs i =
  if V.is_alive w i then begin
    V.crash w i;
    List.iter (fun a -> Sim.crash (V.net w) a) obs.addrs.(i);
    obs.addrs.(i) <- []
  end

let start w obs i =
  if not (V.is_alive w i) then begin
    obs.addrs.(i) <- [];
    V.start w i
  end

(* At the end: each live member that moved is known by every other live
   one at its latest address, every member has acknowledged it, and the
   addresses it left are closed. *)
let settled w obs =
  let n = V.nprocs w in
  let live = List.filter (fun i -> V.is_alive w i) (List.init n Fun.id) in
  List.concat_map
    (fun i ->
      match (V.group w i, obs.addrs.(i)) with
      | Some g, (_ :: _ as addrs) ->
          let here = G.address g in
          (if here <> List.hd addrs then
             [ Printf.sprintf "%s listens at %s, moved last to %s" (G.me g) here (List.hd addrs) ]
           else [])
          @ List.filter_map
              (fun j ->
                match V.group w j with
                | Some h when j <> i -> (
                    match G.member_address h (G.me g) with
                    | Some a when a = here -> None
                    | a ->
                        Some
                          (Printf.sprintf "%s sends to %s at %s, which moved to %s" (G.me h)
                             (G.me g)
                             (Option.value ~default:"(not in its view)" a)
                             here))
                | _ -> None)
              live
          @ (match G.unmoved g with
            | [] -> []
            | l ->
                [
                  Printf.sprintf "%s: [%s] never acknowledged its move" (G.me g)
                    (String.concat ", " l);
                ])
          @ List.filter_map
              (fun a ->
                if Sim.is_open (V.net w) a then
                  Some (Printf.sprintf "%s still listens at %s, which it left" (G.me g) a)
                else None)
              (V.addr w i :: List.tl addrs)
      | _ -> [])
    live

let migrate_scenario ?trace ?params seed =
  let n = 5 in
  let w = V.make ?trace ?params ~seed ~n ~link:(V.lossy 0.03) () in
  let r = V.rng w in
  let obs = { addrs = Array.make n []; moves = 0; next = 0; left = []; problems = [] } in
  V.set_hooks w
    {
      V.no_hooks with
      viewed =
        (fun _ id v ->
          List.iter (fun l -> obs.left <- (id, l, v.Consort_group.Group.vid) :: obs.left) v.left);
    };
  for i = 0 to n - 1 do
    V.at w (Rng.int r 400_000_000) (fun () -> start w obs i)
  done;
  (* Moves under traffic: some while the view is stable, some while the
     view changes after a crash (the crash is noticed after 5 s of
     silence), some while a restarted member joins. *)
  let victim = Rng.int r n in
  let tc = s 4. + Rng.int r (s 2.) in
  V.at w tc (fun () -> crash w obs victim);
  let back = tc + s 7. + Rng.int r (s 2.) in
  V.at w back (fun () -> start w obs victim);
  let anyone () = Rng.int r n in
  for _ = 1 to 3 do
    let i = anyone () in
    V.at w (s 1.5 + Rng.int r (s 2.5)) (fun () -> move w obs i)
  done;
  for _ = 1 to 3 do
    let i = anyone () in
    V.at w (tc + s 4.8 + Rng.int r (s 1.7)) (fun () -> move w obs i)
  done;
  for _ = 1 to 2 do
    let i = anyone () in
    V.at w (back + Rng.int r (s 1.)) (fun () -> move w obs i)
  done;
  (* A member moves twice in a row, before the others answer the first. *)
  let twice = anyone () in
  let t2 = back + s 2. + Rng.int r (s 2.) in
  V.at w t2 (fun () -> move w obs twice);
  V.at w (t2 + Rng.int r (Time.of_ms 30)) (fun () -> move w obs twice);
  V.workload w ~from:(s 1.) ~until:(back + s 5.) ~count:150;
  Sim.run ~until:(back + s 25.) (V.net w);
  (* No member that was not crashed left a view: a move is no leave. *)
  let crashed = V.crashed w in
  let spurious =
    List.filter_map
      (fun (who, l, vid) ->
        if List.mem l crashed then None
        else Some (Printf.sprintf "%s saw %s leave in view %s, and it never crashed" who l vid))
      (List.rev obs.left)
  in
  let none = if obs.moves = 0 then [ "no member moved" ] else [] in
  V.finish ~extra:(List.rev obs.problems @ spurious @ settled w obs @ none @ V.not_wedged w) w

(* A member moves to an address nothing reaches (datagrams to it are all
   lost; it can send from it): no member acknowledges the move. The member
   must not be cut out of the group: it goes back to the address it left,
   every member sends to it there, the unreachable address is closed, and
   no member is seen leaving. *)
let unreachable_scenario ?trace ?params seed =
  let n = 5 in
  let w = V.make ?trace ?params ~seed ~n ~link:(V.lossy 0.02) () in
  let r = V.rng w in
  for i = 0 to n - 1 do
    V.at w (Rng.int r 400_000_000) (fun () -> V.start w i)
  done;
  let left = ref [] and problems = ref [] in
  V.set_hooks w
    {
      V.no_hooks with
      viewed =
        (fun _ id v ->
          List.iter (fun l -> left := (id, l, v.Consort_group.Group.vid) :: !left) v.left);
    };
  let mover = Rng.int r n in
  let dst = Printf.sprintf "%s.lost" (V.addr w mover) in
  let t = s 3. + Rng.int r (s 2.) in
  V.at w t (fun () ->
      List.iter
        (fun j ->
          if j <> mover then
            Sim.set_link (V.net w) ~src:(V.addr w j) ~dst { (V.lossy 0.02) with loss = 1.0 })
        (List.init n Fun.id);
      match V.group w mover with
      | Some g -> (
          V.note w "%d %s moves to %s, which nothing reaches" (Sim.now (V.net w)) (G.me g) dst;
          match G.migrate g dst with
          | Ok () -> ()
          | Error e ->
              problems :=
                Fmt.str "move to %s refused: %a" dst Consort_group.Group.pp_migrate_error e
                :: !problems)
      | None -> problems := "the mover had not joined" :: !problems);
  V.workload w ~from:(s 1.) ~until:(t + s 12.) ~count:150;
  Sim.run ~until:(t + s 30.) (V.net w);
  let spurious =
    List.rev_map
      (fun (who, l, vid) ->
        Printf.sprintf "%s saw %s leave in view %s, and it never crashed" who l vid)
      !left
  in
  let back =
    match V.group w mover with
    | None -> [ "the mover is gone" ]
    | Some g ->
        (if G.address g <> V.addr w mover then
           [
             Printf.sprintf "%s listens at %s, not back at %s" (G.me g) (G.address g)
               (V.addr w mover);
           ]
         else [])
        @ (if Sim.is_open (V.net w) dst then
             [ Printf.sprintf "%s still listens at %s, which nothing reaches" (G.me g) dst ]
           else [])
        @ List.filter_map
            (fun j ->
              match V.group w j with
              | Some h when j <> mover -> (
                  match G.member_address h (G.me g) with
                  | Some a when a = V.addr w mover -> None
                  | a ->
                      Some
                        (Printf.sprintf "%s sends to %s at %s" (G.me h) (G.me g)
                           (Option.value ~default:"(not in its view)" a)))
              | _ -> None)
            (List.init n Fun.id)
  in
  V.finish ~extra:(List.rev !problems @ spurious @ back @ V.not_wedged w) w

let scenarios =
  [
    ( "migrate",
      "5 members under casts and sends move to new addresses (Group.migrate): while the view is \
       stable, while it changes after a crash, while the crashed member rejoins, and twice in a \
       row; 3% loss; virtual synchrony, no member seen leaving, every member known at its last \
       address, old addresses closed",
      migrate_scenario );
    ( "migrate-unreachable",
      "one of 5 members moves to an address nothing reaches (it can send from it) under casts and \
       sends; 2% loss: it goes back to the address it left, is not cut out of the group, and every \
       member sends to it there",
      unreachable_scenario );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None

let scenarios = Vsync_sim.scenarios_of ~names ~describe ~run
