(* TCP interop with the Linux kernel: our stack on a TAP device whose
   kernel end lives in a network namespace made (and removed) by each test.
   100 MB each way, over IPv4 and over IPv6 (the same TCP functor over the
   other IP), checked by SHA-256 on both sides and byte for byte on ours;
   the kernel's own view of the connection ([ss -ti]) confirms window
   scaling and MSS. *)

open Consort
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up

let our_ip = "10.78.0.2"
let kernel_ip = "10.78.0.1"
let our_ip6 = "fd78::2"
let kernel_ip6 = "fd78::1"

let size =
  match Sys.getenv_opt "TCP_TAP_BYTES" with Some n -> int_of_string n | None -> 100_000_000

(* Why the tests cannot run here, if they cannot. *)
let impossible () =
  if Unix.geteuid () <> 0 then Some "not root: a TAP device and a network namespace need root"
  else if not (Sys.file_exists "/dev/net/tun") then Some "/dev/net/tun is missing"
  else if Sys.command "command -v python3 >/dev/null && command -v ss >/dev/null" <> 0 then
    Some "python3 and ss are needed on the kernel side"
  else None

open Net_test_util.Shell

(* TCP over this stack's IPv4 or IPv6, with that pseudo-header checksum:
   [ours] and [kernel] are the two ends' addresses, [host] reads one, [mss]
   is the kernel's MSS (ours less timestamps). *)
module type TCP_IP = sig
  type host

  module T : Tcp.S with type host = host
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
  val host : string -> host
  val ours : string
  val kernel : string
  val mss : int
  val v6 : bool
end

let config = { Tcp.default_config with send_buffer = 1 lsl 20; receive_buffer = 1 lsl 20 }

let tcp_on (up : Up.t) : (module TCP_IP) =
  let module P =
    (val Net_test_util.Tcp_params.ipv4
           ~clock:(Consort_net_unix.Loop_clock.of_loop up.loop)
           ~pool:up.pool ~rng:(Rng.create 4242) (Ipv4_addr.of_string_exn our_ip))
  in
  let module T = Tcp.Make (Ipv4.Df (Ipstack.Ip)) (P) in
  let tcp =
    match T.create ~config up.stack.ip with
    | Ok t -> t
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  (module struct
    type host = Ipv4_addr.t

    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
    let host = Ipv4_addr.of_string_exn
    let ours = our_ip
    let kernel = kernel_ip
    let mss = 1448
    let v6 = false
  end)

let tcp_on6 (up : Up.t) : (module TCP_IP) =
  let ip6 = match up.v6 with Some v -> v.ip6 | None -> Alcotest.fail "no IPv6 on the stack" in
  let module P =
    (val Net_test_util.Tcp_params.ipv6
           ~clock:(Consort_net_unix.Loop_clock.of_loop up.loop)
           ~pool:up.pool ~rng:(Rng.create 4243) (Ipv6_addr.of_string_exn our_ip6))
  in
  let module T = Tcp.Make (Ipstack.Ip6) (P) in
  let tcp =
    match T.create ~config ~icmp:Tcp_icmp.of_ipv6 ip6 with
    | Ok t -> t
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  (module struct
    type host = Ipv6_addr.t

    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
    let host = Ipv6_addr.of_string_exn
    let ours = our_ip6
    let kernel = kernel_ip6
    let mss = 1428 (* 1500 - 40 - 20 - 12 *)
    let v6 = true
  end)

type env = { ns : string; up : Up.t; data : Bytes.t; file : string; sha : string }

let counter = ref 0

let with_env ?(v6 = false) f =
  match impossible () with
  | Some why -> Logs.app (fun m -> m "SKIPPED: %s" why)
  | None ->
      incr counter;
      let ns = Printf.sprintf "consort-tcp-%d-%d" (Unix.getpid ()) !counter in
      let tap = Printf.sprintf "ct%d%d" (Unix.getpid () mod 1_000_000) !counter in
      let data = Tcp_harness.Transfer.payload ~seed:!counter size in
      let file = Filename.temp_file "consort-tcp" ".data" in
      let oc = open_out_bin file in
      output_bytes oc data;
      close_out oc;
      let sha = Sha256.to_hex (Sha256.string (Bytes.unsafe_to_string data)) in
      let up =
        match
          Up.start ?ip6:(if v6 then Some (our_ip6 ^ "/64") else None) ~tap ~ip:(our_ip ^ "/24") ()
        with
        | Ok up -> up
        | Error (`Msg m) -> Alcotest.failf "starting the stack on TAP %s: %s" tap m
      in
      Fun.protect
        ~finally:(fun () ->
          Up.stop up;
          Sys.remove file;
          Net_test_util.Kernel.remove_namespace ~ns ~tap)
        (fun () ->
          Net_test_util.Kernel.namespace ~ns ~tap ~kernel_ip
            ?kernel_ip6:(if v6 then Some kernel_ip6 else None)
            ();
          f { ns; up; data; file; sha })

(* Start [script] under python3 in the namespace; [wait] runs our loop
   until it exits and returns its output. *)
let spawn env script =
  Net_test_util.Kernel.spawn ~ns:env.ns env.up.loop ~default_timeout:120. script

let field = Net_test_util.Kernel.field

let ss_word ss prefix =
  let words = String.split_on_char ' ' (replace (replace ss "\t" " ") "\n" " ") in
  match
    List.find_opt
      (fun w ->
        String.length w > String.length prefix && String.sub w 0 (String.length prefix) = prefix)
      words
  with
  | Some w -> String.sub w (String.length prefix) (String.length w - String.length prefix)
  | None -> Alcotest.failf "no %s in ss output: %s" prefix ss

let kernel_client =
  {|
import socket, hashlib, subprocess, sys
s = socket.create_connection(('OUR', 5001), timeout=60)
print('SS', subprocess.run(['ss', '-tin', 'dst', 'SSOUR'], capture_output=True, text=True).stdout.replace('\n', ' '))
h = hashlib.sha256()
with open('FILE', 'rb') as f:
    while True:
        b = f.read(1 << 20)
        if not b: break
        h.update(b)
        s.sendall(b)
s.shutdown(socket.SHUT_WR)
print('SENT', h.hexdigest())
h = hashlib.sha256(); n = 0
buf = bytearray(1 << 20); mv = memoryview(buf)
while True:
    k = s.recv_into(buf)
    if k == 0: break
    h.update(mv[:k]); n += k
print('RECV', n, h.hexdigest())
|}

let kernel_server =
  {|
import socket, hashlib, subprocess, sys
l = socket.socket(socket.AF_INET6 if ':' in 'KERNEL' else socket.AF_INET)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('KERNEL', 5002)); l.listen(1); l.settimeout(60)
print('LISTENING', flush=True)
s, addr = l.accept(); s.settimeout(60)
print('SS', subprocess.run(['ss', '-tin', 'dst', 'SSOUR'], capture_output=True, text=True).stdout.replace('\n', ' '))
h = hashlib.sha256(); n = 0
buf = bytearray(1 << 20); mv = memoryview(buf)
while True:
    k = s.recv_into(buf)
    if k == 0: break
    h.update(mv[:k]); n += k
print('RECV', n, h.hexdigest())
h = hashlib.sha256()
with open('FILE', 'rb') as f:
    while True:
        b = f.read(1 << 20)
        if not b: break
        h.update(b)
        s.sendall(b)
s.close()
print('SENT', h.hexdigest())
|}

let mb_s bytes secs = float bytes /. secs /. 1e6

let check_ss ~mss ss (i : Tcp.conn_info) =
  (* ss shows the peer's (our) shift first, then its own. *)
  let ws = ss_word ss "wscale:" in
  let ours = match i.rcv_wscale with Some s -> string_of_int s | None -> "none" in
  let theirs = match i.snd_wscale with Some s -> string_of_int s | None -> "none" in
  Alcotest.(check string) "ss: window scale" (ours ^ "," ^ theirs) ws;
  Alcotest.(check string)
    "ss: the kernel's MSS (ours less timestamps)" (string_of_int mss) (ss_word ss "mss:")

(* The kernel scripts with the addresses filled in ([ss] wants an IPv6
   address in brackets). *)
let script (module N : TCP_IP) env text =
  let ss = if N.v6 then "[" ^ N.ours ^ "]" else N.ours in
  List.fold_left
    (fun t (a, b) -> replace t a b)
    text
    [ ("SSOUR", ss); ("OUR", N.ours); ("KERNEL", N.kernel); ("FILE", env.file) ]

let kernel_connects ~v6 () =
  with_env ~v6 @@ fun env ->
  let (module N) = if v6 then tcp_on6 env.up else tcp_on env.up in
  let l =
    match N.Sock.listen N.tcp 5001 with
    | Ok l -> l
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  let result = ref None and info = ref None in
  Socket.Promise.upon (N.Sock.accept l) (function
    | Error e -> Alcotest.failf "accept: %a" Protocol.pp_error e
    | Ok s ->
        info := Some (N.Sock.info s);
        (* Read everything, checking and hashing it, then send it back. *)
        let store = Bytes.create size and got = ref 0 and buf = Cstruct.create 65536 in
        let t0 = Unix.gettimeofday () in
        let rec loop () =
          Socket.Promise.upon (N.Sock.read s buf) (function
            | Error e -> Alcotest.failf "read: %a" Protocol.pp_error e
            | Ok 0 ->
                let rx = Unix.gettimeofday () -. t0 in
                let t1 = Unix.gettimeofday () in
                Socket.Promise.upon
                  (N.Sock.write s (Cstruct.of_bytes env.data))
                  (function
                    | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e
                    | Ok () ->
                        N.Sock.close s;
                        Socket.Promise.upon (N.Sock.closed s) (function
                          | Ok () ->
                              let tx = Unix.gettimeofday () -. t1 in
                              if Bytes.sub store 0 !got <> env.data then
                                Alcotest.fail "received bytes differ";
                              let sha =
                                Sha256.to_hex
                                  (Sha256.substring (Bytes.unsafe_to_string store) 0 !got)
                              in
                              result := Some (!got, sha, rx, tx)
                          | Error e -> Alcotest.failf "close: %a" Protocol.pp_error e))
            | Ok k ->
                if !got + k > size then Alcotest.fail "too many bytes";
                Cstruct.blit_to_bytes buf 0 store !got k;
                got := !got + k;
                loop ())
        in
        loop ());
  let wait = spawn env (script (module N) env kernel_client) in
  let out = wait ~until:(fun () -> !result <> None) () in
  let got, sha, rx, tx = Option.get !result in
  Alcotest.(check int) "bytes received" size got;
  Alcotest.(check string)
    "SHA-256 of what the kernel sent, as it computed it" env.sha (field out "SENT");
  Alcotest.(check string) "SHA-256 of what we received" env.sha sha;
  Alcotest.(check string)
    "what the kernel received" (Fmt.str "%d %s" size env.sha) (field out "RECV");
  check_ss ~mss:N.mss (field out "SS") (Option.get !info);
  Logs.app (fun m ->
      m "%s, kernel connects: kernel -> us %.1f MB/s, us -> kernel %.1f MB/s; %a"
        (if v6 then "IPv6" else "IPv4")
        (mb_s size rx) (mb_s size tx) Tcp.pp_stats (N.T.query N.tcp))

let we_connect ~v6 () =
  with_env ~v6 @@ fun env ->
  let (module N) = if v6 then tcp_on6 env.up else tcp_on env.up in
  let wait = spawn env (script (module N) env kernel_server) in
  (* The server may not be listening yet: retry refused connections. *)
  let rec connect k =
    let p = N.Sock.connect N.tcp (N.host N.kernel) 5002 in
    Loop.run ~until:(fun () -> Socket.Promise.is_resolved p) ~timeout:(Time.of_sec 10.) env.up.loop;
    match Socket.Promise.peek p with
    | Some (Ok s) -> s
    | Some (Error (`Refused _)) when k > 0 ->
        Loop.run ~timeout:(Time.of_ms 100) env.up.loop;
        connect (k - 1)
    | Some (Error e) -> Alcotest.failf "connect: %a" Protocol.pp_error e
    | None -> Alcotest.fail "connect: no answer"
  in
  let s = connect 50 in
  let info = N.Sock.info s in
  let t0 = Unix.gettimeofday () in
  let sent = ref None in
  Socket.Promise.upon
    (N.Sock.write s (Cstruct.of_bytes env.data))
    (function
      | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e | Ok () -> N.Sock.shutdown s);
  (* Read the kernel's reply to the end. *)
  let store = Bytes.create size and got = ref 0 and t1 = ref 0. and done_ = ref false in
  let rx = ref 0. in
  let buf = Cstruct.create 65536 in
  let rec loop () =
    Socket.Promise.upon (N.Sock.read s buf) (function
      | Error e -> Alcotest.failf "read: %a" Protocol.pp_error e
      | Ok 0 ->
          rx := Unix.gettimeofday () -. !t1;
          N.Sock.close s;
          Socket.Promise.upon (N.Sock.closed s) (fun _ -> done_ := true)
      | Ok k ->
          if !got = 0 then begin
            t1 := Unix.gettimeofday ();
            sent := Some (!t1 -. t0)
          end;
          if !got + k > size then Alcotest.fail "too many bytes";
          Cstruct.blit_to_bytes buf 0 store !got k;
          got := !got + k;
          loop ())
  in
  loop ();
  let out = wait ~until:(fun () -> !done_) () in
  let rx = !rx in
  Alcotest.(check string)
    "what the kernel received" (Fmt.str "%d %s" size env.sha) (field out "RECV");
  Alcotest.(check string) "SHA-256 of what the kernel sent" env.sha (field out "SENT");
  Alcotest.(check int) "bytes received" size !got;
  Alcotest.(check bool) "received bytes, byte for byte" true (Bytes.sub store 0 !got = env.data);
  Alcotest.(check string)
    "SHA-256 of what we received" env.sha
    (Sha256.to_hex (Sha256.substring (Bytes.unsafe_to_string store) 0 !got));
  check_ss ~mss:N.mss (field out "SS") info;
  Logs.app (fun m ->
      m "%s, we connect: us -> kernel %.1f MB/s, kernel -> us %.1f MB/s; %a"
        (if v6 then "IPv6" else "IPv4")
        (mb_s size (Option.value !sent ~default:1.))
        (mb_s size rx) Tcp.pp_stats (N.T.query N.tcp))

let () =
  Logs.set_reporter (Logs_fmt.reporter ());
  Logs.set_level (Some Logs.App);
  (match impossible () with
  | Some why -> Printf.printf "consort-tcp-tap: the kernel interop tests skip: %s\n%!" why
  | None -> ());
  Alcotest.run "consort-tcp-tap"
    [
      ( "kernel",
        [
          Alcotest.test_case "the kernel connects to us; 100 MB each way" `Slow
            (kernel_connects ~v6:false);
          Alcotest.test_case "we connect to the kernel; 100 MB each way" `Slow
            (we_connect ~v6:false);
          Alcotest.test_case "IPv6: the kernel connects to us; 100 MB each way" `Slow
            (kernel_connects ~v6:true);
          Alcotest.test_case "IPv6: we connect to the kernel; 100 MB each way" `Slow
            (we_connect ~v6:true);
        ] );
    ]
