open Consort

(* A member's move to another address, told to the members of its view.
   The messages start with their own magic byte, so the runtime tells them
   from the stack's datagrams and from the side channel's. *)
type t =
  | Move of { group : string; vids : string list; eid : string; seq : int; addr : string }
  | Moved of { group : string; mover : string; seq : int; eid : string }

let magic = 0xC6
let str = Codec.string ~max:1024 ()

let body =
  Codec.union "migrate"
    [
      Codec.case 0 "move"
        Codec.(tup4 (pair str (list ~max:2 str)) str varint str)
        (function
          | Move { group; vids; eid; seq; addr } -> Some ((group, vids), eid, seq, addr) | _ -> None)
        (fun ((group, vids), eid, seq, addr) -> Move { group; vids; eid; seq; addr });
      Codec.case 1 "moved"
        Codec.(tup4 str str varint str)
        (function Moved { group; mover; seq; eid } -> Some (group, mover, seq, eid) | _ -> None)
        (fun (group, mover, seq, eid) -> Moved { group; mover; seq; eid });
    ]

let codec =
  Codec.conv ~name:"migrate"
    (fun v -> (magic, v))
    (fun (m, v) -> if m = magic then Ok v else Error (Printf.sprintf "magic 0x%02x" m))
    Codec.(pair uint8 body)

let group = function Move { group; _ } | Moved { group; _ } -> group

type verdict = Accept | Refuse of string

let judge ~me ~vid ~prev_vid ~members ~known ~src (m : t) =
  match m with
  | Moved _ -> Refuse "not a move"
  | Move { vids; eid; seq; addr; _ } ->
      if eid = me then Refuse "a move of this member itself"
      else if not (Array.mem eid members) then
        Refuse (Printf.sprintf "%s is not in view %s" eid vid)
      else if not (List.mem vid vids || (prev_vid <> "" && List.mem prev_vid vids)) then
        Refuse
          (Printf.sprintf "made in view %s, neither this member's view %s nor the one before"
             (String.concat " or " vids) vid)
      else if src <> addr then Refuse (Printf.sprintf "names address %s but comes from %s" addr src)
      else if seq < 1 || seq < known then
        Refuse (Printf.sprintf "move %d of %s, older than move %d known here" seq eid known)
      else Accept
