(* The stack under attack: floods, lying peers, off-path guesses; and the
   conformance fixes of RFC 1122, 1337 and 7323, as scripts. *)

let case name ?config ?tol script =
  Alcotest.test_case name `Quick (fun () -> Script.run ?config ?tol script)

let cookies_always = { Tcp.default_config with backlog = 0 }

let cookie_with_timestamps =
  case "SYN cookie: window scale and SACK come back in the timestamp" ~config:cookies_always
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000,sackOK,TS val 100 ecr 0,nop,wscale 7>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460,wscale 3,sackOK,TS val * ecr 100>
0.2   < . 1:1(0) ack 100000 win 1000 <TS val 150 ecr *>   # a wrong cookie
0.2   > R 100000:100000(0)
0.3   < . 1:1(0) ack 1 win 1000 <TS val 200 ecr *>
0.3   expect status connected
0.3   expect state ESTABLISHED
0.3   expect wscale 7 3
0.3   expect mss 524                                 # 536 from the cookie's table, less 12
0.3   expect snd_wnd 128000
0.4   write 1048
0.4   > . 1:525(524) ack 1 <TS val * ecr 200>
0.4   > P. 525:1049(524) ack 1 <TS val * ecr 200>
0.5   < . 1:1(0) ack 1049 win 1000 <TS val 300 ecr *>
0.6   < P. 1:11(10) ack 1049 win 1000 <TS val 400 ecr *>
0.64  > . 1049:1049(0) ack 11 <TS val * ecr 400>
0.7   < P. 21:31(10) ack 1049 win 1000 <TS val 500 ecr *>
0.7   > . 1049:1049(0) ack 11 <TS val * ecr 400,sack 21:31>   # SACK was agreed
|}

let cookie_without_timestamps =
  case "SYN cookie without timestamps: no window scale, no SACK" ~config:cookies_always
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1460,sackOK,nop,wscale 7>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < P. 1:101(100) ack 1 win 65535      # the ACK that completes it carries data
0.2   expect status connected
0.2   expect wscale none none
0.2   expect mss 1460
0.2   expect delivered 100
|}

let cookie_expires =
  case "a SYN cookie is good for two minutes at most" ~config:cookies_always
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1460>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
180   < . 1:1(0) ack 1 win 65535
180   > R 1:1(0)
|}

let mss_clamp =
  case "an MSS of 1 is taken as 48 (tcp_min_snd_mss, CVE-2019-11479)"
    ~config:{ Tcp.default_config with window_scale = false; sack = false; timestamps = false }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < . 1:1(0) ack 1 win 65535
0.2   expect mss 48
0.3   write 96
0.3   > . 1:49(48) ack 1
0.3   > P. 49:97(48) ack 1
|}

let tests = [ cookie_with_timestamps; cookie_without_timestamps; cookie_expires; mss_clamp ]

(* {1 Floods} *)

(* A SYN from a spoofed host, as the wire carries it. *)
let spoofed_syn ~src ~dst ~sport ~dport ~seq =
  let hdr =
    Tcp_packet.v ~src_port:sport ~dst_port:dport ~seq:(Tcp_seq.of_int seq) ~ack:Tcp_seq.zero
      ~flags:{ Tcp_packet.no_flags with syn = true }
      ~window:65535
      ~options:
        Tcp_packet.[ Mss 1460; Sack_permitted; Timestamp { value = seq; echo = 0 }; Window_scale 7 ]
      ()
  in
  let cs = Cstruct.create (Tcp_packet.header_length hdr) in
  Tcp_packet.encode_into hdr cs;
  let init = Mem.pseudo ~src ~dst ~len:(Cstruct.length cs) in
  Tcp_wire.set_checksum cs (Tcp_checksum.finish (Tcp_checksum.sum ~init cs));
  Cstruct.to_string cs

let live_words () =
  Gc.compact ();
  (Gc.stat ()).live_words

(* 100,000 spoofed SYNs to one port: the listener's queue fills, every
   other SYN is answered with a cookie and costs nothing; a real client
   then connects (through a cookie) and transfers. *)
let syn_flood () =
  let n = 100_000 in
  let checked = ref false in
  let prelude net (module B : Node.S) =
    (* The SYN-ACKs to the spoofed hosts go nowhere. *)
    Mem.set_drop net (Some (fun ~src:_ ~dst _ -> dst >= 1000));
    let before = live_words () in
    let rng = Random.State.make [| 7 |] in
    for i = 1 to n do
      let src = 1000 + Random.State.int rng 1_000_000_000 in
      Mem.inject net ~src ~dst:2
        (spoofed_syn ~src ~dst:2
           ~sport:(1024 + (i mod 60000))
           ~dport:80 ~seq:(Random.State.bits rng))
    done;
    let grown = (live_words () - before) * (Sys.word_size / 8) in
    let s = B.T.query B.tcp in
    let backlog = Tcp.default_config.backlog in
    Logs.app (fun m ->
        m "after %d SYNs: %a; heap grew %d KiB; %d lower connections; %d pool segments" n
          Tcp.pp_stats s (grown / 1024) (Mem.connections B.mem)
          (Consort.Pool.in_use (Mem.pool net)));
    Alcotest.(check bool)
      (Fmt.str "half-open connections bounded (%d)" s.active)
      true (s.active <= backlog);
    Alcotest.(check int) "the rest answered with cookies" (n - backlog) s.syn_cookies_sent;
    Alcotest.(check bool)
      (Fmt.str "lower connections bounded (%d)" (Mem.connections B.mem))
      true
      (Mem.connections B.mem <= backlog);
    Alcotest.(check bool)
      (Fmt.str "accounted memory under 1 MiB (%d)" s.memory)
      true
      (s.memory < 1 lsl 20);
    Alcotest.(check bool)
      (Fmt.str "heap grew under 4 MiB (%d KiB)" (grown / 1024))
      true
      (grown < 4 lsl 20);
    Alcotest.(check bool) "pool segments" true (Consort.Pool.in_use (Mem.pool net) <= 2);
    checked := true
  in
  let r = Transfer.run ~prelude (1024 * 1024) in
  Alcotest.(check bool) "flood checks ran" true !checked;
  Alcotest.(check int) "the real client's bytes" (1024 * 1024) r.bytes

let tests =
  tests @ [ Alcotest.test_case "100,000 spoofed SYNs, then a real client" `Quick syn_flood ]

(* {1 A raw peer} *)

(* Host 2 speaks raw segments to a stack on host 1 listening on port 80:
   [inject] sends one, [sent] holds what the stack answered. A raw peer
   made [beside] another talks to the same stack from the next host. *)
