(* The same RPC over kernel UDP on loopback, with the blocking calls and
   the standard operations. *)
open Consort_cap
open Consort_crypto
module Udp = Consort_engine.Udp
module Loop = Consort_engine.Loop
module R = Rpc_udp

let ok = function Ok x -> x | Error e -> Alcotest.failf "unexpected error: %s" e

let objects secret destroyed =
  {
    Std.secret = (fun obj -> if obj = 1 && not !destroyed then Some secret else None);
    info = (fun obj -> Printf.sprintf "object %d" obj);
    destroy =
      (fun _ ->
        destroyed := true;
        `Ok);
    touch = ignore;
    age = ignore;
    status = (fun () -> "fine");
  }

let loopback () =
  let loop = Loop.create () in
  let g = Crypto.deterministic "udp" in
  let key = Port.Key.generate ~g () in
  let server = ok (R.open_node ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  let addr = Udp.address_to_string (Udp.local (R.connection server)) in
  let srv = R.serve server key in
  let secret = Cap.Secret.generate ~g () in
  let destroyed = ref false in
  R.serve_std srv (objects secret destroyed) (fun r ->
      R.putrep r (Header.reply `Ok) (String.uppercase_ascii (R.data r)));
  let client = ok (R.open_node ~g ~multicast:None ~locate:addr ~bind:"127.0.0.1:0" loop) in
  let owner = Cap.owner (Port.Key.port key) ~obj:1 secret in
  (match R.Sync.trans client (Header.request owner 1) "hello" with
  | Ok (_, "HELLO") -> ()
  | Ok (_, d) -> Alcotest.failf "got %S" d
  | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e);
  let big = String.init 2_000_000 (fun i -> Char.chr (i land 0xff)) in
  let sent = ref [] and received = ref [] in
  let progress dir d total =
    match dir with
    | `Sent -> sent := (d, total) :: !sent
    | `Received -> received := (d, total) :: !received
  in
  (match R.Sync.trans client ~progress (Header.request owner 1) big with
  | Ok (_, d) -> Alcotest.(check bool) "2 MB echoed" true (d = String.uppercase_ascii big)
  | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e);
  let check_progress what l =
    let l = List.rev l in
    Alcotest.(check bool) (what ^ ": reported") true (List.length l > 2);
    Alcotest.(check (pair int int))
      (what ^ ": ends at the total")
      (String.length big, String.length big)
      (List.hd (List.rev l));
    ignore
      (List.fold_left
         (fun prev (d, _) ->
           if d < prev then Alcotest.failf "%s went back" what;
           d)
         0 l)
  in
  check_progress "sent" !sent;
  check_progress "received" !received;
  (match R.Sync.std_info client owner with Ok "object 1" -> () | _ -> Alcotest.fail "std_info");
  (match R.Sync.std_status client owner with Ok "fine" -> () | _ -> Alcotest.fail "std_status");
  let reader =
    ok
      (Result.map_error (Fmt.str "%a" Rpc.pp_call_error)
         (R.Sync.std_restrict client owner Rights.read))
  in
  (* Narrowing a restricted capability needs the server. *)
  let none =
    ok
      (Result.map_error (Fmt.str "%a" Rpc.pp_call_error)
         (R.Sync.std_restrict client reader Rights.none))
  in
  Alcotest.(check string) "narrowed by the server" "none" (Rights.to_string none.Cap.rights);
  (match R.Sync.std_destroy client reader with
  | Error (`Status `Denied) -> ()
  | _ -> Alcotest.fail "destroy with a read-only capability");
  let forged =
    ok (Cap.v ~port:owner.Cap.port ~obj:1 ~rights:Rights.all ~check:(String.make 16 'x'))
  in
  (match R.Sync.std_destroy client forged with
  | Error (`Status `Capbad) -> ()
  | _ -> Alcotest.fail "destroy with a forged capability");
  (match R.Sync.std_age client reader with
  | Error (`Status `Denied) -> ()
  | _ -> Alcotest.fail "age without admin");
  (match R.Sync.std_destroy client owner with Ok () -> () | _ -> Alcotest.fail "destroy");
  (match R.Sync.std_info client owner with
  | Error (`Status `Notfound) -> ()
  | _ -> Alcotest.fail "destroyed object");
  R.close client;
  R.close server

