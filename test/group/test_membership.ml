(* The membership kernel (Membership), driven by hand without the simulator: two or three kernels
   whose actions this test executes as a driver would (a flush started blocks the view's members,
   who report to its round; a view installed), their side messages, Installs included, delivered
   to each other in an order the test chooses (held back, dropped, crossed). The races of merging
   and installing: partitions that hear of each other at once, a merge request while a view waits
   for acknowledgements, a lost acknowledgement, a coordinator that leaves during a merge, stale
   views, a flood of strangers, an Install that overtakes the merge's flush round, and the Installs
   a member refuses. *)

open Consort
module G = Consort_group
module Side = G.Side

module M = G.Membership.Make (struct
  type t = string

  let equal = String.equal
  let to_string s = s
  let of_string s = if s = "" then Error "empty address" else Ok s
end)

let group = "g"
let stack = { Side.epoch = 0; id = "test-stack" }
let merge_timeout = Time.of_ms 2000
let install_retry = Time.of_ms 100
let heal_interval = Time.of_ms 500
let leave_timeout = Time.of_ms 3000
let step_ms = 10

type node = {
  addr : string;
  me : Side.member;
  m : M.t;
  mutable view : View.t;
  mutable addrs : string array;
  mutable blocked : bool;
  mutable flush_asked : bool; (* this coordinator started a flush not yet complete *)
  mutable leaving : bool;
  mutable suspected : int list;
  mutable views : string list; (* views installed after the first, newest first *)
  mutable installs_made : int; (* Install actions this kernel asked for (made or accepted) *)
  mutable merge_into : string;
  mutable reported : (int * int list * int list * string) option;
      (* the flush round this member last reported to, as Gmp tells it *)
  mutable builds : string list; (* the stacks this member can build *)
  mutable refused : (string * M.refusal) list; (* Installs refused: view, why; newest first *)
  mutable key_opens : bool; (* a view key sent to this member opens (Rekey) *)
  mutable exited : bool;
}

type verdict = Deliver | Drop | Hold

type net = {
  mutable now : Time.t;
  mutable wire : (string * string * Side.t) list; (* source, destination, message; in order *)
  mutable held : (string * string * Side.t) list;
  mutable policy : string * string * Side.t -> verdict;
  mutable nodes : node list;
}

let new_net () = { now = 0; wire = []; held = []; policy = (fun _ -> Deliver); nodes = [] }
let eid addr = addr ^ "#1"
let by_eid net e = List.find_opt (fun n -> n.me.eid = e) net.nodes
let by_addr net a = List.find_opt (fun n -> n.addr = a) net.nodes

let coord n =
  let k = Array.length n.addrs in
  let rec go r =
    if r >= k then n.view.View.rank else if List.mem r n.suspected then go (r + 1) else r
  in
  go 0

let is_coord n = coord n = n.view.View.rank

let ctx net n =
  {
    M.now = net.now;
    me = n.me;
    view = n.view;
    addrs = n.addrs;
    pubs = Array.make (Array.length n.addrs) "";
    coord = coord n;
    blocked = n.blocked;
    resumed = false;
    gone = (fun r -> List.mem r n.suspected);
    reported = n.reported;
  }

let install n ~vid ~ltime ~(members : Side.member list) =
  let eids = Array.of_list (List.map (fun (m : Side.member) -> m.eid) members) in
  match List.find_opt (fun r -> eids.(r) = n.me.eid) (List.init (Array.length eids) Fun.id) with
  | None -> ()
  | Some rank ->
      M.learn n.m ~me:n.me.eid members;
      n.view <- View.v ~group ~ltime ~id:vid ~members:eids ~rank ();
      n.addrs <- Array.of_list (List.map (fun (m : Side.member) -> m.addr) members);
      n.blocked <- false;
      n.flush_asked <- false;
      n.suspected <- [];
      n.merge_into <- "";
      n.reported <- None;
      n.views <- vid :: n.views;
      M.installed n.m

let send net src dst msg = net.wire <- net.wire @ [ (src, dst, msg) ]

