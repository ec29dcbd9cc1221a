(* The two-endpoint testbed: a client node and a server node in the
   simulator, stepped. *)
open Consort
open Consort_cap
open Consort_crypto
module Sim = Consort_engine.Sim
module R = Rpc.Make (Sim)

let ok = function Ok x -> x | Error e -> Alcotest.failf "unexpected error: %s" e
let cfg = { Rpc.default_config with fragment = 1024; window = 8 }

type bed = {
  net : Sim.t;
  key : Port.Key.t;
  mutable server : R.node;
  mutable srv : R.server;
  client : R.node;
  executed : (string, int) Hashtbl.t; (* request data -> times carried out *)
  mutable delay : Time.t; (* how long the server works on a request *)
  g : Mirage_crypto_rng.g;
}

let echo_server b =
  R.listen b.srv (fun r ->
      let d = R.data r in
      Hashtbl.replace b.executed d (1 + Option.value ~default:0 (Hashtbl.find_opt b.executed d));
      let answer () =
        if not (R.is_closed b.server) then
          R.putrep r (Header.reply ~size:(String.length d) `Ok) (String.uppercase_ascii d)
      in
      if b.delay = 0 then answer ()
      else ignore (Sim.at b.net (Time.add (Sim.now b.net) b.delay) answer))

let start_server b =
  b.server <- ok (R.create ~config:cfg ~g:b.g b.net "s");
  b.srv <- R.serve b.server b.key;
  echo_server b

let bed ?(seed = 1) ?(link = Sim.default_link) ?(config = cfg) () =
  let net = Sim.create ~seed ~link () in
  let g = Crypto.deterministic (string_of_int seed) in
  let key = Port.Key.generate ~g () in
  let server = ok (R.create ~config ~g net "s") in
  let srv = R.serve server key in
  let client = ok (R.create ~config ~g ~locate:[ "s" ] net "c") in
  let b = { net; key; server; srv; client; executed = Hashtbl.create 8; delay = 0; g } in
  echo_server b;
  b

let secret = Cap.Secret.generate ~g:(Crypto.deterministic "secret") ()
let cap b = Cap.owner (Port.Key.port b.key) ~obj:1 secret

let call ?idempotent b data =
  let res = ref None in
  R.trans b.client ?idempotent
    (Header.request (cap b) 1)
    data
    (fun r ->
      if !res <> None then Alcotest.fail "reply callback called twice";
      res := Some r);
  (res, fun () -> Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_sec 60.)) b.net)

let run_call ?idempotent b data =
  let res, run = call ?idempotent b data in
  run ();
  match !res with Some r -> r | None -> Alcotest.fail "no reply and no error"

let expect_ok b data =
  match run_call b data with
  | Ok (h, d) ->
      Alcotest.(check string) "reply data" (String.uppercase_ascii data) d;
      Alcotest.(check int) "reply size" (String.length data) h.Header.size
  | Error e -> Alcotest.failf "trans failed: %a" Rpc_error.pp e

let times b d = Option.value ~default:0 (Hashtbl.find_opt b.executed d)

let null_and_small () =
  let b = bed () in
  expect_ok b "";
  expect_ok b "hello";
  expect_ok b "again";
  Alcotest.(check int) "executed once" 1 (times b "hello");
  let s = R.stats b.server in
  Alcotest.(check int) "one session" 1 s.Rpc.sessions

let payload n seed = String.init n (fun i -> Char.chr (97 + (((i * 7) + seed) mod 26)))

let large () =
  let b = bed () in
  let d = payload 300_000 1 in
  expect_ok b d;
  Alcotest.(check int) "executed once" 1 (times b d);
  Alcotest.(check int) "nothing held after Done" 0 (R.stats b.server).Rpc.buffered

let lossy_link =
  {
    Sim.default_link with
    loss = 0.2;
    duplicate = 0.2;
    reorder = 0.2;
    reorder_delay = Time.of_ms 5;
    jitter = Time.of_ms 1;
  }

let lossy () =
  for seed = 1 to 20 do
    let b = bed ~seed ~link:lossy_link () in
    for i = 1 to 5 do
      let d = payload (if i mod 2 = 0 then 20_000 else 10) ((seed * 10) + i) in
      (match run_call b d with
      | Ok (_, r) -> Alcotest.(check string) "data" (String.uppercase_ascii d) r
      | Error (`Failure _) -> ()
      | Error e -> Alcotest.failf "seed %d: %a" seed Rpc_error.pp e);
      if times b d > 1 then Alcotest.failf "seed %d: executed %d times" seed (times b d)
    done
  done

let duplicates () =
  let link =
    { Sim.default_link with duplicate = 0.9; reorder = 0.5; reorder_delay = Time.of_ms 20 }
  in
  let b = bed ~link () in
  for i = 1 to 20 do
    let d = "req" ^ string_of_int i in
    expect_ok b d;
    Alcotest.(check int) "once" 1 (times b d)
  done;
  Alcotest.(check bool) "duplicates seen" true ((R.stats b.server).Rpc.duplicates > 0)

(* The server restarts while working on a request: a request that is not
   idempotent must end with RPC_FAILURE, never be carried out twice. *)
