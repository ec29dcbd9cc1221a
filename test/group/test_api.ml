(* The group's application interface under pressure, and the rules of the
   side channel, over the deterministic simulator. *)

open Consort
module Sim = Consort_engine.Sim
module Group = Consort_group.Group
module G = Group.Make (Sim)
module Side = Consort_group.Side

let sec = Time.of_sec
let ms = Time.of_ms

let layers () =
  match Consort_group.Properties.(layers vsync) with
  | Ok l -> l
  | Error e -> Alcotest.failf "%a" Consort_group.Properties.pp_error e

type member = {
  g : G.t;
  pool : Pool.t;
  casts : (string * string) list ref; (* origin, payload; newest first *)
  flow : bool list ref; (* newest first *)
  views : string list list ref; (* the members of each view installed, newest first *)
  why : (string * string) list ref; (* why members left, all views *)
  lost : (string * string) list ref; (* payload, reason *)
}

let join ?(params = Params.empty) net addr peers =
  let casts = ref [] and flow = ref [] and views = ref [] and why = ref [] and lost = ref [] in
  let pool = Pool.create ~name:addr () in
  let cb =
    {
      Group.view =
        (fun v ->
          views := List.sort compare (Array.to_list v.Group.members) :: !views;
          why := !why @ v.Group.why);
      cast = (fun ~origin s -> casts := (origin, s) :: !casts);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = (fun b -> flow := b :: !flow);
      exit = ignore;
    }
  in
  let on_lost _ s reason = lost := (s, reason) :: !lost in
  match
    G.join ~params ~pool ~peers ~seed:(Hashtbl.hash addr) ~on_lost ~layers:(layers ()) net
      ~group:"api" ~addr cb
  with
  | Ok g -> { g; pool; casts; flow; views; why; lost }
  | Error e -> Alcotest.failf "%a" Group.pp_join_error e

let group ?params ?(n = 3) net =
  let addrs = List.init n (Printf.sprintf "m%d") in
  let ms = List.map (fun a -> join ?params net a addrs) addrs in
  Sim.run ~until:(sec 3.) net;
  List.iter
    (fun m ->
      Alcotest.(check int) "everyone in one view" n (Array.length (G.view m.g).Group.members))
    ms;
  Array.of_list ms

let refused = Alcotest.testable Group.pp_error ( = )
let result = Alcotest.(result unit refused)

(* Each member delivered exactly [expected] from [origin], in order. *)
let delivered_in_order what m origin expected =
  let got =
    List.rev (List.filter_map (fun (o, s) -> if o = origin then Some s else None) !(m.casts))
  in
  Alcotest.(check int) (what ^ ": count") (List.length expected) (List.length got);
  Alcotest.(check bool) (what ^ ": each once, in order") true (got = expected)

