(* [consort net up], the built binary, on a TAP device whose kernel end
   is moved into a network namespace that the test makes and removes; a
   python3 client in the namespace checks the TCP services from the
   kernel's side: echo returns what was sent, discard takes everything and
   closes, the throughput source delivers the bytes it announces (RFC 864
   lines, checked byte for byte) and discard measures the other way. *)

let our_ip = "10.80.0.2"
let kernel_ip = "10.80.0.1"
let source_mb = 100
let discard_mb = 100

let require_root () =
  if Unix.geteuid () <> 0 then
    Alcotest.fail
      "this test needs root (to open /dev/net/tun and create a network namespace); run it as root";
  if not (Sys.file_exists "/dev/net/tun") then Alcotest.fail "/dev/net/tun is missing";
  if Sys.command "command -v python3 >/dev/null" <> 0 then
    Alcotest.fail "python3 is needed on the kernel side"

open Net_test_util.Shell

let starts_with s p = String.length s >= String.length p && String.sub s 0 (String.length p) = p
let lines s = List.filter (( <> ) "") (String.split_on_char '\n' s)

(* Polls [cond] every 20 ms for at most [seconds]. *)
let wait_for seconds cond =
  let deadline = Unix.gettimeofday () +. seconds in
  let rec go () =
    if cond () then true
    else if Unix.gettimeofday () > deadline then false
    else (
      Unix.sleepf 0.02;
      go ())
  in
  go ()

let client =
  {|
import socket, sys, time, random, threading
OUR = 'OUR_IP'

def connect(port):
    for i in range(50):
        try:
            return socket.create_connection((OUR, port), timeout=10)
        except OSError:
            time.sleep(0.1)
    sys.exit('cannot connect to port %d' % port)

def eof(s, what):
    s.settimeout(10)
    if s.recv(100) != b'':
        sys.exit(what + ': data after the end')

# Echo: a writer thread and this reader, so that neither side stalls.
s = connect(7)
rnd = random.Random(7)
for n in [1, 100, 1460, 1461, 65536, 1000000]:
    data = rnd.randbytes(n)
    w = threading.Thread(target=s.sendall, args=(data,))
    w.start()
    got = bytearray()
    while len(got) < n:
        k = s.recv(1 << 16)
        if not k:
            sys.exit('echo: the connection closed after %d of %d bytes' % (len(got), n))
        got += k
    w.join()
    if bytes(got) != data:
        sys.exit('echo: %d bytes came back different' % n)
s.shutdown(socket.SHUT_WR)
eof(s, 'echo')
s.close()
print('ECHO ok', flush=True)

# Discard: takes everything, sends nothing, closes after our FIN.
s = connect(9)
s.sendall(rnd.randbytes(1000000))
s.shutdown(socket.SHUT_WR)
eof(s, 'discard')
s.close()
print('DISCARD ok', flush=True)

# Kernel to us, timed: discard drains DISCARD_BYTES.
block = bytes(1 << 20)
n = DISCARD_BYTES
s = connect(9)
t0 = time.time()
left = n
while left > 0:
    k = min(left, len(block))
    s.sendall(block[:k])
    left -= k
s.shutdown(socket.SHUT_WR)
eof(s, 'discard')
dt = time.time() - t0
s.close()
print('TO_US %d %.1f' % (n, n * 8 / dt / 1e6), flush=True)

# Us to kernel: the source sends RFC 864 lines, checked as they come.
period = bytes((13 if c == 72 else 10 if c == 73 else 32 + (l + c) % 95) for l in range(95) for c in range(74))
pattern = period * 12
buf = bytearray(1 << 16)
s = connect(SOURCE_PORT)
s.settimeout(20)
got = 0
t0 = time.time()
while True:
    k = s.recv_into(buf)
    if k == 0:
        break
    off = got % len(period)
    if buf[:k] != pattern[off:off + k]:
        sys.exit('source: wrong bytes at offset %d' % got)
    got += k
dt = time.time() - t0
s.close()
print('FROM_US %d %.1f' % (got, got * 8 / dt / 1e6), flush=True)
|}

let field out key =
  match List.find_opt (fun l -> starts_with l (key ^ " ")) (lines out) with
  | Some l -> List.tl (String.split_on_char ' ' l)
  | None -> Alcotest.failf "no %s line from the client:\n%s" key out