let restart_mid_request () =
  let b = bed () in
  expect_ok b "warm";
  b.delay <- Time.of_ms 200;
  let res, _ = call b "transfer 100" in
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_ms 50)) b.net;
  Alcotest.(check int) "arrived" 1 (times b "transfer 100");
  Sim.crash b.net "s";
  start_server b;
  b.delay <- 0;
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_sec 30.)) b.net;
  (match !res with
  | Some (Error (`Failure _)) -> ()
  | Some (Ok _) -> Alcotest.fail "reported success for a request whose reply was lost"
  | Some (Error e) -> Alcotest.failf "wrong error: %a" Rpc_error.pp e
  | None -> Alcotest.fail "no outcome");
  Alcotest.(check int) "carried out once" 1 (times b "transfer 100");
  (* The next call works on a new session. *)
  expect_ok b "after";
  (* An idempotent request is sent again on the new session. *)
  b.delay <- Time.of_ms 200;
  let res, _ = call ~idempotent:true b "read 5" in
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_ms 50)) b.net;
  Sim.crash b.net "s";
  start_server b;
  b.delay <- 0;
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_sec 30.)) b.net;
  (match !res with
  | Some (Ok (_, "READ 5")) -> ()
  | _ -> Alcotest.fail "idempotent request not retried");
  Alcotest.(check int) "idempotent: carried out twice" 2 (times b "read 5")

(* A request much longer than the silence limit: the client's probes keep
   it alive. *)
let long_request () =
  let config = { cfg with silence = Time.of_sec 2.; alive = Time.of_ms 300 } in
  let b = bed ~config () in
  b.delay <- Time.of_sec 10.;
  expect_ok b "slow";
  Alcotest.(check int) "once" 1 (times b "slow")

(* The server dies for good: the client says the outcome is unknown. *)
let server_gone () =
  let config = { cfg with silence = Time.of_sec 2. } in
  let b = bed ~config () in
  expect_ok b "first";
  b.delay <- Time.of_sec 100.;
  let res, run = call b "never" in
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_ms 50)) b.net;
  Sim.crash b.net "s";
  run ();
  match !res with
  | Some (Error (`Failure _ as e)) ->
      Alcotest.(check bool) "outcome unknown" true (Rpc_error.outcome e = `Unknown)
  | _ -> Alcotest.fail "expected RPC_FAILURE"

let not_found () =
  let b = bed () in
  let other = Port.Key.port (Port.Key.generate ~g:b.g ()) in
  let res = ref None in
  R.trans b.client (Header.request (Cap.owner other ~obj:1 secret) 1) "x" (fun r -> res := Some r);
  Sim.run b.net;
  match !res with Some (Error `Notfound) -> () | _ -> Alcotest.fail "expected RPC_NOTFOUND"

let busy () =
  let config = { cfg with max_queued = 1 } in
  let b = bed ~config () in
  R.stop b.srv;
  b.srv <- R.serve b.server b.key;
  (* Nobody calls getreq: the first request waits, the second is refused. *)
  let r1, _ = call b "one" in
  let r2, _ = call b "two" in
  ignore r1;
  Sim.run ~until:(Time.of_sec 1.) b.net;
  (match !r2 with
  | Some (Error `Tryagain) | None -> ()
  | Some _ -> Alcotest.fail "expected TRYAGAIN or waiting");
  ()

(* The port moves: the old node stops serving it, a new node with the same
   key serves it elsewhere. *)
let moved () =
  let b = bed () in
  expect_ok b "before";
  R.stop b.srv;
  let n2 = ok (R.create ~config:cfg ~g:b.g b.net "s2") in
  let s2 = R.serve n2 b.key in
  R.listen s2 (fun r -> R.putrep r (Header.reply `Ok) ("moved:" ^ R.data r));
  let net = b.net in
  (* The client learns of s2 only by locating: add it to the locate list. *)
  let client2 = ok (R.create ~config:cfg ~g:b.g ~locate:[ "s"; "s2" ] net "c2") in
  let res = ref None in
  R.trans client2 (Header.request (cap b) 1) "x" (fun r -> res := Some r);
  Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec 10.)) net;
  match !res with
  | Some (Ok (_, "moved:x")) -> ()
  | _ -> Alcotest.fail "not served by the new place"

(* A rogue process answers locates and handshakes for a port whose key it
   does not hold. *)
let rogue () =
  let net = Sim.create ~seed:3 () in
  let g = Crypto.deterministic "rogue" in
  let key = Port.Key.generate ~g () in
  let port = Port.Key.port key in
  let rogue_key = Port.Key.generate ~g () in
  let pool = Pool.default in
  let answered = ref 0 in
  let rc = ref None in
  let handler c =
    rc := Some c;
    {
      Sim.recv =
        (fun ~src iov ->
          let s = Iovec.to_string iov in
          Iovec.release iov;
          let reply o =
            let m = Msg.of_string pool (Codec.encode_string Wire.outer o) in
            ignore (Sim.send c ~dst:src m);
            Msg.release m
          in
          match Codec.decode_string Wire.outer s with
          | Ok (Wire.Locate { port; nonce }) ->
              incr answered;
              (* Its own key, its own signature: the digest is not the port. *)
              reply
                (Wire.Hereis
                   {
                     port;
                     nonce;
                     public = Port.Key.public rogue_key;
                     signature = Secure.locate_signature rogue_key ~nonce;
                   })
          | Ok (Wire.Hello { port = _; eph; nonce }) -> (
              incr answered;
              match Secure.server_accept ~g rogue_key ~session:"12345678" ~eph ~nonce with
              | Ok (_, ack) -> reply ack
              | Error _ -> ())
          | _ -> ());
      closed = ignore;
    }
  in
  ignore (ok (Result.map_error (Fmt.str "%a" Transport.pp_error) (Sim.open_ net "rogue" handler)));
  let client = ok (R.create ~config:cfg ~g ~locate:[ "rogue" ] net "c") in
  let res = ref None in
  R.trans client
    (Header.request (Cap.owner port ~obj:1 secret) 1)
    "secret data"
    (fun r -> res := Some r);
  Sim.run net;
  (match !res with Some (Error `Notfound) -> () | _ -> Alcotest.fail "rogue locate accepted");
  Alcotest.(check bool) "rogue answers counted" true ((R.stats client).Rpc.rogue_answers > 0);
  Alcotest.(check bool) "rogue was asked" true (!answered > 0);
  (* Now the real server is also asked: the client reaches it. *)
  let server = ok (R.create ~config:cfg ~g net "s") in
  R.listen (R.serve server key) (fun r -> R.putrep r (Header.reply `Ok) "real");
  let client2 = ok (R.create ~config:cfg ~g ~locate:[ "rogue"; "s" ] net "c2") in
  let res = ref None in
  R.trans client2 (Header.request (Cap.owner port ~obj:1 secret) 1) "x" (fun r -> res := Some r);
  Sim.run net;
  (match !res with Some (Ok (_, "real")) -> () | _ -> Alcotest.fail "real server not reached");
  (* A rogue that relays the real server's locate answer still cannot
     complete the handshake: the client says RPC_UNSAFE. *)
  ()