let exec net n actions =
  List.iter
    (function
      | M.Send (dst, msg) -> send net n.addr dst msg
      | M.Start_flush _ ->
          (* The flush blocks every member of the view, as Gmp's Block does. *)
          n.flush_asked <- true;
          Array.iter
            (fun e -> match by_eid net e with Some o -> o.blocked <- true | None -> ())
            n.view.View.members
      | M.Merge_into e -> n.merge_into <- e
      | M.Suspect { ranks; _ } -> n.suspected <- List.sort_uniq compare (ranks @ n.suspected)
      | M.Install { vid; ltime; members; _ } ->
          n.installs_made <- n.installs_made + 1;
          install n ~vid ~ltime ~members
      | M.Leave ->
          (* A coordinator's stack flushes to let it go (as Gmp does); another member's tells its
             coordinator, which this test does not model. *)
          if is_coord n && not n.flush_asked then begin
            n.flush_asked <- true;
            Array.iter
              (fun e -> match by_eid net e with Some o -> o.blocked <- true | None -> ())
              n.view.View.members
          end
      | M.Dead_view _ -> ()
      | M.Exit -> n.exited <- true
      | M.Refused { vid; why; _ } -> n.refused <- (vid, why) :: n.refused)
    actions

let handle net n input = exec net n (M.handle n.m (ctx net n) input)

(* Side messages, Installs included, go to the kernel. *)
let deliver net ((src, dst, msg) as m) =
  match net.policy m with
  | Drop -> ()
  | Hold -> net.held <- net.held @ [ m ]
  | Deliver -> (
      match by_addr net dst with
      | None -> ()
      | Some n when n.exited -> ()
      | Some n -> handle net n (M.Side { src; msg }))

let deliver_all net =
  let w = net.wire in
  net.wire <- [];
  List.iter (deliver net) w

(* A coordinator's flush completes: the members not suspected and not leaving go on. *)
let complete_flushes net =
  List.iter
    (fun n ->
      if n.flush_asked && (not n.exited) && is_coord n then begin
        n.flush_asked <- false;
        let ranks = List.init (Array.length n.addrs) Fun.id in
        let leaving r =
          match by_eid net n.view.View.members.(r) with Some o -> o.leaving | None -> false
        in
        let survivors =
          List.filter (fun r -> (not (List.mem r n.suspected)) && not (leaving r)) ranks
        in
        let leavers = List.filter leaving ranks in
        (* Every member of the view reported to this round (Gmp's Reported). *)
        let round = Some (coord n, n.suspected, leavers, n.merge_into) in
        Array.iter
          (fun e ->
            match by_eid net e with
            | Some o when o.view.View.id = n.view.View.id -> o.reported <- round
            | _ -> ())
          n.view.View.members;
        handle net n (M.Flushed { survivors; leavers })
      end)
    net.nodes

(* The periodic work, in the driver's order. *)
let tick net n =
  M.expire_probes n.m ~now:net.now;
  if not n.exited then begin
    handle net n M.Retry;
    handle net n M.Merge_wait;
    handle net n M.Leave_wait;
    if not n.exited then handle net n M.Heard;
    if (not n.exited) && net.now mod heal_interval = 0 then handle net n M.Gossip
  end

let step net =
  complete_flushes net;
  net.now <- net.now + Time.of_ms step_ms;
  List.iter (tick net) net.nodes;
  deliver_all net

let run_until ?(max = 1000) net pred =
  let rec go i =
    if pred () then true
    else if i >= max then false
    else (
      step net;
      go (i + 1))
  in
  go 0

let add ?(peers = []) net addr =
  let me = { Side.eid = eid addr; addr; pub = "" } in
  let m =
    M.create ~group
      ~rng:(Rng.create (Hashtbl.hash addr))
      ~peers ~merge_timeout ~install_retry ~leave_timeout
      ~current_stack:(fun () -> stack)
      ~next_stack:(fun () -> stack)
      ~wrap:(fun ~vid:_ ~members:_ msg -> (msg, None))
      ~buildable:(fun (s : Side.stack) ->
        match by_addr net addr with
        | Some n when List.mem s.id n.builds -> Ok ()
        | _ -> Error ("no layer for " ^ s.id))
      ~unwrap:(fun ~view_members:_ ~pubs:_ _ ->
        match by_addr net addr with
        | Some n when n.key_opens -> Ok None
        | _ -> Error "no key for this member opens")
      ()
  in
  let n =
    {
      addr;
      me;
      m;
      view = View.v ~group ~ltime:0 ~id:("0:" ^ me.eid) ~members:[| me.eid |] ~rank:0 ();
      addrs = [| addr |];
      blocked = false;
      flush_asked = false;
      leaving = false;
      suspected = [];
      views = [];
      installs_made = 0;
      merge_into = "";
      reported = None;
      builds = [ stack.id ];
      refused = [];
      key_opens = true;
      exited = false;
    }
  in
  net.nodes <- net.nodes @ [ n ];
  n

let members n = Array.to_list n.view.View.members |> List.sort compare
let sl = Alcotest.(list string)
let quiet n = not (M.merging n.m || M.absorbing n.m || M.awaiting_acks n.m || n.blocked)

let one_view nodes =
  let v = (List.hd nodes).view.View.id in
  List.for_all (fun n -> n.view.View.id = v && List.length (members n) = List.length nodes) nodes

(* {1 The races} *)

(* Two partitions hear of each other at the same moment (their discovery messages cross): one
   merges into the other, one view change each, no second merge. *)
let crossing_gossip () =
  let net = new_net () in
  let a = add net "a" ~peers:[ "b" ] and b = add net "b" ~peers:[ "a" ] in
  handle net a M.Gossip;
  handle net b M.Gossip;
  Alcotest.(check int) "both discovery messages in flight" 2 (List.length net.wire);
  (* Delivered in the opposite order from the one they were sent in. *)
  net.wire <- List.rev net.wire;
  deliver_all net;
  Alcotest.(check bool)
    "one view" true
    (run_until net (fun () -> one_view [ a; b ] && quiet a && quiet b));
  Alcotest.check sl "both in it" [ eid "a"; eid "b" ] (members a);
  Alcotest.(check (list int))
    "one view change each" [ 1; 1 ]
    [ List.length a.views; List.length b.views ];
  (* Nothing more happens: the discovery messages of the one view change nothing. *)
  ignore (run_until ~max:300 net (fun () -> false));
  Alcotest.(check (list int))
    "still one view change each" [ 1; 1 ]
    [ List.length a.views; List.length b.views ]

(* Three partitions at once: c merges into b while b merges into a. b, busy, drops c's request;
   c's wait runs out, it goes on alone, and merges into the view of a and b after. *)
let chain_of_merges () =
  let net = new_net () in
  let all = [ "a"; "b"; "c" ] in
  let a = add net "a" ~peers:all and b = add net "b" ~peers:all and c = add net "c" ~peers:all in
  (* b and c hear of each other and of a at once. *)
  List.iter (fun n -> handle net n M.Gossip) [ c; b; a ];
  deliver_all net;
  Alcotest.(check bool)
    "one view of three" true
    (run_until ~max:1500 net (fun () -> one_view [ a; b; c ] && List.for_all quiet [ a; b; c ]));
  Alcotest.check sl "all in it" [ eid "a"; eid "b"; eid "c" ] (members c);
  Alcotest.(check bool) "a, the least, made it" true (Side.installer a.view.View.id = eid "a");
  Alcotest.(check bool)
    "no one suspected" true
    (List.for_all (fun n -> n.suspected = []) [ a; b; c ])

(* The view of a and b, b's acknowledgements held back: c's merge request comes while a waits
   for them. a takes c in; b's late acknowledgements of the older view do not count for the new
   one; one view of three, and no one suspected for not acknowledging. *)
let merge_while_awaiting_acks () =
  let net = new_net () in
  let a = add net "a" ~peers:[ "b" ] and b = add net "b" ~peers:[ "a" ] in
  net.policy <-
    (function _, _, Side.Install_ack { eid = e; _ } when e = eid "b" -> Hold | _ -> Deliver);
  handle net b M.Gossip;
  deliver_all net;
  Alcotest.(check bool) "view of a and b" true (run_until net (fun () -> one_view [ a; b ]));
  let old_vid = a.view.View.id in
  Alcotest.(check bool) "a waits for b" true (M.awaiting_acks a.m);
  Alcotest.check sl "for b alone" [ eid "b" ] (M.pending_targets a.m);
  (* c appears and asks; b's acknowledgements are still held. *)
  let c = add net "c" ~peers:[ "a" ] in
  handle net c M.Gossip;
  deliver_all net;
  Alcotest.(check bool)
    "a took c in" true
    (run_until ~max:150 net (fun () -> List.mem (eid "c") (members a)));
  Alcotest.(check bool) "a new view" true (a.view.View.id <> old_vid);
  Alcotest.(check bool)
    "it waits for b and c" true
    (List.sort compare (M.pending_targets a.m) = [ eid "b"; eid "c" ]
    || List.sort compare (M.pending_targets a.m) = [ eid "b" ]);
  Alcotest.(check bool) "b's acknowledgements of the old view were held" true (net.held <> []);
  (* b's acknowledgements of the older view arrive now: they do not acknowledge the new one. *)
  let late = net.held in
  net.held <- [];
  net.policy <- (fun _ -> Deliver);
  List.iter
    (fun ((_, _, msg) as m) ->
      match msg with Side.Install_ack { vid; _ } when vid = old_vid -> deliver net m | _ -> ())
    late;
  Alcotest.(check bool)
    "b still to acknowledge the new view" true
    (List.mem (eid "b") (M.pending_targets a.m));
  Alcotest.(check bool)
    "one view of three" true
    (run_until net (fun () -> one_view [ a; b; c ] && List.for_all quiet [ a; b; c ]));
  Alcotest.(check bool)
    "no one suspected" true
    (List.for_all (fun n -> n.suspected = []) [ a; b; c ]);
  Alcotest.(check int) "b installed two views" 2 (List.length b.views)

(* b's acknowledgement of the view that takes it in is lost: a resends the Install, b (already in
   it) acknowledges again; one view, installed once, no suspicion. *)
let lost_ack () =
  let net = new_net () in
  let a = add net "a" ~peers:[ "b" ] and b = add net "b" ~peers:[ "a" ] in
  let dropped = ref 0 and lose = ref true in
  net.policy <-
    (function
    | _, _, Side.Install_ack _ when !lose ->
        incr dropped;
        Drop
    | _ -> Deliver);
  handle net b M.Gossip;
  deliver_all net;
  Alcotest.(check bool) "view of a and b" true (run_until net (fun () -> one_view [ a; b ]));
  let vid = a.view.View.id in
  (* The acknowledgement is lost on its way: a still waits for it. *)
  deliver_all net;
  Alcotest.(check bool) "acknowledgements lost" true (!dropped > 0);
  Alcotest.check sl "a waits for b" [ eid "b" ] (M.pending_targets a.m);
  (* The network heals. b acknowledges only an Install it gets: within the merge timeout, the
     resent one is acknowledged. *)
  lose := false;
  Alcotest.(check bool)
    "acknowledged after a resend" true
    (run_until ~max:50 net (fun () -> not (M.awaiting_acks a.m)));
  Alcotest.(check string) "the same view" vid b.view.View.id;
  Alcotest.(check int) "installed once" 1 (List.length b.views);
  Alcotest.(check (list int)) "no one suspected" [] a.suspected

(* a has taken c in (its flush under way) and leaves: its flush ends with a leaving. It names
   the view of b and c, sends it to both, installs nothing itself and goes once both have
   acknowledged it. *)
let leave_during_merge () =
  let net = new_net () in
  let a = add net "a" ~peers:[ "b" ] and b = add net "b" ~peers:[ "a" ] in
  handle net b M.Gossip;
  deliver_all net;
  Alcotest.(check bool)
    "view of a and b" true
    (run_until net (fun () -> one_view [ a; b ] && quiet a && quiet b));
  let c = add net "c" ~peers:[ "a" ] in
  handle net c M.Gossip;
  deliver_all net;
  Alcotest.(check bool) "a takes c in" true (run_until ~max:150 net (fun () -> M.absorbing a.m));
  let made = a.installs_made in
  a.leaving <- true;
  exec net a (M.leave a.m ~now:net.now ~alone:false);
  Alcotest.(check bool) "a leaving" true (M.leaving a.m);
  Alcotest.(check bool)
    "b and c in one view without a" true
    (run_until net (fun () -> one_view [ b; c ] && List.for_all quiet [ b; c ]));
  Alcotest.check sl "b and c" [ eid "b"; eid "c" ] (members b);
  Alcotest.(check string) "named by a" (eid "a") (Side.installer b.view.View.id);
  Alcotest.(check int) "a installs nothing more" made a.installs_made;
  Alcotest.(check bool) "a is gone" true (run_until ~max:50 net (fun () -> a.exited));
  Alcotest.(check bool) "a never in a view with c" false (List.mem (eid "c") (members a))

(* Leaving: alone, at once, and once only; a member whose coordinator never lets it go (its
   flush never ends, the view without it never comes) goes anyway at its time, not before. *)
let leave_timeout_runs_out () =
  let net = new_net () in
  let z = add net "z" in
  (match M.leave z.m ~now:net.now ~alone:true with
  | [ M.Exit ] -> ()
  | l -> Alcotest.failf "alone: Exit expected, %d actions" (List.length l));
  Alcotest.(check int)
    "leaving twice: nothing more" 0
    (List.length (M.leave z.m ~now:net.now ~alone:true));
  let a = add net "a" ~peers:[ "b" ] and b = add net "b" ~peers:[ "a" ] in
  handle net b M.Gossip;
  deliver_all net;
  Alcotest.(check bool)
    "view of a and b" true
    (run_until net (fun () -> one_view [ a; b ] && quiet a && quiet b));
  (* b leaves; its coordinator a never hears of it (nothing from b reaches a any more). *)
  net.policy <- (fun (src, _, _) -> if src = "b" then Drop else Deliver);
  b.leaving <- true;
  let start = net.now in
  exec net b (M.leave b.m ~now:net.now ~alone:false);
  Alcotest.(check bool) "b gone in the end" true (run_until ~max:1000 net (fun () -> b.exited));
  Alcotest.(check bool) "not before its time" true (net.now - start > leave_timeout);
  Alcotest.(check bool) "a still in its view" false a.exited

(* Stale views: a probe that names a view this member has left is not answered; an answer that
   names another view than the one probed, or comes from another address, starts nothing; an
   acknowledgement of an older view, or from another address, does not count; a merge request
   from members of this member's own view is ignored. *)
let stale_views () =
  let net = new_net () in
  let z = add net "z" ~peers:[] in
  let probe vid =
    M.handle z.m (ctx net z)
      (M.Side
         { src = "x"; msg = Side.Probe { group; vid; nonce = "n1"; eid = "x#1"; dst = z.me.eid } })
  in
  Alcotest.(check int) "an older view: no answer" 0 (List.length (probe ("0:" ^ "y")));
  (match probe z.view.View.id with
  | [ M.Send ("x", Side.Probe_ack { vid; nonce = "n1"; dst = "x#1"; _ }) ] ->
      Alcotest.(check string) "answered naming its view" z.view.View.id vid
  | l -> Alcotest.failf "one answer expected, %d actions" (List.length l));
  (* b, of least id, tells z of its view 5:b#1: z probes b about that view. *)
  let b = { Side.eid = eid "b"; addr = "b"; pub = "" } in
  let gossip = Side.Gossip { group; vid = "5:b#1"; ltime = 5; coord = b; size = 1; stack } in
  let nonce =
    match M.handle z.m (ctx net z) (M.Side { src = "b"; msg = gossip }) with
    | [ M.Send ("b", Side.Probe { nonce; vid = "5:b#1"; dst; _ }) ] ->
        Alcotest.(check string) "to b" b.eid dst;
        nonce
    | l -> Alcotest.failf "one probe expected, %d actions" (List.length l)
  in
  let ack ~src vid =
    M.handle z.m (ctx net z)
      (M.Side { src; msg = Side.Probe_ack { group; vid; nonce; eid = b.eid; dst = z.me.eid } })
  in
  Alcotest.(check int)
    "an answer naming an older view starts nothing" 0
    (List.length (ack ~src:"b" "4:b#1"));
  Alcotest.(check int)
    "an answer from another address starts nothing" 0
    (List.length (ack ~src:"evil" "5:b#1"));
  Alcotest.(check int) "both counted" 2 (M.garbage z.m);
  Alcotest.(check bool) "not merging" false (M.merging z.m);
  (match ack ~src:"b" "5:b#1" with
  | [ M.Merge_into e; M.Start_flush _ ] -> Alcotest.(check string) "merges into b" b.eid e
  | l -> Alcotest.failf "a merge expected, %d actions" (List.length l));
  (* The same answer again: its probe is used up. *)
  Alcotest.(check int) "an answer used once" 0 (List.length (ack ~src:"b" "5:b#1"));
  (* Acknowledgements: a and b in a view, b's of an older view and from elsewhere refused. *)
  let net = new_net () in
  let a = add net "a" ~peers:[ "b" ] and bn = add net "b" ~peers:[ "a" ] in
  net.policy <- (function _, _, Side.Install_ack _ -> Drop | _ -> Deliver);
  handle net bn M.Gossip;
  deliver_all net;
  Alcotest.(check bool) "view of a and b" true (run_until net (fun () -> one_view [ a; bn ]));
  let vid = a.view.View.id in
  M.acked a.m ~vid:("0:" ^ eid "a") ~eid:bn.me.eid ~src:"b";
  Alcotest.check sl "an older view's acknowledgement" [ bn.me.eid ] (M.pending_targets a.m);
  M.acked a.m ~vid ~eid:bn.me.eid ~src:"evil";
  Alcotest.check sl "from another address" [ bn.me.eid ] (M.pending_targets a.m);
  M.acked a.m ~vid ~eid:bn.me.eid ~src:"b";
  Alcotest.check sl "b's own" [] (M.pending_targets a.m);
  (* A merge request from a member of a's own view (of an older view of its): ignored. *)
  let req =
    Side.Merge_req
      {
        group;
        vid = "0:" ^ eid "b";
        ltime = 0;
        members = [ { Side.eid = eid "b"; addr = "b"; pub = "" } ];
        stack;
        dst = a.me.eid;
      }
  in
  Alcotest.(check int)
    "no probe for its own members" 0
    (List.length (M.handle a.m (ctx net a) (M.Side { src = "b"; msg = req })))

(* Strangers flood a coordinator with discovery messages, then answer its probes: at most
   max_probes probes out, nothing learnt from a discovery message alone, at most max_known
   members known. *)
let stranger_flood () =
  let net = new_net () in
  let z = add net "z" ~peers:[] in
  let n = 3000 in
  let most_probes = ref 0 and sends = ref 0 in
  for i = 0 to n - 1 do
    let s = Printf.sprintf "s%04d" i in
    let coord = { Side.eid = s ^ "#1"; addr = s; pub = "" } in
    let acts =
      M.handle z.m (ctx net z)
        (M.Side
           {
             src = s;
             msg = Side.Gossip { group; vid = "1:" ^ coord.eid; ltime = 1; coord; size = 1; stack };
           })
    in
    sends := !sends + List.length acts;
    most_probes := max !most_probes (M.probes_out z.m)
  done;
  Alcotest.(check int) "one probe per stranger" n !sends;
  Alcotest.(check bool) "probes out bounded" true (!most_probes <= G.Membership.max_probes);
  Alcotest.(check int) "nothing learnt from discovery messages" 0 (M.known z.m);
  (* Each stranger answers the probe it gets, at once. *)
  for i = 0 to n - 1 do
    let s = Printf.sprintf "s%04d" i in
    let coord = { Side.eid = s ^ "#1"; addr = s; pub = "" } in
    net.now <- net.now + Time.of_ms 200;
    M.expire_probes z.m ~now:net.now;
    let acts =
      M.handle z.m (ctx net z)
        (M.Side
           {
             src = s;
             msg = Side.Gossip { group; vid = "2:" ^ coord.eid; ltime = 2; coord; size = 1; stack };
           })
    in
    List.iter
      (function
        | M.Send (dst, Side.Probe { vid; nonce; dst = who; _ }) ->
            exec net z
              (M.handle z.m (ctx net z)
                 (M.Side
                    {
                      src = dst;
                      msg = Side.Probe_ack { group; vid; nonce; eid = who; dst = z.me.eid };
                    }))
        | _ -> ())
      acts;
    if M.known z.m > G.Membership.max_known then
      Alcotest.failf "%d members known after %d answers" (M.known z.m) (i + 1)
  done;
  Alcotest.(check int) "known bounded" G.Membership.max_known (M.known z.m);
  Alcotest.(check bool) "probes out bounded" true (M.probes_out z.m <= G.Membership.max_probes)

(* {1 An Install from another member} *)

let mem a = { Side.eid = eid a; addr = a; pub = "" }

(* c, a member of b's partition {b; c} (view 3:b#1, b its coordinator), while b merges it into
   a's partition: a's Install of the view of all three is sent as soon as a's flush is over, and
   may reach c before c has reported to b's flush round for the merge. *)
let partition_of_b_and_c net =
  let c = add net "c" in
  c.view <- View.v ~group ~ltime:3 ~id:"3:b#1" ~members:[| eid "b"; eid "c" |] ~rank:1 ();
  c.addrs <- [| "b"; "c" |];
  c.blocked <- true;
  c

let install_of ?(vid = "5:a#1") ?(ltime = 5) ?(members = [ "a"; "b"; "c" ]) ?(leavers = [])
    ?(preds = [ "4:a#1"; "3:b#1" ]) ?(stack = stack) () =
  Side.Install
    { group; vid; ltime; members = List.map mem members; leavers; preds; stack; keys = [] }

let ack_to a vid = function
  | M.Send (dst, Side.Install_ack { vid = v; eid = e; dst = maker; _ }) ->
      dst = a && v = vid && e = eid "c" && maker = Side.installer vid
  | _ -> false

let describe = function
  | M.Send (d, m) -> Printf.sprintf "Send to %s (%s)" d (Side.dst m)
  | M.Install { vid; _ } -> "Install " ^ vid
  | M.Refused { vid; why = M.View w; _ } -> Printf.sprintf "Refused %s (view: %s)" vid w
  | M.Refused { vid; why = M.Stack { reason; _ }; _ } ->
      Printf.sprintf "Refused %s (stack: %s)" vid reason
  | M.Refused { vid; why = M.Key w; _ } -> Printf.sprintf "Refused %s (key: %s)" vid w
  | M.Exit -> "Exit"
  | _ -> "another action"

let fail_with what l = Alcotest.failf "%s: got [%s]" what (String.concat "; " (List.map describe l))

let install_races_merge () =
  let net = new_net () in
  let c = partition_of_b_and_c net in
  let install = install_of () in
  let hear ?(src = "a") msg = M.handle c.m (ctx net c) (M.Side { src; msg }) in
  (* Before c has reported to b's round: refused, nothing installed, nothing acknowledged. *)
  (match hear install with
  | [ M.Refused { vid = "5:a#1"; src = "a"; why = M.View _ } ] -> ()
  | l -> fail_with "before the report" l);
  (* Reported to a round of b that merges into no one: a is not c's coordinator. *)
  c.reported <- Some (0, [], [], "");
  (match hear install with
  | [ M.Refused { why = M.View _; _ } ] -> ()
  | l -> fail_with "a round that merges into no one" l);
  (* Reported to b's round for the merge into a. From another address, claiming to be a's: refused. *)
  c.reported <- Some (0, [], [], eid "a");
  (match hear ~src:"x" install with
  | [ M.Refused { src = "x"; why = M.View _; _ } ] -> ()
  | l -> fail_with "from another address" l);
  Alcotest.(check int) "three refusals counted" 3 (M.garbage c.m);
  (* From a: installed, then acknowledged to a, in that order. *)
  let acts = hear install in
  (match acts with
  | [ M.Install { vid = "5:a#1"; ltime = 5; members; stack = Some s; key = None }; ack ]
    when ack_to "a" "5:a#1" ack && s = stack ->
      Alcotest.(check (list string))
        "its members"
        [ eid "a"; eid "b"; eid "c" ]
        (List.map (fun (m : Side.member) -> m.eid) members)
  | l -> fail_with "after the report" l);
  exec net c acts;
  Alcotest.(check string) "c in it" "5:a#1" c.view.View.id;
  Alcotest.(check bool) "c runs again" false c.blocked;
  (* a resends it (c's acknowledgement lost): acknowledged again, not installed again. *)
  (match hear install with
  | [ ack ] when ack_to "a" "5:a#1" ack -> ()
  | l -> fail_with "the resend" l);
  Alcotest.(check int) "garbage unchanged" 3 (M.garbage c.m)

(* Installs c refuses while its view is flushed: a view on a stack it cannot build, one whose key
   does not open, an older view, one that does not follow its view, one that leaves out a member
   the flush kept; and one that lets it go when it is not leaving. None installs or acknowledges. *)
let install_refused () =
  let net = new_net () in
  let c = partition_of_b_and_c net in
  c.reported <- Some (0, [], [], eid "a");
  let hear msg = M.handle c.m (ctx net c) (M.Side { src = "a"; msg }) in
  let other = { Side.epoch = 1; id = "other-stack" } in
  (match hear (install_of ~stack:other ()) with
  | [ M.Refused { vid = "5:a#1"; why = M.Stack { stack = s; reason }; _ } ] ->
      Alcotest.(check bool) "the stack named" true (s = other);
      Alcotest.(check string) "why" "no layer for other-stack" reason
  | l -> fail_with "wrong stack" l);
  c.key_opens <- false;
  (match hear (install_of ()) with
  | [ M.Refused { why = M.Key _; _ } ] -> ()
  | l -> fail_with "no key" l);
  c.key_opens <- true;
  (match hear (install_of ~vid:"3:a#1" ~ltime:3 ()) with
  | [] -> ()
  | l -> fail_with "stale: not later than c's view" l);
  (match hear (install_of ~preds:[ "4:a#1" ] ()) with
  | [ M.Refused { why = M.View _; _ } ] -> ()
  | l -> fail_with "does not follow c's view" l);
  (match hear (install_of ~members:[ "a"; "c" ] ()) with
  | [ M.Refused { why = M.View _; _ } ] -> ()
  | l -> fail_with "leaves b out" l);
  (match hear (install_of ~members:[ "a"; "b" ] ~leavers:[ eid "c" ] ()) with
  | [] -> ()
  | l -> fail_with "lets c go, c not leaving" l);
  Alcotest.(check int) "four refusals counted" 4 (M.garbage c.m);
  Alcotest.(check string) "still in its view" "3:b#1" c.view.View.id;
  (* Not flushed: a later view is not taken at all. *)
  c.blocked <- false;
  (match hear (install_of ()) with [] -> () | l -> fail_with "not flushed" l);
  (* The same view, once the stack can build it: taken. *)
  c.blocked <- true;
  match hear (install_of ()) with
  | [ M.Install _; ack ] when ack_to "a" "5:a#1" ack -> ()
  | l -> fail_with "the right one" l

(* The current view the kernel holds (Group_view): who is told joined and left and why, the
   coordinator as the least rank not suspected, a rank gone once suspected or excluded or let go
   by the round reported to, and the context a step of the kernel gets from it. *)
let view_record () =
  let module V = G.Group_view in
  let mem s = { Side.eid = eid s; addr = s; pub = "k" ^ s } in
  let first =
    V.create ~group ~vid:"1:a#1" ~ltime:1
      ~members:[ mem "a"; mem "b"; mem "c"; mem "d"; mem "e" ]
      ~rank:1 ~addrs:[| "a"; "b"; "c"; "d"; "e" |] ~previous:None
  in
  Alcotest.(check (list string))
    "all joined the first view"
    [ "a#1"; "b#1"; "c#1"; "d#1"; "e#1" ]
    (V.info first).joined;
  Alcotest.(check int) "a coordinates" 0 (V.coordinator_rank first);
  Alcotest.(check bool) "b does not" false (V.is_coordinator first);
  Alcotest.(check bool) "a suspected" true (V.suspect first 0 "silent for 5.0 s");
  Alcotest.(check bool) "not twice" false (V.suspect first 0 "again");
  Alcotest.(check bool) "no such rank" false (V.suspect first 5 "nonsense");
  Alcotest.(check bool) "nor below" false (V.suspect first (-1) "nonsense");
  Alcotest.(check int) "b coordinates once a is suspected" 1 (V.coordinator_rank first);
  Alcotest.(check bool) "and knows it" true (V.is_coordinator first);
  Alcotest.(check bool) "c is not gone" false (V.gone first 2);
  V.report first (1, [ 3 ], [ 2 ], "");
  Alcotest.(check bool) "c let go" true (V.gone first 2);
  Alcotest.(check bool) "d excluded" true (V.gone first 3);
  Alcotest.(check bool) "e stays" false (V.gone first 4);
  let x = M.context ~now:7 ~me:(mem "b") ~blocked:true ~resumed:false first in
  Alcotest.(check int) "the step's coordinator" 1 x.coord;
  Alcotest.(check bool) "the step's gone" true (x.gone 0 && x.gone 2 && x.gone 3 && not (x.gone 4));
  Alcotest.(check (array string)) "the step's keys" [| "ka"; "kb"; "kc"; "kd"; "ke" |] x.pubs;
  let next =
    V.create ~group ~vid:"2:b#1" ~ltime:2
      ~members:[ mem "b"; mem "e"; mem "f" ]
      ~rank:0 ~addrs:[| "b"; "e"; "f" |] ~previous:(Some first)
  in
  let i = V.info next in
  Alcotest.(check string) "coordinator" "b#1" i.coordinator;
  Alcotest.(check (list string)) "joined" [ "f#1" ] i.joined;
  Alcotest.(check (list string)) "left" [ "a#1"; "c#1"; "d#1" ] i.left;
  Alcotest.(check (list (pair string string)))
    "why"
    [ ("a#1", "excluded: silent for 5.0 s"); ("c#1", "left"); ("d#1", "not in the next view") ]
    i.why;
  Alcotest.(check (option int)) "rank of f" (Some 2) (V.rank_of next "f#1");
  Alcotest.(check (option int)) "a is not in it" None (V.rank_of next "a#1");
  Alcotest.(check bool) "no one suspected in the next view" false (V.gone next 1);
  let m =
    M.create ~group ~rng:(Rng.create 1) ~merge_timeout ~install_retry ~leave_timeout
      ~current_stack:(fun () -> stack)
      ~next_stack:(fun () -> stack)
      ~wrap:(fun ~vid:_ ~members:_ m -> (m, None))
      ~buildable:(fun _ -> Ok ())
      ~unwrap:(fun ~view_members:_ ~pubs:_ _ -> Ok None)
      ()
  in
  Alcotest.(check bool) "no view held at first" true (M.current m = None);
  M.set_current m next;
  Alcotest.(check bool)
    "the view held" true
    (match M.current m with Some v -> v == next | None -> false)

let () =
  Alcotest.run "membership"
    [
      ("view", [ Alcotest.test_case "the current view's record" `Quick view_record ]);
      ( "merge",
        [
          Alcotest.test_case "discovery messages cross" `Quick crossing_gossip;
          Alcotest.test_case "three partitions at once" `Quick chain_of_merges;
          Alcotest.test_case "merge request while awaiting acks" `Quick merge_while_awaiting_acks;
        ] );
      ( "install",
        [
          Alcotest.test_case "lost acknowledgement resent" `Quick lost_ack;
          Alcotest.test_case "leave during a merge" `Quick leave_during_merge;
          Alcotest.test_case "leave timeout runs out" `Quick leave_timeout_runs_out;
        ] );
      ("stale", [ Alcotest.test_case "older views and other addresses" `Quick stale_views ]);
      ( "accept",
        [
          Alcotest.test_case "an Install racing the merge's flush" `Quick install_races_merge;
          Alcotest.test_case "Installs refused" `Quick install_refused;
        ] );
      ("bounds", [ Alcotest.test_case "a flood of strangers" `Quick stranger_flood ]);
    ]
