(* Client-server groups over the simulator: what a stranger or a crowd of
   clients can make the servers hold is bounded; bad input is counted and
   dropped; the servers refuse a stack without total order; a client's
   bad addresses are one-line errors. *)

open Consort
module Sim = Consort_engine.Sim
module Group = Consort_group.Group
module G = Group.Make (Sim)
module Cltsvr = Consort_group.Cltsvr
module C = Cltsvr.Make (Sim)

let layers ps = match Consort_group.Properties.layers ps with Ok l -> l | Error _ -> assert false
let total = layers Consort_group.Properties.(vsync @ [ Total; Agree ])
let params l = List.fold_left (fun p (k, v) -> Params.set k v p) Params.empty l
let run net secs = Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec secs)) net

let server_cb got =
  {
    C.Server.request = (fun ~client ~seq p -> got := (client, seq, p) :: !got);
    opened = (fun ~client:_ -> ());
    closed = (fun ~client:_ ~why:_ -> ());
    noted = (fun ~client:_ ~n:_ _ -> ());
    cast = (fun ~origin:_ _ -> ());
  }

let group_cb =
  {
    Group.view = ignore;
    cast = (fun ~origin:_ _ -> ());
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

let servers ?(layers = total) ?(params = Params.empty) net n =
  let addrs = List.init n (Printf.sprintf "s%d") in
  let got = ref [] in
  let ss =
    List.map
      (fun a ->
        let srv = C.Server.create ~params net ~group:"cs" (server_cb got) in
        match
          G.join ~params ~peers:addrs ~seed:(Hashtbl.hash a) ~layers net ~group:"cs" ~addr:a
            (C.Server.callbacks srv group_cb)
        with
        | Ok g -> (srv, g)
        | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e)
      addrs
  in
  run net 3.;
  (addrs, ss, got)

let attach_all ss =
  List.iter
    (fun (srv, g) ->
      match C.Server.attach srv g with
      | Ok () -> ()
      | Error e -> Alcotest.failf "%a" Cltsvr.pp_attach_error e)
    ss

let client ?(params = Params.empty) net ~servers addr statuses notes =
  match
    C.Client.connect ~params ~seed:(Hashtbl.hash addr) net ~group:"cs" ~addr ~servers
      {
        C.Client.note = (fun p -> notes := p :: !notes);
        lost = ignore;
        status = (fun s -> statuses := s :: !statuses);
      }
  with
  | Ok c -> c
  | Error e -> Alcotest.failf "connect %s: %s" addr e

(* Servers without Total are refused, with a line that says why. *)
let needs_total () =
  let net = Sim.create ~seed:1 () in
  let _, ss, _ = servers ~layers:(layers Consort_group.Properties.vsync) net 1 in
  match ss with
  | [ (srv, g) ] -> (
      match C.Server.attach srv g with
      | Error (Cltsvr.No_total _ as e) ->
          Alcotest.(check bool)
            "one line" false
            (String.contains (Fmt.str "%a" Cltsvr.pp_attach_error e) '\n')
      | Error e -> Alcotest.failf "refused for another reason: %a" Cltsvr.pp_attach_error e
      | Ok () -> Alcotest.fail "attached to a stack without Total")
  | _ -> assert false

(* Servers with Total but not safe delivery are refused too: a contact that
   acknowledged a request and crashed could leave it with no other server. *)
let needs_agree () =
  let net = Sim.create ~seed:1 () in
  let _, ss, _ = servers ~layers:(layers Consort_group.Properties.(vsync @ [ Total ])) net 1 in
  match ss with
  | [ (srv, g) ] -> (
      match C.Server.attach srv g with
      | Error (Cltsvr.No_agree _ as e) ->
          Alcotest.(check bool)
            "one line" false
            (String.contains (Fmt.str "%a" Cltsvr.pp_attach_error e) '\n')
      | Error e -> Alcotest.failf "refused for another reason: %a" Cltsvr.pp_attach_error e
      | Ok () -> Alcotest.fail "attached to a stack without Agree")
  | _ -> assert false

(* Property Cltsvr (which needs Total) brings Agree. *)
let cltsvr_brings_agree () =
  let names =
    List.map Consort.Layer.name (layers Consort_group.Properties.(vsync @ [ Total; Cltsvr ]))
  in
  Alcotest.(check bool) "total" true (List.mem "total" names);
  Alcotest.(check bool) "agree" true (List.mem "agree" names)

(* The servers' own casts, as a server's member makes them, checked where
   they are delivered: a request that skips a number is not delivered (nor
   the ones after it until the gap is filled), and a Forget cast when the
   session had been spoken of fewer times than it has now is ignored (the
   session was heard of since). *)
let env_checks () =
  let net = Sim.create ~seed:5 () in
  let addrs, ss, got = servers net 3 in
  attach_all ss;
  let c = client net ~servers:addrs "c0" (ref []) (ref []) in
  run net 2.;
  (match C.Client.request c "one" with Ok _ -> () | Error _ -> Alcotest.fail "request");
  run net 1.;
  let session = C.Client.session c in
  let upto () = List.map (fun (srv, _) -> C.Server.upto srv session) ss in
  Alcotest.(check (list (option int))) "request 1 everywhere" [ Some 1; Some 1; Some 1 ] (upto ());
  let _, g0 = List.hd ss in
  let cast e =
    match G.cast g0 (Codec.encode_string Cltsvr.env_codec e) with
    | Ok () -> ()
    | Error e -> Alcotest.failf "cast: %a" Group.pp_error e
  in
  cast (Cltsvr.Req { session; seq = 3; payload = "three, before two" });
  run net 1.;
  Alcotest.(check (list (option int))) "a gap: not delivered" [ Some 1; Some 1; Some 1 ] (upto ());
  Alcotest.(check int) "delivered once each" 3 (List.length !got);
  cast (Cltsvr.Forget { session; why = "silent"; mentions = Some 0 });
  run net 1.;
  List.iter
    (fun (srv, _) ->
      Alcotest.(check (list string)) "heard of since: kept" [ session ] (C.Server.clients srv))
    ss;
  Alcotest.(check bool) "the client goes on" true (Result.is_ok (C.Client.request c "two"));
  run net 1.;
  Alcotest.(check (list (option int))) "request 2 everywhere" [ Some 2; Some 2; Some 2 ] (upto ())

(* Six clients, room for four: two are refused as busy, at every server
   alike; the four work. *)
let max_clients () =
  let net = Sim.create ~seed:2 () in
  let p = params [ (Cltsvr.Param.max_clients, Params.Int 4) ] in
  let addrs, ss, got = servers ~params:p net 3 in
  attach_all ss;
  let statuses = Array.init 6 (fun _ -> ref []) in
  let cs =
    Array.init 6 (fun i ->
        client ~params:p net ~servers:addrs (Printf.sprintf "c%d" i) statuses.(i) (ref []))
  in
  run net 3.;
  let busy = Array.to_list (Array.map (fun s -> List.mem Cltsvr.Busy_refused !s) statuses) in
  Alcotest.(check int) "refused as busy" 2 (List.length (List.filter Fun.id busy));
  List.iter (fun (srv, _) -> Alcotest.(check int) "sessions held" 4 (C.Server.sessions srv)) ss;
  let held = List.map (fun (srv, _) -> C.Server.clients srv) ss in
  List.iter
    (fun h -> Alcotest.(check (list string)) "the same sessions everywhere" (List.hd held) h)
    held;
  Array.iteri
    (fun i c -> if not (List.nth busy i) then ignore (C.Client.request c (Printf.sprintf "r%d" i)))
    cs;
  run net 2.;
  Alcotest.(check int) "each admitted client's request, at each server" (4 * 3) (List.length !got)

(* A stranger sends garbage, requests for sessions that do not exist and
   hellos of a thousand made-up sessions: nothing is delivered, the
   sessions stay under the bound, the contacts too, and a real client
   still gets in once the made-up ones are forgotten. *)
let stranger () =
  let net = Sim.create ~seed:3 () in
  let p =
    params
      [
        (Cltsvr.Param.max_clients, Params.Int 16);
        (Cltsvr.Param.client_timeout, Params.Time (Time.of_sec 2.));
      ]
  in
  let addrs, ss, got = servers ~params:p net 3 in
  attach_all ss;
  let x =
    match
      Sim.open_ net "x" (fun _ -> { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
    with
    | Ok c -> c
    | Error _ -> assert false
  in
  let send s = ignore (Sim.send x ~dst:"s0" (Msg.create (Iovecs.of_string Pool.default s))) in
  let enc w = Codec.encode_string Cltsvr.wire_codec w in
  send "\xc7";
  send "\xc7\x09garbage";
  send (enc (Cltsvr.Request { group = "cs"; session = "nobody"; seq = 1; payload = "steal" }));
  send (enc (Cltsvr.Hello { group = "cs"; session = "old"; resumed = true; heard = 0 }));
  send (enc (Cltsvr.Hello { group = "other"; session = "s"; resumed = false; heard = 0 }));
  for k = 1 to 1000 do
    send
      (enc
         (Cltsvr.Hello
            { group = "cs"; session = Printf.sprintf "fake%d" k; resumed = false; heard = 0 }))
  done;
  run net 1.;
  List.iter
    (fun (srv, _) ->
      if C.Server.sessions srv > 16 then
        Alcotest.failf "%d sessions held, over 16" (C.Server.sessions srv);
      if C.Server.contacts srv > 16 then
        Alcotest.failf "%d contacts held, over 16" (C.Server.contacts srv))
    ss;
  let srv0 = fst (List.hd ss) in
  let counters = C.Server.counters srv0 in
  if List.assoc "garbage" counters < 3 then
    Alcotest.failf "garbage counted %d" (List.assoc "garbage" counters);
  if List.assoc "refused_busy" counters < 900 then
    Alcotest.fail "the flood of opens was not refused";
  Alcotest.(check int) "nothing delivered" 0 (List.length !got);
  (* The made-up sessions never speak again: forgotten. *)
  run net 6.;
  List.iter
    (fun (srv, _) -> Alcotest.(check int) "made-up sessions forgotten" 0 (C.Server.sessions srv))
    ss;
  let st = ref [] in
  let c = client ~params:p net ~servers:addrs "c" st (ref []) in
  ignore (C.Client.request c "hello");
  run net 2.;
  Alcotest.(check int) "the real client's request, at each server" 3 (List.length !got)

let bad_client_input () =
  let net = Sim.create ~seed:4 () in
  let ok = function
    | Ok _ -> true
    | Error e -> if String.contains e '\n' then Alcotest.failf "not one line: %s" e else false
  in
  let cb = { C.Client.note = ignore; lost = ignore; status = ignore } in
  Alcotest.(check bool)
    "no server" false
    (ok (C.Client.connect net ~group:"g" ~addr:"c" ~servers:[] cb));
  Alcotest.(check bool)
    "bad server address" false
    (ok (C.Client.connect net ~group:"g" ~addr:"c" ~servers:[ "" ] cb));
  Alcotest.(check bool)
    "bad own address" false
    (ok (C.Client.connect net ~group:"g" ~addr:"" ~servers:[ "s0" ] cb));
  match
    C.Client.connect
      ~params:
        (params [ (Cltsvr.Param.window, Params.Int 2); (Cltsvr.Param.max_request, Params.Int 10) ])
      net ~group:"g" ~addr:"c" ~servers:[ "s0" ] cb
  with
  | Error e -> Alcotest.failf "connect: %s" e
  | Ok c -> (
      (match C.Client.request c (String.make 11 'x') with
      | Error (Cltsvr.Too_big _) -> ()
      | _ -> Alcotest.fail "an oversize request taken");
      ignore (C.Client.request c "a");
      ignore (C.Client.request c "b");
      (match C.Client.request c "c" with
      | Error Cltsvr.Flow_control -> ()
      | _ -> Alcotest.fail "a request over the window taken");
      C.Client.close c;
      match C.Client.request c "d" with
      | Error Cltsvr.Closed -> ()
      | _ -> Alcotest.fail "a request after close taken")

let codecs () =
  let rt codec v = Codec.decode_string codec (Codec.encode_string codec v) = Ok v in
  Alcotest.(check bool)
    "wire" true
    (rt Cltsvr.wire_codec (Cltsvr.Note { session = "s"; n = 3; payload = "p" }));
  Alcotest.(check bool)
    "env" true
    (rt Cltsvr.env_codec (Cltsvr.Forget { session = "s"; why = "w"; mentions = Some 4 }));
  Alcotest.(check bool)
    "another magic refused" true
    (Result.is_error (Codec.decode_string Cltsvr.wire_codec "\xc2\x00"))

(* With Auth and per-view keys: a client holding the group's secret opens
   a session and is heard (its datagrams go under the secret, as the side
   channel's); one with another secret opens nothing. *)
module Seal = Consort_seal.Seal
module S = Seal.Make (Sim)
module GS = Group.Make (S)
module CS = Cltsvr.Make (S)

let sealed () =
  let net = Sim.create ~seed:5 () in
  let secret c =
    match Seal.secret_of_string (String.make 32 c) with Ok s -> s | Error e -> failwith e
  in
  let wrap ?(c = 'k') name =
    S.wrap ~rekey:true
      ~g:(Consort_crypto.Crypto.deterministic name)
      ~wall:(fun () -> 1_700_000_000. +. Time.to_sec (Sim.now net))
      net
      (Some (secret c, Seal.Auth))
  in
  let addrs = [ "s0"; "s1" ] in
  let got = ref [] in
  let ss =
    List.map
      (fun a ->
        let t = wrap a in
        let srv =
          CS.Server.create t ~group:"cs"
            {
              CS.Server.request = (fun ~client ~seq p -> got := (client, seq, p) :: !got);
              opened = (fun ~client:_ -> ());
              closed = (fun ~client:_ ~why:_ -> ());
              noted = (fun ~client:_ ~n:_ _ -> ());
              cast = (fun ~origin:_ _ -> ());
            }
        in
        match
          GS.join ~peers:addrs ~seed:(Hashtbl.hash a) ?rekey:(S.rekey t) ~layers:total t ~group:"cs"
            ~addr:a
            (CS.Server.callbacks srv group_cb)
        with
        | Ok g -> (srv, g)
        | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e)
      addrs
  in
  run net 3.;
  List.iter
    (fun (srv, g) ->
      match CS.Server.attach srv g with
      | Ok () -> ()
      | Error e -> Alcotest.failf "%a" Cltsvr.pp_attach_error e)
    ss;
  let connect ?c name =
    match
      CS.Client.connect ~seed:(Hashtbl.hash name) (wrap ?c name) ~group:"cs" ~addr:name
        ~servers:addrs
        { CS.Client.note = ignore; lost = ignore; status = ignore }
    with
    | Ok cl -> cl
    | Error e -> Alcotest.failf "connect: %s" e
  in
  let good = connect "good" and bad = connect ~c:'z' "bad" in
  ignore (CS.Client.request good "from the good one");
  ignore (CS.Client.request bad "from the bad one");
  run net 3.;
  Alcotest.(check (list string))
    "delivered at both servers"
    [ "from the good one"; "from the good one" ]
    (List.map (fun (_, _, p) -> p) !got);
  List.iter (fun (srv, _) -> Alcotest.(check int) "one session" 1 (CS.Server.sessions srv)) ss;
  Alcotest.(check int) "the good one acknowledged" 1 (CS.Client.acked good)

(* A server crashes and a new incarnation joins with state transfer
   (Xfer): it gets the session table before any cast of its view, and
   delivers the session's next requests in order, as the others do. *)
let rejoin () =
  let net = Sim.create ~seed:6 () in
  let xl = layers Consort_group.Properties.(vsync @ [ Total; Agree; Xfer ]) in
  let addrs = [ "s0"; "s1"; "s2" ] in
  let got = Hashtbl.create 8 in
  let start a =
    let mine = ref [] in
    Hashtbl.replace got a mine;
    let srv =
      C.Server.create net ~group:"cs"
        {
          C.Server.request = (fun ~client:_ ~seq p -> mine := (seq, p) :: !mine);
          opened = (fun ~client:_ -> ());
          closed = (fun ~client:_ ~why:_ -> ());
          noted = (fun ~client:_ ~n:_ _ -> ());
          cast = (fun ~origin:_ _ -> ());
        }
    in
    match
      G.join ~peers:addrs
        ~seed:(Hashtbl.hash (a, Sim.now net))
        ~layers:xl
        ~take_state:(fun () -> C.Server.take_state srv)
        ~install_state:(fun st -> C.Server.install_state srv st)
        net ~group:"cs" ~addr:a (C.Server.callbacks srv group_cb)
    with
    | Ok g ->
        (match C.Server.attach srv g with
        | Ok () -> ()
        | Error e -> Alcotest.failf "%a" Cltsvr.pp_attach_error e);
        (srv, g)
    | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e
  in
  let ss = List.map start addrs in
  run net 3.;
  let c = client net ~servers:[ "s0"; "s1" ] "c" (ref []) (ref []) in
  for k = 1 to 3 do
    ignore (C.Client.request c (Printf.sprintf "r%d" k))
  done;
  run net 2.;
  let srv2, g2 = List.nth ss 2 in
  G.crash g2;
  C.Server.stop srv2;
  Sim.crash net "s2";
  run net 8.;
  let srv2', _ = start "s2" in
  run net 4.;
  let srv0 = fst (List.hd ss) in
  Alcotest.(check (list string))
    "the rejoined server holds the session" (C.Server.clients srv0) (C.Server.clients srv2');
  Alcotest.(check (option int))
    "with the requests delivered so far" (Some 3)
    (C.Server.upto srv2' (C.Client.session c));
  for k = 4 to 5 do
    ignore (C.Client.request c (Printf.sprintf "r%d" k))
  done;
  run net 2.;
  Alcotest.(check (list (pair int string)))
    "s0 delivered 1 to 5"
    (List.init 5 (fun k -> (k + 1, Printf.sprintf "r%d" (k + 1))))
    (List.rev !(Hashtbl.find got "s0"));
  Alcotest.(check (list (pair int string)))
    "the new s2 delivered 4 and 5"
    [ (4, "r4"); (5, "r5") ]
    (List.rev !(Hashtbl.find got "s2"))

let () =
  Alcotest.run "cltsvr"
    [
      ( "bounds",
        [
          Alcotest.test_case "servers need Total" `Quick needs_total;
          Alcotest.test_case "servers need Agree" `Quick needs_agree;
          Alcotest.test_case "gaps and stale forgets among servers" `Quick env_checks;
          Alcotest.test_case "Cltsvr brings Agree" `Quick cltsvr_brings_agree;
          Alcotest.test_case "max clients" `Quick max_clients;
          Alcotest.test_case "a stranger's flood" `Quick stranger;
          Alcotest.test_case "bad client input" `Quick bad_client_input;
          Alcotest.test_case "codecs" `Quick codecs;
          Alcotest.test_case "sealed, with per-view keys" `Quick sealed;
          Alcotest.test_case "a server rejoins with the session table (Xfer)" `Quick rejoin;
        ] );
    ]