type raw = {
  vclock : Clock.Virtual.clock;
  node : (module Node.S);
  inject :
    ?options:Tcp_packet.option_ list -> ?len:int -> ?window:int -> seq:int -> ack:int -> int -> unit;
      (** sequence numbers relative to the peer's ISN, acks to the stack's *)
  sent : (Tcp_packet.t * int) list ref;  (** newest first *)
  write : int -> int;  (** the stack's application writes that many bytes *)
  info : unit -> Tcp.conn_info;
  iss : unit -> int;  (** the stack's initial sequence number *)
  net : Mem.net;
  host : int;
  conns : (int, (unit -> Tcp.conn_info) * (int -> int)) Hashtbl.t;
      (** the stack's connections by peer host: info and write *)
}

let raw ?(config = Tcp.default_config) ?(ts = false) ?(sack = false) ?wscale ?beside () =
  let open Consort in
  let fresh = beside = None in
  let vclock, net, node, conns, host =
    match beside with
    | Some r -> (r.vclock, r.net, r.node, r.conns, r.host + 1)
    | None ->
        let vclock = Clock.Virtual.create () in
        let pool = Pool.create ~name:"raw" () in
        let net = Mem.create_net ~impairments:{ Mem.perfect with delay = 0 } vclock pool in
        (vclock, net, Node.make ~config net pool 1 ~seed:5, Hashtbl.create 4, 2)
  in
  let pool = Mem.pool net in
  let (module N) = node in
  let peer = Mem.attach net host in
  let sent = ref [] in
  let pc =
    Result.get_ok
      (Mem.active_open peer 1 (fun _ ->
           {
             Mem.receive =
               (fun _ p ->
                 (match Tcp_packet.decode (Packet.cstruct p) with
                 | Ok (h, hl) -> sent := (h, Packet.length p - hl) :: !sent
                 | Error e -> Fmt.failwith "malformed: %a" Tcp_packet.pp_error e);
                 Packet.release p);
             status = (fun _ _ -> ());
           }))
  in
  if fresh then
    ignore
      (N.T.passive_open N.tcp { N.T.port = 80; from = None } (fun c ->
           Hashtbl.replace conns
             (fst (N.T.remote c))
             ((fun () -> N.T.info c), fun n -> N.T.write c (Cstruct.create n));
           {
             N.T.receive =
               (fun c p ->
                 N.T.consume c (Packet.length p);
                 Packet.release p);
             status = (fun _ _ -> ());
           }));
  let irs = 1000 in
  let iss = ref 0 in
  let inject ?(options = []) ?(len = 0) ?(window = 65535) ~seq ~ack flags =
    let hdr =
      Tcp_packet.v ~src_port:5000 ~dst_port:80
        ~seq:(Tcp_seq.of_int (irs + seq))
        ~ack:(Tcp_seq.of_int (!iss + ack))
        ~flags:(Tcp_packet.flags_of_int flags) ~window ~options ()
    in
    let n = Tcp_packet.header_length hdr + len in
    let cs =
      Tcp_packet.to_cstruct
        ~pseudo:(Mem.pseudo ~src:host ~dst:1 ~len:n)
        hdr ~payload:(String.make len 'x')
    in
    ignore (Mem.send pc (Packet.of_string pool (Cstruct.to_string cs)));
    Clock.Virtual.advance vclock 0
  in
  let tso = if ts then [ Tcp_packet.Timestamp { value = 1; echo = 0 } ] else [] in
  inject ~seq:0 ~ack:0 Tcp_wire.syn
    ~options:
      ((Tcp_packet.Mss 1000 :: (if sack then [ Tcp_packet.Sack_permitted ] else []))
      @ (match wscale with Some s -> [ Tcp_packet.Window_scale s ] | None -> [])
      @ tso);
  (match !sent with [ (h, _) ] -> iss := Tcp_seq.to_int h.seq | _ -> failwith "no SYN-ACK");
  inject ~seq:1 ~ack:1 Tcp_wire.ack ~options:tso;
  let get () =
    match Hashtbl.find_opt conns host with Some c -> c | None -> failwith "not established"
  in
  {
    vclock;
    node;
    inject;
    sent;
    write = (fun n -> snd (get ()) n);
    info = (fun () -> fst (get ()) ());
    iss = (fun () -> !iss);
    net;
    host;
    conns;
  }

(* Challenge ACKs per second and connection stay within the budget, and the
   budget varies from second to second. *)
let challenge_budget () =
  let limit = 10 in
  let r =
    raw ~config:{ Tcp.default_config with challenge_ack_limit = limit; timestamps = false } ()
  in
  let counts =
    List.init 30 (fun _ ->
        r.sent := [];
        for _ = 1 to 50 do
          r.inject ~seq:5000 ~ack:1 Tcp_wire.rst (* in window, not at RCV.NXT *)
        done;
        let n = List.length !(r.sent) in
        Clock.Virtual.advance r.vclock (Consort.Time.of_sec 1.);
        n)
  in
  Logs.app (fun m -> m "challenge ACKs per second: %a" Fmt.(list ~sep:sp int) counts);
  List.iter
    (fun n ->
      Alcotest.(check bool)
        (Fmt.str "within [%d, %d]: %d" (limit / 2) limit n)
        true
        (n >= limit / 2 && n <= limit))
    counts;
  Alcotest.(check bool) "the budget varies" true (List.exists (fun n -> n <> List.hd counts) counts)

(* The budget is each connection's: one connection's attacker spending it
   leaves another's challenge ACKs alone (a shared budget is the side
   channel of CVE-2016-5696). *)
let challenge_per_connection () =
  let limit = 10 in
  let config = { Tcp.default_config with challenge_ack_limit = limit; timestamps = false } in
  let a = raw ~config () in
  let b = raw ~config ~beside:a () in
  let rsts r n =
    r.sent := [];
    for _ = 1 to n do
      r.inject ~seq:5000 ~ack:1 Tcp_wire.rst
    done;
    List.length !(r.sent)
  in
  let na = rsts a 50 in
  let nb = rsts b 3 in
  Alcotest.(check bool) (Fmt.str "A's budget spent (%d)" na) true (na >= limit / 2 && na <= limit);
  Alcotest.(check int) "B still gets its three challenge ACKs" 3 nb

let tests =
  tests
  @ [
      Alcotest.test_case "challenge ACK budget per connection, randomised" `Quick challenge_budget;
      Alcotest.test_case "challenge ACK budget not shared between connections" `Quick
        challenge_per_connection;
    ]

(* A receiver that reports ever more 1-byte SACK blocks (CVE-2019-11478's
   pattern) never gets the sender to do more than bounded work per ACK:
   the scoreboard keeps its lowest blocks only. *)
let sack_abuse () =
  let config =
    { Tcp.default_config with timestamps = false; window_scale = false; initial_window = Some 100 }
  in
  let r = raw ~config ~sack:true () in
  let written = r.write 200_000 in
  Alcotest.(check bool) "written" true (written > 65535);
  let in_flight = (r.info ()).unacked in
  Alcotest.(check bool) (Fmt.str "a full window in flight (%d)" in_flight) true (in_flight >= 60_000);
  let acks = 2000 in
  let before = Tcp_sack.work () in
  for i = 0 to acks - 1 do
    (* Four new blocks per ACK, each above the previous ones. *)
    let base = r.iss () + 2 + (i * 8) in
    let blocks =
      List.init 4 (fun k ->
          let l = Tcp_seq.of_int (base + (2 * k)) in
          (l, Tcp_seq.add l 1))
    in
    r.inject ~seq:1 ~ack:1 Tcp_wire.ack ~options:[ Tcp_packet.Sack blocks ]
  done;
  let per_ack = (Tcp_sack.work () - before) / acks in
  Logs.app (fun m -> m "SACK work per ACK: %d block visits" per_ack);
  Alcotest.(check bool)
    (Fmt.str "per-ACK work bounded (%d visits)" per_ack)
    true
    (per_ack <= 8 * (Tcp_sack.default_max_blocks + 4))

let tests =
  tests
  @ [ Alcotest.test_case "a SACK-abusing receiver costs bounded work per ACK" `Quick sack_abuse ]

(* {1 Conformance} *)

let plain = { Tcp.default_config with window_scale = false; sack = false; timestamps = false }

let handshake =
  {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < . 1:1(0) ack 1 win 65535
0.2   expect status connected
|}

let data_after_close =
  case "data after close draws a RST (RFC 1122 4.2.2.13)" ~config:plain
    (handshake
   ^ {|
0.3   close
0.3   > F. 1:1(0) ack 1
0.4   < . 1:1(0) ack 2 win 65535
0.4   expect state FIN-WAIT-2
0.5   < P. 1:11(10) ack 2 win 65535
0.5   > R 2:2(0)
0.5   expect state CLOSED
|}
    )

let close_unread =
  case "close with unread data sends RST, not FIN" ~config:plain
    (handshake
   ^ {|
0.3   autoconsume off
0.3   < P. 1:11(10) ack 1 win 65535
0.34  > . 1:1(0) ack 11
0.4   close
0.4   > R 1:1(0)
0.4   expect state CLOSED
|}
    )

let close_read =
  case "close after reading everything sends FIN" ~config:plain
    (handshake
   ^ {|
0.3   autoconsume off
0.3   < P. 1:11(10) ack 1 win 65535
0.34  > . 1:1(0) ack 11
0.4   read 10
0.4   close
0.4   > F. 1:1(0) ack 11
|}
    )

let paws_missing =
  case "PAWS: a segment without a timestamp is dropped silently, an old one ACKed"
    ~config:{ plain with timestamps = true }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000,TS val 1000 ecr 0>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460,TS val * ecr 1000>
0.2   < . 1:1(0) ack 1 win 65535 <TS val 1100 ecr *>
0.3   < P. 1:11(10) ack 1 win 65535                 # silently
0.3   expect delivered 0
0.4   < P. 1:11(10) ack 1 win 65535 <TS val 900 ecr *>
0.4   > . 1:1(0) ack 1 <TS val * ecr 1100>
0.4   expect delivered 0
|}

let rfc1337 =
  case "RST in TIME-WAIT is ignored (RFC 1337)" ~config:plain
    (handshake
   ^ {|
0.3   close
0.3   > F. 1:1(0) ack 1
0.4   < F. 1:1(0) ack 2 win 65535
0.4   > . 2:2(0) ack 2
0.4   expect state TIME-WAIT
0.5   < R 2:2(0) win 0
0.5   expect state TIME-WAIT
0.6   < F. 1:1(0) ack 2 win 65535                   # the FIN again: still acknowledged
0.6   > . 2:2(0) ack 2
|}
    )

let zero_window_orphan =
  case "a connection closed behind a zero window gives up probing" ~config:plain
    ~tol:(Consort.Time.of_ms 1)
    (handshake
   ^ {|
0.3   write 2000
0.3   > . 1:1001(1000) ack 1
0.3   > P. 1001:2001(1000) ack 1
0.4   < . 1:1(0) ack 2001 win 0
0.4   write 10
0.4   close
0.65  > . 2000:2000(0) ack 1   # probes, every one answered
0.65  < . 1:1(0) ack 2001 win 0
1.15  > . 2000:2000(0) ack 1
1.15  < . 1:1(0) ack 2001 win 0
2.15  > . 2000:2000(0) ack 1
2.15  < . 1:1(0) ack 2001 win 0
4.15  > . 2000:2000(0) ack 1
4.15  < . 1:1(0) ack 2001 win 0
8.15  > . 2000:2000(0) ack 1
8.15  < . 1:1(0) ack 2001 win 0
16.15 > . 2000:2000(0) ack 1
16.15 < . 1:1(0) ack 2001 win 0
32.15 > . 2000:2000(0) ack 1
32.15 < . 1:1(0) ack 2001 win 0
64.15 > . 2000:2000(0) ack 1
64.15 < . 1:1(0) ack 2001 win 0
124.15 > R 2001:2001(0)                           # the ninth expiry: 8 probes sent
124.15 expect state CLOSED
|}
    )

let tests =
  tests @ [ data_after_close; close_unread; close_read; paws_missing; rfc1337; zero_window_orphan ]

(* {1 Many connections} *)

(* [n] short connections from host 1 to host 2, each sending [bytes] and
   closed by host 1 first, which keeps them in TIME-WAIT. *)
let churn ?(config = Tcp.default_config) ~n ~bytes () =
  let open Consort in
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"churn" () in
  let net = Mem.create_net vclock pool in
  let (module A) = Node.make ~config net pool 1 ~seed:3 in
  let (module B) = Node.make ~config net pool 2 ~seed:4 in
  let l = Result.get_ok (B.Sock.listen B.tcp 80) in
  let served = ref 0 and done_ = ref 0 in
  let rec accept () =
    Socket.Promise.upon (B.Sock.accept l) (function
      | Error _ -> ()
      | Ok s ->
          let buf = Cstruct.create 4096 in
          let rec loop () =
            Socket.Promise.upon (B.Sock.read s buf) (function
              | Ok 0 | Error _ ->
                  incr served;
                  B.Sock.close s
              | Ok _ -> loop ())
          in
          loop ();
          accept ())
  in
  accept ();
  for _ = 1 to n do
    Socket.Promise.upon (A.Sock.connect A.tcp 2 80) (function
      | Error e -> Fmt.failwith "connect: %a" Protocol.pp_error e
      | Ok s ->
          Socket.Promise.upon
            (A.Sock.write s (Cstruct.create bytes))
            (fun _ ->
              A.Sock.close s;
              Socket.Promise.upon (A.Sock.closed s) (fun _ -> incr done_)))
  done;
  Clock.Virtual.advance vclock (Time.of_sec 5.);
  (vclock, (module A : Node.S), (module B : Node.S), served, done_)

let time_wait_small () =
  let n = 2000 in
  let before = live_words () in
  let vclock, (module A), (module B), served, done_ = churn ~n ~bytes:1000 () in
  let grown = (live_words () - before) * (Sys.word_size / 8) in
  let s = A.T.query A.tcp in
  Logs.app (fun m ->
      m "%d connections in TIME-WAIT: %a; heap %d KiB" n Tcp.pp_stats s (grown / 1024));
  Alcotest.(check int) "all served" n !served;
  Alcotest.(check int) "all closed" n !done_;
  Alcotest.(check int) "all in TIME-WAIT" n s.active;
  Alcotest.(check bool) (Fmt.str "accounted memory (%d bytes)" s.memory) true (s.memory <= n * 200);
  (* The whole test's heap (both stacks, the network, the sockets) stays
     small: a TIME-WAIT connection keeps no buffer. *)
  Alcotest.(check bool) (Fmt.str "heap grew %d KiB" (grown / 1024)) true (grown < n * 2048);
  Consort_net.Clock.Virtual.advance vclock (Consort.Time.of_sec 61.);
  Alcotest.(check int) "gone after 2 MSL" 0 (A.T.query A.tcp).active;
  Alcotest.(check int) "server side gone" 0 (B.T.query B.tcp).active

let tests = tests @ [ Alcotest.test_case "TIME-WAIT is a small record" `Quick time_wait_small ]

(* Connections the application closed while the peer went silent are
   orphans; over the limit the oldest are reset. *)
let orphan_limit () =
  let open Consort in
  let config = { Tcp.default_config with max_orphans = 10 } in
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"orphans" () in
  let net = Mem.create_net vclock pool in
  let (module A) = Node.make ~config net pool 1 ~seed:3 in
  let (module B) = Node.make net pool 2 ~seed:4 in
  let l = Result.get_ok (B.Sock.listen B.tcp 80) in
  let rec accept () = Socket.Promise.upon (B.Sock.accept l) (fun _ -> accept ()) in
  accept ();
  let socks = ref [] in
  for _ = 1 to 50 do
    Socket.Promise.upon (A.Sock.connect A.tcp 2 80) (function
      | Ok s -> socks := s :: !socks
      | Error e -> Fmt.failwith "connect: %a" Protocol.pp_error e)
  done;
  Clock.Virtual.advance vclock (Time.of_sec 1.);
  Alcotest.(check int) "connected" 50 (List.length !socks);
  Mem.set_drop net (Some (fun ~src ~dst:_ _ -> src = 2));
  let conns = List.rev_map A.Sock.connection !socks |> List.rev in
  List.iter
    (fun s ->
      ignore (A.Sock.write s (Cstruct.create 1000));
      A.Sock.close s)
    (List.rev !socks);
  Clock.Virtual.advance vclock (Time.of_ms 10);
  let st = A.T.query A.tcp in
  Logs.app (fun m -> m "%a" Tcp.pp_stats st);
  Alcotest.(check int) "orphans at the limit" 10 st.orphans;
  Alcotest.(check int) "connections left" 10 st.active;
  Alcotest.(check bool)
    "the oldest were reset, the newest kept" true
    (List.for_all (fun c -> A.T.state c = Tcp.Closed) (List.filteri (fun i _ -> i >= 10) conns)
    && List.for_all (fun c -> A.T.state c <> Tcp.Closed) (List.filteri (fun i _ -> i < 10) conns))

let tests =
  tests @ [ Alcotest.test_case "orphans over the limit: the oldest are reset" `Quick orphan_limit ]

(* At the global limit a new connection takes the place of the oldest
   orphan, and is refused when there is none. *)
let connection_limit () =
  let open Consort in
  let config = { Tcp.default_config with max_connections = 5 } in
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"limit" () in
  let net = Mem.create_net vclock pool in
  let (module A) = Node.make ~config net pool 1 ~seed:3 in
  let (module B) = Node.make net pool 2 ~seed:4 in
  let l = Result.get_ok (B.Sock.listen B.tcp 80) in
  let rec accept () = Socket.Promise.upon (B.Sock.accept l) (fun _ -> accept ()) in
  accept ();
  let handler = { A.T.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) } in
  let opn () =
    A.T.active_open A.tcp { A.T.host = 2; port = 80; local_port = None } (fun _ -> handler)
  in
  let conns = List.init 5 (fun _ -> Result.get_ok (opn ())) in
  Clock.Virtual.advance vclock (Time.of_sec 1.);
  (match opn () with
  | Error (`In_use _) -> ()
  | Ok _ -> Alcotest.fail "a sixth connection was opened"
  | Error e -> Alcotest.failf "unexpected: %a" Protocol.pp_error e);
  (* The peer goes silent; two connections are closed by the application. *)
  Mem.set_drop net (Some (fun ~src ~dst:_ _ -> src = 2));
  let c0 = List.nth conns 0 and c1 = List.nth conns 1 in
  ignore (A.T.write c0 (Cstruct.create 100));
  A.T.close c0;
  ignore (A.T.write c1 (Cstruct.create 100));
  A.T.close c1;
  Alcotest.(check int) "two orphans" 2 (A.T.query A.tcp).orphans;
  (match opn () with Ok _ -> () | Error e -> Alcotest.failf "refused: %a" Protocol.pp_error e);
  Alcotest.(check bool) "the oldest orphan was reset" true (A.T.state c0 = Tcp.Closed);
  Alcotest.(check bool) "the other orphan kept" true (A.T.state c1 <> Tcp.Closed);
  Alcotest.(check int) "at the limit" 5 (A.T.query A.tcp).active

let tests = tests @ [ Alcotest.test_case "the global connection limit" `Quick connection_limit ]

(* {1 Loss recovery} *)

let dsack =
  case "a duplicate segment is reported as a D-SACK (RFC 2883)" ~config:{ plain with sack = true }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000,sackOK>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK>
0.2   < . 1:1(0) ack 1 win 65535
0.3   < P. 1:101(100) ack 1 win 65535
0.34  > . 1:1(0) ack 101
0.4   < P. 1:101(100) ack 1 win 65535                 # all of it again
0.4   > . 1:1(0) ack 101 <sack 1:101>
0.5   < P. 301:401(100) ack 1 win 65535               # a hole
0.5   > . 1:1(0) ack 101 <sack 301:401>
0.6   < P. 51:151(100) ack 1 win 65535                # half old, half new
0.6   > . 1:1(0) ack 151 <sack 51:101 301:401>
0.7   < P. 301:401(100) ack 1 win 65535               # a duplicate above the hole
0.7   > . 1:1(0) ack 151 <sack 301:401 301:401>
0.8   < P. 151:301(150) ack 1 win 65535
0.8   > . 1:1(0) ack 401
|}

let tests = tests @ [ dsack ]

(* One-byte segments out of order, each arriving in a pool segment of its
   own (junk in between fills the rest): the queue pins far more than it
   holds until it is collapsed. *)
let ooo_collapse () =
  let r = raw ~config:{ Tcp.default_config with timestamps = false } ~sack:true () in
  let (module N) = r.node in
  let junk = String.make 1400 'j' in
  let peak = ref 0 in
  for i = 0 to 99 do
    r.inject ~seq:(3 + (2 * i)) ~ack:1 ~len:1 Tcp_wire.ack;
    for _ = 1 to 200 do
      Mem.inject r.net ~src:3 ~dst:1 junk
    done;
    peak := max !peak (N.T.query N.tcp).memory
  done;
  let info = r.info () in
  Logs.app (fun m ->
      m "peak accounted memory %d KiB; %d segments queued" (!peak / 1024) info.ooo_segments);
  Alcotest.(check bool) (Fmt.str "memory bounded (%d KiB)" (!peak / 1024)) true (!peak < 3 lsl 20);
  Alcotest.(check int) "all 100 held" 100 info.ooo_segments;
  (* The hole is filled: every byte comes out. *)
  r.inject ~seq:1 ~ack:1 ~len:202 Tcp_wire.ack;
  Alcotest.(check int) "delivered" 202 (r.info ()).bytes_received

let tests =
  tests @ [ Alcotest.test_case "out-of-order queue collapsed under pressure" `Quick ooo_collapse ]

(* {1 ICMP errors} *)

(* Host 1 connects to host 2, which never answers; [f] gets the
   connection's ports and ISN, the network and the clock. *)
let icmp_case f =
  let open Consort in
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"icmp" () in
  let net = Mem.create_net vclock pool in
  let (module A) = Node.make net pool 1 ~seed:3 in
  let _silent = Mem.attach net 2 in
  let status = ref None in
  let syn = ref None in
  Mem.on_frame net (fun _ ~src ~dst:_ data ->
      if src = 1 && !syn = None then
        match Tcp_packet.decode (Cstruct.of_string data) with
        | Ok (h, _) when h.flags.syn -> syn := Some h
        | _ -> ());
  let c =
    Result.get_ok
      (A.T.active_open A.tcp { A.T.host = 2; port = 80; local_port = None } (fun _ ->
           { A.T.receive = (fun _ p -> Packet.release p); status = (fun _ s -> status := Some s) }))
  in
  let h = match !syn with Some h -> h | None -> Alcotest.fail "no SYN" in
  f ~net ~vclock ~state:(fun () -> A.T.state c) ~info:(fun () -> A.T.info c) ~status ~syn:h

let err kind (h : Tcp_packet.t) ?(seq = h.seq) () =
  { Tcp_icmp.kind; src_port = h.src_port; dst_port = h.dst_port; seq }

let icmp_hard () =
  icmp_case (fun ~net ~vclock ~state ~info:_ ~status ~syn ->
      (* Off the path: a sequence number not in flight is not believed. *)
      Mem.icmp net ~at:1 ~about:2
        (err (Hard "port unreachable") syn ~seq:(Tcp_seq.add syn.seq 5000) ());
      Alcotest.(check bool) "forged error ignored" true (state () = Tcp.Syn_sent);
      Clock.Virtual.advance vclock (Consort.Time.of_ms 100);
      Mem.icmp net ~at:1 ~about:2 (err (Hard "port unreachable") syn ());
      Alcotest.(check bool) "aborted at once" true (state () = Tcp.Closed);
      match !status with
      | Some (Tcp.Failed (`Unreachable _)) -> ()
      | s -> Alcotest.failf "status %a" Fmt.(option Tcp.pp_status) s)

let icmp_soft () =
  icmp_case (fun ~net ~vclock ~state ~info ~status ~syn ->
      Mem.icmp net ~at:1 ~about:2 (err (Soft "host unreachable") syn ());
      Alcotest.(check bool) "not aborted" true (state () = Tcp.Syn_sent);
      Alcotest.(check (option string)) "reported" (Some "host unreachable") (info ()).soft_error;
      Clock.Virtual.advance vclock (Consort.Time.of_sec 300.);
      match !status with
      | Some (Tcp.Failed (`Unreachable "host unreachable")) -> ()
      | s -> Alcotest.failf "status %a" Fmt.(option Tcp.pp_status) s)

(* RFC 1191: a smaller next-hop MTU shrinks the segments at once. *)
let icmp_frag_needed () =
  let r = raw ~config:{ Tcp.default_config with timestamps = false } () in
  Alcotest.(check int) "MSS from the peer" 1000 (r.info ()).snd_mss;
  r.sent := [];
  ignore (r.write 3000 : int);
  Clock.Virtual.advance r.vclock 0;
  Alcotest.(check int) "three segments sent" 3 (List.length !(r.sent));
  r.sent := [];
  let quoted =
    let b = Bytes.create 8 in
    Bytes.set_uint16_be b 0 80;
    Bytes.set_uint16_be b 2 5000;
    Bytes.set_int32_be b 4 (Int32.of_int (r.iss () + 1));
    Bytes.to_string b
  in
  Mem.icmp r.net ~at:1 ~about:2
    (Option.get (Tcp_icmp.of_icmp (Dest_unreachable (Frag_needed { mtu = 576 })) ~quoted));
  Clock.Virtual.advance r.vclock 0;
  Alcotest.(check int) "MSS follows the path MTU" 536 (r.info ()).snd_mss;
  let sizes = List.rev_map (fun (_, len) -> len) !(r.sent) in
  Alcotest.(check bool)
    (Fmt.str "in flight again, smaller (%a)" Fmt.(list ~sep:sp int) sizes)
    true
    (sizes <> [] && List.for_all (fun n -> n <= 536) sizes)

(* The same through ICMPv6 packet too big (TCP over IPv6): the MTU less
   the 40-byte IPv6 header; port unreachable is hard, time exceeded soft;
   and nothing without 8 bytes of quoted header. *)
let icmp6_to_tcp () =
  let quoted = "\x00\x50\x13\x88\x00\x00\x10\x00" in
  let kind e =
    Option.map
      (fun (t : Tcp_icmp.t) -> t.kind)
      (Tcp_icmp.of_ipv6 (Ipv6.Icmp_error { error = e; quoted }))
  in
  Alcotest.(check bool)
    "packet too big 1280: 1240 for TCP" true
    (kind (Packet_too_big 1280) = Some (Frag_needed 1240));
  (* RFC 8201 section 4: never below the IPv6 minimum link MTU, whatever an
     ICMPv6 message says. *)
  List.iter
    (fun mtu ->
      Alcotest.(check bool)
        (Fmt.str "packet too big %d: still 1240 for TCP" mtu)
        true
        (kind (Packet_too_big mtu) = Some (Frag_needed 1240)))
    [ 100; 0; 1279 ];
  Alcotest.(check bool)
    "port unreachable: hard" true
    (match kind (Unreachable 4) with Some (Hard _) -> true | _ -> false);
  Alcotest.(check bool)
    "time exceeded: soft" true
    (match kind (Time_exceeded 0) with Some (Soft _) -> true | _ -> false);
  (match Tcp_icmp.of_ipv6 (Ipv6.Icmp_error { error = Packet_too_big 1280; quoted }) with
  | Some t ->
      Alcotest.(check int) "ports from the quoted header" 80 t.src_port;
      Alcotest.(check int) "the other port" 5000 t.dst_port;
      Alcotest.(check int) "the sequence number" 0x1000 (Tcp_seq.to_int t.seq)
  | None -> Alcotest.fail "not read");
  Alcotest.(check bool)
    "too short a quote" true
    (Tcp_icmp.of_ipv6 (Ipv6.Icmp_error { error = Packet_too_big 1280; quoted = "abc" }) = None)

(* The memory budget (config.memory_limit): 300 connections to a peer
   that never reads (its window shuts at 16 KiB), each writing 1 MiB into
   a 256 KiB send buffer, under a 4 MiB budget: the send buffers never pass
   it. 300 whole buffers would not fit (16 would), so each takes a share,
   the smallest (send_share_min, 16 KiB), and the oldest connections
   holding one behind a zero window are reset for the writers waiting,
   until as many are left as shares fit (256). Without the budget they
   would hold 75 MiB. *)
let memory_budget () =
  let limit = 4 * 1024 * 1024 and n = 300 in
  let vclock = Clock.Virtual.create () in
  let pool = Consort.Pool.create ~name:"budget" () in
  let net = Mem.create_net ~seed:1 vclock pool in
  let config =
    { Tcp.default_config with send_buffer = 256 * 1024; memory_limit = limit; max_orphans = 4096 }
  in
  let (module A) = Node.make ~config net pool 1 ~seed:1 in
  let (module B) =
    Node.make ~config:{ Tcp.default_config with receive_buffer = 16 * 1024 } net pool 2 ~seed:2
  in
  let l = Result.get_ok (B.Sock.listen B.tcp 80) in
  let rec accept () = Socket.Promise.upon (B.Sock.accept l) (fun _ -> accept ()) in
  accept ();
  let data = Cstruct.create (1024 * 1024) in
  let failed = Array.make n false and peak = ref 0 in
  let watch () =
    let m = (A.T.query A.tcp).memory in
    if m > !peak then peak := m
  in
  Mem.on_frame net (fun _ ~src:_ ~dst:_ _ -> watch ());
  for i = 0 to n - 1 do
    Socket.Promise.upon (A.Sock.connect A.tcp 2 80) (function
      | Error _ -> failed.(i) <- true
      | Ok s ->
          Socket.Promise.upon (A.Sock.write s data) (function
            | Error _ -> failed.(i) <- true
            | Ok () -> ()))
  done;
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 60.) vclock;
  let st = A.T.query A.tcp in
  Logs.app (fun m ->
      m "peak memory %d; %a; alive: %a" !peak Tcp.pp_stats st
        Fmt.(list ~sep:sp int)
        (List.filter (fun i -> not failed.(i)) (List.init n Fun.id)));
  let fails = Array.fold_left (fun k f -> if f then k + 1 else k) 0 failed in
  (* Each connection's record and queues besides its send buffer: well under 4 KiB. *)
  Alcotest.(check bool)
    (Fmt.str "memory at its peak (%d) within the budget (%d) and the records" !peak limit)
    true
    (!peak <= limit + (n * 4096));
  Alcotest.(check bool)
    (Fmt.str "connections behind a zero window reset for memory (%d)" st.memory_resets)
    true
    (st.memory_resets >= n - 256 - 1);
  Alcotest.(check int) "each reset one of the connections that failed" st.memory_resets fails;
  Alcotest.(check int) "every buffer taken at a share" n st.shares_cut;
  Alcotest.(check bool)
    (Fmt.str "the buffers of those reset reused (%d)" st.spares_reused)
    true (st.spares_reused > 0);
  Alcotest.(check int) "as many left as shares fit in the budget" 256 (n - fails);
  Alcotest.(check int) "and only they in the table" 256 st.active;
  Alcotest.(check bool) "the first to take a buffer was reset" true failed.(0)

(* Receive memory in the budget: 200 connections send 256 KiB each to a
   host whose application never reads, under a 4 MiB budget. What the host
   holds (data delivered and not read, out-of-order segments) stays within
   the budget and one segment a connection: the windows offered shrink as
   connections come, and what peers send into windows offered before is
   dropped once the budget is spent (without the budget the host holds
   every byte, 50 MiB). Then the application reads, and every byte
   arrives. *)
let receive_budget () =
  let limit = 4 * 1024 * 1024 and n = 200 and size = 256 * 1024 in
  let vclock = Clock.Virtual.create () in
  let pool = Consort.Pool.create ~name:"rbudget" () in
  let net = Mem.create_net ~seed:3 vclock pool in
  let (module A) =
    Node.make ~config:{ Tcp.default_config with memory_limit = limit } net pool 1 ~seed:1
  in
  let (module B) =
    Node.make ~config:{ Tcp.default_config with send_buffer = 16 * 1024 } net pool 2 ~seed:2
  in
  let l = Result.get_ok (A.Sock.listen A.tcp 80) in
  let accepted = ref [] in
  let rec accept () =
    Socket.Promise.upon (A.Sock.accept l) (function
      | Ok s ->
          accepted := s :: !accepted;
          accept ()
      | Error _ -> ())
  in
  accept ();
  let held () =
    List.fold_left (fun acc s -> acc + (A.T.info (A.Sock.connection s)).unread) 0 !accepted
  in
  (* Every 8th frame (each look costs a walk of the connections). *)
  let peak = ref 0 and peak_stack = ref 0 and frames = ref 0 in
  Mem.on_frame net (fun _ ~src:_ ~dst:_ _ ->
      incr frames;
      if !frames land 7 = 0 then begin
        let h = held () in
        if h > !peak then peak := h;
        let r = (A.T.query A.tcp).receive_memory in
        if r > !peak_stack then peak_stack := r
      end);
  let data = Cstruct.create size in
  let written = ref 0 in
  for _ = 1 to n do
    Socket.Promise.upon (B.Sock.connect B.tcp 1 80) (function
      | Error _ -> ()
      | Ok s ->
          Socket.Promise.upon (B.Sock.write s data) (function
            | Ok () -> incr written
            | Error _ -> ()))
  done;
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 30.) vclock;
  let st = A.T.query A.tcp in
  Logs.app (fun m -> m "receive: peak %d held now %d; %a" !peak (held ()) Tcp.pp_stats st);
  Alcotest.(check int) "every connection accepted" n (List.length !accepted);
  Alcotest.(check bool)
    (Fmt.str "unread at its peak (%d) within the budget (%d) and a segment each" !peak limit)
    true
    (!peak <= limit + (n * 1460));
  Alcotest.(check bool)
    (Fmt.str "receive memory counted at its peak (%d) within the same" !peak_stack)
    true
    (!peak_stack <= limit + (n * 1460) && !peak_stack >= !peak);
  Alcotest.(check bool) "windows cut by the budget" true (st.windows_cut > 0);
  (* The application reads: every byte comes. *)
  let got = ref 0 in
  let buf = Cstruct.create 65536 in
  List.iter
    (fun s ->
      let rec loop () =
        Socket.Promise.upon (A.Sock.read s buf) (function
          | Ok k when k > 0 ->
              got := !got + k;
              loop ()
          | _ -> ())
      in
      loop ())
    !accepted;
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 600.) vclock;
  Alcotest.(check int) "every write completed" n !written;
  Alcotest.(check int) "every byte received" (n * size) !got

