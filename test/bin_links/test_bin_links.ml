(* What the installed executables link, read from the dune files of the source tree: consort links
   no library defined under bench/ or test/, directly or through another library (the dependency
   rules of the library graph are checked edge by edge elsewhere; this follows the closure of the
   executables). consort-bench, its counterpart, does link the benchmarks: the reading is checked
   to see them. *)

let exe_dir =
  let d = Filename.dirname Sys.executable_name in
  if Filename.is_relative d then Filename.concat (Sys.getcwd ()) d else d

(* The source tree: the first directory above this executable, outside _build, with the project's
   dune-project and bin/dune. *)
let root =
  lazy
    (let in_build d = List.mem "_build" (String.split_on_char '/' d) in
     let rec up d n =
       if
         (not (in_build d))
         && Sys.file_exists (Filename.concat d "dune-project")
         && Sys.file_exists (Filename.concat d "bin/dune")
       then d
       else if n = 0 || Filename.dirname d = d then Alcotest.failf "no source tree above %s" exe_dir
       else up (Filename.dirname d) (n - 1)
     in
     up exe_dir 12)

(* Every dune file of the tree, by directory relative to the root. *)
let dune_files () =
  let root = Lazy.force root in
  let rec walk rel acc =
    let abs = if rel = "" then root else Filename.concat root rel in
    Array.fold_left
      (fun acc f ->
        let r = if rel = "" then f else Filename.concat rel f in
        let a = Filename.concat abs f in
        if f = "" || f.[0] = '.' || f.[0] = '_' then acc
        else if Sys.is_directory a then walk r acc
        else if f = "dune" then (rel, a) :: acc
        else acc)
      acc
      (let a = Sys.readdir abs in
       Array.sort compare a;
       a)
  in
  walk "" []

