(* The flood over TAP: from the kernel's side of our TAP device (a raw
   packet socket in the namespace), 100,000 frames with random source MACs
   and spoofed IPv4 sources and 100,000 ARP requests from random
   addresses; then the kernel pings us and transfers over TCP, and our
   tables and heap stayed bounded. *)

open Consort
open Consort_net
module Loop = Consort_engine.Loop
module S = Ipstack
open T_tap

let flood_script =
  {|
import socket, struct, random, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(('@TAP@', 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
dst = bytes.fromhex('@DSTMAC@')
ours = socket.inet_aton('@OUR@')
rnd = random.Random(5)
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def rand_ip():
    while True:
        a = rnd.getrandbits(32)
        if (a >> 24) not in (0, 10, 127) and (a >> 24) < 224: return struct.pack('!I', a)
def rand_mac():
    return bytes([(rnd.getrandbits(8) & 0xfe) | 0x02]) + rnd.randbytes(5)
udp = struct.pack('!HHHH', 1234, 9, 13, 0) + b'flood'
sent = 0
for i in range(@N@):
    mac = rand_mac()
    h = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), i & 0xffff, 0, 64, 17, 0, rand_ip(), ours)
    h = h[:10] + struct.pack('!H', csum(h)) + h[12:]
    frame = dst + mac + b'\x08\x00' + h + udp
    arp = b'\xff' * 6 + mac + b'\x08\x06' + struct.pack('!HHBBH6s4s6s4s', 1, 0x0800, 6, 4, 1, mac, rand_ip(), b'\0' * 6, ours)
    for f in (frame, arp):
        while True:
            try:
                s.send(f); sent += 1; break
            except BlockingIOError:
                pass
            except OSError as e:
                if e.errno == 105: continue
                raise
    if i % 100 == 0: time.sleep(0.004)
print('SENT', sent)
|}

let tcp_node (env : env) : (module T_flood.NODE) =
  let module P =
    (val Net_test_util.Tcp_params.ipv4
           ~clock:(Consort_net_unix.Loop_clock.of_loop env.up.loop)
           ~pool:env.up.pool ~rng:(Rng.create 77) (Ipv4_addr.of_string_exn our_ip))
  in
  let module T = Tcp.Make (Ipv4.Df (S.Ip)) (P) in
  let tcp =
    match T.create env.up.stack.ip with
    | Ok t -> t
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

let tcp_client_script =
  {|
import socket, hashlib, sys
data = bytes((i * 31 + (i >> 8)) % 256 for i in range(@N@))
s = socket.create_connection(('@OUR@', 80), timeout=20)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
back = b''
while True:
    k = s.recv(1 << 16)
    if not k: break
    back += k
print('SHA', hashlib.sha256(data).hexdigest())
print('BACK', len(back))
|}

