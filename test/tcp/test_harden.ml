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

let tests = [ cookie_with_timestamps; cookie_without_timestamps; cookie_expires ]

(* {1 Floods} *)

(* A SYN from a spoofed host, as the wire carries it. *)
let spoofed_syn ~src ~dst ~sport ~dport ~seq =
  let hdr =
    Tcp_packet.v ~src_port:sport ~dst_port:dport ~seq:(Tcp_seq.of_int seq) ~ack:Tcp_seq.zero
      ~flags:{ Tcp_packet.no_flags with syn = true }
      ~window:65535
      ~options:Tcp_packet.[ Mss 1460; Sack_permitted; Timestamp { value = seq; echo = 0 }; Window_scale 7 ]
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
        (spoofed_syn ~src ~dst:2 ~sport:(1024 + (i mod 60000)) ~dport:80
           ~seq:(Random.State.bits rng))
    done;
    let grown = (live_words () - before) * (Sys.word_size / 8) in
    let s = B.T.query B.tcp in
    let backlog = Tcp.default_config.backlog in
    Logs.app (fun m ->
        m "after %d SYNs: %a; heap grew %d KiB; %d lower connections; %d pool segments" n
          Tcp.pp_stats s (grown / 1024) (Mem.connections B.mem) (Consort.Pool.in_use (Mem.pool net)));
    Alcotest.(check bool) (Fmt.str "half-open connections bounded (%d)" s.active) true (s.active <= backlog);
    Alcotest.(check int) "the rest answered with cookies" (n - backlog) s.syn_cookies_sent;
    Alcotest.(check bool)
      (Fmt.str "lower connections bounded (%d)" (Mem.connections B.mem))
      true
      (Mem.connections B.mem <= backlog);
    Alcotest.(check bool)
      (Fmt.str "accounted memory under 1 MiB (%d)" s.memory)
      true (s.memory < 1 lsl 20);
    Alcotest.(check bool) (Fmt.str "heap grew under 4 MiB (%d KiB)" (grown / 1024)) true (grown < 4 lsl 20);
    Alcotest.(check bool) "pool segments" true (Consort.Pool.in_use (Mem.pool net) <= 2);
    checked := true
  in
  let r = Transfer.run ~prelude (1024 * 1024) in
  Alcotest.(check bool) "flood checks ran" true !checked;
  Alcotest.(check int) "the real client's bytes" (1024 * 1024) r.bytes

let tests =
  tests @ [ Alcotest.test_case "100,000 spoofed SYNs, then a real client" `Quick syn_flood ]