(* Send-buffer shares that shrink under pressure: 64 connections to a
   peer that reads everything, 1 MiB send buffers, a 4 MiB budget. Each
   connection is made first, then each writes 256 KiB at once. Taken whole,
   four buffers fill the budget and 60 writers wait for one to come back;
   with shares, each takes an equal part of the budget (64 KiB) and none
   waits. Once the others are gone, the last one's buffer, emptied, grows
   back to the whole send buffer. *)
let send_shares () =
  let limit = 4 * 1024 * 1024 and n = 64 and size = 256 * 1024 and full = 1024 * 1024 in
  let vclock = Clock.Virtual.create () in
  let pool = Consort.Pool.create ~name:"shares" () in
  let net = Mem.create_net ~seed:5 vclock pool in
  let (module A) =
    Node.make
      ~config:{ Tcp.default_config with send_buffer = full; memory_limit = limit }
      net pool 1 ~seed:1
  in
  let (module B) = Node.make net pool 2 ~seed:2 in
  let l = Result.get_ok (B.Sock.listen B.tcp 80) in
  let got = ref 0 in
  let rec accept () =
    Socket.Promise.upon (B.Sock.accept l) (function
      | Ok s ->
          let buf = Cstruct.create 65536 in
          let rec read () =
            Socket.Promise.upon (B.Sock.read s buf) (function
              | Ok k when k > 0 ->
                  got := !got + k;
                  read ()
              | _ -> B.Sock.close s)
          in
          read ();
          accept ()
      | Error _ -> ())
  in
  accept ();
  let socks = ref [] in
  for _ = 1 to n do
    Socket.Promise.upon (A.Sock.connect A.tcp 2 80) (function
      | Ok s -> socks := s :: !socks
      | Error e -> Alcotest.failf "connect: %a" Protocol.pp_error e)
  done;
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 5.) vclock;
  Alcotest.(check int) "every connection made" n (List.length !socks);
  let peak = ref 0 in
  Mem.on_frame net (fun _ ~src:_ ~dst:_ _ ->
      let m = (A.T.query A.tcp).send_memory in
      if m > !peak then peak := m);
  let data = Cstruct.create size and written = ref 0 in
  List.iter
    (fun s ->
      Socket.Promise.upon (A.Sock.write s data) (function
        | Ok () -> incr written
        | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e))
    !socks;
  let st = A.T.query A.tcp in
  Alcotest.(check int) "no writer waited for memory" 0 st.memory_refused;
  Alcotest.(check int) "every buffer taken at a share" n st.shares_cut;
  Alcotest.(check bool)
    (Fmt.str "each took a share (%d bytes of send buffers)" st.send_memory)
    true
    (st.send_memory >= n * 32 * 1024 && st.send_memory <= limit);
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 60.) vclock;
  Alcotest.(check int) "every write completed" n !written;
  Alcotest.(check int) "every byte received" (n * size) !got;
  Alcotest.(check bool) (Fmt.str "within the budget at the peak (%d)" !peak) true (!peak <= limit);
  Alcotest.(check int) "no connection reset" 0 (A.T.query A.tcp).memory_resets;
  (* The pressure gone, the last connection's buffer grows back (the
     clock's limits are absolute). *)
  let last = List.hd !socks in
  List.iter A.Sock.close (List.tl !socks);
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 400.) vclock;
  Alcotest.(check int) "the others gone" 1 (A.T.query A.tcp).active;
  Socket.Promise.upon (A.Sock.write last data) (fun _ -> ());
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 500.) vclock;
  Alcotest.(check int) "every byte received again" ((n + 1) * size) !got;
  Socket.Promise.upon (A.Sock.write last (Cstruct.create 1)) (fun _ -> ());
  Alcotest.(check int)
    "the whole send buffer again" (full - 1)
    (A.T.send_space (A.Sock.connection last))

