(* The README's code is real: every OCaml, C or Python block in README.md
   and doc/tutorial.md stands verbatim in a file under examples/ (or
   clients/), and every example program builds and runs to a successful
   end. *)

let exe_dir =
  let d = Filename.dirname Sys.executable_name in
  if Filename.is_relative d then Filename.concat (Sys.getcwd ()) d else d

(* The source tree: the first parent of this executable, outside _build
   (whose copies may be stale), holding README.md and examples/. *)
let root =
  let in_build d = List.mem "_build" (String.split_on_char '/' d) in
  let rec up d n =
    if
      (not (in_build d))
      && Sys.file_exists (Filename.concat d "README.md")
      && Sys.file_exists (Filename.concat d "examples/readme_group.ml")
    then d
    else if n = 0 || Filename.dirname d = d then Alcotest.failf "no source tree above %s" exe_dir
    else up (Filename.dirname d) (n - 1)
  in
  lazy (up exe_dir 8)

let read f =
  let ic = open_in_bin f in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  s

(* Fenced blocks of README.md: (language, first line number, text). *)
let blocks text =
  let lines = String.split_on_char '\n' text in
  let rec go n acc cur = function
    | [] -> List.rev acc
    | l :: rest -> (
        let fence = String.length l >= 3 && String.sub l 0 3 = "```" in
        match cur with
        | None when fence ->
            go (n + 1) acc (Some (String.sub l 3 (String.length l - 3), n, [])) rest
        | None -> go (n + 1) acc None rest
        | Some (lang, start, body) when fence ->
            go (n + 1)
              ((String.trim lang, start, String.concat "\n" (List.rev body)) :: acc)
              None rest
        | Some (lang, start, body) -> go (n + 1) acc (Some (lang, start, l :: body)) rest)
  in
  go 1 [] None lines

let trim_right l =
  let n = ref (String.length l) in
  while !n > 0 && (l.[!n - 1] = ' ' || l.[!n - 1] = '\r') do
    decr n
  done;
  String.sub l 0 !n

let normalise s = String.split_on_char '\n' s |> List.map trim_right |> String.concat "\n"

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  m = 0 || go 0

let rec files dir =
  if not (Sys.file_exists dir) then []
  else
    Array.to_list (Sys.readdir dir)
    |> List.concat_map (fun f ->
           let p = Filename.concat dir f in
           if Sys.is_directory p then files p else [ p ])

let code_langs = [ "ocaml"; "c"; "python"; "go" ]

let blocks_are_files doc () =
  let root = Lazy.force root in
  let sources =
    List.concat_map (fun d -> files (Filename.concat root d)) [ "examples"; "clients" ]
    |> List.filter (fun f ->
           List.exists (Filename.check_suffix f) [ ".ml"; ".c"; ".h"; ".py"; ".go" ])
    |> List.map (fun f -> (f, normalise (read f)))
  in
  let checked = ref 0 in
  List.iter
    (fun (lang, line, body) ->
      if List.mem lang code_langs then (
        incr checked;
        let body = normalise body in
        if not (List.exists (fun (_, text) -> contains text body) sources) then
          Alcotest.failf "%s:%d: this %s block is not in any file under examples/ or clients/" doc
            line lang))
    (blocks (read (Filename.concat root doc)));
  if !checked = 0 then Alcotest.failf "no code block found in %s" doc

