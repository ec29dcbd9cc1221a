(* Each system runs the same workload: [clients] client processes, each
   one operation at a time for [seconds]: half puts of 100-byte values,
   half linearizable gets, on 1000 keys. Data directories are on the same
   file system for every system, and every system syncs its log before it
   answers. *)

open Cmdliner

let ( / ) = Filename.concat

let rec rm_rf p =
  match (Unix.lstat p).Unix.st_kind with
  | Unix.S_DIR ->
      Array.iter (fun n -> rm_rf (Filename.concat p n)) (Sys.readdir p);
      Unix.rmdir p
  | _ -> Unix.unlink p
  | exception Unix.Unix_error (Unix.ENOENT, _, _) -> ()

let free_port ty =
  let s = Unix.socket Unix.PF_INET ty 0 in
  Unix.setsockopt s Unix.SO_REUSEADDR true;
  Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
  let p = match Unix.getsockname s with Unix.ADDR_INET (_, p) -> p | _ -> assert false in
  Unix.close s;
  p

let self () = Consort_bench.Exe.consort ()

let spawn ?(out = "/dev/null") prog args =
  let o = Unix.openfile out [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let i = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  let pid = Unix.create_process prog (Array.of_list (prog :: args)) i o o in
  Unix.close o;
  Unix.close i;
  pid

let stop pids =
  List.iter (fun p -> try Unix.kill p Sys.sigterm with Unix.Unix_error _ -> ()) pids;
  List.iter (fun p -> try ignore (Unix.waitpid [] p) with Unix.Unix_error _ -> ()) pids

type result = { name : string; ops : int; seconds : float; p50 : float; p99 : float; failed : int }

let percentile sorted q =
  let n = Array.length sorted in
  if n = 0 then nan else sorted.(min (n - 1) (int_of_float (q *. float n)))

(* [op i] performs operation [i] (true: done); run by [clients] processes,
   each writing its latencies (microseconds) to a file. *)
let load ~name ~clients ~seconds ~dir (connect : int -> int -> bool) =
  let until = Unix.gettimeofday () +. seconds in
  let files = List.init clients (fun c -> dir / Printf.sprintf "%s.lat%d" name c) in
  let t0 = Unix.gettimeofday () in
  let pids =
    List.mapi
      (fun c file ->
        match Unix.fork () with
        | 0 ->
            let code =
              try
                let op = connect c in
                let oc = open_out file in
                let i = ref 0 and failed = ref 0 in
                while Unix.gettimeofday () < until do
                  let s = Unix.gettimeofday () in
                  if op !i then
                    Printf.fprintf oc "%d\n" (int_of_float ((Unix.gettimeofday () -. s) *. 1e6))
                  else incr failed;
                  incr i
                done;
                Printf.fprintf oc "failed %d\n" !failed;
                close_out oc;
                0
              with e ->
                prerr_endline (name ^ ": " ^ Printexc.to_string e);
                1
            in
            Unix._exit code
        | pid -> pid)
      files
  in
  List.iter (fun p -> ignore (Unix.waitpid [] p)) pids;
  let elapsed = Unix.gettimeofday () -. t0 in
  let lats = ref [] and failed = ref 0 in
  List.iter
    (fun f ->
      match open_in f with
      | ic ->
          (try
             while true do
               let l = input_line ic in
               match String.split_on_char ' ' l with
               | [ "failed"; n ] -> failed := !failed + int_of_string n
               | [ x ] -> lats := float_of_string x :: !lats
               | _ -> ()
             done
           with End_of_file -> ());
          close_in ic
      | exception Sys_error _ -> incr failed)
    files;
  let a = Array.of_list !lats in
  Array.sort compare a;
  {
    name;
    ops = Array.length a;
    seconds = elapsed;
    p50 = percentile a 0.5 /. 1000.;
    p99 = percentile a 0.99 /. 1000.;
    failed = !failed;
  }

let key i c = Printf.sprintf "key%04d" (((i * 7919) + (c * 104729)) mod 1000)
let value = String.make 100 'v'

(* Consort: replicas as processes, clients over TCP. *)
let consort_cluster ?(params = []) ~dir ~n () =
  let binds = List.init n (fun _ -> Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_DGRAM)) in
  let listens = List.init n (fun _ -> Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_STREAM)) in
  let pids =
    List.mapi
      (fun i (b, l) ->
        spawn
          ~out:(dir / Printf.sprintf "kv%d-%d.log" n i)
          (self ())
          ([
             "kv";
             "serve";
             "--new";
             "--group";
             Printf.sprintf "bench%d" n;
             "--data";
             dir / Printf.sprintf "kv%d-%d" n i;
             "--bind";
             b;
             "--peers";
             String.concat "," binds;
             "--listen";
             l;
           ]
          @ if params = [] then [] else [ "--params"; String.concat "," params ]))
      (List.combine binds listens)
  in
  (pids, listens)

