open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up
module Proc = Bench_proc

let src = Logs.Src.create "consort.bench.tcp" ~doc:"The TCP benchmark"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  bytes : int;
  seconds : float;
  rr_size : int;
  rr_count : int;
  mtu : int;
  buffer : int;
  rounds : int;
}

let default =
  {
    bytes = 200_000_000;
    seconds = 20.;
    rr_size = 64;
    rr_count = 20_000;
    mtu = 1500;
    buffer = 1 lsl 20;
    rounds = 3;
  }

type cpu = { who : string; user : float; sys : float }
type flow = { bytes : int; secs : float; cpu : cpu list; machine : float; rates : float list }

type rr = {
  size : int;
  rounds : int;
  min_us : float;
  median_us : float;
  p99_us : float;
  mean_us : float;
}

type report = {
  config : config;
  consort_in : flow;
  consort_out : flow;
  consort_rr : rr;
  consort_rr_any : rr;
  bridge : flow;
  bridge_rr : rr;
  bridge_rr_any : rr;
  veth : flow;
  veth_rr : rr;
  veth_rr_any : rr;
  offloads : string;
  ethtool : bool;
}

let mbit_s f = float f.bytes *. 8. /. f.secs /. 1e6

(* The fastest of the rounds, with every round's rate: other load on the
   machine only ever slows a transfer down. *)
let best = function
  | [] -> invalid_arg "Tcp_bench.best"
  | f :: rest ->
      let b = List.fold_left (fun b g -> if mbit_s g > mbit_s b then g else b) f rest in
      { b with rates = List.map mbit_s (f :: rest) }

let rounds (cfg : config) f = best (List.init (max 1 cfg.rounds) (fun _ -> f ()))
let cpu_total f = List.fold_left (fun acc c -> acc +. c.user +. c.sys) 0. f.cpu
let per_mb f secs = secs *. 1000. /. (float f.bytes /. 1e6)
let cpu_ms_per_mb f = per_mb f (cpu_total f)
let machine_ms_per_mb f = per_mb f f.machine

let cpu_of f who =
  match List.find_opt (fun c -> c.who = who) f.cpu with Some c -> c.user +. c.sys | None -> 0.

let stack_ms_per_mb_consort f = per_mb f (cpu_of f "consort")

let user_ms_per_mb_consort f =
  per_mb f
    (match List.find_opt (fun c -> c.who = "consort") f.cpu with Some c -> c.user | None -> 0.)

(* The kernel's TCP for one end: the sender's and the receiver's system
   time, halved. *)
let kernel_ms_per_mb f =
  let sys =
    List.fold_left
      (fun acc c -> if c.who = "source" || c.who = "sink" then acc +. c.sys else acc)
      0. f.cpu
  in
  per_mb f (sys /. 2.)

let throughput_ratios r =
  (mbit_s r.consort_in /. mbit_s r.bridge, mbit_s r.consort_out /. mbit_s r.bridge)

let latency_ratio r = r.consort_rr.median_us /. r.bridge_rr.median_us
let p99_ratio r = r.consort_rr.p99_us /. r.bridge_rr.p99_us

let meets_targets r =
  let i, o = throughput_ratios r in
  Float.min i o >= 0.7 && latency_ratio r <= 1.5

(* {1 Failures} *)

exception Failed of string

let fail fmt = Printf.ksprintf (fun s -> raise (Failed s)) fmt
let ok = function Ok x -> x | Error e -> raise (Failed e)
let sh fmt = Printf.ksprintf (fun cmd -> ignore (ok (Proc.run cmd))) fmt
let quiet fmt = Printf.ksprintf Proc.quiet fmt
let check_interrupted () = if !Proc.interrupted then fail "interrupted"

let impossible () =
  if Unix.geteuid () <> 0 then Some "not root: network namespaces, TAP and veth devices need root"
  else if not (Sys.file_exists "/dev/net/tun") then Some "/dev/net/tun is missing"
  else if Sys.command "command -v ip >/dev/null 2>&1" <> 0 then
    Some "the ip program (iproute2) is missing"
  else if Sys.command "command -v taskset >/dev/null 2>&1" <> 0 then
    Some "taskset (util-linux) is missing"
  else if Sys.command "command -v gcc >/dev/null 2>&1" <> 0 then
    Some "gcc is missing (it builds the C bridge and peers)"
  else None

(* {1 The environment: helpers, namespaces and devices} *)

type env = {
  tag : string;
  dir : string;
  bridge_exe : string;
  peer_exe : string;
  mutable namespaces : string list;
  mutable links : string list;
}

