open Consort
module Sim = Consort_engine.Sim
module V = Vsync_sim
module G = Consort_group.Group.Make (Sim)
module P = Consort_group.Properties

let s = Time.of_sec

let layers ps = match P.layers ps with Ok l -> l | Error e -> Fmt.failwith "%a" P.pp_error e

(* The stacks the group goes through: each differs from the one before. *)
let stack_a = layers P.vsync
let stack_b = layers (List.filter (( <> ) P.Flow) P.vsync)

type obs = {
  by_view : (string, string * string) Hashtbl.t;  (* view -> stack, first member that reported it *)
  mutable problems : string list;
  mutable errors : (string * Consort_group.Group.stack_error) list;  (* member, error *)
  first_group_view : (string, string * string list) Hashtbl.t;  (* member -> its first view with others: stack, members *)
}

let hooks w obs =
  {
    V.no_hooks with
    viewed =
      (fun i id v ->
        (* In join, before the member is known: its first view is its own. *)
        let stack = match V.group w i with Some g -> G.stack_name g | None -> "" in
        if stack <> "" then begin
          match Hashtbl.find_opt obs.by_view v.Consort_group.Group.vid with
          | Some (st, who) when st <> stack ->
              obs.problems <- Printf.sprintf "view %s runs stack %s at %s but %s at %s" v.vid st who stack id :: obs.problems
          | Some _ -> ()
          | None -> Hashtbl.replace obs.by_view v.vid (stack, id)
        end;
        if Array.length v.members > 1 && not (Hashtbl.mem obs.first_group_view id) then
          Hashtbl.replace obs.first_group_view id (stack, Array.to_list v.members));
    stack_error = (fun _ id e -> obs.errors <- (id, e) :: obs.errors);
  }

(* Casts from live members every 5 ms for 150 ms: some are given while
   the switch flushes, and go out on the new stack. *)
let burst w ~from =
  for k = 0 to 29 do
    V.at w (from + (k * Time.of_ms 5)) (fun () ->
        for i = 0 to V.nprocs w - 1 do
          if Rng.int (V.rng w) 4 = 0 then V.cast w i
        done)
  done

let switch_at w obs t ~who stack name =
  V.at w t (fun () ->
      let live = List.filter (fun i -> V.group w i <> None) who in
      match live with
      | [] -> ()
      | _ -> (
          let i = List.nth live (Rng.int (V.rng w) (List.length live)) in
          match V.group w i with
          | Some g -> (
              V.note w "%d %s switches the group to %s" (Sim.now (V.net w)) (G.me g) name;
              match G.switch g stack with
              | Ok () -> burst w ~from:(Sim.now (V.net w))
              | Error e -> obs.problems <- Fmt.str "%s: switch refused: %a" (G.me g) Consort_group.Group.pp_switch_error e :: obs.problems)
          | None -> ()))

let switch_scenario ?trace ?params seed =
  let n = 6 in
  let w = V.make ?trace ?params ~seed ~n ~link:(V.lossy 0.02) () in
  let r = V.rng w in
  let obs = { by_view = Hashtbl.create 16; problems = []; errors = []; first_group_view = Hashtbl.create 8 } in
  V.set_hooks w (hooks w obs);
  let group = [ 0; 1; 2; 3; 4 ] in
  List.iter (fun i -> V.at w (Rng.int r 300_000_000) (fun () -> V.start w i)) group;
  (* Another member starts on stack B while the group runs A (both of
     epoch 0): it must be refused until the group switches to B. *)
  let odd = ref "" in
  V.at w (s 1.) (fun () ->
      V.start ~layers:stack_b w 5;
      match V.group w 5 with Some g -> odd := G.me g | None -> ());
  let t1 = s 3. + Rng.int r (s 1.) in
  switch_at w obs t1 ~who:group stack_b "B (no Flow)";
  (* Back to A, with a crash about then. *)
  let t2 = s 6. + Rng.int r (s 1.) in
  switch_at w obs t2 ~who:group stack_a "A (vsync)";
  let victim = Rng.int r 5 in
  V.at w (t2 - s 0.5 + Rng.int r (s 1.)) (fun () -> V.crash w victim);
  (* A partition; one side switches to B meanwhile, and the other takes B
     when they meet again. *)
  let t3 = s 9.5 + Rng.int r (s 1.) in
  let addrs = List.init n (V.addr w) in
  let shuffled = List.map snd (List.sort compare (List.map (fun a -> (Rng.bits64 r, a)) addrs)) in
  let side_a = List.filteri (fun i _ -> i < 3) shuffled and side_b = List.filteri (fun i _ -> i >= 3) shuffled in
  V.at w t3 (fun () ->
      V.note w "%d partition" (Sim.now (V.net w));
      Sim.partition (V.net w) [ side_a; side_b ]);
  let on_a = List.filter (fun i -> List.mem (V.addr w i) side_a) (List.init n Fun.id) in
  switch_at w obs (t3 + s 1.5) ~who:on_a stack_b "B (no Flow), in one partition";
  V.at w (t3 + s 5.) (fun () ->
      V.note w "%d heal" (Sim.now (V.net w));
      Sim.heal (V.net w));
  V.workload w ~from:(s 2.) ~until:(t3 + s 7.) ~count:110;
  Sim.run ~until:(t3 + s 20.) (V.net w);
  let extra =
    (* The odd member joined no one before the group ran its stack, and
       heard why. *)
    (match Hashtbl.find_opt obs.first_group_view !odd with
    | Some (stack, members) when stack <> Consort.Stack.describe stack_b ->
        [ Printf.sprintf "%s, on stack B, was in a view [%s] running %s" !odd (String.concat ", " members) stack ]
    | _ -> [])
    @ (if !odd <> "" && not (List.exists (fun (id, e) -> id = !odd || match e with Consort_group.Group.Incompatible { peer; _ } -> peer = !odd | _ -> false) obs.errors)
       then [ Printf.sprintf "no stack error was reported about %s while it ran another stack" !odd ]
       else [])
    @ List.rev obs.problems
  in
  (* Every live member ends on one stack. *)
  let finals =
    List.sort_uniq compare
      (List.filter_map (fun i -> match V.group w i with Some g -> Some (G.stack_id g) | None -> None) (List.init n Fun.id))
  in
  let extra = if List.length finals > 1 then Printf.sprintf "live members end on %d stacks" (List.length finals) :: extra else extra in
  V.finish ~extra:(extra @ V.not_wedged w) w

let scenarios =
  [
    ( "switch",
      "5 members switch their stack three times (A to B, back to A during a crash, to B in one side of a partition) \
       under casts, sends and bursts; a member started on B joins only once the group runs B; 2% loss",
      switch_scenario );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None
