open Consort

type t =
  | Gmp
  | Sync
  | Heal
  | Frag
  | Suspect
  | Flow
  | Slander
  | Total
  | Causal
  | Agree
  | Auth
  | Privacy
  | Rekey
  | Xfer
  | Evs
  | Switch
  | Debug
  | Migrate
  | Primary
  | Cltsvr
  | Scale

let vsync = [ Gmp; Sync; Heal; Frag; Suspect; Flow; Slander ]

let all =
  vsync
  @ [ Total; Causal; Agree; Auth; Privacy; Rekey; Xfer; Evs ]
  @ [ Switch; Debug; Migrate; Primary; Cltsvr; Scale ]

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
  | Switch -> "Switch"
  | Debug -> "Debug"
  | Migrate -> "Migrate"
  | Primary -> "Primary"
  | Cltsvr -> "Cltsvr"
  | Scale -> "Scale"

(* What each property guarantees, in one line (the README's table and
   [consort stack --list]), by name: a property added later without its
   line here takes its line of [planned]. *)
let docs =
  [
    ("Gmp", "group membership: views agreed by every member, with joins, leaves and failures");
    ( "Sync",
      "virtual synchrony: members that install the same two views delivered the same messages in \
       the first" );
    ("Heal", "partitions of the group find each other and merge when the network heals");
    ("Frag", "messages up to 64 MiB, fragmented and reassembled");
    ("Suspect", "failures detected by heartbeats and direct probes");
    ("Flow", "bounded bytes in flight: a window per peer for sends, credit for casts");
    ("Slander", "suspicions shared, so that every member that stays reports them");
    ("Total", "casts delivered in one order at every member (sequencer or token)");
    ("Causal", "casts delivered in causal order");
    ( "Agree",
      "safe delivery: a cast is delivered once every member of the view holds it (alias Safe)" );
    ("Auth", "only holders of the group's secret join; every datagram authenticated");
    ("Privacy", "Auth, and every payload encrypted");
    ( "Rekey",
      "each view's traffic under a key of its own: an excluded member can neither read nor forge \
       later views" );
    ("Xfer", "state transfer: a member that joins gets the group's state before it delivers");
    ( "Evs",
      "extended virtual synchrony: a transitional view before each regular one, safe delivery \
       stated relative to it (brings Agree)" );
    ( "Switch",
      "the group switches to another stack while it runs, at a view boundary (Group.switch)" );
    ( "Primary",
      "a primary component with quorum: only the component holding a majority of the configured \
       votes (primary.expected, primary.votes), or with primary.mode=dynamic of the last primary's \
       votes, is primary; casts refused outside it" );
    ( "Cltsvr",
      "client-server groups: clients send requests (at most once, in order, resent to another \
       server after a failover) and hear notifications without being members of the servers' view; \
       sessions bounded (Consort_group.Cltsvr; needs Total)" );
    ( "Migrate",
      "a member moves to another address (Group.migrate) keeping its id and place in the view, \
       with no view change; a stranger cannot redirect it (with Auth)" );
    ( "Scale",
      "large groups: each member watches a few ring neighbours (Ringfd) and reports stability up a \
       tree (mnak_tree), so its heartbeat and stability traffic does not grow with the group; not \
       with Agree or Evs" );
    ( "Debug",
      "checking layers report violations of FIFO, total order and virtual synchrony with the \
       events before them; fault layers drop, delay, duplicate and partition as drop.rate, \
       delay.rate, dup.rate, partition.sets say" );
  ]

(* Properties of Ensemble's table (and the issue that brings the rest)
   that this version does not build yet: refused by name, with what they
   would guarantee. A name leaves this list by itself once [all] holds it. *)
let planned = []
let same_name a b = String.lowercase_ascii a = String.lowercase_ascii b

let doc p =
  let n = to_string p in
  match List.assoc_opt n docs with
  | Some d -> d
  | None -> Option.value ~default:"" (List.assoc_opt n planned)

let not_available =
  List.filter (fun (n, _) -> not (List.exists (fun p -> same_name (to_string p) n) all)) planned

type error =
  | Unknown of { name : string; known : string list }
  | Empty
  | Sync_without_gmp
  | Stack of string
  | Not_available of { name : string; what : string }
  | Needs of { prop : t; needs : t; why : string }
  | Conflict of { prop : t; other : t; why : string }

