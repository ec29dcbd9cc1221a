open Consort

(* Messages between members that are not in one view: discovery, merge
 requests, view installation. They start with their own magic byte, so a
 datagram is for the current stack (Bottom's magic) or for this side
 channel. *)
type member = { eid : string; addr : string; pub : string }
type stack = { epoch : int; id : string }

type t =
  | Gossip of {
      group : string;
      vid : string;
      ltime : int;
      coord : member;
      size : int;
      stack : stack;
    }
  | Merge_req of {
      group : string;
      vid : string;
      ltime : int;
      members : member list;
      stack : stack;
      dst : string;
    }
  | Install of {
      group : string;
      vid : string;
      ltime : int;
      members : member list;
      leavers : string list;
      preds : string list;
      stack : stack;
      keys : (string * string) list;
    }
  | Install_ack of { group : string; vid : string; eid : string; dst : string }
  | Switch_req of { group : string; vid : string; stack : stack; dst : string }
  | Probe of { group : string; vid : string; nonce : string; eid : string; dst : string }
  | Probe_ack of { group : string; vid : string; nonce : string; eid : string; dst : string }
  | Status_req of { group : string; vid : string; nonce : string; eid : string; dst : string }
  | Status_ans of {
      group : string;
      vid : string;
      nonce : string;
      eid : string;
      dst : string;
      status : string;
    }

let max_status = 32768
let magic = 0xC2
let str = Codec.string ~max:1024 ()

(* An X25519 public key is 32 bytes; "" without rekeying. *)
let member =
  Codec.map ~name:"member"
    (fun m -> (m.eid, m.addr, m.pub))
    (fun (eid, addr, pub) -> { eid; addr; pub })
    Codec.(tup3 str str (string ~max:64 ()))

let members = Codec.list ~max:4096 member

let stack =
  Codec.map ~name:"stack"
    (fun s -> (s.epoch, s.id))
    (fun (epoch, id) -> { epoch; id })
    Codec.(pair varint (string ~max:16384 ()))

let body =
  Codec.union "side"
    [
      Codec.case 0 "gossip"
        Codec.(tup4 (pair str str) varint member (pair varint stack))
        (function
          | Gossip { group; vid; ltime; coord; size; stack } ->
              Some ((group, vid), ltime, coord, (size, stack))
          | _ -> None)
        (fun ((group, vid), ltime, coord, (size, stack)) ->
          Gossip { group; vid; ltime; coord; size; stack });
      Codec.case 1 "merge"
        Codec.(tup4 str str varint (tup3 members stack str))
        (function
          | Merge_req { group; vid; ltime; members; stack; dst } ->
              Some (group, vid, ltime, (members, stack, dst))
          | _ -> None)
        (fun (group, vid, ltime, (members, stack, dst)) ->
          Merge_req { group; vid; ltime; members; stack; dst });
      Codec.case 2 "install"
        Codec.(
          tup4 (pair str str) varint members
            (tup4 (list ~max:4096 str) (list ~max:4096 str) stack
               (list ~max:4096 (pair str (string ~max:128 ())))))
        (function
          | Install { group; vid; ltime; members; leavers; preds; stack; keys } ->
              Some ((group, vid), ltime, members, (leavers, preds, stack, keys))
          | _ -> None)
        (fun ((group, vid), ltime, members, (leavers, preds, stack, keys)) ->
          Install { group; vid; ltime; members; leavers; preds; stack; keys });
      Codec.case 3 "install_ack"
        Codec.(tup4 str str str str)
        (function Install_ack { group; vid; eid; dst } -> Some (group, vid, eid, dst) | _ -> None)
        (fun (group, vid, eid, dst) -> Install_ack { group; vid; eid; dst });
      Codec.case 4 "switch"
        Codec.(tup4 str str stack str)
        (function
          | Switch_req { group; vid; stack; dst } -> Some (group, vid, stack, dst) | _ -> None)
        (fun (group, vid, stack, dst) -> Switch_req { group; vid; stack; dst });
      Codec.case 5 "probe"
        Codec.(tup4 (pair str str) str str str)
        (function
          | Probe { group; vid; nonce; eid; dst } -> Some ((group, vid), nonce, eid, dst)
          | _ -> None)
        (fun ((group, vid), nonce, eid, dst) -> Probe { group; vid; nonce; eid; dst });
      Codec.case 6 "probe_ack"
        Codec.(tup4 (pair str str) str str str)
        (function
          | Probe_ack { group; vid; nonce; eid; dst } -> Some ((group, vid), nonce, eid, dst)
          | _ -> None)
        (fun ((group, vid), nonce, eid, dst) -> Probe_ack { group; vid; nonce; eid; dst });
      Codec.case 7 "status_req"
        Codec.(tup4 (pair str str) str str str)
        (function
          | Status_req { group; vid; nonce; eid; dst } -> Some ((group, vid), nonce, eid, dst)
          | _ -> None)
        (fun ((group, vid), nonce, eid, dst) -> Status_req { group; vid; nonce; eid; dst });
      Codec.case 8 "status_ans"
        Codec.(tup4 (pair str str) (pair str str) str (string ~max:max_status ()))
        (function
          | Status_ans { group; vid; nonce; eid; dst; status } ->
              Some ((group, vid), (nonce, eid), dst, status)
          | _ -> None)
        (fun ((group, vid), (nonce, eid), dst, status) ->
          Status_ans { group; vid; nonce; eid; dst; status });
    ]

let codec =
  Codec.conv ~name:"side"
    (fun v -> (magic, v))
    (fun (m, v) -> if m = magic then Ok v else Error (Printf.sprintf "magic 0x%02x" m))
    Codec.(pair uint8 body)

let group = function
  | Gossip { group; _ }
  | Merge_req { group; _ }
  | Install { group; _ }
  | Install_ack { group; _ }
  | Switch_req { group; _ }
  | Probe { group; _ }
  | Probe_ack { group; _ }
  | Status_req { group; _ }
  | Status_ans { group; _ } ->
      group

(* The member a message is for, [""] for any that hears it (discovery, an
   Install, which goes to every member of its view the same). *)
let dst = function
  | Gossip _ | Install _ -> ""
  | Merge_req { dst; _ }
  | Install_ack { dst; _ }
  | Switch_req { dst; _ }
  | Probe { dst; _ }
  | Probe_ack { dst; _ }
  | Status_req { dst; _ }
  | Status_ans { dst; _ } ->
      dst

(* What a view key is wrapped for: the Install as its maker sent it, less
   the wrapped keys, so that a key opens only in the Install it came in. *)
let context = function
  | Install i -> Codec.encode_string codec (Install { i with keys = [] })
  | v -> Codec.encode_string codec v

(* "LTIME:EID": the member that named the view. *)
let installer vid =
  match String.index_opt vid ':' with
  | Some i -> String.sub vid (i + 1) (String.length vid - i - 1)
  | None -> ""

let accept_install ~maker ~me:_ ~(view : View.t) ~addr ~reported ~src ~vid ~members ~preds =
  let ids l = String.concat ", " l in
  if not (List.mem view.View.id preds) then
    Error
      (Printf.sprintf "it does not follow this member's view %s (it follows [%s])" view.View.id
         (ids preds))
  else
    match reported with
    | None -> Error "this member has not reported to a flush of its view"
    | Some (coord, excluded, leaving, into) ->
        let old = Array.to_list view.View.members in
        let survivors =
          List.filteri (fun r _ -> not (List.mem r excluded || List.mem r leaving)) old
        in
        let kept = List.filter (fun e -> List.exists (fun (m : member) -> m.eid = e) members) old in
        if List.sort compare survivors <> List.sort compare kept then
          Error
            (Printf.sprintf "it keeps [%s] of view %s, where the flush left [%s]" (ids kept)
               view.View.id (ids survivors))
        else
          let by = installer vid in
          let from_coord =
            coord >= 0 && coord < Array.length view.View.members && addr coord = src
          in
          (* The view of a merge is made by the coordinator of the partition
             merged into (the one the flush named, or the coordinator it
             passed the request on to): a member of that view, which named
             it and sends it from its own address; or, leaving, not in it,
             the coordinator merged into itself, from the address this
             member asked ([maker]). A flush that merges into no one takes
             its view from its coordinator only. *)
          let from_target =
            into <> ""
            && (List.exists (fun (m : member) -> m.eid = by && m.addr = src) members
               || (by = into && maker = Some src))
          in
          if from_coord || from_target then Ok ()
          else
            Error
              (Printf.sprintf "sent from %s by %s, %s" src by
                 (if into = "" then "not the coordinator of the flush, which merges into no one"
                  else "not the coordinator of the flush nor a member of the view that named it"))

type gossip_action = Merge_into | Merge_later | Answer | Nothing

(* Partitions merge into the one whose coordinator's id is least: the
   coordinator of the other asks to be taken in, now if it is free, else
   once its view change is over; members of the lesser one answer with who
   coordinates them, so that the request goes to the right member. *)
let on_gossip ~me ~my_coord ~same_view ~in_my_view ~coordinator ~busy ~leaving ~their_coord =
  if same_view || in_my_view then Nothing
  else if String.compare their_coord me < 0 then
    if coordinator && not busy then Merge_into else Merge_later
  else if leaving then Nothing
  else if (not coordinator) && String.compare their_coord my_coord > 0 then Answer
  else if coordinator && String.compare their_coord me > 0 then Answer
  else Nothing