(* Runs an example, killing it after [limit] seconds. *)
let run_example ?(limit = 60.) name =
  let exe = Filename.concat exe_dir ("../../examples/" ^ name ^ ".exe") in
  let out = Filename.temp_file name ".out" in
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let null = Unix.openfile "/dev/null" [ O_RDONLY ] 0 in
  let pid = Unix.create_process exe [| exe |] null fd fd in
  Unix.close fd;
  Unix.close null;
  let deadline = Unix.gettimeofday () +. limit in
  let rec wait () =
    match Unix.waitpid [ WNOHANG ] pid with
    | 0, _ when Unix.gettimeofday () > deadline ->
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid);
        `Timeout
    | 0, _ ->
        Unix.sleepf 0.02;
        wait ()
    | _, Unix.WEXITED c -> `Exit c
    | _, _ -> `Signal
  in
  let r = wait () in
  let text = read out in
  Sys.remove out;
  match r with
  | `Exit 0 -> text
  | `Exit c -> Alcotest.failf "%s exited %d:\n%s" name c text
  | `Timeout -> Alcotest.failf "%s still running after %.0f s:\n%s" name limit text
  | `Signal -> Alcotest.failf "%s killed by a signal:\n%s" name text

let example name expect () =
  let text = run_example name in
  List.iter
    (fun s ->
      if not (contains text s) then Alcotest.failf "%s: %S not in its output:\n%s" name s text)
    expect

(* {1 Packaging} *)

(* Every dune file under [dir], recursively, outside _build. *)
let rec dune_files dir =
  if not (Sys.file_exists dir) then []
  else
    Array.to_list (Sys.readdir dir)
    |> List.concat_map (fun f ->
           let p = Filename.concat dir f in
           if Sys.is_directory p then
             if f = "_build" || f = "_tools" || f.[0] = '.' then [] else dune_files p
           else if f = "dune" then [ p ]
           else [])

(* The opam file lists every library the dune files use from outside the
   project (by its opam package: the name before the first dot), each with a
   lower bound, and says what opam needs besides. *)
let opam_file () =
  let root = Lazy.force root in
  let opam = read (Filename.concat root "consort.opam") in
  (* The names inside each "(libraries ...)" of a dune file, comments
     (from ';' to the end of the line) left out. *)
  let libraries text =
    let text =
      String.split_on_char '\n' text
      |> List.map (fun l ->
             match String.index_opt l ';' with Some i -> String.sub l 0 i | None -> l)
      |> String.concat "\n"
    in
    let key = "(libraries" and n = String.length text in
    let rec from i acc =
      match
        let rec find j =
          if j + String.length key > n then None
          else if String.sub text j (String.length key) = key then Some j
          else find (j + 1)
        in
        find i
      with
      | None -> acc
      | Some j ->
          let k = ref (j + String.length key) and depth = ref 1 in
          let b = Buffer.create 256 in
          while !depth > 0 && !k < n do
            (match text.[!k] with
            | '(' -> incr depth
            | ')' -> decr depth
            | c -> Buffer.add_char b c);
            incr k
          done;
          let names =
            Buffer.contents b
            |> String.map (function '\n' | '\t' -> ' ' | c -> c)
            |> String.split_on_char ' '
            |> List.filter (fun w -> w <> "" && w <> "select" && w <> "from" && w <> "->")
            |> List.filter (fun w -> not (String.contains w ':'))
          in
          from !k (names @ acc)
    in
    from 0 []
  in
  let used =
    List.concat_map (fun f -> libraries (read f)) (dune_files root)
    |> List.filter_map (fun l ->
           let pkg = List.hd (String.split_on_char '.' l) in
           if
             List.mem pkg [ "consort"; "unix"; "bigarray"; "threads"; "str"; "dynlink"; "stdlib" ]
             || ((not (String.contains l '.')) && (String.contains l '_' || l = "pcap"))
           then None
           else Some pkg)
    |> List.sort_uniq compare
  in
  (* Local libraries (daemon_harness, fuzz_consort, ...) are named with an
     underscore or live in this tree; every other name is an opam package. *)
  if List.length used < 10 then Alcotest.failf "only %d libraries found" (List.length used);
  Printf.printf "opam packages the dune files use: %s\n" (String.concat " " used);
  List.iter
    (fun pkg ->
      let row = Printf.sprintf "\"%s\" {" pkg in
      if not (contains opam row) then
        Alcotest.failf "consort.opam: the dune files use %s, which depends does not list (%s)" pkg
          "with a lower bound";
      let i =
        let rec find i = if String.sub opam i (String.length row) = row then i else find (i + 1) in
        find 0
      in
      let line = String.sub opam i (String.index_from opam i '\n' - i) in
      if not (contains line ">=") then Alcotest.failf "consort.opam: %s has no lower bound" line)
    used;
  (* Bounds that match the code: Mirage_crypto.Hash is gone from mirage-crypto 1.0.0, so every
     mirage-crypto package the code uses has an upper bound below it. *)
  let sources =
    let rec walk dir =
      Array.to_list (Sys.readdir dir)
      |> List.concat_map (fun f ->
             let p = Filename.concat dir f in
             if Sys.is_directory p then if f = "_build" || f.[0] = '.' then [] else walk p
             else if Filename.check_suffix f ".ml" then [ p ]
             else [])
    in
    List.concat_map walk
      (List.filter Sys.file_exists (List.map (Filename.concat root) [ "src"; "bin" ]))
  in
  if List.exists (fun f -> contains (read f) "Mirage_crypto.Hash") sources then
    List.iter
      (fun pkg ->
        if List.mem pkg used then begin
          let row = Printf.sprintf "\"%s\" {" pkg in
          let rec find i =
            if String.sub opam i (String.length row) = row then i else find (i + 1)
          in
          let i = find 0 in
          let line = String.sub opam i (String.index_from opam i '\n' - i) in
          if not (contains line "< \"1.0.0\"") then
            Alcotest.failf
              "consort.opam: %s: the code uses Mirage_crypto.Hash, removed in 1.0.0: needs < 1.0.0"
              line
        end)
      [ "mirage-crypto"; "mirage-crypto-rng"; "mirage-crypto-ec" ];
  (* A C stub linked with OpenSSL's libcrypto needs its headers and library from the system. *)
  if List.exists (fun f -> contains (read f) "-lcrypto") (dune_files root) then begin
    let i =
      let rec find i =
        if i + 8 > String.length opam then Alcotest.fail "consort.opam has no depexts"
        else if String.sub opam i 8 = "depexts:" then i
        else find (i + 1)
      in
      find 0
    in
    let depexts = String.sub opam i (String.length opam - i) in
    if not (contains depexts "\"libssl-dev\"") then
      Alcotest.fail "consort.opam: a dune file links -lcrypto, and depexts has no libssl-dev"
  end;
  List.iter
    (fun field -> if not (contains opam field) then Alcotest.failf "consort.opam has no %s" field)
    [
      "available: os = \"linux\"";
      "version: \"";
      "homepage: \"";
      "license: \"";
      "dev-repo: \"";
      "\"odoc\" {with-doc & >=";
    ]

(* The README's table of parts and doc/design.md cover the whole tree:
   every directory at the top, under src/ and under bench/ is named in
   both (the tests' directories by the README's row for test/). *)
let parts_cover_the_tree () =
  let root = Lazy.force root in
  let readme = read (Filename.concat root "README.md")
  and design = read (Filename.concat root "doc/design.md") in
  let dirs d =
    let p = Filename.concat root d in
    Array.to_list (Sys.readdir p)
    |> List.filter (fun f -> Sys.is_directory (Filename.concat p f))
    |> List.filter (fun f -> f <> "" && f.[0] <> '_' && f <> ".git" && f <> "findings")
    |> List.map (fun f -> if d = "." then f else d ^ "/" ^ f)
    |> List.sort compare
  in
  let top = List.filter (fun d -> d <> "test") (dirs ".") in
  let all = top @ dirs "src" @ dirs "bench" @ dirs "clients" in
  if List.length all < 30 then Alcotest.failf "only %d directories" (List.length all);
  List.iter
    (fun d ->
      let named doc = contains doc ("`" ^ d) || contains doc (d ^ "/") in
      if not (named readme) then Alcotest.failf "README.md's table of parts does not name %s" d;
      if not (named design) then Alcotest.failf "doc/design.md does not name %s" d)
    all

