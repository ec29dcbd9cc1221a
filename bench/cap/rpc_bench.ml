open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Consort_cap.Rpc_udp

type figures = {
  null_us : float;
  raw_rtt_us : float;
  trans_mbps : float;
  trans_cpu_mbps : float;
  trans_lan_mbps : float;
  trans_lan_cpu_mbps : float;
  raw_mbps : float;
  raw_cpu_mbps : float;
  raw_big_cpu_mbps : float;
  gcm_mbps : float;
  gcm_mirage_mbps : float;
  chacha_mbps : float;
  chacha_evp_mbps : float;
  chacha_1k_mbps : float;
  chacha_evp_1k_mbps : float;
  trans_2p_mbps : float;
  trans_2p_client_cpu_ms : float;
  trans_2p_server_cpu_ms : float;
  byte_limit_mbps : float;
  byte_limit_cpu_ms : float;
}

let ( let* ) = Result.bind

let median a =
  let a = Array.copy a in
  Array.sort compare a;
  a.(Array.length a / 2)

(* This process's CPU time (user and system), seconds. *)
let cpu () =
  let t = Unix.times () in
  t.Unix.tms_utime +. t.Unix.tms_stime

let udp_err r = Result.map_error (Fmt.str "%a" Transport.pp_error) r
let local_addr = "127.0.0.1:0"
let deadline loop = Time.add (Loop.now loop) (Time.of_sec 60.)

(* Raw UDP: an echo socket and a pinger, one datagram in flight. *)
let raw_rtt loop calls =
  let* addr0 =
    udp_err (Result.map_error (fun e -> `Bad_address e) (Udp.address_of_string local_addr))
  in
  let* echo =
    udp_err
      (Udp.open_ loop addr0 (fun c ->
           {
             Udp.recv =
               (fun ~src iov ->
                 let m = Msg.of_iovec iov in
                 ignore (Udp.send c ~dst:src m);
                 Msg.release m);
             closed = ignore;
           }))
  in
  let got = ref 0 in
  let* pinger =
    udp_err
      (Udp.open_ loop addr0 (fun _ ->
           {
             Udp.recv =
               (fun ~src:_ iov ->
                 Iovec.release iov;
                 incr got);
             closed = ignore;
           }))
  in
  let dst = Udp.local echo in
  let samples = Array.make calls 0. in
  let stop = deadline loop in
  (try
     for i = 0 to calls - 1 do
       let before = !got in
       let t0 = Loop.now loop in
       let m = Msg.empty () in
       ignore (Udp.send pinger ~dst m);
       Msg.release m;
       Loop.run loop ~until:(fun () -> !got > before || Loop.now loop > stop);
       if !got = before then raise Exit;
       samples.(i) <- Time.to_us (Time.diff (Loop.now loop) t0)
     done
   with Exit -> ());
  Udp.close echo;
  Udp.close pinger;
  if samples.(calls - 1) = 0. then Error "raw UDP round trip: no answer" else Ok (median samples)

(* Raw UDP one-way: [dgram]-byte datagrams from one socket to another, as
   fast as the receiver takes them: bursts of 512 KB (well under the socket
   buffers), each followed by running the loop until the receiver has them
   all (or 20 ms have passed: a datagram lost on loopback is not waited
   for). The rate is the bytes received over the time taken (wall, and
   this process's CPU). *)
let raw_oneway ?(dgram = 8192) loop total =
  let* addr0 =
    udp_err (Result.map_error (fun e -> `Bad_address e) (Udp.address_of_string local_addr))
  in
  let received = ref 0 in
  let* sink =
    udp_err
      (Udp.open_ loop addr0 (fun _ ->
           {
             Udp.recv =
               (fun ~src:_ iov ->
                 received := !received + Iovec.length iov;
                 Iovec.release iov);
             closed = ignore;
           }))
  in
  let* src =
    udp_err
      (Udp.open_ loop addr0 (fun _ ->
           { Udp.recv = (fun ~src:_ iov -> Iovec.release iov); closed = ignore }))
  in
  let dst = Udp.local sink in
  let payload = Msg.of_string Pool.default (String.make dgram 'x') in
  let burst = max 1 (512 * 1024 / dgram) in
  let t0 = Loop.now loop and c0 = cpu () in
  let sent = ref 0 in
  while !sent < total do
    for _ = 1 to burst do
      ignore (Udp.send src ~dst payload);
      sent := !sent + dgram
    done;
    let target = !sent in
    Loop.run loop ~timeout:(Time.of_ms 20) ~until:(fun () -> !received >= target)
  done;
  let elapsed = Time.to_sec (Time.diff (Loop.now loop) t0) and cpu_s = cpu () -. c0 in
  Msg.release payload;
  Udp.close sink;
  Udp.close src;
  if !received < total / 2 then
    Error (Printf.sprintf "raw UDP one-way: only %d of %d bytes arrived" !received total)
  else Ok (float_of_int !received /. elapsed /. 1e6, float_of_int !received /. cpu_s /. 1e6)

(* An AEAD alone, per second of CPU: [size]-byte messages sealed (and, with
   [open_], opened again), as every byte of a transfer is sealed by the
   sender and opened by the receiver. *)
let aead ~seal ~open_ ~size total =
  let msg = Cstruct.of_string (String.make size 'x') in
  let n = max 1 (total / size) in
  let t0 = cpu () in
  for i = 1 to n do
    let nonce = Cstruct.create 12 in
    Cstruct.BE.set_uint64 nonce 4 (Int64.of_int i);
    let sealed = seal ~nonce msg in
    match open_ with
    | None -> ()
    | Some o -> if not (o ~nonce sealed) then failwith "AEAD round trip failed"
  done;
  float_of_int (n * size) /. (cpu () -. t0) /. 1e6

let secret = Cstruct.of_string (String.make 32 'k')

(* The wire's AES-256-GCM: OpenSSL's, through Consort_crypto.Gcm. *)
let gcm ?(size = 61440) ~open_ total =
  let key = Consort_crypto.Gcm.of_secret (Cstruct.to_string secret) in
  aead ~size total
    ~seal:(fun ~nonce m -> Consort_crypto.Gcm.seal key ~nonce:(Cstruct.to_string nonce) ~adata:"" m)
    ~open_:
      (if open_ then
         Some
           (fun ~nonce s ->
             Consort_crypto.Gcm.open_ key ~nonce:(Cstruct.to_string nonce) ~adata:"" s <> None)
       else None)

(* mirage-crypto's, the same format, which the wire used before. *)
let gcm_mirage ?(size = 61440) total =
  let module C = Mirage_crypto.Cipher_block.AES.GCM in
  let key = C.of_secret secret in
  aead ~size total
    ~seal:(fun ~nonce m -> C.authenticate_encrypt ~key ~nonce m)
    ~open_:(Some (fun ~nonce s -> C.authenticate_decrypt ~key ~nonce s <> None))

let chacha ?(size = 61440) total =
  let module C = Mirage_crypto.Chacha20 in
  let key = C.of_secret secret in
  aead ~size total
    ~seal:(fun ~nonce m -> C.authenticate_encrypt ~key ~nonce m)
    ~open_:(Some (fun ~nonce s -> C.authenticate_decrypt ~key ~nonce s <> None))

(* The group seal's ChaCha20-Poly1305: OpenSSL's, Consort_crypto.Chacha. *)
let chacha_evp ?(size = 61440) total =
  let module C = Consort_crypto.Chacha in
  let key = C.of_secret secret in
  aead ~size total
    ~seal:(fun ~nonce m -> C.authenticate_encrypt ~key ~nonce m)
    ~open_:(Some (fun ~nonce s -> C.authenticate_decrypt ~key ~nonce s <> None))

let gcm_seal_open = gcm ~open_:true
let gcm_seal = gcm ~open_:false

(* 8 KB fragments everywhere, as between machines on an Ethernet. *)
let lan_config = { Consort_cap.Rpc.default_config with loopback_fragment = 0 }

let command_output argv =
  let ic = Unix.open_process_args_in argv.(0) argv in
  let b = Buffer.create 256 in
  (try
     while true do
       Buffer.add_channel b ic 1
     done
   with End_of_file -> ());
  let out = Buffer.contents b in
  match Unix.close_process_in ic with
  | Unix.WEXITED 0 -> Ok out
  | _ -> Error (String.concat " " (Array.to_list argv) ^ " failed")

let bench_key () =
  let g = Consort_crypto.Crypto.deterministic "bench" in
  (g, Consort_cap.Port.Key.generate ~g ())

let cpu_command = 2

let rpc_server ?config loop key =
  let* server = R.open_node ?config ~multicast:None ~bind:local_addr loop in
  let srv = R.serve server key in
  (* Command 2: this process's CPU time so far, seconds (the server's own,
     when it runs in a process of its own); any other: an empty reply. *)
  R.listen srv (fun r ->
      R.putrep r (Consort_cap.Header.reply `Ok)
        (if (R.header r).Consort_cap.Header.command = cpu_command then
           Printf.sprintf "%.6f" (cpu ())
         else ""));
  Ok (Udp.address_to_string (Udp.local (R.connection server)), fun () -> R.close server)

let rpc_client ?config loop g key addr =
  let* client = R.open_node ?config ~multicast:None ~locate:addr ~bind:local_addr loop in
  let secret = Consort_cap.Cap.Secret.generate ~g () in
  let cap = Consort_cap.Cap.owner (Consort_cap.Port.Key.port key) ~obj:1 secret in
  let hdr = Consort_cap.Header.request cap 1 in
  let call data = Result.map_error Consort_cap.Rpc_error.to_string (R.Sync.trans client hdr data) in
  let server_cpu () =
    match R.Sync.trans client (Consort_cap.Header.request cap cpu_command) "" with
    | Ok (_, s) -> (
        match float_of_string_opt s with
        | Some t when Float.is_finite t -> Ok t
        | _ -> Error ("the server's CPU time: unexpected answer " ^ String.escaped s))
    | Error e -> Error ("the server's CPU time: " ^ Consort_cap.Rpc_error.to_string e)
  in
  (* Warm up: locate, handshake. *)
  let* _ = call "" in
  Ok (call, server_cpu, fun () -> R.close client)

let rpc_setup ?config loop =
  let g, key = bench_key () in
  let* addr, close_server = rpc_server ?config loop key in
  let* call, _, close_client = rpc_client ?config loop g key addr in
  Ok
    ( call,
      fun () ->
        close_client ();
        close_server () )

(* The server in a process of its own, as the byte limit's receiver is: it
   writes its address on [ready] and serves until its end of [ctl] reads
   end of file (this process closed it, or ended), or 10 minutes passed. *)
type child = { pid : int; ctl : Unix.file_descr; addr : string }

let server_process key =
  let ready_r, ready_w = Unix.pipe ~cloexec:true () in
  let ctl_r, ctl_w = Unix.pipe ~cloexec:true () in
  match Unix.fork () with
  | 0 ->
      Unix.close ready_r;
      Unix.close ctl_w;
      let code =
        try
          R.keep_memory ();
          let loop = Loop.create () in
          match rpc_server loop key with
          | Error e ->
              ignore (Unix.write_substring ready_w ("!" ^ e ^ "\n") 0 (String.length e + 2));
              2
          | Ok (addr, close) ->
              let line = addr ^ "\n" in
              ignore (Unix.write_substring ready_w line 0 (String.length line));
              Unix.close ready_w;
              let stop = ref false in
              Loop.watch loop ctl_r (fun () -> stop := true);
              Loop.run loop ~timeout:(Time.of_sec 600.) ~until:(fun () -> !stop);
              close ();
              0
        with _ -> 2
      in
      Unix._exit code
  | pid -> (
      Unix.close ready_w;
      Unix.close ctl_r;
      let b = Bytes.create 256 in
      let rec read_line got =
        match Unix.select [ ready_r ] [] [] 30. with
        | [], _, _ -> got
        | _ ->
            let n = Unix.read ready_r b 0 (Bytes.length b) in
            let got = got ^ Bytes.sub_string b 0 n in
            if n = 0 || String.contains got '\n' then got else read_line got
      in
      let line = try read_line "" with Unix.Unix_error _ -> "" in
      Unix.close ready_r;
      let stop () =
        Unix.close ctl_w;
        let rec wait () =
          try ignore (Unix.waitpid [] pid) with Unix.Unix_error (Unix.EINTR, _, _) -> wait ()
        in
        wait ()
      in
      match String.index_opt line '\n' with
      | Some i when i > 0 && line.[0] <> '!' ->
          Ok ({ pid; ctl = ctl_w; addr = String.sub line 0 i }, stop)
      | _ ->
          (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
          stop ();
          Error
            ("the RPC server process did not start"
            ^ if line = "" then "" else ": " ^ String.trim line))

(* The byte limit: raw UDP in C, bench/peers/udp_raw.c's flow (sendmmsg,
   recvmmsg, a credit window, lossless), one sender process and one receiver
   process, 4000 datagrams of 60,000 bytes: the payload MB/s the receiver
   got. The program is the one dune builds beside this
   executable, else built here with gcc from the source. *)
let udp_raw_exe () =
  (* _build/default/bin/main.exe, or a test's executable further down. *)
  let rec up dir k =
    if k = 0 then []
    else Filename.concat dir "bench/peers/udp_raw" :: up (Filename.dirname dir) (k - 1)
  in
  let built =
    up (Filename.dirname Sys.executable_name) 4 @ [ "_build/default/bench/peers/udp_raw" ]
  in
  match List.find_opt Sys.file_exists built with
  | Some p -> Ok (p, ignore)
  | None ->
      let src = "bench/peers/udp_raw.c" in
      if not (Sys.file_exists src) then Error "no udp_raw (run from the repository root)"
      else
        let exe =
          Filename.concat (Filename.get_temp_dir_name ())
            (Printf.sprintf "consort-udp-raw-%d" (Unix.getpid ()))
        in
        let* _ = command_output [| "gcc"; "-O2"; "-o"; exe; src |] in
        Ok (exe, fun () -> try Sys.remove exe with Sys_error _ -> ())

(* The value of [key=value] in a result line. *)
let field key line =
  let k = " " ^ key ^ "=" in
  let n = String.length line and m = String.length k in
  let rec find i =
    if i + m > n then None else if String.sub line i m = k then Some i else find (i + 1)
  in
  match find 0 with
  | None -> None
  | Some i ->
      let j = i + String.length k in
      let e = try String.index_from line j ' ' with Not_found -> String.length line in
      Some (String.sub line j (e - j))

let flow_result line =
  let line = String.trim line in
  let num k = Option.bind (field k line) int_of_string_opt in
  if String.length line < 7 || String.sub line 0 7 <> "result " then
    Error ("unexpected output from udp_raw: " ^ line)
  else
    match
      (Option.bind (field "mb_per_s" line) float_of_string_opt, num "lost", num "late", num "count")
    with
    | Some mbps, Some 0, Some 0, Some c when c > 0 && Float.is_finite mbps && mbps > 0. -> Ok mbps
    | Some _, Some lost, Some late, Some _ when lost <> 0 || late <> 0 ->
        Error
          (Printf.sprintf
             "the raw byte-limit flow lost %d datagrams (%d members late): not a lossless limit"
             lost late)
    | _ -> Error ("unexpected output from udp_raw: " ^ line)

(* One run of the raw flow: its MB/s and the CPU its processes took per MB. *)
let byte_limit exe =
  let t0 = Unix.times () in
  let* out =
    command_output
      [|
        exe;
        "flow";
        "--count";
        "4000";
        "--size";
        "60000";
        "--senders";
        "1";
        "--members";
        "2";
        "--deadline";
        "60";
      |]
  in
  let t1 = Unix.times () in
  let* mbps = flow_result out in
  let cpu = t1.Unix.tms_cutime +. t1.tms_cstime -. t0.Unix.tms_cutime -. t0.tms_cstime in
  let received = Option.bind (field "m1_received" (String.trim out)) int_of_string_opt in
  match received with
  | Some r when r > 0 -> Ok (mbps, cpu *. 1000. /. (float_of_int r *. 60000. /. 1e6))
  | _ -> Error ("udp_raw: no m1_received in " ^ String.trim out)

let rpc_null loop call calls =
  let samples = Array.make calls 0. in
  let rec nulls i =
    if i = calls then Ok (median samples)
    else
      let t0 = Loop.now loop in
      let* _ = call "" in
      samples.(i) <- Time.to_us (Time.diff (Loop.now loop) t0);
      nulls (i + 1)
  in
  nulls 0

let mb = String.make 1_000_000 'x'

let rpc_bulk loop call transfers =
  let t0 = Loop.now loop and c0 = cpu () in
  let rec bulk i =
    if i = transfers then Ok ()
    else
      let* _ = call mb in
      bulk (i + 1)
  in
  let* () = bulk 0 in
  let secs = Time.to_sec (Time.diff (Loop.now loop) t0) and cpu_s = cpu () -. c0 in
  let bytes = float_of_int (transfers * 1_000_000) in
  Ok (bytes /. secs /. 1e6, bytes /. cpu_s /. 1e6)

let rounds_done : figures list ref = ref []

(* The round whose [key] is the median of the rounds': every figure printed
   beside another comes from one round. *)
let median_round key rs =
  let a = Array.of_list rs in
  Array.sort (fun x y -> compare (key x) (key y)) a;
  a.(Array.length a / 2)

let run ?(calls = 2000) ?(transfers = 50) ?(rounds = 3) ?(slices = 5) () =
  R.keep_memory ();
  let* udp_raw, remove_udp_raw = udp_raw_exe () in
  Fun.protect ~finally:remove_udp_raw @@ fun () ->
  (* The server process first, before this process opens anything. *)
  let g2, key2 = bench_key () in
  let* child, stop_child = server_process key2 in
  Fun.protect ~finally:stop_child @@ fun () ->
  let loop = Loop.create () in
  let* call, close = rpc_setup loop in
  let* call_lan, close_lan = rpc_setup ~config:lan_config loop in
  let* call_2p, server_cpu, close_2p = rpc_client loop g2 key2 child.addr in
  let* _ = call mb in
  let* _ = call_lan mb in
  let* _ = call_2p mb in
  let bytes = transfers * 1_000_000 in
  Consort_cli.with_progress "consort bench rpc" ~total:rounds @@ fun progress ->
  let rec go i acc =
    if i = rounds then Ok (List.rev acc)
    else
      let () = Consort_cli.step progress (i + 1) in
      let* raw_rtt_us = raw_rtt loop calls in
      let* null_us = rpc_null loop call calls in
      let* raw_mbps, raw_cpu_mbps = raw_oneway loop bytes in
      let* trans_mbps, trans_cpu_mbps = rpc_bulk loop call transfers in
      let* trans_lan_mbps, trans_lan_cpu_mbps = rpc_bulk loop call_lan transfers in
      let* _, raw_big_cpu_mbps =
        raw_oneway ~dgram:(Consort_cap.Rpc.default_config.loopback_fragment + 100) loop bytes
      in
      (* The byte limit and the trans with the server in its own process
         alternate in [slices] slices, so that both see the same other load;
         each is its bytes over the sum of its slices' times. *)
      let slices = max 1 slices in
      let per_slice = max 1 (transfers / slices) in
      let rec alternate k (lt, lcpu, tt, ccpu, scpu) =
        if k = 0 then Ok (lt, lcpu, tt, ccpu, scpu)
        else
          let* l_mbps, l_cpu_ms = byte_limit udp_raw in
          let* s0 = server_cpu () in
          let* t_mbps, t_cpu_mbps = rpc_bulk loop call_2p per_slice in
          let* s1 = server_cpu () in
          let s_ms = (s1 -. s0) *. 1000. /. float_of_int per_slice in
          alternate (k - 1)
            ( lt +. (1. /. l_mbps),
              lcpu +. l_cpu_ms,
              tt +. (1. /. t_mbps),
              ccpu +. (1000. /. t_cpu_mbps),
              scpu +. s_ms )
      in
      let* lt, lcpu, tt, ccpu, scpu = alternate slices (0., 0., 0., 0., 0.) in
      let n = float_of_int slices in
      let byte_limit_mbps = n /. lt and byte_limit_cpu_ms = lcpu /. n in
      let trans_2p_mbps = n /. tt in
      let trans_2p_client_cpu_ms = ccpu /. n and trans_2p_server_cpu_ms = scpu /. n in
      let gcm_mbps = gcm_seal_open bytes in
      let gcm_mirage_mbps = gcm_mirage (bytes / 2) in
      let chacha_mbps = chacha (bytes / 4) in
      let chacha_evp_mbps = chacha_evp (bytes / 2) in
      let chacha_1k_mbps = chacha ~size:1024 (bytes / 40) in
      let chacha_evp_1k_mbps = chacha_evp ~size:1024 (bytes / 20) in
      go (i + 1)
        ({
           null_us;
           raw_rtt_us;
           trans_mbps;
           trans_cpu_mbps;
           trans_lan_mbps;
           trans_lan_cpu_mbps;
           raw_mbps;
           raw_cpu_mbps;
           raw_big_cpu_mbps;
           gcm_mbps;
           gcm_mirage_mbps;
           chacha_mbps;
           chacha_evp_mbps;
           chacha_1k_mbps;
           chacha_evp_1k_mbps;
           trans_2p_mbps;
           trans_2p_client_cpu_ms;
           trans_2p_server_cpu_ms;
           byte_limit_mbps;
           byte_limit_cpu_ms;
         }
        :: acc)
  in
  let r = go 0 [] in
  close ();
  close_lan ();
  close_2p ();
  let* rs = r in
  rounds_done := rs;
  Ok (median_round (fun r -> r.trans_mbps /. r.raw_mbps) rs)

(* The gRPC peer: a Go program built here from the module proxy. *)
type grpc = { plain_null_us : float; plain_mbps : float; tls_null_us : float; tls_mbps : float }

let find_go () =
  let dirs =
    String.split_on_char ':' (Option.value ~default:"" (Sys.getenv_opt "PATH"))
    @ [ "/usr/local/go/bin"; "/usr/lib/go/bin" ]
  in
  List.find_map
    (fun d ->
      let p = Filename.concat d "go" in
      if d <> "" && Sys.file_exists p then Some p else None)
    dirs

let grpc_peer ~calls ~transfers =
  let src = Filename.concat (Sys.getcwd ()) "bench/cap/grpc" in
  match find_go () with
  | None -> Error "go not found"
  | Some _ when not (Sys.file_exists (Filename.concat src "main.go")) ->
      Error ("no " ^ src ^ " (run from the repository root)")
  | Some go ->
      let exe =
        Filename.concat (Filename.get_temp_dir_name ())
          (Printf.sprintf "consort-grpc-bench-%d" (Unix.getpid ()))
      in
      Fun.protect ~finally:(fun () -> try Sys.remove exe with Sys_error _ -> ()) @@ fun () ->
      Fmt.pr "  (building the gRPC peer from the Go module proxy...)@.";
      let* _ =
        command_output
          [|
            "/bin/sh";
            "-c";
            Printf.sprintf "cd %s && %s build -mod=readonly -o %s . 2>&1" (Filename.quote src)
              (Filename.quote go) (Filename.quote exe);
          |]
      in
      (* One thread running Go code, as our client and server share one
         event loop; then as Go runs by default, on every core. *)
      let once procs =
        let env =
          match procs with
          | Some p -> [| "/usr/bin/env"; "GOMAXPROCS=" ^ string_of_int p |]
          | None -> [||]
        in
        let* out =
          command_output (Array.append env [| exe; string_of_int calls; string_of_int transfers |])
        in
        match
          Scanf.sscanf (String.trim out)
            "{\"plain\":{\"null_us\":%f,\"trans_mbps\":%f},\"tls\":{\"null_us\":%f,\"trans_mbps\":%f}}"
            (fun a b c d -> { plain_null_us = a; plain_mbps = b; tls_null_us = c; tls_mbps = d })
        with
        | g -> Ok g
        | exception _ -> Error ("unexpected output from the gRPC peer: " ^ out)
      in
      let* one = once (Some 1) in
      let* all = once None in
      Ok (one, all)

let print_grpc r = function
  | Error e -> Fmt.pr "  gRPC peer: not run (%s)@." e
  | Ok (one, all) ->
      let show what g =
        Fmt.pr "  gRPC (Go, unary, over TCP on 127.0.0.1), %s:@." what;
        Fmt.pr "    null call  plain %6.1f us   TLS 1.3 %6.1f us   ours / gRPC-TLS %.2f@."
          g.plain_null_us g.tls_null_us (r.null_us /. g.tls_null_us);
        Fmt.pr "    1 MB call  plain %6.1f MB/s TLS 1.3 %6.1f MB/s ours / gRPC-TLS %.2f@."
          g.plain_mbps g.tls_mbps (r.trans_mbps /. g.tls_mbps)
      in
      show "same placement (GOMAXPROCS=1: one thread, as our one event loop)" one;
      show "as Go runs by default (every core)" all

(* The ceiling a transfer that seals and opens every byte in this one
   process can reach, beside raw UDP of [dgram]-byte datagrams: the UDP
   work and the cipher's add as times (both per second of CPU). *)
let ceiling ~udp ~aead = 1. /. ((1. /. udp) +. (1. /. aead))

let load () =
  try
    let ic = open_in "/proc/loadavg" in
    Fun.protect
      ~finally:(fun () -> close_in ic)
      (fun () -> List.hd (String.split_on_char ' ' (input_line ic)))
  with _ -> "?"

let print r =
  let rs = !rounds_done in
  Fmt.pr "Capability RPC over kernel UDP, client and server in one process on 127.0.0.1 (load %s)@."
    (load ());
  List.iteri
    (fun i x ->
      Fmt.pr
        "  round %d: null %.1f us, raw rtt %.1f us; 1 MB trans %.1f MB/s (8 KB fragments %.1f), \
         raw 8 KB one-way %.1f MB/s, ratio %.2f (per CPU %.2f); server in its own process %.1f \
         MB/s, byte limit %.1f MB/s, ratio %.2f@."
        (i + 1) x.null_us x.raw_rtt_us x.trans_mbps x.trans_lan_mbps x.raw_mbps
        (x.trans_mbps /. x.raw_mbps)
        (x.trans_cpu_mbps /. x.raw_cpu_mbps)
        x.trans_2p_mbps x.byte_limit_mbps
        (x.trans_2p_mbps /. x.byte_limit_mbps))
    rs;
  let n = median_round (fun r -> r.null_us -. r.raw_rtt_us) rs in
  Fmt.pr "  the median round of each comparison, both sides from that round:@.";
  Fmt.pr
    "  null RPC (encrypted, at most once) %8.1f us   raw UDP round trip %8.1f us   +%.1f us, ratio \
     %.2f@."
    n.null_us n.raw_rtt_us (n.null_us -. n.raw_rtt_us) (n.null_us /. n.raw_rtt_us);
  Fmt.pr
    "  1 MB trans                         %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@."
    r.trans_mbps r.raw_mbps (r.trans_mbps /. r.raw_mbps);
  let l = median_round (fun r -> r.trans_lan_mbps /. r.raw_mbps) rs in
  Fmt.pr
    "  1 MB trans, 8 KB fragments (LAN)   %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@."
    l.trans_lan_mbps l.raw_mbps (l.trans_lan_mbps /. l.raw_mbps);
  let b = median_round (fun r -> r.trans_2p_mbps /. r.byte_limit_mbps) rs in
  Fmt.pr
    "  beside the byte limit: raw UDP in C, 60,000-byte datagrams, sendmmsg/recvmmsg, credit \
     window, lossless, one sender process and one receiver process (bench/peers/udp_raw flow):@.";
  Fmt.pr "  1 MB trans, server in its own process %8.1f MB/s byte limit %6.1f MB/s  ratio %.2f@."
    b.trans_2p_mbps b.byte_limit_mbps
    (b.trans_2p_mbps /. b.byte_limit_mbps);
  Fmt.pr
    "    CPU per MB (same round): the trans %.2f ms (client %.2f, server %.2f), the raw flow %.2f \
     ms (both processes); ratio %.2f@."
    (b.trans_2p_client_cpu_ms +. b.trans_2p_server_cpu_ms)
    b.trans_2p_client_cpu_ms b.trans_2p_server_cpu_ms b.byte_limit_cpu_ms
    (b.byte_limit_cpu_ms /. (b.trans_2p_client_cpu_ms +. b.trans_2p_server_cpu_ms));
  let b1 = median_round (fun r -> r.trans_mbps /. r.byte_limit_mbps) rs in
  Fmt.pr "  1 MB trans, client and server in one %8.1f MB/s byte limit %6.1f MB/s  ratio %.2f@."
    b1.trans_mbps b1.byte_limit_mbps
    (b1.trans_mbps /. b1.byte_limit_mbps);
  let c = median_round (fun r -> r.trans_cpu_mbps /. r.raw_cpu_mbps) rs in
  Fmt.pr "  per second of CPU (what other load on the machine does not change):@.";
  Fmt.pr
    "  1 MB trans                         %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@."
    c.trans_cpu_mbps c.raw_cpu_mbps
    (c.trans_cpu_mbps /. c.raw_cpu_mbps);
  Fmt.pr
    "  1 MB trans, 8 KB fragments (LAN)   %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@."
    c.trans_lan_cpu_mbps c.raw_cpu_mbps
    (c.trans_lan_cpu_mbps /. c.raw_cpu_mbps);
  (* What bounds the ratio, from the same round. *)
  let frag = Consort_cap.Rpc.default_config.loopback_fragment in
  Fmt.pr
    "  what bounds it (same round, per second of CPU; every byte is sealed and opened in this \
     process):@.";
  Fmt.pr
    "    AEAD alone, seal + open of %d KB: AES-256-GCM from OpenSSL (used) %.1f MB/s, from \
     mirage-crypto %.1f MB/s@."
    (frag / 1024) c.gcm_mbps c.gcm_mirage_mbps;
  Fmt.pr "      (OpenSSL / mirage-crypto %.2f)@." (c.gcm_mbps /. c.gcm_mirage_mbps);
  Fmt.pr
    "    ChaCha20-Poly1305 (the group seal's), 60 KB: OpenSSL (used) %.1f MB/s, mirage-crypto %.1f \
     MB/s (%.2f);@."
    c.chacha_evp_mbps c.chacha_mbps
    (c.chacha_evp_mbps /. c.chacha_mbps);
  Fmt.pr "      1 KB: OpenSSL %.1f MB/s, mirage-crypto %.1f MB/s (%.2f)@." c.chacha_evp_1k_mbps
    c.chacha_1k_mbps
    (c.chacha_evp_1k_mbps /. c.chacha_1k_mbps);
  Fmt.pr
    "    the cipher alone, with UDP free: ratio %.2f; raw UDP of %d KB datagrams (%.1f MB/s) plus \
     the cipher and@."
    (c.gcm_mbps /. c.raw_cpu_mbps) (frag / 1024) c.raw_big_cpu_mbps;
  let ceil = ceiling ~udp:c.raw_big_cpu_mbps ~aead:c.gcm_mbps in
  Fmt.pr "    nothing else: %.1f MB/s, ratio %.2f; the 1 MB trans reaches %.0f%% of that ceiling@."
    ceil (ceil /. c.raw_cpu_mbps)
    (100. *. c.trans_cpu_mbps /. ceil)

let cmd =
  let open Cmdliner in
  let calls =
    Arg.(
      value & opt Consort_cli.positive_int 2000
      & info [ "calls" ] ~docv:"N" ~doc:"Null calls (and raw round trips) to time.")
  in
  let transfers =
    Arg.(
      value & opt Consort_cli.positive_int 50
      & info [ "transfers" ] ~docv:"N" ~doc:"1 MB transactions to time.")
  in
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "rounds" ] ~docv:"N"
          ~doc:"Rounds, each timing every figure and its baseline; the median round is shown.")
  in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  let no_grpc =
    Arg.(value & flag & info [ "no-grpc" ] ~doc:"Do not build and run the gRPC peer.")
  in
  let save =
    Arg.(
      value
      & opt (some string) None
      & info [ "save" ] ~docv:"DIR" ~doc:"Write the figures to $(i,DIR)/rpc-YYYYMMDD-HHMMSS.json.")
  in
  let go calls transfers rounds json no_grpc save =
    if calls < 1 || transfers < 1 || rounds < 1 then (
      Fmt.epr "consort bench rpc: --calls, --transfers and --rounds must be positive@.";
      2)
    else
      match Option.bind save Consort_cli.unwritable_dir with
      | Some m ->
          Fmt.epr "consort bench rpc: --save %s: %s@." (Option.get save) m;
          2
      | None -> (
          match run ~calls ~transfers ~rounds () with
          | Error e ->
              Fmt.epr "consort bench rpc: %s@." e;
              1
          | Ok r -> (
              print r;
              if not no_grpc then print_grpc r (grpc_peer ~calls ~transfers);
              let b = median_round (fun r -> r.trans_2p_mbps /. r.byte_limit_mbps) !rounds_done in
              let b1 = median_round (fun r -> r.trans_mbps /. r.byte_limit_mbps) !rounds_done in
              let line =
                Printf.sprintf
                  "{\"bench\":\"rpc\",\"load\":\"%s\",\"null_us\":%.1f,\"raw_rtt_us\":%.1f,\"trans_mbps\":%.1f,\"trans_8k_mbps\":%.1f,\"raw_mbps\":%.1f,\"ratio\":%.3f,\"trans_cpu_mbps\":%.1f,\"raw_cpu_mbps\":%.1f,\"raw_60k_cpu_mbps\":%.1f,\"gcm_mbps\":%.1f,\"gcm_mirage_mbps\":%.1f,\"chacha_mbps\":%.1f,\"chacha_evp_mbps\":%.1f,\"chacha_1k_mbps\":%.1f,\"chacha_evp_1k_mbps\":%.1f,\"trans_2p_mbps\":%.1f,\"trans_2p_client_cpu_ms\":%.3f,\"trans_2p_server_cpu_ms\":%.3f,\"byte_limit_mbps\":%.1f,\"byte_limit_cpu_ms\":%.3f,\"byte_limit_ratio\":%.3f,\"byte_limit_ratio_one_process\":%.3f,\"rounds\":[%s]}"
                  (load ()) r.null_us r.raw_rtt_us r.trans_mbps r.trans_lan_mbps r.raw_mbps
                  (r.trans_mbps /. r.raw_mbps) r.trans_cpu_mbps r.raw_cpu_mbps r.raw_big_cpu_mbps
                  r.gcm_mbps r.gcm_mirage_mbps r.chacha_mbps r.chacha_evp_mbps r.chacha_1k_mbps
                  r.chacha_evp_1k_mbps b.trans_2p_mbps b.trans_2p_client_cpu_ms
                  b.trans_2p_server_cpu_ms b.byte_limit_mbps b.byte_limit_cpu_ms
                  (b.trans_2p_mbps /. b.byte_limit_mbps)
                  (b1.trans_mbps /. b1.byte_limit_mbps)
                  (String.concat ","
                     (List.map
                        (fun x ->
                          Printf.sprintf
                            "{\"trans_mbps\":%.1f,\"raw_mbps\":%.1f,\"trans_2p_mbps\":%.1f,\"byte_limit_mbps\":%.1f,\"trans_2p_client_cpu_ms\":%.3f,\"trans_2p_server_cpu_ms\":%.3f,\"byte_limit_cpu_ms\":%.3f}"
                            x.trans_mbps x.raw_mbps x.trans_2p_mbps x.byte_limit_mbps
                            x.trans_2p_client_cpu_ms x.trans_2p_server_cpu_ms x.byte_limit_cpu_ms)
                        !rounds_done))
              in
              if json then print_endline line;
              match save with
              | None -> 0
              | Some d -> (
                  match Consort_cli.save_result ~dir:d ~name:"rpc" line with
                  | Ok f ->
                      Fmt.pr "kept in %s@." f;
                      0
                  | Error m ->
                      Fmt.epr "consort bench rpc: --save %s: %s@." d m;
                      2)))
  in
  Cmd.v
    (Consort_cli.info ~path:"bench rpc" "rpc"
       ~doc:"Null RPC latency and 1 MB trans throughput beside raw UDP, with ratios.")
    Term.(const go $ calls $ transfers $ rounds $ json $ no_grpc $ save)