let services () =
  require_root ();
  let exe = consort_exe () in
  let id = string_of_int (Unix.getpid () mod 100_000) in
  let ns = "consort-up-" ^ id and tap = "cup" ^ id in
  let out = Filename.temp_file "consort-up" ".stdout" in
  let script = Filename.temp_file "consort-up" ".py" in
  let source_port = 5019 in
  write_file script
    (List.fold_left
       (fun s (a, b) -> replace s a b)
       client
       [
         ("OUR_IP", our_ip);
         ("DISCARD_BYTES", string_of_int (discard_mb * 1_000_000));
         ("SOURCE_PORT", string_of_int source_port);
       ]);
  let pid = ref None in
  let exited = ref None in
  let reap p = match Unix.waitpid [ WNOHANG ] p with 0, _ -> () | _, st -> exited := Some st in
  Fun.protect ~finally:(fun () ->
      (match (!pid, !exited) with
      | Some p, None -> (
          try
            Unix.kill p Sys.sigkill;
            ignore (Unix.waitpid [] p)
          with Unix.Unix_error _ -> ())
      | _ -> ());
      List.iter (fun f -> try Sys.remove f with Sys_error _ -> ()) [ out; script ];
      ignore (quiet ("ip netns del " ^ ns));
      ignore (quiet ("ip link del " ^ tap)))
  @@ fun () ->
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let argv =
    [|
      exe;
      "net";
      "up";
      "--tap";
      tap;
      "--ip";
      our_ip ^ "/24";
      "--source-port";
      string_of_int source_port;
      "--source-mb";
      string_of_int source_mb;
      "--for";
      "60";
    |]
  in
  let p = Unix.create_process exe argv Unix.stdin fd fd in
  Unix.close fd;
  pid := Some p;
  let banner = Printf.sprintf "consort net: %s up as %s/24" tap our_ip in
  if
    (not
       (wait_for 5. (fun () ->
            reap p;
            !exited <> None || contains (read_file out) banner)))
    || !exited <> None
  then Alcotest.failf "consort net up did not come up:\n%s" (read_file out);
  must ("ip netns add " ^ ns);
  must (Printf.sprintf "ip link set %s netns %s" tap ns);
  ignore (quiet (Printf.sprintf "ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1" ns));
  must (Printf.sprintf "ip -n %s addr add %s/24 dev %s" ns kernel_ip tap);
  must (Printf.sprintf "ip -n %s link set %s up" ns tap);
  must (Printf.sprintf "ip -n %s link set lo up" ns);
  let rc, said =
    run (Printf.sprintf "timeout 25 ip netns exec %s python3 %s" ns (Filename.quote script))
  in
  if rc <> 0 then
    Alcotest.failf "the kernel-side client failed (%d):\n%s\nconsort net up said:\n%s" rc said
      (read_file out);
  (* SIGTERM: the stack prints its counters and exits. *)
  Unix.kill p Sys.sigterm;
  if
    not
      (wait_for 5. (fun () ->
           reap p;
           !exited <> None))
  then Alcotest.fail "consort net up did not stop on SIGTERM";
  let printed = read_file out in
  Alcotest.(check bool) "consort net up exited cleanly" true (!exited = Some (Unix.WEXITED 0));
  let has what prefix =
    match List.find_opt (fun l -> starts_with l prefix) (lines printed) with
    | Some l -> l
    | None -> Alcotest.failf "consort net up did not print %s (%S):\n%s" what prefix printed
  in
  Alcotest.(check (list string)) "echo" [ "ok" ] (field said "ECHO");
  Alcotest.(check (list string)) "discard" [ "ok" ] (field said "DISCARD");
  let from_us = field said "FROM_US" and to_us = field said "TO_US" in
  Alcotest.(check string)
    "the source's bytes, all of them"
    (string_of_int (source_mb * 1_000_000))
    (List.hd from_us);
  Alcotest.(check string)
    "the kernel's bytes, all of them"
    (string_of_int (discard_mb * 1_000_000))
    (List.hd to_us);
  ignore (has "the small discard" "tcp discard: received 1000000 bytes from 10.80.0.1:");
  let d =
    has "the timed discard"
      (Printf.sprintf "tcp discard: received %d bytes from 10.80.0.1:" (discard_mb * 1_000_000))
  in
  let s =
    has "the source's report"
      (Printf.sprintf "tcp source: sent %d bytes to 10.80.0.1:" (source_mb * 1_000_000))
  in
  ignore (has "TCP counters" "tcp: ");
  Logs.app (fun m ->
      m
        "kernel -> consort: %s Mbit/s at the kernel (%s); consort -> kernel: %s Mbit/s at the \
         kernel (%s)"
        (List.nth to_us 1) d (List.nth from_us 1) s)

