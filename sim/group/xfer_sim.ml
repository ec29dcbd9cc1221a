open Consort
module Sim = Consort_engine.Sim
module V = Vsync_sim
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))
module X = Consort_spec.Xfer

(* The application of one member incarnation: the casts it applied, by key
   (the payload's digest), with their payloads, and its trace. *)
type app = {
  state : (string, string) Hashtbl.t;
  mutable trace : X.event list;
  mutable view : string;
}

type apps = { by_id : (string, app) Hashtbl.t; order : string list ref }

let app apps id =
  match Hashtbl.find_opt apps.by_id id with
  | Some a -> a
  | None ->
      let a = { state = Hashtbl.create 64; trace = []; view = "" } in
      Hashtbl.replace apps.by_id id a;
      apps.order := id :: !(apps.order);
      a

let key s = Digest.to_hex (Digest.string s)

(* A snapshot: its base view, then every entry, sorted by key, as KEY LEN
   PAYLOAD. Deterministic: equal states give equal strings. *)
let snapshot a =
  let b = Buffer.create 4096 in
  Buffer.add_string b (Printf.sprintf "%s\n" a.view);
  let keys = List.sort compare (Hashtbl.fold (fun k _ acc -> k :: acc) a.state []) in
  List.iter
    (fun k ->
      let p = Hashtbl.find a.state k in
      Buffer.add_string b k;
      Buffer.add_char b ' ';
      Buffer.add_string b (string_of_int (String.length p));
      Buffer.add_char b ' ';
      Buffer.add_string b p)
    keys;
  Buffer.contents b

let parse s =
  try
    let j = String.index s '\n' in
    let base = String.sub s 0 j in
    let entries = ref [] in
    let pos = ref (j + 1) in
    while !pos < String.length s do
      let sp = String.index_from s !pos ' ' in
      let k = String.sub s !pos (sp - !pos) in
      let sp2 = String.index_from s (sp + 1) ' ' in
      let len = int_of_string (String.sub s (sp + 1) (sp2 - sp - 1)) in
      entries := (k, String.sub s (sp2 + 1) len) :: !entries;
      pos := sp2 + 1 + len
    done;
    Some (base, List.rev !entries)
  with Not_found | Invalid_argument _ | Failure _ -> None

let hooks w apps =
  {
    V.take =
      (fun _ id ->
        let a = app apps id in
        a.trace <- X.Take { base = a.view } :: a.trace;
        snapshot a);
    install =
      (fun _ id s ->
        let a = app apps id in
        match parse s with
        | None -> V.problem w (Printf.sprintf "%s installed a snapshot that does not parse" id)
        | Some (base, entries) ->
            Hashtbl.reset a.state;
            List.iter (fun (k, p) -> Hashtbl.replace a.state k p) entries;
            a.trace <- X.Install { base; keys = List.map fst entries } :: a.trace);
    applied =
      (fun _ id ~view kind ~origin:_ s ->
        match kind with
        | `Cast ->
            let a = app apps id and k = key s in
            Hashtbl.replace a.state k s;
            a.trace <- X.Apply { view; key = k } :: a.trace
        | `Send -> ());
    stack_error = (fun _ _ _ -> ());
    viewed =
      (fun _ id v ->
        let vid = v.Consort_group.Group.vid in
        let a = app apps id in
        a.view <- vid;
        a.trace <- X.View { view = vid } :: a.trace);
  }

let s = Time.of_sec

let setup ?trace ?params ~n seed =
  let w =
    V.make ?trace ?params
      ~props:Consort_group.Properties.(vsync @ [ Xfer ])
      ~seed ~n ~link:(V.lossy 0.02) ()
  in
  (* Small chunks and window: a state of a few hundred KB takes many round
     trips, so that crashes and casts happen while it streams. *)
  let w = V.with_params w [ ("xfer.chunk", Params.Int 2000); ("xfer.window", Params.Int 8000) ] in
  let apps = { by_id = Hashtbl.create 16; order = ref [] } in
  V.set_hooks w (hooks w apps);
  (w, apps)

(* Large casts (200 B to 1.5 KB) from random members every 40 to 130 ms. *)
let big_casts w ~from ~until =
  let t = ref from in
  while !t < until do
    let i = Rng.int (V.rng w) (V.nprocs w) and size = 200 + Rng.int (V.rng w) 1300 in
    V.at w !t (fun () -> V.cast ~size w i);
    t := !t + Time.of_ms 40 + Rng.int (V.rng w) (Time.of_ms 90)
  done

(* The state checks, and that each member in [must_install] that is alive
   at the end installed a state. *)
let finish w apps ~must_install ~extra =
  Array.iteri
    (fun i _ ->
      match V.group w i with
      | Some g ->
          let id = G.me g in
          let a = app apps id in
          a.trace <-
            X.Final
              { view = (G.view g).vid; keys = Hashtbl.fold (fun k _ acc -> k :: acc) a.state [] }
            :: a.trace
      | None -> ())
    (Array.make (V.nprocs w) ());
  let traces =
    List.rev_map (fun id -> (id, List.rev (Hashtbl.find apps.by_id id).trace)) !(apps.order)
  in
  let installs =
    List.filter_map
      (fun id ->
        match List.assoc_opt id traces with
        | Some tr when not (List.exists (function X.Install _ -> true | _ -> false) tr) ->
            if List.mem id (V.crashed w) then None
            else Some (Printf.sprintf "%s joined a group with a state and never installed it" id)
        | _ -> None)
      (must_install ())
  in
  V.finish ~extra:(X.check traces @ installs @ V.not_wedged w @ extra ()) w

let join_scenario ?trace ?params seed =
  let w, apps = setup ?trace ?params ~n:5 seed in
  let r = V.rng w in
  for i = 0 to 2 do
    V.at w (Rng.int r 300_000_000) (fun () -> V.start w i)
  done;
  let joiners = ref [] in
  let join_at t i =
    V.at w t (fun () ->
        V.start w i;
        match V.group w i with Some g -> joiners := G.me g :: !joiners | None -> ())
  in
  join_at (s 4. + Rng.int r (s 3.)) 3;
  join_at (s 5. + Rng.int r (s 4.)) 4;
  (* A member crashes and comes back as a new incarnation, which joins. *)
  let back = Rng.int r 3 in
  V.at w (s 7. + Rng.int r (s 2.)) (fun () -> V.crash w back);
  join_at (s 10. + Rng.int r (s 2.)) back;
  big_casts w ~from:(s 1.) ~until:(s 10.);
  V.workload w ~from:(s 1.) ~until:(s 12.) ~count:25;
  (* Then a 2/3 partition while both sides cast: at the heal, the members
     of the side whose state has seen fewer casts take the other's. *)
  let cut = s 14. + Rng.int r (s 1.) in
  let addrs = List.init 5 (V.addr w) in
  let shuffled = List.map snd (List.sort compare (List.map (fun a -> (Rng.bits64 r, a)) addrs)) in
  V.at w cut (fun () ->
      V.note w "%d partition" (Sim.now (V.net w));
      Sim.partition (V.net w)
        [ List.filteri (fun i _ -> i < 2) shuffled; List.filteri (fun i _ -> i >= 2) shuffled ]);
  V.at w
    (cut + s 7.)
    (fun () ->
      V.note w "%d heal" (Sim.now (V.net w));
      Sim.heal (V.net w));
  V.workload w ~from:(cut + s 0.5) ~until:(cut + s 6.5) ~count:24;
  Sim.run ~until:(s 36.) (V.net w);
  finish w apps ~must_install:(fun () -> !joiners) ~extra:(fun () -> [])

let giver_crash_scenario ?trace ?params seed =
  let w, apps = setup ?trace ?params ~n:5 seed in
  let r = V.rng w in
  for i = 0 to 3 do
    V.at w (Rng.int r 300_000_000) (fun () -> V.start w i)
  done;
  big_casts w ~from:(s 1.) ~until:(s 9.);
  V.workload w ~from:(s 1.) ~until:(s 10.) ~count:30;
  let joiner = 4 and joined = ref "" in
  let cut = ref None in
  let sent i =
    match V.group w i with Some g -> List.assoc "chunks_sent" (G.xfer_counters g) | None -> 0
  in
  let join_t = s 5. + Rng.int r (s 2.) in
  let before = Array.make 5 0 in
  V.at w join_t (fun () ->
      V.start w joiner;
      (match V.group w joiner with Some g -> joined := G.me g | None -> ());
      for i = 0 to 3 do
        before.(i) <- sent i
      done);
  (* Once the joiner has a few chunks, crash the member sending them. *)
  let rec watch k =
    if k > 0 && !cut = None then
      V.at w
        (Sim.now (V.net w) + Time.of_ms 2)
        (fun () ->
          match V.group w joiner with
          | Some g when G.needs_state g && List.assoc "chunks_received" (G.xfer_counters g) >= 3
            -> (
              match List.find_opt (fun i -> sent i > before.(i)) [ 0; 1; 2; 3 ] with
              | Some i ->
                  let id = match V.group w i with Some gi -> G.me gi | None -> "" in
                  V.note w "%d crash of the giver %s" (Sim.now (V.net w)) id;
                  cut := Some id;
                  V.crash w i;
                  (* It comes back later and needs the state in turn. *)
                  V.at w (Sim.now (V.net w) + s 3.) (fun () -> V.start w i)
              | None -> watch (k - 1))
          | _ -> watch (k - 1))
  in
  V.at w join_t (fun () -> watch 2000);
  Sim.run ~until:(s 30.) (V.net w);
  let extra () =
    match !cut with
    | None -> [ Printf.sprintf "no giver was crashed while %s received the state" !joined ]
    | Some giver -> (
        (* It installed it after the giver was gone: another one gave it. *)
        match Hashtbl.find_opt apps.by_id !joined with
        | Some a when not (List.exists (function X.Install _ -> true | _ -> false) a.trace) ->
            [
              Printf.sprintf "%s never installed the state after %s crashed while giving it" !joined
                giver;
            ]
        | _ ->
            (* Another member held the same snapshot and went on from the
               bytes the joiner had: no fall back to a later state. *)
            let counter i name =
              match V.group w i with Some g -> List.assoc name (G.xfer_counters g) | None -> 0
            in
            let resumed =
              List.fold_left (fun acc i -> acc + counter i "resumed") 0 [ 0; 1; 2; 3 ]
            in
            (if counter joiner "rebased" > 0 then
               [
                 Printf.sprintf
                   "%s fell back to a later state: no other member went on with the transfer"
                   !joined;
               ]
             else [])
            @
            if resumed = 0 then [ Printf.sprintf "no member went on from the bytes %s had" !joined ]
            else [])
  in
  finish w apps ~must_install:(fun () -> if !joined = "" then [] else [ !joined ]) ~extra

let scenarios =
  [
    ( "xfer-join",
      "3 members cast large messages; 2 join and a crashed one comes back: each gets the state in \
       chunks while casts go on; then a 2/3 partition heals and one side takes the state of the \
       other; 2% loss",
      join_scenario );
    ( "xfer-giver-crash",
      "4 members cast large messages; a fifth joins and the member giving it the state crashes \
       midway: another one goes on; 2% loss",
      giver_crash_scenario );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None

let scenarios = Vsync_sim.scenarios_of ~names ~describe ~run