(* Every replica answers (one that could not start, its port taken say,
   would make the figures those of fewer replicas). *)
let consort_ready listens =
  let module K = Consort_kv in
  let t0 = Unix.gettimeofday () in
  List.for_all
    (fun l ->
      let c = Result.get_ok (K.Client.create ~timeout:1. [ l ]) in
      let rec go () =
        match K.Client.call c (K.Op.Put ("ready", "1")) with
        | K.Wire.Done K.Op.Ok ->
            K.Client.close c;
            true
        | _ ->
            if Unix.gettimeofday () -. t0 > 20. then (
              K.Client.close c;
              false)
            else (
              Unix.sleepf 0.2;
              go ())
      in
      go ())
    listens

let consort_op listens c =
  let module K = Consort_kv in
  (* Each client starts at another replica. *)
  let n = List.length listens in
  let l = List.init n (fun i -> List.nth listens ((c + i) mod n)) in
  let cl = Result.get_ok (K.Client.create ~timeout:10. l) in
  fun i ->
    let op = if i land 1 = 0 then K.Op.Put (key i c, value) else K.Op.Get (key i c) in
    match K.Client.call cl op with
    | K.Wire.Done (K.Op.Ok | K.Op.Value _ | K.Op.Not_found) -> true
    | _ -> false

