(* consortd under its clients: a group formed through the daemon, and
   clients that misbehave (garbage, a huge length, one that stops reading,
   one that dies mid-frame), each of which must be failed out alone. *)

open Harness
module Wire = Consort_daemon.Wire
module C = Consort_client

let check = Alcotest.(check bool)

(* Callbacks of a member that hears nothing. *)
let deaf =
  {
    C.view = ignore;
    cast = (fun ~origin:_ _ -> ());
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

(* Ports: a window of 100 from 20000, chosen by the process id, so that two
   runs at once on one machine (and their groups) stay apart. *)
let base = 20000 + (100 * (Unix.getpid () mod 40))
let addr n = Printf.sprintf "127.0.0.1:%d" (base + n)

module Astring_like = struct
  let contains s sub =
    let n = String.length sub in
    let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
    go 0

  let find s sub =
    let n = String.length sub in
    let rec go i =
      if i + n > String.length s then None else if String.sub s i n = sub then Some i else go (i + 1)
    in
    go 0
end

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
  with_daemon (addr 0) (fun d ->
      let a = member d "g" and b = member d "g" in
      check "a view of two" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      for i = 1 to 50 do
        Alcotest.(check bool) "cast accepted" true (C.cast a.m (Printf.sprintf "a%d" i) = Ok ());
        Alcotest.(check bool) "cast accepted" true (C.cast b.m (Printf.sprintf "b%d" i) = Ok ())
      done;
      check "all delivered" true
        (until [ a.conn; b.conn ] (fun () ->
             List.length !(a.casts) = 100 && List.length !(b.casts) = 100));
      let from r o =
        List.rev (List.filter_map (fun (o', s) -> if o' = o then Some s else None) !(r.casts))
      in
      let expect p = List.init 50 (fun i -> Printf.sprintf "%s%d" p (i + 1)) in
      List.iter
        (fun r ->
          Alcotest.(check (list string)) "a's casts in order" (expect "a") (from r (C.me a.m));
          Alcotest.(check (list string)) "b's casts in order" (expect "b") (from r (C.me b.m)))
        [ a; b ];
      (* A send, and a send to a stranger refused with its reason. *)
      Alcotest.(check bool) "send" true (C.send a.m (C.me b.m) "psst" = Ok ());
      check "send delivered" true
        (until [ a.conn; b.conn ] (fun () -> !(b.sends) = [ (C.me a.m, "psst") ]));
      (match C.send a.m "127.0.0.1:1#1" "x" with
      | Error (C.Not_member _) -> ()
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
  with_daemon (addr 10) (fun d ->
      let r = raw d in
      put r (Wire.encode_request (Wire.Ping { cookie = 1 }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Not_hello; _ }) -> ()
      | _ -> Alcotest.fail "a request before HELLO: not-hello");
      check "then closed" true (next r = `Closed);
      close_raw r;
      let r = raw d in
      put r
        (Wire.encode_request
           (Wire.Hello { min_version = 7; max_version = 9; name = "future"; token = "" }));
      (match next r with
      | `Event (Wire.Error { code = Wire.Version; reason; _ }) ->
          check "one line" true (not (String.contains reason '\n'))
      | _ -> Alcotest.fail "no common version: version");
      close_raw r;
      let r = raw d in
      hello r;
      (match next r with
      | `Event (Wire.Hello_ok { version = 1; _ }) -> ()
      | _ -> Alcotest.fail "HELLO_OK");
      let refused req code what =
        put r (Wire.encode_request req);
        match next r with
        | `Event (Wire.Error { code = c; _ }) when c = code -> ()
        | _ -> Alcotest.fail what
      in
      let join ?(group = "g") ?(props = "") ?(params = "") ?(peers = []) () =
        Wire.Join { handle = 1; group; props; params; flags = 0; peers }
      in
      put r (Wire.encode_request (Wire.Cast { handle = 9; req = 1; payload = "x" }));
      (match next r with
      | `Event (Wire.Error { code = Wire.No_such_handle; handle = 9; _ }) -> ()
      | _ -> Alcotest.fail "a cast on no member: no-such-handle");
      refused (join ~props:"Nonsense" ()) Wire.Bad_props "bad properties: bad-props";
      refused (join ~params:"no.such=1" ()) Wire.Bad_params "bad params: bad-params";
      refused (join ~peers:[ "nowhere" ] ()) Wire.Bad_address "bad peers: bad-address";
      refused
        (join ~peers:[ "10.1.2.3:1000-1064" ] ())
        Wire.Bad_address "more than 64 peer addresses from a client: bad-address";
      refused
        (join ~group:(String.make 256 'g') ())
        Wire.Bad_props "a group name over 255 bytes: bad-props";
      refused (join ~props:"vsync,Auth" ()) Wire.Join_failed "Auth without a key: join-failed";
      put r (Wire.encode_request (Wire.Ping { cookie = 42 }));
      (match next r with `Event (Wire.Pong { cookie = 42 }) -> () | _ -> Alcotest.fail "PONG");
      close_raw r)

(* A member of group g that must not be disturbed while others misbehave:
   it stays in its view (no view change at all), and keeps delivering. *)
let undisturbed d f =
  let a = member d "g" and b = member d "g" in
  check "a view of two" true
    (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
  let views_before = List.length !(a.views) in
  f ();
  ignore (until ~timeout:1. [ a.conn; b.conn ] (fun () -> false));
  check "the daemon is alive" true (alive d);
  Alcotest.(check bool) "still casting" true (C.cast a.m "after" = Ok ());
  check "delivered" true
    (until [ a.conn; b.conn ] (fun () -> List.mem (C.me a.m, "after") !(b.casts)));
  Alcotest.(check int) "no view change for the others" views_before (List.length !(a.views));
  C.close a.conn;
  C.close b.conn

(* Garbage: a frame that does not decode is a malformed error and the end
   of that client only. *)
let test_garbage () =
  with_daemon (addr 20) (fun d ->
      undisturbed d (fun () ->
          for i = 0 to 20 do
            let r = raw d in
            hello r;
            ignore (next r);
            let junk =
              String.init
                (1 + (i * 37 mod 200))
                (fun j -> Char.chr (((i * 131) + (j * 17)) land 0xff))
            in
            put r (Printf.sprintf "\000\000\000%c\x77%s" (Char.chr (String.length junk + 1)) junk);
            (match next r with
            | `Event (Wire.Error { code = Wire.Malformed; handle; _ }) ->
                Alcotest.(check int) "about the connection" Wire.no_handle handle
            | _ -> Alcotest.fail "garbage: malformed");
            check "closed" true (next r = `Closed);
            close_raw r
          done;
          (* Bytes that are not even a HELLO. *)
          let r = raw d in
          put r "GET / HTTP/1.0\r\n\r\n";
          check "refused and closed" true
            (match next r with
            | `Event (Wire.Error _) -> next r = `Closed
            | `Closed -> true
            | `Timeout -> false
            | `Event _ -> false);
          close_raw r))

(* A huge length prefix: answered at once with too-big, and the bytes that
   follow are dropped, never held: the daemon's memory does not grow. *)
let test_huge_length () =
  with_daemon (addr 30) (fun d ->
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
          put r
            (Wire.encode_request
               (Wire.Cast { handle = 3; req = 1; payload = String.make (2 lsl 20) 'y' }));
          (match next r with
          | `Event (Wire.Error { code = Wire.Too_big; handle = 3; _ }) -> ()
          | _ -> Alcotest.fail "an oversize frame: too-big");
          put r (Wire.encode_request (Wire.Ping { cookie = 5 }));
          (match next r with
          | `Event (Wire.Pong { cookie = 5 }) -> ()
          | _ -> Alcotest.fail "still in step after it");
          close_raw r))

(* A client whose member is in the group and that dies in the middle of a
   frame is failed out: the others see it leave, and nothing else. *)
let test_dies_mid_frame () =
  with_daemon (addr 40) (fun d ->
      let a = member d "g" and b = member d "g" in
      check "a view of two" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      let r = raw d in
      hello r;
      ignore (next r);
      put r
        (Wire.encode_request
           (Wire.Join { handle = 1; group = "g"; props = ""; params = ""; flags = 0; peers = [] }));
      let rid =
        match next r with `Event (Wire.Ok { info; _ }) -> info | _ -> Alcotest.fail "join"
      in
      check "a view of three" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 3 && view_size b = 3));
      let frame =
        Wire.encode_request (Wire.Cast { handle = 1; req = 1; payload = String.make 1000 'z' })
      in
      put r (String.sub frame 0 500);
      close_raw r;
      check "the dead client's member is gone" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      (match !(a.views) with
      | v :: _ -> Alcotest.(check (list (pair string string))) "it left" [ (rid, "left") ] v.why
      | [] -> ());
      check "its half cast was never delivered" true
        (List.for_all (fun (o, _) -> o <> rid) !(a.casts));
      C.close a.conn;
      C.close b.conn)

(* Everything a raw connection gets until it ends (or [timeout] seconds
   without a frame): the events, and whether it ended. *)
let drain ?(timeout = 5.) r =
  let rec go acc =
    match next ~timeout r with
    | `Event e -> go (e :: acc)
    | `Closed -> (List.rev acc, true)
    | `Timeout -> (List.rev acc, false)
  in
  go []

let raw_join r group =
  put r
    (Wire.encode_request
       (Wire.Join { handle = 1; group; props = ""; params = ""; flags = 0; peers = [] }));
  let rec reply () =
    match next r with
    | `Event (Wire.Ok { info; _ }) -> info
    | `Event (Wire.View _) -> reply ()
    | _ -> Alcotest.fail "join"
  in
  reply ()

(* A client that stops reading while its group is busy: once more than
   --max-queue bytes wait for it, it is failed out; the sender is not held
   up, and every one of its casts reaches the member that reads. *)
let test_stops_reading () =
  with_daemon ~args:[ "--max-queue"; "2000000"; "--max-queued"; "64000000"; "--max-frame"; "70000" ]
    (addr 50) (fun d ->
      let a = member d "g" and b = member d "g" in
      let r = raw d in
      hello r;
      ignore (next r);
      put r
        (Wire.encode_request
           (Wire.Join { handle = 1; group = "g"; props = ""; params = ""; flags = 0; peers = [] }));
      (match next r with `Event (Wire.Ok _) -> () | _ -> Alcotest.fail "join");
      check "a view of three" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 3 && view_size b = 3));
      (* r reads nothing from now on. *)
      let payload = String.make 60000 'p' in
      let accepted = ref 0 in
      let i = ref 0 in
      let deadline = Unix.gettimeofday () +. 20. in
      while view_size a <> 2 && Unix.gettimeofday () < deadline do
        incr i;
        (match C.cast a.m payload with Ok () -> incr accepted | Error _ -> ());
        (* a and b read what comes (b keeps up with a's casts); r does not. *)
        ignore
          (until ~timeout:5. [ a.conn; b.conn ] (fun () ->
               List.length !(b.casts) >= !accepted - 2 || view_size a = 2))
      done;
      check "the reader that stopped is failed out" true (view_size a = 2);
      (match List.rev (fst (drain r)) with
      | Wire.Error { code = Wire.Overloaded; reason; _ } :: _ ->
          check
            ("its stream ends with ERROR overloaded: " ^ reason)
            true
            (Astring_like.contains reason "(--max-queue)")
      | _ -> Alcotest.fail "the stream of the reader that stopped does not end with its ERROR");
      check "b is still in" true (until [ a.conn; b.conn ] (fun () -> view_size b = 2));
      check "a's casts all reach b" true
        (until [ a.conn; b.conn ] (fun () -> List.length !(b.casts) = !accepted));
      close_raw r;
      C.close a.conn;
      C.close b.conn)

(* The daemon's cap on what all clients leave unread (--max-queued): two
   clients stop reading, the older one well behind the newer; once the two
   leave more than the cap together, the older one (the most unread) is
   failed out, its stream ending with ERROR overloaded after the frames it
   had; the newer one stays in the group, and reads all that was cast. *)
let test_global_cap () =
  with_daemon ~args:[ "--max-queue"; "8000000"; "--max-queued"; "3000000"; "--max-frame"; "70000" ]
    (addr 85) (fun d ->
      let a = member d "g" in
      let r1 = raw d in
      hello r1;
      ignore (next r1);
      let id1 = raw_join r1 "g" in
      check "a view of two" true (until [ a.conn ] (fun () -> view_size a = 2));
      let payload = String.make 60000 'p' in
      let accepted = ref 0 in
      let cast () =
        (match C.cast a.m payload with Ok () -> incr accepted | Error _ -> ());
        ignore (until ~timeout:5. [ a.conn ] (fun () -> List.length !(a.casts) >= !accepted))
      in
      (* r1 reads nothing from now on: 2.4 MB behind before r2 comes. *)
      for _ = 1 to 40 do
        cast ()
      done;
      let r2 = raw d in
      hello r2;
      ignore (next r2);
      let id2 = raw_join r2 "g" in
      check "a view of three" true (until [ a.conn ] (fun () -> view_size a = 3));
      let before = !accepted in
      (* r2 reads nothing either, until someone is failed out. *)
      let deadline = Unix.gettimeofday () +. 20. in
      while view_size a = 3 && !accepted - before < 200 && Unix.gettimeofday () < deadline do
        cast ()
      done;
      let members () = match !(a.views) with v :: _ -> Array.to_list v.C.members | [] -> [] in
      check "someone was failed out" true (view_size a = 2);
      check "the older client, the most behind, is out" false (List.mem id1 (members ()));
      check "the newer client is still in" true (List.mem id2 (members ()));
      (* r1's stream: the casts it had, then ERROR overloaded, then the end. *)
      let evs, ended = drain r1 in
      check "r1's connection ended" true ended;
      (match List.rev evs with
      | Wire.Error { handle; code = Wire.Overloaded; reason } :: _ ->
          Alcotest.(check int) "an ERROR about the connection" Wire.no_handle handle;
          check ("names the cap: " ^ reason) true (Astring_like.contains reason "--max-queued")
      | _ -> Alcotest.fail "r1's last frame is not ERROR overloaded");
      check "r1 got whole casts before it" true
        (List.for_all
           (function
             | Wire.Cast_up { payload = p; _ } -> p = payload
             | Wire.Error _ | Wire.View _ | Wire.Block _ | Wire.Flow _ -> true
             | _ -> false)
           evs);
      (* r2 reads now: every cast since it joined, no error, still open. *)
      let evs, ended = drain ~timeout:2. r2 in
      check "r2 is still connected" false ended;
      check "r2 got no error" true (List.for_all (function Wire.Error _ -> false | _ -> true) evs);
      let got = List.length (List.filter (function Wire.Cast_up _ -> true | _ -> false) evs) in
      Alcotest.(check int) "r2 got every cast since it joined" (!accepted - before) got;
      check "a still casts to r2" true
        (C.cast a.m "after" = Ok ()
        &&
        match drain ~timeout:2. r2 with
        | evs, false ->
            List.exists (function Wire.Cast_up { payload = "after"; _ } -> true | _ -> false) evs
        | _, true -> false);
      close_raw r1;
      close_raw r2;
      C.close a.conn)

(* HELLO on a raw connection, version 2 agreed. *)
let hello_v2 r name =
  put r (Wire.encode_request (Wire.Hello { min_version = 1; max_version = 2; name; token = "" }));
  match next r with
  | `Event (Wire.Hello_ok { version = 2; _ }) -> ()
  | _ -> Alcotest.fail "HELLO_OK version 2"

(* Protocol version 2: a cast the daemon takes gets no reply (the PING
   after it is answered first), one it refuses gets REFUSED with its
   request number (no member; a frame over the limit; leaving), and
   a version 1 client on the same daemon still gets OK. *)
let test_version2 () =
  with_daemon ~args:[ "--max-frame"; "70000" ] (addr 65) (fun d ->
      let a = member d "g" in
      let r = raw d in
      hello_v2 r "v2";
      let id = raw_join r "g" in
      check "a view of two" true (until [ a.conn ] (fun () -> view_size a = 2));
      let cast req payload = put r (Wire.encode_request (Wire.Cast { handle = 1; req; payload })) in
      let ping cookie = put r (Wire.encode_request (Wire.Ping { cookie })) in
      (* Replies and REFUSED in order, upcalls aside. *)
      let rec answers n acc =
        if n = 0 then List.rev acc
        else
          match next r with
          | `Event (Wire.Pong _ as e) | `Event (Wire.Ok _ as e) | `Event (Wire.Error _ as e) ->
              answers (n - 1) (e :: acc)
          | `Event (Wire.Refused _ as e) -> answers (n - 1) (e :: acc)
          | `Event _ -> answers n acc
          | `Closed | `Timeout -> List.rev acc
      in
      cast 1 "one";
      cast 2 "two";
      ping 7;
      (match answers 1 [] with
      | [ Wire.Pong { cookie = 7 } ] -> ()
      | _ -> Alcotest.fail "version 2: a cast taken has no reply; the PING's comes first");
      check "both casts delivered to a" true
        (until [ a.conn ] (fun () ->
             List.mem (id, "one") !(a.casts) && List.mem (id, "two") !(a.casts)));
      put r (Wire.encode_request (Wire.Cast { handle = 5; req = 3; payload = "x" }));
      cast 4 (String.make 80000 'b');
      ping 8;
      (match answers 3 [] with
      | [
       Wire.Refused { handle = 5; req = 3; code = Wire.No_such_handle; _ };
       Wire.Refused { handle = 1; req = 4; code = Wire.Too_big; _ };
       Wire.Pong { cookie = 8 };
      ] ->
          ()
      | _ -> Alcotest.fail "version 2: REFUSED no-such-handle, REFUSED too-big, then PONG");
      (* After LEAVE (its OK is a reply), a cast is refused by number. *)
      put r (Wire.encode_request (Wire.Leave { handle = 1 }));
      cast 5 "late";
      ping 9;
      (match answers 3 [] with
      | [
       Wire.Ok { handle = 1; _ };
       Wire.Refused { handle = 1; req = 5; code = Wire.Leaving | Wire.No_such_handle; _ };
       Wire.Pong { cookie = 9 };
      ] ->
          ()
      | _ -> Alcotest.fail "version 2: OK to LEAVE, REFUSED for the cast after it, PONG");
      (* A version 1 client of the same daemon: OK per cast. *)
      let r1 = raw d in
      hello r1;
      ignore (next r1);
      ignore (raw_join r1 "g");
      put r1 (Wire.encode_request (Wire.Cast { handle = 1; req = 1; payload = "v1" }));
      let rec ok () =
        match next r1 with
        | `Event (Wire.Ok { handle = 1; _ }) -> true
        | `Event (Wire.Ok _ | Wire.Error _ | Wire.Refused _) -> false
        | `Event _ -> ok ()
        | _ -> false
      in
      check "version 1: OK" true (ok ());
      close_raw r1;
      close_raw r;
      C.close a.conn)

(* Backpressure (doc/protocol.md): a client that casts more than it reads
   is told FLOW 1 past half its queue cap and its casts are refused until
   it is under a quarter. [s] casts 16 KiB messages (each comes back to it)
   and reads only 4 KiB per cast: a client that stops casting at FLOW 1 or
   at a flow-control refusal and goes on at FLOW 0 casts 400 messages and is
   never failed out; one that casts on and reads nothing is failed out at
   the cap. [b], in the same group, reads all the while: it gets every cast
   taken, its view does not change but for [s]'s leaving, and it is never
   told to pause. *)
let test_backpressure () =
  with_daemon ~args:[ "--max-queue"; "1000000"; "--max-frame"; "70000" ] (addr 25) (fun d ->
      let b = member d "g" in
      let s = raw d in
      hello_v2 s "slow";
      let sid = raw_join s "g" in
      check "a view of two" true (until [ b.conn ] (fun () -> view_size b = 2));
      let vid = match !(b.views) with v :: _ -> v.C.vid | [] -> "" in
      let payload = String.make 16384 'p' in
      let req = ref 0 and refused = ref 0 and flow = ref false and flows_on = ref 0 in
      let closed = ref false and overloaded = ref false and delivered = ref 0 in
      (* Reads at most [k] bytes of what is there, and takes the whole frames. *)
      let read_some k =
        (match Unix.select [ s.fd ] [] [] 0. with
        | [], _, _ -> ()
        | _ -> (
            match Unix.read s.fd s.buf 0 (min k (Bytes.length s.buf)) with
            | 0 -> closed := true
            | n -> Wire.feed s.fr s.buf 0 n
            | exception Unix.Unix_error _ -> closed := true));
        let rec frames () =
          match Wire.next s.fr with
          | `Frame f ->
              (match Wire.decode_event f with
              | Ok (Wire.Flow { blocked; _ }) ->
                  if blocked && not !flow then incr flows_on;
                  flow := blocked
              | Ok (Wire.Refused { code = Wire.Flow_control; _ }) ->
                  incr refused;
                  flow := true
              | Ok (Wire.Refused _) -> Alcotest.fail "a refusal other than flow-control"
              | Ok (Wire.Error { code = Wire.Overloaded; _ }) -> overloaded := true
              | Ok (Wire.Cast_up { origin; _ }) when origin = sid -> incr delivered
              | Ok _ -> ()
              | Error e -> Alcotest.fail e);
              frames ()
          | _ -> ()
        in
        frames ()
      in
      let cast () =
        incr req;
        match put s (Wire.encode_request (Wire.Cast { handle = 1; req = !req; payload })) with
        | () -> ()
        | exception Unix.Unix_error _ -> closed := true
      in
      (* The client that obeys. *)
      let deadline = Unix.gettimeofday () +. 60. in
      while !delivered < 400 && (not !closed) && Unix.gettimeofday () < deadline do
        if (not !flow) && !req - !refused < 400 then cast ();
        (* A millisecond per cast: the daemon has time to deliver it. *)
        ignore (Unix.select [ C.fd b.conn ] [] [] 0.001);
        read_some 4096;
        ignore (C.step b.conn)
      done;
      (* Then it reads everything, and knows the fate of each cast. *)
      (try put s (Wire.encode_request (Wire.Ping { cookie = 1 }))
       with Unix.Unix_error _ -> closed := true);
      let pong = ref false in
      let deadline = Unix.gettimeofday () +. 20. in
      while (not !pong) && (not !closed) && Unix.gettimeofday () < deadline do
        (match next ~timeout:1. s with
        | `Event (Wire.Pong _) -> pong := true
        | `Event (Wire.Refused { code = Wire.Flow_control; _ }) -> incr refused
        | `Event (Wire.Flow { blocked; _ }) -> flow := blocked
        | `Event (Wire.Error { code = Wire.Overloaded; _ }) -> overloaded := true
        | `Event _ -> ()
        | `Closed -> closed := true
        | `Timeout -> ());
        ignore (C.step b.conn)
      done;
      check "the slow client that obeys is not failed out" false (!closed || !overloaded);
      check "it was told to pause, and its casts refused meanwhile" true
        (!flows_on >= 1 && !refused >= 1);
      let taken = !req - !refused in
      check "400 casts taken, and read back" true (taken >= 400 && !delivered >= 400);
      let from_s () = List.length (List.filter (fun (o, _) -> o = sid) !(b.casts)) in
      check "b gets every one" true (until [ b.conn ] (fun () -> from_s () = taken));
      check "b's view is the same" true
        (match !(b.views) with v :: _ -> v.C.vid = vid | [] -> false);
      (* The client that ignores it: it casts on and reads nothing. *)
      let before = !req in
      let n = ref 0 in
      let small = String.make 1024 'q' in
      (* Its writes never wait (the test would stop reading for b). *)
      Unix.set_nonblock s.fd;
      let frame = ref "" and off = ref 0 in
      while (not !closed) && !n < 50000 && view_size b = 2 && C.closed b.conn = None do
        if !off = String.length !frame then begin
          incr n;
          incr req;
          frame := Wire.encode_request (Wire.Cast { handle = 1; req = !req; payload = small });
          off := 0
        end;
        (match Unix.write_substring s.fd !frame !off (String.length !frame - !off) with
        | k -> off := !off + k
        | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) ->
            if C.closed b.conn = None then ignore (Unix.select [ C.fd b.conn ] [] [] 0.001)
        | exception Unix.Unix_error _ -> closed := true);
        ignore (C.step b.conn)
      done;
      Unix.clear_nonblock s.fd;
      check "the client that ignores it is failed out" true
        (until [ b.conn ] (fun () -> view_size b = 1));
      (match List.rev (fst (drain s)) with
      | Wire.Error { code = Wire.Overloaded; reason; _ } :: _ ->
          check ("at the cap: " ^ reason) true (Astring_like.contains reason "(--max-queue)")
      | e :: _ ->
          Alcotest.fail
            (match e with
            | Wire.Refused _ -> "ends with refused"
            | Wire.Cast_up _ -> "ends with cast"
            | Wire.Flow _ -> "ends with flow"
            | Wire.Error { reason; _ } -> reason
            | _ -> "ends with other")
      | [] -> Alcotest.fail "its stream does not end with ERROR overloaded: nothing");
      check "after more than the casts that fill the cap with deliveries" true (!req - before > 100);
      (match !(b.views) with
      | v :: _ -> check "b's next view has s left" true (v.C.left = [ sid ])
      | [] -> ());
      check "b still casts" true (C.cast b.m "after" = Ok ());
      close_raw s;
      C.close b.conn)

(* Backpressure and members: while a client is slowed (the daemon's
   counter slow_on says when), a member it joins is told FLOW 1 after its
   first VIEW; once the client has read enough, every member of it is told
   FLOW 0, each once. *)
let test_backpressure_members () =
  with_daemon ~args:[ "--max-queue"; "8000000"; "--max-frame"; "70000" ] (addr 35) (fun d ->
      let b = member d "g" in
      let s = raw d in
      hello_v2 s "slow";
      ignore (raw_join s "g");
      check "a view of two" true (until [ b.conn ] (fun () -> view_size b = 2));
      let err = Filename.concat d.dir "consortd.err" in
      let lines () =
        try
          let ic = open_in_bin err in
          let t = really_input_string ic (in_channel_length ic) in
          close_in ic;
          List.filter (fun l -> Astring_like.contains l "counters ") (String.split_on_char '\n' t)
        with Sys_error _ -> []
      in
      (* Counters now, from a SIGUSR1. *)
      let counters () =
        let n = List.length (lines ()) in
        Unix.kill d.pid Sys.sigusr1;
        ignore (until ~timeout:5. [ b.conn ] (fun () -> List.length (lines ()) > n));
        match List.rev (lines ()) with l :: _ -> l | [] -> ""
      in
      (* b casts, s reads nothing, until the daemon slows s. *)
      let payload = String.make 60000 'p' in
      let k = ref 0 and slowed = ref false in
      while (not !slowed) && !k < 250 do
        incr k;
        check "b's cast taken" true (C.cast b.m payload = Ok ());
        ignore
          (until ~timeout:5. [ b.conn ] (fun () ->
               List.length (List.filter (fun (o, _) -> o = C.me b.m) !(b.casts)) >= !k));
        if !k mod 4 = 0 then slowed := Astring_like.contains (counters ()) "slow_on=1"
      done;
      check "s is slowed" true !slowed;
      put s
        (Wire.encode_request
           (Wire.Join { handle = 2; group = "h"; props = ""; params = ""; flags = 0; peers = [] }));
      (* s reads everything now, until both members are told FLOW 0 (and
         what comes within a second after). *)
      let rec read_all acc =
        let told h =
          List.exists
            (function Wire.Flow { handle; blocked = false } -> handle = h | _ -> false)
            acc
        in
        match next ~timeout:(if told 1 && told 2 then 1. else 20.) s with
        | `Event e -> read_all (e :: acc)
        | `Closed -> (List.rev acc, true)
        | `Timeout -> (List.rev acc, false)
      in
      let evs, ended = read_all [] in
      check "s is not failed out" false ended;
      check "s got no error" true (List.for_all (function Wire.Error _ -> false | _ -> true) evs);
      let flows h =
        List.filter_map
          (function Wire.Flow { handle; blocked } when handle = h -> Some blocked | _ -> None)
          evs
      in
      Alcotest.(check (list bool)) "member 1: FLOW 1, then FLOW 0" [ true; false ] (flows 1);
      Alcotest.(check (list bool))
        "member 2, joined meanwhile: FLOW 1, then FLOW 0" [ true; false ] (flows 2);
      let rec after_view = function
        | Wire.View { handle = 2; _ } :: rest -> rest
        | _ :: rest -> after_view rest
        | [] -> []
      in
      check "member 2's FLOW 1 follows its first VIEW" true
        (match
           List.find_opt
             (function Wire.Flow { handle = 2; _ } -> true | _ -> false)
             (after_view evs)
         with
        | Some (Wire.Flow { blocked = true; _ }) -> true
        | _ -> false);
      check "and the counters say it ended" true (Astring_like.contains (counters ()) "slow_off=1");
      close_raw s;
      C.close b.conn)

(* Spinning (consortd --spin-us, Consort_client.set_spin): casts flow,
   and a step that spins returns as soon as what it waits for is read
   (not when its timeout ends). *)
let test_spin () =
  with_daemon ~args:[ "--spin-us"; "200" ] (addr 88) (fun d ->
      C.set_spin 5000;
      Fun.protect
        ~finally:(fun () -> C.set_spin 0)
        (fun () ->
          let a = member d "g" and b = member d "g" in
          check "a view of two" true
            (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
          let slow = ref 0 in
          for i = 1 to 20 do
            check "cast" true (C.cast a.m (Printf.sprintf "s%d" i) = Ok ());
            let t0 = Unix.gettimeofday () in
            let rec wait () =
              if List.length !(b.casts) < i && Unix.gettimeofday () -. t0 < 10. then begin
                ignore (C.step ~timeout:2. b.conn);
                wait ()
              end
            in
            wait ();
            if Unix.gettimeofday () -. t0 > 1. then incr slow
          done;
          Alcotest.(check (list string))
            "b got a's casts in order"
            (List.init 20 (fun i -> Printf.sprintf "s%d" (i + 1)))
            (List.rev_map snd !(b.casts));
          Alcotest.(check int) "no step waited out its timeout with the cast read" 0 !slow;
          C.close a.conn;
          C.close b.conn))

(* A client that closes its connection without leaving: its members are
   failed out (a leave), the others see a view without them at once. *)
let test_client_closes () =
  with_daemon (addr 60) (fun d ->
      let a = member d "g" and b = member d "g" and c = member d "g" in
      check "a view of three" true
        (until [ a.conn; b.conn; c.conn ] (fun () -> view_size a = 3 && view_size c = 3));
      C.close c.conn;
      (* Well within the failure detector's 5 s: a leave, not a suspicion. *)
      let t0 = Unix.gettimeofday () in
      check "failed out" true
        (until ~timeout:4. [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      check "quickly" true (Unix.gettimeofday () -. t0 < 4.);
      C.close a.conn;
      C.close b.conn)

(* TCP on loopback, and a daemon with a key (and so a token for TCP):
   members sealed (Auth, Privacy) form a group and deliver; without a key,
   Auth is refused. *)
let test_tcp_and_key () =
  let dir = tmpdir () in
  let key = Filename.concat dir "k.key" and token = Filename.concat dir "t.token" in
  List.iter
    (fun f ->
      match Consort_seal.Seal.write_key f (Consort_seal.Seal.generate ()) with
      | Ok () -> ()
      | Error e -> Alcotest.fail e)
    [ key; token ];
  let tcp = addr 79 in
  let d = start ~dir ~args:[ "--tcp"; tcp; "--key"; key; "--token"; token ] ~bind:(addr 70) () in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf dir)
    (fun () ->
      let props = "vsync,Privacy" in
      let a = member ~address:("tcp:" ^ tcp) ~token_file:token ~props d "sealed"
      and b = member ~props d "sealed" in
      check "a sealed view of two, one client over TCP" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      Alcotest.(check bool) "cast" true (C.cast a.m "secret" = Ok ());
      check "delivered" true
        (until [ a.conn; b.conn ] (fun () -> List.mem (C.me a.m, "secret") !(b.casts)));
      C.close a.conn;
      C.close b.conn);
  with_daemon (addr 75) (fun d ->
      let conn = match C.connect d.socket with Ok c -> c | Error e -> Alcotest.fail e in
      let props = "vsync,Auth" in
      (match C.join ~props conn ~group:"g" deaf with
      | Error (C.Refused (Wire.Join_failed, reason)) ->
          check "says --key" true (Astring_like.contains reason "--key")
      | _ -> Alcotest.fail "Auth without a daemon key: join-failed");
      C.close conn)

(* A connection that never says HELLO is closed after --hello-timeout;
   SIGTERM: the members leave (the other daemon's member sees them go as
   a leave), the socket is removed, and the daemon exits with 0. *)
let test_idle_and_sigterm () =
  let d =
    start
      ~args:
        [
          "--hello-timeout";
          "0.5";
          "--peers";
          Printf.sprintf "127.0.0.1:%d-%d" (base + 90) (base + 91);
        ]
      ~bind:(addr 80) ()
  in
  let d2 =
    start
      ~args:[ "--peers"; Printf.sprintf "127.0.0.1:%d-%d" (base + 80) (base + 81) ]
      ~bind:(addr 90) ()
  in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      stop d2;
      rm_rf d.dir;
      rm_rf d2.dir)
    (fun () ->
      let r = raw d in
      (match next ~timeout:5. r with
      | `Event (Wire.Error { code = Wire.Not_hello; reason; _ }) ->
          check "says why" true (String.length reason > 0)
      | _ -> Alcotest.fail "an idle connection: not-hello after the timeout");
      check "closed" true (next r = `Closed);
      close_raw r;
      let a = member d "g" and b = member d2 "g" in
      check "a view of two over two daemons" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      Unix.kill d.pid Sys.sigusr1;
      let read () = daemon_stderr d in
      let deadline = Unix.gettimeofday () +. 5. in
      while
        (not (Astring_like.contains (read ()) "counters ")) && Unix.gettimeofday () < deadline
      do
        Unix.sleepf 0.02
      done;
      let line = read () in
      check "SIGUSR1: one line of counters" true
        (Astring_like.contains line "counters clients=1 members=1"
        && Astring_like.contains line "failed_not-hello=1");
      Unix.kill d.pid Sys.sigterm;
      check "b sees a leave" true (until ~timeout:5. [ b.conn ] (fun () -> view_size b = 1));
      (match !(b.views) with
      | v :: _ ->
          Alcotest.(check (list (pair string string))) "as a leave" [ (C.me a.m, "left") ] v.why
      | [] -> ());
      let deadline = Unix.gettimeofday () +. 5. in
      let rec wait () =
        match Unix.waitpid [ Unix.WNOHANG ] d.pid with
        | 0, _ when Unix.gettimeofday () < deadline ->
            Unix.sleepf 0.02;
            wait ()
        | 0, _ -> Alcotest.fail "the daemon did not exit after SIGTERM"
        | _, st -> st
      in
      Alcotest.(check bool) "exit status 0" true (wait () = Unix.WEXITED 0);
      check "its socket is removed" false (Sys.file_exists d.socket);
      C.close a.conn;
      C.close b.conn)

(* SUSPECT and SWITCH through the daemon: a member suspected by another
   is excluded (with the reason); a switch to total order installs a view
   on the new stack, and casts go on. *)
let test_suspect_switch () =
  with_daemon (addr 95) (fun d ->
      let a = member d "g" and b = member d "g" and c = member d "g" in
      let conns = [ a.conn; b.conn; c.conn ] in
      check "a view of three" true
        (until conns (fun () -> view_size a = 3 && view_size b = 3 && view_size c = 3));
      C.suspect a.m [ C.me c.m ];
      check "the suspected member is excluded" true
        (until conns (fun () -> view_size a = 2 && view_size b = 2));
      (match !(a.views) with
      | v :: _ ->
          check "named with its reason" true
            (match List.assoc_opt (C.me c.m) v.why with
            | Some w -> String.length w > 9 && String.sub w 0 9 = "excluded:"
            | None -> false)
      | [] -> ());
      let views = List.length !(a.views) in
      (match C.switch a.m "vsync,Total" with
      | Ok () -> ()
      | Error (code, reason) -> Alcotest.failf "switch: %s: %s" (Wire.code_name code) reason);
      check "a view on the new stack" true
        (until conns (fun () -> List.length !(a.views) > views && view_size a = 2));
      (match C.switch a.m "vsync,Xfer" with
      | Error (Wire.Bad_switch, reason) -> check "one line" true (not (String.contains reason '\n'))
      | _ -> Alcotest.fail "a switch that adds state transfer: bad-switch");
      (* Evs: no upcall carries transitional views; refused at JOIN and SWITCH. *)
      let evs = "vsync,Evs" in
      (match C.switch a.m evs with
      | Error (Wire.Bad_switch, reason) ->
          check "says transitional" true (Astring_like.contains reason "transitional")
      | _ -> Alcotest.fail "a switch to Evs: bad-switch");
      (match C.join ~props:evs a.conn ~group:"e" deaf with
      | Error (C.Refused (Wire.Bad_props, reason)) ->
          check "says transitional" true (Astring_like.contains reason "transitional")
      | _ -> Alcotest.fail "a join with Evs: bad-props");
      (* Migrate and Cltsvr: no operation of the protocol uses them; refused at JOIN. *)
      List.iter
        (fun (props, word) ->
          match C.join ~props a.conn ~group:"m" deaf with
          | Error (C.Refused (Wire.Bad_props, reason)) ->
              check ("names " ^ word) true (Astring_like.contains reason word)
          | _ -> Alcotest.failf "a join with %s: bad-props" props)
        [ ("vsync,Migrate", "Migrate"); ("vsync,Total,Cltsvr", "Cltsvr") ];
      Alcotest.(check bool) "cast after the switch" true (C.cast b.m "ordered" = Ok ());
      check "delivered" true (until conns (fun () -> List.mem (C.me b.m, "ordered") !(a.casts)));
      List.iter C.close conns)

(* Churn leaves nothing behind: 200 clients join beside a member and are
   failed out (closed, or dead mid-frame); then the daemon holds one
   client, one member, its descriptors, and no timer per past client. *)
(* A client that closes its connection between frames has not failed: the
   daemon logs its going as a close; one that closes inside a frame is failed
   out. *)
let test_clean_close () =
  with_daemon ~args:[ "--verbose" ] (addr 54) (fun d ->
      let read () = daemon_stderr d in
      let wait_for what =
        let deadline = Unix.gettimeofday () +. 5. in
        while (not (Astring_like.contains (read ()) what)) && Unix.gettimeofday () < deadline do
          Unix.sleepf 0.02
        done;
        check ("logged: " ^ what) true (Astring_like.contains (read ()) what)
      in
      let r = raw d in
      hello r;
      (match next r with `Event (Wire.Hello_ok _) -> () | _ -> Alcotest.fail "no HELLO_OK");
      close_raw r;
      wait_for "closed its connection";
      check "a clean close is not a failure" false
        (Astring_like.contains (read ()) "failed out: closed");
      let r = raw d in
      hello r;
      ignore (next r);
      let f = Wire.encode_request (Wire.Cast { handle = 1; req = 9; payload = "half" }) in
      put r (String.sub f 0 7);
      close_raw r;
      wait_for "failed out: closed")

(* consortd's JSON log: a record written on behalf of one of its members (its
   group library's, as it installs a view or leaves) carries that member's
   [member], [group] and [view] fields, whichever member's code ran before;
   the daemon's own records (a client's close) carry none. Four members of
   two groups, each through its own client; one client closes. *)
let test_json_log_fields () =
  with_daemon ~args:[ "--log-level"; "info"; "--log-format"; "json" ] (addr 56) (fun d ->
      let x1 = member d "ga" and y1 = member d "gb" in
      let x2 = member d "ga" and y2 = member d "gb" in
      let all = [ x1; x2; y1; y2 ] in
      let conns = List.map (fun r -> r.conn) all in
      check "two views of two" true
        (until conns (fun () -> List.for_all (fun r -> view_size r = 2) all));
      C.close x1.conn;
      check "ga goes on without x1" true (until [ x2.conn ] (fun () -> view_size x2 = 1));
      let field j k = match j with `Assoc l -> List.assoc_opt k l | _ -> None in
      let str j k = match field j k with Some (`String s) -> Some s | _ -> None in
      let records () =
        List.filter_map
          (fun l ->
            if l = "" then None
            else
              match Yojson.Safe.from_string l with
              | `Assoc _ as j ->
                  List.iter
                    (fun k -> if str j k = None then Alcotest.failf "no %s in %s" k l)
                    [ "t"; "level"; "src"; "msg" ];
                  Some j
              | _ -> Alcotest.failf "not a JSON object: %S" l
              | exception Yojson.Json_error e -> Alcotest.failf "not JSON: %S (%s)" l e)
          (String.split_on_char '\n' (daemon_stderr d))
      in
      (* x1's leave is logged by the time the others installed the view
         without it, but to be sure: *)
      let deadline = Unix.gettimeofday () +. 5. in
      let left r =
        List.exists (fun j -> str j "msg" = Some (C.me r.m ^ ": left the group")) (records ())
      in
      while (not (left x1)) && Unix.gettimeofday () < deadline do
        Unix.sleepf 0.02
      done;
      let rs = records () in
      let who =
        List.map
          (fun (r, g) -> (C.me r.m, (g, List.map (fun v -> v.C.vid) !(r.views))))
          [ (x1, "ga"); (x2, "ga"); (y1, "gb"); (y2, "gb") ]
      in
      let prefixed msg =
        List.find_opt
          (fun (id, _) ->
            let p = id ^ ": " in
            String.length msg >= String.length p && String.sub msg 0 (String.length p) = p)
          who
      in
      let seen = Hashtbl.create 4 in
      List.iter
        (fun j ->
          let line = Yojson.Safe.to_string j in
          let msg = Option.get (str j "msg") in
          match prefixed msg with
          | Some (id, (g, vids)) -> (
              Alcotest.(check (option string)) ("group of " ^ line) (Some g) (str j "group");
              (* Before its first view (the record of its install) a member
                 is known by its group alone. *)
              match (str j "member", str j "view") with
              | None, None when not (Hashtbl.mem seen id) ->
                  if not (Astring_like.contains msg ": installed view") then
                    Alcotest.failf "no member, no view: %s" line
              | m, v ->
                  Hashtbl.replace seen id ();
                  Alcotest.(check (option string)) ("member of " ^ line) (Some id) m;
                  if not (List.exists (fun x -> Some x = v) vids) then
                    Alcotest.failf "not a view of %s: %s" id line)
          | None ->
              if str j "src" = Some "consort.daemon" then
                List.iter
                  (fun k ->
                    if field j k <> None then
                      Alcotest.failf "the daemon's record with %s: %s" k line)
                  [ "member"; "group"; "view" ])
        rs;
      check "x1's leave logged" true (left x1);
      check "the daemon's record of x1's client" true
        (List.exists
           (fun j ->
             str j "src" = Some "consort.daemon"
             && Astring_like.contains (Option.get (str j "msg")) "closed its connection")
           rs);
      List.iter (fun (id, _) -> check ("records of " ^ id) true (Hashtbl.mem seen id)) who;
      List.iter (fun r -> C.close r.conn) [ x2; y1; y2 ])

(* consortd's JSON log stays JSON when the rate limit drops records: the
   count of what was dropped is a record of the daemon's own (no member,
   group or view), and every refusal is either logged or counted. 300
   clients over TCP present a wrong token (one warning each, past 50 a
   second), then, over a second later, one more. *)
let test_json_log_rate_limit () =
  let dir = tmpdir () in
  let token = Filename.concat dir "t.token" in
  (match Consort_seal.Seal.write_key token (Consort_seal.Seal.generate ()) with
  | Ok () -> ()
  | Error e -> Alcotest.fail e);
  let tcp = addr 67 in
  let port = base + 67 in
  let d =
    start ~dir ~args:[ "--tcp"; tcp; "--token"; token; "--log-format"; "json" ] ~bind:(addr 58) ()
  in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf dir)
    (fun () ->
      let bad () =
        let fd = Unix.socket Unix.PF_INET Unix.SOCK_STREAM 0 in
        Fun.protect
          ~finally:(fun () -> try Unix.close fd with Unix.Unix_error _ -> ())
          (fun () ->
            Unix.connect fd (Unix.ADDR_INET (Unix.inet_addr_loopback, port));
            let r = { fd; fr = Wire.framer ~max:(1 lsl 20); buf = Bytes.create 4096 } in
            put r
              (Wire.encode_request
                 (Wire.Hello
                    { min_version = 1; max_version = 2; name = "bad"; token = "not the token" }));
            let rec drain () =
              match next ~timeout:5. r with `Event _ -> drain () | `Closed | `Timeout -> ()
            in
            drain ())
      in
      for _ = 1 to 300 do
        bad ()
      done;
      Unix.sleepf 1.1;
      bad ();
      let records =
        List.filter_map
          (fun l ->
            if l = "" then None
            else
              match Yojson.Safe.from_string l with
              | `Assoc f -> Some (l, f)
              | _ -> Alcotest.failf "not a JSON object: %S" l
              | exception Yojson.Json_error e -> Alcotest.failf "not JSON: %S (%s)" l e)
          (String.split_on_char '\n' (daemon_stderr d))
      in
      let logged = ref 0 and dropped = ref 0 in
      List.iter
        (fun (l, f) ->
          List.iter
            (fun k ->
              if List.mem_assoc k f then Alcotest.failf "the daemon's record with %s: %s" k l)
            [ "member"; "group"; "view" ];
          match List.assoc_opt "msg" f with
          | Some (`String m) when Astring_like.contains m "over TCP refused" -> incr logged
          | Some (`String m) when Astring_like.contains m "log lines dropped" ->
              dropped := !dropped + Scanf.sscanf m "%d" (fun n -> n)
          | _ -> Alcotest.failf "another record: %s" l)
        records;
      Alcotest.(check int)
        (Printf.sprintf "every refusal logged (%d) or counted as dropped (%d)" !logged !dropped)
        301 (!logged + !dropped))

let test_churn_leaves_nothing () =
  with_daemon ~args:[ "--ports"; "16" ] (addr 97) (fun d ->
      let a = member d "g" in
      let formed = ref 0 in
      for i = 1 to 200 do
        let b = member d "g" in
        if until ~timeout:5. [ a.conn; b.conn ] (fun () -> view_size b = 2) then incr formed;
        ignore (C.cast b.m "x");
        if i mod 2 = 0 then begin
          let f = Wire.encode_request (Wire.Cast { handle = 1; req = 9; payload = "half" }) in
          ignore (Unix.write_substring (C.fd b.conn) f 0 7)
        end;
        C.close b.conn;
        if not (until ~timeout:5. [ a.conn ] (fun () -> view_size a = 1)) then
          Alcotest.failf "client %d was not failed out: the member is still in a's view" i
      done;
      Alcotest.(check int) "every client joined a" 200 !formed;
      check "every one failed out" true (view_size a = 1);
      Unix.kill d.pid Sys.sigusr1;
      let read () = daemon_stderr d in
      ignore (until ~timeout:5. [ a.conn ] (fun () -> Astring_like.contains (read ()) "counters "));
      let line = read () in
      let field k =
        match Astring_like.find line (k ^ "=") with
        | Some i ->
            Scanf.sscanf
              (String.sub line
                 (i + String.length k + 1)
                 (String.length line - i - String.length k - 1))
              "%d" Fun.id
        | None -> -1
      in
      Alcotest.(check int) "clients" 1 (field "clients");
      Alcotest.(check int) "members" 1 (field "members");
      (* The listener, the client, and the member's socket. *)
      Alcotest.(check int) "descriptors watched" 3 (field "watched");
      check
        (Printf.sprintf "timers: %d, none per past client" (field "timers"))
        true
        (field "timers" >= 0 && field "timers" < 20);
      C.close a.conn)

(* A client served by the engine's loop: upcalls dispatched as they come,
   casts made from callbacks sent at once (a ping-pong of 50 rounds). *)
let test_attach () =
  with_daemon (addr 60) (fun d ->
      let a = member d "g" and b = member d "g" in
      check "a view of two" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      C.close a.conn;
      C.close b.conn;
      let loop = Consort_engine.Loop.create () in
      let rounds = ref 0 and views = ref 0 in
      let mk name on_cast =
        let conn = match C.connect ~name d.socket with Ok c -> c | Error e -> Alcotest.fail e in
        C.attach conn loop;
        let me = ref None in
        let cb =
          {
            C.view = (fun v -> if Array.length v.members = 2 then incr views);
            cast =
              (fun ~origin s ->
                match !me with Some m when origin <> C.me m -> on_cast m s | _ -> ());
            send = (fun ~origin:_ _ -> ());
            block = ignore;
            flow = ignore;
            exit = ignore;
          }
        in
        match C.join conn ~group:"loop" cb with
        | Ok m ->
            me := Some m;
            (conn, m)
        | Error e -> Alcotest.fail (Fmt.str "%a" C.pp_join_error e)
      in
      let _, pinger =
        mk "ping" (fun m s ->
            incr rounds;
            if !rounds < 50 then C.cast_async m s)
      in
      let _ = mk "pong" (fun m s -> C.cast_async m s) in
      Consort_engine.Loop.run loop
        ~until:(fun () -> !views >= 2)
        ~timeout:(Consort.Time.of_ms 15_000);
      check "views through the loop" true (!views >= 2);
      C.cast_async pinger "ball";
      Consort_engine.Loop.run loop
        ~until:(fun () -> !rounds >= 50)
        ~timeout:(Consort.Time.of_ms 15_000);
      Alcotest.(check int) "50 rounds, no polling" 50 !rounds)

(* Primary: a member alone, with three votes expected, is not in a primary
   view; its cast is refused with code not-primary (not-member before),
   which the OCaml client gives back as Group.Not_primary. *)
let test_not_primary () =
  with_daemon (addr 52) (fun d ->
      let props = "vsync,Primary" in
      let a = member ~props ~params:"primary.expected=3" d "p" in
      check "its first view" true (until [ a.conn ] (fun () -> view_size a = 1));
      (match C.cast a.m "x" with
      | Error (C.Not_primary q) ->
          if q = "" || Astring_like.contains q "member's view" then
            Alcotest.failf "the quorum in the reason: %S" q
      | Ok () -> Alcotest.fail "a cast outside a primary view was taken"
      | Error e -> Alcotest.failf "refused as %a" C.pp_error e);
      Alcotest.(check string) "code 17" "not-primary" (Wire.code_name (Wire.code_of_int 17));
      C.close a.conn)

(* The daemon's operations: its control socket answers status, counters,
   cast and send for the members it holds, by group; its metrics port serves
   the Prometheus text; its pcap file records the members' datagrams. *)
let test_ops () =
  let dir = tmpdir () in
  let ctl = Filename.concat dir "d.ctl" and pcap = Filename.concat dir "d.pcap" in
  let metrics = addr 44 in
  let d =
    start ~dir
      ~args:[ "--ports"; "5"; "--control"; ctl; "--metrics"; metrics; "--pcap"; pcap ]
      ~bind:(addr 45) ()
  in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf dir)
    (fun () ->
      let a = member d "g" and b = member d "g" and h = member d "h" in
      check "a view of two in g" true
        (until [ a.conn; b.conn; h.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      let ask line =
        (* The daemon answers from its loop: the clients are stepped meanwhile. *)
        match Consort_ops.Serve.request (Unix.ADDR_UNIX ctl) line with
        | Ok j -> Yojson.Safe.from_string j
        | Error e -> Alcotest.fail e
      in
      let field k = function `Assoc l -> List.assoc_opt k l | _ -> None in
      let members j = match field "members" j with Some (`List l) -> l | _ -> [] in
      let str k j = match field k j with Some (`String s) -> s | _ -> "" in
      let st = ask "status" in
      Alcotest.(check int) "status: every member held" 3 (List.length (members st));
      Alcotest.(check (option int))
        "status: the daemon's count" (Some 3)
        (match Option.bind (field "daemon" st) (field "members") with
        | Some (`Int n) -> Some n
        | _ -> None);
      let g = ask "group g status" in
      Alcotest.(check (list string))
        "group g: a and b"
        (List.sort compare [ C.me a.m; C.me b.m ])
        (List.sort compare (List.map (str "me") (members g)));
      List.iter
        (fun m -> Alcotest.(check int) "each in a view of two" 2 (List.length (members m)))
        (members g);
      let ctr = ask "group h counters" in
      (match members ctr with
      | [ m ] ->
          Alcotest.(check string) "counters: h's member" (C.me h.m) (str "me" m);
          check "counters per layer" true
            (match field "counters" m with Some c -> field "group" c <> None | None -> false)
      | _ -> Alcotest.fail "counters of group h: one member");
      check "the daemon's own counters" true
        (match Option.bind (field "daemon" ctr) (field "joins") with
        | Some (`Int 3) -> true
        | _ -> false);
      Alcotest.(check string)
        "a cast needs a group when there are two" "which group? (--group NAME: g, h)"
        (str "error" (ask "cast x"));
      Alcotest.(check string) "cast through g" "" (str "error" (ask "group g cast from ops"));
      Alcotest.(check string)
        "send through g" ""
        (str "error" (ask (Printf.sprintf "group g send %s psst" (C.me b.m))));
      check "the cast reaches g's members, the send its one" true
        (until [ a.conn; b.conn; h.conn ] (fun () ->
             List.exists (fun (_, s) -> s = "from ops") !(a.casts)
             && List.exists (fun (_, s) -> s = "from ops") !(b.casts)
             && List.exists (fun (_, s) -> s = "psst") !(b.sends)));
      Alcotest.(check (list (pair string string))) "h hears nothing" [] !(h.casts);
      check "an unknown request is refused" true (str "error" (ask "leave") <> "");
      (* A member whose client keeps a member log (REPORT) is never used for
         an operator's message: it would be missing from the log. *)
      let logger =
        match C.connect ~name:"logger" d.socket with Ok c -> c | Error e -> failwith e
      in
      (match C.join ~on_sent:(fun ~vid:_ _ _ -> ()) logger ~group:"r" deaf with
      | Ok _ -> ()
      | Error e -> Alcotest.failf "join: %a" C.pp_join_error e);
      check "refused through a member that keeps a log" true
        (Astring_like.contains (str "error" (ask "group r cast x")) "member log");
      C.close logger;
      (* Metrics over HTTP. *)
      let body =
        let ip, port =
          match String.split_on_char ':' metrics with
          | [ ip; p ] -> (Unix.inet_addr_of_string ip, int_of_string p)
          | _ -> assert false
        in
        let s = Unix.socket Unix.PF_INET Unix.SOCK_STREAM 0 in
        Unix.connect s (Unix.ADDR_INET (ip, port));
        let req = "GET /metrics HTTP/1.0\r\n\r\n" in
        ignore (Unix.write_substring s req 0 (String.length req));
        let b = Buffer.create 4096 and chunk = Bytes.create 4096 in
        let rec go () =
          match Unix.read s chunk 0 4096 with
          | 0 -> ()
          | n ->
              Buffer.add_subbytes b chunk 0 n;
              go ()
        in
        go ();
        Unix.close s;
        Buffer.contents b
      in
      List.iter
        (fun sub -> check ("metrics: " ^ sub) true (Astring_like.contains body sub))
        [
          "200 OK";
          "consortd_members 3";
          "# TYPE consortd_events_total counter";
          Printf.sprintf "consort_view_members{group=\"g\",member=\"%s\"} 2"
            (List.hd (String.split_on_char '#' (C.me a.m)));
          Printf.sprintf "consort_member_info{group=\"g\",member=\"%s\",id=\"%s\"} 1"
            (List.hd (String.split_on_char '#' (C.me a.m)))
            (C.me a.m);
          "# TYPE consort_layer_events_total counter";
          "# TYPE consort_layer_gauge gauge";
        ];
      C.close a.conn;
      C.close b.conn;
      C.close h.conn;
      stop d;
      (* The pcap file: its header, then records of the members' datagrams. *)
      let ic = open_in_bin pcap in
      let data = really_input_string ic (in_channel_length ic) in
      close_in ic;
      check "pcap: header and records" true (String.length data > 24 + 16 + 28);
      Alcotest.(check int32) "pcap magic" 0xa1b2c3d4l (String.get_int32_le data 0);
      Alcotest.(check int32) "raw IP" 101l (String.get_int32_le data 20);
      let sport = String.get_uint16_be data (24 + 16 + 20) in
      check "from a member's port" true (sport >= base + 45 && sport < base + 50))

(* doc/protocol.md against the code: every message of its tables is the
   frame Wire writes (type byte, fields in order, their types), every frame
   Wire writes has its row, the error codes are the table's, and the
   versions and limits are the ones the daemon uses. *)
let test_protocol_doc () =
  let doc =
    let here = Filename.dirname Sys.executable_name in
    let f =
      List.find Sys.file_exists [ Filename.concat here "../../doc/protocol.md"; "doc/protocol.md" ]
    in
    let ic = open_in_bin f in
    let s = really_input_string ic (in_channel_length ic) in
    close_in ic;
    s
  in
  let lines = String.split_on_char '\n' doc in
  let cells l = List.map String.trim (String.split_on_char '|' l) in
  let unquote c = String.concat "" (String.split_on_char '`' c) in
  (* Rows of the message tables: type byte, name, [field, type] list. *)
  let rows =
    List.filter_map
      (fun l ->
        match cells l with
        | [ ""; ty; name; fields; "" ] when String.length ty > 3 && String.sub ty 0 3 = "`0x" ->
            let ty = int_of_string (unquote ty) in
            (* Without the remarks in parentheses: "kind: u8 (0 cast, 1 send)". *)
            let fields =
              let b = Buffer.create 64 and depth = ref 0 in
              String.iter
                (fun c ->
                  if c = '(' then incr depth
                  else if c = ')' then decr depth
                  else if !depth = 0 then Buffer.add_char b c)
                fields;
              Buffer.contents b
            in
            let fields =
              String.split_on_char ',' fields
              |> List.map (fun f ->
                     let f = String.trim (unquote f) in
                     match String.index_opt f ':' with
                     | Some i ->
                         let t = String.trim (String.sub f (i + 1) (String.length f - i - 1)) in
                         let t = List.hd (String.split_on_char ' ' t) in
                         (String.sub f 0 i, t)
                     | None -> Alcotest.failf "protocol.md: field %S has no type" f)
            in
            Some (ty, (name, fields))
        | _ -> None)
      lines
  in
  Alcotest.(check bool)
    "protocol.md: 9 requests and 13 replies and upcalls" true
    (List.length rows = 22);
  (* Each frame of the code, with its doc name and its fields' values in order. *)
  let i n = `I n and s x = `S x and l x = `L x in
  let requests =
    [
      ( "HELLO",
        Wire.Hello { min_version = 1; max_version = 2; name = "n"; token = "t" },
        [ i 1; i 2; s "n"; s "t" ] );
      ( "JOIN",
        Wire.Join
          { handle = 3; group = "g"; props = "vsync"; params = "a=1"; flags = 1; peers = [ "p" ] },
        [ i 3; s "g"; s "vsync"; s "a=1"; i 1; l [ "p" ] ] );
      ("LEAVE", Wire.Leave { handle = 4 }, [ i 4 ]);
      ("CAST", Wire.Cast { handle = 5; req = 6; payload = "x" }, [ i 5; i 6; s "x" ]);
      ( "SEND",
        Wire.Send { handle = 5; req = 7; dst = "d"; payload = "y" },
        [ i 5; i 7; s "d"; s "y" ] );
      ("SUSPECT", Wire.Suspect { handle = 8; ids = [ "a"; "b" ] }, [ i 8; l [ "a"; "b" ] ]);
      ("BLOCK_OK", Wire.Block_ok { handle = 9 }, [ i 9 ]);
      ( "SWITCH",
        Wire.Switch { handle = 10; props = "vsync,Total"; params = "" },
        [ i 10; s "vsync,Total"; s "" ] );
      ("PING", Wire.Ping { cookie = 11 }, [ i 11 ]);
    ]
    |> List.map (fun (n, r, f) -> (n, Wire.encode_request r, f))
  in
  let events =
    [
      ( "HELLO_OK",
        Wire.Hello_ok { version = 2; max_frame = 1000; max_queue = 2000; server = "d" },
        [ i 2; i 1000; i 2000; s "d" ] );
      ("OK", Wire.Ok { handle = 1; value = 1 lsl 40; info = "i" }, [ i 1; i (1 lsl 40); s "i" ]);
      ("ERROR", Wire.Error { handle = 2; code = Wire.Too_big; reason = "r" }, [ i 2; i 3; s "r" ]);
      ("PONG", Wire.Pong { cookie = 12 }, [ i 12 ]);
      ( "VIEW",
        Wire.View
          {
            handle = 3;
            vid = "v";
            ltime = 4;
            rank = 1;
            coordinator = "c";
            members = [ "c"; "m" ];
            joined = [ "m" ];
            left = [ "o" ];
            why = [ "left" ];
          },
        [ i 3; s "v"; i 4; i 1; s "c"; l [ "c"; "m" ]; l [ "m" ]; l [ "o" ]; l [ "left" ] ] );
      ("CAST", Wire.Cast_up { handle = 5; origin = "o"; payload = "p" }, [ i 5; s "o"; s "p" ]);
      ("SEND", Wire.Send_up { handle = 5; origin = "o"; payload = "q" }, [ i 5; s "o"; s "q" ]);
      ("BLOCK", Wire.Block { handle = 6 }, [ i 6 ]);
      ("FLOW", Wire.Flow { handle = 7; blocked = true }, [ i 7; i 1 ]);
      ("EXIT", Wire.Exit { handle = 8 }, [ i 8 ]);
      ( "SENT",
        Wire.Sent { handle = 9; req = 10; kind = `Send; view = "v" },
        [ i 9; i 10; i 1; s "v" ] );
      ("LOST", Wire.Lost { handle = 9; req = 11; reason = "gone" }, [ i 9; i 11; s "gone" ]);
      ( "REFUSED",
        Wire.Refused { handle = 9; req = 12; code = Wire.Flow_control; reason = "wait" },
        [ i 9; i 12; i 4; s "wait" ] );
    ]
    |> List.map (fun (n, e, f) -> (n, Wire.encode_event e, f))
  in
  (* Reads a frame's fields as the doc's row says they are. *)
  let read_fields frame fields =
    let p = ref 5 in
    let int n =
      let v = ref 0 in
      for k = 0 to n - 1 do
        v := (!v lsl 8) lor Char.code frame.[!p + k]
      done;
      p := !p + n;
      !v
    in
    let str () =
      let n = int 4 in
      let x = String.sub frame !p n in
      p := !p + n;
      x
    in
    let vals =
      List.map
        (fun (name, t) ->
          match t with
          | "u8" -> `I (int 1)
          | "u16" -> `I (int 2)
          | "u32" -> `I (int 4)
          | "u64" -> `I (int 8)
          | "str" -> `S (str ())
          | "list" -> `L (List.init (int 4) (fun _ -> str ()))
          | t -> Alcotest.failf "protocol.md: field %s has type %S" name t)
        fields
    in
    if !p <> String.length frame then
      Alcotest.failf "protocol.md: %d bytes of the frame left over" (String.length frame - !p);
    vals
  in
  let check_frames samples =
    List.iter
      (fun (name, frame, expected) ->
        let ty = Char.code frame.[4] in
        match List.assoc_opt ty rows with
        | None -> Alcotest.failf "protocol.md has no row for type 0x%02x (%s)" ty name
        | Some (doc_name, fields) ->
            Alcotest.(check string) (Printf.sprintf "name of 0x%02x" ty) name doc_name;
            Alcotest.(check int)
              (name ^ ": the length prefix")
              (String.length frame - 4)
              (Int32.to_int (String.get_int32_be frame 0));
            if read_fields frame fields <> expected then
              Alcotest.failf "protocol.md: %s's fields are not what Wire writes" name)
      samples
  in
  check_frames requests;
  check_frames events;
  Alcotest.(check int)
    "every row is a frame of the code"
    (List.length requests + List.length events)
    (List.length rows);
  (* The error codes. *)
  let codes =
    List.filter_map
      (fun l ->
        match cells l with
        | [ ""; n; name; _; "" ] when int_of_string_opt n <> None ->
            Some (int_of_string n, unquote name)
        | _ -> None)
      lines
  in
  Alcotest.(check int) "18 error codes" 18 (List.length codes);
  List.iter
    (fun (n, name) ->
      Alcotest.(check string)
        (Printf.sprintf "code %d" n) name
        (Wire.code_name (Wire.code_of_int n));
      Alcotest.(check int) (name ^ " round trip") n (Wire.code_to_int (Wire.code_of_int n)))
    codes;
  (* Versions and the limits' defaults. *)
  let has sub = Astring_like.contains doc sub in
  check "the title names the versions" true
    (has (Printf.sprintf "versions %d and %d" Wire.min_version Wire.version));
  let d = Consort_daemon.Server.default in
  check "max_frame 1 MiB + 1 KiB" true (d.max_frame = (1 lsl 20) + 1024 && has "1 MiB + 1 KiB");
  check "max_queue 8 MiB" true (d.max_queue = 8 lsl 20 && has "default 8 MiB");
  check "max_queued 64 MiB" true (d.max_queued = 64 lsl 20 && has "(default 64 MiB)");
  check "max_clients" true (has (Printf.sprintf "`--max-clients` (%d)" d.max_clients));
  check "max_members" true (has (Printf.sprintf "`--max-members` (%d)" d.max_members));
  check "hello timeout" true
    (has (Printf.sprintf "`--hello-timeout` seconds (%.0f)" d.hello_timeout));
  check "a client's peers" true (has "at most 64 addresses")

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
          Alcotest.test_case "the daemon's cap fails the most unread" `Quick test_global_cap;
          Alcotest.test_case "protocol version 2: no reply to a cast taken" `Quick test_version2;
          Alcotest.test_case "backpressure: a slow client that obeys FLOW stays" `Quick
            test_backpressure;
          Alcotest.test_case "backpressure: every member told, a new one included" `Quick
            test_backpressure_members;
          Alcotest.test_case "spinning daemon and client" `Quick test_spin;
          Alcotest.test_case "a client closes without leaving" `Quick test_client_closes;
          Alcotest.test_case "TCP on loopback, and a key" `Quick test_tcp_and_key;
          Alcotest.test_case "an idle connection; SIGTERM" `Quick test_idle_and_sigterm;
          Alcotest.test_case "suspect and switch" `Quick test_suspect_switch;
          Alcotest.test_case "churn leaves nothing behind" `Quick test_churn_leaves_nothing;
          Alcotest.test_case "a client served by the engine's loop" `Quick test_attach;
          Alcotest.test_case "control socket, metrics and pcap" `Quick test_ops;
          Alcotest.test_case "a clean close is logged as a close" `Quick test_clean_close;
          Alcotest.test_case "doc/protocol.md is the code's protocol" `Quick test_protocol_doc;
          Alcotest.test_case "a cast outside a primary view: not-primary" `Quick test_not_primary;
          Alcotest.test_case "JSON log records: member, group, view" `Quick test_json_log_fields;
          Alcotest.test_case "a JSON log under the rate limit" `Quick test_json_log_rate_limit;
        ] );
    ]
