open Consort_net
module Up = Consort_net_unix.Up
module Proc = Bench_proc
module H = Bench_harness

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

let fail, ok, sh, check_interrupted = H.(fail, ok, sh, check_interrupted)

let impossible () =
  H.impossible ~root:"network namespaces, TAP and veth devices need root"
    [
      (H.program "taskset", "taskset (util-linux) is missing");
      (H.program "gcc", "gcc is missing (it builds the C bridge and peers)");
    ]

(* {1 The environment: helpers, namespaces and devices} *)

type env = { h : H.env; bridge_exe : string; peer_exe : string }

let link_kinds = [ "t"; "a"; "b"; "va"; "vb" ]
let ns_kinds = [ "ca"; "ba"; "bb"; "va"; "vb" ]
let ns_prefix = "consort-bench-"
let link_prefix = "cnb"
let new_ns env kind = H.new_ns env.h kind
let link_name env kind = H.link_name env.h kind
let drop_namespaces env = H.drop_namespaces env.h

let leftovers () =
  let namespaces = H.namespaces () and links = H.link_names () in
  List.filter
    (fun ns -> List.mem ns namespaces)
    (List.map (fun k -> ns_prefix ^ H.tag ^ "-" ^ k) ns_kinds)
  @ List.filter (fun l -> List.mem l links) (List.map (fun k -> link_prefix ^ k ^ H.tag) link_kinds)

(* Namespaces and devices of earlier runs whose process is gone (killed
   before it could clean up). *)
let sweep_stale () =
  H.sweep_stale_namespaces ns_prefix;
  H.sweep_stale_links (List.map (fun k -> link_prefix ^ k) link_kinds)

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

let fields out prefix = H.fields ~prefix out
let float_field = H.float_field

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
let sink env (cfg : config) ns = H.spawn_sink env.peer_exe ~seconds:cfg.seconds ns port_out

let source env (cfg : config) ns host port =
  H.spawn_source env.peer_exe ~bytes:cfg.bytes ~seconds:cfg.seconds ns host port

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
  env.h.links <- ta :: tb :: env.h.links;
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
  env.h.links <- va :: vb :: env.h.links;
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

let consort_run env (cfg : config) progress =
  let ns = new_ns env "ca" in
  let tap = link_name env "t" in
  env.h.links <- tap :: env.h.links;
  H.with_stack ~mtu:cfg.mtu ~tap ~ip:(our_ip ^ "/24") (fun (up : Up.t) ->
      sh "ip link set %s netns %s" tap ns;
      address ns tap kernel_ip cfg.mtu;
      let (module N) = H.tcp4 ~local:our_ip ~seed:4242 ~buffer:cfg.buffer up in
      let loop = up.loop in
      (* Kernel to us: we read to the end. *)
      let flow_in () =
        check_interrupted ();
        progress "kernel -> consort over TAP";
        let l = match N.Sock.listen N.tcp port_in with Ok l -> l | Error e -> H.perr "listen" e in
        let result = ref None in
        Socket.Promise.upon (N.Sock.accept l) (function
          | Error e -> H.perr "accept" e
          | Ok s ->
              N.Sock.stop l;
              let buf = Cstruct.create 65536 in
              let got = ref 0 and t0 = ref 0. in
              let c0 = self_cpu () and m0 = machine_busy () in
              let rec read () =
                Socket.Promise.upon (N.Sock.read s buf) (function
                  | Error e -> H.perr "read" e
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
        let (got, secs, ours, machine), src_out =
          H.finish_with loop k ~timeout:(cfg.seconds +. grace) ~grace result "kernel -> consort"
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
        H.run_with loop k ~timeout:5. (fun () -> Proc.find_line k ~prefix:"LISTENING" <> None);
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
            | Error e -> H.perr "connect" e
            | Ok s ->
                let sent = ref 0 in
                let rec write () =
                  if !sent >= cfg.bytes || Unix.gettimeofday () > deadline then N.Sock.shutdown s
                  else begin
                    let n = min (Cstruct.length chunk) (cfg.bytes - !sent) in
                    sent := !sent + n;
                    Socket.Promise.upon
                      (N.Sock.write s (Cstruct.sub chunk 0 n))
                      (function Error e -> H.perr "write" e | Ok () -> write ())
                  end
                in
                write ();
                let buf = Cstruct.create 4096 in
                let rec drain () =
                  Socket.Promise.upon (N.Sock.read s buf) (function
                    | Error e -> H.perr "read" e
                    | Ok 0 ->
                        N.Sock.close s;
                        let u1, s1 = self_cpu () and m1 = machine_busy () in
                        let u0, s0 = c0 in
                        finished :=
                          Some ({ who = "consort"; user = u1 -. u0; sys = s1 -. s0 }, m1 -. m0)
                    | Ok _ -> drain ())
                in
                drain ());
        let (ours, machine), sink_out =
          H.finish_with loop k ~timeout:(cfg.seconds +. grace) ~grace finished "consort -> kernel"
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
        let l = match N.Sock.listen N.tcp port_rr with Ok l -> l | Error e -> H.perr "listen" e in
        let echoed = ref false in
        Socket.Promise.upon (N.Sock.accept l) (function
          | Error e -> H.perr "accept" e
          | Ok s ->
              N.Sock.stop l;
              N.T.set_nodelay (N.Sock.connection s) true;
              let buf = Cstruct.create 65536 in
              let rec echo () =
                Socket.Promise.upon (N.Sock.read s buf) (function
                  | Error e -> H.perr "read" e
                  | Ok 0 ->
                      N.Sock.close s;
                      echoed := true
                  | Ok k ->
                      Socket.Promise.upon
                        (N.Sock.write s (Cstruct.sub buf 0 k))
                        (function Error e -> H.perr "write" e | Ok () -> echo ()))
              in
              echo ());
        let go () =
          let q = ping env cfg ~pin ns our_ip in
          H.run_with loop q ~timeout:(cfg.seconds +. grace) (fun () -> !echoed);
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
  H.run ~impossible:(impossible ()) ~sweep:sweep_stale ~dir:"consort-netbench-" ~ns_prefix
    ~link_prefix
    ~programs:(fun h ->
      let bridge_exe = H.compile h "tap_bridge" Netbench_sources.tap_bridge in
      let peer_exe = H.compile h "tcp_peer" Netbench_sources.tcp_peer in
      { h; bridge_exe; peer_exe })
    ~env_of:(fun env -> env.h)
    ~leftovers
    (fun env ->
      let consort_in, consort_out, consort_rr, consort_rr_any = consort_run env cfg progress in
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
      })

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
