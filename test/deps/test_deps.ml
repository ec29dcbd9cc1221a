(* The library graph: every dependency a dune file declares is one doc/deps.allowed allows. Known
   violations (listed there) are printed as "known violation" lines; one that no longer happens
   fails, so that the list only shrinks. *)

open Deps_check

(* The repository's root: the first directory up from here, or from the executable, with
   doc/deps.allowed and dune-project, outside _build. *)
let root =
  let ok d =
    Sys.file_exists (Filename.concat d "doc/deps.allowed")
    && Sys.file_exists (Filename.concat d "dune-project")
    && not (List.mem "_build" (String.split_on_char '/' d))
  in
  let rec up d =
    if ok d then Some d
    else
      let p = Filename.dirname d in
      if p = d then None else up p
  in
  let abs p = if Filename.is_relative p then Filename.concat (Sys.getcwd ()) p else p in
  match up (Sys.getcwd ()) with
  | Some d -> d
  | None -> (
      match up (Filename.dirname (abs Sys.executable_name)) with
      | Some d -> d
      | None ->
          prerr_endline "test_deps: no doc/deps.allowed above the current directory";
          exit 2)

let rules =
  match parse_rules (read_file (Filename.concat root "doc/deps.allowed")) with
  | Ok r -> r
  | Error e ->
      prerr_endline e;
      exit 2

let nodes, parse_errors = scan root
let all = violations rules nodes

let () =
  List.iter (fun v -> if is_known rules v then Fmt.pr "known violation: %a@." pp_violation v) all

let check_list what = function
  | [] -> ()
  | l -> Alcotest.failf "%s:\n  %s" what (String.concat "\n  " l)

let dune_files_parse () =
  check_list "dune files that do not parse" parse_errors;
  Alcotest.(check bool) "the tree has libraries" true (List.length nodes > 20)

let rule_file () = check_list "doc/deps.allowed" (rule_errors rules nodes)

let edges () =
  check_list "dependencies that doc/deps.allowed does not allow"
    (List.filter_map
       (fun v -> if is_known rules v then None else Some (Fmt.str "%a" pp_violation v))
       all)

let known_still_needed () =
  check_list "known violations that no longer happen (remove them from doc/deps.allowed)"
    (List.map (fun (f, t) -> f ^ " -> " ^ t) (stale_known rules all))

(* The checker itself, on a small tree of its own. *)
let tree =
  [
    ("src/core", "(library (name consort) (public_name consort) (libraries cstruct fmt))");
    ("src/net", "(library (name consort_net) (public_name consort.net) (libraries consort))");
    ( "src/seal",
      "; a comment\n\
       (library (name consort_seal) (public_name consort.seal)\n\
      \ (libraries consort (re_export consort_net)))" );
    ( "src/group",
      "(library (name consort_group) (public_name consort.group) (libraries consort unix))" );
    ("bench", "(library (name consort_bench) (libraries consort))");
    ("bin", "(executables (names main other) (libraries consort.seal consort_bench))");
  ]

let tree_rules =
  {|# the rules of the small tree
production src bin
nonproduction bench test
allow consort:
allow consort.net: consort
allow consort.seal: consort
allow consort.group: consort
only consort.group: consort cstruct fmt logs
never consort.seal: consort.net
known bin/other.exe -> consort_bench
known bin/gone.exe -> consort_bench
|}

let checker () =
  let nodes =
    List.concat_map
      (fun (dir, text) ->
        match nodes_of_dune ~dir text with Ok n -> n | Error e -> Alcotest.failf "%s: %s" dir e)
      tree
  in
  let rules = match parse_rules tree_rules with Ok r -> r | Error e -> Alcotest.fail e in
  Alcotest.(check (list string)) "the rules fit the tree" [] (rule_errors rules nodes);
  let vs = violations rules nodes in
  Alcotest.(check (list (pair string string)))
    "every broken rule, and only those"
    [
      ("consort.seal", "consort.net");
      ("consort.group", "unix");
      ("bin/main.exe", "consort_bench");
      ("bin/other.exe", "consort_bench");
    ]
    (List.map (fun v -> (v.from, v.to_)) vs);
  Alcotest.(check (list string))
    "why"
    [
      "never allowed";
      "consort.group may depend only on consort cstruct fmt logs";
      "production code links bench code";
      "production code links bench code";
    ]
    (List.map (fun v -> v.why) vs);
  Alcotest.(check (list bool)) "known" [ false; false; false; true ] (List.map (is_known rules) vs);
  Alcotest.(check (list (pair string string)))
    "a known violation that is gone"
    [ ("bin/gone.exe", "consort_bench") ]
    (stale_known rules vs);
  (* A library of the production tree must have its line, and names must exist. *)
  let rules' =
    match parse_rules "production src\nallow consort.nope: consort\n" with
    | Ok r -> r
    | Error e -> Alcotest.fail e
  in
  Alcotest.(check int)
    "a library without its line, a line without its library" 5
    (List.length (rule_errors rules' nodes));
  Alcotest.(check bool)
    "a line that is no rule" true
    (Result.is_error (parse_rules "allow consort.seal consort\n"));
  Alcotest.(check bool)
    "an edge allowed and never allowed" true
    (rule_errors
       (match parse_rules "allow consort.seal: consort.net\nnever consort.seal: consort.net\n" with
       | Ok r -> r
       | Error e -> Alcotest.fail e)
       nodes
    |> List.exists (fun e -> e = "consort.seal -> consort.net is both allowed and never allowed"))

let () =
  Alcotest.run "deps"
    [
      ( "graph",
        [
          Alcotest.test_case "dune files parse" `Quick dune_files_parse;
          Alcotest.test_case "rule file fits the tree" `Quick rule_file;
          Alcotest.test_case "every edge allowed" `Quick edges;
          Alcotest.test_case "known violations still needed" `Quick known_still_needed;
        ] );
      ("checker", [ Alcotest.test_case "a small tree" `Quick checker ]);
    ]