(* The memory budget, from outside: 300 kernel connections to the source
   that never read (a 2 KiB receive buffer each, so their windows shut at
   once) against consort net up --memory 16. The process's peak resident
   size (VmHWM) grows by no more than the budget and a MiB for the
   connections' records and the heap's slack; without the budget each
   connection would hold its 1 MiB send buffer (300 MiB). *)
let zero_window_client =
  {|
import socket, time
socks = []
for i in range(300):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.settimeout(5)
    try:
        s.connect(('OUR_IP', SOURCE_PORT))
        socks.append(s)
    except OSError as e:
        print('CONNECT_FAILED', i, e)
print('CONNECTED', len(socks), flush=True)
time.sleep(4)
print('DONE', flush=True)
|}

let status_kib pid key =
  (* /proc files have no length: read line by line. *)
  let ic = open_in (Printf.sprintf "/proc/%d/status" pid) in
  let text =
    Fun.protect
      ~finally:(fun () -> close_in ic)
      (fun () ->
        let rec go acc =
          match input_line ic with l -> go (l :: acc) | exception End_of_file -> List.rev acc
        in
        String.concat "\n" (go []))
  in
  match List.find_opt (fun l -> starts_with l (key ^ ":")) (lines text) with
  | Some l ->
      let v =
        String.trim (String.sub l (String.length key + 1) (String.length l - String.length key - 1))
      in
      int_of_string (List.hd (String.split_on_char ' ' v))
  | None -> Alcotest.failf "no %s in /proc/%d/status" key pid