let bounds () =
  let config = { cfg with max_sessions = 4 } in
  let b = bed ~config () in
  for i = 1 to 10 do
    let c = ok (R.create ~config ~g:b.g ~locate:[ "s" ] b.net ("c" ^ string_of_int i)) in
    R.trans c (Header.request (cap b) 1) "x" ignore;
    Sim.run b.net
  done;
  Alcotest.(check bool) "sessions bounded" true ((R.stats b.server).Rpc.sessions <= 4)

let tests =
  [
    Alcotest.test_case "null and small" `Quick null_and_small;
    Alcotest.test_case "large messages" `Quick large;
    Alcotest.test_case "loss, duplication, reordering" `Quick lossy;
    Alcotest.test_case "duplicates carried out once" `Quick duplicates;
    Alcotest.test_case "server restart mid-request" `Quick restart_mid_request;
    Alcotest.test_case "long request kept alive" `Quick long_request;
    Alcotest.test_case "server gone: outcome unknown" `Quick server_gone;
    Alcotest.test_case "no server: NOTFOUND" `Quick not_found;
    Alcotest.test_case "busy: TRYAGAIN" `Quick busy;
    Alcotest.test_case "port moved" `Quick moved;
    Alcotest.test_case "rogue locate refused" `Quick rogue;
    Alcotest.test_case "sessions bounded" `Quick bounds;
  ]

(* The secure wire: capture every datagram of an exchange at both ends and
   look for the capability and the payload. *)
let contains ~sub s =
  let n = String.length sub and m = String.length s in
  let rec go i = i + n <= m && (String.sub s i n = sub || go (i + 1)) in
  n > 0 && go 0

let capture () =
  let b = bed () in
  let seen = ref [] in
  let tap node =
    match
      Sim.control (R.connection node)
        (Sim.Drop_filter
           (Some
              (fun ~src:_ cs ->
                seen := Cstruct.to_string cs :: !seen;
                false)))
    with
    | Ok () -> ()
    | Error _ -> Alcotest.fail "no filter"
  in
  tap b.client;
  tap b.server;
  let payload = "the payload: attack at dawn, account 4242-1337" in
  let c = cap b in
  let res = ref None in
  R.trans b.client (Header.request c 1) payload (fun r -> res := Some r);
  Sim.run b.net;
  (match !res with
  | Some (Ok (_, d)) -> Alcotest.(check string) "reply" (String.uppercase_ascii payload) d
  | _ -> Alcotest.fail "no reply");
  Alcotest.(check bool) "datagrams captured" true (List.length !seen >= 4);
  let all = String.concat "" !seen in
  List.iter
    (fun (what, sub) ->
      if contains ~sub all then Alcotest.failf "%s found in clear on the wire" what)
    [
      ("capability (binary)", Cap.to_raw c);
      ("capability check", c.Cap.check);
      ("capability (text)", Cap.to_string c);
      ("payload", payload);
      ("payload fragment", String.sub payload 0 12);
      ("reply", String.uppercase_ascii payload);
    ];
  (* The port itself is public and does travel (locate, handshake). *)
  Alcotest.(check bool) "port visible" true (contains ~sub:(Port.to_raw (Port.Key.port b.key)) all)

let tamper () =
  let g = Crypto.deterministic "tamper" in
  let key = Port.Key.generate ~g () in
  let st, hello = Secure.client_hello ~g (Port.Key.port key) in
  match hello with
  | Wire.Hello { eph; nonce; _ } -> (
      let ks, ack = Secure.server_accept ~g key ~session:"sessionX" ~eph ~nonce |> Result.get_ok in
      match ack with
      | Wire.Hello_ack { session; eph; public; signature; _ } ->
          let kc = Secure.client_finish st ~session ~eph ~public ~signature |> Result.get_ok in
          let sealed = Secure.seal kc ~session ~seq:5L "request" in
          Alcotest.(check (option string))
            "opens" (Some "request")
            (Secure.open_ ks ~session ~seq:5L sealed);
          Alcotest.(check (option string))
            "other seq" None
            (Secure.open_ ks ~session ~seq:6L sealed);
          Alcotest.(check (option string))
            "other session" None
            (Secure.open_ ks ~session:"sessionY" ~seq:5L sealed);
          Alcotest.(check (option string))
            "own direction" None
            (Secure.open_ kc ~session ~seq:5L sealed);
          for i = 0 to String.length sealed - 1 do
            let b = Bytes.of_string sealed in
            Bytes.set b i (Char.chr (Char.code sealed.[i] lxor 1));
            if Secure.open_ ks ~session ~seq:5L (Bytes.to_string b) <> None then
              Alcotest.failf "byte %d altered, accepted" i
          done;
          (* A handshake answer signed by another key is refused. *)
          let rogue = Port.Key.generate ~g () in
          let st2, _ = Secure.client_hello ~g (Port.Key.port key) in
          let _, ack2 =
            Secure.server_accept ~g rogue ~session:"sessionZ" ~eph ~nonce:(Secure.client_nonce st2)
            |> Result.get_ok
          in
          (match ack2 with
          | Wire.Hello_ack { session; eph; public; signature; _ } ->
              Alcotest.(check bool)
                "rogue handshake refused" true
                (Result.is_error (Secure.client_finish st2 ~session ~eph ~public ~signature))
          | _ -> Alcotest.fail "no ack");
          (* A correct signature over another session id is refused too. *)
          Alcotest.(check bool)
            "replayed signature refused" true
            (Result.is_error (Secure.client_finish st ~session:"sessionW" ~eph ~public ~signature))
      | _ -> Alcotest.fail "no ack")
  | _ -> Alcotest.fail "no hello"

let tests =
  tests
  @ [
      Alcotest.test_case "capture: nothing in clear" `Quick capture;
      Alcotest.test_case "AEAD and handshake refuse tampering" `Quick tamper;
    ]