let () =
  Alcotest.run "examples"
    [
      ( "readme",
        [
          Alcotest.test_case "every code block of README.md is a file under examples/" `Quick
            (blocks_are_files "README.md");
          Alcotest.test_case "every code block of doc/tutorial.md is a file under examples/" `Quick
            (blocks_are_files "doc/tutorial.md");
        ] );
      ( "packaging",
        [
          Alcotest.test_case "the opam file lists every dependency" `Quick opam_file;
          Alcotest.test_case "README's parts and design.md cover the tree" `Quick
            parts_cover_the_tree;
        ] );
      ( "run",
        [
          Alcotest.test_case "readme_group" `Quick
            (example "readme_group"
               [ "says \"hello from 127.0.0.1:7460\""; "says \"hello from 127.0.0.1:7461\"" ]);
          Alcotest.test_case "group_chat" `Quick (example "group_chat" [ "alice's final view" ]);
          Alcotest.test_case "reliable_cast" `Quick (example "reliable_cast" []);
          Alcotest.test_case "cap_counter" `Quick (example "cap_counter" []);
          Alcotest.test_case "total_order" `Quick
            (example "total_order" [ "all 3 members delivered the 12 casts in one order" ]);
          Alcotest.test_case "lwt_group" `Quick
            (example "lwt_group"
               [
                 "127.0.0.1:7494: 127.0.0.1:7493"; "says \"hello from Lwt\""; "done: the ticker ran";
               ]);
          Alcotest.test_case "select_loop" `Quick
            (example "select_loop"
               [
                 "127.0.0.1:7497: 127.0.0.1:7496";
                 "says \"hello from a select loop\"";
                 "done: the host ticked";
               ]);
        ] );
    ]