let zero_windows () =
  require_root ();
  let exe = consort_exe () in
  let budget_mib = 16 in
  let id = string_of_int (Unix.getpid () mod 100_000) in
  let ns = "consort-upz-" ^ id and tap = "cuz" ^ id in
  let out = Filename.temp_file "consort-up" ".stdout" in
  let script = Filename.temp_file "consort-up" ".py" in
  let source_port = 5019 in
  write_file script
    (List.fold_left
       (fun s (a, b) -> replace s a b)
       zero_window_client
       [ ("OUR_IP", our_ip); ("SOURCE_PORT", string_of_int source_port) ]);
  let pid = ref None in
  let exited = ref None in
  let reap p = match Unix.waitpid [ WNOHANG ] p with 0, _ -> () | _, st -> exited := Some st in
  Fun.protect ~finally:(fun () ->
      (match (!pid, !exited) with
      | Some p, None -> (
          try
            Unix.kill p Sys.sigkill;
            ignore (Unix.waitpid [] p)
          with Unix.Unix_error _ -> ())
      | _ -> ());
      List.iter (fun f -> try Sys.remove f with Sys_error _ -> ()) [ out; script ];
      ignore (quiet ("ip netns del " ^ ns));
      ignore (quiet ("ip link del " ^ tap)))
  @@ fun () ->
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let argv =
    [|
      exe;
      "net";
      "up";
      "--tap";
      tap;
      "--ip";
      our_ip ^ "/24";
      "--source-port";
      string_of_int source_port;
      "--source-mb";
      "100";
      "--memory";
      string_of_int budget_mib;
      "--for";
      "60";
    |]
  in
  let p = Unix.create_process exe argv Unix.stdin fd fd in
  Unix.close fd;
  pid := Some p;
  let banner = Printf.sprintf "consort net: %s up as %s/24" tap our_ip in
  if
    (not
       (wait_for 5. (fun () ->
            reap p;
            !exited <> None || contains (read_file out) banner)))
    || !exited <> None
  then Alcotest.failf "consort net up did not come up:\n%s" (read_file out);
  must ("ip netns add " ^ ns);
  must (Printf.sprintf "ip link set %s netns %s" tap ns);
  ignore (quiet (Printf.sprintf "ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1" ns));
  must (Printf.sprintf "ip -n %s addr add %s/24 dev %s" ns kernel_ip tap);
  must (Printf.sprintf "ip -n %s link set %s up" ns tap);
  must (Printf.sprintf "ip -n %s link set lo up" ns);
  let base = status_kib p "VmRSS" in
  let rc, said =
    run (Printf.sprintf "timeout 40 ip netns exec %s python3 %s" ns (Filename.quote script))
  in
  if rc <> 0 then
    Alcotest.failf "the kernel-side client failed (%d):\n%s\nconsort net up said:\n%s" rc said
      (read_file out);
  let peak = status_kib p "VmHWM" in
  Unix.kill p Sys.sigterm;
  if
    not
      (wait_for 5. (fun () ->
           reap p;
           !exited <> None))
  then Alcotest.fail "consort net up did not stop on SIGTERM";
  let printed = read_file out in
  Logs.app (fun m -> m "resident %d KiB before, peak %d KiB; %s" base peak printed);
  Alcotest.(check bool) "consort net up exited cleanly" true (!exited = Some (Unix.WEXITED 0));
  Alcotest.(check (list string)) "300 connections" [ "300" ] (field said "CONNECTED");
  let tcp =
    match List.find_opt (fun l -> starts_with l "tcp: ") (lines printed) with
    | Some l -> l
    | None -> Alcotest.failf "no TCP counters:\n%s" printed
  in
  Alcotest.(check bool)
    (Printf.sprintf "connections reset for memory (%s)" tcp)
    true
    (not (contains tcp "memory resets 0 "));
  Alcotest.(check bool)
    (Printf.sprintf "peak resident size %d KiB within %d KiB and the budget (%d MiB) and 8 MiB" peak
       base budget_mib)
    true
    (peak - base <= (budget_mib + 8) * 1024)

(* [--ip6]: neighbour discovery, ping6, UDP echo and TCP echo and discard
   over IPv6 from the kernel's side; a malformed address is one clear line
   and exit 1. *)
let client6 =
  {|
import socket, struct, os, sys, time
OUR = 'OUR_IP6'
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.settimeout(2)
ok = 0
for seq in range(3):
    s.sendto(struct.pack('!BBHHH', 128, 0, 0, 4242, seq) + b'ping6 from the kernel', (OUR, 0))
    deadline = time.time() + 3
    while time.time() < deadline:
        try: data, addr = s.recvfrom(4096)
        except socket.timeout: break
        if data[0] == 129 and struct.unpack('!H', data[6:8])[0] == seq:
            ok += 1
            break
print('PING6', ok, flush=True)
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.settimeout(2)
for attempt in range(5):
    u.sendto(b'udp over ipv6', (OUR, 7))
    try:
        back, addr = u.recvfrom(100)
        print('UDP6', back.decode(), flush=True)
        break
    except socket.timeout:
        pass
import hashlib
t = socket.create_connection((OUR, 7), timeout=10)
data = os.urandom(300000)
t.sendall(data)
t.shutdown(socket.SHUT_WR)
back = bytearray()
while True:
    k = t.recv(1 << 16)
    if not k: break
    back += k
print('TCP6ECHO', len(back), hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest(), flush=True)
d = socket.create_connection((OUR, 9), timeout=10)
d.sendall(b'x' * 1000000)
d.close()
time.sleep(0.5)
|}

