(* Crafted-segment scenarios, in the spirit of packetdrill. *)

let case name ?config ?tol script =
  Alcotest.test_case name `Quick (fun () -> Script.run ?config ?tol script)

let closed_port =
  case "SYN to a closed port is answered with RST-ACK"
    {|
0     < S 0:0(0) win 1000
0     > R. 0:0(0) ack 1 win 0
0.1   < . 5:5(0) ack 777 win 1000
0.1   > R 777:777(0)
0.2   < R 5:5(0) win 1000        # a RST is never answered
0.3   < P. 9:19(10) ack 0 win 1000
0.3   > R 0:0(0)
|}

let passive_lifecycle =
  case "passive open, delayed ACK, data, active close, TIME_WAIT"
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < . 1:1(0) ack 1 win 65535
0.2   expect status connected
0.2   expect state ESTABLISHED
0.3   < P. 1:101(100) ack 1 win 65535
0.34  > . 1:1(0) ack 101 win 65535          # the delayed ACK timer, 40 ms
0.4   < . 101:1101(1000) ack 1 win 65535
0.4   < . 1101:2101(1000) ack 1 win 65535
0.4   > . 1:1(0) ack 2101 win 65535         # every second segment at once
0.5   write 3000
0.5   > . 1:1001(1000) ack 2101             # the peer's MSS, initial window 4 * 1000
0.5   > . 1001:2001(1000) ack 2101
0.5   > P. 2001:3001(1000) ack 2101
0.6   < . 2101:2101(0) ack 3001 win 65535
0.7   close
0.7   > F. 3001:3001(0) ack 2101
0.7   expect state FIN-WAIT-1
0.8   < . 2101:2101(0) ack 3002 win 65535
0.8   expect state FIN-WAIT-2
0.9   < F. 2101:2101(0) ack 3002 win 65535
0.9   > . 3002:3002(0) ack 2102
0.9   expect state TIME-WAIT
0.9   expect status closed
30    < F. 2101:2101(0) ack 3002 win 65535  # a retransmitted FIN restarts 2 MSL
30    > . 3002:3002(0) ack 2102
89.9  expect state TIME-WAIT
90.1  < . 2102:2102(0) ack 3002 win 65535   # gone after 2 MSL
90.1  > R 3002:3002(0)
|}

let full = { Tcp.default_config with window_scale = true; sack = true; timestamps = true }
let plain = { Tcp.default_config with window_scale = false; sack = false; timestamps = false }

(* A passive open with a peer MSS of 1000 and no other option; RTT 100 ms,
   so RTO 300 ms. *)
let handshake =
  {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < . 1:1(0) ack 1 win 65535
0.2   expect status connected
|}

let options_negotiation =
  case "active open: MSS, window scale, SACK and timestamps negotiated; Nagle" ~config:full
    {|
0     connect 80
0     > S 0:0(0) win 65535 <mss 1460,wscale 3,sackOK,TS val * ecr 0>
0.05  < S. 0:0(0) ack 1 win 65535 <mss 1200,sackOK,TS val 700 ecr *,nop,wscale 6>
0.05  > . 1:1(0) ack 1 win 32768 <TS val * ecr 700>
0.05  expect status connected
0.05  expect mss 1188                  # 1200 less 12 bytes of timestamp option
0.05  expect wscale 6 3
0.1   write 5000
0.1   > . 1:1189(1188) ack 1 win 32768 <TS val * ecr 700>
0.1   > . 1189:2377(1188) ack 1 <...>
0.1   > . 2377:3565(1188) ack 1 <...>  # initial window: 3 segments
0.15  < . 1:1(0) ack 3565 win 100 <TS val 750 ecr *>
0.15  > . 3565:4753(1188) ack 1 <TS val * ecr 750>
0.15  expect snd_wnd 6400              # 100 << 6
0.2   < . 1:1(0) ack 4753 win 100 <TS val 800 ecr *>
0.2   > P. 4753:5001(248) ack 1 <TS val * ecr 800>   # held by Nagle until then
|}

let no_options =
  case "a peer without options: MSS 536, no scaling, no SACK, no timestamps" ~config:full
    {|
0     listen 8080
0.1   < S 0:0(0) win 8192
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < . 1:1(0) ack 1 win 8192
0.2   expect mss 536
0.2   expect wscale none none
0.3   write 1000
0.3   > . 1:537(536) ack 1 win 65535
0.4   < . 1:1(0) ack 537 win 8192           # Nagle: the rest waits for this
0.4   > P. 537:1001(464) ack 1 win 65535
|}

let rst_handling =
  case "RST and SYN on an established connection: RFC 5961 challenge ACKs"
    (handshake
   ^ {|
0.3   < R 1000:1000(0) win 0            # in window, not exact: challenge ACK
0.3   > . 1:1(0) ack 1
0.4   < R 100000:100000(0) win 0        # outside the window: ignored
0.5   < S 500:500(0) win 1000           # SYN in a synchronized state
0.5   > . 1:1(0) ack 1
0.6   < . 1:1(0) ack 1000 win 65535     # acknowledges unsent data: ACK, drop
0.6   > . 1:1(0) ack 1
0.65  < P. 70000:70010(10) ack 1 win 65535   # out of window: ACK, drop
0.65  > . 1:1(0) ack 1
0.7   expect state ESTABLISHED
0.7   < R 1:1(0) win 0                  # exact: reset
0.7   expect status reset
0.8   < . 1:1(0) ack 1 win 100
0.8   > R 1:1(0)
|}
    )

let syn_sent_rst =
  case "SYN-SENT: unacceptable ACKs and RSTs, then a refusal"
    {|
0     connect 80
0     > S 0:0(0) win 65535 <mss 1460>
0.1   < R 0:0(0) win 0                  # no ACK: ignored
0.2   < R. 0:0(0) ack 5 win 0           # unacceptable ACK: ignored
0.3   < . 0:0(0) ack 5 win 0            # unacceptable ACK: reset it
0.3   > R 5:5(0)
0.35  < F 0:0(0) win 1000               # neither SYN nor RST: dropped
0.35  expect state SYN-SENT
0.4   < R. 0:0(0) ack 1 win 0
0.4   expect status refused
|}

let ooo_sack =
  case "out-of-order segments are queued and reported with SACK" ~config:{ plain with sack = true }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000,sackOK>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK>
0.2   < . 1:1(0) ack 1 win 65535
0.3   < . 1001:2001(1000) ack 1 win 65535
0.3   > . 1:1(0) ack 1 <sack 1001:2001>
0.3   < . 3001:4001(1000) ack 1 win 65535
0.3   > . 1:1(0) ack 1 <sack 3001:4001 1001:2001>
0.3   < . 3501:4501(1000) ack 1 win 65535     # overlaps the queue
0.3   > . 1:1(0) ack 1 <sack 3001:4501 1001:2001>
0.3   < . 2001:3001(1000) ack 1 win 65535     # joins the blocks
0.3   > . 1:1(0) ack 1 <sack 1001:4501>
0.3   expect delivered 0
0.3   < . 1:1001(1000) ack 1 win 65535        # fills the hole
0.3   > . 1:1(0) ack 4501
0.3   expect delivered 4500
|}

let fast_retransmit =
  case "three duplicate ACKs: fast retransmit, partial ACK, NewReno recovery"
    ~config:{ plain with initial_window = Some 10; congestion = New_reno }
    (handshake
   ^ {|
0.3   write 10000
0.3   > . 1:1001(1000) ack 1
0.3   > . 1001:2001(1000) ack 1
0.3   > . 2001:3001(1000) ack 1
0.3   > . 3001:4001(1000) ack 1
0.3   > . 4001:5001(1000) ack 1
0.3   > . 5001:6001(1000) ack 1
0.3   > . 6001:7001(1000) ack 1
0.3   > . 7001:8001(1000) ack 1
0.3   > . 8001:9001(1000) ack 1
0.3   > P. 9001:10001(1000) ack 1
0.4   < . 1:1(0) ack 1001 win 65535
0.41  < . 1:1(0) ack 1001 win 65535
0.42  < . 1:1(0) ack 1001 win 65535
0.43  < . 1:1(0) ack 1001 win 65535
0.43  > . 1001:2001(1000) ack 1             # the third duplicate
0.43  expect cwnd 7500                      # ssthresh 4500 + 3 segments
0.44  < . 1:1(0) ack 1001 win 65535
0.44  expect cwnd 8500
0.5   < . 1:1(0) ack 3001 win 65535         # partial: 3001 is lost too
0.5   > . 3001:4001(1000) ack 1
0.6   < . 1:1(0) ack 10001 win 65535
0.6   expect cwnd 2000                      # min (ssthresh, flight + 1 segment)
|}
    )

let sack_recovery =
  case "SACK loss recovery (RFC 6675): lost segments retransmitted, SACKed ones not"
    ~config:{ plain with sack = true; initial_window = Some 10; congestion = New_reno }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000,sackOK>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460,sackOK>
0.2   < . 1:1(0) ack 1 win 65535
0.3   write 10000
0.3   > . 1:1001(1000) ack 1
0.3   > . 1001:2001(1000) ack 1
0.3   > . 2001:3001(1000) ack 1
0.3   > . 3001:4001(1000) ack 1
0.3   > . 4001:5001(1000) ack 1
0.3   > . 5001:6001(1000) ack 1
0.3   > . 6001:7001(1000) ack 1
0.3   > . 7001:8001(1000) ack 1
0.3   > . 8001:9001(1000) ack 1
0.3   > P. 9001:10001(1000) ack 1
0.4   < . 1:1(0) ack 1001 win 65535                        # 1001 and 3001 are lost
0.41  < . 1:1(0) ack 1001 win 65535 <sack 2001:3001>
0.42  < . 1:1(0) ack 1001 win 65535 <sack 4001:5001 2001:3001>
0.43  < . 1:1(0) ack 1001 win 65535 <sack 4001:6001 2001:3001>
0.43  > . 1001:2001(1000) ack 1             # 3000 bytes SACKed above it
0.43  expect cwnd 5500                      # PRR: pipe 5000 + 4500 x 3000 SACKed / 9000 - 1000 sent
0.43  expect ssthresh 4500                  # half the flight
0.44  < . 1:1(0) ack 1001 win 65535 <sack 4001:7001 2001:3001>
0.44  expect cwnd 4500                      # pipe 4000, PRR-SSRB: up to ssthresh
0.45  < . 1:1(0) ack 1001 win 65535 <sack 4001:8001 2001:3001>
0.45  > . 3001:4001(1000) ack 1             # lost, and PRR now leaves room
0.46  < . 1:1(0) ack 1001 win 65535 <sack 4001:9001 2001:3001>
0.47  < . 1:1(0) ack 1001 win 65535 <sack 4001:10001 2001:3001>
0.5   < . 1:1(0) ack 3001 win 65535 <sack 4001:10001>
0.51  < . 1:1(0) ack 10001 win 65535
0.51  expect cwnd 4500                      # the recovery ends at ssthresh (PRR), not collapsed
|}

let zero_window_probe =
  case "zero window: persist probes with backoff until the window opens"
    (handshake
   ^ {|
0.25  < . 1:1(0) ack 1 win 0
0.3   write 2000
0.6   > . 0:0(0) ack 1                      # RTO 300 ms
0.6   < . 1:1(0) ack 1 win 0
1.2   > . 0:0(0) ack 1                      # backed off
1.2   < . 1:1(0) ack 1 win 0
2.4   > . 0:0(0) ack 1
2.5   < . 1:1(0) ack 1 win 1000
2.5   > . 1:1001(1000) ack 1
2.6   < . 1:1(0) ack 1001 win 1000
2.6   > P. 1001:2001(1000) ack 1
|}
    )

let receive_window =
  case "receive window: closes when the application stops reading, reopens with an update"
    ~config:{ plain with receive_buffer = 4000 }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 4000 <mss 1460>
0.2   < . 1:1(0) ack 1 win 65535
0.2   autoconsume off
0.3   < . 1:1001(1000) ack 1 win 65535
0.3   < . 1001:2001(1000) ack 1 win 65535
0.3   > . 1:1(0) ack 2001 win 2000
0.3   < . 2001:3001(1000) ack 1 win 65535
0.3   < . 3001:4001(1000) ack 1 win 65535
0.3   > . 1:1(0) ack 4001 win 0
0.4   < . 4001:4002(1) ack 1 win 65535      # a probe: not accepted, answered
0.4   > . 1:1(0) ack 4001 win 0
0.5   read 1000                             # too little to announce
0.55  < . 4001:4002(1) ack 1 win 65535
0.55  > . 1:1(0) ack 4001 win 0             # receiver SWS avoidance: still closed
0.6   read 3000
0.6   > . 1:1(0) ack 4001 win 4000          # window update
0.6   expect delivered 0
|}

(* A bare FIN at RCV.NXT takes no room in the window: taken at a zero
   window (as Linux does), where data is not; a FIN with data is not. *)
let fin_zero_window =
  case "a bare FIN at a zero window is taken, a FIN with data is not"
    ~config:{ plain with receive_buffer = 4000 }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 4000 <mss 1460>
0.2   < . 1:1(0) ack 1 win 65535
0.2   autoconsume off
0.3   < . 1:1001(1000) ack 1 win 65535
0.3   < . 1001:2001(1000) ack 1 win 65535
0.3   > . 1:1(0) ack 2001 win 2000
0.3   < . 2001:3001(1000) ack 1 win 65535
0.3   < . 3001:4001(1000) ack 1 win 65535
0.3   > . 1:1(0) ack 4001 win 0
0.4   < F. 4001:4002(1) ack 1 win 65535     # a FIN with a byte: not taken
0.4   > . 1:1(0) ack 4001 win 0
0.4   expect state ESTABLISHED
0.5   < F. 4001:4001(0) ack 1 win 65535     # a bare FIN: taken
0.5   > . 1:1(0) ack 4002 win 0
0.5   expect state CLOSE-WAIT
0.5   expect status peer_closed
|}

let fin_syn_received =
  case "FIN in SYN-RECEIVED (with the handshake ACK), CLOSE-WAIT, LAST-ACK"
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < F. 1:1(0) ack 1 win 65535
0.2   > . 1:1(0) ack 2
0.2   expect state CLOSE-WAIT
0.2   expect status connected
0.2   expect status peer_closed
0.3   < F. 1:1(0) ack 1 win 65535           # retransmitted FIN in CLOSE-WAIT
0.3   > . 1:1(0) ack 2
0.4   write 100
0.4   > P. 1:101(100) ack 2
0.5   close
0.5   > F. 101:101(0) ack 2
0.5   expect state LAST-ACK
0.55  < F. 1:1(0) ack 101 win 65535         # retransmitted FIN in LAST-ACK
0.55  > . 102:102(0) ack 2
0.6   < . 2:2(0) ack 102 win 65535
0.6   expect status closed
0.7   < . 2:2(0) ack 102 win 65535
0.7   > R 102:102(0)
|}

let fin_listen_syn_sent =
  case "FIN in LISTEN and SYN-SENT is not processed"
    {|
0     listen 8080
0.1   < F 0:0(0) win 1000
0.2   < F. 0:0(0) ack 9 win 1000
0.2   > R 9:9(0)
0.3   connect 80
0.3   > S 0:0(0) win 65535 <mss 1460>
0.4   < F. 0:0(0) ack 1 win 1000
0.4   expect state SYN-SENT
|}

let fin_wait_1_closing =
  case "FIN in FIN-WAIT-1 (simultaneous close) then CLOSING, TIME-WAIT"
    (handshake
   ^ {|
0.3   close
0.3   > F. 1:1(0) ack 1
0.3   < F. 1:1(0) ack 1 win 65535           # crosses our FIN
0.3   > . 2:2(0) ack 2
0.3   expect state CLOSING
0.35  < F. 1:1(0) ack 1 win 65535           # retransmitted FIN in CLOSING
0.35  > . 2:2(0) ack 2
0.4   < . 2:2(0) ack 2 win 65535
0.4   expect state TIME-WAIT
0.4   expect status closed
|}
    )

let fin_wait_1_acked =
  case "FIN in FIN-WAIT-1 that also acknowledges ours: straight to TIME-WAIT"
    (handshake
   ^ {|
0.3   write 10
0.3   > P. 1:11(10) ack 1
0.3   shutdown
0.3   > F. 11:11(0) ack 1
0.4   < F. 1:1(0) ack 12 win 65535
0.4   > . 12:12(0) ack 2
0.4   expect state TIME-WAIT
|}
    )

let fin_out_of_order =
  case "a FIN beyond a hole waits for the hole"
    (handshake
   ^ {|
0.3   < F. 101:201(100) ack 1 win 65535
0.3   > . 1:1(0) ack 1
0.3   expect state ESTABLISHED
0.4   < . 1:101(100) ack 1 win 65535
0.4   > . 1:1(0) ack 202
0.4   expect state CLOSE-WAIT
0.4   expect delivered 200
|}
    )

let simultaneous_open =
  case "simultaneous open"
    {|
0     connect 80
0     > S 0:0(0) win 65535 <mss 1460>
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.1   expect state SYN-RECEIVED
0.2   < S. 0:0(0) ack 1 win 65535 <mss 1000>
0.2   expect state ESTABLISHED
0.2   expect status connected
0.3   write 10
0.3   > P. 1:11(10) ack 1
|}

let time_wait_reuse =
  case "a new SYN in TIME-WAIT above the old sequence opens a new connection"
    (handshake
   ^ {|
0.3   close
0.3   > F. 1:1(0) ack 1
0.4   < F. 1:1(0) ack 2 win 65535
0.4   > . 2:2(0) ack 2
0.4   expect state TIME-WAIT
1.0   < S 100000:100000(0) win 65535 <mss 1000>
1.0   > S. 0:0(0) ack 100001 win 65535 <mss 1460>
|}
    )

let rto_backoff_karn =
  case "RTO: exponential backoff, Karn's rule, then a fresh sample"
    ~config:{ plain with plpmtud = false } (* or the second timeout halves the segments *)
    (handshake
   ^ {|
0.2   expect rto 300
0.3   write 1000
0.3   > P. 1:1001(1000) ack 1
0.6   > P. 1:1001(1000) ack 1
1.2   > P. 1:1001(1000) ack 1
2.4   > P. 1:1001(1000) ack 1
4.8   > P. 1:1001(1000) ack 1
5.0   < . 1:1(0) ack 1001 win 65535
5.0   expect rto 4800                       # no sample from a retransmission
5.1   write 1000
5.1   > P. 1001:2001(1000) ack 1
5.2   < . 1:1(0) ack 2001 win 65535
5.2   expect rto 250                        # srtt 100 ms, rttvar 37.5 ms
|}
    )

(* RFC 8899 section 4.3: the same segment lost to two timeouts in a row
   may be a path that drops large packets without a word; the segments
   are halved (the link's 1480 bytes to 740, 720 of payload), and the
   rest of the write follows in the smaller size. *)
let black_hole_halves =
  case "black hole: the second timeout halves the segments (RFC 8899)"
    (handshake
   ^ {|
0.2   expect rto 300
0.3   write 1000
0.3   > P. 1:1001(1000) ack 1
0.6   > P. 1:1001(1000) ack 1
1.2   > . 1:721(720) ack 1
1.3   < . 1:1(0) ack 721 win 65535
1.3   > P. 721:1001(280) ack 1
1.4   < . 1:1(0) ack 1001 win 65535
1.4   expect mss 720
|}
    )

let syn_backoff =
  case "SYN retransmissions back off from 1 s, then the open times out"
    ~config:{ plain with syn_retries = 3 }
    {|
0     connect 80
0     > S 0:0(0) win 65535 <mss 1460>
1     > S 0:0(0) win 65535 <mss 1460>
3     > S 0:0(0) win 65535 <mss 1460>
7     > S 0:0(0) win 65535 <mss 1460>
15    expect status timeout
|}

let paws =
  case "timestamps: PAWS drops a segment with an old TSval" ~config:{ plain with timestamps = true }
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000,TS val 1000 ecr 0>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460,TS val * ecr 1000>
0.2   < . 1:1(0) ack 1 win 65535 <TS val 1100 ecr *>
0.3   < P. 1:101(100) ack 1 win 65535 <TS val 1200 ecr *>
0.34  > . 1:1(0) ack 101 <TS val * ecr 1200>
0.4   < P. 101:201(100) ack 1 win 65535 <TS val 900 ecr *>
0.4   > . 1:1(0) ack 101 <TS val * ecr 1200>
0.4   expect delivered 100
0.5   < P. 101:201(100) ack 1 win 65535    # no timestamp once agreed: dropped silently
0.6   < P. 101:201(100) ack 1 win 65535 <TS val 1300 ecr *>
0.64  > . 1:1(0) ack 201 <TS val * ecr 1300>
|}

let nodelay =
  case "Nagle holds small segments while data is unacknowledged; no-delay does not"
    (handshake
   ^ {|
0.3   write 10
0.3   > P. 1:11(10) ack 1
0.3   write 10
0.3   write 10
0.4   < . 1:1(0) ack 11 win 65535
0.4   > P. 11:31(20) ack 1
0.5   < . 1:1(0) ack 31 win 65535
0.5   nodelay
0.6   write 10
0.6   > P. 31:41(10) ack 1
0.6   write 10
0.6   > P. 41:51(10) ack 1
|}
    )

let keepalive =
  case "keepalive: probes after idle time, then the connection times out"
    ~config:
      {
        plain with
        keepalive =
          Some { Tcp.idle = Consort.Time.of_sec 10.; interval = Consort.Time.of_sec 1.; probes = 3 };
      }
    (handshake
   ^ {|
10.2  > . 0:0(0) ack 1
10.3  < . 1:1(0) ack 1 win 65535            # answered: idle again
20.3  > . 0:0(0) ack 1
21.3  > . 0:0(0) ack 1
22.3  > . 0:0(0) ack 1
23.3  > R 1:1(0)
23.3  expect status timeout
|}
    )

let challenge_rate_limit =
  case "challenge ACKs are rate-limited per second (RFC 5961 section 7)"
    ~config:{ plain with challenge_ack_limit = 1 }
    (handshake
   ^ {|
0.3   < R 1000:1000(0) win 0
0.3   > . 1:1(0) ack 1
0.31  < S 7:7(0) win 0                    # over the limit: nothing
0.32  < R 1000:1000(0) win 0
1.1   < R 1000:1000(0) win 0              # a new second
1.1   > . 1:1(0) ack 1
|}
    )

let old_ack =
  case "an ACK older than the largest window is challenged, a recent one ignored"
    {|
0     listen 8080
0.1   < S 0:0(0) win 1000 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < . 1:1(0) ack 1 win 1000
0.3   write 2000
0.3   > . 1:1001(1000) ack 1
0.4   < . 1:1(0) ack 1001 win 1000
0.4   > P. 1001:2001(1000) ack 1
0.5   < . 1:1(0) ack 2001 win 1000
0.6   < . 1:1(0) ack 500 win 1000         # below SND.UNA - MAX.SND.WND
0.6   > . 2001:2001(0) ack 1
0.7   < . 1:1(0) ack 1500 win 1000        # old but within the window: ignored
0.7   expect state ESTABLISHED
|}

let rst_syn_received =
  case "RST in SYN-RECEIVED (passive) returns to LISTEN"
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.2   < R 1:1(0) win 0
0.3   < . 1:1(0) ack 1 win 65535          # the half-open connection is gone
0.3   > R 1:1(0)
0.4   < S 0:0(0) win 65535 <mss 1000>     # the listener is still there
0.4   > S. 0:0(0) ack 1 win 65535 <mss 1460>
0.5   < . 1:1(0) ack 1 win 65535
0.5   expect status connected
|}

let syn_ack_lost =
  case "SYN-RECEIVED: the SYN-ACK is retransmitted on timeout and on a repeated SYN"
    {|
0     listen 8080
0.1   < S 0:0(0) win 65535 <mss 1000>
0.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
1.1   > S. 0:0(0) ack 1 win 65535 <mss 1460>
1.5   < S 0:0(0) win 65535 <mss 1000>
1.5   > S. 0:0(0) ack 1 win 65535 <mss 1460>
1.6   < . 1:1(0) ack 1 win 65535
1.6   expect status connected
1.7   write 4000
1.7   > . 1:1001(1000) ack 1                # initial window of one segment
|}

let idle_restart =
  case "after an idle period longer than the RTO, the window restarts from IW (RFC 5681 4.1)"
    (handshake
   ^ {|
0.3   write 4000
0.3   > . 1:1001(1000) ack 1
0.3   > . 1001:2001(1000) ack 1
0.3   > . 2001:3001(1000) ack 1
0.3   > P. 3001:4001(1000) ack 1
0.4   < . 1:1(0) ack 4001 win 65535
0.4   expect cwnd 6000                      # slow start: plus 2 segments
2.0   write 6000
2.0   > . 4001:5001(1000) ack 1
2.0   > . 5001:6001(1000) ack 1
2.0   > . 6001:7001(1000) ack 1
2.0   > . 7001:8001(1000) ack 1
2.0   expect cwnd 4000
|}
    )

let tests =
  [
    idle_restart;
    challenge_rate_limit;
    old_ack;
    rst_syn_received;
    syn_ack_lost;
    closed_port;
    passive_lifecycle;
    options_negotiation;
    no_options;
    rst_handling;
    syn_sent_rst;
    ooo_sack;
    fast_retransmit;
    sack_recovery;
    zero_window_probe;
    receive_window;
    fin_zero_window;
    fin_syn_received;
    fin_listen_syn_sent;
    fin_wait_1_closing;
    fin_wait_1_acked;
    fin_out_of_order;
    simultaneous_open;
    time_wait_reuse;
    rto_backoff_karn;
    black_hole_halves;
    syn_backoff;
    paws;
    nodelay;
    keepalive;
  ]
