open Consort
module Sim = Consort_engine.Sim
module V = Vsync_sim
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))
module P = Consort_group.Properties
module Order = Consort_spec.Order

let s = Time.of_sec
let layers ps = match P.layers ps with Ok l -> l | Error e -> Fmt.failwith "%a" P.pp_error e
let protocol p = Params.set "total.protocol" (Params.String p) Params.empty

(* The stacks the group goes through, each with its tunables, after total
   order by the sequencer: by the token, then with causal order, then with
   safe delivery. *)
let token = (layers P.(vsync @ [ Total ]), protocol "token", "Total (token)")
let causal = (layers P.(vsync @ [ Total; Causal ]), protocol "token", "Total (token), Causal")

let agree =
  (layers P.(vsync @ [ Total; Causal; Agree ]), protocol "token", "Total (token), Causal, Agree")

type obs = {
  by_view : (string, string * string) Hashtbl.t;
      (* view -> the stack's layers, first member that reported it *)
  mutable problems : string list;
  mutable errors : (string * Consort_group.Group.stack_error) list; (* member, error *)
  first_group_view : (string, string * string list) Hashtbl.t;
      (* member -> its first view with others: digest, members *)
  digests : (string, string) Hashtbl.t; (* view -> stack identity *)
}

let hooks w obs =
  {
    V.no_hooks with
    viewed =
      (fun i id v ->
        (* In join, before the member is known: its first view is its own. *)
        let stack, digest =
          match V.group w i with Some g -> (G.stack_name g, G.stack_id g) | None -> ("", "")
        in
        if stack <> "" then begin
          match Hashtbl.find_opt obs.by_view v.Consort_group.Group.vid with
          | Some (st, who) when st <> stack ->
              obs.problems <-
                Printf.sprintf "view %s runs stack %s at %s but %s at %s" v.vid st who stack id
                :: obs.problems
          | Some _ -> ()
          | None -> Hashtbl.replace obs.by_view v.vid (stack, id)
        end;
        if digest <> "" then begin
          match Hashtbl.find_opt obs.digests v.vid with
          | Some d when d <> digest ->
              obs.problems <-
                Printf.sprintf "view %s runs two stack identities (%s at %s)" v.vid digest id
                :: obs.problems
          | Some _ -> ()
          | None -> Hashtbl.replace obs.digests v.vid digest
        end;
        if Array.length v.members > 1 && not (Hashtbl.mem obs.first_group_view id) then
          Hashtbl.replace obs.first_group_view id (digest, Array.to_list v.members));
    stack_error = (fun _ id e -> obs.errors <- (id, e) :: obs.errors);
  }

(* Casts from live members every 5 ms for 100 ms: some are given while the
   switch flushes, and go out on the new stack. *)
let burst w ~from =
  for k = 0 to 19 do
    V.at w
      (from + (k * Time.of_ms 5))
      (fun () ->
        for i = 0 to V.nprocs w - 1 do
          if Rng.int (V.rng w) 4 = 0 then V.cast w i
        done)
  done

let switch_at w obs t ~who (stack, params, name) =
  V.at w t (fun () ->
      let live = List.filter (fun i -> V.group w i <> None) who in
      match live with
      | [] -> ()
      | _ -> (
          let i = List.nth live (Rng.int (V.rng w) (List.length live)) in
          match V.group w i with
          | Some g -> (
              V.note w "%d %s switches the group to %s" (Sim.now (V.net w)) (G.me g) name;
              match G.switch ~params g stack with
              | Ok () -> burst w ~from:(Sim.now (V.net w))
              | Error e ->
                  obs.problems <-
                    Fmt.str "%s: switch refused: %a" (G.me g) Consort_group.Group.pp_switch_error e
                    :: obs.problems)
          | None -> ()))

(* An ordering checker, on the views whose stack has [layer] only. *)
let only obs layer name check logs =
  let has vid =
    match Hashtbl.find_opt obs.by_view vid with
    | Some (st, _) -> List.mem layer (String.split_on_char ':' st)
    | None -> false
  in
  let keep = function
    | Consort_spec.Log.Deliver { view; kind = `Cast; _ } -> has view
    | _ -> true
  in
  match check (List.map (fun (id, l) -> (id, List.filter keep l)) logs) with
  | Ok () -> []
  | Error vs -> List.map (fun v -> Fmt.str "%s: %a" name Order.pp_violation v) vs

let switch_scenario ?trace ?params seed =
  let n = 5 in
  let w = V.make ?trace ?params ~props:P.(vsync @ [ Total ]) ~seed ~n ~link:(V.lossy 0.02) () in
  let w = V.with_params w [ ("total.protocol", Params.String "sequencer") ] in
  let r = V.rng w in
  let obs =
    {
      by_view = Hashtbl.create 16;
      problems = [];
      errors = [];
      first_group_view = Hashtbl.create 8;
      digests = Hashtbl.create 16;
    }
  in
  V.set_hooks w (hooks w obs);
  let group = [ 0; 1; 2; 3 ] in
  List.iter (fun i -> V.at w (Rng.int r 300_000_000) (fun () -> V.start w i)) group;
  (* Another member starts with the token while the group runs the
     sequencer (both of epoch 0: the same layers, another tunable): it
     must be refused until the group switches to the token. *)
  let odd = ref "" and odd_stack = ref "" in
  V.at w (s 1.) (fun () ->
      let l, p, _ = token in
      V.start ~layers:l ~params:p w 4;
      match V.group w 4 with
      | Some g ->
          odd := G.me g;
          odd_stack := G.stack_id g
      | None -> ());
  let t1 = s 3. + Rng.int r (s 1.) in
  switch_at w obs t1 ~who:group token;
  (* Causal order added, with a crash about then. *)
  let t2 = s 6. + Rng.int r (s 1.) in
  switch_at w obs t2 ~who:group causal;
  let victim = Rng.int r 4 in
  V.at w (t2 - s 0.5 + Rng.int r (s 1.)) (fun () -> V.crash w victim);
  (* A partition; one side adds safe delivery meanwhile, and the other
     takes that stack when they meet again. *)
  let t3 = s 9.5 + Rng.int r (s 1.) in
  let addrs = List.init n (V.addr w) in
  let shuffled = List.map snd (List.sort compare (List.map (fun a -> (Rng.bits64 r, a)) addrs)) in
  let side_a = List.filteri (fun i _ -> i < 3) shuffled
  and side_b = List.filteri (fun i _ -> i >= 3) shuffled in
  V.at w t3 (fun () ->
      V.note w "%d partition" (Sim.now (V.net w));
      Sim.partition (V.net w) [ side_a; side_b ]);
  let on_a = List.filter (fun i -> List.mem (V.addr w i) side_a) (List.init n Fun.id) in
  switch_at w obs (t3 + s 1.5) ~who:on_a agree;
  V.at w
    (t3 + s 5.)
    (fun () ->
      V.note w "%d heal" (Sim.now (V.net w));
      Sim.heal (V.net w));
  V.workload w ~from:(s 2.) ~until:(t3 + s 7.) ~count:80;
  Sim.run ~until:(t3 + s 17.) (V.net w);
  let extra =
    (* The odd member joined no one before the group ran its stack, and
       someone heard why. *)
    (match Hashtbl.find_opt obs.first_group_view !odd with
    | Some (d, members) when d <> !odd_stack ->
        [
          Printf.sprintf "%s, started with the token, was in a view [%s] on another stack" !odd
            (String.concat ", " members);
        ]
    | _ -> [])
    @ (if
         !odd <> ""
         && not
              (List.exists
                 (fun (id, e) ->
                   id = !odd
                   ||
                   match e with
                   | Consort_group.Group.Incompatible { peer; _ } -> peer = !odd
                   | _ -> false)
                 obs.errors)
       then
         [ Printf.sprintf "no stack error was reported about %s while it ran another stack" !odd ]
       else [])
    @ List.rev obs.problems
  in
  (* Every live member ends on one stack. *)
  let finals =
    List.sort_uniq compare
      (List.filter_map
         (fun i -> match V.group w i with Some g -> Some (G.stack_id g) | None -> None)
         (List.init n Fun.id))
  in
  let extra =
    if List.length finals > 1 then
      Printf.sprintf "live members end on %d stacks" (List.length finals) :: extra
    else extra
  in
  let checks =
    [
      only obs "total" "total" Order.check_total;
      only obs "causal" "causal" Order.check_causal;
      only obs "agree" "safe" Order.check_safe;
    ]
  in
  V.finish ~extra:(extra @ V.not_wedged w) ~checks w

let scenarios =
  [
    ( "switch",
      "4 members switch their stack three times (total order by sequencer to token, adding Causal \
       during a crash, adding Agree in one side of a partition, taken by the other at the heal) \
       under casts, sends and bursts; a member started with the token joins only once the group \
       runs it; 2% loss",
      switch_scenario );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None

let scenarios = Vsync_sim.scenarios_of ~names ~describe ~run