let flood_then_serve () =
  with_env @@ fun env ->
  let st = env.up.stack in
  let tap = Consort_net_unix.Tap.name env.up.tap in
  let mac = Mac_addr.to_string (Device.mac (Consort_net_unix.Tap.device env.up.tap)) in
  let n = 100_000 in
  (* A queue that holds the whole flood: the kernel drops none of it even
     when this process is slow to read (a loaded machine). *)
  ignore (must (Printf.sprintf "ip -n %s link set %s txqueuelen 250000" env.ns tap));
  let before = T_flood.live_bytes () in
  let rc, out =
    python env ~timeout:120.
      (List.fold_left
         (fun s (a, b) -> replace s a b)
         flood_script
         [
           ("@TAP@", tap);
           ("@DSTMAC@", String.concat "" (String.split_on_char ':' mac));
           ("@OUR@", our_ip);
           ("@N@", string_of_int n);
         ])
  in
  if rc <> 0 then Alcotest.failf "the flood failed: %s" out;
  (* Drain what the kernel has queued for us: until 200 ms pass with no
     new frame (at most 30 s). *)
  let rec drain k =
    let before = (S.Eth.query st.eth).frames_in + (S.Eth.query st.eth).not_for_us in
    Loop.run ~timeout:(Time.of_ms 200) env.up.loop;
    if k > 0 && (S.Eth.query st.eth).frames_in + (S.Eth.query st.eth).not_for_us > before then
      drain (k - 1)
  in
  drain 150;
  let growth = T_flood.live_bytes () - before in
  let e = S.Eth.query st.eth and ip = S.Ip.query st.ip and arp = S.Arp.query st.arp in
  Fmt.pr
    "over TAP, after %s frames: %d received, %d Ethernet peers (%d evicted), %d IPv4 connections \
     (%d evicted), %d ARP entries; heap +%d KiB@."
    (String.trim out) e.frames_in e.peers e.peers_evicted ip.connections ip.connections_evicted
    (List.length arp.entries) (growth / 1024);
  (* The kernel's TAP queue may drop some; most must have reached us. *)
  Alcotest.(check bool)
    (Fmt.str "the flood reached us (%d of %d frames)" e.frames_in (2 * n))
    true
    (e.frames_in >= 2 * n * 95 / 100);
  Alcotest.(check bool) "Ethernet peers bounded" true (e.peers <= T_flood.max_eth_peers);
  Alcotest.(check bool) "Ethernet peers evicted" true (e.peers_evicted > n / 2);
  Alcotest.(check bool)
    "IPv4 connections bounded" true
    (ip.connections <= T_flood.max_ip_connections);
  Alcotest.(check bool) "IPv4 connections evicted" true (ip.connections_evicted > n / 4);
  Alcotest.(check bool) "ARP entries bounded" true (List.length arp.entries <= T_flood.max_arp);
  Alcotest.(check bool)
    (Fmt.str "heap growth bounded (%d bytes)" growth)
    true
    (growth <= T_flood.max_heap_growth);
  (* The kernel still reaches us: ping, then TCP. *)
  let rc, out = python env (replace ping_script "DST" our_ip) in
  if rc <> 0 then Alcotest.failf "kernel ping after the flood failed: %s" out;
  let (module N) = tcp_node env in
  let l =
    match N.Sock.listen N.tcp 80 with
    | Ok l -> l
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  let got = Buffer.create 1_000_000 in
  Socket.Promise.upon (N.Sock.accept l) (function
    | Error e -> Alcotest.failf "accept: %a" Protocol.pp_error e
    | Ok s ->
        let buf = Cstruct.create 65536 in
        let rec loop () =
          Socket.Promise.upon (N.Sock.read s buf) (function
            | Error e -> Alcotest.failf "read: %a" Protocol.pp_error e
            | Ok 0 ->
                (* Echo it all back, then close. *)
                Socket.Promise.upon
                  (N.Sock.write s (Cstruct.of_string (Buffer.contents got)))
                  (fun _ -> N.Sock.close s)
            | Ok k ->
                Buffer.add_string got (Cstruct.to_string (Cstruct.sub buf 0 k));
                loop ())
        in
        loop ());
  let size = 1_000_000 in
  let rc, out =
    python env ~timeout:60.
      (replace (replace tcp_client_script "@OUR@" our_ip) "@N@" (string_of_int size))
  in
  if rc <> 0 then Alcotest.failf "kernel TCP client after the flood failed: %s" out;
  let data = String.init size (fun i -> Char.chr (((i * 31) + (i lsr 8)) mod 256)) in
  Alcotest.(check int) "TCP: all received" size (Buffer.length got);
  Alcotest.(check bool) "TCP: intact" true (Buffer.contents got = data);
  Alcotest.(check bool)
    "TCP: all echoed to the kernel" true
    (contains out (Printf.sprintf "BACK %d" size));
  Loop.run ~timeout:(Time.of_ms 300) env.up.loop

let suite =
  [
    Alcotest.test_case "flood over TAP: bounded, and the kernel still served" `Quick
      flood_then_serve;
  ]
