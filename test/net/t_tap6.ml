(* IPv6 interop with the Linux kernel: our stack (IPv4 and IPv6) on a TAP
   device whose kernel end lives in a network namespace made and removed
   by each test. Neighbour discovery both ways, ping6 both ways, UDP both
   ways. *)

open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up
module S = Ipstack
open T_tap

let our_ip = "10.79.0.2"
let kernel_ip = "10.79.0.1"
let our_ip6 = "fd79::2"
let kernel_ip6 = "fd79::1"

let v6 (env : env) =
  match env.up.v6 with Some v -> v | None -> Alcotest.fail "no IPv6 on the stack"

let with_env6 f = with_env ~v6:(our_ip6, kernel_ip6) f

let ping6_script =
  {|
import socket, struct, os, sys, time
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.settimeout(2)
ident = os.getpid() & 0xffff
ok = 0
for seq in range(3):
    payload = (b'consort ping6 %d ' % seq) * 20
    # The kernel fills in the ICMPv6 checksum of raw ICMPv6 sockets.
    s.sendto(struct.pack('!BBHHH', 128, 0, 0, ident, seq) + payload, ('DST', 0))
    deadline = time.time() + 3
    while time.time() < deadline:
        try: data, addr = s.recvfrom(4096)
        except socket.timeout: break
        t, code, ck, i, q = struct.unpack('!BBHHH', data[:8])
        if t == 129 and i == ident and q == seq:
            if data[8:] != payload: sys.exit('bad reply')
            ok += 1
            break
print('replies', ok)
sys.exit(0 if ok == 3 else 1)
|}

let kernel_pings6_us () =
  with_env6 @@ fun env ->
  let rc, out = python env (replace ping6_script "DST" our_ip6) in
  if rc <> 0 then Alcotest.failf "kernel ping6 failed: %s" out;
  let i = S.Ip6.query (v6 env).ip6 in
  Alcotest.(check bool) "we answered three echo requests" true (i.version.echo_replies_sent >= 3);
  Alcotest.(check bool)
    "we answered the kernel's solicitation" true
    (i.version.advertisements_sent >= 1);
  let neigh = output (Printf.sprintf "ip -n %s -6 neigh show %s" env.ns our_ip6) in
  let mac = Mac_addr.to_string (Device.mac (Consort_net_unix.Tap.device env.up.tap)) in
  if not (contains neigh mac) then Alcotest.failf "kernel neighbour table: %s (want %s)" neigh mac;
  (* The link-local address too. *)
  let ll = Ipv6_addr.to_string (S.Ip6.link_local (v6 env).ip6) in
  let tap =
    String.trim
      (output
         (Printf.sprintf "ip -n %s -o link show | awk -F': ' '/c6n/ {print $2}' | cut -d@ -f1"
            env.ns))
  in
  let rc, out =
    python env (replace ping6_script "'DST', 0" (Printf.sprintf "'%s%%%s', 0" ll tap))
  in
  if rc <> 0 then Alcotest.failf "kernel ping6 to our link-local address failed: %s" out;
  if quiet "command -v ping" = 0 then begin
    let rc, out = in_ns env [| "ping"; "-6"; "-c"; "3"; "-i"; "0.2"; "-W"; "2"; our_ip6 |] in
    if rc <> 0 then Alcotest.failf "ping -6: %s" out
  end

let we_ping6_kernel () =
  with_env6 @@ fun env ->
  let v = v6 env in
  let replies = ref 0 in
  let c =
    match
      S.Ip6.active_open v.ip6
        { dst = Ipv6_addr.of_string_exn kernel_ip6; proto = 58 }
        (fun _ ->
          {
            S.Ip6.receive =
              (fun _ p ->
                if Cstruct.get_uint8 (Packet.cstruct p) 0 = 129 then incr replies;
                Packet.release p);
            status = (fun _ _ -> ());
          })
    with
    | Ok c -> c
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  for i = 1 to 3 do
    let p =
      Packet.of_string ~headroom:(S.Ip6.headroom v.ip6) env.up.pool
        (T_ipv6.echo_request ~id:77 ~seq:i (String.make 56 'p'))
    in
    (match S.Ip6.send c p with Ok () -> () | Error e -> Alcotest.failf "%a" Protocol.pp_error e);
    Loop.run ~until:(fun () -> !replies >= i) ~timeout:(Time.of_sec 3.) env.up.loop
  done;
  S.Ip6.close c;
  Alcotest.(check int) "the kernel answered three pings" 3 !replies;
  Alcotest.(check bool)
    "we resolved the kernel by neighbour discovery" true
    (S.Ip6.lookup v.ip6 (Ipv6_addr.of_string_exn kernel_ip6) <> None)

