(* The socket API over two stacks on the in-memory network. *)

open Consort
module Promise = Socket.Promise

type env = {
  vclock : Clock.Virtual.clock;
  pool : Pool.t;
  net : Mem.net;
  a : (module Node.S);
  b : (module Node.S);
}

let env ?(config = Tcp.default_config) ?(impairments = Mem.perfect) () =
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"socket" () in
  let net = Mem.create_net ~impairments vclock pool in
  let a = Node.make ~config net pool 1 ~seed:11 in
  let b = Node.make ~config net pool 2 ~seed:12 in
  { vclock; pool; net; a; b }

(* Run the clock until [p] resolves (or nothing is left to run). *)
let await e p =
  let rec go n =
    match Promise.peek p with
    | Some v -> v
    | None -> (
        if n = 0 then Alcotest.fail "promise still pending after 1e6 steps";
        match Clock.Virtual.next e.vclock with
        | None -> Alcotest.fail "promise pending and nothing left to run"
        | Some t ->
            let now = (Clock.Virtual.clock e.vclock).now () in
            Clock.Virtual.advance e.vclock (max 0 (t - now));
            go (n - 1))
  in
  go 1_000_000

let ok pp = function Ok v -> v | Error err -> Alcotest.failf "unexpected error: %a" pp err
let err = Protocol.pp_error

let finish e =
  Clock.Virtual.run_until_idle e.vclock;
  Alcotest.(check int) "no segment left in use" 0 (Pool.in_use e.pool)

let read_exactly e read n =
  let buf = Buffer.create n in
  let chunk = Cstruct.create 4096 in
  while Buffer.length buf < n do
    let k = ok err (await e (read (Cstruct.sub chunk 0 (min 4096 (n - Buffer.length buf))))) in
    if k = 0 then Alcotest.failf "end of stream after %d of %d bytes" (Buffer.length buf) n;
    Buffer.add_string buf (Cstruct.to_string (Cstruct.sub chunk 0 k))
  done;
  Buffer.contents buf

let echo () =
  let e = env ~impairments:{ Mem.perfect with loss = 0.02 } () in
  let (module A) = e.a and (module B) = e.b in
  let l = ok err (B.Sock.listen B.tcp 7) in
  (* The echo server: write back what it reads, close at the end. *)
  Promise.upon (B.Sock.accept l) (function
    | Error x -> Alcotest.failf "accept: %a" err x
    | Ok s ->
        let buf = Cstruct.create 8192 in
        let rec loop () =
          Promise.upon (B.Sock.read s buf) (function
            | Ok 0 -> B.Sock.close s
            | Ok k ->
                Promise.upon
                  (B.Sock.write s (Cstruct.sub (Cstruct.of_string (Cstruct.to_string buf)) 0 k))
                  (function Ok () -> loop () | Error x -> Alcotest.failf "echo write: %a" err x)
            | Error x -> Alcotest.failf "echo read: %a" err x)
        in
        loop ());
  let s = ok err (await e (A.Sock.connect A.tcp 2 7)) in
  List.iter
    (fun n ->
      let msg = String.init n (fun i -> Char.chr (((i * 31) + n) land 0xFF)) in
      ok err (await e (A.Sock.write_string s msg));
      Alcotest.(check string) (Fmt.str "echo of %d bytes" n) msg (read_exactly e (A.Sock.read s) n))
    [ 1; 100; 1460; 5000; 100_000 ];
  A.Sock.shutdown s;
  Alcotest.(check int) "end of stream" 0 (ok err (await e (A.Sock.read s (Cstruct.create 10))));
  ok err (await e (A.Sock.closed s));
  finish e

