(* Migration (Group.migrate): a member moves to another address and keeps
   its id, its rank and its view, while casts flow; nothing is lost. Over
   the simulator: with loss, twice in a row, and against a stranger (with
   Auth) that forges or replays a move to redirect a member's traffic.
   Over real UDP on loopback: a member rebinds to a new port. *)

open Consort
module Sim = Consort_engine.Sim
module Seal = Consort_seal.Seal
module S = Seal.Make (Sim)
module G = Consort_group.Group.Make (S)
module Group = Consort_group.Group
module Migrate = Consort_group.Migrate

let secret =
  match Seal.secret_of_string (String.make 32 'm') with Ok s -> s | Error e -> failwith e

let other_secret =
  match Seal.secret_of_string (String.make 32 'x') with Ok s -> s | Error e -> failwith e

let layers =
  match Consort_group.Properties.layers Consort_group.Properties.vsync with
  | Ok l -> l
  | Error _ -> assert false

let wall net () = 1_700_000_000. +. Time.to_sec (Sim.now net)

type member = {
  addr : string;
  t : S.t;
  g : G.t;
  got : (string * string) list ref (* origin, payload; newest first *);
  views : int ref;
}

let join ?seal net ~peers addr =
  let t =
    match seal with
    | None -> S.wrap net None
    | Some mode ->
        S.wrap ~rekey:false
          ~g:(Consort_crypto.Crypto.deterministic ("migrate-" ^ addr))
          ~wall:(wall net) net
          (Some (secret, mode))
  in
  let got = ref [] and views = ref 0 in
  let cb =
    {
      Group.view = (fun _ -> incr views);
      cast = (fun ~origin s -> got := (origin, s) :: !got);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  match G.join ~peers ~seed:(Hashtbl.hash addr) ~layers t ~group:"movers" ~addr cb with
  | Ok g -> { addr; t; g; got; views }
  | Error e -> Alcotest.failf "join %s: %a" addr Group.pp_join_error e

let run net secs = Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec secs)) net
let vid m = (G.view m.g).Group.vid

let cast m s =
  match G.cast m.g s with Ok () -> () | Error e -> Alcotest.failf "cast: %a" Group.pp_error e

let group ?seal ?(loss = 0.) seed =
  let net = Sim.create ~seed ~link:{ Sim.default_link with loss; jitter = Time.of_ms 2 } () in
  let addrs = [ "p0"; "p1"; "p2" ] in
  let ms = List.map (join ?seal net ~peers:addrs) addrs in
  run net 6.;
  let v = vid (List.hd ms) in
  List.iter
    (fun m ->
      if vid m <> v || Array.length (G.view m.g).Group.members <> 3 then
        Alcotest.failf "%s is not in a view of three" m.addr)
    ms;
  (net, ms)

let from_ m origin =
  List.rev (List.filter_map (fun (o, s) -> if o = origin then Some s else None) !(m.got))

let address_at m other = G.member_address m.g (G.me other.g)

(* A member moves twice (the second time before all have answered the
   first) while it and the others cast, on a link that loses 10%: the view
   does not change, each member delivers every cast in order, and the
   others send to its last address; the addresses it left are closed. *)