let ip6_up () =
  let exe = consort_exe () in
  (* Bad input first (no root needed: it is refused before any device). *)
  let rc, said =
    run
      (Printf.sprintf "%s net up --tap cupx --ip 10.81.0.2/24 --ip6 fd81::zz/64"
         (Filename.quote exe))
  in
  Alcotest.(check int) "a malformed --ip6 is refused: exit 2" 2 rc;
  Alcotest.(check int) "with one line" 1 (List.length (lines said));
  Alcotest.(check bool) (Printf.sprintf "naming the option: %S" said) true (contains said "--ip6");
  require_root ();
  let id = string_of_int (Unix.getpid () mod 100_000) in
  let ns = "consort-up6-" ^ id and tap = "cu6" ^ id in
  let out = Filename.temp_file "consort-up6" ".stdout" in
  let script = Filename.temp_file "consort-up6" ".py" in
  write_file script (replace client6 "OUR_IP6" "fd81::2");
  let pid = ref None and exited = ref None in
  let reap p = match Unix.waitpid [ WNOHANG ] p with 0, _ -> () | _, st -> exited := Some st in
  Fun.protect ~finally:(fun () ->
      (match (!pid, !exited) with
      | Some p, None -> (
          try
            Unix.kill p Sys.sigkill;
            ignore (Unix.waitpid [] p)
          with Unix.Unix_error _ -> ())
      | _ -> ());
      List.iter (fun f -> try Sys.remove f with Sys_error _ -> ()) [ out; script ];
      ignore (quiet ("ip netns del " ^ ns));
      ignore (quiet ("ip link del " ^ tap)))
  @@ fun () ->
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let argv =
    [|
      exe; "net"; "up"; "--tap"; tap; "--ip"; "10.81.0.2/24"; "--ip6"; "fd81::2/64"; "--for"; "30";
    |]
  in
  let p = Unix.create_process exe argv Unix.stdin fd fd in
  Unix.close fd;
  pid := Some p;
  let banner = Printf.sprintf "consort net: %s up as 10.81.0.2/24 and fe80::" tap in
  if
    (not
       (wait_for 5. (fun () ->
            reap p;
            !exited <> None || contains (read_file out) banner)))
    || !exited <> None
  then Alcotest.failf "consort net up --ip6 did not come up:\n%s" (read_file out);
  Alcotest.(check bool)
    "the banner names the IPv6 address" true
    (contains (read_file out) "and fd81::2 (");
  must ("ip netns add " ^ ns);
  must (Printf.sprintf "ip link set %s netns %s" tap ns);
  ignore (quiet (Printf.sprintf "ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=0" ns));
  must (Printf.sprintf "ip -n %s -6 addr add fd81::1/64 dev %s nodad" ns tap);
  must (Printf.sprintf "ip -n %s link set %s up" ns tap);
  let rc, said =
    run (Printf.sprintf "timeout 25 ip netns exec %s python3 %s" ns (Filename.quote script))
  in
  if rc <> 0 then Alcotest.failf "the kernel-side client failed (%d):\n%s" rc said;
  Unix.kill p Sys.sigterm;
  if
    not
      (wait_for 5. (fun () ->
           reap p;
           !exited <> None))
  then Alcotest.fail "consort net up did not stop on SIGTERM";
  Alcotest.(check bool) "exited cleanly" true (!exited = Some (Unix.WEXITED 0));
  Alcotest.(check (list string)) "ping6 from the kernel" [ "3" ] (field said "PING6");
  Alcotest.(check (list string)) "UDP echo over IPv6" [ "udp"; "over"; "ipv6" ] (field said "UDP6");
  Alcotest.(check (list string))
    "TCP echo over IPv6: every byte back" [ "300000"; "True" ] (field said "TCP6ECHO");
  Alcotest.(check bool)
    "TCP discard over IPv6 reported the kernel's megabyte" true
    (contains (read_file out) "tcp discard: received 1000000 bytes from [fd81::1]:");
  Alcotest.(check bool)
    "TCP over IPv6 counters printed" true
    (List.exists (fun l -> starts_with l "tcp6: ") (lines (read_file out)));
  Alcotest.(check bool)
    "IPv6 counters printed" true
    (List.exists (fun l -> starts_with l "ipv6: ") (lines (read_file out)))

let () =
  Logs.set_reporter (Logs.format_reporter ());
  Logs.set_level (Some Logs.Warning);
  Alcotest.run "net_up"
    [
      ( "tap",
        [
          Alcotest.test_case "consort net up: TCP echo, discard, throughput source" `Quick services;
          Alcotest.test_case "consort net up --ip6: ping6, UDP over IPv6, bad address" `Quick ip6_up;
          Alcotest.test_case "consort net up --memory: 300 zero windows, resident size bounded"
            `Quick zero_windows;
        ] );
    ]