let refused () =
  let e = env () in
  let (module A) = e.a in
  (match await e (A.Sock.connect A.tcp 2 9999) with
  | Error (`Refused _) -> ()
  | Error x -> Alcotest.failf "wrong error: %a" err x
  | Ok _ -> Alcotest.fail "connected to a closed port");
  finish e

let timeout () =
  let e = env ~config:{ Tcp.default_config with syn_retries = 2 } () in
  let (module A) = e.a in
  let t0 = (Mem.clock e.net).now () in
  (match await e (A.Sock.connect A.tcp 9 80) with
  | Error `Timeout -> ()
  | Error x -> Alcotest.failf "wrong error: %a" err x
  | Ok _ -> Alcotest.fail "connected to nobody");
  Alcotest.(check int) "after 1 + 2 + 4 s" (Time.of_sec 7.) ((Mem.clock e.net).now () - t0);
  finish e

let abort_resets_peer () =
  let e = env () in
  let (module A) = e.a and (module B) = e.b in
  let l = ok err (B.Sock.listen B.tcp 80) in
  let c = A.Sock.connect A.tcp 2 80 in
  let srv = ok err (await e (B.Sock.accept l)) in
  let cli = ok err (await e c) in
  let pending = B.Sock.read srv (Cstruct.create 10) in
  A.Sock.abort cli;
  (match await e pending with
  | Error `Reset -> ()
  | Error x -> Alcotest.failf "wrong error: %a" err x
  | Ok n -> Alcotest.failf "read %d bytes" n);
  (match await e (B.Sock.closed srv) with
  | Error `Reset -> ()
  | _ -> Alcotest.fail "closed should report the reset");
  finish e

let half_close () =
  let e = env () in
  let (module A) = e.a and (module B) = e.b in
  let l = ok err (B.Sock.listen B.tcp 80) in
  let c = A.Sock.connect A.tcp 2 80 in
  let srv = ok err (await e (B.Sock.accept l)) in
  let cli = ok err (await e c) in
  ok err (await e (A.Sock.write_string cli "request"));
  A.Sock.shutdown cli;
  Alcotest.(check string) "request" "request" (read_exactly e (B.Sock.read srv) 7);
  Alcotest.(check int)
    "then end of stream" 0
    (ok err (await e (B.Sock.read srv (Cstruct.create 10))));
  Clock.Virtual.advance e.vclock (Time.of_ms 10);
  Alcotest.(check bool)
    "the client side is still open for reading" true
    (A.T.state (A.Sock.connection cli) = Tcp.Fin_wait_2);
  let reply = String.make 300_000 'r' in
  ok err (await e (B.Sock.write_string srv reply));
  B.Sock.close srv;
  Alcotest.(check string)
    "reply after the half-close" reply
    (read_exactly e (A.Sock.read cli) 300_000);
  ok err (await e (A.Sock.closed cli));
  ok err (await e (B.Sock.closed srv));
  finish e

let back_pressure () =
  let e = env ~config:{ Tcp.default_config with send_buffer = 16 * 1024 } () in
  let (module A) = e.a and (module B) = e.b in
  let l = ok err (B.Sock.listen B.tcp 80) in
  let c = A.Sock.connect A.tcp 2 80 in
  let srv = ok err (await e (B.Sock.accept l)) in
  let cli = ok err (await e c) in
  let w = A.Sock.write cli (Cstruct.create 200_000) in
  Alcotest.(check bool) "the write waits for the buffer" false (Promise.is_resolved w);
  Alcotest.(check bool)
    "send buffer is full" true
    ((A.Sock.info cli).unsent + (A.Sock.info cli).unacked = 16 * 1024);
  let got = read_exactly e (B.Sock.read srv) 200_000 in
  Alcotest.(check int) "all bytes" 200_000 (String.length got);
  ok err (await e w);
  A.Sock.close cli;
  B.Sock.close srv;
  finish e

let accept_order () =
  let e = env () in
  let (module A) = e.a and (module B) = e.b in
  let l = ok err (B.Sock.listen B.tcp 80) in
  (match B.Sock.listen B.tcp 80 with
  | Error (`In_use _) -> ()
  | _ -> Alcotest.fail "a second listener on the same port");
  let c1 = A.Sock.connect A.tcp ~local_port:1001 2 80 in
  let c2 = A.Sock.connect A.tcp ~local_port:1002 2 80 in
  let s1 = ok err (await e c1) and s2 = ok err (await e c2) in
  let a1 = ok err (await e (B.Sock.accept l)) and a2 = ok err (await e (B.Sock.accept l)) in
  let port s = snd (B.T.remote (B.Sock.connection s)) in
  Alcotest.(check (list int)) "accepted in order" [ 1001; 1002 ] [ port a1; port a2 ];
  List.iter A.Sock.close [ s1; s2 ];
  List.iter B.Sock.close [ a1; a2 ];
  B.Sock.stop l;
  ok err (await e (A.Sock.closed s1));
  finish e

let tests =
  [
    Alcotest.test_case "echo of messages up to 100 KB over a lossy link" `Quick echo;
    Alcotest.test_case "connect to a closed port is refused" `Quick refused;
    Alcotest.test_case "connect to nobody times out" `Quick timeout;
    Alcotest.test_case "abort resets the peer" `Quick abort_resets_peer;
    Alcotest.test_case "half-close: the peer still sends after our FIN" `Quick half_close;
    Alcotest.test_case "write back-pressure with a small send buffer" `Quick back_pressure;
    Alcotest.test_case "listen: one listener per port, accept in order" `Quick accept_order;
  ]