(* Ephemeral ports (RFC 6056 algorithm 4): a counter per destination, so
   that connections to one host step its ports by one whatever the host
   does with others (with one counter, each destination sees the ports
   step by the number of connections made elsewhere in between). *)
let ports_per_destination () =
  let vclock = Clock.Virtual.create () in
  let pool = Consort.Pool.create ~name:"ports" () in
  let net = Mem.create_net ~seed:1 vclock pool in
  let (module A) = Node.make ~secret:(String.make 32 'k') net pool 1 ~seed:1 in
  let listen h =
    let (module N) = Node.make net pool h ~seed:h in
    ignore (Result.get_ok (N.Sock.listen N.tcp 80))
  in
  listen 2;
  listen 3;
  let ports = Hashtbl.create 4 in
  Mem.on_frame net (fun _ ~src ~dst frame ->
      let flags = Char.code frame.[13] in
      if src = 1 && flags land 0x12 = 0x02 then
        Hashtbl.replace ports dst
          (Hashtbl.find_opt ports dst |> Option.value ~default:[]
          |> List.cons (String.get_uint16_be frame 0)));
  for _ = 1 to 5 do
    List.iter (fun h -> ignore (A.Sock.connect A.tcp h 80)) [ 2; 3; 3 ]
  done;
  Clock.Virtual.run_until_idle ~limit:(Consort.Time.of_sec 1.) vclock;
  List.iter
    (fun (h, n) ->
      let ps = List.rev (Option.value ~default:[] (Hashtbl.find_opt ports h)) in
      Alcotest.(check int) (Fmt.str "SYNs to host %d" h) n (List.length ps);
      let steps =
        List.map2
          (fun a b -> (b - a + 16384) mod 16384)
          (List.rev (List.tl (List.rev ps)))
          (List.tl ps)
      in
      Alcotest.(check (list int))
        (Fmt.str "ports to host %d step by one (%a)" h Fmt.(list ~sep:sp int) ps)
        (List.init (n - 1) (fun _ -> 1))
        steps)
    [ (2, 5); (3, 10) ]