let tag = Printf.sprintf "%d" (Unix.getpid ())
let link_kinds = [ "t"; "a"; "b"; "va"; "vb" ]
let ns_kinds = [ "ca"; "ba"; "bb"; "va"; "vb" ]
let ns_prefix tag = Printf.sprintf "consort-bench-%s-" tag

let compile dir name source =
  let c = Filename.concat dir (name ^ ".c") and exe = Filename.concat dir name in
  let oc = open_out_bin c in
  output_string oc source;
  close_out oc;
  sh "gcc -std=gnu11 -O2 -o %s %s" (Filename.quote exe) (Filename.quote c);
  exe

let rec remove_tree path =
  if Sys.file_exists path then
    if Sys.is_directory path then begin
      Array.iter (fun f -> remove_tree (Filename.concat path f)) (Sys.readdir path);
      Sys.rmdir path
    end
    else Sys.remove path

let make_env () =
  let dir = Filename.concat (Filename.get_temp_dir_name ()) ("consort-netbench-" ^ tag) in
  remove_tree dir;
  Sys.mkdir dir 0o700;
  let env = { tag; dir; bridge_exe = ""; peer_exe = ""; namespaces = []; links = [] } in
  match
    let bridge_exe = compile dir "tap_bridge" Netbench_sources.tap_bridge in
    let peer_exe = compile dir "tcp_peer" Netbench_sources.tcp_peer in
    (bridge_exe, peer_exe)
  with
  | bridge_exe, peer_exe -> { env with bridge_exe; peer_exe }
  | exception e ->
      remove_tree dir;
      raise e

let new_ns env suffix =
  let ns = ns_prefix env.tag ^ suffix in
  env.namespaces <- ns :: env.namespaces;
  sh "ip netns add %s" ns;
  quiet
    "ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
     net.ipv6.conf.default.disable_ipv6=1"
    ns;
  sh "ip -n %s link set lo up" ns;
  ns

let link_name env kind = "cnb" ^ kind ^ env.tag

(* Every device is deleted with its namespace; one still in the root
   namespace (the move failed) is deleted by name. *)
let drop_namespaces env =
  List.iter (fun ns -> quiet "ip netns del %s" ns) env.namespaces;
  env.namespaces <- [];
  List.iter (fun l -> quiet "ip link del %s" l) env.links;
  env.links <- []

let cleanup env =
  Proc.kill_all ();
  drop_namespaces env;
  remove_tree env.dir

let lines cmd = match Proc.run cmd with Ok s -> String.split_on_char '\n' s | Error _ -> []
let first_word l = match String.split_on_char ' ' (String.trim l) with w :: _ -> w | [] -> ""

let leftovers () =
  let namespaces = List.map first_word (lines "ip netns list") in
  let links =
    List.filter_map
      (fun l ->
        (* "N: NAME: ..." or "N: NAME@PEER: ..." *)
        match String.split_on_char ':' l with
        | _ :: name :: _ -> Some (List.hd (String.split_on_char '@' (String.trim name)))
        | _ -> None)
      (lines "ip -o link")
  in
  List.filter (fun ns -> List.mem ns namespaces) (List.map (fun k -> ns_prefix tag ^ k) ns_kinds)
  @ List.filter (fun l -> List.mem l links) (List.map (fun k -> "cnb" ^ k ^ tag) link_kinds)

(* Namespaces and devices of earlier runs whose process is gone (killed
   before it could clean up). *)
let sweep_stale () =
  let dead pid = pid <> tag && not (Sys.file_exists ("/proc/" ^ pid)) in
  let digits s = s <> "" && String.for_all (fun c -> c >= '0' && c <= '9') s in
  List.iter
    (fun l ->
      let ns = first_word l in
      let p = "consort-bench-" in
      let lp = String.length p in
      if String.length ns > lp && String.sub ns 0 lp = p then
        match String.split_on_char '-' (String.sub ns lp (String.length ns - lp)) with
        | [ pid; _ ] when digits pid && dead pid -> quiet "ip netns del %s" ns
        | _ -> ())
    (lines "ip netns list");
  List.iter
    (fun l ->
      match String.split_on_char ':' l with
      | _ :: name :: _ ->
          let name = List.hd (String.split_on_char '@' (String.trim name)) in
          List.iter
            (fun k ->
              let p = "cnb" ^ k in
              let lp = String.length p in
              if String.length name > lp && String.sub name 0 lp = p then
                let pid = String.sub name lp (String.length name - lp) in
                if digits pid && dead pid then quiet "ip link del %s" name)
            link_kinds
      | _ -> ())
    (lines "ip -o link")