let moves_under_traffic () =
  let net, ms = group ~loss:0.10 3 in
  let p0 = List.nth ms 0 and p1 = List.nth ms 1 and p2 = List.nth ms 2 in
  let v = vid p0 and views = List.map (fun m -> !(m.views)) ms in
  let me = G.me p1.g in
  let moved = ref 0 in
  for k = 1 to 60 do
    ignore
      (Sim.at net
         (Time.add (Sim.now net) (Time.of_ms (10 * k)))
         (fun () ->
           cast p1 (Printf.sprintf "p1-%d" k);
           cast p0 (Printf.sprintf "p0-%d" k);
           if k = 20 || k = 21 then begin
             (match G.migrate p1.g (Printf.sprintf "p1.new%d" k) with
             | Ok () -> incr moved
             | Error e -> Alcotest.failf "migrate: %a" Group.pp_migrate_error e);
             if G.me p1.g <> me then Alcotest.fail "the member id changed with the move"
           end))
  done;
  run net 10.;
  Alcotest.(check int) "two moves" 2 !moved;
  Alcotest.(check string) "where p1 listens" "p1.new21" (G.address p1.g);
  List.iter
    (fun m ->
      Alcotest.(check string) (m.addr ^ ": the same view") v (vid m);
      Alcotest.(check (list string))
        (m.addr ^ ": p1's casts, in order")
        (List.init 60 (fun k -> Printf.sprintf "p1-%d" (k + 1)))
        (from_ m me);
      Alcotest.(check (list string))
        (m.addr ^ ": p0's casts, in order")
        (List.init 60 (fun k -> Printf.sprintf "p0-%d" (k + 1)))
        (from_ m (G.me p0.g)))
    ms;
  Alcotest.(check (list int)) "no view installed since" views (List.map (fun m -> !(m.views)) ms);
  Alcotest.(check (option string))
    "p0 sends to p1's last address" (Some "p1.new21") (address_at p0 p1);
  Alcotest.(check (option string))
    "p2 sends to p1's last address" (Some "p1.new21") (address_at p2 p1);
  Alcotest.(check (list string)) "every member acknowledged" [] (G.unmoved p1.g);
  List.iter
    (fun a -> if Sim.is_open net a then Alcotest.failf "p1 still listens at %s" a)
    [ "p1"; "p1.new20" ]

(* Bad input: an address that does not parse, or one in use: a one-line
   error, and the member goes on where it was. *)
let bad_addresses () =
  let net, ms = group 5 in
  let p0 = List.nth ms 0 and p1 = List.nth ms 1 in
  (match G.migrate p1.g "" with
  | Error (Group.Bad_new_address _ as e) ->
      Alcotest.(check bool)
        "one line" false
        (String.contains (Fmt.str "%a" Group.pp_migrate_error e) '\n')
  | _ -> Alcotest.fail "an empty address was taken");
  (match G.migrate p1.g "p2" with
  | Error (Group.Cannot_move _) -> ()
  | _ -> Alcotest.fail "an address in use was taken");
  Alcotest.(check string) "still at p1" "p1" (G.address p1.g);
  cast p1 "after";
  run net 2.;
  Alcotest.(check (list string)) "p0 hears p1" [ "after" ] (from_ p0 (G.me p1.g));
  Alcotest.(check (option string)) "p0 sends to p1 where it was" (Some "p1") (address_at p0 p1)

(* Every datagram that reaches [m] (as on the wire, before the seal). *)
let tap m capture =
  ignore
    (S.control (G.connection m.g)
       (S.Drop_filter
          (Some
             (fun ~src cs ->
               capture := (Sim.address_to_string src, Cstruct.to_string cs) :: !capture;
               false))))