(* The fast path writes the same bytes as the codecs. *)
let fast_path () =
  let rs = Random.State.make [| 7 |] in
  let g = Crypto.deterministic "fast" in
  let port = Port.Key.port (Port.Key.generate ~g ()) in
  for _ = 1 to 300 do
    let data =
      String.init (Random.State.int rs 3000) (fun _ -> Char.chr (Random.State.int rs 256))
    in
    let off = if data = "" then 0 else Random.State.int rs (String.length data) in
    let len = Random.State.int rs (String.length data - off + 1) in
    let header =
      if Random.State.bool rs then None
      else
        Some
          (Header.request ~offset:(Random.State.int rs 100000)
             ~extra:(Random.State.int rs 1000 - 500)
             (Cap.owner port ~obj:(Random.State.int rs 1000) secret)
             (Random.State.int rs 5000))
    in
    let dir = if Random.State.bool rs then Wire.Req else Wire.Rep in
    let xid = Random.State.int rs 1_000_000
    and total = Random.State.int rs 10_000_000
    and offset = Random.State.int rs 1_000_000 in
    let fast =
      Cstruct.to_string
        (Wire.frag_cstruct ~headroom:0 ~dir ~xid ~total ~offset ~header data ~off ~len)
    in
    let slow =
      Codec.encode_string Wire.inner
        (Wire.Frag { dir; xid; total; offset; header; chunk = String.sub data off len })
    in
    Alcotest.(check string) "same bytes" slow fast;
    let head =
      Wire.frag_head
        ~into:(Cstruct.create (Random.State.int rs 300))
        ~dir ~xid ~total ~offset ~header ~len
    in
    Alcotest.(check string)
      "head, then the chunk: same bytes" slow
      (Cstruct.to_string head ^ String.sub data off len);
    (match Wire.peek_frag (Cstruct.of_string fast) with
    | Some (d, x, t, o, h, c) ->
        Alcotest.(check bool)
          "peek: fields" true
          (d = dir && x = xid && t = total && o = offset && h = header);
        Alcotest.(check string) "peek: chunk" (String.sub data off len) (Cstruct.to_string c)
    | None -> Alcotest.fail "peek_frag: not recognised");
    (* Cut short or lengthened, it is not a fragment (nor for the codec). *)
    let cut = String.sub fast 0 (String.length fast - 1) and longer = fast ^ "x" in
    List.iter
      (fun bad ->
        Alcotest.(check bool)
          "peek agrees with the codec" true
          (Wire.peek_frag (Cstruct.of_string bad) = None
          && match Codec.decode_string Wire.inner bad with Ok (Wire.Frag _) -> false | _ -> true))
      [ cut; longer ];
    Alcotest.(check bool)
      "an ack is not a fragment" true
      (Wire.peek_frag
         (Cstruct.of_string (Codec.encode_string Wire.inner (Wire.Ack { dir; xid; upto = offset })))
      = None);
    let session = Crypto.random ~g 8 and seq = Random.State.int64 rs Int64.max_int in
    let sealed = String.make (16 + Random.State.int rs 50) 'z' in
    let whole = Bytes.to_string (Wire.data_header ~up:(dir = Wire.Req) ~session ~seq) ^ sealed in
    Alcotest.(check string)
      "data header"
      (Codec.encode_string Wire.outer (Wire.Data { up = dir = Wire.Req; session; seq; sealed }))
      whole;
    match Wire.peek_data (Cstruct.of_string whole) with
    | Some (up, s, q, body) ->
        Alcotest.(check bool) "up" (dir = Wire.Req) up;
        Alcotest.(check string) "session" session s;
        Alcotest.(check int64) "seq" seq q;
        Alcotest.(check string) "sealed" sealed (Cstruct.to_string body)
    | None -> Alcotest.fail "not recognised"
  done

let tests = tests @ [ Alcotest.test_case "fast path = codecs" `Quick fast_path ]

(* A rogue that relays the real server's signed locate answer gets the
   client to its address, but cannot complete the handshake: RPC_UNSAFE,
   and nothing reaches the rogue in clear. *)
let relaying_rogue () =
  let b = bed () in
  let rogue_key = Port.Key.generate ~g:b.g () in
  let client_addr = ref None in
  let seen = ref [] in
  let rc = ref None in
  let send dst o =
    match !rc with
    | Some c ->
        let m = Msg.of_string Pool.default (Codec.encode_string Wire.outer o) in
        ignore (Sim.send c ~dst m);
        Msg.release m
    | None -> ()
  in
  let handler c =
    rc := Some c;
    {
      Sim.recv =
        (fun ~src iov ->
          let s = Iovec.to_string iov in
          Iovec.release iov;
          seen := s :: !seen;
          match Codec.decode_string Wire.outer s with
          | Ok (Wire.Locate _ as o) ->
              client_addr := Some src;
              send "s" o
          | Ok (Wire.Hereis _ as o) -> Option.iter (fun c -> send c o) !client_addr
          | Ok (Wire.Hello { eph; nonce; _ }) -> (
              match Secure.server_accept ~g:b.g rogue_key ~session:"rogue123" ~eph ~nonce with
              | Ok (_, ack) -> send src ack
              | Error _ -> ())
          | _ -> ());
      closed = ignore;
    }
  in
  ignore (Sim.open_ b.net "rogue" handler);
  let client = ok (R.create ~config:cfg ~g:b.g ~locate:[ "rogue" ] b.net "victim") in
  let res = ref None in
  let c = cap b in
  R.trans client (Header.request c 1) "secret payload" (fun r -> res := Some r);
  Sim.run b.net;
  (match !res with
  | Some (Error (`Unsafe _)) -> ()
  | Some (Error e) -> Alcotest.failf "expected RPC_UNSAFE, got %a" Rpc_error.pp e
  | Some (Ok _) -> Alcotest.fail "served through a rogue"
  | None -> Alcotest.fail "no outcome");
  Alcotest.(check int) "nothing carried out" 0 (times b "secret payload");
  let all = String.concat "" !seen in
  if contains ~sub:"secret payload" all || contains ~sub:c.Cap.check all then
    Alcotest.fail "the rogue saw secrets"

(* Bytes held by a server are bounded: a request that does not fit is
   refused, not carried out. *)
