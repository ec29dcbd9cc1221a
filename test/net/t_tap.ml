(* Interop with the Linux kernel: our stack on a TAP device whose kernel
   side lives in a network namespace made (and removed) by each test. *)

open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up
module S = Ipstack

let our_ip = "10.77.0.2"
let kernel_ip = "10.77.0.1"

let require_root () =
  if Unix.geteuid () <> 0 then
    Alcotest.fail
      "the TAP interop tests need root (to open /dev/net/tun and create a network namespace); run \
       them as root"

include Net_test_util.Shell

let counter = ref 0

type env = { ns : string; up : Up.t }

(* Runs [f] with the stack on a fresh TAP whose kernel end is in a fresh
   namespace, addressed 10.77.0.1/24 (and, with [v6], the two IPv6
   addresses ours and the kernel's, /64); removes both whatever happens. *)
let with_env ?v6 f =
  require_root ();
  if not (Sys.file_exists "/dev/net/tun") then Alcotest.fail "/dev/net/tun is missing";
  incr counter;
  let ns, tap =
    match v6 with
    | None ->
        ( Printf.sprintf "consort-net-%d-%d" (Unix.getpid ()) !counter,
          Printf.sprintf "cn%d%d" (Unix.getpid () mod 1_000_000) !counter )
    | Some _ ->
        ( Printf.sprintf "consort-net6-%d-%d" (Unix.getpid ()) !counter,
          Printf.sprintf "c6n%d%d" (Unix.getpid () mod 100_000) !counter )
  in
  let up =
    match Up.start ~tap ~ip:(our_ip ^ "/24") ?ip6:(Option.map (fun (o, _) -> o ^ "/64") v6) () with
    | Ok up -> up
    | Error (`Msg m) -> Alcotest.failf "starting the stack on TAP %s: %s" tap m
  in
  Fun.protect
    ~finally:(fun () ->
      Up.stop up;
      Net_test_util.Kernel.remove_namespace ~ns ~tap)
    (fun () ->
      Net_test_util.Kernel.namespace ~ns ~tap ~kernel_ip ?kernel_ip6:(Option.map snd v6) ();
      let r = f { ns; up } in
      Up.stop up;
      Alcotest.(check int) "no buffers held" 0 (Pool.in_use up.pool);
      r)

(* Runs [argv] in the namespace while our loop serves the stack; the
   result is the exit code and the output. *)
let in_ns env ?(timeout = 10.) argv =
  let argv = Array.append [| "ip"; "netns"; "exec"; env.ns |] argv in
  let out = Filename.temp_file "consort-net" ".out" in
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let pid = Unix.create_process "ip" argv Unix.stdin fd fd in
  Unix.close fd;
  let status = ref None in
  let rec poll () =
    match Unix.waitpid [ WNOHANG ] pid with
    | 0, _ -> ignore (Loop.after env.up.loop (Time.of_ms 5) poll)
    | _, st -> status := Some st
  in
  poll ();
  Loop.run ~until:(fun () -> !status <> None) ~timeout:(Time.of_sec timeout) env.up.loop;
  let st =
    match !status with
    | Some st -> st
    | None ->
        Unix.kill pid Sys.sigkill;
        snd (Unix.waitpid [] pid)
  in
  let text = read_file out in
  Sys.remove out;
  match st with
  | WEXITED n -> (n, text)
  | _ ->
      Alcotest.failf "%s: killed (timeout %.0fs)\n%s"
        (String.concat " " (Array.to_list argv))
        timeout text

let python env ?timeout script = in_ns env ?timeout [| "python3"; "-c"; script |]

let ping_script =
  {|
import socket, struct, os, sys, time
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.settimeout(2)
ident = os.getpid() & 0xffff
ok = 0
for seq in range(3):
    payload = (b'consort ping %d ' % seq) * 20
    c = csum(struct.pack('!BBHHH', 8, 0, 0, ident, seq) + payload)
    s.sendto(struct.pack('!BBHHH', 8, 0, c, ident, seq) + payload, ('DST', 0))
    deadline = time.time() + 2
    while time.time() < deadline:
        try: data, addr = s.recvfrom(4096)
        except socket.timeout: break
        icmp = data[(data[0] & 15) * 4:]
        t, code, ck, i, q = struct.unpack('!BBHHH', icmp[:8])
        if t == 0 and i == ident and q == seq:
            if icmp[8:] != payload or csum(icmp) != 0: sys.exit('bad reply')
            ok += 1
            break
print('replies', ok)
sys.exit(0 if ok == 3 else 1)
|}

let kernel_pings_us () =
  with_env @@ fun env ->
  let rc, out = python env (replace ping_script "DST" our_ip) in
  if rc <> 0 then Alcotest.failf "kernel ping failed: %s" out;
  let i = S.Icmp.query env.up.stack.icmp in
  Alcotest.(check bool) "we answered three echo requests" true (i.echo_replies_out >= 3);
  (* The kernel resolved us by ARP. *)
  let a = S.Arp.query env.up.stack.arp in
  Alcotest.(check bool) "we answered the kernel's ARP request" true (a.replies_sent >= 1);
  let neigh = output (Printf.sprintf "ip -n %s neigh show %s" env.ns our_ip) in
  let mac = Mac_addr.to_string (Device.mac (Consort_net_unix.Tap.device env.up.tap)) in
  if not (contains neigh mac) then Alcotest.failf "kernel neighbour table: %s (want %s)" neigh mac;
  (* The system ping too, where installed. *)
  if quiet "command -v ping" = 0 then begin
    let rc, out = in_ns env [| "ping"; "-c"; "3"; "-i"; "0.2"; "-W"; "2"; our_ip |] in
    if rc <> 0 then Alcotest.failf "ping: %s" out
  end

let we_ping_kernel () =
  with_env @@ fun env ->
  let st = env.up.stack in
  let replies = ref 0 in
  let c =
    match
      S.Icmp.active_open st.icmp
        { dst = Ipv4_addr.of_string_exn kernel_ip; id = 77 }
        (fun _ ->
          {
            S.Icmp.receive = (fun _ p -> Packet.release p);
            status =
              (fun _ -> function Icmp.Echo_reply _ -> incr replies | Icmp.Icmp_error _ -> ());
          })
    with
    | Ok c -> c
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  for i = 1 to 3 do
    let p = Packet.of_string ~headroom:(S.Icmp.headroom st.icmp) st.pool (String.make 56 'p') in
    (match S.Icmp.send c p with Ok () -> () | Error e -> Alcotest.failf "%a" Protocol.pp_error e);
    Loop.run ~until:(fun () -> !replies >= i) ~timeout:(Time.of_sec 3.) env.up.loop
  done;
  S.Icmp.close c;
  Alcotest.(check int) "the kernel answered three pings" 3 !replies

let udp_client_script =
  {|
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
for n in [1, 100, 1472, 1473, 4000, 20000, 65507]:
    data = bytes((i * 7 + n) % 256 for i in range(n))
    s.sendto(data, ('DST', 7))
    back, addr = s.recvfrom(70000)
    if back != data or addr != ('DST', 7): sys.exit('bad echo for %d bytes' % n)
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.settimeout(2)
c.connect(('DST', 4444))
c.send(b'to a closed port')
try:
    c.recv(100)
    sys.exit('no error for a closed port')
except ConnectionRefusedError:
    pass
print('ok')
|}

let kernel_udp_to_us () =
  with_env @@ fun env ->
  let rc, out = python env (replace udp_client_script "DST" our_ip) in
  if rc <> 0 then Alcotest.failf "kernel UDP client failed: %s" out;
  let ip = S.Ip.query env.up.stack.ip in
  Alcotest.(check bool) "we reassembled the kernel's fragments" true (ip.reassembled >= 4);
  Alcotest.(check bool) "we fragmented our echoes" true (ip.fragments_sent >= 4);
  Alcotest.(check bool) "port unreachable sent" true ((S.Udp.query env.up.stack.udp).no_port >= 1)

let udp_server_script =
  {|
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('KERNEL', 9000))
s.settimeout(5)
n = 0
while n < 5:
    data, addr = s.recvfrom(70000)
    s.sendto(data, addr)
    n += 1
print('echoed', n)
|}

let us_udp_to_kernel () =
  with_env @@ fun env ->
  let st = env.up.stack in
  let argv =
    [|
      "ip"; "netns"; "exec"; env.ns; "python3"; "-c"; replace udp_server_script "KERNEL" kernel_ip;
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
      S.Udp.active_open st.udp
        { dst = Ipv4_addr.of_string_exn kernel_ip; dst_port = 9000; src_port = 0 }
        (fun _ ->
          {
            S.Udp.receive =
              (fun _ p ->
                got := Packet.to_string p :: !got;
                Packet.release p);
            status = (fun _ _ -> ());
          })
    with
    | Ok c -> c
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  let sizes = [ 10; 1472; 3000; 9000; 30000 ] in
  List.iter
    (fun n ->
      let data = String.init n (fun i -> Char.chr (((i * 13) + n) land 255)) in
      (* The server may not be listening yet: retry until it echoes. *)
      let rec attempt k =
        if k = 0 then Alcotest.failf "no echo from the kernel for %d bytes" n;
        got := [];
        ignore (S.Udp.send c (Packet.of_string ~headroom:(S.Udp.headroom st.udp) st.pool data));
        Loop.run ~until:(fun () -> !got <> []) ~timeout:(Time.of_ms 300) env.up.loop;
        match !got with
        | [ d ] when d = data -> ()
        | [] -> attempt (k - 1)
        | _ -> Alcotest.failf "bad echo for %d bytes" n
      in
      attempt 20)
    sizes;
  S.Udp.close c

let suite =
  [
    Alcotest.test_case "kernel ARP and ping reach our stack" `Quick kernel_pings_us;
    Alcotest.test_case "we ping the kernel" `Quick we_ping_kernel;
    Alcotest.test_case "kernel UDP client, our echo (fragments, port unreachable)" `Quick
      kernel_udp_to_us;
    Alcotest.test_case "our UDP client, kernel echo (fragments)" `Quick us_udp_to_kernel;
  ]