(* An IPv4 header quoted by an ICMP error (RFC 792, RFC 1812): the quote
   may stop before the total length the header gives, as long as 8 bytes of
   payload follow it; 7 are too few. *)
let ipv4_quote () =
  let src = Ipv4_addr.of_string_exn "10.0.0.1" and dst = Ipv4_addr.of_string_exn "10.0.0.2" in
  let whole =
    Ipv4_packet.to_string (Ipv4_packet.v ~df:true ~proto:6 ~src ~dst ()) (String.make 1000 'x')
  in
  let quote n = Ipv4_packet.decode_quoted (Cstruct.of_string (String.sub whole 0 n)) in
  (match quote 28 with
  | Ok (h, rest) ->
      Alcotest.(check int) "protocol" 6 h.proto;
      Alcotest.(check bool) "destination" true (Ipv4_addr.equal dst h.dst);
      Alcotest.(check int) "the 8 bytes quoted" 8 (Cstruct.length rest)
  | Error (`Msg m) -> Alcotest.failf "a 28-byte quote of a 1020-byte datagram: %s" m);
  (match quote 576 with
  | Ok (_, rest) -> Alcotest.(check int) "what RFC 1812 quotes" 556 (Cstruct.length rest)
  | Error (`Msg m) -> Alcotest.failf "a 576-byte quote: %s" m);
  Alcotest.(check bool) "7 bytes of payload are too few" true (Result.is_error (quote 27));
  Alcotest.(check bool) "no header" true (Result.is_error (quote 12))

