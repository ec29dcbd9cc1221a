type handler = {
  status : unit -> Yojson.Safe.t;
  counters : unit -> (string * (string * int) list) list;
  cast : string -> (unit, string) result;
  send : string -> string -> (unit, string) result;
  suspect : string list -> unit;
  leave : unit -> unit;
  status_all : (Yojson.Safe.t -> unit) -> unit;
}

let ok = `Assoc [ ("ok", `Bool true) ]
let error e = `Assoc [ ("error", `String e) ]
let of_result = function Ok () -> ok | Error e -> error e

let counters_json c =
  `Assoc (List.map (fun (layer, l) -> (layer, `Assoc (List.map (fun (k, n) -> (k, `Int n)) l))) c)

let status_fields ~group ~me ~view ~ltime ~coordinator ~members ~rank ~blocked ~flow_blocked =
  [
    ("group", `String group);
    ("me", `String me);
    ("view", `String view);
    ("ltime", `Int ltime);
    ("coordinator", `String coordinator);
    ("members", `List (List.map (fun m -> `String m) members));
    ("rank", `Int rank);
    ("blocked", `Bool blocked);
    ("flow_blocked", `Bool flow_blocked);
  ]

(* [word line] splits off the first space-separated word. *)
let word line =
  match String.index_opt line ' ' with
  | Some i -> (String.sub line 0 i, String.sub line (i + 1) (String.length line - i - 1))
  | None -> (line, "")

let shorten s = if String.length s > 40 then String.sub s 0 40 ^ "..." else s

let rec answer h line =
  let json =
    match word line with
    | "group", rest -> (
        let name, req = word rest in
        match h.status () with
        | `Assoc l when List.assoc_opt "group" l = Some (`String name) && fst (word req) <> "group"
          ->
            Yojson.Safe.from_string (answer h req)
        | `Assoc l ->
            let mine = match List.assoc_opt "group" l with Some (`String g) -> g | _ -> "?" in
            error (Printf.sprintf "this member is in group %S, not %S" mine (shorten name))
        | _ -> error "group: no status")
    | "status", "" -> h.status ()
    | "counters", "" -> counters_json (h.counters ())
    | "cast", text -> of_result (h.cast text)
    | "send", rest -> (
        match word rest with
        | "", _ -> error "send: which member? (send ID TEXT)"
        | id, text -> of_result (h.send id text))
    | "suspect", ids -> (
        match List.filter (( <> ) "") (String.split_on_char ',' ids) with
        | [] -> error "suspect: which members? (suspect ID[,ID...])"
        | l ->
            h.suspect l;
            ok)
    | "leave", "" ->
        h.leave ();
        ok
    | "status-all", "" -> error "status-all: answered later (Control.serve)"
    | w, _ ->
        error
          (Printf.sprintf
             "unknown request %S (status, status-all, counters, cast, send, suspect, leave)"
             (shorten w))
  in
  Yojson.Safe.to_string json

(* [status-all], alone or as [group NAME status-all] for this member's
   group: answered once every member of the view has, through the group. *)
let rec later h line =
  match word line with
  | "status-all", "" -> Some (fun reply -> h.status_all (fun j -> reply (Yojson.Safe.to_string j)))
  | "group", rest -> (
      let name, req = word rest in
      match h.status () with
      | `Assoc l when List.assoc_opt "group" l = Some (`String name) && fst (word req) <> "group" ->
          later h req
      | _ -> None)
  | _ -> None

let serve loop path h =
  Serve.listen ~max_connections:16 ~max_request:(1 lsl 20) ~later:(later h) loop
    (Unix.ADDR_UNIX path) Lines (answer h)
