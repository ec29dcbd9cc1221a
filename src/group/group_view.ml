open Consort

type info = {
  vid : string;
  ltime : int;
  members : string array;
  rank : int;
  coordinator : string;
  joined : string list;
  left : string list;
  why : (string * string) list;
}

let pp_info ppf v =
  Fmt.pf ppf "view %s [%a] rank %d" v.vid Fmt.(array ~sep:comma string) v.members v.rank

type round = int * int list * int list * string

type 'a t = {
  view : View.t;
  info : info;
  addrs : 'a array;
  pubs : string array; (* the members' public keys (Rekey), by rank *)
  suspected : bool array;
  reasons : (int, string) Hashtbl.t; (* why each suspected member is *)
  mutable reported : round option;
      (* the flush round this member last reported to: coordinator,
         excluded, leaving *)
}

(* Why each member of [previous] that is not in [eids] is gone. *)
let why_gone previous eids =
  match previous with
  | None -> []
  | Some c ->
      List.filter_map
        (fun (r, e) ->
          if Array.mem e eids then None
          else
            Some
              ( e,
                match Hashtbl.find_opt c.reasons r with
                | Some why -> "excluded: " ^ why
                | None -> (
                    match c.reported with
                    | Some (_, _, leaving, _) when List.mem r leaving -> "left"
                    | _ -> "not in the next view") ))
        (List.mapi (fun r e -> (r, e)) (Array.to_list c.view.View.members))

let create ~group ~vid ~ltime ~(members : Side.member list) ~rank ~addrs ~previous =
  let eids = Array.of_list (List.map (fun (m : Side.member) -> m.eid) members) in
  let view = View.v ~group ~ltime ~id:vid ~members:eids ~rank () in
  let before = match previous with Some c -> Array.to_list c.view.View.members | None -> [] in
  let info =
    {
      vid;
      ltime;
      members = eids;
      rank;
      coordinator = eids.(0);
      joined = List.filter (fun e -> not (List.mem e before)) (Array.to_list eids);
      left = List.filter (fun e -> not (Array.mem e eids)) before;
      why = why_gone previous eids;
    }
  in
  {
    view;
    info;
    addrs;
    pubs = Array.of_list (List.map (fun (m : Side.member) -> m.pub) members);
    suspected = Array.make (Array.length eids) false;
    reasons = Hashtbl.create 4;
    reported = None;
  }

let view c = c.view
let info c = c.info
let id c = c.view.View.id
let members c = c.view.View.members
let rank c = c.view.View.rank
let size c = Array.length c.view.View.members
let addrs c = c.addrs
let addr c r = c.addrs.(r)
let pubs c = c.pubs

let rank_of c eid =
  let n = Array.length c.view.View.members in
  let rec go i =
    if i >= n then None else if c.view.View.members.(i) = eid then Some i else go (i + 1)
  in
  go 0

let coordinator_rank c =
  let n = Array.length c.suspected in
  let rec go r = if r >= n then c.view.View.rank else if c.suspected.(r) then go (r + 1) else r in
  go 0

let is_coordinator c = coordinator_rank c = c.view.View.rank

let suspect c r reason =
  if r >= 0 && r < Array.length c.suspected && not c.suspected.(r) then begin
    c.suspected.(r) <- true;
    Hashtbl.replace c.reasons r reason;
    true
  end
  else false

let reported c = c.reported
let report c round = c.reported <- Some round

let gone c r =
  c.suspected.(r)
  || match c.reported with Some (_, ex, lv, _) -> List.mem r ex || List.mem r lv | None -> false
