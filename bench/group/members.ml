type t = { proc : Proc.t; addr : string; log : string }

let start ~exe ~dir ~group ?(params = "") ?(props = "") ?(extra = []) ?seed ~peers i addr =
  let log = Filename.concat dir (Printf.sprintf "member-%d.log" i) in
  let args =
    [ "member"; "--group"; group; "--bind"; addr; "--peers"; String.concat "," peers; "--log"; log ]
    @ (match seed with Some s -> [ "--seed"; string_of_int s ] | None -> [])
    @ (if props = "" then [] else [ "--props"; props ])
    @ extra
    @ if params = "" then [] else [ "--params"; params ]
  in
  let proc =
    Proc.spawn ~stderr:(Filename.concat dir (Printf.sprintf "member-%d.err" i)) ~name:addr exe args
  in
  { proc; addr; log }

(* "view VID: M1 M2 ... (rank R; joined [...], left [...])"; ids have no spaces. *)
let parse_view line =
  let pre = "view " in
  let lp = String.length pre in
  if String.length line < lp || String.sub line 0 lp <> pre then None
  else
    match String.index_from_opt line lp ' ' with
    | None -> None
    | Some sp when sp > lp && line.[sp - 1] = ':' -> (
        let vid = String.sub line lp (sp - 1 - lp) in
        let rest = String.sub line (sp + 1) (String.length line - sp - 1) in
        match String.index_opt rest '(' with
        | None -> None
        | Some p ->
            let members =
              List.filter (( <> ) "") (String.split_on_char ' ' (String.sub rest 0 p))
            in
            Some (vid, members))
    | Some _ -> None

let first_view m ~after p =
  List.find_map
    (fun (at, line) ->
      if at < after then None
      else match parse_view line with Some (_, ms) when p ms -> Some (at, ms) | _ -> None)
    (Proc.lines m.proc)

let last_logged_view m =
  List.fold_left
    (fun acc e ->
      match e with Consort_spec.Log.View { view; members; _ } -> Some (view, members) | _ -> acc)
    None
    (Consort_member.Procs.events m.log)

let eid_addr id = match String.index_opt id '#' with Some i -> String.sub id 0 i | None -> id
let stop ms = List.iter (fun m -> Proc.kill m.proc) ms
