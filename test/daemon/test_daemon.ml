(* consortd under its clients: a group formed through the daemon, and
   clients that misbehave (garbage, a huge length, one that stops reading,
   one that dies mid-frame), each of which must be failed out alone. *)

open Harness
module Wire = Consort_daemon.Wire
module C = Consort_client

let check = Alcotest.(check bool)

let with_daemon ?args bind f =
  let d = start ?args ~bind () in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf d.dir)
    (fun () -> f d)

(* Two members through one daemon: a view of two, and every cast of each
   delivered to both, in FIFO order per origin. *)
let test_group () =
  with_daemon "127.0.0.1:23000" (fun d ->
      let a = member d "g" and b = member d "g" in
      check "a view of two" true (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      for i = 1 to 50 do
        Alcotest.(check bool) "cast accepted" true (C.cast a.m (Printf.sprintf "a%d" i) = Ok ());
        Alcotest.(check bool) "cast accepted" true (C.cast b.m (Printf.sprintf "b%d" i) = Ok ())
      done;
      check "all delivered" true
        (until [ a.conn; b.conn ] (fun () -> List.length !(a.casts) = 100 && List.length !(b.casts) = 100));
      let from r o = List.rev (List.filter_map (fun (o', s) -> if o' = o then Some s else None) !(r.casts)) in
      let expect p = List.init 50 (fun i -> Printf.sprintf "%s%d" p (i + 1)) in
      List.iter
        (fun r ->
          Alcotest.(check (list string)) "a's casts in order" (expect "a") (from r (C.me a.m));
          Alcotest.(check (list string)) "b's casts in order" (expect "b") (from r (C.me b.m)))
        [ a; b ];
      (* A send, and a send to a stranger refused with its reason. *)
      Alcotest.(check bool) "send" true (C.send a.m (C.me b.m) "psst" = Ok ());
      check "send delivered" true (until [ a.conn; b.conn ] (fun () -> !(b.sends) = [ (C.me a.m, "psst") ]));
      (match C.send a.m "127.0.0.1:1#1" "x" with
      | Error (Consort_group.Group.Not_member _) -> ()
      | _ -> Alcotest.fail "a send to a stranger must be refused");
      C.leave a.m;
      check "a exits, b sees it leave" true
        (until [ a.conn; b.conn ] (fun () -> !(a.exited) && view_size b = 1));
      (match !(b.views) with
      | v :: _ -> Alcotest.(check (list (pair string string))) "why" [ (C.me a.m, "left") ] v.why
      | [] -> ());
      C.close a.conn;
      C.close b.conn)

(* The protocol's errors: a request before HELLO, no common version. *)
let test_handshake () =
  with_daemon "127.0.0.1:23010" (fun d ->
      let r = raw d in
      put r (Wire.encode_request (Wire.Ping { cookie = 1 }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Not_hello; _ }) -> ()
      | _ -> Alcotest.fail "a request before HELLO: not-hello");
      check "then closed" true (next r = `Closed);
      close_raw r;
      let r = raw d in
      put r (Wire.encode_request (Wire.Hello { min_version = 7; max_version = 9; name = "future" }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Version; reason; _ }) -> check "one line" true (not (String.contains reason '\n'))
      | _ -> Alcotest.fail "no common version: version");
      close_raw r;
      let r = raw d in
      hello r;
      (match next r with
      | `Event (Wire.Hello_ok { version = 1; _ }) -> ()
      | _ -> Alcotest.fail "HELLO_OK");
      put r (Wire.encode_request (Wire.Cast { handle = 9; req = 1; payload = "x" }));
      (match next r with
      | `Event (Wire.Error { code = Wire.No_such_handle; handle = 9; _ }) -> ()
      | _ -> Alcotest.fail "a cast on no member: no-such-handle");
      put r (Wire.encode_request (Wire.Join { handle = 1; group = "g"; props = "Nonsense"; params = ""; flags = 0; peers = [] }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Bad_props; _ }) -> ()
      | _ -> Alcotest.fail "bad properties: bad-props");
      put r (Wire.encode_request (Wire.Join { handle = 1; group = "g"; props = ""; params = "no.such=1"; flags = 0; peers = [] }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Bad_params; _ }) -> ()
      | _ -> Alcotest.fail "bad params: bad-params");
      put r (Wire.encode_request (Wire.Join { handle = 1; group = "g"; props = ""; params = ""; flags = 0; peers = [ "nowhere" ] }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Bad_address; _ }) -> ()
      | _ -> Alcotest.fail "bad peers: bad-address");
      put r (Wire.encode_request (Wire.Join { handle = 1; group = "g"; props = "vsync,Auth"; params = ""; flags = 0; peers = [] }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Join_failed; _ }) -> ()
      | _ -> Alcotest.fail "Auth without a key: join-failed");
      put r (Wire.encode_request (Wire.Ping { cookie = 42 }));
      (match next r with `Event (Wire.Pong { cookie = 42 }) -> () | _ -> Alcotest.fail "PONG");
      close_raw r)

(* A member of group g that must not be disturbed while others misbehave:
   it stays in its view (no view change at all), and keeps delivering. *)
let undisturbed d f =
  let a = member d "g" and b = member d "g" in
  check "a view of two" true (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
  let views_before = List.length !(a.views) in
  f ();
  ignore (until ~timeout:1. [ a.conn; b.conn ] (fun () -> false));
  check "the daemon is alive" true (alive d);
  Alcotest.(check bool) "still casting" true (C.cast a.m "after" = Ok ());
  check "delivered" true (until [ a.conn; b.conn ] (fun () -> List.mem (C.me a.m, "after") !(b.casts)));
  Alcotest.(check int) "no view change for the others" views_before (List.length !(a.views));
  C.close a.conn;
  C.close b.conn

(* Garbage: a frame that does not decode is a malformed error and the end
   of that client only. *)
let test_garbage () =
  with_daemon "127.0.0.1:23020" (fun d ->
      undisturbed d (fun () ->
          for i = 0 to 20 do
            let r = raw d in
            hello r;
            ignore (next r);
            let junk = String.init (1 + (i * 37 mod 200)) (fun j -> Char.chr ((i * 131 + j * 17) land 0xff)) in
            put r (Printf.sprintf "\000\000\000%c\x77%s" (Char.chr (String.length junk + 1)) junk);
            (match next r with
            | `Event (Wire.Error { code = Wire.Malformed; handle; _ }) -> Alcotest.(check int) "about the connection" Wire.no_handle handle
            | _ -> Alcotest.fail "garbage: malformed");
            check "closed" true (next r = `Closed);
            close_raw r
          done;
          (* Bytes that are not even a HELLO. *)
          let r = raw d in
          put r "GET / HTTP/1.0\r\n\r\n";
          check "refused and closed" true
            (match next r with `Event (Wire.Error _) -> next r = `Closed | `Closed -> true | `Timeout -> false
            | `Event _ -> false);
          close_raw r))

(* A huge length prefix: answered at once with too-big, and the bytes that
   follow are dropped, never held: the daemon's memory does not grow. *)
let test_huge_length () =
  with_daemon "127.0.0.1:23030" (fun d ->
      undisturbed d (fun () ->
          let r = raw d in
          hello r;
          ignore (next r);
          let before = rss d.pid in
          put r "\x7f\xff\xff\xf0\x04\000\000\000\001";
          (match next r with
          | `Event (Wire.Error { code = Wire.Too_big; handle = 1; reason }) ->
              check "says the limit" true (String.length reason > 0)
          | _ -> Alcotest.fail "a huge length: too-big at once");
          let chunk = String.make 65536 'x' in
          for _ = 1 to 800 do
            put r chunk
          done;
          (* 50 MiB sent: the daemon still answers, holding none of it. *)
          let grown = rss d.pid - before in
          check (Printf.sprintf "daemon memory grew by %d KiB" grown) true (grown < 16 * 1024);
          close_raw r;
          (* And a frame just over the limit on a live connection: refused,
             the connection goes on. *)
          let r = raw d in
          hello r;
          ignore (next r);
          put r (Wire.encode_request (Wire.Cast { handle = 3; req = 1; payload = String.make (2 lsl 20) 'y' }));
          (match next r with
          | `Event (Wire.Error { code = Wire.Too_big; handle = 3; _ }) -> ()
          | _ -> Alcotest.fail "an oversize frame: too-big");
          put r (Wire.encode_request (Wire.Ping { cookie = 5 }));
          (match next r with `Event (Wire.Pong { cookie = 5 }) -> () | _ -> Alcotest.fail "still in step after it");
          close_raw r))

(* A client whose member is in the group and that dies in the middle of a
   frame is failed out: the others see it leave, and nothing else. *)
let test_dies_mid_frame () =
  with_daemon "127.0.0.1:23040" (fun d ->
      let a = member d "g" and b = member d "g" in
      check "a view of two" true (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      let r = raw d in
      hello r;
      ignore (next r);
      put r (Wire.encode_request (Wire.Join { handle = 1; group = "g"; props = ""; params = ""; flags = 0; peers = [] }));
      let rid = match next r with `Event (Wire.Ok { info; _ }) -> info | _ -> Alcotest.fail "join" in
      check "a view of three" true (until [ a.conn; b.conn ] (fun () -> view_size a = 3 && view_size b = 3));
      let frame = Wire.encode_request (Wire.Cast { handle = 1; req = 1; payload = String.make 1000 'z' }) in
      put r (String.sub frame 0 500);
      close_raw r;
      check "the dead client's member is gone" true (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      (match !(a.views) with
      | v :: _ -> Alcotest.(check (list (pair string string))) "it left" [ (rid, "left") ] v.why
      | [] -> ());
      check "its half cast was never delivered" true (List.for_all (fun (o, _) -> o <> rid) !(a.casts));
      C.close a.conn;
      C.close b.conn)

(* A client that stops reading while its group is busy: once more than
   --max-queue bytes wait for it, it is failed out; the sender is not held
   up, and every one of its casts reaches the member that reads. *)
let test_stops_reading () =
  with_daemon ~args:[ "--max-queue"; "2000000"; "--max-frame"; "70000" ] "127.0.0.1:23050" (fun d ->
      let a = member d "g" and b = member d "g" in
      let r = raw d in
      hello r;
      ignore (next r);
      put r (Wire.encode_request (Wire.Join { handle = 1; group = "g"; props = ""; params = ""; flags = 0; peers = [] }));
      (match next r with `Event (Wire.Ok _) -> () | _ -> Alcotest.fail "join");
      check "a view of three" true (until [ a.conn; b.conn ] (fun () -> view_size a = 3 && view_size b = 3));
      (* r reads nothing from now on. *)
      let payload = String.make 60000 'p' in
      let accepted = ref 0 in
      let i = ref 0 in
      let deadline = Unix.gettimeofday () +. 20. in
      while view_size a <> 2 && Unix.gettimeofday () < deadline do
        incr i;
        (match C.cast a.m payload with Ok () -> incr accepted | Error _ -> ());
        (* a and b read what comes (b keeps up with a's casts); r does not. *)
        ignore (until ~timeout:5. [ a.conn; b.conn ] (fun () -> List.length !(b.casts) >= !accepted - 2 || view_size a = 2))
      done;
      check "the reader that stopped is failed out" true (view_size a = 2);
      check "b is still in" true (until [ a.conn; b.conn ] (fun () -> view_size b = 2));
      check "a's casts all reach b" true (until [ a.conn; b.conn ] (fun () -> List.length !(b.casts) = !accepted));
      close_raw r;
      C.close a.conn;
      C.close b.conn)

(* A client that closes its connection without leaving: its members are
   failed out (a leave), the others see a view without them at once. *)
let test_client_closes () =
  with_daemon "127.0.0.1:23060" (fun d ->
      let a = member d "g" and b = member d "g" and c = member d "g" in
      check "a view of three" true (until [ a.conn; b.conn; c.conn ] (fun () -> view_size a = 3 && view_size c = 3));
      C.close c.conn;
      (* Well within the failure detector's 5 s: a leave, not a suspicion. *)
      let t0 = Unix.gettimeofday () in
      check "failed out" true (until ~timeout:4. [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      check "quickly" true (Unix.gettimeofday () -. t0 < 4.);
      C.close a.conn;
      C.close b.conn)

let () =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  Alcotest.run "daemon"
    [
      ( "daemon",
        [
          Alcotest.test_case "a group through the daemon" `Quick test_group;
          Alcotest.test_case "handshake and request errors" `Quick test_handshake;
          Alcotest.test_case "garbage fails only its client" `Quick test_garbage;
          Alcotest.test_case "a huge length is never buffered" `Quick test_huge_length;
          Alcotest.test_case "a client dies mid-frame" `Quick test_dies_mid_frame;
          Alcotest.test_case "a client stops reading" `Quick test_stops_reading;
          Alcotest.test_case "a client closes without leaving" `Quick test_client_closes;
        ] );
    ]
