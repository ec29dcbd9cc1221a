(* The linearizability checker: hand-written histories, random histories
   made by a linearizable map (accepted) and the same with one response
   changed to one no order explains (refused), and 10,000 operations. *)

open Consort_spec
module L = Linearizable

let ev ?(client = 0) ?(key = "k") op call ret resp =
  { L.client; key; op; call; return = Some ret; response = Some resp }

let unknown ?(client = 0) ?(key = "k") op call =
  { L.client; key; op; call; return = None; response = None }

let is_lin h = match L.check h with L.Linearizable -> true | _ -> false

let expect name want h =
  match (want, L.check h) with
  | true, L.Linearizable | false, L.Not_linearizable _ -> ()
  | _, r -> Alcotest.failf "%s: %a" name L.pp_result r

let hand () =
  expect "sequential" true
    [
      ev (L.Put "a") 0 1 L.Ok;
      ev L.Get 2 3 (L.Value "a");
      ev L.Del 4 5 L.Ok;
      ev L.Get 6 7 L.Not_found;
    ];
  (* A read after a write returned must see it. *)
  expect "stale read" false [ ev (L.Put "a") 0 1 L.Ok; ev ~client:1 L.Get 2 3 L.Not_found ];
  (* Overlapping: either order. *)
  expect "overlap old" true [ ev (L.Put "a") 0 10 L.Ok; ev ~client:1 L.Get 2 3 L.Not_found ];
  expect "overlap new" true [ ev (L.Put "a") 0 10 L.Ok; ev ~client:1 L.Get 2 3 (L.Value "a") ];
  (* Once a read saw the new value, a later read cannot see the old one. *)
  expect "new then old" false
    [
      ev (L.Put "a") 0 10 L.Ok;
      ev ~client:1 L.Get 2 3 (L.Value "a");
      ev ~client:2 L.Get 4 5 L.Not_found;
    ];
  (* An unknown put may happen late, or never. *)
  expect "unknown late" true
    [
      unknown (L.Put "a") 0;
      ev ~client:1 L.Get 5 6 L.Not_found;
      ev ~client:1 L.Get 7 8 (L.Value "a");
    ];
  expect "unknown never" true [ unknown (L.Put "a") 0; ev ~client:1 L.Get 5 6 L.Not_found ];
  expect "unknown not before its call" false
    [ ev ~client:1 L.Get 0 1 (L.Value "a"); unknown (L.Put "a") 2 ];
  (* A value nobody wrote. *)
  expect "invented" false [ ev (L.Put "a") 0 1 L.Ok; ev L.Get 2 3 (L.Value "b") ];
  (* Compare and set. *)
  expect "cas" true
    [
      ev (L.Put "a") 0 1 L.Ok;
      ev (L.Cas { expect = "a"; set = "b" }) 2 3 L.Ok;
      ev L.Get 4 5 (L.Value "b");
    ];
  expect "two cas both win" false
    [
      ev (L.Put "a") 0 1 L.Ok;
      ev (L.Cas { expect = "a"; set = "b" }) 2 10 L.Ok;
      ev ~client:1 (L.Cas { expect = "a"; set = "c" }) 2 10 L.Ok;
    ];
  expect "cas on absent" false [ ev (L.Cas { expect = "a"; set = "b" }) 0 1 L.Ok ];
  (* Keys are independent. *)
  expect "two keys" true [ ev ~key:"x" (L.Put "1") 0 1 L.Ok; ev ~key:"y" L.Get 2 3 L.Not_found ];
  expect "bad times" false [ ev (L.Put "a") 5 1 L.Ok ]

(* A random history of a linearizable map: [clients] run one operation at
   a time; each takes effect at a random instant between its call and its
   return; some are abandoned (unknown), and those take effect later or
   never. *)