(* The s-expressions of a dune file: atoms, quoted strings and lists; comments from ';' to the end
   of the line. Enough for the stanzas' names and libraries. *)
type sexp = Atom of string | List of sexp list

let parse file text =
  let n = String.length text in
  let rec skip i =
    if i >= n then i
    else
      match text.[i] with
      | ' ' | '\t' | '\n' | '\r' -> skip (i + 1)
      | ';' -> ( match String.index_from_opt text i '\n' with Some j -> skip (j + 1) | None -> n)
      | _ -> i
  in
  let rec value i =
    let i = skip i in
    if i >= n then Alcotest.failf "%s: unexpected end" file
    else
      match text.[i] with
      | '(' -> items (i + 1) []
      | ')' -> Alcotest.failf "%s: unexpected ')' at %d" file i
      | '"' ->
          let b = Buffer.create 16 in
          let rec str j =
            if j >= n then Alcotest.failf "%s: unterminated string" file
            else
              match text.[j] with
              | '"' -> (Atom (Buffer.contents b), j + 1)
              | '\\' when j + 1 < n ->
                  Buffer.add_char b text.[j + 1];
                  str (j + 2)
              | c ->
                  Buffer.add_char b c;
                  str (j + 1)
          in
          str (i + 1)
      | _ ->
          let rec atom j =
            if j < n && not (String.contains " \t\n\r();\"" text.[j]) then atom (j + 1) else j
          in
          let j = atom i in
          (Atom (String.sub text i (j - i)), j)
  and items i acc =
    let i = skip i in
    if i >= n then Alcotest.failf "%s: unclosed '('" file
    else if text.[i] = ')' then (List (List.rev acc), i + 1)
    else
      let v, j = value i in
      items j (v :: acc)
  in
  let rec all i acc =
    let i = skip i in
    if i >= n then List.rev acc
    else
      let v, j = value i in
      all j (v :: acc)
  in
  all 0 []

let read file =
  let ic = open_in_bin file in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  s

type stanza = {
  kind : string;  (** library, executable, test *)
  dir : string;
  names : string list;  (** the name and the public name: how others refer to it *)
  libraries : string list;
}

let field name fields =
  List.find_map (function List (Atom n :: v) when n = name -> Some v | _ -> None) fields

let atoms v = List.filter_map (function Atom a -> Some a | List _ -> None) v

let stanzas () =
  List.concat_map
    (fun (dir, file) ->
      let sexps = parse file (read file) in
      List.filter_map
        (function
          | List (Atom (("library" | "executable" | "test") as kind) :: fields) ->
              let one f = Option.value ~default:[] (Option.map atoms (field f fields)) in
              Some
                {
                  kind;
                  dir;
                  names = one "name" @ one "public_name";
                  libraries = Option.value ~default:[] (Option.map atoms (field "libraries" fields));
                }
          | _ -> None)
        sexps)
    (dune_files ())

let under prefix dir =
  dir = prefix
  || String.length dir > String.length prefix
     && String.sub dir 0 (String.length prefix + 1) = prefix ^ "/"

(* The libraries of the tree an executable links, each with the chain that brings it in. *)
let closure all exe =
  let libs = List.filter (fun s -> s.kind = "library") all in
  let find n = List.find_opt (fun s -> List.mem n s.names) libs in
  let seen = Hashtbl.create 64 in
  let rec go chain s =
    List.iter
      (fun n ->
        match find n with
        | Some l when not (Hashtbl.mem seen (List.hd l.names)) ->
            Hashtbl.replace seen (List.hd l.names) (l, List.rev (n :: chain));
            go (n :: chain) l
        | _ -> ())
      s.libraries
  in
  go [] exe;
  Hashtbl.fold (fun _ v acc -> v :: acc) seen []

let executable all public =
  match List.find_opt (fun s -> s.kind = "executable" && List.mem public s.names) all with
  | Some s -> s
  | None -> Alcotest.failf "no executable %s in the dune files" public

let bench_or_test (l, _) = under "bench" l.dir || under "test" l.dir

let consort_links_no_bench_or_test () =
  let all = stanzas () in
  let linked = closure all (executable all "consort") in
  (* The reading sees the production libraries consort is made of. *)
  List.iter
    (fun n ->
      if not (List.exists (fun (l, _) -> List.mem n l.names) linked) then
        Alcotest.failf "consort does not link %s, as read from the dune files" n)
    [ "consort"; "consort.group"; "consort.member"; "consort_sim_group" ];
  match List.filter bench_or_test linked with
  | [] -> ()
  | bad ->
      Alcotest.failf "consort links %s"
        (String.concat "; "
           (List.map
              (fun (l, chain) ->
                Printf.sprintf "%s (%s) through %s" (List.hd l.names) l.dir
                  (String.concat " -> " chain))
              bad))

(* Every other installed executable (consortd, consort-exec-ml): no bench or test library either. *)
let installed_link_no_bench_or_test () =
  let all = stanzas () in
  let installed =
    List.filter
      (fun s ->
        s.kind = "executable"
        && List.length s.names > 1
        && (not (under "bench" s.dir))
        && not (under "test" s.dir))
      all
  in
  List.iter
    (fun n ->
      if not (List.exists (fun s -> List.mem n s.names) installed) then
        Alcotest.failf "no installed executable %s found" n)
    [ "consort"; "consortd"; "consort-exec-ml" ];
  (* consort-exec, the agent's C client, is built by a rule and installed beside them: it links
     no library at all. *)
  let exec_dune = Filename.concat (Lazy.force root) "bin/exec/dune" in
  let text =
    let ic = open_in_bin exec_dune in
    Fun.protect
      ~finally:(fun () -> close_in ic)
      (fun () -> really_input_string ic (in_channel_length ic))
  in
  let sub = "(consort_exec.exe as consort-exec)" in
  let has = ref false in
  for i = 0 to String.length text - String.length sub do
    if String.sub text i (String.length sub) = sub then has := true
  done;
  if not !has then Alcotest.failf "%s does not install consort_exec.exe as consort-exec" exec_dune;
  List.iter
    (fun exe ->
      match List.filter bench_or_test (closure all exe) with
      | [] -> ()
      | (l, chain) :: _ ->
          Alcotest.failf "%s (%s) links %s through %s" (List.nth exe.names 1) exe.dir
            (List.hd l.names) (String.concat " -> " chain))
    installed

let consort_bench_links_the_benchmarks () =
  let all = stanzas () in
  let b = executable all "consort-bench" in
  if not (under "bench" b.dir) then Alcotest.failf "consort-bench is defined in %s" b.dir;
  let linked = closure all b in
  List.iter
    (fun n ->
      if not (List.exists (fun (l, _) -> List.mem n l.names) linked) then
        Alcotest.failf "consort-bench does not link %s" n)
    [ "consort_bench"; "consort_group_bench"; "consort_net_bench" ]

let () =
  Alcotest.run "bin_links"
    [
      ( "links",
        [
          Alcotest.test_case "consort links no bench or test library" `Quick
            consort_links_no_bench_or_test;
          Alcotest.test_case "consortd and consort-exec(-ml) link no bench or test library" `Quick
            installed_link_no_bench_or_test;
          Alcotest.test_case "consort-bench links the benchmarks" `Quick
            consort_bench_links_the_benchmarks;
        ] );
    ]
