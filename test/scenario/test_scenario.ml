(* Determinism of whole scenarios: the simulator, the layers and the
   workload together. *)

module S = Consort_sim.Scenario

(* Every area's registry, as consort sim reads them. *)
let all =
  [
    Consort_sim_group.Scenarios.registry;
    Consort_sim_cap.Scenarios.registry;
    Consort_sim_capfs.Scenarios.registry;
    Consort_sim_kv.Scenarios.registry;
    Consort_sim_capdir.Scenarios.registry;
  ]

(* The scenarios whose determinism is checked here: the groups', the RPC's, and dir-gc, whose
   trace hash is the hash of its events. The storage scenarios have their own suites. *)
let registries =
  [
    Consort_sim_group.Scenarios.registry;
    Consort_sim_cap.Scenarios.registry;
    {
      Consort_sim_capdir.Scenarios.registry with
      scenarios =
        List.filter
          (fun (s : S.t) -> s.name = "dir-gc")
          Consort_sim_capdir.Scenarios.registry.scenarios;
    };
  ]

let names = S.names registries

let run name seed =
  match S.run registries name ~seed with Ok o -> o | Error e -> Alcotest.failf "%a" S.pp_error e

let with_trace name seed =
  let file = Filename.temp_file "consort-trace" ".txt" in
  let oc = open_out file in
  let o =
    match S.run registries ~trace:oc name ~seed with
    | Ok o -> o
    | Error e -> Alcotest.failf "%a" S.pp_error e
  in
  close_out oc;
  let ic = open_in_bin file in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  Sys.remove file;
  (o, s)

(* The large groups cost tens of seconds a run (scale-256 about 40): they
   are run on fewer seeds here; determinism does not depend on the size,
   and the smaller scenarios run the same code on the full set. *)
let large = [ "scale-64"; "scale-256" ]

let same_seed name () =
  List.iter
    (fun seed ->
      let a = run name seed and b = run name seed in
      Alcotest.(check string) "trace hash" a.trace_hash b.trace_hash;
      Alcotest.(check int) "datagrams" a.datagrams b.datagrams;
      Alcotest.(check int) "deliveries" a.delivered b.delivered;
      Alcotest.(check (list string)) "no violations" [] a.violations)
    (if List.mem name large then [ 1 ] else [ 1; 7; 1234 ])

let same_trace_file name () =
  let a, ta = with_trace name 42 and b, tb = with_trace name 42 in
  Alcotest.(check string) "hash" a.trace_hash b.trace_hash;
  Alcotest.(check bool) "trace is not empty" true (String.length ta > 1000);
  Alcotest.(check bool) "trace files are byte-identical" true (String.equal ta tb)

let different_seeds name () =
  let n = if List.mem name large then 3 else 20 in
  let hashes = List.init n (fun i -> (run name (i + 1)).trace_hash) in
  let distinct = List.sort_uniq compare hashes in
  Alcotest.(check int)
    (Printf.sprintf "%d seeds give as many different traces" n)
    n (List.length distinct)

let unknown () =
  match S.run all "no-such-scenario" ~seed:1 with
  | Ok _ -> Alcotest.fail "an unknown scenario ran"
  | Error (S.Unknown_scenario { name; known } as e) ->
      Alcotest.(check string) "the error names the scenario" "no-such-scenario" name;
      Alcotest.(check (list string)) "and the known ones" (S.names all) known;
      let e = Fmt.str "%a" S.pp_error e in
      Alcotest.(check bool)
        "printed, the error names the known scenarios" true
        (List.for_all (fun n -> Text.contains e n) (S.names all))

(* One scenario per name across every registry, each described, each registry non-empty; and a
   name is found in the registry that lists it, with its own description. *)
let registry_names () =
  Alcotest.(check (list string)) "names claimed twice" [] (S.duplicates all);
  List.iter
    (fun (r : S.registry) ->
      if r.scenarios = [] then Alcotest.failf "registry %s is empty" r.area;
      List.iter
        (fun (s : S.t) ->
          if String.length s.doc < 20 then Alcotest.failf "%s: description %S" s.name s.doc;
          match S.find all s.name with
          | Some f when f.doc == s.doc -> ()
          | _ -> Alcotest.failf "%s is not found as %s lists it" s.name r.area)
        r.scenarios)
    all;
  List.iter
    (fun n -> if S.find all n = None then Alcotest.failf "%s is in no registry" n)
    [ "pt2pt-lossy"; "vsync-crash"; "rpc-at-most-once"; "fs-crash"; "kv-linearizable"; "dir-gc" ]

(* dir-gc's trace hash is the hash of its trace: the file written with --trace. *)
let gc_trace_hash () =
  let o, text = with_trace "dir-gc" 5 in
  Alcotest.(check string) "hash of the trace file" (Digest.to_hex (Digest.string text)) o.trace_hash

(* The member logs of the group scenarios, as their trace shows them
   ("TIME {json}"): every record timed, blocks before view changes,
   numbered messages, and a live line for each member alive at the end.
   Without them the checker's rules on blocks, numbers and wedges would
   hold vacuously. *)
let member_logs () =
  let module Log = Consort_spec.Log in
  let _, text = with_trace "vsync-churn" 3 in
  let events =
    List.filter_map
      (fun line ->
        match String.index_opt line '{' with
        | Some i -> (
            match Log.of_line (String.sub line i (String.length line - i)) with
            | Ok e -> Some (int_of_string (String.sub line 0 (i - 1)), e)
            | Error e -> Alcotest.failf "a log line does not parse: %a: %s" Log.pp_error e line)
        | None -> None)
      (String.split_on_char '\n' text)
  in
  let count p = List.length (List.filter (fun (_, e) -> p e) events) in
  List.iter
    (fun (at, e) -> if Log.time e <> at then Alcotest.failf "t is %d, logged at %d" (Log.time e) at)
    events;
  let views = count (function Log.View _ -> true | _ -> false) in
  let blocks = count (function Log.Block _ -> true | _ -> false) in
  let lives = count (function Log.Live _ -> true | _ -> false) in
  let casts = count (function Log.Cast _ -> true | _ -> false) in
  if blocks < 3 then Alcotest.failf "only %d blocks for %d views" blocks views;
  if lives < 2 then Alcotest.failf "only %d live lines" lives;
  if casts < 50 then Alcotest.failf "only %d casts" casts;
  List.iter
    (fun (_, e) ->
      match e with
      | Log.Cast { seq; _ } | Log.Send { seq; _ } | Log.Deliver { seq; _ } ->
          if seq < 1 then Alcotest.failf "a message without its number: %a" Log.pp e
      | _ -> ())
    events;
  (* The live lines count the casts their members' logs hold. *)
  List.iter
    (fun (_, e) ->
      match e with
      | Log.Live { me; casts; _ } ->
          let mine = count (function Log.Cast c -> c.me = me | _ -> false) in
          Alcotest.(check int) ("casts of " ^ me) mine casts
      | _ -> ())
    events

let () =
  let per name =
    [ Alcotest.test_case (name ^ ": same seed, same trace") `Quick (same_seed name) ]
    @ (if name = "scale-256" then []
       else
         [
           Alcotest.test_case
             (name ^ ": same seed, identical trace file")
             `Quick (same_trace_file name);
         ])
    @ [
        Alcotest.test_case
          (name ^ ": different seeds, different traces")
          `Quick (different_seeds name);
      ]
  in
  Alcotest.run "scenario"
    [
      ("determinism", List.concat_map per names);
      ( "names",
        [
          Alcotest.test_case "unknown scenario" `Quick unknown;
          Alcotest.test_case "one scenario per name, each in its registry" `Quick registry_names;
          Alcotest.test_case "dir-gc: the trace hash is its trace's" `Quick gc_trace_hash;
        ] );
      ( "logs",
        [ Alcotest.test_case "group scenarios log what the checker needs" `Quick member_logs ] );
    ]