let join_errors () =
  let net = Sim.create ~seed:2 () in
  let cb =
    {
      Group.view = ignore;
      cast = (fun ~origin:_ _ -> ());
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  let err ?(peers = []) ?discovery addr =
    match G.join ~peers ?discovery ~layers:(layers ()) net ~group:"e" ~addr cb with
    | Ok _ -> Alcotest.failf "%s joined" addr
    | Error e -> Fmt.str "%a" Group.pp_join_error e
  in
  Alcotest.(check string)
    "a peer that does not parse is an error, not dropped" "bad peer address \"\": empty address"
    (err ~peers:[ "b"; "" ] "a0");
  (match G.join ~layers:(layers ()) net ~group:"e" ~addr:"dup" cb with
  | Ok _ -> ()
  | Error e -> Alcotest.failf "%a" Group.pp_join_error e);
  Alcotest.(check bool)
    "an address in use" true
    (String.length (err "dup") > 0 && String.sub (err "dup") 0 10 = "cannot ope");
  let l =
    match Consort_group.Properties.(layers [ Gmp; Sync ]) with
    | Ok l -> l
    | Error e -> Alcotest.failf "%a" Consort_group.Properties.pp_error e
  in
  match G.join ~layers:(List.tl l) net ~group:"e" ~addr:"nogmp" cb with
  | Error (Group.Bad_stack _) -> ()
  | Ok _ -> Alcotest.fail "a stack without membership accepted"
  | Error e -> Alcotest.failf "%a" Group.pp_join_error e

let refusals () =
  let params = Params.(empty |> set "frag.max_message" (Int 10_000)) in
  let net = Sim.create ~seed:3 () in
  let m = group ~params net in
  Alcotest.check result "a normal cast" (Ok ()) (G.cast m.(0).g "hello");
  Alcotest.(check int) "the largest message" 10_000 (G.max_message m.(0).g);
  Alcotest.check result "one byte over"
    (Error (Group.Too_big { size = 10_001; max = 10_000 }))
    (G.cast m.(0).g (String.make 10_001 'x'));
  Alcotest.check result "a send over"
    (Error (Group.Too_big { size = 20_000; max = 10_000 }))
    (G.send m.(0).g (G.me m.(1).g) (String.make 20_000 'x'));
  Alcotest.check result "a send to a stranger" (Error (Group.Not_member "nobody#1"))
    (G.send m.(0).g "nobody#1" "hi");
  Sim.run ~until:(sec 4.) net;
  List.iter
    (fun x -> delivered_in_order "only the normal cast" x (G.me m.(0).g) [ "hello" ])
    (Array.to_list m);
  Alcotest.(check int) "refusals counted" 3 (G.refused m.(0).g);
  G.leave m.(2).g;
  Alcotest.check result "leaving" (Error Group.Leaving) (G.cast m.(2).g "late");
  Sim.run ~until:(sec 8.) net;
  Alcotest.check result "gone" (Error Group.Exited) (G.cast m.(2).g "later");
  Alcotest.(check int) "the others go on" 2 (Array.length (G.view m.(0).g).Group.members)

(* Without Frag, a message is one datagram. *)
let without_frag () =
  let net = Sim.create ~seed:4 ~mtu:9000 () in
  let l =
    match Consort_group.Properties.(layers [ Gmp; Sync; Heal; Suspect; Flow; Slander ]) with
    | Ok l -> l
    | Error e -> Alcotest.failf "%a" Consort_group.Properties.pp_error e
  in
  let got = ref 0 in
  let cb =
    {
      Group.view = ignore;
      cast = (fun ~origin:_ _ -> incr got);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  match G.join ~layers:l net ~group:"nofrag" ~addr:"a" cb with
  | Error e -> Alcotest.failf "%a" Group.pp_join_error e
  | Ok g ->
      Alcotest.(check int) "one datagram less the headers" (9000 - 512) (G.max_message g);
      Alcotest.check result "fits" (Ok ()) (G.cast g (String.make (9000 - 512) 'x'));
      Alcotest.check result "does not"
        (Error (Group.Too_big { size = 9000; max = 9000 - 512 }))
        (G.cast g (String.make 9000 'x'));
      Sim.run ~until:(sec 1.) net;
      Alcotest.(check int) "the one that fits is delivered" 1 !got

(* A member that stops taking anything in (its process stopped: it is not
   suspected, it returns no credit) while another floods: the flood is
   refused, memory stays bounded, and every accepted cast is delivered
   everywhere once the member resumes. *)
let stopped_receiver () =
  let window = 64 * 1024 and queue = 256 * 1024 in
  let params =
    Params.(
      empty |> set "mflow.window" (Int window) |> set "mflow.queue" (Int queue)
      |> set "suspect.timeout" (Time (sec 1000.))
      |> set "gmp.flush_timeout" (Time (sec 1000.)))
  in
  let net = Sim.create ~seed:5 () in
  let m = group ~params net in
  let stopped = m.(2) in
  let cut () =
    Array.iter
      (fun x ->
        if x != stopped then
          Sim.set_link net
            ~src:(G.me x.g |> String.split_on_char '#' |> List.hd)
            ~dst:"m2"
            { Sim.default_link with loss = 1.0 })
      m
  in
  cut ();
  let sender = m.(0) in
  let accepted = ref [] and refusals = ref 0 and other = ref 0 and peak = ref 0 in
  let payload i = Printf.sprintf "%06d%s" i (String.make 994 'f') in
  (* 100,000 attempts, 1,000 every 10 ms of simulated time. *)
  for round = 0 to 99 do
    ignore
      (Sim.at net
         (sec 3. + (round * ms 10))
         (fun () ->
           for k = 0 to 999 do
             let i = (round * 1000) + k in
             match G.cast sender.g (payload i) with
             | Ok () -> accepted := payload i :: !accepted
             | Error Group.Flow_control -> incr refusals
             | Error _ -> incr other
           done;
           peak := max !peak (Pool.stats sender.pool).Pool.bytes_in_use))
  done;
  Sim.run ~until:(sec 5.) net;
  Alcotest.(check int) "no other refusal" 0 !other;
  Alcotest.(check bool) "most of the flood refused" true (!refusals > 90_000);
  Alcotest.(check bool) "flow control said so" true (List.mem true !(sender.flow));
  (* What the sender holds: its casts not yet stable (at most the window
     plus the queue, and one message beyond each), with headers, in 256 KiB
     pool segments. *)
  let bound = (4 * (window + queue)) + (2 * 256 * 1024) in
  Alcotest.(check bool)
    (Printf.sprintf "sender memory %d bytes at most %d" !peak bound)
    true (!peak <= bound);
  Array.iter
    (fun x ->
      if x != stopped then
        Sim.clear_link net ~src:(List.hd (String.split_on_char '#' (G.me x.g))) ~dst:"m2")
    m;
  Sim.run ~until:(sec 30.) net;
  let expected = List.rev !accepted in
  Alcotest.(check bool) "some were accepted" true (List.length expected > 100);
  Array.iteri
    (fun i x -> delivered_in_order (Printf.sprintf "member %d" i) x (G.me sender.g) expected)
    m;
  Alcotest.(check (option bool)) "and may go on" (Some false) (List.nth_opt !(sender.flow) 0)

(* Casts made while a view change waits are queued up to group.queue, then
   refused; the queued ones go out in the next view. *)
let blocked_queue () =
  let params =
    Params.(empty |> set "group.queue" (Int 10_000) |> set "suspect.timeout" (Time (sec 2.)))
  in
  let net = Sim.create ~seed:6 () in
  let m = group ~params net in
  (* m2 crashes: the view change waits for the failure detector. *)
  Sim.crash net "m2";
  let blocked_at = ref None in
  let results = ref [] in
  let rec poll () =
    if G.is_blocked m.(0).g && !blocked_at = None then begin
      blocked_at := Some (Sim.now net);
      for i = 1 to 50 do
        results :=
          (i, G.cast m.(0).g (Printf.sprintf "q%02d%s" i (String.make 400 'q'))) :: !results
      done
    end
    else if !blocked_at = None then ignore (Sim.at net (Sim.now net + ms 1) poll)
  in
  poll ();
  Sim.run ~until:(sec 10.) net;
  Alcotest.(check bool) "the flush blocked the member" true (!blocked_at <> None);
  let ok = List.filter_map (fun (i, r) -> if r = Ok () then Some i else None) (List.rev !results) in
  let no = List.filter (fun (_, r) -> r <> Ok ()) !results in
  (* 10,000 bytes at 464 (400 + 64) each. *)
  Alcotest.(check int) "queued up to the bound" 21 (List.length ok);
  Alcotest.(check bool)
    "the rest refused as flow control" true
    (List.for_all (fun (_, r) -> r = Error Group.Flow_control) no);
  Alcotest.(check bool)
    "flow control told, then lifted" true
    (match !(m.(0).flow) with false :: rest -> List.mem true rest | _ -> false);
  let want = List.map (fun i -> Printf.sprintf "q%02d%s" i (String.make 400 'q')) ok in
  delivered_in_order "the coordinator" m.(0) (G.me m.(0).g) want;
  delivered_in_order "the other survivor" m.(1) (G.me m.(0).g) want;
  Alcotest.(check int) "in the next view" 2 (Array.length (G.view m.(1).g).Group.members)

(* [cast_bytes] from one buffer written again after every call: in a
   quiet view and while a view change queues the casts, what every member
   delivers is what the buffer held at the call, each once, in order. *)
let cast_bytes_reused () =
  let params =
    Params.(empty |> set "group.queue" (Int 100_000) |> set "suspect.timeout" (Time (sec 2.)))
  in
  let net = Sim.create ~seed:11 () in
  let m = group ~params net in
  let buf = Bytes.make 700 '#' in
  let msg i = Printf.sprintf "b%03d%s" i (String.make (i mod 300) (Char.chr (97 + (i mod 26)))) in
  (* The message goes at an offset, between bytes that must not be sent. *)
  let cast_one i =
    let s = msg i in
    Bytes.fill buf 0 (Bytes.length buf) '#';
    Bytes.blit_string s 0 buf 7 (String.length s);
    let r = G.cast_bytes m.(0).g buf ~off:7 ~len:(String.length s) in
    Bytes.fill buf 0 (Bytes.length buf) 'X';
    r
  in
  let quiet = List.init 40 (fun i -> (i, cast_one i)) in
  Alcotest.(check bool) "quiet view: all taken" true (List.for_all (fun (_, r) -> r = Ok ()) quiet);
  Sim.run ~until:(Sim.now net + sec 1.) net;
  let want = List.init 40 msg in
  Array.iteri
    (fun i x -> delivered_in_order (Printf.sprintf "quiet, member %d" i) x (G.me m.(0).g) want)
    m;
  (* While blocked, whole buffers: the queue must not keep the buffer. *)
  let whole = Bytes.create 404 in
  let qmsg i = Printf.sprintf "q%03d%s" i (String.make 400 (Char.chr (97 + (i mod 26)))) in
  let cast_whole i =
    Bytes.blit_string (qmsg i) 0 whole 0 404;
    let r = G.cast_bytes m.(0).g whole ~off:0 ~len:404 in
    Bytes.fill whole 0 404 'X';
    r
  in
  Sim.crash net "m2";
  let queued = ref [] in
  let rec poll () =
    if G.is_blocked m.(0).g && !queued = [] then
      queued := List.init 30 (fun i -> if i mod 2 = 0 then cast_one (100 + i) else cast_whole i)
    else if !queued = [] then ignore (Sim.at net (Sim.now net + ms 1) poll)
  in
  poll ();
  Sim.run ~until:(Sim.now net + sec 10.) net;
  Alcotest.(check int) "queued while blocked" 30 (List.length !queued);
  Alcotest.(check bool) "all taken" true (List.for_all (fun r -> r = Ok ()) !queued);
  let want = want @ List.init 30 (fun i -> if i mod 2 = 0 then msg (100 + i) else qmsg i) in
  delivered_in_order "after the view change, the coordinator" m.(0) (G.me m.(0).g) want;
  delivered_in_order "after the view change, the other survivor" m.(1) (G.me m.(0).g) want;
  Alcotest.check_raises "a range outside the buffer"
    (Invalid_argument "Group.cast_bytes: range [695,705) outside 700 bytes") (fun () ->
      ignore (G.cast_bytes m.(0).g buf ~off:695 ~len:10));
  Alcotest.check_raises "a negative length"
    (Invalid_argument "Group.cast_bytes: range [3,2) outside 700 bytes") (fun () ->
      ignore (G.cast_bytes m.(0).g buf ~off:3 ~len:(-1)))

(* A member that stays alive but whose flush report never reaches the
   coordinator (and the failure detector too slow to notice): the
   coordinator's flush timeout excludes it, and the others go on. *)
let flush_timeout () =
  let params =
    Params.(
      empty |> set "suspect.timeout" (Time (sec 1000.)) |> set "gmp.flush_timeout" (Time (sec 1.)))
  in
  let net = Sim.create ~seed:9 () in
  let m = group ~params ~n:4 net in
  Sim.set_link net ~src:"m2" ~dst:"m0" { Sim.default_link with loss = 1.0 };
  let t0 = Sim.now net in
  if Sys.getenv_opt "API_DEBUG" <> None then begin
    Logs.set_reporter (Logs.format_reporter ());
    Logs.set_level (Some Logs.Info)
  end;
  G.leave m.(3).g;
  (* Bounded in events too: a timer that fires again and again at the same
     instant (a deadline never acted on) stops the run, and fails below. *)
  Sim.run ~max_events:2_000_000 ~until:(t0 + sec 4.) net;
  Alcotest.(check bool) "four seconds went by" true (Sim.now net >= t0 + sec 4.);
  let without = List.sort compare [ G.me m.(0).g; G.me m.(1).g ] in
  Alcotest.(check bool)
    "the coordinator went on without the mute member" true (List.mem without !(m.(0).views));
  Alcotest.(check bool) "and so did the other" true (List.mem without !(m.(1).views));
  Alcotest.(check (option string))
    "the application hears why" (Some "excluded: did not answer flush 0.1 within 1.0 s")
    (List.assoc_opt (G.me m.(2).g) !(m.(0).why));
  Alcotest.(check (option string))
    "and that the other one left" (Some "left")
    (List.assoc_opt (G.me m.(3).g) !(m.(0).why));
  Alcotest.(check bool) "neither is blocked" false (G.is_blocked m.(0).g || G.is_blocked m.(1).g)

(* {1 The flush report: layers add their part} *)

(* A layer that adds its member's name to the flush report, and records the
   reports it is handed. *)
let seen_parts : (string * (int * Event.part list) list) list ref = ref []

module Reporter = struct
  type t = { me : string; out : unit Layer.out }
  type header = unit

  let name = "reporter"
  let codec = Codec.unit
  let pp_header ppf () = Fmt.string ppf "-"
  let provides = []
  let requires = []
  let create (ctx : Layer.ctx) out = { me = ctx.view.View.members.(ctx.view.View.rank); out }
  let up t src () msg = t.out.up src msg

  let up_ctl t = function
    | Event.Block_ok { round; parts } ->
        t.out.up_ctl (Event.Block_ok { round; parts = ("reporter", t.me) :: parts })
    | e -> t.out.up_ctl e

  let dn t dst msg = t.out.dn dst () msg

  let dn_ctl t = function
    | Event.Flush_parts { parts } as e ->
        seen_parts := (t.me, parts) :: !seen_parts;
        t.out.dn_ctl e
    | e -> t.out.dn_ctl e

  let timer _ _ = ()
  let counters _ = []
end

let flush_parts () =
  seen_parts := [];
  let layers =
    match layers () with gmp :: rest -> gmp :: (module Reporter : Layer.S) :: rest | [] -> []
  in
  let net = Sim.create ~seed:8 () in
  let addrs = [ "m0"; "m1"; "m2" ] in
  let cb =
    {
      Group.view = ignore;
      cast = (fun ~origin:_ _ -> ());
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  let gs =
    List.map
      (fun addr ->
        match G.join ~peers:addrs ~seed:(Hashtbl.hash addr) ~layers net ~group:"parts" ~addr cb with
        | Ok g -> g
        | Error e -> Alcotest.failf "%a" Group.pp_join_error e)
      addrs
  in
  Sim.run ~until:(sec 3.) net;
  seen_parts := [];
  (* A leave: one more view change, with every member's part. *)
  G.leave (List.nth gs 2);
  Sim.run ~until:(sec 6.) net;
  let survivors = List.map G.me [ List.nth gs 0; List.nth gs 1 ] in
  let v = G.view (List.hd gs) in
  Alcotest.(check int) "two left" 2 (Array.length v.Group.members);
  let at m = List.filter_map (fun (who, p) -> if who = m then Some p else None) !seen_parts in
  let leaver = G.me (List.nth gs 2) in
  match (at (List.nth survivors 0), at (List.nth survivors 1), at leaver) with
  | [ p0 ], [ p1 ], [ p2 ] ->
      Alcotest.(check bool) "every member was handed the same reports" true (p0 = p1 && p1 = p2);
      let names = List.sort compare (List.concat_map (fun (_, ps) -> List.map snd ps) p0) in
      Alcotest.(check (list string))
        "one part from each member of the round"
        (List.sort compare (leaver :: survivors))
        names
  | a, b, c ->
      Alcotest.failf "reports handed: %d, %d, %d times" (List.length a) (List.length b)
        (List.length c)

(* A send accepted during a view change, to a member that does not come
   along into the next view, is reported lost. *)
let lost_send () =
  let net = Sim.create ~seed:10 () in
  let m = group net in
  let gone = G.me m.(2).g in
  G.leave m.(2).g;
  let sent = ref false in
  let rec poll () =
    if G.is_blocked m.(0).g && not !sent then begin
      sent := true;
      Alcotest.check result "accepted while blocked" (Ok ()) (G.send m.(0).g gone "late")
    end
    else if not !sent then ignore (Sim.at net (Sim.now net + ms 1) poll)
  in
  poll ();
  Sim.run ~until:(sec 8.) net;
  Alcotest.(check bool) "sent during the flush" true !sent;
  Alcotest.(check int) "counted" 1 (G.dropped_sends m.(0).g);
  match !(m.(0).lost) with
  | [ ("late", reason) ] ->
      Alcotest.(check bool) ("reason names it: " ^ reason) true (String.length reason > 0)
  | l -> Alcotest.failf "lost: %d reports" (List.length l)

(* {1 The side channel's rules} *)

let view ?(id = "3:a#1") members rank =
  View.v ~group:"g" ~ltime:3 ~id ~members:(Array.of_list members) ~rank ()

let mem e = { Side.eid = e; addr = List.hd (String.split_on_char '#' e); pub = "" }
let addr_of v r = List.hd (String.split_on_char '#' v.View.members.(r))

let accept ?(reported = Some (0, [], [], "")) ?(src = "a") ?(vid = "4:a#1") ?(preds = [ "3:a#1" ]) v
    members =
  Side.accept_install ~maker:None ~me:"b#1" ~view:v ~addr:(addr_of v) ~reported ~src ~vid
    ~members:(List.map mem members) ~preds

let install_rules () =
  let v = view [ "a#1"; "b#1"; "c#1" ] 1 in
  let ok = Alcotest.(result unit string) in
  let is_error what r = Alcotest.(check bool) what true (Result.is_error r) in
  Alcotest.check ok "from the coordinator, the same members" (Ok ())
    (accept v [ "a#1"; "b#1"; "c#1" ]);
  Alcotest.check ok "with members merging in" (Ok ()) (accept v [ "a#1"; "b#1"; "c#1"; "d#1" ]);
  is_error "not reported to any flush" (accept ~reported:None v [ "a#1"; "b#1"; "c#1" ]);
  is_error "a view that follows another" (accept ~preds:[ "2:x#1" ] v [ "a#1"; "b#1"; "c#1" ]);
  is_error "a member missing that the flush kept" (accept v [ "a#1"; "b#1" ]);
  is_error "an excluded member kept"
    (accept ~reported:(Some (0, [ 2 ], [], "")) v [ "a#1"; "b#1"; "c#1" ]);
  Alcotest.check ok "the excluded member left out" (Ok ())
    (accept ~reported:(Some (0, [ 2 ], [], "")) v [ "a#1"; "b#1" ]);
  is_error "a leaver kept" (accept ~reported:(Some (0, [], [ 2 ], "")) v [ "a#1"; "b#1"; "c#1" ]);
  is_error "from a stranger" (accept ~src:"x" v [ "a#1"; "b#1"; "c#1" ]);
  is_error "from another member of the view" (accept ~src:"c" v [ "a#1"; "b#1"; "c#1" ]);
  (* A merge: the coordinator of the partition merged into makes the view. *)
  Alcotest.check ok "from the member the flush merges into" (Ok ())
    (accept
       ~reported:(Some (0, [], [], "z#1"))
       ~src:"z" ~vid:"9:z#1" ~preds:[ "8:z#1"; "3:a#1" ] v [ "z#1"; "a#1"; "b#1"; "c#1" ]);
  is_error "from a member that names itself, in a flush that merges into no one"
    (accept ~src:"z" ~vid:"9:z#1" ~preds:[ "8:z#1"; "3:a#1" ] v [ "z#1"; "a#1"; "b#1"; "c#1" ]);
  Alcotest.check ok "from the member the request was passed on to" (Ok ())
    (accept
       ~reported:(Some (0, [], [], "y#1"))
       ~src:"z" ~vid:"9:z#1" ~preds:[ "3:a#1" ] v
       [ "z#1"; "y#1"; "a#1"; "b#1"; "c#1" ]);
  is_error "in a merge, from a maker that is not in the view"
    (accept
       ~reported:(Some (0, [], [], "z#1"))
       ~src:"z" ~vid:"9:z#1" ~preds:[ "3:a#1" ] v [ "y#1"; "a#1"; "b#1"; "c#1" ]);
  is_error "a maker that is not in it and not the coordinator"
    (accept ~src:"z" ~vid:"9:z#1" ~preds:[ "3:a#1" ] v [ "a#1"; "b#1"; "c#1" ]);
  (* A leaving coordinator makes a view it is not in. *)
  Alcotest.check ok "a leaving coordinator" (Ok ())
    (accept ~reported:(Some (0, [], [ 0 ], "")) ~vid:"4:a#1" v [ "b#1"; "c#1" ]);
  Alcotest.(check string)
    "the maker of a view" "127.0.0.1:7400#ab"
    (Side.installer "12:127.0.0.1:7400#ab")

let gossip_rules () =
  let a =
    Alcotest.testable
      (fun ppf x ->
        Fmt.string ppf
          (match x with
          | Side.Merge_into -> "merge"
          | Merge_later -> "later"
          | Answer -> "answer"
          | Nothing -> "nothing"))
      ( = )
  in
  let d ?(me = "m") ?(my_coord = "m") ?(same_view = false) ?(in_my_view = false)
      ?(coordinator = true) ?(busy = false) ?(leaving = false) their =
    Side.on_gossip ~me ~my_coord ~same_view ~in_my_view ~coordinator ~busy ~leaving
      ~their_coord:their
  in
  Alcotest.check a "a lesser coordinator: merge into it" Side.Merge_into (d "a");
  Alcotest.check a "while busy: later" Side.Merge_later (d ~busy:true "a");
  Alcotest.check a "not the coordinator: later, in case it becomes it" Side.Merge_later
    (d ~coordinator:false ~my_coord:"b" "a");
  Alcotest.check a "a greater coordinator: tell it to come" Side.Answer (d "z");
  Alcotest.check a "a greater one heard by a member: tell it who coordinates" Side.Answer
    (d ~coordinator:false ~me:"n" ~my_coord:"b" "z");
  Alcotest.check a "one lesser than this member's coordinator: the coordinator will merge"
    Side.Nothing
    (d ~coordinator:false ~me:"n" ~my_coord:"q" "p");
  Alcotest.check a "leaving: no answer" Side.Nothing (d ~leaving:true "z");
  Alcotest.check a "the same view" Side.Nothing (d ~same_view:true "a");
  Alcotest.check a "a member of this view" Side.Nothing (d ~in_my_view:true "a");
  (* Whoever hears of whom first, two coordinators agree on the direction. *)
  List.iter
    (fun (x, y) ->
      let xy = d ~me:x ~my_coord:x y and yx = d ~me:y ~my_coord:y x in
      Alcotest.(check bool)
        (Printf.sprintf "%s and %s: exactly one merges into the other" x y)
        true
        ((xy = Side.Merge_into && yx = Side.Answer) || (xy = Side.Answer && yx = Side.Merge_into)))
    [ ("a", "b"); ("p1#9", "p0#3"); ("127.0.0.1:7401#a", "127.0.0.1:7400#b") ]

let side_codec () =
  let m =
    Side.Install
      {
        group = "g";
        vid = "4:a#1";
        ltime = 4;
        members = [ mem "a#1"; mem "b#1" ];
        leavers = [ "c#1" ];
        preds = [ "3:a#1"; "2:z#1" ];
        stack = { Side.epoch = 2; id = "gmp:bottom|gmp.flush_timeout=4000000000ns" };
        keys = [ ("b#1", String.make 48 'k') ];
      }
  in
  let s = Codec.encode_string Side.codec m in
  Alcotest.(check bool) "round trip" true (Codec.decode_string Side.codec s = Ok m);
  for cut = 0 to String.length s - 1 do
    Alcotest.(check bool)
      "a truncated message is an error" true
      (Result.is_error (Codec.decode_string Side.codec (String.sub s 0 cut)))
  done

(* {2 Forged side-channel messages, from a stranger's address} *)

let stranger net =
  match
    Sim.open_ net "x0" (fun _ -> { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
  with
  | Ok c -> c
  | Error e -> Alcotest.failf "open: %a" Transport.pp_error e

let forge x dst v =
  let m = Msg.of_string Pool.default (Codec.encode_string Side.codec v) in
  ignore (Sim.send x ~dst m);
  Msg.release m

let counter m name =
  Option.value ~default:0
    (Option.bind (List.assoc_opt "group" (G.counters m.g)) (List.assoc_opt name))

(* A fourth member joins while it misses the view's Install; a stranger
   acknowledges the view in its name: the coordinator must go on resending
   it (an acknowledgement counts only from the member's own address), and
   the member installs it once it hears again. *)
let forged_install_ack () =
  let net = Sim.create ~seed:5 () in
  let addrs = List.init 4 (Printf.sprintf "m%d") in
  let three = List.map (fun a -> join net a addrs) (List.filteri (fun i _ -> i < 3) addrs) in
  Sim.run ~until:(sec 3.) net;
  let d = join net "m3" addrs in
  let missed = ref None and deaf = ref true in
  ignore
    (Sim.control (G.connection d.g)
       (Sim.Drop_filter
          (Some
             (fun ~src:_ cs ->
               !deaf
               &&
               match Codec.decode_exact Side.codec cs with
               | Ok (Side.Install { vid; _ }) ->
                   missed := Some vid;
                   true
               | _ -> false))));
  let deadline = Sim.now net + sec 5. in
  while !missed = None && Sim.now net < deadline do
    Sim.run ~until:(Sim.now net + ms 5) net
  done;
  let vid = match !missed with Some v -> v | None -> Alcotest.fail "no Install was sent to m3" in
  let x = stranger net in
  let maker = Side.installer vid in
  let maker_addr =
    let rec idx i = function
      | m :: rest -> if G.me m.g = maker then Printf.sprintf "m%d" i else idx (i + 1) rest
      | [] -> Alcotest.failf "the view's maker %s is not one of the three" maker
    in
    idx 0 three
  in
  for _ = 1 to 3 do
    forge x maker_addr (Side.Install_ack { group = "api"; vid; eid = G.me d.g; dst = maker })
  done;
  Sim.run ~until:(Sim.now net + ms 300) net;
  deaf := false;
  Sim.run ~until:(Sim.now net + sec 1.5) net;
  let members m = List.sort compare (Array.to_list (G.view m.g).Group.members) in
  Alcotest.(check int) "the joiner is in a view of four" 4 (List.length (members d));
  List.iter (fun m -> Alcotest.(check (list string)) "one view" (members d) (members m)) three

(* A switch request from an address outside the view: no switch, no view
   change. *)
let forged_switch () =
  let net = Sim.create ~seed:6 () in
  let ms3 = group net in
  let a = ms3.(0) in
  let before = (G.view a.g).Group.vid and stack = G.stack_id a.g in
  let other =
    let params = Params.(empty |> set Consort_group.Mnak.Param.window (Int 77)) in
    Consort_group.Stack_id.(to_string (of_layers ~params (layers ())))
  in
  let x = stranger net in
  let coord = (G.view a.g).Group.coordinator in
  Array.iteri
    (fun i _ ->
      forge x (Printf.sprintf "m%d" i)
        (Side.Switch_req
           { group = "api"; vid = before; stack = { Side.epoch = 1; id = other }; dst = coord }))
    ms3;
  Sim.run ~until:(Sim.now net + sec 3.) net;
  Array.iter
    (fun m ->
      Alcotest.(check string) "the same view" before (G.view m.g).Group.vid;
      Alcotest.(check string) "the same stack" stack (G.stack_id m.g))
    ms3

(* Discovery messages from 3000 made-up partitions, each at an address of
   its own: a probe each at most, and the coordinator learns none of them
   (it would send its own discovery messages to each, every heal interval,
   for ever). *)
let forged_gossip_flood () =
  let net = Sim.create ~seed:8 () in
  let ms3 = group net in
  let x = stranger net in
  let v = G.view ms3.(0).g in
  let stack = Consort_group.Stack_id.(to_string (of_layers ~params:Params.empty (layers ()))) in
  let coord = ms3.(0) in
  Alcotest.(check string) "m0 coordinates" v.Group.coordinator (G.me coord.g);
  for i = 1 to 3000 do
    forge x "m0"
      (Side.Gossip
         {
           group = "api";
           vid = Printf.sprintf "1:!%d" i;
           ltime = 1;
           coord = { Side.eid = Printf.sprintf "!%d" i; addr = Printf.sprintf "y%d" i; pub = "" };
           size = 1;
           stack = { Side.epoch = 0; id = stack };
         })
  done;
  Sim.run ~until:(Sim.now net + sec 1.) net;
  let s0 = (Sim.stats net).Sim.sent in
  Sim.run ~until:(Sim.now net + sec 3.) net;
  let sent = (Sim.stats net).Sim.sent - s0 in
  Printf.printf "%d datagrams in the 3 s after 3000 forged discovery messages\n" sent;
  (* Three members idle for 3 s: heartbeats and statuses, no more. *)
  if sent > 600 then Alcotest.failf "%d datagrams in 3 s after the forgeries" sent;
  Alcotest.(check string) "the same view" v.vid (G.view coord.g).Group.vid

(* Side-channel messages for another member are dropped and counted; a
   probe is answered only by the member it names, about its own view. *)
let misdirected_side () =
  let net = Sim.create ~seed:7 () in
  let ms3 = group net in
  let answers = ref [] in
  let x =
    match
      Sim.open_ net "x0" (fun _ ->
          {
            Sim.recv =
              (fun ~src v ->
                (match Codec.decode_exact Side.codec (Iovec.cstruct v) with
                | Ok (Side.Probe_ack { eid; _ }) -> answers := (src, eid) :: !answers
                | _ -> ());
                Iovec.release v);
            closed = ignore;
          })
    with
    | Ok c -> c
    | Error e -> Alcotest.failf "open: %a" Transport.pp_error e
  in
  let v = G.view ms3.(1).g in
  let probe dst vid = Side.Probe { group = "api"; vid; nonce = "n"; eid = "x0#1"; dst } in
  forge x "m1" (probe (G.me ms3.(2).g) v.Group.vid);
  forge x "m1" (Side.Install_ack { group = "api"; vid = v.vid; eid = "x"; dst = "m9#1" });
  Sim.run ~until:(Sim.now net + ms 50) net;
  Alcotest.(check int) "misdirected, counted" 2 (counter ms3.(1) "side_misdirected");
  forge x "m1" (probe (G.me ms3.(1).g) "0:nobody");
  Sim.run ~until:(Sim.now net + ms 50) net;
  Alcotest.(check int) "a probe of another view: no answer" 0 (List.length !answers);
  forge x "m1" (probe (G.me ms3.(1).g) v.vid);
  Sim.run ~until:(Sim.now net + ms 50) net;
  Alcotest.(check (list (pair string string)))
    "a probe of its view: answered"
    [ ("m1", G.me ms3.(1).g) ]
    !answers

(* A round trip in a group of two, cast and cast back on delivery, is two
   datagrams: nothing is sent per message that the other member must take
   in before it can answer (an acknowledgement, a status, a credit).
   Timers still send what they send in an idle group of two over the same
   virtual time, and that is allowed beside the two. *)
let round_trip_datagrams () =
  let rounds = 300 in
  let net = Sim.create ~seed:11 () in
  let m = group ~n:2 net in
  let sent () = (Sim.stats net).Sim.sent in
  let count_of x = List.length !(x.casts) in
  (* Waits, one event at a time, until [x] has [n] casts. *)
  let rec await x n budget =
    if count_of x < n then
      if budget = 0 || not (Sim.step net) then Alcotest.fail "a cast was not delivered"
      else await x n (budget - 1)
  in
  let t0 = Sim.now net and s0 = sent () in
  for i = 1 to rounds do
    let c0 = count_of m.(0) and c1 = count_of m.(1) in
    Alcotest.check result "ping" (Ok ()) (G.cast m.(0).g (Printf.sprintf "p%d" i));
    await m.(1) (c1 + 1) 10_000;
    Alcotest.check result "pong" (Ok ()) (G.cast m.(1).g (Printf.sprintf "q%d" i));
    (* Own casts are delivered too: m0 has its ping and m1's pong. *)
    await m.(0) (c0 + 2) 10_000
  done;
  let busy = sent () - s0 and took = Sim.now net - t0 in
  let s1 = sent () in
  Sim.run ~until:(Sim.now net + took) net;
  let idle = sent () - s1 in
  if busy > (2 * rounds) + idle + 2 then
    Alcotest.failf "%d round trips took %d datagrams; two each and %d in an idle group" rounds busy
      idle

(* {2 Status through the group} *)

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

(* Every member's status, asked by one member through the group: the
   runtime's own answer without a handler, the application's with one; a
   member that does not answer is named with the reason. A stranger's
   requests get nothing back, in its own name or another's, and a flood of
   them in a member's name costs at most 64 answers a second. *)
let status_query () =
  let net = Sim.create ~seed:9 () in
  let ms3 = group net in
  let ids = Array.map (fun m -> G.me m.g) ms3 in
  let ask () =
    let got = ref None in
    G.query_status ms3.(0).g (fun r -> got := Some r);
    Sim.run ~until:(Sim.now net + sec 3.) net;
    match !got with
    | None -> Alcotest.fail "no answer to the query"
    | Some (Error e) -> Alcotest.failf "query: %s" e
    | Some (Ok l) -> l
  in
  let answers = ask () in
  Alcotest.(check (list string))
    "every member, in rank order"
    (Array.to_list (G.view ms3.(0).g).Group.members)
    (List.map fst answers);
  List.iter
    (fun (id, r) ->
      match r with
      | Ok s ->
          if not (contains s (Printf.sprintf {|"me":"%s"|} id)) then Alcotest.failf "%s: %s" id s
      | Error e -> Alcotest.failf "%s: %s" id e)
    answers;
  G.set_status_handler ms3.(1).g (fun () -> {|{"x":1}|});
  Alcotest.(check (option (result string string)))
    "the application's status" (Some (Ok {|{"x":1}|}))
    (List.assoc_opt ids.(1) (ask ()));
  (* A stranger asks, as an outsider and in m0's name. *)
  let heard = ref 0 in
  let x =
    match
      Sim.open_ net "x0" (fun _ ->
          {
            Sim.recv =
              (fun ~src:_ v ->
                incr heard;
                Iovec.release v);
            closed = ignore;
          })
    with
    | Ok c -> c
    | Error e -> Alcotest.failf "open: %a" Transport.pp_error e
  in
  let vid = (G.view ms3.(1).g).Group.vid in
  let req eid = Side.Status_req { group = "api"; vid; nonce = "n"; eid; dst = ids.(1) } in
  forge x "m1" (req "!outsider");
  forge x "m1" (req ids.(0));
  Sim.run ~until:(Sim.now net + ms 500) net;
  Alcotest.(check int) "nothing back to the stranger" 0 !heard;
  let garbage0 = counter ms3.(0) "side_garbage" in
  for _ = 1 to 1000 do
    forge x "m1" (req ids.(0))
  done;
  Sim.run ~until:(Sim.now net + ms 900) net;
  let answered = counter ms3.(0) "side_garbage" - garbage0 in
  if answered > 64 then Alcotest.failf "%d answers in under a second" answered;
  Alcotest.(check int) "still nothing back to the stranger" 0 !heard;
  (* m2 stops answering. *)
  Sim.pause net "m2" ~until:(Sim.now net + sec 10.);
  let answers = ask () in
  (match List.assoc_opt ids.(2) answers with
  | Some (Error e) when contains e "no answer within 2.0 s" -> ()
  | _ -> Alcotest.failf "m2 paused: %s" (String.concat "; " (List.map fst answers)));
  Alcotest.(check bool) "m1 answered" true (Result.is_ok (List.assoc ids.(1) answers))

let () =
  Alcotest.run "api"
    [
      ( "back-pressure",
        [
          Alcotest.test_case "join errors are typed and say what is wrong" `Quick join_errors;
          Alcotest.test_case "refusals: too big, not a member, leaving, exited" `Quick refusals;
          Alcotest.test_case "without Frag, one datagram" `Quick without_frag;
          Alcotest.test_case
            "a stopped receiver: the flood is refused, memory bounded, nothing lost" `Quick
            stopped_receiver;
          Alcotest.test_case "the queue of a view change is bounded" `Quick blocked_queue;
          Alcotest.test_case "cast_bytes from a buffer written again at once" `Quick
            cast_bytes_reused;
          Alcotest.test_case "a send to a member that is gone is reported lost" `Quick lost_send;
          Alcotest.test_case "a round trip in a group of two is two datagrams" `Quick
            round_trip_datagrams;
        ] );
      ( "flush",
        [
          Alcotest.test_case "layers add their part to the report, all see all" `Quick flush_parts;
          Alcotest.test_case "a member that does not answer a flush is excluded" `Quick
            flush_timeout;
        ] );
      ( "side channel",
        [
          Alcotest.test_case "which views a member installs" `Quick install_rules;
          Alcotest.test_case "what a discovery message leads to" `Quick gossip_rules;
          Alcotest.test_case "codec" `Quick side_codec;
          Alcotest.test_case "a forged Install acknowledgement" `Quick forged_install_ack;
          Alcotest.test_case "a forged switch request" `Quick forged_switch;
          Alcotest.test_case "messages for another member, probes" `Quick misdirected_side;
          Alcotest.test_case "discovery messages of made-up partitions" `Quick forged_gossip_flood;
          Alcotest.test_case "status through the group; strangers get nothing" `Quick status_query;
        ] );
    ]
