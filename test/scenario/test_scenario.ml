(* Determinism of whole scenarios: the simulator, the layers and the
   workload together. *)

module S = Consort_scenario.Scenario

let run name seed =
  match S.run name ~seed with Ok o -> o | Error e -> Alcotest.failf "%a" S.pp_error e

let with_trace name seed =
  let file = Filename.temp_file "consort-trace" ".txt" in
  let oc = open_out file in
  let o = match S.run ~trace:oc name ~seed with Ok o -> o | Error e -> Alcotest.failf "%a" S.pp_error e in
  close_out oc;
  let ic = open_in_bin file in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  Sys.remove file;
  (o, s)

let same_seed name () =
  List.iter
    (fun seed ->
      let a = run name seed and b = run name seed in
      Alcotest.(check string) "trace hash" a.trace_hash b.trace_hash;
      Alcotest.(check int) "datagrams" a.datagrams b.datagrams;
      Alcotest.(check int) "deliveries" a.delivered b.delivered;
      Alcotest.(check (list string)) "no violations" [] a.violations)
    [ 1; 7; 1234 ]

let same_trace_file name () =
  let a, ta = with_trace name 42 and b, tb = with_trace name 42 in
  Alcotest.(check string) "hash" a.trace_hash b.trace_hash;
  Alcotest.(check bool) "trace is not empty" true (String.length ta > 1000);
  Alcotest.(check bool) "trace files are byte-identical" true (String.equal ta tb)

let different_seeds name () =
  let hashes = List.init 20 (fun i -> (run name (i + 1)).trace_hash) in
  let distinct = List.sort_uniq compare hashes in
  Alcotest.(check int) "20 seeds give 20 different traces" 20 (List.length distinct)

let unknown () =
  match S.run "no-such-scenario" ~seed:1 with
  | Ok _ -> Alcotest.fail "an unknown scenario ran"
  | Error (S.Unknown_scenario { name; known } as e) ->
      Alcotest.(check string) "the error names the scenario" "no-such-scenario" name;
      Alcotest.(check (list string)) "and the known ones" S.names known;
      let e = Fmt.str "%a" S.pp_error e in
      Alcotest.(check bool) "printed, the error names the known scenarios" true
        (List.for_all (fun n -> Text.contains e n) S.names)

let () =
  let per name =
    [
      Alcotest.test_case (name ^ ": same seed, same trace") `Quick (same_seed name);
      Alcotest.test_case (name ^ ": same seed, identical trace file") `Quick (same_trace_file name);
      Alcotest.test_case (name ^ ": different seeds, different traces") `Quick (different_seeds name);
    ]
  in
  Alcotest.run "scenario"
    [
      ("determinism", List.concat_map per S.names);
      ("names", [ Alcotest.test_case "unknown scenario" `Quick unknown ]);
    ]
