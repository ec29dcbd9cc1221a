(* The Rekey feature of the group runtime: per-view keys, drawn by each
   view's maker, wrapped for its members in the Install, unwrapped and
   activated at each member (the cryptography is the transport's, in
   src/seal). *)

type keys = {
  public : string;
  draw :
    vid:string ->
    me:string ->
    context:string ->
    (string * string) list ->
    (string * string) list * (unit -> unit);
  unwrap :
    vid:string ->
    me:string ->
    context:string ->
    installer:string * string ->
    string ->
    (unit -> unit) option;
}

type t = {
  keys : keys option;
  me : string;
  mutable no_key : int; (* Installs refused for want of a view key *)
}

let create ~me keys = { keys; me; no_key = 0 }
let enabled t = t.keys <> None
let public t = match t.keys with Some r -> r.public | None -> ""
let no_key t = t.no_key
let refused t = t.no_key <- t.no_key + 1

(* The view's key, from its maker, or one of this member's own (a view of
   one): the new stack's datagrams are sealed under it. *)
let activate t ~vid key =
  match (key, t.keys) with
  | Some k, _ -> k ()
  | None, Some r -> (snd (r.draw ~vid ~me:t.me ~context:"" [])) ()
  | None, None -> ()

(* With Rekey, a fresh key for the view, wrapped for [members] only. *)
let wrap t ~vid ~(members : Side.member list) msg =
  match (t.keys, msg) with
  | Some r, Side.Install i ->
      let others =
        List.filter_map
          (fun (m : Side.member) -> if m.eid = t.me then None else Some (m.eid, m.pub))
          members
      in
      let keys, activate = r.draw ~vid ~me:t.me ~context:(Side.context msg) others in
      (Side.Install { i with keys }, Some activate)
  | _ -> (msg, None)

(* With Rekey, the key an Install brings this member: wrapped for it by
   the view's maker, whose public key is the one this member's view knows
   if the maker is in it (else the Install's), and bound to the Install as
   it was made. [Error] says why not. *)
let view_key t ~view_members ~pubs v =
  match (t.keys, v) with
  | None, _ -> Ok None
  | Some r, Side.Install { vid; members; keys; _ } -> (
      let by = Side.installer vid in
      let rec rank_of i = function
        | [] -> None
        | x :: rest -> if String.equal by x then Some i else rank_of (i + 1) rest
      in
      let pub =
        match rank_of 0 (Array.to_list view_members) with
        | Some rank -> Some pubs.(rank)
        | None ->
            Option.map
              (fun (m : Side.member) -> m.pub)
              (List.find_opt (fun (m : Side.member) -> m.eid = by) members)
      in
      match (pub, List.assoc_opt t.me keys) with
      | None, _ -> Error "its maker is neither in this member's view nor in it"
      | _, None -> Error "it carries no view key for this member"
      | Some pub, Some wrapped -> (
          match r.unwrap ~vid ~me:t.me ~context:(Side.context v) ~installer:(by, pub) wrapped with
          | Some k -> Ok (Some k)
          | None ->
              Error
                "its view key for this member does not open (not wrapped by its maker, or altered)")
      )
  | Some _, _ -> Ok None