(* etcd: three members on loopback, its JSON gateway over HTTP/1.1 with
   keep-alive (linearizable reads are etcd's default). *)
let find_etcd () =
  List.find_opt Sys.file_exists [ "/usr/bin/etcd"; "/usr/local/bin/etcd"; "/usr/sbin/etcd" ]

let install_etcd () =
  match find_etcd () with
  | Some e -> Ok e
  | None -> (
      let sudo = if Unix.getuid () = 0 then "" else "sudo " in
      let cmd =
        sudo
        ^ "env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           etcd-server >/dev/null 2>&1"
      in
      Fmt.pr "etcd: installing Debian's etcd-server@.";
      ignore (Sys.command cmd);
      match find_etcd () with
      | Some e -> Ok e
      | None ->
          ignore (Sys.command (sudo ^ "apt-get update -qq >/dev/null 2>&1"));
          ignore (Sys.command cmd);
          Option.to_result ~none:"etcd-server could not be installed" (find_etcd ()))

let etcd_cluster ~etcd ~dir =
  let names = [ "m0"; "m1"; "m2" ] in
  let ports = List.map (fun _ -> (free_port Unix.SOCK_STREAM, free_port Unix.SOCK_STREAM)) names in
  let cluster =
    String.concat ","
      (List.map2 (fun n (_, p) -> Printf.sprintf "%s=http://127.0.0.1:%d" n p) names ports)
  in
  let pids =
    List.map2
      (fun n (c, p) ->
        spawn
          ~out:(dir / (n ^ ".log"))
          etcd
          [
            "--name";
            n;
            "--data-dir";
            dir / ("etcd-" ^ n);
            "--listen-client-urls";
            Printf.sprintf "http://127.0.0.1:%d" c;
            "--advertise-client-urls";
            Printf.sprintf "http://127.0.0.1:%d" c;
            "--listen-peer-urls";
            Printf.sprintf "http://127.0.0.1:%d" p;
            "--initial-advertise-peer-urls";
            Printf.sprintf "http://127.0.0.1:%d" p;
            "--initial-cluster";
            cluster;
            "--initial-cluster-state";
            "new";
            "--initial-cluster-token";
            "consort-bench";
            "--log-level";
            "error";
          ])
      names ports
  in
  (pids, List.map fst ports)

(* A minimal HTTP/1.1 client: POST with a JSON body, keep-alive. *)
module Http = struct
  type t = { port : int; mutable fd : Unix.file_descr option; buf : Buffer.t }

  let create port = { port; fd = None; buf = Buffer.create 4096 }

  let conn t =
    match t.fd with
    | Some fd -> fd
    | None ->
        let fd = Unix.socket Unix.PF_INET Unix.SOCK_STREAM 0 in
        Unix.connect fd (Unix.ADDR_INET (Unix.inet_addr_loopback, t.port));
        Unix.setsockopt fd Unix.TCP_NODELAY true;
        Unix.setsockopt_float fd Unix.SO_RCVTIMEO 10.;
        t.fd <- Some fd;
        Buffer.clear t.buf;
        fd

  let close t =
    Option.iter Unix.close t.fd;
    t.fd <- None

  let rec fill t fd =
    let b = Bytes.create 65536 in
    let n = Unix.read fd b 0 65536 in
    if n = 0 then failwith "connection closed";
    Buffer.add_subbytes t.buf b 0 n;
    ignore fill

  let find s sub from =
    let n = String.length sub in
    let rec go i =
      if i + n > String.length s then None else if String.sub s i n = sub then Some i else go (i + 1)
    in
    go from

  (* The status code and body of one response. *)
  let post t path body =
    let fd = conn t in
    let req =
      Printf.sprintf
        "POST %s HTTP/1.1\r\n\
         Host: 127.0.0.1\r\n\
         Content-Type: application/json\r\n\
         Content-Length: %d\r\n\
         \r\n\
         %s"
        path (String.length body) body
    in
    ignore (Unix.write_substring fd req 0 (String.length req));
    let rec headers () =
      match find (Buffer.contents t.buf) "\r\n\r\n" 0 with
      | Some i -> i
      | None ->
          fill t fd;
          headers ()
    in
    let h = headers () in
    let s = Buffer.contents t.buf in
    let head = String.lowercase_ascii (String.sub s 0 h) in
    let status = try int_of_string (String.sub head 9 3) with _ -> 0 in
    let rest = String.sub s (h + 4) (String.length s - h - 4) in
    Buffer.clear t.buf;
    Buffer.add_string t.buf rest;
    let take n =
      while Buffer.length t.buf < n do
        fill t fd
      done;
      let s = Buffer.contents t.buf in
      Buffer.clear t.buf;
      Buffer.add_string t.buf (String.sub s n (String.length s - n));
      String.sub s 0 n
    in
    let body =
      match find head "content-length:" 0 with
      | Some i ->
          let e = Option.value (find head "\r\n" i) ~default:(String.length head) in
          take (int_of_string (String.trim (String.sub head (i + 15) (e - i - 15))))
      | None ->
          (* chunked *)
          let b = Buffer.create 256 in
          let rec chunks () =
            let rec line () =
              match find (Buffer.contents t.buf) "\r\n" 0 with
              | Some i -> i
              | None ->
                  fill t fd;
                  line ()
            in
            let i = line () in
            let size = int_of_string ("0x" ^ String.trim (take i)) in
            ignore (take 2);
            if size > 0 then (
              Buffer.add_string b (take size);
              ignore (take 2);
              chunks ())
            else ignore (take 2)
          in
          chunks ();
          Buffer.contents b
    in
    (status, body)
end

let etcd_op ports c =
  let port = List.nth ports (c mod List.length ports) in
  let h = Http.create port in
  let b64 = Base64.encode_string in
  fun i ->
    let path, body =
      if i land 1 = 0 then
        ( "/v3/kv/put",
          Printf.sprintf "{\"key\":\"%s\",\"value\":\"%s\"}" (b64 (key i c)) (b64 value) )
      else ("/v3/kv/range", Printf.sprintf "{\"key\":\"%s\"}" (b64 (key i c)))
    in
    match Http.post h path body with
    | 200, _ -> true
    | _ -> false
    | exception _ ->
        Http.close h;
        false

let etcd_ready ports =
  let t0 = Unix.gettimeofday () in
  let op = etcd_op ports 0 in
  let rec go () =
    if op 0 then true
    else if Unix.gettimeofday () -. t0 > 30. then false
    else (
      Unix.sleepf 0.3;
      go ())
  in
  go ()

(* etcd's leader: the member whose status names itself as leader. *)
let etcd_leader ports =
  let field name body =
    let k = Printf.sprintf "\"%s\":\"" name in
    match Http.find body k 0 with
    | Some i -> (
        let j = i + String.length k in
        match String.index_from_opt body j '"' with
        | Some e -> Some (String.sub body j (e - j))
        | None -> None)
    | None -> None
  in
  List.find_map
    (fun (i, port) ->
      let h = Http.create port in
      match Http.post h "/v3/maintenance/status" "{}" with
      | 200, body ->
          Http.close h;
          if field "member_id" body <> None && field "member_id" body = field "leader" body then
            Some i
          else None
      | _ ->
          Http.close h;
          None
      | exception _ ->
          Http.close h;
          None)
    (List.mapi (fun i p -> (i, p)) ports)

(* One client writes without pause; [kill ()] SIGKILLs a member 2 s in.
   The figure: the longest time between two writes done, from the kill on
   (how long writes were blocked), and whether writes went on at all. *)
let failover ~name ~op ~kill =
  let t0 = Unix.gettimeofday () in
  let killed = ref None and last = ref t0 and worst = ref 0. and i = ref 0 and after = ref 0 in
  while Unix.gettimeofday () -. t0 < 30. && (!killed = None || !after < 200) do
    if !killed = None && Unix.gettimeofday () -. t0 > 2. then begin
      kill ();
      killed := Some (Unix.gettimeofday ())
    end;
    let ok = op !i in
    incr i;
    let now = Unix.gettimeofday () in
    if ok then begin
      (match !killed with
      | Some k ->
          incr after;
          worst := Float.max !worst (now -. Float.max !last k)
      | None -> ());
      last := now
    end
  done;
  match !killed with
  | Some _ when !after >= 200 -> Ok (name, !worst)
  | Some _ ->
      Error
        (Printf.sprintf "%s: writes did not go on after the kill (%d in %.0f s)" name !after
           (Unix.gettimeofday () -. t0))
  | None -> Error (Printf.sprintf "%s: no kill" name)

let pp_row base ppf r =
  Fmt.pf ppf "%-24s %9.0f ops/s  p50 %7.2f ms  p99 %7.2f ms  %s" r.name
    (float r.ops /. r.seconds)
    r.p50 r.p99
    (match base with
    | Some b when b.ops > 0 ->
        Printf.sprintf "x%.2f of 3 replicas" (float r.ops /. r.seconds /. (float b.ops /. b.seconds))
    | _ -> "");
  if r.failed > 0 then Fmt.pf ppf "  (%d failed)" r.failed

let run clients seconds no_etcd json =
  let kill_pid p = try Unix.kill p Sys.sigkill with Unix.Unix_error _ -> () in
  let dir = Filename.temp_file "consort-kv-bench" "" in
  Sys.remove dir;
  Unix.mkdir dir 0o700;
  Fun.protect ~finally:(fun () -> rm_rf dir) @@ fun () ->
  Fmt.pr
    "Key-value store: %d client processes, each one operation at a time for %.0f s; half puts of \
     100 bytes, half linearizable gets, 1000 keys; data in %s@."
    clients seconds (Filename.dirname dir);
  let consort n =
    let pids, listens = consort_cluster ~dir ~n () in
    Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
    if not (consort_ready listens) then Error (Printf.sprintf "%d replicas did not start" n)
    else
      Ok
        (load
           ~name:(Printf.sprintf "consort kv, %d replica%s" n (if n = 1 then "" else "s"))
           ~clients ~seconds ~dir
           (fun c -> consort_op listens c))
  in
  let r3 = consort 3 in
  let r1 = consort 1 in
  let etcd =
    if no_etcd then Error "skipped"
    else
      match install_etcd () with
      | Error e -> Error e
      | Ok etcd ->
          let pids, ports = etcd_cluster ~etcd ~dir in
          Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
          if not (etcd_ready ports) then Error "etcd did not start"
          else Ok (load ~name:"etcd, 3 members" ~clients ~seconds ~dir (fun c -> etcd_op ports c))
  in
  (* Failover: one replica or member killed under writes. *)
  let consort_failover params =
    let dir = dir / ("failover" ^ string_of_int (List.length params)) in
    Unix.mkdir dir 0o700;
    let pids, listens = consort_cluster ~params ~dir ~n:3 () in
    Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
    if not (consort_ready listens) then Error "3 replicas did not start"
    else
      let cl =
        Result.get_ok
          (Consort_kv.Client.create ~timeout:20. [ List.hd listens; List.nth listens 1 ])
      in
      let op i =
        match Consort_kv.Client.call cl (Consort_kv.Op.Put (key i 0, value)) with
        | Consort_kv.Wire.Done Consort_kv.Op.Ok -> true
        | _ -> false
      in
      let name =
        Printf.sprintf "consort kv, 3 replicas%s"
          (if params = [] then "" else " (" ^ String.concat "," params ^ ")")
      in
      let r =
        Fun.protect
          ~finally:(fun () -> Consort_kv.Client.close cl)
          (fun () -> failover ~name ~op ~kill:(fun () -> kill_pid (List.nth pids 2)))
      in
      (* What the replicas said, when writes did not go on. *)
      if Result.is_error r then
        List.iter
          (fun i ->
            let f = dir / Printf.sprintf "kv3-%d.log" i in
            match open_in f with
            | ic ->
                let lines = ref [] in
                (try
                   while true do
                     lines := input_line ic :: !lines
                   done
                 with End_of_file -> ());
                close_in ic;
                List.iter
                  (fun l -> prerr_endline (f ^ ": " ^ l))
                  (List.rev (List.filteri (fun i _ -> i < 5) !lines))
            | exception Sys_error _ -> ())
          [ 0; 1; 2 ];
      r
  in
  let f_default = consort_failover [] in
  let f_short = consort_failover [ "suspect.timeout=1s"; "suspect.verify=300ms" ] in
  let f_etcd =
    if no_etcd then Error "etcd: skipped"
    else
      match find_etcd () with
      | None -> Error "etcd: not installed"
      | Some etcd -> (
          let dir = dir / "failover-etcd" in
          Unix.mkdir dir 0o700;
          let pids, ports = etcd_cluster ~etcd ~dir in
          Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
          if not (etcd_ready ports) then Error "etcd did not start"
          else
            match etcd_leader ports with
            | None -> Error "etcd: no leader found"
            | Some leader ->
                (* The client talks to a member that stays. *)
                let other = (leader + 1) mod 3 in
                let op = etcd_op [ List.nth ports other ] 0 in
                let op i = op (2 * i) in
                failover ~name:"etcd, 3 members (leader killed)" ~op ~kill:(fun () ->
                    kill_pid (List.nth pids leader)))
  in
  let base = Result.to_option r3 in
  (try
     let ic = open_in "/proc/loadavg" in
     let l = input_line ic in
     close_in ic;
     Fmt.pr "load average (1, 5, 15 min) at the end: %s@."
       (String.concat " " (List.filteri (fun i _ -> i < 3) (String.split_on_char ' ' l)))
   with _ -> ());
  List.iter
    (function Ok r -> Fmt.pr "%a@." (pp_row base) r | Error e -> Fmt.pr "%s@." e)
    [ r3; r1; etcd ];
  Fmt.pr
    "Failover: one client writes; a replica (etcd: the leader) is killed with SIGKILL; writes \
     blocked for@.";
  List.iter
    (function Ok (name, w) -> Fmt.pr "  %-66s %6.2f s@." name w | Error e -> Fmt.pr "  %s@." e)
    [ f_default; f_short; f_etcd ];
  if json then begin
    let j = function
      | Ok r ->
          Printf.sprintf
            "{\"name\":%S,\"ops_per_s\":%.1f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"failed\":%d}" r.name
            (float r.ops /. r.seconds)
            r.p50 r.p99 r.failed
      | Error e -> Printf.sprintf "{\"error\":%S}" e
    in
    let f = function
      | Ok (name, w) -> Printf.sprintf "{\"failover\":%S,\"blocked_s\":%.3f}" name w
      | Error e -> Printf.sprintf "{\"error\":%S}" e
    in
    print_endline
      ("["
      ^ String.concat "," (List.map j [ r3; r1; etcd ] @ List.map f [ f_default; f_short; f_etcd ])
      ^ "]")
  end;
  match (r3, r1) with Ok _, Ok _ -> 0 | _ -> 1

let cmd =
  let clients =
    Arg.(
      value & opt Consort_cli.positive_int 8 & info [ "clients" ] ~docv:"N" ~doc:"Client processes.")
  in
  let seconds =
    Arg.(
      value & opt Consort_cli.positive_float 5.
      & info [ "seconds" ] ~docv:"S" ~doc:"Duration of each run.")
  in
  let no_etcd = Arg.(value & flag & info [ "no-etcd" ] ~doc:"Do not install and run etcd.") in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  Cmd.v
    (Consort_cli.info ~path:"bench kv" "kv"
       ~doc:
         "Key-value operations per second and latency with 3 replicas, beside 1 replica and beside \
          etcd.")
    Term.(const run $ clients $ seconds $ no_etcd $ json)