let address ns dev ip mtu =
  sh "ip -n %s addr add %s/24 dev %s" ns ip dev;
  sh "ip -n %s link set %s mtu %d up" ns dev mtu

(* {1 CPU} *)

(* Busy CPU seconds of the whole machine: user, nice, system, irq and
   softirq ticks of /proc/stat (USER_HZ = 100). *)
let machine_busy () =
  let ic = open_in "/proc/stat" in
  let line = Fun.protect ~finally:(fun () -> close_in ic) (fun () -> input_line ic) in
  match List.filter (( <> ) "") (String.split_on_char ' ' line) with
  | "cpu" :: user :: nice :: system :: _idle :: _iowait :: irq :: softirq :: _ ->
      float (List.fold_left (fun a s -> a + int_of_string s) 0 [ user; nice; system; irq; softirq ])
      /. 100.
  | _ -> fail "cannot read /proc/stat"

let self_cpu () =
  let t = Unix.times () in
  (t.tms_utime, t.tms_stime)

(* {1 CPU placement} *)

(* Request/response runs twice: with every process on CPU 0, where a round
   trip is the path's own cost, and where the scheduler puts them, where a
   wake-up on another CPU (an inter-processor interrupt, costly on a
   virtual machine) can dominate. *)

let affinity pid =
  let out = ok (Proc.run (Printf.sprintf "taskset -p -c %d" pid)) in
  match String.rindex_opt out ':' with
  | Some i -> String.trim (String.sub out (i + 1) (String.length out - i - 1))
  | None -> fail "taskset: %s" out

let set_affinity pid cpus = sh "taskset -a -p -c %s %d" cpus pid

let pinned_self f =
  let me = Unix.getpid () in
  let was = affinity me in
  set_affinity me "0";
  Fun.protect ~finally:(fun () -> set_affinity me was) f

let pinned_argv pin argv = if pin then "taskset" :: "-c" :: "0" :: argv else argv

(* {1 Kernel peers} *)

let fields out prefix =
  match Proc.result_fields out prefix with
  | Some f -> f
  | None -> fail "no %s line in:\n%s" prefix out

let float_field f key =
  match List.assoc_opt key f with
  | Some v -> ( match float_of_string_opt v with Some x -> x | None -> fail "bad %s=%s" key v)
  | None -> fail "no %s= in a result" key

let peer_cpu who out =
  let f = fields out "RESULT" in
  { who; user = float_field f "utime"; sys = float_field f "stime" }

let rr_of out size =
  let f = fields out "RESULT" in
  {
    size;
    rounds = int_of_float (float_field f "rounds");
    min_us = float_field f "min";
    median_us = float_field f "median";
    p99_us = float_field f "p99";
    mean_us = float_field f "mean";
  }

let port_in = 5001
let port_out = 5002
let port_rr = 5007
let spawn_peer env ?(pin = false) ?ns args = Proc.spawn ?ns (pinned_argv pin (env.peer_exe :: args))

let sink env (cfg : config) ns =
  spawn_peer env ~ns [ "sink"; string_of_int port_out; Printf.sprintf "%.1f" (cfg.seconds +. 10.) ]

let source env (cfg : config) ns host port =
  spawn_peer env ~ns
    [
      "source"; host; string_of_int port; string_of_int cfg.bytes; Printf.sprintf "%.1f" cfg.seconds;
    ]

let pong env (cfg : config) ~pin ns =
  spawn_peer env ~pin ~ns
    [
      "pong";
      string_of_int port_rr;
      string_of_int cfg.rr_size;
      Printf.sprintf "%.1f" (cfg.seconds +. 10.);
    ]

let ping env (cfg : config) ~pin ns host =
  spawn_peer env ~pin ~ns
    [
      "ping";
      host;
      string_of_int port_rr;
      string_of_int cfg.rr_size;
      string_of_int cfg.rr_count;
      Printf.sprintf "%.1f" cfg.seconds;
    ]

let grace = 15.

(* Kernel to kernel: source in [a] to sink in [b] at [b_ip], then ping from
   [a] to pong in [b]. [extra ()] is the CPU of whatever sits between
   (the bridge), sampled before and after the transfer. *)
