(* TCP over IPv4 between our stack and the Linux kernel, through the
   impairment device: frames are dropped, reordered and duplicated in both
   directions between our stack and the TAP device. Both directions of a
   transfer, in both roles (the kernel connects; we connect), checked by
   SHA-256 on both sides and byte for byte on ours. *)

open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Tap = Consort_net_unix.Tap
module S = Ipstack

let our_ip = "10.82.0.2"
let kernel_ip = "10.82.0.1"

let size =
  match Sys.getenv_opt "TCP_IMPAIR_BYTES" with Some n -> int_of_string n | None -> 20_000_000

let impairment =
  { Impair.none with drop = 0.01; reorder = 0.02; reorder_delay = Time.of_ms 2; duplicate = 0.005 }

open Net_test_util.Shell

module type NODE = sig
  module T : Tcp.S with type host = Ipv4_addr.t
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
end

type env = {
  ns : string;
  loop : Loop.t;
  pool : Pool.t;
  stack : S.t;
  out_imp : Impair.t; (* our frames towards the kernel *)
  in_imp : Impair.t; (* the kernel's frames towards us *)
  node : (module NODE);
  data : Bytes.t;
  file : string;
  sha : string;
}

let payload n =
  let st = Random.State.make [| n |] in
  Bytes.init n (fun _ -> Char.chr (Random.State.int st 256))

(* The stack on [tap] with impairment both ways: what the stack sends goes
   through [out_imp] to the TAP device; what the TAP device receives goes
   through [in_imp] to the stack. *)
let impaired_stack ~loop ~pool ~clock tap =
  let tap_dev = Tap.device tap in
  let rec stack_dev =
    lazy
      (Device.v ~name:"impaired" ~mac:(Device.mac tap_dev) ~mtu:(Device.mtu tap_dev)
         ~send:(fun p -> Device.send (Impair.device (Lazy.force out_imp)) p)
         ())
  and out_imp = lazy (Impair.wrap ~clock ~seed:1 ~pool impairment tap_dev) in
  let sink =
    Device.v ~name:"to the stack" ~mac:(Device.mac tap_dev) ~mtu:(Device.mtu tap_dev)
      ~send:(fun p ->
        Device.deliver (Lazy.force stack_dev) p;
        Ok ())
      ()
  in
  let in_imp = Impair.wrap ~clock ~seed:2 ~pool impairment sink in
  (* Wrapping [tap_dev] takes its receive upcall: ours must come after. *)
  let out_imp = Lazy.force out_imp in
  Device.set_receive tap_dev (fun p -> ignore (Device.send (Impair.device in_imp) p));
  ignore loop;
  (Lazy.force stack_dev, out_imp, in_imp)

let tcp_on ~clock ~pool (stack : S.t) : (module NODE) =
  let module P =
    (val Net_test_util.Tcp_params.ipv4 ~clock ~pool ~rng:(Rng.create 4243)
           (Ipv4_addr.of_string_exn our_ip))
  in
  let module T = Tcp.Make (Ipv4.Df (S.Ip)) (P) in
  let config = { Tcp.default_config with send_buffer = 1 lsl 20; receive_buffer = 1 lsl 20 } in
  let tcp =
    match T.create ~config stack.ip with
    | Ok t -> t
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

let counter = ref 0

let with_env f =
  if Unix.geteuid () <> 0 then
    Alcotest.fail "a TAP device and a network namespace need root: run as root";
  if not (Sys.file_exists "/dev/net/tun") then Alcotest.fail "/dev/net/tun is missing";
  incr counter;
  let ns = Printf.sprintf "consort-imp-%d-%d" (Unix.getpid ()) !counter in
  let tap_name = Printf.sprintf "ci%d%d" (Unix.getpid () mod 1_000_000) !counter in
  let data = payload (size + !counter) in
  let data = Bytes.sub data 0 size in
  let file = Filename.temp_file "consort-impair" ".data" in
  let oc = open_out_bin file in
  output_bytes oc data;
  close_out oc;
  let sha = Sha256.to_hex (Sha256.string (Bytes.unsafe_to_string data)) in
  let loop = Loop.create () in
  let pool = Pool.create ~name:"impair" () in
  let tap =
    match Tap.open_ ~pool loop tap_name with
    | Ok t -> t
    | Error (`Msg m) -> Alcotest.failf "TAP %s: %s" tap_name m
  in
  Fun.protect
    ~finally:(fun () ->
      Tap.close tap;
      Sys.remove file;
      Net_test_util.Kernel.remove_namespace ~ns ~tap:tap_name)
    (fun () ->
      let clock = Consort_net_unix.Loop_clock.of_loop loop in
      let dev, out_imp, in_imp = impaired_stack ~loop ~pool ~clock tap in
      let address = Result.get_ok (Ipv4_addr.Prefix.of_string (our_ip ^ "/24")) in
      let stack = S.create ~clock ~pool ~address dev in
      let node = tcp_on ~clock ~pool stack in
      Net_test_util.Kernel.namespace ~ns ~tap:tap_name ~kernel_ip ();
      f { ns; loop; pool; stack; out_imp; in_imp; node; data; file; sha })

(* Start [script] under python3 in the namespace; the result runs our loop
   until it exits (and [until] holds) and returns its output. *)
let spawn env script = Net_test_util.Kernel.spawn ~ns:env.ns env.loop ~default_timeout:300. script
let field = Net_test_util.Kernel.field

let kernel_client =
  {|
import socket, hashlib, sys
s = socket.create_connection(('OUR', 5001), timeout=120)
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
import socket, hashlib, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('KERNEL', 5002)); l.listen(1); l.settimeout(120)
s, addr = l.accept(); s.settimeout(120)
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

(* Reads [s] to its end into a fresh buffer, checking the length; then
   [k] with what was read. *)
let read_all read k =
  let store = Bytes.create size and got = ref 0 and buf = Cstruct.create 65536 in
  let rec loop () =
    Socket.Promise.upon (read buf) (function
      | Error e -> Alcotest.failf "read: %a" Protocol.pp_error e
      | Ok 0 -> k (Bytes.sub store 0 !got)
      | Ok n ->
          if !got + n > size then Alcotest.fail "more bytes than were sent";
          Cstruct.blit_to_bytes buf 0 store !got n;
          got := !got + n;
          loop ())
  in
  loop ()

let check_impaired env =
  let o = Impair.stats env.out_imp and i = Impair.stats env.in_imp in
  Alcotest.(check bool)
    (Fmt.str "our frames dropped (%d) and reordered (%d)" o.dropped o.reordered)
    true
    (o.dropped > 10 && o.reordered > 10);
  Alcotest.(check bool)
    (Fmt.str "the kernel's frames dropped (%d) and reordered (%d)" i.dropped i.reordered)
    true
    (i.dropped > 10 && i.reordered > 10);
  Logs.app (fun m ->
      m
        "impaired: ours %d sent, %d dropped, %d reordered, %d duplicated; the kernel's %d, %d, %d, \
         %d"
        o.sent o.dropped o.reordered o.duplicated i.sent i.dropped i.reordered i.duplicated)

let kernel_connects () =
  with_env @@ fun env ->
  let (module N) = env.node in
  let l =
    match N.Sock.listen N.tcp 5001 with
    | Ok l -> l
    | Error e -> Alcotest.failf "%a" Protocol.pp_error e
  in
  let result = ref None in
  let t0 = Unix.gettimeofday () in
  Socket.Promise.upon (N.Sock.accept l) (function
    | Error e -> Alcotest.failf "accept: %a" Protocol.pp_error e
    | Ok s ->
        read_all (N.Sock.read s) (fun got ->
            let rx = Unix.gettimeofday () -. t0 in
            Socket.Promise.upon
              (N.Sock.write s (Cstruct.of_bytes env.data))
              (function
                | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e
                | Ok () ->
                    N.Sock.close s;
                    Socket.Promise.upon (N.Sock.closed s) (function
                      | Ok () -> result := Some (got, rx, Unix.gettimeofday () -. t0 -. rx)
                      | Error e -> Alcotest.failf "close: %a" Protocol.pp_error e))));
  let wait = spawn env (replace (replace kernel_client "OUR" our_ip) "FILE" env.file) in
  let out = wait ~until:(fun () -> !result <> None) () in
  let got, rx, tx = Option.get !result in
  Alcotest.(check int) "bytes received" size (Bytes.length got);
  Alcotest.(check bool) "received byte for byte" true (Bytes.equal got env.data);
  Alcotest.(check string) "SHA-256 of what the kernel sent" env.sha (field out "SENT");
  Alcotest.(check string)
    "SHA-256 of what we received" env.sha
    (Sha256.to_hex (Sha256.string (Bytes.unsafe_to_string got)));
  Alcotest.(check string)
    "what the kernel received" (Fmt.str "%d %s" size env.sha) (field out "RECV");
  check_impaired env;
  Logs.app (fun m ->
      m "kernel connects, impaired: kernel -> us %.1f MB/s, us -> kernel %.1f MB/s; %a"
        (float size /. rx /. 1e6)
        (float size /. tx /. 1e6)
        Tcp.pp_stats (N.T.query N.tcp))

let we_connect () =
  with_env @@ fun env ->
  let (module N) = env.node in
  let wait = spawn env (replace (replace kernel_server "KERNEL" kernel_ip) "FILE" env.file) in
  let rec connect k =
    let p = N.Sock.connect N.tcp (Ipv4_addr.of_string_exn kernel_ip) 5002 in
    Loop.run ~until:(fun () -> Socket.Promise.is_resolved p) ~timeout:(Time.of_sec 20.) env.loop;
    match Socket.Promise.peek p with
    | Some (Ok s) -> s
    | Some (Error (`Refused _)) when k > 0 ->
        Loop.run ~timeout:(Time.of_ms 100) env.loop;
        connect (k - 1)
    | Some (Error e) -> Alcotest.failf "connect: %a" Protocol.pp_error e
    | None -> Alcotest.fail "connect: no answer"
  in
  let s = connect 50 in
  let t0 = Unix.gettimeofday () in
  Socket.Promise.upon
    (N.Sock.write s (Cstruct.of_bytes env.data))
    (function
      | Error e -> Alcotest.failf "write: %a" Protocol.pp_error e | Ok () -> N.Sock.shutdown s);
  let result = ref None in
  read_all (N.Sock.read s) (fun got ->
      N.Sock.close s;
      Socket.Promise.upon (N.Sock.closed s) (fun _ ->
          result := Some (got, Unix.gettimeofday () -. t0)));
  let out = wait ~until:(fun () -> !result <> None) () in
  let got, dt = Option.get !result in
  Alcotest.(check string)
    "what the kernel received" (Fmt.str "%d %s" size env.sha) (field out "RECV");
  Alcotest.(check string) "SHA-256 of what the kernel sent" env.sha (field out "SENT");
  Alcotest.(check int) "bytes received" size (Bytes.length got);
  Alcotest.(check bool) "received byte for byte" true (Bytes.equal got env.data);
  Alcotest.(check string)
    "SHA-256 of what we received" env.sha
    (Sha256.to_hex (Sha256.string (Bytes.unsafe_to_string got)));
  check_impaired env;
  Logs.app (fun m ->
      m "we connect, impaired: %d bytes each way in %.1f s; %a" size dt Tcp.pp_stats
        (N.T.query N.tcp))

let () =
  Logs.set_reporter (Logs_fmt.reporter ());
  Logs.set_level (Some Logs.App);
  Alcotest.run "consort-tcp-impair"
    [
      ( "kernel",
        [
          Alcotest.test_case "the kernel connects; both ways through loss and reordering" `Quick
            kernel_connects;
          Alcotest.test_case "we connect to the kernel; both ways through loss and reordering"
            `Quick we_connect;
        ] );
    ]
