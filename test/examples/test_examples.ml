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

let code_langs = [ "ocaml"; "c"; "python" ]

let blocks_are_files doc () =
  let root = Lazy.force root in
  let sources =
    List.concat_map (fun d -> files (Filename.concat root d)) [ "examples"; "clients" ]
    |> List.filter (fun f -> List.exists (Filename.check_suffix f) [ ".ml"; ".c"; ".h"; ".py" ])
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