let udp6_client_script =
  {|
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(2)
for n in [1, 100, 1000, 1452]:
    data = bytes((i * 7 + n) % 256 for i in range(n))
    for attempt in range(3):
        s.sendto(data, ('DST', 7))
        try:
            back, addr = s.recvfrom(70000)
            break
        except socket.timeout:
            back, addr = None, None
    if back != data or addr[0] != 'DST' or addr[1] != 7: sys.exit('bad echo for %d bytes' % n)
# Larger than the link: the kernel fragments, we reassemble and (too big to echo whole) drop the echo.
c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
c.settimeout(2)
c.connect(('DST', 4444))
c.send(b'to a closed port')
try:
    c.recv(100)
    sys.exit('no error for a closed port')
except ConnectionRefusedError:
    pass
s.sendto(bytes(5000), ('DST', 9))
print('ok')
|}

let kernel_udp6_to_us () =
  with_env6 @@ fun env ->
  let rc, out = python env (replace udp6_client_script "DST" our_ip6) in
  if rc <> 0 then Alcotest.failf "kernel UDP client failed: %s" out;
  Loop.run ~timeout:(Time.of_ms 200) env.up.loop;
  let v = v6 env in
  Alcotest.(check bool) "port unreachable sent" true ((S.Udp6.query v.udp6).no_port >= 1);
  Alcotest.(check bool)
    "the kernel's fragments reassembled" true
    ((S.Ip6.query v.ip6).reassembled >= 1)

let udp6_server_script =
  {|
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(('KERNEL', 9000))
s.settimeout(5)
n = 0
while n < 4:
    data, addr = s.recvfrom(70000)
    s.sendto(data, addr)
    n += 1
print('echoed', n)
|}

let us_udp6_to_kernel () =
  with_env6 @@ fun env ->
  let v = v6 env in
  let argv =
    [|
      "ip"; "netns"; "exec"; env.ns; "python3"; "-c"; replace udp6_server_script "KERNEL" kernel_ip6;
    |]
  in
  let pid = Unix.create_process "ip" argv Unix.stdin Unix.stdout Unix.stderr in
  Fun.protect ~finally:(fun () ->
      try
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid)
      with Unix.Unix_error _ -> ())
  @@ fun () ->
  let got = ref [] in
  let c =
    match
      S.Udp6.active_open v.udp6
        { dst = Ipv6_addr.of_string_exn kernel_ip6; dst_port = 9000; src_port = 0 }
        (fun _ ->
          {
            S.Udp6.receive =
              (fun _ p ->
                got := Packet.to_string p :: !got;
                Packet.release p);
            status = (fun _ _ -> ());
          })
    with
    | Ok c -> c
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  List.iter
    (fun n ->
      let data = String.init n (fun i -> Char.chr (((i * 13) + n) land 255)) in
      let rec attempt k =
        if k = 0 then Alcotest.failf "no echo from the kernel for %d bytes" n;
        got := [];
        ignore
          (S.Udp6.send c (Packet.of_string ~headroom:(S.Udp6.headroom v.udp6) env.up.pool data));
        Loop.run ~until:(fun () -> !got <> []) ~timeout:(Time.of_ms 300) env.up.loop;
        match !got with
        | [ d ] when d = data -> ()
        | [] -> attempt (k - 1)
        | _ -> Alcotest.failf "bad echo for %d bytes" n
      in
      attempt 20)
    [ 10; 500; 1400; 1452 ];
  S.Udp6.close c

let suite =
  [
    Alcotest.test_case "kernel neighbour discovery and ping6 reach our stack" `Quick
      kernel_pings6_us;
    Alcotest.test_case "we ping6 the kernel" `Quick we_ping6_kernel;
    Alcotest.test_case "kernel UDP client over IPv6, our echo" `Quick kernel_udp6_to_us;
    Alcotest.test_case "our UDP client over IPv6, kernel echo" `Quick us_udp6_to_kernel;
  ]
