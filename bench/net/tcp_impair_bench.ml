open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up
module Proc = Bench_proc
module H = Bench_harness

let src = Logs.Src.create "consort.bench.tcp-impair" ~doc:"The impaired TCP benchmark"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  impair : string;
  bytes : int;
  seconds : float;
  mtu : int;
  buffer : int;
  ipv6 : bool;
  kernel_cc : string;
  consort_cc : Tcp.congestion;
}

let default =
  {
    impair = "loss=2%,reorder=5%,delay=1ms";
    bytes = 100_000_000;
    seconds = 300.;
    mtu = 1500;
    buffer = 1 lsl 20;
    ipv6 = true;
    kernel_cc = "cubic";
    consort_cc = Tcp.default_config.congestion;
  }

let consort_ccs = [ ("cubic", Tcp.Cubic); ("newreno", Tcp.New_reno); ("bbr", Tcp.Bbr) ]

type relay = {
  frames : int;
  lost : int;
  reordered : int;
  duplicated : int;
  blackholed : int;
  queue_drops : int;
  write_drops : int;
  socket_drops : int;
  device_drops : int;
  max_frame : int;
}

type flow = {
  bytes : int;
  secs : float;
  sha256 : string;
  retransmitted : int;
  timeouts : int;
  undos : int;
}

type family = {
  name : string;
  consort_in : flow;
  consort_out : flow;
  kernel : flow;
  consort_relay : relay;
  kernel_relay : relay;
}

type report = { config : config; spec : string; host_cc : string; families : family list }

let mbit_s (f : flow) = float f.bytes *. 8. /. f.secs /. 1e6
let ratios f = (mbit_s f.consort_in /. mbit_s f.kernel, mbit_s f.consort_out /. mbit_s f.kernel)

let meets_target r =
  List.for_all
    (fun f ->
      let i, o = ratios f in
      Float.min i o >= 0.7)
    r.families

(* {1 The SPEC, as the relay reads it} *)