let kernel_pair env (cfg : config) ~a ~b ~b_ip ~extra ~pin_between =
  let transfer () =
    check_interrupted ();
    let k = sink env cfg b in
    ignore (ok (Proc.wait_line k ~prefix:"LISTENING" ~timeout:5.));
    let before = extra () and m0 = machine_busy () in
    let s = source env cfg a b_ip port_out in
    let src_out = ok (Proc.finish s ~timeout:(cfg.seconds +. grace)) in
    let sink_out = ok (Proc.finish k ~timeout:grace) in
    let m1 = machine_busy () and after = extra () in
    let f = fields sink_out "RESULT" in
    let bytes = int_of_float (float_field f "bytes") in
    if bytes <> int_of_float (float_field (fields src_out "RESULT") "bytes") then
      fail "the sink received %d bytes, the source sent %s" bytes src_out;
    let between =
      match (before, after) with
      | Some (u0, s0), Some (u1, s1) -> [ { who = "bridge"; user = u1 -. u0; sys = s1 -. s0 } ]
      | _ -> []
    in
    let flow =
      {
        bytes;
        secs = float_field f "secs";
        cpu = (peer_cpu "source" src_out :: between) @ [ peer_cpu "sink" sink_out ];
        machine = m1 -. m0;
        rates = [];
      }
    in
    flow
  in
  let flow = rounds cfg transfer in
  let rr pin =
    check_interrupted ();
    pin_between pin;
    let p = pong env cfg ~pin b in
    ignore (ok (Proc.wait_line p ~prefix:"LISTENING" ~timeout:5.));
    let q = ping env cfg ~pin a b_ip in
    let ping_out = ok (Proc.finish q ~timeout:(cfg.seconds +. grace)) in
    ignore (ok (Proc.finish p ~timeout:grace));
    rr_of ping_out cfg.rr_size
  in
  let any = rr false in
  let one = rr true in
  (flow, one, any)

(* {1 Baselines} *)

let bridge_run env (cfg : config) progress =
  progress "kernel -> kernel through the C TAP bridge";
  let a = new_ns env "ba" and b = new_ns env "bb" in
  let ta = link_name env "a" and tb = link_name env "b" in
  env.links <- ta :: tb :: env.links;
  let br = Proc.spawn ~stdin:true [ env.bridge_exe; "bridge"; ta; tb ] in
  ignore (ok (Proc.wait_line br ~prefix:"READY" ~timeout:5.));
  sh "ip link set %s netns %s" ta a;
  sh "ip link set %s netns %s" tb b;
  address a ta "10.79.2.1" cfg.mtu;
  address b tb "10.79.2.2" cfg.mtu;
  let stats () =
    let seen = List.length (Proc.lines br ~prefix:"STATS") in
    Proc.send_line br "stats";
    if not (Proc.wait br ~timeout:5. (fun () -> List.length (Proc.lines br ~prefix:"STATS") > seen))
    then fail "the bridge does not answer:\n%s" (Proc.output br);
    let f = fields (List.nth (Proc.lines br ~prefix:"STATS") seen) "STATS" in
    Some (float_field f "utime", float_field f "stime")
  in
  let all = affinity (Proc.pid br) in
  let pin_between pin = set_affinity (Proc.pid br) (if pin then "0" else all) in
  let flow, rr, rr_any = kernel_pair env cfg ~a ~b ~b_ip:"10.79.2.2" ~extra:stats ~pin_between in
  Proc.close_stdin br;
  ignore (ok (Proc.finish br ~timeout:5.));
  drop_namespaces env;
  (flow, rr, rr_any)

let veth_run env (cfg : config) progress =
  progress "kernel -> kernel over veth, offloads off";
  let a = new_ns env "va" and b = new_ns env "vb" in
  let va = link_name env "va" and vb = link_name env "vb" in
  env.links <- va :: vb :: env.links;
  sh "ip link add %s type veth peer name %s" va vb;
  sh "ip link set %s netns %s" va a;
  sh "ip link set %s netns %s" vb b;
  let ethtool = Sys.command "command -v ethtool >/dev/null 2>&1" = 0 in
  let offloads =
    List.map
      (fun (ns, dev) ->
        if ethtool then begin
          sh "ip netns exec %s ethtool -K %s tso off gso off gro off" ns dev;
          dev ^ ": ethtool -K tso off gso off gro off"
        end
        else
          let out = Proc.spawn ~ns [ env.bridge_exe; "offload"; dev ] in
          let text = ok (Proc.finish out ~timeout:5.) in
          dev ^ ": " ^ String.trim text)
      [ (a, va); (b, vb) ]
  in
  address a va "10.79.3.1" cfg.mtu;
  address b vb "10.79.3.2" cfg.mtu;
  let flow, rr, rr_any =
    kernel_pair env cfg ~a ~b ~b_ip:"10.79.3.2" ~extra:(fun () -> None) ~pin_between:(fun _ -> ())
  in
  drop_namespaces env;
  (flow, rr, rr_any, String.concat "; " offloads, ethtool)

