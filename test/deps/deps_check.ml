(* The library graph's rules (doc/deps.allowed) checked against the dune files. *)

type node = {
  id : string;
      (** a library's public name (its name without one); an executable's [DIR/NAME.exe] *)
  aliases : string list;  (** the names other dune files may use for it *)
  lib : bool;
  dir : string;  (** relative to the root *)
  deps : string list;  (** what its [libraries] field names, in order *)
}

type rules = {
  production : string list;  (** directories whose code is production code *)
  nonproduction : string list;  (** directories whose libraries production code never links *)
  allow : (string * string list) list;  (** a library, and the repository's libraries it may use *)
  only : (string * string list) list;  (** a library, and all it may use, the repository's or not *)
  never : (string * string list) list;  (** edges that are never allowed *)
  known : (string * string) list;  (** violations of today, each to be removed once it is gone *)
}

type violation = { from : string; to_ : string; why : string }

let pp_violation ppf v = Fmt.pf ppf "%s -> %s (%s)" v.from v.to_ v.why

(* --- The dune files --- *)

module S = Sexplib0.Sexp

let field name items =
  List.find_map (function S.List (S.Atom n :: rest) when n = name -> Some rest | _ -> None) items

let atoms l = List.filter_map (function S.Atom a -> Some a | S.List _ -> None) l

(* A [libraries] field: names, [(re_export NAME)], and [(select F from (A B -> F1) (-> F2))], whose
   optional libraries all count. *)
let rec libraries l =
  List.concat_map
    (function
      | S.Atom a -> [ a ]
      | S.List [ S.Atom "re_export"; S.Atom a ] -> [ a ]
      | S.List (S.Atom "select" :: _ :: S.Atom "from" :: choices) ->
          List.concat_map
            (function
              | S.List xs ->
                  let rec before = function
                    | S.Atom "->" :: _ | [] -> []
                    | S.Atom a :: rest ->
                        let a =
                          if String.length a > 0 && a.[0] = '!' then
                            String.sub a 1 (String.length a - 1)
                          else a
                        in
                        a :: before rest
                    | S.List _ :: rest -> before rest
                  in
                  before xs
              | S.Atom _ -> [])
            choices
      | S.List l -> libraries l)
    l

(* The stanzas of one dune file's text: [Error] says why it does not parse. *)
let nodes_of_dune ~dir text =
  match Parsexp.Many.parse_string text with
  | Error e -> Error (Parsexp.Parse_error.message e)
  | Ok sexps ->
      let deps items = match field "libraries" items with Some l -> libraries l | None -> [] in
      let exe name = if dir = "." then name ^ ".exe" else dir ^ "/" ^ name ^ ".exe" in
      Ok
        (List.concat_map
           (function
             | S.List (S.Atom "library" :: items) -> (
                 let name = Option.map atoms (field "name" items) in
                 let public = Option.map atoms (field "public_name" items) in
                 match (name, public) with
                 | Some [ n ], Some [ p ] ->
                     [ { id = p; aliases = [ p; n ]; lib = true; dir; deps = deps items } ]
                 | Some [ n ], _ ->
                     [ { id = n; aliases = [ n ]; lib = true; dir; deps = deps items } ]
                 | _ -> [])
             | S.List (S.Atom ("executable" | "test") :: items) -> (
                 match Option.map atoms (field "name" items) with
                 | Some [ n ] ->
                     [ { id = exe n; aliases = []; lib = false; dir; deps = deps items } ]
                 | _ -> [])
             | S.List (S.Atom ("executables" | "tests") :: items) -> (
                 match field "names" items with
                 | Some ns ->
                     List.map
                       (fun n -> { id = exe n; aliases = []; lib = false; dir; deps = deps items })
                       (atoms ns)
                 | None -> [])
             | _ -> [])
           sexps)

let read_file path =
  let ic = open_in_bin path in
  Fun.protect
    ~finally:(fun () -> close_in_noerr ic)
    (fun () -> really_input_string ic (in_channel_length ic))

(* Every dune file under [root], but in [_build], [_opam] and hidden directories. *)
let dune_files root =
  let rec walk rel acc =
    let abs = if rel = "." then root else Filename.concat root rel in
    let entries = try Sys.readdir abs with Sys_error _ -> [||] in
    Array.sort compare entries;
    Array.fold_left
      (fun acc e ->
        let r = if rel = "." then e else rel ^ "/" ^ e in
        let a = Filename.concat root r in
        if e = "" || e.[0] = '.' || e.[0] = '_' then acc
        else if Sys.is_directory a then walk r acc
        else if e = "dune" then (rel, a) :: acc
        else acc)
      acc entries
  in
  List.rev (walk "." [])

let scan root =
  List.fold_left
    (fun (nodes, errors) (dir, path) ->
      match nodes_of_dune ~dir (read_file path) with
      | Ok ns -> (nodes @ ns, errors)
      | Error e -> (nodes, errors @ [ Printf.sprintf "%s: does not parse: %s" path e ]))
    ([], []) (dune_files root)

(* --- The rule file --- *)

let words s = String.split_on_char ' ' s |> List.concat_map (String.split_on_char '\t')
let words s = List.filter (( <> ) "") (words s)

(* [Error] names the first line that is not one of the forms the file's header describes. *)
let parse_rules text =
  let lines = String.split_on_char '\n' text in
  let rec go n r = function
    | [] ->
        Ok
          {
            production = List.rev r.production;
            nonproduction = List.rev r.nonproduction;
            allow = List.rev r.allow;
            only = List.rev r.only;
            never = List.rev r.never;
            known = List.rev r.known;
          }
    | line :: rest -> (
        let line =
          match String.index_opt line '#' with Some i -> String.sub line 0 i | None -> line
        in
        let bad () =
          Error (Printf.sprintf "doc/deps.allowed:%d: not a rule: %s" n (String.trim line))
        in
        let lib_line ws =
          (* LIB: DEPS... *)
          match ws with
          | lib :: deps when String.length lib > 1 && lib.[String.length lib - 1] = ':' ->
              Some (String.sub lib 0 (String.length lib - 1), deps)
          | _ -> None
        in
        match words line with
        | [] -> go (n + 1) r rest
        | "production" :: (_ :: _ as dirs) ->
            go (n + 1) { r with production = List.rev_append dirs r.production } rest
        | "nonproduction" :: (_ :: _ as dirs) ->
            go (n + 1) { r with nonproduction = List.rev_append dirs r.nonproduction } rest
        | "allow" :: ws -> (
            match lib_line ws with
            | Some (l, d) when not (List.mem_assoc l r.allow) ->
                go (n + 1) { r with allow = (l, d) :: r.allow } rest
            | _ -> bad ())
        | "only" :: ws -> (
            match lib_line ws with
            | Some (l, d) when not (List.mem_assoc l r.only) ->
                go (n + 1) { r with only = (l, d) :: r.only } rest
            | _ -> bad ())
        | "never" :: ws -> (
            match lib_line ws with
            | Some (l, (_ :: _ as d)) -> go (n + 1) { r with never = (l, d) :: r.never } rest
            | _ -> bad ())
        | [ "known"; from; "->"; to_ ] -> go (n + 1) { r with known = (from, to_) :: r.known } rest
        | _ -> bad ())
  in
  go 1 { production = []; nonproduction = []; allow = []; only = []; never = []; known = [] } lines

(* --- The check --- *)

let under dir d =
  d = dir
  || (String.length d > String.length dir && String.sub d 0 (String.length dir + 1) = dir ^ "/")

let in_dirs dirs d = List.exists (fun dir -> under dir d) dirs

(* The rule file's own mistakes: a name that is no library of the tree (in [allow] lines, and as the
   subject of [only] and [never] lines, whose lists may name other packages), a library of the
   production directories without its [allow] line, an edge both allowed and never allowed. *)
let rule_errors rules nodes =
  let libs = List.filter (fun n -> n.lib) nodes in
  let known_name x = List.exists (fun n -> List.mem x n.aliases) libs in
  let stale =
    List.concat_map
      (fun (l, deps) ->
        (if known_name l then [] else [ Printf.sprintf "%s: no such library in the tree" l ])
        @ List.filter_map
            (fun d ->
              if known_name d then None
              else Some (Printf.sprintf "%s: %s: no such library in the tree" l d))
            deps)
      rules.allow
    @ List.filter_map
        (fun (l, _) ->
          if known_name l then None else Some (Printf.sprintf "%s: no such library in the tree" l))
        (rules.only @ rules.never)
  in
  let missing =
    List.filter_map
      (fun n ->
        if in_dirs rules.production n.dir && not (List.mem_assoc n.id rules.allow) then
          Some (Printf.sprintf "%s (%s/dune): no 'allow %s:' line" n.id n.dir n.id)
        else None)
      libs
  in
  let contradictions =
    List.concat_map
      (fun (l, ds) ->
        match List.assoc_opt l rules.allow with
        | Some allowed ->
            List.filter_map
              (fun d ->
                if List.mem d allowed then
                  Some (Printf.sprintf "%s -> %s is both allowed and never allowed" l d)
                else None)
              ds
        | None -> [])
      rules.never
  in
  stale @ missing @ contradictions

(* Every edge that breaks a rule, known or not, in the order of the dune files. *)
let violations rules nodes =
  let find name = List.find_opt (fun n -> n.lib && List.mem name n.aliases) nodes in
  List.concat_map
    (fun n ->
      let production = in_dirs rules.production n.dir in
      List.filter_map
        (fun dep ->
          let target = find dep in
          let to_ = match target with Some t -> t.id | None -> dep in
          let v why = Some { from = n.id; to_; why } in
          let never = List.exists (fun (l, ds) -> l = n.id && List.mem to_ ds) rules.never in
          match target with
          | Some t when production && in_dirs rules.nonproduction t.dir ->
              v
                (Printf.sprintf "production code links %s code"
                   (List.hd (String.split_on_char '/' t.dir)))
          | _ when never -> v "never allowed"
          | _ -> (
              match List.assoc_opt n.id rules.only with
              | Some allowed when not (List.mem to_ allowed) ->
                  v (Printf.sprintf "%s may depend only on %s" n.id (String.concat " " allowed))
              | _ -> (
                  match (target, List.assoc_opt n.id rules.allow) with
                  | Some _, Some allowed when n.lib && production && not (List.mem to_ allowed) ->
                      v
                        (Printf.sprintf "%s may depend on %s" n.id
                           (match allowed with
                           | [] -> "no library of the tree"
                           | a -> String.concat " " a))
                  | _ -> None)))
        n.deps)
    nodes

let is_known rules v = List.mem (v.from, v.to_) rules.known

(* Known violations that no longer happen: each must leave the rule file. *)
let stale_known rules vs =
  List.filter (fun (f, t) -> not (List.exists (fun v -> v.from = f && v.to_ = t) vs)) rules.known
