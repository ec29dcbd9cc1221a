open Consort

type t = Gmp | Sync | Heal | Frag | Suspect | Flow | Slander | Total | Causal | Agree | Auth | Privacy | Rekey | Xfer | Evs | Primary

let vsync = [ Gmp; Sync; Heal; Frag; Suspect; Flow; Slander ]
let all = vsync @ [ Total; Causal; Agree; Auth; Privacy; Rekey; Xfer; Evs; Primary ]

let to_string = function
  | Gmp -> "Gmp"
  | Sync -> "Sync"
  | Heal -> "Heal"
  | Frag -> "Frag"
  | Suspect -> "Suspect"
  | Flow -> "Flow"
  | Slander -> "Slander"
  | Total -> "Total"
  | Causal -> "Causal"
  | Agree -> "Agree"
  | Auth -> "Auth"
  | Privacy -> "Privacy"
  | Rekey -> "Rekey"
  | Xfer -> "Xfer"
  | Evs -> "Evs"
  | Primary -> "Primary"

type error = Unknown of { name : string; known : string list } | Empty | Sync_without_gmp | Stack of string

let pp_error ppf = function
  | Unknown { name; known } -> Fmt.pf ppf "unknown property %S (known: %s)" name (String.concat ", " known)
  | Empty -> Fmt.string ppf "no property given"
  | Sync_without_gmp -> Fmt.string ppf "property Sync needs Gmp: a flush is part of a view change"
  | Stack e -> Fmt.string ppf e

let pp ppf ps = Fmt.string ppf (String.concat "," (List.map to_string ps))

let of_string s =
  let items = List.filter (( <> ) "") (List.map String.trim (String.split_on_char ',' s)) in
  let one acc item =
    Result.bind acc (fun ps ->
        match String.lowercase_ascii item with
        | "vsync" -> Ok (ps @ vsync)
        | "safe" -> Ok (ps @ [ Agree ])
        | l -> (
            match List.find_opt (fun p -> String.lowercase_ascii (to_string p) = l) all with
            | Some p -> Ok (ps @ [ p ])
            | None -> Error (Unknown { name = item; known = ("vsync" :: List.map to_string all) @ [ "Safe" ] })))
  in
  match List.fold_left one (Ok []) items with
  | Ok [] -> Error Empty
  | Ok ps -> Ok (List.sort_uniq compare ps)
  | Error _ as e -> e

let layers ps =
  let has p = List.mem p ps in
  if has Sync && not (has Gmp) then Error Sync_without_gmp
  else
    let l =
      List.concat
        [
          (* Primary passes everything through: it carries the property
             and its tunables (the votes) in the stack's identity. *)
          (if has Primary then [ Primary.layer ] else []);
          (* State transfer on top: its messages are ordered as the
             application's are. *)
          (if has Xfer then [ Xfer.layer ] else []);
          (* Ordering layers above the flush, which hands every member
             that goes on the same casts, theirs included. *)
          (* Extended virtual synchrony states safe delivery relative to
             the transitional view: it brings Agree. *)
          (if has Agree || has Evs then [ Agree.layer ] else []);
          (if has Causal then [ Causal.layer ] else []);
          (if has Total then [ Total.layer ] else []);
          (if has Gmp || has Sync then [ Gmp.layer ] else []);
          (if has Frag then [ Frag.layer ] else []);
          (if has Flow then [ Pt2ptw.layer; Mflow.layer ] else []);
          (if has Slander then [ Slander.layer ] else []);
          (* Mnak under Pt2pt, as in Ensemble: its NAKs and retransmissions
             are plain datagrams, repeated by Mnak itself, never queued in
             Pt2pt's window behind (or ahead of) the application's sends. *)
          [ Pt2pt.layer; Mnak.layer ];
          (* Membership needs a failure detector: without one, a crash
             outside a flush round would go unnoticed for good. *)
          (if has Suspect || has Slander || has Gmp || has Sync then [ Suspect.layer ] else []);
          [ Bottom.layer ];
        ]
    in
    match Stack.check l with
    | Ok () ->
        (* Known by name, so that a group can switch to this stack. *)
        List.iter Stack_id.register l;
        Ok l
    | Error e -> Error (Stack e)

let describe ps = match layers ps with Ok l -> Stack.describe l | Error e -> Fmt.str "%a" pp_error e