let check_cc name =
  if
    name <> ""
    && String.length name <= 15
    && String.for_all (fun c -> (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c = '_') name
  then Ok ()
  else Error (Printf.sprintf "%S: not a congestion control's name (cubic, reno, bbr)" name)

let host_cc () =
  match open_in "/proc/sys/net/ipv4/tcp_congestion_control" with
  | exception Sys_error _ -> "unknown"
  | ic ->
      Fun.protect
        ~finally:(fun () -> close_in_noerr ic)
        (fun () ->
          match input_line ic with s -> String.trim s | exception End_of_file -> "unknown")

let check_spec s =
  let number v =
    let n = String.length v in
    let rec digits i =
      if i < n && (v.[i] = '.' || (v.[i] >= '0' && v.[i] <= '9')) then digits (i + 1) else i
    in
    let i = digits 0 in
    match float_of_string_opt (String.sub v 0 i) with
    | Some x when i > 0 -> Some (x, String.sub v i (n - i))
    | _ -> None
  in
  let prob k v =
    match number v with
    | Some (p, "%") when p <= 100. -> Ok ()
    | Some (p, "") when p <= 1. -> Ok ()
    | _ ->
        Error (Printf.sprintf "%s=%s: a probability is a percentage (2%%) or a fraction (0.02)" k v)
  in
  let duration k v =
    match number v with
    | Some (d, u) when List.mem u [ "us"; "ms"; "s" ] ->
        let ns = d *. match u with "us" -> 1e3 | "ms" -> 1e6 | _ -> 1e9 in
        if ns <= 60e9 then Ok () else Error (Printf.sprintf "%s=%s: at most 60s" k v)
    | _ -> Error (Printf.sprintf "%s=%s: a duration is a number with us, ms or s" k v)
  in
  let rate k v =
    let v' = if Filename.check_suffix v "bit" then Filename.chop_suffix v "bit" else v in
    match number v' with
    | Some (r, u) when List.mem u [ ""; "k"; "m"; "g" ] ->
        let bps = r *. match u with "k" -> 1e3 | "m" -> 1e6 | "g" -> 1e9 | _ -> 1. in
        if bps >= 1e3 && bps <= 1e12 then Ok ()
        else Error (Printf.sprintf "%s=%s: within 1kbit and 1000gbit" k v)
    | _ -> Error (Printf.sprintf "%s=%s: a rate is bits per second (100mbit, 1g)" k v)
  in
  let int lo hi k v =
    match int_of_string_opt v with
    | Some n when n >= lo && n <= hi && String.for_all (fun c -> c >= '0' && c <= '9') v -> Ok ()
    | _ -> Error (Printf.sprintf "%s=%s: a whole number within %d and %d" k v lo hi)
  in
  if s = "none" || s = "" then Ok ()
  else
    List.fold_left
      (fun acc item ->
        match acc with
        | Error _ -> acc
        | Ok () -> (
            match String.index_opt item '=' with
            | None -> Error (Printf.sprintf "%S: expected KEY=VALUE" item)
            | Some i -> (
                let k = String.sub item 0 i
                and v = String.sub item (i + 1) (String.length item - i - 1) in
                match k with
                | "loss" | "dup" | "reorder" -> prob k v
                | "delay" | "jitter" | "reorder_delay" -> duration k v
                | "rate" -> rate k v
                | "queue" -> int 1500 (1 lsl 30) k v
                | "mtu" -> int 68 65535 k v
                | "seed" -> int 0 max_int k v
                | _ ->
                    Error
                      (Printf.sprintf
                         "unknown key %S (loss, dup, reorder, delay, jitter, reorder_delay, rate, \
                          queue, mtu, seed)"
                         k))))
      (Ok ()) (String.split_on_char ',' s)

(* {1 Failures and commands} *)

let fail, ok, sh, quiet, check_interrupted = H.(fail, ok, sh, quiet, check_interrupted)

let impossible () =
  H.impossible ~root:"network namespaces and TAP devices need root"
    [
      (H.program "gcc", "gcc is missing (it builds the relay and the kernel ends)");
      ( (fun () -> Sys.file_exists "/usr/include/openssl/evp.h"),
        "OpenSSL's headers are missing (libssl-dev: the kernel ends hash with SHA-256)" );
    ]

(* {1 Namespaces and devices} *)

type env = { h : H.env; relay_exe : string; peer_exe : string }

let ns_prefix = "consort-impair-"
let link_prefix = "cni"
let new_ns env ~v6 kind = H.new_ns ~v6 env.h kind
let link_name kind = link_prefix ^ kind ^ H.tag
let drop_namespaces env = H.drop_namespaces env.h
let starts = H.starts

let leftovers () =
  List.filter (starts (ns_prefix ^ H.tag ^ "-")) (H.namespaces ())
  @ List.filter (fun l -> starts link_prefix l && Filename.check_suffix l H.tag) (H.link_names ())

(* Namespaces of runs whose process is gone. *)
let sweep_stale () = H.sweep_stale_namespaces ns_prefix

(* {1 The relay} *)

let spawn_relay env ?ns spec a b =
  let r = Proc.spawn ?ns ~stdin:true [ env.relay_exe; "relay"; spec; a; b ] in
  ignore (ok (Proc.wait_line r ~prefix:"READY" ~timeout:5.));
  r

let field_int f k =
  match List.assoc_opt k f with
  | Some v -> ( match int_of_string_opt v with Some n -> n | None -> fail "bad %s=%s" k v)
  | None -> fail "no %s= in a relay's STATS" k

let relay_stats r =
  let seen = List.length (Proc.lines r ~prefix:"STATS") in
  Proc.send_line r "stats";
  if
    not (Proc.wait r ~timeout:5. (fun () -> List.length (Proc.lines r ~prefix:"STATS") >= seen + 2))
  then fail "the relay does not answer:\n%s" (Proc.output r);
  let two = List.filteri (fun i _ -> i >= seen) (Proc.lines r ~prefix:"STATS") in
  List.fold_left
    (fun acc l ->
      match Proc.result_fields l "STATS" with
      | None -> acc
      | Some f ->
          {
            frames = acc.frames + field_int f "in";
            lost = acc.lost + field_int f "lost";
            reordered = acc.reordered + field_int f "reordered";
            duplicated = acc.duplicated + field_int f "duplicated";
            blackholed = acc.blackholed + field_int f "blackholed";
            queue_drops = acc.queue_drops + field_int f "queue_drops";
            write_drops = acc.write_drops + field_int f "write_drops";
            socket_drops = acc.socket_drops + field_int f "socket_drops";
            device_drops = acc.device_drops;
            max_frame = max acc.max_frame (field_int f "max_frame");
          })
    {
      frames = 0;
      lost = 0;
      reordered = 0;
      duplicated = 0;
      blackholed = 0;
      queue_drops = 0;
      write_drops = 0;
      socket_drops = 0;
      device_drops = 0;
      max_frame = 0;
    }
    two

(* What a relay did between two snapshots: the frames the kernels send while
   the devices come up (neighbour discovery, to a device not up yet) are
   not the transfer's. *)
let since (a : relay) (b : relay) =
  {
    frames = b.frames - a.frames;
    lost = b.lost - a.lost;
    reordered = b.reordered - a.reordered;
    duplicated = b.duplicated - a.duplicated;
    blackholed = b.blackholed - a.blackholed;
    queue_drops = b.queue_drops - a.queue_drops;
    write_drops = b.write_drops - a.write_drops;
    socket_drops = b.socket_drops - a.socket_drops;
    device_drops = b.device_drops - a.device_drops;
    max_frame = b.max_frame;
  }

(* With -v: the kernel's own TCP counters in [ns] (nstat, if there),
   those that say how its sender recovered. *)
let kernel_counters what ns =
  if Logs.level () = Some Logs.Info && Sys.command "command -v nstat >/dev/null 2>&1" = 0 then
    match Proc.run (Printf.sprintf "ip netns exec %s nstat -az" ns) with
    | Error _ -> ()
    | Ok out ->
        let keep =
          [
            "TcpRetransSegs";
            "TcpExtTCPLossProbes";
            "TcpExtTCPDSACKRecv";
            "TcpExtTCPDSACKOldSent";
            "TcpExtTCPSackRecovery";
            "TcpExtTCPTimeouts";
            "TcpExtTCPSpuriousRTOs";
            "TcpExtTCPSACKReorder";
            "TcpExtTCPFastRetrans";
            "TcpExtTCPLostRetransmit";
            "TcpExtTCPDSACKUndo";
            "TcpExtTCPLossUndo";
            "TcpExtTCPOFOQueue";
          ]
        in
        let fields =
          List.filter_map
            (fun l ->
              match List.filter (( <> ) "") (String.split_on_char ' ' l) with
              | k :: v :: _ when List.mem k keep -> Some (k ^ " " ^ v)
              | _ -> None)
            (String.split_on_char '\n' out)
        in
        Log.info (fun m -> m "%s, the kernel's counters: %s" what (String.concat ", " fields))

(* Frames the device [dev] in [ns] dropped for a full queue. *)
let tx_dropped ns dev =
  match
    Proc.run (Printf.sprintf "ip netns exec %s cat /sys/class/net/%s/statistics/tx_dropped" ns dev)
  with
  | Ok s -> ( match int_of_string_opt (String.trim s) with Some n -> n | None -> 0)
  | Error e -> fail "%s" e

let stop_relay r =
  Proc.close_stdin r;
  ignore (ok (Proc.finish r ~timeout:5.))

(* {1 Kernel ends} *)

let port_in = 5011
let port_out = 5012
let port_kk = 5013
let grace = 15.
let fields out = H.fields out
let field, float_field = H.(field, float_field)
let sink env (cfg : config) ns port = H.spawn_sink env.peer_exe ~seconds:cfg.seconds ns port

(* The kernel's senders run [cfg.kernel_cc] (TCP_CONGESTION), whatever the
   host's default: CUBIC, Linux's own default, unless asked otherwise. *)
let source env (cfg : config) ns host port =
  H.spawn_source env.peer_exe ~cc:cfg.kernel_cc ~bytes:cfg.bytes ~seconds:cfg.seconds ns host port

let expect_cc what (cfg : config) fo =
  match List.assoc_opt "cc" fo with
  | Some cc when cc = cfg.kernel_cc -> ()
  | cc ->
      fail "%s: the kernel's sender ran %s, not %s" what
        (Option.value cc ~default:"an unknown congestion control")
        cfg.kernel_cc

type addrs = { v6 : bool; ours : string; kernel : string; kk_a : string; kk_b : string; len : int }

let v4 =
  {
    v6 = false;
    ours = "10.79.4.2";
    kernel = "10.79.4.1";
    kk_a = "10.79.5.1";
    kk_b = "10.79.5.2";
    len = 24;
  }

let v6 =
  {
    v6 = true;
    ours = "fd79:4::2";
    kernel = "fd79:4::1";
    kk_a = "fd79:5::1";
    kk_b = "fd79:5::2";
    len = 64;
  }

(* A TAP device's queue towards its reader holds txqueuelen frames (500 by
   default) and drops beyond: more than a 1 MiB window of frames, so that
   nothing is lost that the SPEC did not ask for. *)
let txqueuelen = 4096

let address ns dev (a : addrs) ip mtu =
  if a.v6 then sh "ip -n %s -6 addr add %s/%d dev %s nodad" ns ip a.len dev
  else sh "ip -n %s addr add %s/%d dev %s" ns ip a.len dev;
  sh "ip -n %s link set %s mtu %d txqueuelen %d up" ns dev mtu txqueuelen

(* Kernel to kernel through the relay. *)
let kernel_run env (cfg : config) (a : addrs) progress =
  progress
    (Printf.sprintf "kernel -> kernel through the relay (%s)" (if a.v6 then "IPv6" else "IPv4"));
  let na = new_ns env ~v6:a.v6 "ka" and nb = new_ns env ~v6:a.v6 "kb" in
  let ta = link_name "a" and tb = link_name "b" in
  env.h.links <- ta :: tb :: env.h.links;
  let r = spawn_relay env cfg.impair ("tap:" ^ ta) ("tap:" ^ tb) in
  sh "ip link set %s netns %s" ta na;
  sh "ip link set %s netns %s" tb nb;
  address na ta a a.kk_a cfg.mtu;
  address nb tb a a.kk_b cfg.mtu;
  let before = { (relay_stats r) with device_drops = tx_dropped na ta + tx_dropped nb tb } in
  let k = sink env cfg nb port_kk in
  ignore (ok (Proc.wait_line k ~prefix:"LISTENING" ~timeout:5.));
  let s = source env cfg na a.kk_b port_kk in
  let src_out = ok (Proc.finish s ~timeout:(cfg.seconds +. grace)) in
  let sink_out = ok (Proc.finish k ~timeout:grace) in
  kernel_counters "kernel -> kernel, the sender" na;
  kernel_counters "kernel -> kernel, the receiver" nb;
  let stats = { (relay_stats r) with device_drops = tx_dropped na ta + tx_dropped nb tb } in
  let stats = since before stats in
  stop_relay r;
  drop_namespaces env;
  let fs = fields sink_out and fo = fields src_out in
  expect_cc "kernel -> kernel" cfg fo;
  if field fs "sha256" <> field fo "sha256" || field fs "bytes" <> field fo "bytes" then
    fail "kernel -> kernel: the sink got %s bytes (SHA-256 %s), the source sent %s (%s)"
      (field fs "bytes") (field fs "sha256") (field fo "bytes") (field fo "sha256");
  ( {
      bytes = int_of_float (float_field fs "bytes");
      secs = float_field fs "secs";
      sha256 = field fs "sha256";
      retransmitted = 0;
      timeouts = 0;
      undos = 0;
    },
    stats )

(* {1 Consort's stack} *)

module type TCP = sig
  module T : Tcp.S
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
  val host : string -> T.host
end

let params (up : Up.t) = (Consort_net_unix.Loop_clock.of_loop up.loop, up.pool)

let tcp4 (cfg : config) (up : Up.t) : (module TCP) =
  let (module N) =
    H.tcp4 ~congestion:cfg.consort_cc ~local:v4.ours ~seed:4244 ~buffer:cfg.buffer up
  in
  (module struct
    include N

    let host = Ipv4_addr.of_string_exn
  end)

let tcp6 (cfg : config) (up : Up.t) : (module TCP) =
  let clock, pool = params up in
  let ip6 = match up.v6 with Some v -> v.ip6 | None -> fail "no IPv6 on the stack" in
  let module P = struct
    type host = Ipv6_addr.t
    type lower_address = Ipv6.address
    type lower_pattern = Ipv6.address_pattern

    let local = Ipv6_addr.of_string_exn v6.ours
    let lower_address h = { Ipv6.dst = h; proto = 6 }
    let lower_pattern = { Ipv6.protocol = 6; source = None }
    let pseudo_header = Some (fun ~src ~dst ~len -> Transport_checksum.ipv6 ~src ~dst ~proto:6 ~len)
    let equal_host = Ipv6_addr.equal
    let pp_host = Ipv6_addr.pp
    let clock = clock
    let rng = Rng.create 4245
    let pool = pool
  end in
  let module T = Tcp.Make (Ipstack.Ip6) (P) in
  let tcp =
    H.tcp_created
      (T.create
         ~config:(H.tcp_config ~congestion:cfg.consort_cc ~buffer:cfg.buffer ())
         ~icmp:Tcp_icmp.of_ipv6 ip6)
  in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
    let host = Ipv6_addr.of_string_exn
  end)

(* The SHA-256 of Consort's end of a stream, taken as the kernel's ends take
   theirs: OpenSSL's, in a process of its own ([hash_peer digest]), the
   stream copied to it through a pipe. Digested in Consort's own process
   (Mirage_crypto's), it took 42% of that process's CPU from the stack under
   test, where the kernel's ends digest beside the kernel's TCP. *)
module Sha = struct
  type t = { p : Proc.t; scratch : Bytes.t; mutable fill : int }

  (* What is read comes a segment at a time (1,448 bytes) while a hole is
     repaired: copied as it comes, it cost a write to the pipe per segment,
     as many system calls as the stack's own. It goes in 64 KiB writes. *)
  let chunk = 65536

  let start env =
    {
      p = Proc.spawn ~stdin:true [ env.peer_exe; "digest" ];
      scratch = Bytes.create chunk;
      fill = 0;
    }

  let flush t =
    if t.fill > 0 then begin
      Proc.write t.p t.scratch 0 t.fill;
      t.fill <- 0
    end

  let feed t c =
    let rec go off n =
      if n > 0 then begin
        let k = min n (chunk - t.fill) in
        Cstruct.blit_to_bytes c off t.scratch t.fill k;
        t.fill <- t.fill + k;
        if t.fill = chunk then flush t;
        go (off + k) (n - k)
      end
    in
    go 0 (Cstruct.length c)

  (* The stream ends: its digest, once the digester has read it all. *)
  let get t ~bytes =
    flush t;
    Proc.close_stdin t.p;
    match Proc.finish t.p ~timeout:60. with
    | Error e -> fail "the digest of our end: %s" e
    | Ok out ->
        let f = fields out in
        if field f "bytes" <> string_of_int bytes then
          fail "the digest of our end read %s bytes of %d" (field f "bytes") bytes;
        field f "sha256"
end

let consort_run env (cfg : config) (a : addrs) progress =
  let fam = if a.v6 then "IPv6" else "IPv4" in
  (* The relay's namespace holds our TAP device's interface, with no
     address: the relay reads and writes it through AF_PACKET. *)
  let nr = new_ns env ~v6:false "cr" and nk = new_ns env ~v6:a.v6 "ck" in
  let tap = link_name "t" and tk = link_name "k" in
  env.h.links <- tap :: tk :: env.h.links;
  H.with_stack ~mtu:cfg.mtu ~tap
    ?ip6:(if a.v6 then Some (v6.ours ^ "/64") else None)
    ~ip:(v4.ours ^ "/24")
    (fun (up : Up.t) ->
      sh "ip link set %s netns %s" tap nr;
      sh "ip -n %s link set %s mtu %d txqueuelen %d up" nr tap cfg.mtu txqueuelen;
      let r = spawn_relay env ~ns:nr cfg.impair ("packet:" ^ tap) ("tap:" ^ tk) in
      sh "ip -n %s link set %s netns %s" nr tk nk;
      address nk tk a a.kernel cfg.mtu;
      if a.v6 then quiet "ip netns exec %s sysctl -qw net.ipv6.conf.%s.disable_ipv6=0" nk tk;
      let (module N) = if a.v6 then tcp6 cfg up else tcp4 cfg up in
      let loop = up.loop in
      let conn_flow s bytes secs sha =
        let i = N.T.info (N.Sock.connection s) in
        Log.info (fun m -> m "%s: %a" fam Tcp.pp_conn_info i);
        {
          bytes;
          secs;
          sha256 = sha;
          retransmitted = i.segments_retransmitted;
          timeouts = i.timeouts;
          undos = i.undos;
        }
      in
      (* Kernel to us: we read to the end, hashing. *)
      let before = { (relay_stats r) with device_drops = tx_dropped nr tap + tx_dropped nk tk } in
      progress (Printf.sprintf "kernel -> consort through the relay (%s)" fam);
      let l = match N.Sock.listen N.tcp port_in with Ok l -> l | Error e -> H.perr "listen" e in
      let result = ref None in
      Socket.Promise.upon (N.Sock.accept l) (function
        | Error e -> H.perr "accept" e
        | Ok s ->
            N.Sock.stop l;
            let buf = Cstruct.create 65536 and sha = Sha.start env in
            let got = ref 0 and t0 = ref 0. in
            let rec read () =
              Socket.Promise.upon (N.Sock.read s buf) (function
                | Error e -> H.perr "read" e
                | Ok 0 ->
                    let secs = Unix.gettimeofday () -. !t0 in
                    let f = conn_flow s !got secs (Sha.get sha ~bytes:!got) in
                    N.Sock.close s;
                    result := Some f
                | Ok k ->
                    if !got = 0 then t0 := Unix.gettimeofday ();
                    Sha.feed sha (Cstruct.sub buf 0 k);
                    got := !got + k;
                    read ())
            in
            read ());
      let k = source env cfg nk a.ours port_in in
      let consort_in, src_out =
        H.finish_with loop k ~timeout:(cfg.seconds +. grace) ~grace result
          (Printf.sprintf "kernel -> consort (%s)" fam)
      in
      let fo = fields src_out in
      expect_cc (Printf.sprintf "kernel -> consort (%s)" fam) cfg fo;
      if
        string_of_int consort_in.bytes <> field fo "bytes" || consort_in.sha256 <> field fo "sha256"
      then
        fail "kernel -> consort (%s): we got %d bytes (SHA-256 %s), the kernel sent %s (%s)" fam
          consort_in.bytes consort_in.sha256 (field fo "bytes") (field fo "sha256");
      (* Us to the kernel: we write [bytes], hashing. *)
      check_interrupted ();
      progress (Printf.sprintf "consort -> kernel through the relay (%s)" fam);
      let k = sink env cfg nk port_out in
      (* Our loop runs while the sink starts, woken by its output. *)
      let fd = Proc.fd k in
      Loop.watch loop fd (fun () -> Proc.pump k);
      Loop.run
        ~until:(fun () ->
          Proc.find_line k ~prefix:"LISTENING" <> None || Proc.eof k || !Proc.interrupted)
        ~timeout:(Time.of_sec 5.) loop;
      Loop.unwatch loop fd;
      if Proc.find_line k ~prefix:"LISTENING" = None then
        fail "the kernel sink is not listening:\n%s" (Proc.output k);
      let finished = ref None in
      let chunk = Cstruct.create (1 lsl 20) in
      let x = ref 0x9E3779B9 in
      for i = 0 to Cstruct.length chunk - 1 do
        x := (!x * 1103515245) + 12345;
        Cstruct.set_uint8 chunk i ((!x lsr 16) land 0xff)
      done;
      let sha = Sha.start env in
      Socket.Promise.upon
        (N.Sock.connect N.tcp (N.host a.kernel) port_out)
        (function
          | Error e -> H.perr "connect" e
          | Ok s ->
              let sent = ref 0 in
              let rec write n =
                if !sent >= cfg.bytes then N.Sock.shutdown s
                else begin
                  let len = min (Cstruct.length chunk) (cfg.bytes - !sent) in
                  (* Every chunk differs: its number in its first bytes. *)
                  Cstruct.BE.set_uint64 chunk 0 (Int64.of_int n);
                  Sha.feed sha (Cstruct.sub chunk 0 len);
                  sent := !sent + len;
                  Socket.Promise.upon
                    (N.Sock.write s (Cstruct.sub chunk 0 len))
                    (function Error e -> H.perr "write" e | Ok () -> write (n + 1))
                end
              in
              write 0;
              let buf = Cstruct.create 4096 in
              let rec drain () =
                Socket.Promise.upon (N.Sock.read s buf) (function
                  | Error e -> H.perr "read" e
                  | Ok 0 ->
                      finished := Some (conn_flow s !sent 0. (Sha.get sha ~bytes:!sent));
                      N.Sock.close s
                  | Ok _ -> drain ())
              in
              drain ());
      let ours, sink_out =
        H.finish_with loop k ~timeout:(cfg.seconds +. grace) ~grace finished
          (Printf.sprintf "consort -> kernel (%s)" fam)
      in
      let fs = fields sink_out in
      if string_of_int ours.bytes <> field fs "bytes" || ours.sha256 <> field fs "sha256" then
        fail "consort -> kernel (%s): we sent %d bytes (SHA-256 %s), the kernel got %s (%s)" fam
          ours.bytes ours.sha256 (field fs "bytes") (field fs "sha256");
      let consort_out = { ours with secs = float_field fs "secs" } in
      kernel_counters "kernel <-> consort, the kernel" nk;
      let stats = { (relay_stats r) with device_drops = tx_dropped nr tap + tx_dropped nk tk } in
      let stats = since before stats in
      stop_relay r;
      Log.info (fun m -> m "%s: %a" fam Tcp.pp_stats (N.T.query N.tcp));
      (consort_in, consort_out, stats))
  |> fun r ->
  drop_namespaces env;
  r

(* {1 The whole run} *)

let spec_of env impair =
  match
    Proc.run (Printf.sprintf "%s check %s" (Filename.quote env.relay_exe) (Filename.quote impair))
  with
  | Ok out -> (
      match String.index_opt out ' ' with
      | Some i when starts "SPEC" out ->
          String.trim (String.sub out (i + 1) (String.length out - i - 1))
      | _ -> fail "the relay's check: %s" out)
  | Error e -> fail "%s" e

let run ?(progress = fun _ -> ()) (cfg : config) =
  match (check_spec cfg.impair, check_cc cfg.kernel_cc) with
  | Error e, _ -> Error ("--impair: " ^ e)
  | _, Error e -> Error ("--kernel-cc: " ^ e)
  | Ok (), Ok () ->
      H.run ~impossible:(impossible ()) ~sweep:sweep_stale ~dir:"consort-impairbench-" ~ns_prefix
        ~link_prefix
        ~programs:(fun h ->
          let relay_exe = H.compile h "impair_relay" Netbench_sources.impair_relay in
          let peer_exe = H.compile h "hash_peer" Netbench_sources.hash_peer ~libs:"-lcrypto" in
          { h; relay_exe; peer_exe })
        ~env_of:(fun env -> env.h)
        ~leftovers
        (fun env ->
          let spec = spec_of env cfg.impair in
          (match
             Proc.run (Printf.sprintf "%s cc %s" (Filename.quote env.peer_exe) cfg.kernel_cc)
           with
          | Ok _ -> ()
          | Error e ->
              let last =
                List.fold_left
                  (fun acc l -> if String.trim l = "" then acc else String.trim l)
                  e (String.split_on_char '\n' e)
              in
              fail "--kernel-cc: %s" last);
          let family (a : addrs) =
            let consort_in, consort_out, consort_relay = consort_run env cfg a progress in
            check_interrupted ();
            let kernel, kernel_relay = kernel_run env cfg a progress in
            check_interrupted ();
            {
              name = (if a.v6 then "IPv6" else "IPv4");
              consort_in;
              consort_out;
              kernel;
              consort_relay;
              kernel_relay;
            }
          in
          let families = List.map family (if cfg.ipv6 then [ v4; v6 ] else [ v4 ]) in
          { config = cfg; spec; host_cc = host_cc (); families })

(* {1 Printing} *)

let pp_relay ppf r =
  Fmt.pf ppf
    "%d frames: %d lost, %d reordered, %d duplicated, %d black-holed, %d queue drops; dropped \
     outside the SPEC: %d refused by the next hop, %d by the relay's socket, %d by the TAP \
     devices; largest frame %d bytes"
    r.frames r.lost r.reordered r.duplicated r.blackholed r.queue_drops r.write_drops r.socket_drops
    r.device_drops r.max_frame

let pp_table ppf r =
  Fmt.pf ppf "TCP through the impairment relay (%s): %d MB per transfer, SHA-256 checked, MTU %d@."
    r.config.impair (r.config.bytes / 1_000_000) r.config.mtu;
  Fmt.pf ppf "relay: %s@." r.spec;
  Fmt.pf ppf "kernel senders: %s (TCP_CONGESTION; the host's default: %s); Consort's: %a@."
    r.config.kernel_cc r.host_cc Tcp.pp_congestion r.config.consort_cc;
  Fmt.pf ppf "%-30s %9s %9s %12s %9s %6s@." "transfer" "Mbit/s" "/ kernel" "retransmits" "timeouts"
    "undos";
  List.iter
    (fun f ->
      let i, o = ratios f in
      let row name (x : flow) ratio =
        Fmt.pf ppf "%-30s %9.1f %9s %12d %9d %6d@." name (mbit_s x) ratio x.retransmitted x.timeouts
          x.undos
      in
      row (f.name ^ " kernel -> consort") f.consort_in (Printf.sprintf "%.2f" i);
      row (f.name ^ " consort -> kernel") f.consort_out (Printf.sprintf "%.2f" o);
      Fmt.pf ppf "%-30s %9.1f %9s %12s %9s %6s@." (f.name ^ " kernel -> kernel") (mbit_s f.kernel)
        "1.00" "-" "-" "-";
      Fmt.pf ppf "  relay (consort): %a@.  relay (kernel):  %a@." pp_relay f.consort_relay pp_relay
        f.kernel_relay)
    r.families;
  Fmt.pf ppf "target: consort / kernel >= 0.70 both ways: %s@."
    (if meets_target r then "met" else "MISSED");
  Fmt.pf ppf
    "(Mbit/s: the receiver's first byte to the end of the stream; retransmits, timeouts and undos: \
     Consort's connection)@."

let to_json r =
  let flow name (f : flow) =
    Printf.sprintf "\"%s_mbit_s\":%.1f,\"%s_retransmitted\":%d,\"%s_timeouts\":%d,\"%s_undos\":%d"
      name (mbit_s f) name f.retransmitted name f.timeouts name f.undos
  in
  let fam f =
    let i, o = ratios f in
    Printf.sprintf
      "\"%s\":{%s,%s,\"kernel_mbit_s\":%.1f,\"ratio_in\":%.3f,\"ratio_out\":%.3f,\"relay_lost\":%d,\"relay_reordered\":%d,\"relay_frames\":%d,\"relay_write_drops\":%d,\"kernel_relay_write_drops\":%d,\"relay_max_frame\":%d,\"kernel_relay_max_frame\":%d}"
      f.name (flow "consort_in" f.consort_in)
      (flow "consort_out" f.consort_out)
      (mbit_s f.kernel) i o f.consort_relay.lost f.consort_relay.reordered f.consort_relay.frames
      f.consort_relay.write_drops f.kernel_relay.write_drops f.consort_relay.max_frame
      f.kernel_relay.max_frame
  in
  Printf.sprintf
    "{\"bench\":\"tcp-impair\",\"impair\":%S,\"bytes\":%d,\"mtu\":%d,\"kernel_cc\":%S,\"host_cc\":%S,\"consort_cc\":%S,%s,\"target_met\":%b}"
    r.config.impair r.config.bytes r.config.mtu r.config.kernel_cc r.host_cc
    (Fmt.str "%a" Tcp.pp_congestion r.config.consort_cc)
    (String.concat "," (List.map fam r.families))
    (meets_target r)