let raw_send net ~from ~dst bytes =
  match
    Sim.open_ net from (fun _ -> { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
  with
  | Error e -> Alcotest.failf "open %s: %a" from Transport.pp_error e
  | Ok c ->
      ignore (Sim.send c ~dst (Msg.create (Iovecs.of_string Pool.default bytes)));
      c

let move_bytes ~vid ~eid ~seq ~addr =
  Codec.encode_string Migrate.codec
    (Migrate.Move { group = "movers"; vids = [ vid ]; eid; seq; addr })

(* With Auth: a stranger (another secret, or none) sends a move that would
   redirect p1's traffic to itself; then, once p1 has moved twice, replays
   p1's first genuine move from the address it named (free again). Nothing
   is redirected: the seal drops each (forged, clear, replayed), and p0
   goes on sending to p1 where it is. *)
let stranger_cannot_redirect () =
  let net, ms = group ~seal:Seal.Auth 7 in
  let p0 = List.nth ms 0 and p1 = List.nth ms 1 in
  let capture = ref [] in
  tap p0 capture;
  let victim = G.me p1.g and v = vid p0 in
  (* Forged under another secret, from the address it names. *)
  let evil =
    S.wrap
      ~g:(Consort_crypto.Crypto.deterministic "evil")
      ~wall:(wall net) ~rekey:false net
      (Some (other_secret, Seal.Auth))
  in
  (match
     S.open_ evil "evil" (fun _ -> { S.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
   with
  | Error e -> Alcotest.failf "open evil: %a" Transport.pp_error e
  | Ok c ->
      ignore
        (S.send c ~dst:"p0"
           (Msg.create
              (Iovecs.of_string Pool.default (move_bytes ~vid:v ~eid:victim ~seq:9 ~addr:"evil")))));
  (* In clear. *)
  ignore (raw_send net ~from:"evil2" ~dst:"p0" (move_bytes ~vid:v ~eid:victim ~seq:9 ~addr:"evil2"));
  run net 1.;
  Alcotest.(check (option string)) "p1 is not redirected" (Some "p1") (address_at p0 p1);
  (* p1 moves, twice; its first move is captured on its way to p0. *)
  (match G.migrate p1.g "p1.a" with
  | Ok () -> ()
  | Error e -> Alcotest.failf "migrate: %a" Group.pp_migrate_error e);
  run net 1.;
  let first = List.filter_map (fun (src, d) -> if src = "p1.a" then Some d else None) !capture in
  if first = [] then Alcotest.fail "nothing captured from p1.a";
  (match G.migrate p1.g "p1.b" with
  | Ok () -> ()
  | Error e -> Alcotest.failf "migrate: %a" Group.pp_migrate_error e);
  run net 12.;
  Alcotest.(check (option string)) "p0 sends to p1.b" (Some "p1.b") (address_at p0 p1);
  if Sim.is_open net "p1.a" then Alcotest.fail "p1 still listens at p1.a";
  let st0 = S.stats (G.connection p0.g) in
  let replay = raw_send net ~from:"p1.a" ~dst:"p0" "" in
  List.iter
    (fun d -> ignore (Sim.send replay ~dst:"p0" (Msg.create (Iovecs.of_string Pool.default d))))
    first;
  run net 1.;
  let st = S.stats (G.connection p0.g) in
  Alcotest.(check (option string)) "the replay redirects nothing" (Some "p1.b") (address_at p0 p1);
  if st.Seal.bad_tag < 1 then Alcotest.fail "the forged move was not dropped for its tag";
  if st.clear < 1 then Alcotest.fail "the move in clear was not dropped";
  if st.replayed + st.stale <= st0.Seal.replayed + st0.stale then
    Alcotest.fail "the replay was not dropped as one";
  (* And the group still works, at p1's new address. *)
  cast p0 "still";
  cast p1 "here";
  run net 2.;
  List.iter
    (fun m ->
      if not (List.mem (G.me p1.g, "here") !(m.got) && List.mem (G.me p0.g, "still") !(m.got)) then
        Alcotest.failf "%s lost a cast" m.addr)
    ms;
  Alcotest.(check string) "the same view" v (vid p0)

(* Without Auth nothing is authenticated, but a receiver still takes a
   move only from a member of its view, made in its view, from the address
   it names, and no older than the latest it took: a captured move
   replayed after a later one changes nothing. *)
let replay_in_clear () =
  let net, ms = group 9 in
  let p0 = List.nth ms 0 and p1 = List.nth ms 1 in
  let capture = ref [] in
  tap p0 capture;
  (match G.migrate p1.g "p1.a" with
  | Ok () -> ()
  | Error e -> Alcotest.failf "migrate: %a" Group.pp_migrate_error e);
  run net 1.;
  let first =
    List.filter_map
      (fun (src, d) ->
        if src = "p1.a" && d <> "" && Char.code d.[0] = Migrate.magic then Some d else None)
      !capture
  in
  if first = [] then Alcotest.fail "p1's move was not captured";
  (match G.migrate p1.g "p1.b" with
  | Ok () -> ()
  | Error e -> Alcotest.failf "migrate: %a" Group.pp_migrate_error e);
  run net 12.;
  let refused = List.assoc "move_refused" (List.assoc "group" (G.counters p0.g)) in
  let c = raw_send net ~from:"p1.a" ~dst:"p0" (List.hd first) in
  ignore c;
  (* Another view's move, and one from an address it does not name. *)
  ignore
    (raw_send net ~from:"x1" ~dst:"p0"
       (move_bytes ~vid:"9:nobody" ~eid:(G.me p1.g) ~seq:7 ~addr:"x1"));
  ignore
    (raw_send net ~from:"x2" ~dst:"p0"
       (move_bytes ~vid:(vid p0) ~eid:(G.me p1.g) ~seq:7 ~addr:"p9"));
  run net 1.;
  Alcotest.(check (option string)) "p0 still sends to p1.b" (Some "p1.b") (address_at p0 p1);
  Alcotest.(check int)
    "three moves refused" (refused + 3)
    (List.assoc "move_refused" (List.assoc "group" (G.counters p0.g)))

let moved_bytes ~mover ~seq ~eid =
  Codec.encode_string Migrate.codec (Migrate.Moved { group = "movers"; mover; seq; eid })

let migrate m dst =
  match G.migrate m.g dst with
  | Ok () -> ()
  | Error e -> Alcotest.failf "migrate to %s: %a" dst Group.pp_migrate_error e

(* Acknowledgements of a move count only from the member they name, for
   the latest move: p1 moves to p1.a and at once to p1.b, which nothing
   reaches; p0's and p2's answers to the first move come to p1.a, and a
   stranger answers the second for p0. None acknowledges the second move.
   Then nobody having acknowledged it, p1 goes back to p1.a, where every
   member reaches it. *)
let acks_checked () =
  let net, ms = group 11 in
  let p0 = List.nth ms 0 and p1 = List.nth ms 1 and p2 = List.nth ms 2 in
  List.iter
    (fun m ->
      Sim.set_link net ~src:m.addr ~dst:"p1.b" { Sim.default_link with Sim.loss = 1.0 };
      Sim.set_link net ~src:"x7" ~dst:"p1.b" Sim.default_link)
    [ p0; p2 ];
  migrate p1 "p1.a";
  migrate p1 "p1.b";
  let unmoved () = List.sort compare (G.unmoved p1.g) in
  let both = List.sort compare [ G.me p0.g; G.me p2.g ] in
  run net 0.3;
  Alcotest.(check (list string)) "the answers to the first move are not taken" both (unmoved ());
  ignore
    (raw_send net ~from:"x7" ~dst:"p1.b" (moved_bytes ~mover:(G.me p1.g) ~seq:2 ~eid:(G.me p0.g)));
  run net 0.3;
  Alcotest.(check (list string)) "nor a stranger's" both (unmoved ());
  Alcotest.(check (option string)) "p0 sends to p1.b" (Some "p1.b") (address_at p0 p1);
  run net 4.;
  Alcotest.(check string) "p1 is back at p1.a" "p1.a" (G.address p1.g);
  Alcotest.(check (list string)) "every member knows" [] (unmoved ());
  Alcotest.(check (option string)) "p0 sends to p1.a" (Some "p1.a") (address_at p0 p1);
  Alcotest.(check (option string)) "p2 sends to p1.a" (Some "p1.a") (address_at p2 p1);
  Alcotest.(check bool) "p1.b closed" false (Sim.is_open net "p1.b");
  Alcotest.(check int)
    "one move back" 1
    (List.assoc "moves_back" (List.assoc "group" (G.counters p1.g)));
  Alcotest.(check int) "the view did not change" 3 (Array.length (G.view p1.g).Group.members);
  cast p1 "after";
  run net 1.;
  Alcotest.(check (list string)) "p0 hears p1" [ "after" ] (from_ p0 (G.me p1.g))

let judge () =
  let members = [| "a"; "b"; "c" |] in
  let mv ?(vids = [ "5:a" ]) ?(eid = "b") ?(seq = 2) ?(addr = "b2") () =
    Migrate.Move { group = "g"; vids; eid; seq; addr }
  in
  let j ?(known = 1) ?(src = "b2") ?(prev = "4:a") m =
    match Migrate.judge ~me:"a" ~vid:"5:a" ~prev_vid:prev ~members ~known ~src m with
    | Migrate.Accept -> true
    | Refuse _ -> false
  in
  Alcotest.(check bool) "a good move" true (j (mv ()));
  Alcotest.(check bool) "the same move again" true (j ~known:2 (mv ()));
  Alcotest.(check bool) "said in the view before" true (j (mv ~vids:[ "4:a" ] ()));
  Alcotest.(check bool) "an older move" false (j ~known:3 (mv ()));
  Alcotest.(check bool) "another view" false (j (mv ~vids:[ "3:a" ] ()));
  Alcotest.(check bool) "not a member" false (j (mv ~eid:"z" ()));
  Alcotest.(check bool) "this member itself" false (j (mv ~eid:"a" ()));
  Alcotest.(check bool) "from elsewhere" false (j ~src:"b3" (mv ()));
  Alcotest.(check bool) "move 0" false (j ~known:0 (mv ~seq:0 ()));
  (* The codec refuses what it does not know, and round-trips. *)
  let m = mv () in
  Alcotest.(check bool)
    "round trip" true
    (Codec.decode_string Migrate.codec (Codec.encode_string Migrate.codec m) = Ok m);
  Alcotest.(check bool)
    "another magic" true
    (Result.is_error (Codec.decode_string Migrate.codec "\xc2\x00"))

(* Over kernel UDP on loopback: three members, one rebinds to a new port
   while casts flow. *)
module U = Consort_engine.Udp
module UG = Group.Make (U)
module Loop = Consort_engine.Loop

let over_udp () =
  let loop = Loop.create () in
  let n = 3 in
  let got = Array.make n [] and views = Array.make n 0 in
  let member i addr peers =
    let cb =
      {
        Group.view = (fun _ -> views.(i) <- views.(i) + 1);
        cast = (fun ~origin:_ s -> got.(i) <- s :: got.(i));
        send = (fun ~origin:_ _ -> ());
        block = ignore;
        flow = ignore;
        exit = ignore;
      }
    in
    match UG.join ~layers ~peers loop ~group:"udp-movers" ~addr cb with
    | Ok g -> g
    | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e
  in
  (* Three free ports, so that each member has the others as peers. *)
  let free () =
    let s = Unix.socket Unix.PF_INET Unix.SOCK_DGRAM 0 in
    Fun.protect
      ~finally:(fun () -> Unix.close s)
      (fun () ->
        Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
        match Unix.getsockname s with
        | Unix.ADDR_INET (_, p) -> Printf.sprintf "127.0.0.1:%d" p
        | _ -> assert false)
  in
  let addrs = List.init n (fun _ -> free ()) in
  let gs = Array.of_list (List.mapi (fun i a -> member i a (List.filter (( <> ) a) addrs)) addrs) in
  let g0 = gs.(0) and g1 = gs.(1) and g2 = gs.(2) in
  let wait what secs cond =
    let t0 = Unix.gettimeofday () in
    Loop.run ~until:cond ~timeout:(Time.of_sec secs) loop;
    if not (cond ()) then Alcotest.failf "over UDP: no %s within %.0f s" what secs;
    Printf.printf "%s: %.2f s\n%!" what (Unix.gettimeofday () -. t0)
  in
  wait "view of three" 20. (fun () ->
      Array.for_all (fun g -> Array.length (UG.view g).Group.members = n) gs
      && Array.for_all (fun g -> (UG.view g).Group.vid = (UG.view g0).Group.vid) gs);
  let v = (UG.view g0).Group.vid and old = UG.address g1 and views0 = Array.copy views in
  for k = 1 to 50 do
    ignore (UG.cast g1 (Printf.sprintf "b%d" k));
    ignore (UG.cast g0 (Printf.sprintf "a%d" k))
  done;
  (match UG.migrate g1 "127.0.0.1:0" with
  | Ok () -> ()
  | Error e -> Alcotest.failf "migrate: %a" Group.pp_migrate_error e);
  let now = UG.address g1 in
  if now = old then Alcotest.fail "the port did not change";
  for k = 51 to 100 do
    ignore (UG.cast g1 (Printf.sprintf "b%d" k));
    ignore (UG.cast g0 (Printf.sprintf "a%d" k))
  done;
  wait "200 deliveries at each, and the move acknowledged" 20. (fun () ->
      Array.for_all (fun l -> List.length l = 200) got && UG.unmoved g1 = []);
  let from p l = List.filter (fun s -> s.[0] = p) (List.rev l) in
  Array.iteri
    (fun i l ->
      Alcotest.(check (list string))
        (Printf.sprintf "member %d: the mover's casts in order" i)
        (List.init 100 (fun k -> Printf.sprintf "b%d" (k + 1)))
        (from 'b' l);
      Alcotest.(check (list string))
        (Printf.sprintf "member %d: the others' casts in order" i)
        (List.init 100 (fun k -> Printf.sprintf "a%d" (k + 1)))
        (from 'a' l))
    got;
  Array.iter (fun g -> Alcotest.(check string) "the same view" v (UG.view g).Group.vid) gs;
  Alcotest.(check (array int)) "no view installed" views0 views;
  Alcotest.(check (option string))
    "member 0 sends to the new port" (Some now)
    (UG.member_address g0 (UG.me g1));
  Alcotest.(check (option string))
    "member 2 sends to the new port" (Some now)
    (UG.member_address g2 (UG.me g1));
  (* The old port is closed: it can be bound again. *)
  let s = Unix.socket Unix.PF_INET Unix.SOCK_DGRAM 0 in
  let port =
    match String.rindex_opt old ':' with
    | Some i -> int_of_string (String.sub old (i + 1) (String.length old - i - 1))
    | None -> 0
  in
  Fun.protect
    ~finally:(fun () -> Unix.close s)
    (fun () ->
      try Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, port))
      with Unix.Unix_error (e, _, _) ->
        Alcotest.failf "the old port %d is still bound: %s" port (Unix.error_message e));
  Array.iter UG.crash gs

(* A view made with a member's old address: the coordinator does not hear
   the member's move (its Move messages are dropped there) when a fourth
   member joins, so the view names the mover where it was. The mover must
   tell every member of that view where it is, the newcomer included (it
   never heard of the move): the newcomer sends to the new address, and
   once the coordinator hears the move and the old address closes, the
   mover stays in the view. *)
let stale_view_told () =
  let net, ms = group 13 in
  let coord_id = (G.view (List.hd ms).g).Group.coordinator in
  let coord = List.find (fun m -> G.me m.g = coord_id) ms in
  let mover = List.find (fun m -> G.me m.g <> coord_id) ms in
  let deaf = ref true in
  ignore
    (S.control (G.connection coord.g)
       (S.Drop_filter
          (Some
             (fun ~src:_ cs ->
               !deaf
               &&
               match Codec.decode_exact Migrate.codec cs with
               | Ok (Migrate.Move _) -> true
               | _ -> false))));
  let dst = mover.addr ^ ".new" in
  migrate mover dst;
  run net 0.5;
  Alcotest.(check (option string))
    "the coordinator has not heard of the move" (Some mover.addr) (address_at coord mover);
  let p3 = join net ~peers:[ "p0"; "p1"; "p2" ] "p3" in
  run net 4.;
  let four = List.sort compare (List.map (fun m -> G.me m.g) (p3 :: ms)) in
  let members m = List.sort compare (Array.to_list (G.view m.g).Group.members) in
  Alcotest.(check (list string)) "p3 joined" four (members p3);
  Alcotest.(check (option string)) "the newcomer was told" (Some dst) (address_at p3 mover);
  deaf := false;
  run net 15.;
  List.iter
    (fun m ->
      Alcotest.(check (list string)) (m.addr ^ ": the mover is still in the view") four (members m);
      Alcotest.(check (option string))
        (m.addr ^ ": sends to the new address")
        (Some dst) (address_at m mover))
    (p3 :: List.filter (fun m -> m != mover) ms);
  if Sim.is_open net mover.addr then Alcotest.failf "the mover still listens at %s" mover.addr

let () =
  Alcotest.run "migrate"
    [
      ( "sim",
        [
          Alcotest.test_case "moves under traffic and loss" `Quick moves_under_traffic;
          Alcotest.test_case "bad addresses" `Quick bad_addresses;
          Alcotest.test_case "a stranger cannot redirect (Auth)" `Quick stranger_cannot_redirect;
          Alcotest.test_case "replays and forgeries in clear" `Quick replay_in_clear;
          Alcotest.test_case "judge" `Quick judge;
          Alcotest.test_case "acknowledgements checked, and a move back" `Quick acks_checked;
          Alcotest.test_case "a view made with the old address is told" `Quick stale_view_told;
        ] );
      ("udp", [ Alcotest.test_case "rebind to a new port on loopback" `Quick over_udp ]);
    ]