let buffered_bound () =
  let config = { cfg with max_buffered = 100_000 } in
  let b = bed ~config () in
  let d = payload 200_000 3 in
  (match run_call b d with
  | Error `Tryagain -> ()
  | Error e -> Alcotest.failf "expected TRYAGAIN, got %a" Rpc_error.pp e
  | Ok _ -> Alcotest.fail "accepted over the bound");
  Alcotest.(check int) "not carried out" 0 (times b d);
  expect_ok b (payload 50_000 4);
  Alcotest.(check int) "nothing held" 0 (R.stats b.server).Rpc.buffered

(* The locate cache is bounded. *)
let cache_bound () =
  let config = { cfg with max_cache = 3 } in
  let net = Sim.create ~seed:9 () in
  let g = Crypto.deterministic "cache" in
  let server = ok (R.create ~config ~g net "s") in
  let keys = List.init 8 (fun _ -> Port.Key.generate ~g ()) in
  List.iter (fun k -> R.listen (R.serve server k) (fun r -> R.putrep r (Header.reply `Ok) "")) keys;
  let client = ok (R.create ~config ~g ~locate:[ "s" ] net "c") in
  List.iter
    (fun k ->
      let res = ref None in
      R.locate client (Port.Key.port k) (fun r -> res := Some r);
      Sim.run net;
      match !res with Some (Ok "s") -> () | _ -> Alcotest.fail "not located")
    keys;
  Alcotest.(check bool) "cache bounded" true ((R.stats client).Rpc.cache <= 3)

let tests =
  tests
  @ [
      Alcotest.test_case "relaying rogue: UNSAFE" `Quick relaying_rogue;
      Alcotest.test_case "server bytes bounded" `Quick buffered_bound;
      Alcotest.test_case "locate cache bounded" `Quick cache_bound;
    ]

(* Garbage and mutated datagrams thrown at a client and a server: nothing
   raises, nothing is carried out by accident, and the nodes keep working. *)
let garbage () =
  let b = bed () in
  let captured = ref [] in
  let tap node =
    ignore
      (Sim.control (R.connection node)
         (Sim.Drop_filter
            (Some
               (fun ~src:_ cs ->
                 captured := Cstruct.to_string cs :: !captured;
                 false))))
  in
  tap b.client;
  tap b.server;
  expect_ok b "real one";
  let samples = Array.of_list !captured in
  let rs = Random.State.make [| 11 |] in
  let attacker = ref None in
  ignore
    (Sim.open_ b.net "x" (fun c ->
         attacker := Some c;
         { Sim.recv = (fun ~src:_ iov -> Iovec.release iov); closed = ignore }));
  let c = Option.get !attacker in
  for i = 1 to 3000 do
    let s =
      match i mod 3 with
      | 0 -> String.init (Random.State.int rs 200) (fun _ -> Char.chr (Random.State.int rs 256))
      | _ ->
          let base = Bytes.of_string samples.(Random.State.int rs (Array.length samples)) in
          for _ = 0 to Random.State.int rs 4 do
            if Bytes.length base > 0 then
              Bytes.set base
                (Random.State.int rs (Bytes.length base))
                (Char.chr (Random.State.int rs 256))
          done;
          let cut =
            if Random.State.int rs 4 = 0 then Random.State.int rs (Bytes.length base + 1)
            else Bytes.length base
          in
          Bytes.sub_string base 0 cut
    in
    let m = Msg.of_string Pool.default s in
    ignore (Sim.send c ~dst:(if i mod 2 = 0 then "s" else "c") m);
    Msg.release m
  done;
  Sim.run b.net;
  Alcotest.(check int) "nothing new carried out" 1 (Hashtbl.length b.executed);
  Alcotest.(check bool) "garbage counted" true ((R.stats b.server).Rpc.bad_datagrams > 0);
  expect_ok b "still works"

let tests = tests @ [ Alcotest.test_case "garbage and mutated datagrams" `Quick garbage ]