let gen ?(abandon = 30) ~rng ~clients ~keys ~n () =
  let vals = ref 0 in
  let state = Hashtbl.create 16 in
  let pending = Array.make clients None in
  (* (event, applied response option) *)
  let floating = ref [] in
  let out = ref [] in
  let t = ref 0 and made = ref 0 in
  let random_op () =
    incr vals;
    match Random.State.int rng 10 with
    | 0 | 1 | 2 | 3 -> L.Get
    | 4 | 5 | 6 -> L.Put (string_of_int !vals)
    | 7 -> L.Del
    | _ ->
        L.Cas
          { expect = string_of_int (Random.State.int rng (max 1 !vals)); set = string_of_int !vals }
  in
  let apply key op =
    let v = Hashtbl.find_opt state key in
    let r, v' = L.step v op in
    (match v' with Some x -> Hashtbl.replace state key x | None -> Hashtbl.remove state key);
    r
  in
  while !made < n || Array.exists Option.is_some pending do
    incr t;
    (* Abandoned operations take effect late, sometimes. *)
    (match !floating with
    | (key, op) :: rest when Random.State.int rng 20 = 0 ->
        ignore (apply key op);
        floating := rest
    | _ -> ());
    let c = Random.State.int rng clients in
    match pending.(c) with
    | None ->
        if !made < n then (
          incr made;
          let key = "k" ^ string_of_int (Random.State.int rng keys) in
          pending.(c) <- Some (key, random_op (), !t, None))
    | Some (key, op, call, None) -> (
        match Random.State.int rng abandon with
        | 0 ->
            (* abandoned before taking effect *)
            out := unknown ~client:c ~key op call :: !out;
            if Random.State.bool rng then floating := (key, op) :: !floating;
            pending.(c) <- None
        | _ -> pending.(c) <- Some (key, op, call, Some (apply key op)))
    | Some (key, op, call, Some r) ->
        if Random.State.int rng abandon = 0 then out := unknown ~client:c ~key op call :: !out
        else out := ev ~client:c ~key op call !t r :: !out;
        pending.(c) <- None
  done;
  List.rev !out

(* One known response changed to one that no order explains: a get of a
   value never written. *)
let corrupt ~rng h =
  let gets = List.filter (fun e -> e.L.op = L.Get && e.L.response <> None) h in
  match gets with
  | [] -> None
  | _ ->
      let target = List.nth gets (Random.State.int rng (List.length gets)) in
      Some
        (List.map
           (fun e -> if e == target then { e with L.response = Some (L.Value "never") } else e)
           h)

let random_accept () =
  for seed = 1 to 300 do
    let rng = Random.State.make [| seed |] in
    let h =
      gen ~rng
        ~clients:(2 + Random.State.int rng 6)
        ~keys:(1 + Random.State.int rng 3)
        ~n:(10 + Random.State.int rng 150)
        ()
    in
    match L.check h with
    | L.Linearizable -> ()
    | r -> Alcotest.failf "seed %d: a linearizable history refused: %a" seed L.pp_result r
  done

let random_refuse () =
  for seed = 1 to 300 do
    let rng = Random.State.make [| seed; 7 |] in
    let h =
      gen ~rng
        ~clients:(2 + Random.State.int rng 6)
        ~keys:(1 + Random.State.int rng 3)
        ~n:(10 + Random.State.int rng 150)
        ()
    in
    match corrupt ~rng h with
    | None -> ()
    | Some h' -> (
        match L.check h' with
        | L.Not_linearizable _ -> ()
        | r -> Alcotest.failf "seed %d: a corrupted history: %a" seed L.pp_result r)
  done

(* Reordering two sequential writes' effects: a read between them sees the
   second one's value before it was written. *)
let swapped () =
  let h =
    [ ev (L.Put "1") 0 1 L.Ok; ev (L.Put "2") 2 3 L.Ok; ev ~client:1 L.Get 4 5 (L.Value "1") ]
  in
  Alcotest.(check bool) "old value after a newer write returned" false (is_lin h)

let large () =
  let rng = Random.State.make [| 42 |] in
  let h = gen ~abandon:300 ~rng ~clients:10 ~keys:8 ~n:10_000 () in
  Alcotest.(check bool) "10,000 operations" true (List.length h >= 10_000);
  let t0 = Unix.gettimeofday () in
  (match L.check h with
  | L.Linearizable -> ()
  | r -> Alcotest.failf "10,000 operations refused: %a" L.pp_result r);
  let dt = Unix.gettimeofday () -. t0 in
  Fmt.pr "10,000 operations (10 clients, 8 keys) checked in %.3f s@." dt;
  (* Loose: seconds, even on a loaded machine. *)
  if dt > 30. then Alcotest.failf "checking took %.1f s" dt;
  (* One key only: 10,000 operations in one partition. *)
  let h1 = gen ~abandon:300 ~rng ~clients:10 ~keys:1 ~n:10_000 () in
  let t0 = Unix.gettimeofday () in
  (match L.check h1 with L.Linearizable -> () | r -> Alcotest.failf "one key: %a" L.pp_result r);
  let dt1 = Unix.gettimeofday () -. t0 in
  Fmt.pr "10,000 operations on one key checked in %.3f s@." dt1;
  if dt1 > 30. then Alcotest.failf "checking one key took %.1f s" dt1;
  (* A corrupted history must be refused: proving it so searches every
     order, which grows as 2 to the number of clients per key. *)
  let refuse name h =
    match corrupt ~rng h with
    | Some h' -> (
        let t0 = Unix.gettimeofday () in
        match L.check h' with
        | L.Not_linearizable v ->
            Fmt.pr "%s, corrupted: refused in %.3f s: %a@." name
              (Unix.gettimeofday () -. t0)
              L.pp_violation v
        | r -> Alcotest.failf "%s, corrupted: %a" name L.pp_result r)
    | None -> Alcotest.failf "%s: no get to corrupt" name
  in
  refuse "10 clients, 8 keys" h;
  refuse "4 clients, 1 key" (gen ~abandon:300 ~rng ~clients:4 ~keys:1 ~n:10_000 ())

let () =
  Alcotest.run "kv-lin"
    [
      ( "linearizable",
        [
          Alcotest.test_case "hand-written" `Quick hand;
          Alcotest.test_case "swapped writes" `Quick swapped;
          Alcotest.test_case "random accepted" `Quick random_accept;
          Alcotest.test_case "random corrupted refused" `Quick random_refuse;
          Alcotest.test_case "10,000 operations" `Quick large;
        ] );
    ]