let pp_error ppf = function
  | Unknown { name; known } ->
      Fmt.pf ppf "unknown property %S (known: %s)" name (String.concat ", " known)
  | Empty -> Fmt.string ppf "no property given"
  | Sync_without_gmp -> Fmt.string ppf "property Sync needs Gmp: a flush is part of a view change"
  | Stack e -> Fmt.string ppf e
  | Not_available { name; what } ->
      Fmt.pf ppf "property %s is not available in this version of Consort (it would give %s)" name
        what
  | Needs { prop; needs; why } ->
      Fmt.pf ppf "property %s needs %s: %s" (to_string prop) (to_string needs) why
  | Conflict { prop; other; why } ->
      Fmt.pf ppf "property %s cannot go with %s: %s" (to_string prop) (to_string other) why

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
                | None ->
                    Error
                      (Unknown
                         { name = item; known = ("vsync" :: List.map to_string all) @ [ "Safe" ] }))
            ))
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
      (Evs, "transitional views are part of a view change");
      (Xfer, "state goes to the members a view change brings");
      (Heal, "partitions merge into one view");
      (Switch, "the stack changes at a view boundary");
      (Migrate, "a member keeps its place in the view as it moves");
      (Rekey, "each view's key is agreed when the view is installed");
      (Primary, "the quorum is decided for each view");
      (Cltsvr, "the servers' session table is kept by their group");
    ]
  in
  if has Sync && not (has Gmp) then Error Sync_without_gmp
  else
    match List.find_opt (fun (p, _) -> has p && not (has Gmp)) needs_gmp with
    | Some (prop, why) -> Error (Needs { prop; needs = Gmp; why })
    | None when has Cltsvr && not (has Total) ->
        Error
          (Needs
             {
               prop = Cltsvr;
               needs = Total;
               why = "every server applies the sessions' requests in one order";
             })
    | None when has Scale && (has Agree || has Evs || has Cltsvr) ->
        Error
          (Conflict
             {
               prop = Scale;
               other = (if has Agree then Agree else if has Evs then Evs else Cltsvr);
               why =
                 (if has Agree || has Evs then "" else "Cltsvr brings safe delivery (Agree), and ")
                 ^ "safe delivery waits until every member of the view, suspected ones included, \
                    holds a cast, and Scale's stability tree hears only from members not suspected";
             })
    | None -> (
        let l =
          List.concat
            [
              (* Primary passes everything through: it carries the property
             and its tunables (the votes) in the stack's identity. *)
              (if has Primary then [ Primary.layer ] else []);
              (* Checking layers on top: they check what the application gets. *)
              (if has Debug then [ Chk.fifo ] else []);
              (if has Debug && has Gmp then [ Chk.sync ] else []);
              (* State transfer on top: its messages are ordered as the
             application's are. *)
              (if has Xfer then [ Xfer.layer ] else []);
              (* Ordering layers above the flush, which hands every member
             that goes on the same casts, theirs included. *)
              (* Extended virtual synchrony states safe delivery relative to
             the transitional view: it brings Agree. *)
              (* Cltsvr brings it too: a request is acknowledged, and a
             notification numbered to a client, only once every server
             holds it, so that it survives the crash of the one that told
             the client. *)
              (if has Agree || has Evs || has Cltsvr then [ Agree.layer ] else []);
              (if has Causal then [ Causal.layer ] else []);
              (* Cltsvr brings Total: the servers' session table changes in
             one order at every server. *)
              (if has Debug && (has Total || has Cltsvr) then [ Chk.total ] else []);
              (if has Total || has Cltsvr then [ Total.layer ] else []);
              (if has Gmp || has Sync then [ Gmp.layer ] else []);
              (if has Frag then [ Frag.layer ] else []);
              (if has Flow then [ Pt2ptw.layer; Mflow.layer ] else []);
              (if has Slander then [ Slander.layer ] else []);
              (* Mnak under Pt2pt, as in Ensemble: its NAKs and retransmissions
             are plain datagrams, repeated by Mnak itself, never queued in
             Pt2pt's window behind (or ahead of) the application's sends. *)
              [ Pt2pt.layer; (if has Scale then Mnak.tree_layer else Mnak.layer) ];
              (* Membership needs a failure detector: without one, a crash
             outside a flush round would go unnoticed for good. *)
              (if has Scale then [ Ringfd.layer ]
               else if has Suspect || has Slander || has Gmp || has Sync then [ Suspect.layer ]
               else []);
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
        | Error e -> Error (Stack e))

let describe ps =
  match layers ps with Ok l -> Stack.describe l | Error e -> Fmt.str "%a" pp_error e