let tests =
  tests
  @ [
      Alcotest.test_case "an ICMP error's IPv4 quote: header and 8 bytes are enough" `Quick
        ipv4_quote;
      Alcotest.test_case "ephemeral ports: a counter per destination (RFC 6056 algorithm 4)" `Quick
        ports_per_destination;
      Alcotest.test_case "a memory budget across connections: the oldest zero windows lose" `Quick
        memory_budget;
      Alcotest.test_case "receive memory in the budget: windows shrink as connections come" `Quick
        receive_budget;
      Alcotest.test_case "send-buffer shares shrink under pressure and grow back" `Quick send_shares;
      Alcotest.test_case "ICMP hard error aborts SYN-SENT, a forged one does not" `Quick icmp_hard;
      Alcotest.test_case "ICMP soft error reported, and on timeout" `Quick icmp_soft;
      Alcotest.test_case "ICMP fragmentation needed shrinks the MSS (RFC 1191)" `Quick
        icmp_frag_needed;
      Alcotest.test_case "ICMPv6 errors as TCP reads them" `Quick icmp6_to_tcp;
    ]

(* SACK stress with megabytes in flight (CVE-2019-11477, 11478 and 11479's
   class): a peer advertising 16 MiB (window scale 8) lets 2 MB and then
   8 MB be sent, then reports crafted SACK blocks: one-byte blocks
   scattered at random over the flight, blocks walking down from the top,
   and alternate segments (a millisecond between ACKs, so RACK's timers
   and the retransmission timer run: the flight is marked lost and sent
   again). The work of each ACK on the scoreboard and on RACK's
   records is counted, and must not grow with what is in flight: the same
   bound for 2 MB and 8 MB. *)
let sack_stress () =
  let run mb =
    let config =
      {
        Tcp.default_config with
        timestamps = false;
        send_buffer = 16 * 1024 * 1024;
        initial_window = Some (mb * 1000);
      }
    in
    let r = raw ~config ~sack:true ~wscale:8 () in
    let ack ?(window = 65535) blocks =
      r.inject ~seq:1 ~ack:1 Tcp_wire.ack ~window ~options:[ Tcp_packet.Sack blocks ]
    in
    ack [];
    let written = r.write (mb * 1_000_000) in
    Alcotest.(check int) "written" (mb * 1_000_000) written;
    let in_flight = (r.info ()).unacked in
    Alcotest.(check bool)
      (Fmt.str "%d MB in flight (%d)" mb in_flight)
      true
      (in_flight >= mb * 1_000_000 * 9 / 10);
    let base = r.iss () + 1 in
    let at off = Tcp_seq.of_int (base + off) in
    let rng = Random.State.make [| mb |] in
    let worst = ref (0, 0) and acks = ref 0 and sack_total = ref 0 and rack_total = ref 0 in
    let measured blocks =
      (* A millisecond between ACKs: RACK's timers run, and segments it
         finds lost go again. *)
      Clock.Virtual.advance r.vclock (Consort.Time.of_ms 1);
      let s0 = Tcp_sack.work () and r0 = Tcp_rack.work () in
      ack blocks;
      let ds = Tcp_sack.work () - s0 and dr = Tcp_rack.work () - r0 in
      incr acks;
      sack_total := !sack_total + ds;
      rack_total := !rack_total + dr;
      let ws, wr = !worst in
      worst := (max ws ds, max wr dr)
    in
    (* One-byte blocks at random over the flight. *)
    for _ = 1 to 2000 do
      measured
        (List.init 4 (fun _ ->
             let o = 1 + Random.State.int rng (in_flight - 2) in
             (at o, at (o + 1))))
    done;
    (* Blocks walking down from the top, a segment each. *)
    for i = 1 to 2000 do
      let o = in_flight - (i * 2000) in
      if o > 1000 then measured [ (at o, at (o + 1000)) ]
    done;
    (* Alternate segments, four a block report, from the bottom up. *)
    let segs = in_flight / 1000 in
    let i = ref 1 in
    while !i + 8 < segs do
      measured (List.init 4 (fun k -> (at ((!i + (2 * k)) * 1000), at ((!i + (2 * k) + 1) * 1000))));
      i := !i + 8
    done;
    let info = r.info () in
    Logs.app (fun m ->
        m
          "%d MB: %d ACKs, work per ACK at most %d (scoreboard) and %d (RACK), %d and %d on \
           average; %a"
          mb !acks (fst !worst) (snd !worst) (!sack_total / !acks) (!rack_total / !acks)
          Tcp.pp_conn_info info);
    !worst
  in
  let ws2, wr2 = run 2 in
  let ws8, wr8 = run 8 in
  Alcotest.(check bool)
    (Fmt.str "scoreboard work per ACK bounded (%d, %d)" ws2 ws8)
    true
    (max ws2 ws8 <= 8 * (Tcp_sack.default_max_blocks + 4));
  Alcotest.(check bool)
    (Fmt.str "RACK work per ACK bounded, whatever is in flight (%d with 2 MB, %d with 8 MB)" wr2 wr8)
    true
    (max wr2 wr8 <= 4 * 1024)

let tests =
  tests
  @ [
      Alcotest.test_case "SACK stress: megabytes in flight, crafted blocks, bounded work per ACK"
        `Quick sack_stress;
    ]
