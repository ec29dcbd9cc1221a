open Consort

type t = Gmp | Sync | Heal | Frag | Suspect | Flow | Slander | Total | Causal | Agree | Auth | Privacy | Rekey | Xfer
  | Switch
  | Debug

let vsync = [ Gmp; Sync; Heal; Frag; Suspect; Flow; Slander ]
let all = vsync @ [ Total; Causal; Agree; Auth; Privacy; Rekey; Xfer ] @ [ Switch; Debug ]

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
  | Switch -> "Switch"
  | Debug -> "Debug"

(* What each property guarantees, in one line (the README's table and
   [consort stack --list]). *)
let doc = function
  | Gmp -> "group membership: views agreed by every member, with joins, leaves and failures"
  | Sync -> "virtual synchrony: members that install the same two views delivered the same messages in the first"
  | Heal -> "partitions of the group find each other and merge when the network heals"
  | Frag -> "messages up to 64 MiB, fragmented and reassembled"
  | Suspect -> "failures detected by heartbeats and direct probes"
  | Flow -> "bounded bytes in flight: a window per peer for sends, credit for casts"
  | Slander -> "suspicions shared, so that every member that stays reports them"
  | Total -> "casts delivered in one order at every member (sequencer or token)"
  | Causal -> "casts delivered in causal order"
  | Agree -> "safe delivery: a cast is delivered once every member of the view holds it (alias Safe)"
  | Auth -> "only holders of the group's secret join; every datagram authenticated"
  | Privacy -> "Auth, and every payload encrypted"
  | Rekey -> "each view's traffic under a key of its own: an excluded member can neither read nor forge later views"
  | Xfer -> "state transfer: a member that joins gets the group's state before it delivers"
  | Switch -> "the group switches to another stack while it runs, at a view boundary (Group.switch)"
  | Debug ->
      "checking layers report violations of FIFO, total order and virtual synchrony with the events before them; \
       fault layers drop, delay, duplicate and partition as drop.rate, delay.rate, dup.rate, partition.sets say"

(* Properties of Ensemble's table (and the issue that brings the rest)
   that this version does not build yet: refused by name, with what they
   would guarantee. A name leaves this list by itself once [all] holds it. *)
let planned =
  [
    ("Cltsvr", "client-server groups: clients cast to and hear from the servers without being members");
    ("Evs", "extended virtual synchrony: a transitional view before each regular one");
    ("Migrate", "a member moves to another address, keeping its identity and place in the view");
    ("Primary", "only the component holding a quorum of votes is primary");
    ("Scale", "failure detection and stability for groups of hundreds of members");
  ]

let same_name a b = String.lowercase_ascii a = String.lowercase_ascii b
let not_available = List.filter (fun (n, _) -> not (List.exists (fun p -> same_name (to_string p) n) all)) planned

type error =
  | Unknown of { name : string; known : string list }
  | Empty
  | Sync_without_gmp
  | Stack of string
  | Not_available of { name : string; what : string }
  | Needs of { prop : t; needs : t; why : string }

let pp_error ppf = function
  | Unknown { name; known } -> Fmt.pf ppf "unknown property %S (known: %s)" name (String.concat ", " known)
  | Empty -> Fmt.string ppf "no property given"
  | Sync_without_gmp -> Fmt.string ppf "property Sync needs Gmp: a flush is part of a view change"
  | Stack e -> Fmt.string ppf e
  | Not_available { name; what } -> Fmt.pf ppf "property %s is not available in this version of Consort (it would give %s)" name what
  | Needs { prop; needs; why } -> Fmt.pf ppf "property %s needs %s: %s" (to_string prop) (to_string needs) why

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
            | None -> (
                match List.find_opt (fun (n, _) -> same_name n item) not_available with
                | Some (name, what) -> Error (Not_available { name; what })
                | None -> Error (Unknown { name = item; known = ("vsync" :: List.map to_string all) @ [ "Safe" ] }))))
  in
  match List.fold_left one (Ok []) items with
  | Ok [] -> Error Empty
  | Ok ps -> Ok (List.sort_uniq compare ps)
  | Error _ as e -> e

let layers ps =
  let has p = List.mem p ps in
  (* Properties that only make sense with views agreed by a flush. *)
  let needs_gmp =
    [
      (Total, "the order is agreed within a view and completed by the flush");
      (Causal, "vector timestamps are per view, completed by the flush");
      (Agree, "stability is judged among the members of a view");
      (Xfer, "state goes to the members a view change brings");
      (Heal, "partitions merge into one view");
      (Switch, "the stack changes at a view boundary");
      (Rekey, "each view's key is agreed when the view is installed");
    ]
  in
  if has Sync && not (has Gmp) then Error Sync_without_gmp
  else
    match List.find_opt (fun (p, _) -> has p && not (has Gmp)) needs_gmp with
    | Some (prop, why) -> Error (Needs { prop; needs = Gmp; why })
    | None ->
    let l =
      List.concat
        [
          (* State transfer on top: its messages are ordered as the
             application's are. *)
          (* Checking layers on top: they check what the application gets. *)
          (if has Debug then [ Chk.fifo ] else []);
          (if has Debug && has Gmp then [ Chk.sync ] else []);
          (if has Xfer then [ Xfer.layer ] else []);
          (* Ordering layers above the flush, which hands every member
             that goes on the same casts, theirs included. *)
          (if has Agree then [ Agree.layer ] else []);
          (if has Causal then [ Causal.layer ] else []);
          (if has Debug && has Total then [ Chk.total ] else []);
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
          (* Faults on what arrives, under the failure detector: as a
             faulty network would be. *)
          (if has Debug then [ Fault.partition; Fault.delay; Fault.dup; Fault.drop ] else []);
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