(* A bit flipped in the chunk of a fragment in the middle of a request (the
   fragments the server opens straight into the request's buffer): that
   datagram is refused, the client resends from the gap, and the request
   carried out is the one sent, once. Also the first bytes after the
   fragment's prefix, and the tag. *)
let corrupted_bulk () =
  List.iter
    (fun (what, where) ->
      let b = bed () in
      expect_ok b "warm";
      let seen = ref 0 and flipped = ref false in
      ignore
        (Sim.control (R.connection b.server)
           (Sim.Drop_filter
              (Some
                 (fun ~src:_ cs ->
                   if Cstruct.length cs > 900 then begin
                     incr seen;
                     if !seen = 3 && not !flipped then begin
                       flipped := true;
                       let i = where (Cstruct.length cs) in
                       Cstruct.set_uint8 cs i (Cstruct.get_uint8 cs i lxor 0x10)
                     end
                   end;
                   false))));
      let bad0 = (R.stats b.server).Rpc.bad_datagrams in
      let d = payload 100_000 5 in
      expect_ok b d;
      if not !flipped then Alcotest.failf "%s: no fragment altered" what;
      Alcotest.(check bool)
        (what ^ ": the altered fragment refused")
        true
        ((R.stats b.server).Rpc.bad_datagrams > bad0);
      Alcotest.(check int) (what ^ ": carried out once, intact") 1 (times b d);
      Alcotest.(check int) (what ^ ": nothing else carried out") 2 (Hashtbl.length b.executed))
    [
      ("middle of the chunk", fun n -> n / 2);
      ("just after the prefix", fun _ -> 18 + 40);
      ("the tag", fun n -> n - 3);
    ]

let tests = tests @ [ Alcotest.test_case "a corrupted bulk fragment refused" `Quick corrupted_bulk ]

(* While the server works, the client only enquires: small probes, never the
   request again. *)
let enquire_not_resend () =
  let config = { cfg with alive = Time.of_ms 200 } in
  let b = bed ~config () in
  expect_ok b "warm";
  b.delay <- Time.of_sec 3.;
  let sizes = ref [] in
  ignore
    (Sim.control (R.connection b.server)
       (Sim.Drop_filter
          (Some
             (fun ~src:_ cs ->
               sizes := Cstruct.length cs :: !sizes;
               false))));
  let d = payload 50_000 9 in
  let res, _ = call b d in
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_ms 500)) b.net;
  sizes := [];
  Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_ms 2000)) b.net;
  Alcotest.(check bool) "probes sent while waiting" true (List.length !sizes >= 3);
  List.iter
    (fun n -> if n > 200 then Alcotest.failf "a %d-byte datagram while the server works" n)
    !sizes;
  Sim.run b.net;
  (match !res with Some (Ok _) -> () | _ -> Alcotest.fail "no reply");
  Alcotest.(check int) "once" 1 (times b d)

let tests =
  tests
  @ [ Alcotest.test_case "enquire, not resend, while the server works" `Quick enquire_not_resend ]

let params () =
  let p = Result.get_ok (Params.of_string "rpc.fragment=61440,rpc.silence=9s") in
  let c = Rpc.config_of_params p in
  Alcotest.(check int) "override" 61440 c.Rpc.fragment;
  Alcotest.(check int) "time override" (Time.of_sec 9.) c.Rpc.silence;
  Alcotest.(check int) "default" Rpc.default_config.Rpc.window c.Rpc.window;
  Alcotest.(check bool)
    "same as the record" true
    (Rpc.config_of_params Params.empty = Rpc.default_config)

let tests = tests @ [ Alcotest.test_case "tunables" `Quick params ]

(* Two processes hold the same key and serve one port: when the one in use
   dies, the client finds the other. *)
let replicas () =
  let net = Sim.create ~seed:5 () in
  let g = Crypto.deterministic "replicas" in
  let key = Port.Key.generate ~g () in
  let start name =
    let n = ok (R.create ~config:cfg ~g net name) in
    R.listen (R.serve n key) (fun r -> R.putrep r (Header.reply `Ok) name);
    n
  in
  let _a = start "a" and _b = start "b" in
  let client =
    ok (R.create ~config:{ cfg with silence = Time.of_sec 1. } ~g ~locate:[ "a"; "b" ] net "c")
  in
  let cap = Cap.owner (Port.Key.port key) ~obj:1 secret in
  let call () =
    let res = ref None in
    R.trans client ~idempotent:true (Header.request cap 1) "" (fun r -> res := Some r);
    Sim.run net;
    match !res with
    | Some (Ok (_, who)) -> who
    | Some (Error e) -> Alcotest.failf "%a" Rpc_error.pp e
    | None -> Alcotest.fail "no outcome"
  in
  let first = call () in
  Alcotest.(check string) "sticks to one replica" first (call ());
  Sim.crash net first;
  let other = call () in
  Alcotest.(check bool) "served by the other" true (other <> first && (other = "a" || other = "b"))

let tests = tests @ [ Alcotest.test_case "replicas of one port" `Quick replicas ]

(* One client follows a port that moves three times, with its locate cache:
   a server that stops serving it (MOVED), a place that no longer serves it
   (NOTHERE to the handshake), and a server that crashes (silence). Locates
   are asked only when the cached place fails. *)
let follows_moves () =
  let config = { cfg with silence = Time.of_sec 2. } in
  let net = Sim.create ~seed:5 () in
  let g = Crypto.deterministic "moves" in
  let key = Port.Key.generate ~g () in
  let nonces = Hashtbl.create 8 in
  let locates = ref 0 in
  (* Each locate is asked of every configured place: count it once. *)
  let count_locates n =
    ignore
      (Sim.control (R.connection n)
         (Sim.Drop_filter
            (Some
               (fun ~src:_ cs ->
                 (match Codec.decode_string Wire.outer (Cstruct.to_string cs) with
                 | Ok (Wire.Locate { nonce; _ }) when not (Hashtbl.mem nonces nonce) ->
                     Hashtbl.add nonces nonce ();
                     incr locates
                 | _ -> ());
                 false))))
  in
  let start addr =
    let n = ok (R.create ~config ~g net addr) in
    count_locates n;
    let s = R.serve n key in
    R.listen s (fun r -> R.putrep r (Header.reply `Ok) (addr ^ ":" ^ R.data r));
    (n, s)
  in
  let na, sa = start "a" in
  let client = ok (R.create ~config ~g ~locate:[ "a"; "b"; "c" ] net "cl") in
  let cap = Cap.owner (Port.Key.port key) ~obj:1 secret in
  let took = ref 0 in
  let call ?idempotent d =
    let res = ref None in
    let t0 = Sim.now net in
    R.trans client ?idempotent (Header.request cap 1) d (fun r ->
        took := Time.diff (Sim.now net) t0;
        res := Some r);
    Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec 60.)) net;
    match !res with Some r -> r | None -> Alcotest.fail "no outcome"
  in
  let expect what want r =
    match r with
    | Ok (_, d) -> Alcotest.(check string) what want d
    | Error e -> Alcotest.failf "%s: %a" what Rpc_error.pp e
  in
  expect "first call" "a:1" (call "1");
  expect "second call" "a:2" (call "2");
  Alcotest.(check int) "the second call used the cached place" 1 !locates;
  Alcotest.(check int) "one cache entry" 1 (R.stats client).Rpc.cache;
  (* 1. a stops serving the port, b serves it: MOVED, then a new locate. *)
  R.stop sa;
  let nb, _ = start "b" in
  expect "after MOVED" "b:3" (call "3");
  Alcotest.(check int) "located again once" 2 !locates;
  expect "cached again" "b:4" (call "4");
  Alcotest.(check int) "no locate for a cached place" 2 !locates;
  (* 2. b restarts without the port (its session is gone), c serves it: the
     handshake to the cached b gets NOTHERE, which drops the cache entry. *)
  ignore nb;
  Sim.crash net "b";
  let nb' = ok (R.create ~config ~g net "b") in
  count_locates nb';
  let nc, _ = start "c" in
  expect "after NOTHERE" "c:5" (call ~idempotent:true "5");
  Alcotest.(check int) "located again after NOTHERE" 3 !locates;
  (* 3. c crashes, a serves the port again: a request that is not idempotent
     ends with an unknown outcome, and the silence drops the cache entry, so
     the next call finds a. *)
  ignore nc;
  Sim.crash net "c";
  let sa' = R.serve na key in
  R.listen sa' (fun r -> R.putrep r (Header.reply `Ok) ("a:" ^ R.data r));
  (match call "6" with
  | Error e -> Alcotest.(check bool) "outcome unknown" true (Rpc_error.outcome e = `Unknown)
  | Ok _ -> Alcotest.fail "answered by a crashed server");
  expect "after silence" "a:7" (call "7");
  (* Straight to a locate: no handshake with the silent place timed out first. *)
  Alcotest.(check bool) "the silent place was forgotten" true (!took < config.locate_timeout);
  expect "idempotent after silence" "a:8" (call ~idempotent:true "8");
  Alcotest.(check int) "one cache entry at the end" 1 (R.stats client).Rpc.cache

let tests = tests @ [ Alcotest.test_case "one client follows a moving port" `Quick follows_moves ]

(* Session errors that someone who sees the traffic forges. The session id travels in clear in
   every Data datagram; an eavesdropper reads it and sends Badsession for it, from the server's
   address (spoofed), every 10 ms while calls are under way: puts (large requests) and gets (large
   replies) on a server that works 300 ms on each. None may be cut short, none reported unknown,
   and every forgery is dropped and counted. [Spy] is the simulator with a way to deliver a
   datagram from any source, as an attacker on the path can. *)
module Spy = struct
  include Sim

  let handlers : (string, handler) Hashtbl.t = Hashtbl.create 4

  let open_ t addr f =
    Sim.open_ t addr (fun c ->
        let h = f c in
        Hashtbl.replace handlers addr h;
        h)

  let deliver ~dst ~src s = (Hashtbl.find handlers dst).recv ~src (Pool.of_string Pool.default s)
end

module RS = Rpc.Make (Spy)

(* What an attacker can send without the port's key: the port's public key with a signature made
   by another key, a session error properly signed by another port's key (claiming its own port,
   or the session's), and a genuine signature for another session replayed. *)
let forged_badsession_datagrams ~key ~session =
  let g = Crypto.deterministic "forger" in
  let other = Port.Key.generate ~g () in
  let port = Port.Key.port key in
  let enc o = Codec.encode_string Wire.outer o in
  let public = Port.Key.public key in
  [
    enc
      (Wire.Badsession
         { port; session; public; signature = Secure.badsession_signature other ~session });
    enc
      (Wire.Badsession
         {
           port = Port.Key.port other;
           session;
           public = Port.Key.public other;
           signature = Secure.badsession_signature other ~session;
         });
    enc
      (Wire.Badsession
         {
           port;
           session;
           public = Port.Key.public other;
           signature = Secure.badsession_signature other ~session;
         });
    enc
      (Wire.Badsession
         { port; session; public; signature = Secure.badsession_signature key ~session:"another!" });
  ]

let forged_badsession () =
  let net = Sim.create ~seed:3 () in
  let g = Crypto.deterministic "forged" in
  let key = Port.Key.generate ~g () in
  let server = ok (RS.create ~config:cfg ~g net "s") in
  let srv = RS.serve server key in
  let executed = Hashtbl.create 8 in
  RS.listen srv (fun r ->
      let d = RS.data r in
      Hashtbl.replace executed d (1 + Option.value ~default:0 (Hashtbl.find_opt executed d));
      let reply = if String.length d < 100 then payload 200_000 (String.length d) else "stored" in
      ignore
        (Sim.at net
           (Time.add (Sim.now net) (Time.of_ms 300))
           (fun () -> RS.putrep r (Header.reply `Ok) reply)));
  let client = ok (RS.create ~config:cfg ~g ~locate:[ "s" ] net "c") in
  let sessions = ref [] in
  ignore
    (Sim.control (RS.connection server)
       (Sim.Drop_filter
          (Some
             (fun ~src:_ cs ->
               (match Codec.decode_string Wire.outer (Cstruct.to_string cs) with
               | Ok (Wire.Data { session; _ }) when not (List.mem session !sessions) ->
                   sessions := session :: !sessions
               | _ -> ());
               false))));
  let forged = ref 0 in
  let forge () =
    List.iter
      (fun session ->
        List.iter
          (fun d ->
            incr forged;
            Spy.deliver ~dst:"c" ~src:"s" d)
          (forged_badsession_datagrams ~key ~session))
      !sessions
  in
  let c = Cap.owner (Port.Key.port key) ~obj:1 secret in
  for i = 1 to 8 do
    (* Odd: a put of 150 KB; even: a get of 200 KB. *)
    let d = if i mod 2 = 1 then payload 150_000 i else Printf.sprintf "get %d" i in
    let res = ref None in
    RS.trans client (Header.request c 1) d (fun r -> res := Some r);
    let until = Time.add (Sim.now net) (Time.of_sec 20.) in
    while !res = None && Sim.now net < until do
      Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 10)) net;
      forge ()
    done;
    Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec 1.)) net;
    (match !res with
    | Some (Ok (_, r)) ->
        let want = if i mod 2 = 1 then "stored" else payload 200_000 (String.length d) in
        if r <> want then Alcotest.failf "call %d: wrong reply (%d bytes)" i (String.length r)
    | Some (Error e) -> Alcotest.failf "call %d cut short by forged Badsession: %a" i Rpc_error.pp e
    | None -> Alcotest.failf "call %d: no outcome" i);
    Alcotest.(check int) (Printf.sprintf "call %d carried out once" i) 1 (Hashtbl.find executed d)
  done;
  Alcotest.(check bool) "forgeries sent" true (!forged > 100);
  Alcotest.(check int) "every forgery counted" !forged (RS.stats client).Rpc.forged_session_errors;
  (* A genuine one still ends the session: the server restarts mid-call. *)
  let res = ref None in
  RS.trans client (Header.request c 1) "get 99" (fun r -> res := Some r);
  Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 100)) net;
  Sim.crash net "s";
  let server = ok (RS.create ~config:cfg ~g net "s") in
  ignore (RS.serve server key);
  Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec 1.)) net;
  match !res with
  | Some (Error e) when Rpc_error.outcome e = `Unknown -> ()
  | Some (Error e) -> Alcotest.failf "after a restart: %a" Rpc_error.pp e
  | Some (Ok _) -> Alcotest.fail "after a restart: a reply"
  | None -> Alcotest.fail "a genuine session error was not believed within 1 s"

let tests =
  tests @ [ Alcotest.test_case "forged Badsession aborts nothing" `Quick forged_badsession ]

(* [Nothere] answers a Hello before any key is shared, so it cannot be signed: someone who sees a
   Hello's nonce (it travels in clear) forges it from the server's address, and it arrives before
   the server's own answer. Eight clients each open a session under such a forger: every call is
   carried out once, none fails as not found, and every forgery is refuted (a signed locate answer
   names the same place, or the handshake signed with the port's key completes) and counted. A
   genuine Nothere is still followed ([follows_moves]: the port served elsewhere). *)
let forged_nothere () =
  let net = Sim.create ~seed:4 () in
  let g = Crypto.deterministic "forged-nothere" in
  let key = Port.Key.generate ~g () in
  let server = ok (RS.create ~config:cfg ~g net "s") in
  let srv = RS.serve server key in
  let executed = Hashtbl.create 8 in
  RS.listen srv (fun r ->
      let d = RS.data r in
      Hashtbl.replace executed d (1 + Option.value ~default:0 (Hashtbl.find_opt executed d));
      RS.putrep r (Header.reply `Ok) ("done " ^ d));
  let forged = ref 0 in
  ignore
    (Sim.control (RS.connection server)
       (Sim.Drop_filter
          (Some
             (fun ~src cs ->
               (match Codec.decode_string Wire.outer (Cstruct.to_string cs) with
               | Ok (Wire.Hello { port; nonce; _ }) ->
                   incr forged;
                   let d = Codec.encode_string Wire.outer (Wire.Nothere { port; nonce }) in
                   ignore (Sim.at net (Sim.now net) (fun () -> Spy.deliver ~dst:src ~src:"s" d))
               | _ -> ());
               false))));
  let c = Cap.owner (Port.Key.port key) ~obj:1 secret in
  let clients =
    List.init 8 (fun i ->
        let name = Printf.sprintf "c%d" i in
        let client = ok (RS.create ~config:cfg ~g ~locate:[ "s" ] net name) in
        let d = Printf.sprintf "put %d" i in
        let res = ref None in
        RS.trans client (Header.request c 1) d (fun r -> res := Some r);
        Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec 10.)) net;
        (match !res with
        | Some (Ok (_, r)) -> Alcotest.(check string) (name ^ ": the reply") ("done " ^ d) r
        | Some (Error e) ->
            Alcotest.failf "%s: cut short by a forged Nothere: %a" name Rpc_error.pp e
        | None -> Alcotest.failf "%s: no outcome" name);
        Alcotest.(check int) (name ^ ": carried out once") 1 (Hashtbl.find executed d);
        client)
  in
  Alcotest.(check bool) "a Nothere forged for every handshake" true (!forged >= 8);
  Alcotest.(check int)
    "every forgery refuted and counted" !forged
    (List.fold_left (fun a cl -> a + (RS.stats cl).Rpc.nothere_refuted) 0 clients)

let tests = tests @ [ Alcotest.test_case "forged Nothere fails nothing" `Quick forged_nothere ]

(* A genuine Nothere is followed at once: the server stops serving the port just as a client's
   Hello reaches it (its place located and cached a moment before), and t serves it. The check's
   locate is a new one (not the cached place, which would "confirm" s), it names t, and the call
   goes there without waiting for the handshake with s to time out. *)
let genuine_nothere () =
  let net = Sim.create ~seed:6 () in
  let g = Crypto.deterministic "genuine-nothere" in
  let key = Port.Key.generate ~g () in
  let serve addr =
    let n = ok (R.create ~config:cfg ~g net addr) in
    let s = R.serve n key in
    R.listen s (fun r -> R.putrep r (Header.reply `Ok) (addr ^ ":" ^ R.data r));
    (n, s)
  in
  let ns, ss = serve "s" in
  let hellos = ref 0 in
  ignore
    (Sim.control (R.connection ns)
       (Sim.Drop_filter
          (Some
             (fun ~src:_ cs ->
               (match Codec.decode_string Wire.outer (Cstruct.to_string cs) with
               | Ok (Wire.Hello _) ->
                   incr hellos;
                   if !hellos = 1 then begin
                     R.stop ss;
                     ignore (serve "t")
                   end
               | _ -> ());
               false))));
  let client = ok (R.create ~config:cfg ~g ~locate:[ "s"; "t" ] net "c") in
  let res = ref None in
  let t0 = Sim.now net in
  R.trans client
    (Header.request (Cap.owner (Port.Key.port key) ~obj:1 secret) 1)
    "1"
    (fun r -> res := Some (r, Time.diff (Sim.now net) t0));
  Sim.run ~until:(Time.add t0 (Time.of_sec 10.)) net;
  match !res with
  | Some (Ok (_, d), took) ->
      Alcotest.(check string) "served by t" "t:1" d;
      Alcotest.(check bool) "followed at once" true (took < cfg.locate_timeout);
      Alcotest.(check int) "not refuted" 0 (R.stats client).Rpc.nothere_refuted
  | Some (Error e, _) -> Alcotest.failf "after a genuine Nothere: %a" Rpc_error.pp e
  | None -> Alcotest.fail "no outcome"

let tests = tests @ [ Alcotest.test_case "genuine Nothere followed at once" `Quick genuine_nothere ]

(* Signed session errors are bounded: a stranger sending datagrams of made-up sessions, 50 every
   10 ms for 1 s, gets at most 20 Badsession answers every 100 ms (each costs the server a
   signature, and is larger than what asked for it), and some. *)
let badsession_bounded () =
  let b = bed () in
  expect_ok b "warm";
  let answers = ref 0 in
  let attacker = ref None in
  ignore
    (Sim.open_ b.net "x" (fun c ->
         attacker := Some c;
         {
           Sim.recv =
             (fun ~src:_ iov ->
               (match Codec.decode_string Wire.outer (Iovec.to_string iov) with
               | Ok (Wire.Badsession _) -> incr answers
               | _ -> ());
               Iovec.release iov);
           closed = ignore;
         }));
  let c = Option.get !attacker in
  let rs = Random.State.make [| 5 |] in
  let start = Sim.now b.net in
  for _ = 1 to 100 do
    for _ = 1 to 50 do
      let session = String.init 8 (fun _ -> Char.chr (Random.State.int rs 256)) in
      let d =
        Codec.encode_string Wire.outer
          (Wire.Data { up = true; session; seq = 1L; sealed = String.make 40 'x' })
      in
      let m = Msg.of_string Pool.default d in
      ignore (Sim.send c ~dst:"s" m);
      Msg.release m
    done;
    Sim.run ~until:(Time.add (Sim.now b.net) (Time.of_ms 10)) b.net
  done;
  Sim.run ~until:(Time.add start (Time.of_sec 2.)) b.net;
  if !answers = 0 || !answers > 20 * 11 then
    Alcotest.failf "%d Badsession answers to 5000 datagrams in 1 s" !answers;
  expect_ok b "still works"

let tests = tests @ [ Alcotest.test_case "session errors bounded" `Quick badsession_bounded ]