(* Fragment sizes: on loopback a transfer travels in [loopback_fragment]
   fragments (a 1 MB request in ~17 datagrams, not 123); with it off, in
   [fragment] ones. And a client that expects larger fragments than its
   server sends still says [Done], so the server does not send the reply
   again. *)
let pair ~client_config ~server_config =
  let loop = Loop.create () in
  let g = Crypto.deterministic "flow" in
  let key = Port.Key.generate ~g () in
  let server = ok (R.open_node ~config:server_config ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  let addr = Udp.address_to_string (Udp.local (R.connection server)) in
  let srv = R.serve server key in
  R.listen srv (fun r ->
      let n = try int_of_string (R.data r) with _ -> 0 in
      R.putrep r (Header.reply `Ok) (if n > 0 then String.make n 'r' else R.data r));
  let client =
    ok (R.open_node ~config:client_config ~g ~multicast:None ~locate:addr ~bind:"127.0.0.1:0" loop)
  in
  let cap = Cap.owner (Port.Key.port key) ~obj:1 (Cap.Secret.generate ~g ()) in
  let call d =
    match R.Sync.trans client (Header.request cap 1) d with
    | Ok (_, r) -> r
    | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e
  in
  ignore (call "");
  let received c = (Udp.query (R.connection c)).Udp.received in
  (loop, server, client, call, received)

let flow () =
  let count config =
    let _, server, client, call, received = pair ~client_config:config ~server_config:config in
    let before = received server in
    let big = String.make 1_000_000 'x' in
    Alcotest.(check bool) "1 MB echoed" true (call big = big);
    let n = received server - before in
    R.close client;
    R.close server;
    n
  in
  let d = Rpc.default_config in
  let n = count d in
  if n > 40 then Alcotest.failf "1 MB on loopback took %d datagrams to the server" n;
  let n8 = count { d with Rpc.loopback_fragment = 0 } in
  if n8 < 123 then Alcotest.failf "1 MB in 8 KB fragments took only %d datagrams" n8;
  (* The server cuts its reply in 8 KB fragments; the client expects 60 KB ones. *)
  let loop, server, client, call, received =
    pair ~client_config:d ~server_config:{ d with Rpc.loopback_fragment = 0 }
  in
  Alcotest.(check int) "50 KB reply" 50_000 (String.length (call "50000"));
  let after = received client in
  Loop.run loop ~timeout:(Consort.Time.of_ms 300) ~until:(fun () -> false);
  Alcotest.(check int) "the reply is not sent again" after (received client);
  R.close client;
  R.close server

(* The secure wire over kernel UDP: every datagram of a 1 MB request and
   its 1 MB reply, taken at both sockets as they arrive, holds neither the
   capability nor any piece of the payload in clear. *)
let capture_udp () =
  let loop = Loop.create () in
  let g = Crypto.deterministic "capture-udp" in
  let key = Port.Key.generate ~g () in
  let server = ok (R.open_node ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  let addr = Udp.address_to_string (Udp.local (R.connection server)) in
  let srv = R.serve server key in
  R.listen srv (fun r -> R.putrep r (Header.reply `Ok) (String.uppercase_ascii (R.data r)));
  let client = ok (R.open_node ~g ~multicast:None ~locate:addr ~bind:"127.0.0.1:0" loop) in
  let seen = Buffer.create (4 * 1024 * 1024) in
  let tap n =
    match
      Udp.control (R.connection n)
        (Udp.Drop_filter
           (Some
              (fun ~src:_ cs ->
                Buffer.add_string seen (Cstruct.to_string cs);
                Buffer.add_char seen '|';
                false)))
    with
    | Ok () -> ()
    | Error _ -> Alcotest.fail "no filter"
  in
  tap client;
  tap server;
  let c = Cap.owner (Port.Key.port key) ~obj:7 (Cap.Secret.generate ~g ()) in
  let payload = String.concat "" (List.init 90_000 (fun i -> Printf.sprintf "pay%05dload" i)) in
  (match R.Sync.trans client (Header.request c 1) payload with
  | Ok (_, d) -> Alcotest.(check bool) "1 MB echoed" true (d = String.uppercase_ascii payload)
  | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e);
  let all = Buffer.contents seen in
  Alcotest.(check bool)
    "the transfer was captured" true
    (String.length all > 2 * String.length payload);
  let contains sub =
    let n = String.length sub and m = String.length all in
    let rec go i = i + n <= m && (String.sub all i n = sub || go (i + 1)) in
    go 0
  in
  List.iter
    (fun (what, sub) -> if contains sub then Alcotest.failf "%s found in clear on the wire" what)
    [
      ("capability (binary)", Cap.to_raw c);
      ("capability check", c.Cap.check);
      ("capability (text)", Cap.to_string c);
      ("the start of the payload", String.sub payload 0 12);
      ("the middle of the payload", String.sub payload 500_004 12);
      ("the end of the payload", String.sub payload (String.length payload - 12) 12);
      ("the reply", String.sub (String.uppercase_ascii payload) 300_000 12);
    ];
  R.close client;
  R.close server

(* Loss on the loopback flow (60 KB fragments, 16 in flight): every 7th
   datagram into the server and every 5th into the client dropped, acks
   and fragments alike; a 2 MB request and its 2 MB reply still arrive
   whole, each carried out once. *)
let lossy_loopback () =
  let loop = Loop.create () in
  let g = Crypto.deterministic "lossy-udp" in
  let key = Port.Key.generate ~g () in
  let server = ok (R.open_node ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  let addr = Udp.address_to_string (Udp.local (R.connection server)) in
  let srv = R.serve server key in
  let executed = ref 0 in
  R.listen srv (fun r ->
      incr executed;
      R.putrep r (Header.reply `Ok) (String.uppercase_ascii (R.data r)));
  let client = ok (R.open_node ~g ~multicast:None ~locate:addr ~bind:"127.0.0.1:0" loop) in
  let c = Cap.owner (Port.Key.port key) ~obj:1 (Cap.Secret.generate ~g ()) in
  ignore (R.Sync.trans client (Header.request c 1) "warm up");
  let drop every n =
    let k = ref 0 in
    match
      Udp.control (R.connection n)
        (Udp.Drop_filter
           (Some
              (fun ~src:_ _ ->
                incr k;
                !k mod every = 0)))
    with
    | Ok () -> k
    | Error _ -> Alcotest.fail "no filter"
  in
  let into_server = drop 7 server and into_client = drop 5 client in
  let big = String.init 2_000_000 (fun i -> Char.chr (i * 13 land 0xff)) in
  (match R.Sync.trans client (Header.request c 1) big with
  | Ok (_, d) -> Alcotest.(check bool) "2 MB echoed whole" true (d = String.uppercase_ascii big)
  | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e);
  Alcotest.(check int) "carried out once (and the warm-up)" 2 !executed;
  Alcotest.(check bool)
    "datagrams were dropped both ways" true
    (!into_server >= 7 && !into_client >= 5);
  R.close client;
  R.close server

let tests =
  [
    Alcotest.test_case "loss on the loopback flow" `Quick lossy_loopback;
    Alcotest.test_case "capture on kernel UDP: nothing in clear" `Quick capture_udp;
    Alcotest.test_case "loopback UDP, blocking calls, standard operations" `Quick loopback;
    Alcotest.test_case "fragment sizes on loopback" `Quick flow;
  ]
