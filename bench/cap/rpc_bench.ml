open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Consort_cap.Rpc_udp

type figures = {
  null_us : float;
  raw_rtt_us : float;
  trans_mbps : float;
  trans_big_mbps : float;
  raw_mbps : float;
  gcm_mbps : float;  (* AES-256-GCM seal then open of 8 KB messages, in this process *)
  trans_cpu_mbps : float;  (* 1 MB trans, bytes per second of this process's CPU time *)
  raw_cpu_mbps : float;  (* raw UDP one-way, the same *)
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
  let* addr0 = udp_err (Result.map_error (fun e -> `Bad_address e) (Udp.address_of_string local_addr)) in
  let echo_ref = ref None in
  let* echo =
    udp_err
      (Udp.open_ loop addr0 (fun c ->
           echo_ref := Some c;
           { Udp.recv = (fun ~src iov -> let m = Msg.of_iovec iov in ignore (Udp.send c ~dst:src m); Msg.release m); closed = ignore }))
  in
  let got = ref 0 in
  let* pinger = udp_err (Udp.open_ loop addr0 (fun _ -> { Udp.recv = (fun ~src:_ iov -> Iovec.release iov; incr got); closed = ignore })) in
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

(* Raw UDP one-way: 8 KB datagrams from one socket to another, as fast as
   the receiver takes them: bursts of [burst] datagrams (well under the
   socket buffers), each followed by running the loop until the receiver
   has them all (or 20 ms have passed: a datagram lost on loopback is not
   waited for). The rate is the bytes received over the time taken. *)
let raw_oneway loop total =
  let* addr0 = udp_err (Result.map_error (fun e -> `Bad_address e) (Udp.address_of_string local_addr)) in
  let received = ref 0 in
  let* sink = udp_err (Udp.open_ loop addr0 (fun _ -> { Udp.recv = (fun ~src:_ iov -> received := !received + Iovec.length iov; Iovec.release iov); closed = ignore })) in
  let* src = udp_err (Udp.open_ loop addr0 (fun _ -> { Udp.recv = (fun ~src:_ iov -> Iovec.release iov); closed = ignore })) in
  let dst = Udp.local sink in
  let dgram = 8192 in
  let payload = Msg.of_string Pool.default (String.make dgram 'x') in
  let burst = 64 in
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
  if !received < total / 2 then Error (Printf.sprintf "raw UDP one-way: only %d of %d bytes arrived" !received total)
  else Ok (float_of_int !received /. elapsed /. 1e6, float_of_int !received /. cpu_s /. 1e6)

(* The cipher alone, per second of CPU: every byte of a transfer is sealed
   by the sender and opened by the receiver, both in this process. *)
let gcm ~open_ total =
  let module C = Mirage_crypto.Cipher_block.AES.GCM in
  let key = C.of_secret (Cstruct.of_string (String.make 32 'k')) in
  let msg = Cstruct.of_string (String.make 8192 'x') in
  let n = max 1 (total / 8192) in
  let t0 = cpu () in
  for i = 1 to n do
    let nonce = Cstruct.create 12 in
    Cstruct.BE.set_uint64 nonce 4 (Int64.of_int i);
    let sealed = C.authenticate_encrypt ~key ~nonce msg in
    if open_ then match C.authenticate_decrypt ~key ~nonce sealed with Some _ -> () | None -> failwith "AES-GCM round trip failed"
  done;
  float_of_int (n * 8192) /. (cpu () -. t0) /. 1e6

let gcm_seal_open = gcm ~open_:true
let gcm_seal = gcm ~open_:false

let big_config = { Consort_cap.Rpc.default_config with fragment = 61440; window = 16 }

let rpc_setup ?config loop =
  let g = Consort_cap.Crypto.deterministic "bench" in
  let key = Consort_cap.Port.Key.generate ~g () in
  let* server = R.open_node ?config ~multicast:None ~bind:local_addr loop in
  let srv = R.serve server key in
  R.listen srv (fun r -> R.putrep r (Consort_cap.Header.reply `Ok) "");
  let addr = Udp.address_to_string (Udp.local (R.connection server)) in
  let* client = R.open_node ?config ~multicast:None ~locate:addr ~bind:local_addr loop in
  let secret = Consort_cap.Cap.Secret.generate ~g () in
  let cap = Consort_cap.Cap.owner (Consort_cap.Port.Key.port key) ~obj:1 secret in
  let hdr = Consort_cap.Header.request cap 1 in
  let call data = Result.map_error Consort_cap.Rpc_error.to_string (R.Sync.trans client hdr data) in
  (* Warm up: locate, handshake. *)
  let* _ = call "" in
  Ok (call, fun () -> R.close client; R.close server)

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
  let rec bulk i = if i = transfers then Ok () else let* _ = call mb in bulk (i + 1) in
  let* () = bulk 0 in
  let secs = Time.to_sec (Time.diff (Loop.now loop) t0) and cpu_s = cpu () -. c0 in
  let bytes = float_of_int (transfers * 1_000_000) in
  Ok (bytes /. secs /. 1e6, bytes /. cpu_s /. 1e6)

type round = figures

let rounds_done : round list ref = ref []

let run ?(calls = 2000) ?(transfers = 50) ?(rounds = 3) () =
  let loop = Loop.create () in
  let* call, close = rpc_setup loop in
  let* call_big, close_big = rpc_setup ~config:big_config loop in
  let* _ = call mb in
  let* _ = call_big mb in
  let rec go i acc =
    if i = rounds then Ok (List.rev acc)
    else
      let* raw_rtt_us = raw_rtt loop calls in
      let* null_us = rpc_null loop call calls in
      let* trans_mbps, trans_cpu_mbps = rpc_bulk loop call transfers in
      let* trans_big_mbps, _ = rpc_bulk loop call_big transfers in
      let* raw_mbps, raw_cpu_mbps = raw_oneway loop (transfers * 1_000_000) in
      let gcm_mbps = gcm_seal_open (transfers * 1_000_000) in
      go (i + 1) ({ null_us; raw_rtt_us; trans_mbps; trans_big_mbps; raw_mbps; gcm_mbps; trans_cpu_mbps; raw_cpu_mbps } :: acc)
  in
  let r = go 0 [] in
  close ();
  close_big ();
  let* rs = r in
  rounds_done := rs;
  let best f cmp = List.fold_left (fun a r -> if cmp (f r) a then f r else a) (f (List.hd rs)) rs in
  Ok
    {
      null_us = best (fun r -> r.null_us) ( < );
      raw_rtt_us = best (fun r -> r.raw_rtt_us) ( < );
      trans_mbps = best (fun r -> r.trans_mbps) ( > );
      trans_big_mbps = best (fun r -> r.trans_big_mbps) ( > );
      raw_mbps = best (fun r -> r.raw_mbps) ( > );
      gcm_mbps = best (fun r -> r.gcm_mbps) ( > );
      trans_cpu_mbps = best (fun r -> r.trans_cpu_mbps) ( > );
      raw_cpu_mbps = best (fun r -> r.raw_cpu_mbps) ( > );
    }

(* The gRPC peer: a Go program built here from the module proxy. *)
type grpc = { plain_null_us : float; plain_mbps : float; tls_null_us : float; tls_mbps : float }

let command_output argv =
  let ic = Unix.open_process_args_in argv.(0) argv in
  let b = Buffer.create 256 in
  (try
     while true do
       Buffer.add_channel b ic 1
     done
   with End_of_file -> ());
  let out = Buffer.contents b in
  match Unix.close_process_in ic with Unix.WEXITED 0 -> Ok out | _ -> Error (String.concat " " (Array.to_list argv) ^ " failed")

let find_go () =
  let dirs = String.split_on_char ':' (Option.value ~default:"" (Sys.getenv_opt "PATH")) @ [ "/usr/local/go/bin"; "/usr/lib/go/bin" ] in
  List.find_map (fun d -> let p = Filename.concat d "go" in if d <> "" && Sys.file_exists p then Some p else None) dirs

let grpc_peer ~calls ~transfers =
  let src = Filename.concat (Sys.getcwd ()) "bench/cap/grpc" in
  match find_go () with
  | None -> Error "go not found"
  | Some _ when not (Sys.file_exists (Filename.concat src "main.go")) -> Error ("no " ^ src ^ " (run from the repository root)")
  | Some go -> (
      let exe = Filename.concat (Filename.get_temp_dir_name ()) (Printf.sprintf "consort-grpc-bench-%d" (Unix.getpid ())) in
      Fun.protect ~finally:(fun () -> try Sys.remove exe with Sys_error _ -> ()) @@ fun () ->
      Fmt.pr "  (building the gRPC peer from the Go module proxy...)@.";
      let* _ = command_output [| "/bin/sh"; "-c"; Printf.sprintf "cd %s && %s build -mod=readonly -o %s . 2>&1" (Filename.quote src) (Filename.quote go) (Filename.quote exe) |] in
      (* One thread running Go code, as our client and server share one
         event loop; then as Go runs by default, on every core. *)
      let once procs =
        let env = match procs with Some p -> [| "/usr/bin/env"; "GOMAXPROCS=" ^ string_of_int p |] | None -> [||] in
        let* out = command_output (Array.append env [| exe; string_of_int calls; string_of_int transfers |]) in
        match
          Scanf.sscanf (String.trim out) "{\"plain\":{\"null_us\":%f,\"trans_mbps\":%f},\"tls\":{\"null_us\":%f,\"trans_mbps\":%f}}"
            (fun a b c d -> { plain_null_us = a; plain_mbps = b; tls_null_us = c; tls_mbps = d })
        with
        | g -> Ok g
        | exception _ -> Error ("unexpected output from the gRPC peer: " ^ out)
      in
      let* one = once (Some 1) in
      let* all = once None in
      Ok (one, all))

let print_grpc r = function
  | Error e -> Fmt.pr "  gRPC peer: not run (%s)@." e
  | Ok (one, all) ->
      let show what g =
        Fmt.pr "  gRPC (Go, unary, over TCP on 127.0.0.1), %s:@." what;
        Fmt.pr "    null call  plain %6.1f us   TLS 1.3 %6.1f us   ours / gRPC-TLS %.2f@." g.plain_null_us g.tls_null_us
          (r.null_us /. g.tls_null_us);
        Fmt.pr "    1 MB call  plain %6.1f MB/s TLS 1.3 %6.1f MB/s ours / gRPC-TLS %.2f@." g.plain_mbps g.tls_mbps
          (r.trans_mbps /. g.tls_mbps)
      in
      show "same placement (GOMAXPROCS=1: one thread, as our one event loop)" one;
      show "as Go runs by default (every core)" all

let print r =
  Fmt.pr "Capability RPC over kernel UDP, client and server in one process on 127.0.0.1@.";
  List.iteri
    (fun i x ->
      Fmt.pr
        "  round %d: null %.1f us, raw rtt %.1f us; 1 MB trans %.1f MB/s (60 KB fragments %.1f), raw one-way %.1f MB/s, AES-GCM seal+open %.1f MB/s@."
        (i + 1) x.null_us x.raw_rtt_us x.trans_mbps x.trans_big_mbps x.raw_mbps x.gcm_mbps)
    !rounds_done;
  Fmt.pr "  best of the rounds (lowest latency, highest throughput), each beside its baseline:@.";
  Fmt.pr "  null RPC (encrypted, at most once) %8.1f us   raw UDP round trip %8.1f us   +%.1f us, ratio %.2f@." r.null_us
    r.raw_rtt_us (r.null_us -. r.raw_rtt_us) (r.null_us /. r.raw_rtt_us);
  Fmt.pr "  1 MB trans                         %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@." r.trans_mbps
    r.raw_mbps (r.trans_mbps /. r.raw_mbps);
  Fmt.pr "  1 MB trans, 60 KB fragments        %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@." r.trans_big_mbps
    r.raw_mbps (r.trans_big_mbps /. r.raw_mbps);
  Fmt.pr "  per second of CPU (what other load on the machine does not change):@.";
  Fmt.pr "  1 MB trans                         %8.1f MB/s raw UDP 8 KB one-way %6.1f MB/s  ratio %.2f@." r.trans_cpu_mbps
    r.raw_cpu_mbps (r.trans_cpu_mbps /. r.raw_cpu_mbps);
  (* One process does the UDP work and the cipher's: the rates add as times
     (all three per second of CPU). *)
  let ceiling = 1. /. ((1. /. r.raw_cpu_mbps) +. (1. /. r.gcm_mbps)) in
  Fmt.pr "  what bounds it: AES-256-GCM seal + open of 8 KB alone %.1f MB/s; raw UDP plus that cipher work and nothing@."
    r.gcm_mbps;
  Fmt.pr "  else: %.1f MB/s, ratio %.2f; the 8 KB trans reaches %.0f%% of that ceiling@." ceiling
    (ceiling /. r.raw_cpu_mbps) (100. *. r.trans_cpu_mbps /. ceiling)

let cmd =
  let open Cmdliner in
  let calls = Arg.(value & opt Consort_cli.positive_int 2000 & info [ "calls" ] ~docv:"N" ~doc:"Null calls (and raw round trips) to time.") in
  let transfers = Arg.(value & opt Consort_cli.positive_int 50 & info [ "transfers" ] ~docv:"N" ~doc:"1 MB transactions to time.") in
  let rounds = Arg.(value & opt Consort_cli.positive_int 3 & info [ "rounds" ] ~docv:"N" ~doc:"Rounds, each timing every figure.") in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  let no_grpc = Arg.(value & flag & info [ "no-grpc" ] ~doc:"Do not build and run the gRPC peer.") in
  let go calls transfers rounds json no_grpc =
    if calls < 1 || transfers < 1 || rounds < 1 then (Fmt.epr "consort bench rpc: --calls, --transfers and --rounds must be positive@."; 2)
    else
      match run ~calls ~transfers ~rounds () with
      | Error e -> Fmt.epr "consort bench rpc: %s@." e; 1
      | Ok r ->
          print r;
          if not no_grpc then print_grpc r (grpc_peer ~calls ~transfers);
          if json then
            Fmt.pr "{\"bench\":\"rpc\",\"null_us\":%.1f,\"raw_rtt_us\":%.1f,\"trans_mbps\":%.1f,\"trans_60k_mbps\":%.1f,\"raw_mbps\":%.1f,\"gcm_mbps\":%.1f,\"trans_cpu_mbps\":%.1f,\"raw_cpu_mbps\":%.1f}@."
              r.null_us r.raw_rtt_us r.trans_mbps r.trans_big_mbps r.raw_mbps r.gcm_mbps r.trans_cpu_mbps r.raw_cpu_mbps;
          0
  in
  Cmd.v
    (Consort_cli.info ~path:"bench rpc" "rpc" ~doc:"Null RPC latency and 1 MB trans throughput beside raw UDP, with ratios.")
    Term.(const go $ calls $ transfers $ rounds $ json $ no_grpc)