(* {1 Consort's stack on a TAP device} *)

let our_ip = "10.79.1.2"
let kernel_ip = "10.79.1.1"

module type TCP_IP = sig
  module T : Tcp.S with type host = Ipv4_addr.t and type lower = Ipstack.Ip.t
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
end

let tcp_on (cfg : config) (up : Up.t) : (module TCP_IP) =
  let module P = struct
    type host = Ipv4_addr.t
    type lower_address = Ipv4.address
    type lower_pattern = Ipv4.address_pattern

    let local = Ipv4_addr.of_string_exn our_ip
    let lower_address h = { Ipv4.dst = h; proto = 6 }
    let lower_pattern = { Ipv4.protocol = 6; source = None }
    let pseudo_header = Some (fun ~src ~dst ~len -> Checksum.pseudo_ipv4 ~src ~dst ~proto:6 ~len)
    let equal_host = Ipv4_addr.equal
    let pp_host = Ipv4_addr.pp
    let clock = Consort_net_unix.Loop_clock.of_loop up.loop
    let rng = Rng.create 4242
    let pool = up.pool
  end in
  let module T = Tcp.Make (Ipv4.Df (Ipstack.Ip)) (P) in
  let config = { Tcp.default_config with send_buffer = cfg.buffer; receive_buffer = cfg.buffer } in
  let tcp =
    match T.create ~config up.stack.ip with
    | Ok t -> t
    | Error e -> fail "TCP: %s" (Fmt.str "%a" Protocol.pp_error e)
  in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

(* A failure inside a loop callback: the loop would only log an exception,
   so it is kept here and ends the current wait. *)
let callback_failure = ref None

let perr what e =
  let m = Printf.sprintf "%s: %s" what (Fmt.str "%a" Protocol.pp_error e) in
  if !callback_failure = None then callback_failure := Some m;
  raise (Failed m)

(* Runs [loop] (our stack) until [until ()], the child's output ends too,
   or the time is up. *)
let run_with loop child ~timeout until =
  let fd = Proc.fd child in
  Loop.watch loop fd (fun () ->
      Proc.pump child;
      if Proc.eof child then Loop.unwatch loop fd);
  Loop.run
    ~until:(fun () ->
      (until () && Proc.eof child) || !Proc.interrupted || !callback_failure <> None)
    ~timeout:(Time.of_sec timeout) loop;
  if not (Proc.eof child) then Loop.unwatch loop fd;
  Option.iter (fun m -> fail "%s" m) !callback_failure;
  check_interrupted ()

let consort_run env (cfg : config) progress =
  let ns = new_ns env "ca" in
  let tap = link_name env "t" in
  env.links <- tap :: env.links;
  let up =
    ok
      (Result.map_error
         (fun (`Msg m) -> "starting the stack: " ^ m)
         (Up.start ~mtu:cfg.mtu ~udp_echo:[] ~udp_discard:[] ~tap ~ip:(our_ip ^ "/24") ()))
  in
  Fun.protect
    ~finally:(fun () -> Up.stop up)
    (fun () ->
      sh "ip link set %s netns %s" tap ns;
      address ns tap kernel_ip cfg.mtu;
      let (module N) = tcp_on cfg up in
      let loop = up.loop in
      (* Kernel to us: we read to the end. *)
      let flow_in () =
        check_interrupted ();
        progress "kernel -> consort over TAP";
        let l = match N.Sock.listen N.tcp port_in with Ok l -> l | Error e -> perr "listen" e in
        let result = ref None in
        Socket.Promise.upon (N.Sock.accept l) (function
          | Error e -> perr "accept" e
          | Ok s ->
              N.Sock.stop l;
              let buf = Cstruct.create 65536 in
              let got = ref 0 and t0 = ref 0. in
              let c0 = self_cpu () and m0 = machine_busy () in
              let rec read () =
                Socket.Promise.upon (N.Sock.read s buf) (function
                  | Error e -> perr "read" e
                  | Ok 0 ->
                      let t1 = Unix.gettimeofday ()
                      and u1, s1 = self_cpu ()
                      and m1 = machine_busy () in
                      N.Sock.close s;
                      let u0, s0 = c0 in
                      result :=
                        Some
                          ( !got,
                            t1 -. !t0,
                            { who = "consort"; user = u1 -. u0; sys = s1 -. s0 },
                            m1 -. m0 )
                  | Ok k ->
                      if !got = 0 then t0 := Unix.gettimeofday ();
                      got := !got + k;
                      read ())
              in
              read ());
        let k = source env cfg ns our_ip port_in in
        run_with loop k ~timeout:(cfg.seconds +. grace) (fun () -> !result <> None);
        let src_out = ok (Proc.finish k ~timeout:grace) in
        let got, secs, ours, machine =
          match !result with
          | Some r -> r
          | None -> fail "kernel -> consort did not finish:\n%s" src_out
        in
        let consort_in =
          { bytes = got; secs; cpu = [ peer_cpu "source" src_out; ours ]; machine; rates = [] }
        in
        if got <> int_of_float (float_field (fields src_out "RESULT") "bytes") then
          fail "we received %d bytes, the kernel sent %s" got src_out;
        consort_in
      in
      (* Us to the kernel: we write [bytes] (or until the time is up). *)
      let flow_out () =
        check_interrupted ();
        progress "consort -> kernel over TAP";
        let k = sink env cfg ns in
        run_with loop k ~timeout:5. (fun () -> Proc.find_line k ~prefix:"LISTENING" <> None);
        if Proc.find_line k ~prefix:"LISTENING" = None then
          fail "the kernel sink is not listening:\n%s" (Proc.output k);
        let finished = ref None in
        let chunk = Cstruct.create (1 lsl 20) in
        for i = 0 to Cstruct.length chunk - 1 do
          Cstruct.set_uint8 chunk i ((i * 7) + 1)
        done;
        let c0 = self_cpu () and m0 = machine_busy () in
        let deadline = Unix.gettimeofday () +. cfg.seconds in
        Socket.Promise.upon
          (N.Sock.connect N.tcp (Ipv4_addr.of_string_exn kernel_ip) port_out)
          (function
            | Error e -> perr "connect" e
            | Ok s ->
                let sent = ref 0 in
                let rec write () =
                  if !sent >= cfg.bytes || Unix.gettimeofday () > deadline then N.Sock.shutdown s
                  else begin
                    let n = min (Cstruct.length chunk) (cfg.bytes - !sent) in
                    sent := !sent + n;
                    Socket.Promise.upon
                      (N.Sock.write s (Cstruct.sub chunk 0 n))
                      (function Error e -> perr "write" e | Ok () -> write ())
                  end
                in
                write ();
                let buf = Cstruct.create 4096 in
                let rec drain () =
                  Socket.Promise.upon (N.Sock.read s buf) (function
                    | Error e -> perr "read" e
                    | Ok 0 ->
                        N.Sock.close s;
                        let u1, s1 = self_cpu () and m1 = machine_busy () in
                        let u0, s0 = c0 in
                        finished :=
                          Some ({ who = "consort"; user = u1 -. u0; sys = s1 -. s0 }, m1 -. m0)
                    | Ok _ -> drain ())
                in
                drain ());
        run_with loop k ~timeout:(cfg.seconds +. grace) (fun () -> !finished <> None);
        let sink_out = ok (Proc.finish k ~timeout:grace) in
        let ours, machine =
          match !finished with
          | Some r -> r
          | None -> fail "consort -> kernel did not finish:\n%s" sink_out
        in
        let f = fields sink_out "RESULT" in
        let consort_out =
          {
            bytes = int_of_float (float_field f "bytes");
            secs = float_field f "secs";
            cpu = [ ours; peer_cpu "sink" sink_out ];
            machine;
            rates = [];
          }
        in
        consort_out
      in
      (* In and out alternate, round after round. *)
      let pairs =
        List.init (max 1 cfg.rounds) (fun _ ->
            let i = flow_in () in
            (i, flow_out ()))
      in
      let consort_in = best (List.map fst pairs) and consort_out = best (List.map snd pairs) in
      (* Request/response: the kernel pings, we echo. *)
      let rr pin =
        progress (if pin then "request/response, one CPU" else "request/response, any CPU");
        let l = match N.Sock.listen N.tcp port_rr with Ok l -> l | Error e -> perr "listen" e in
        let echoed = ref false in
        Socket.Promise.upon (N.Sock.accept l) (function
          | Error e -> perr "accept" e
          | Ok s ->
              N.Sock.stop l;
              N.T.set_nodelay (N.Sock.connection s) true;
              let buf = Cstruct.create 65536 in
              let rec echo () =
                Socket.Promise.upon (N.Sock.read s buf) (function
                  | Error e -> perr "read" e
                  | Ok 0 ->
                      N.Sock.close s;
                      echoed := true
                  | Ok k ->
                      Socket.Promise.upon
                        (N.Sock.write s (Cstruct.sub buf 0 k))
                        (function Error e -> perr "write" e | Ok () -> echo ()))
              in
              echo ());
        let go () =
          let q = ping env cfg ~pin ns our_ip in
          run_with loop q ~timeout:(cfg.seconds +. grace) (fun () -> !echoed);
          ok (Proc.finish q ~timeout:grace)
        in
        let ping_out = if pin then pinned_self go else go () in
        rr_of ping_out cfg.rr_size
      in
      let rr_any = rr false in
      let rr_one = rr true in
      Log.info (fun m -> m "%a" Ipstack.pp up.stack);
      Log.info (fun m -> m "%a" Tcp.pp_stats (N.T.query N.tcp));
      (consort_in, consort_out, rr_one, rr_any))
  |> fun r ->
  drop_namespaces env;
  r

(* {1 The whole run} *)

let run ?(progress = fun _ -> ()) (cfg : config) =
  match impossible () with
  | Some why -> Error why
  | None -> (
      Proc.interrupted := false;
      callback_failure := None;
      let flag _ = Proc.interrupted := true in
      let old_int = Sys.signal Sys.sigint (Sys.Signal_handle flag) in
      let old_term = Sys.signal Sys.sigterm (Sys.Signal_handle flag) in
      let restore () =
        Sys.set_signal Sys.sigint old_int;
        Sys.set_signal Sys.sigterm old_term
      in
      sweep_stale ();
      match make_env () with
      | exception Failed e ->
          restore ();
          Error e
      | env -> (
          let result =
            Fun.protect
              ~finally:(fun () ->
                cleanup env;
                restore ())
              (fun () ->
                match
                  let consort_in, consort_out, consort_rr, consort_rr_any =
                    consort_run env cfg progress
                  in
                  check_interrupted ();
                  let bridge, bridge_rr, bridge_rr_any = bridge_run env cfg progress in
                  check_interrupted ();
                  let veth, veth_rr, veth_rr_any, offloads, ethtool = veth_run env cfg progress in
                  {
                    config = cfg;
                    consort_in;
                    consort_out;
                    consort_rr;
                    consort_rr_any;
                    bridge;
                    bridge_rr;
                    bridge_rr_any;
                    veth;
                    veth_rr;
                    veth_rr_any;
                    offloads;
                    ethtool;
                  }
                with
                | r -> Ok r
                | exception Failed e -> Error e
                | exception Unix.Unix_error (e, f, a) ->
                    Error (Printf.sprintf "%s %s: %s" f a (Unix.error_message e)))
          in
          match (result, leftovers ()) with
          | result, [] -> result
          | result, l ->
              let e = match result with Error e -> e ^ "; " | Ok _ -> "" in
              Error (Printf.sprintf "%sleft behind after cleanup: %s" e (String.concat ", " l))))

(* {1 Printing} *)

let pp_cpu ppf f =
  Fmt.(
    list ~sep:(any ", ") (fun ppf c ->
        pf ppf "%s %.2f+%.2f" c.who (per_mb f c.user) (per_mb f c.sys)))
    ppf f.cpu

let pp_table ppf r =
  let c = r.config in
  Fmt.pf ppf
    "TCP over TAP and veth: MTU %d, %d MB per transfer, best of %d; %d-byte request/response x %d@."
    c.mtu (c.bytes / 1_000_000) (max 1 c.rounds) c.rr_size c.rr_count;
  Fmt.pf ppf "%-34s %9s %10s %10s  %-52s %s@." "transfer" "Mbit/s" "CPU ms/MB" "machine"
    "per process, user+sys ms/MB" "every round, Mbit/s";
  let row name f =
    Fmt.pf ppf "%-34s %9.0f %10.2f %10.2f  %-52s %a@." name (mbit_s f) (cpu_ms_per_mb f)
      (machine_ms_per_mb f) (Fmt.str "%a" pp_cpu f)
      Fmt.(list ~sep:(any " ") (fmt "%.0f"))
      f.rates
  in
  row "kernel -> consort (TAP)" r.consort_in;
  row "consort -> kernel (TAP)" r.consort_out;
  row "kernel -> kernel (C TAP bridge)" r.bridge;
  row "kernel -> kernel (veth, no offload)" r.veth;
  Fmt.pf ppf "%-34s %9s %10s %10s %10s   %s@." "request/response, all on CPU 0" "median us" "p99 us"
    "min us" "mean us" "any CPU: median, p99 us";
  let rrow name (x : rr) (y : rr) =
    Fmt.pf ppf "%-34s %9.1f %10.1f %10.1f %10.1f   %.1f, %.1f@." name x.median_us x.p99_us x.min_us
      x.mean_us y.median_us y.p99_us
  in
  rrow "kernel <-> consort (TAP)" r.consort_rr r.consort_rr_any;
  rrow "kernel <-> kernel (C TAP bridge)" r.bridge_rr r.bridge_rr_any;
  rrow "kernel <-> kernel (veth)" r.veth_rr r.veth_rr_any;
  let i, o = throughput_ratios r in
  let mark b = if b then "met" else "MISSED" in
  Fmt.pf ppf "throughput / bridge: in %.2f, out %.2f (target >= 0.70: %s)@." i o
    (mark (Float.min i o >= 0.7));
  Fmt.pf ppf
    "latency / bridge, one CPU: median %.2f, p99 %.2f (target <= 1.50: %s); any CPU: median %.2f, \
     p99 %.2f@."
    (latency_ratio r) (p99_ratio r)
    (mark (latency_ratio r <= 1.5))
    (r.consort_rr_any.median_us /. r.bridge_rr_any.median_us)
    (r.consort_rr_any.p99_us /. r.bridge_rr_any.p99_us);
  let k = kernel_ms_per_mb r.veth in
  Fmt.pf ppf
    "CPU per MB against the kernel's TCP for one end over veth (%.2f ms/MB): consort's process in \
     %.1fx, out %.1fx; its user time alone in %.1fx, out %.1fx@."
    k
    (stack_ms_per_mb_consort r.consort_in /. k)
    (stack_ms_per_mb_consort r.consort_out /. k)
    (user_ms_per_mb_consort r.consort_in /. k)
    (user_ms_per_mb_consort r.consort_out /. k);
  Fmt.pf ppf "CPU per MB, all processes / the bridge run's: in %.2fx, out %.2fx@."
    (cpu_ms_per_mb r.consort_in /. cpu_ms_per_mb r.bridge)
    (cpu_ms_per_mb r.consort_out /. cpu_ms_per_mb r.bridge);
  Fmt.pf ppf
    "(CPU ms/MB: every process involved, from getrusage; machine: the whole machine's busy CPU \
     over the transfer, from /proc/stat, other load included)@.";
  Fmt.pf ppf "veth offloads: %s%s@." r.offloads
    (if r.ethtool then "" else " (no ethtool program here: set through the ethtool ioctl)")

let to_json r =
  let i, o = throughput_ratios r in
  let flow name f =
    Printf.sprintf "\"%s_mbit_s\":%.1f,\"%s_cpu_ms_per_mb\":%.3f,\"%s_machine_ms_per_mb\":%.3f" name
      (mbit_s f) name (cpu_ms_per_mb f) name (machine_ms_per_mb f)
  in
  let rr name (x : rr) =
    Printf.sprintf "\"%s_rr_median_us\":%.2f,\"%s_rr_p99_us\":%.2f" name x.median_us name x.p99_us
  in
  let rr2 name x y = rr name x ^ "," ^ rr (name ^ "_any_cpu") y in
  Printf.sprintf
    "{\"bench\":\"tcp\",\"mtu\":%d,\"bytes\":%d,\"rr_size\":%d,%s,%s,%s,%s,%s,%s,%s,\"throughput_ratio_in\":%.3f,\"throughput_ratio_out\":%.3f,\"latency_ratio\":%.3f,\"p99_ratio\":%.3f,\"consort_stack_ms_per_mb_in\":%.3f,\"consort_stack_ms_per_mb_out\":%.3f,\"consort_user_ms_per_mb_in\":%.3f,\"consort_user_ms_per_mb_out\":%.3f,\"kernel_one_end_ms_per_mb\":%.3f,\"targets_met\":%b}"
    r.config.mtu r.config.bytes r.config.rr_size (flow "consort_in" r.consort_in)
    (flow "consort_out" r.consort_out)
    (flow "bridge" r.bridge) (flow "veth" r.veth)
    (rr2 "consort" r.consort_rr r.consort_rr_any)
    (rr2 "bridge" r.bridge_rr r.bridge_rr_any)
    (rr2 "veth" r.veth_rr r.veth_rr_any)
    i o (latency_ratio r) (p99_ratio r)
    (stack_ms_per_mb_consort r.consort_in)
    (stack_ms_per_mb_consort r.consort_out)
    (user_ms_per_mb_consort r.consort_in)
    (user_ms_per_mb_consort r.consort_out)
    (kernel_ms_per_mb r.veth) (meets_targets r)
