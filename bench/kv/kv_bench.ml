(* etcd (3 members, through gRPC) and Consort's key-value store (3
   replicas, through its own TCP protocol), driven by one Go program
   (kvload/, built into a cache on first use) with the same workload: N
   clients, each with a connection of its own and one operation at a time,
   half puts of 100-byte values and half linearizable gets on 1000 keys.
   Data directories are on the same file system, and both systems fsync
   their log before they answer. *)

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
let consort_cluster ?(params = []) ?(verbose = false) ~dir ~n () =
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
          @ (if params = [] then [] else [ "--params"; String.concat "," params ])
          @ if verbose then [ "--verbose" ] else []))
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

(* {1 Readiness} *)

let wait_all ?(now = Unix.gettimeofday) ?(sleep = Unix.sleepf) ~timeout ~name ~probe members =
  let t0 = now () in
  let rec pass () =
    (* Every member in the same pass: one ready a while ago may have gone. *)
    let bad =
      List.filter_map
        (fun m -> match probe m with Ok () -> None | Error e -> Some (name m ^ ": " ^ e))
        members
    in
    if bad = [] then Ok ()
    else if now () -. t0 >= timeout then
      Error (Printf.sprintf "not ready after %.0f s: %s" timeout (String.concat "; " bad))
    else (
      sleep 0.3;
      pass ())
  in
  if members = [] then Error "no member" else pass ()

(* {1 Figures and their report} *)

type measure = {
  system : string;
  clients : int;
  depth : int;
  ops : int;
  failed : int;
  seconds : float;
  p50 : float;
  p99 : float;
  first_error : string;
}

type outcome = Measured of measure | Not_measured of string

let verdict m =
  if m.failed > 0 then
    Error
      (Printf.sprintf "discarded: %d failed operation%s%s" m.failed
         (if m.failed = 1 then "" else "s")
         (if m.first_error = "" then ""
          else " (first: " ^ String.map (function '\n' | '\r' -> ' ' | c -> c) m.first_error ^ ")"))
  else if m.ops = 0 || not (m.seconds > 0.) then Error "discarded: no operation completed"
  else Ok m

let rate m = float m.ops /. m.seconds
let usable = function Measured m -> verdict m | Not_measured r -> Error ("not measured: " ^ r)

(* "8 clients", or "8 x 8 pipelined" (connections x requests under way on each). *)
let shape (clients, depth) =
  if depth <= 1 then Printf.sprintf "%3d clients" clients
  else Printf.sprintf "%3d x %d pipelined" clients depth

let row_line label run o =
  match usable o with
  | Ok m ->
      Printf.sprintf "%-30s %-16s %9.0f ops/s  p50 %7.2f ms  p99 %7.2f ms" label (shape run)
        (rate m) m.p50 m.p99
  | Error e -> Printf.sprintf "%-30s %-16s %s" label (shape run) e

(* A pair: ((clients, depth), consort, etcd). *)
let ratio_line (run, consort, etcd) =
  match (usable consort, usable etcd) with
  | Ok c, Ok e ->
      Printf.sprintf "%s: consort / etcd = %.2fx in ops/s; p99 %.2f ms beside %.2f ms" (shape run)
        (rate c /. rate e)
        c.p99 e.p99
  | _ -> Printf.sprintf "%s: no ratio (a side was not measured or was discarded)" (shape run)

let report pairs =
  List.concat_map
    (fun (run, consort, etcd) ->
      [ row_line "consort kv, 3 replicas" run consort; row_line "etcd, 3 members (gRPC)" run etcd ])
    pairs
  @ List.map ratio_line pairs

type failover = { fname : string; blocked : (float, string) Stdlib.result }

let failover_line f =
  match f.blocked with
  | Ok b -> Printf.sprintf "  %-82s %6.2f s" f.fname b
  | Error e -> Printf.sprintf "  %-82s not measured: %s" f.fname e

let outcome_json o : Yojson.Safe.t =
  let base m =
    [
      ("system", `String m.system);
      ("clients", `Int m.clients);
      ("depth", `Int m.depth);
      ("seconds", `Float m.seconds);
      ("ops", `Int m.ops);
      ("failed", `Int m.failed);
    ]
  in
  match (o, usable o) with
  | Measured m, Ok _ ->
      `Assoc
        (base m
        @ [
            ("status", `String "measured");
            ("ops_per_s", `Float (rate m));
            ("p50_ms", `Float m.p50);
            ("p99_ms", `Float m.p99);
          ])
  | Measured m, Error e -> `Assoc (base m @ [ ("status", `String "discarded"); ("why", `String e) ])
  | Not_measured r, _ -> `Assoc [ ("status", `String "not measured"); ("why", `String r) ]

let to_json ~header ~load_start ~load_end pairs failovers : Yojson.Safe.t =
  `Assoc
    (header
    @ [
        ("load_average_start", `String load_start);
        ("load_average_end", `String load_end);
        ("runs", `List (List.concat_map (fun (_, c, e) -> [ outcome_json c; outcome_json e ]) pairs));
        ( "ratios",
          `List
            (List.filter_map
               (fun ((clients, depth), c, e) ->
                 match (usable c, usable e) with
                 | Ok c, Ok e ->
                     Some
                       (`Assoc
                          [
                            ("clients", `Int clients);
                            ("depth", `Int depth);
                            ("consort_over_etcd_ops", `Float (rate c /. rate e));
                            ("consort_p99_ms", `Float c.p99);
                            ("etcd_p99_ms", `Float e.p99);
                          ])
                 | _ -> None)
               pairs) );
        ( "failover",
          `List
            (List.map
               (fun f ->
                 `Assoc
                   (("name", `String f.fname)
                   ::
                   (match f.blocked with
                   | Ok b -> [ ("blocked_s", `Float b) ]
                   | Error e -> [ ("error", `String e) ])))
               failovers) );
      ])

(* {1 The Go driver} *)

let cache_dir () =
  match Sys.getenv_opt "XDG_CACHE_HOME" with
  | Some d when d <> "" -> d / "consort-bench-kv"
  | _ -> (
      match Sys.getenv_opt "HOME" with
      | Some h when h <> "" -> h / ".cache" / "consort-bench-kv"
      | _ -> Filename.get_temp_dir_name () / "consort-bench-kv")

let find_go () =
  let path = try String.split_on_char ':' (Sys.getenv "PATH") with Not_found -> [] in
  List.find_opt Sys.file_exists
    (List.map (fun d -> d / "go") path @ [ "/usr/local/go/bin/go"; "/usr/lib/go/bin/go" ])

let rec mkdir_p d =
  if not (Sys.file_exists d) then (
    mkdir_p (Filename.dirname d);
    try Unix.mkdir d 0o755 with Unix.Unix_error (Unix.EEXIST, _, _) -> ())

let last_line f =
  match open_in f with
  | ic ->
      let l = ref "" in
      (try
         while true do
           let x = input_line ic in
           if String.trim x <> "" then l := x
         done
       with End_of_file -> ());
      close_in ic;
      !l
  | exception Sys_error _ -> ""

(* The driver, built once per version of its sources (the modules it needs
   come from the Go module proxy on the first build). *)
let kvload () =
  match find_go () with
  | None -> Error "no Go toolchain (apt-get install golang-go, Go 1.23 or later)"
  | Some go -> (
      let digest =
        Digest.to_hex
          (Digest.string
             (String.concat "\000" (List.concat_map (fun (n, s) -> [ n; s ]) Kvload_src.files)))
      in
      let dir = cache_dir () / ("kvload-" ^ String.sub digest 0 12) in
      let bin = dir / "kvload" in
      if Sys.file_exists bin then Ok bin
      else
        try
          mkdir_p dir;
          List.iter
            (fun (n, s) ->
              let oc = open_out_bin (dir / n) in
              output_string oc s;
              close_out oc)
            Kvload_src.files;
          Fmt.pr "kvload: building the Go driver (go.etcd.io/etcd/client/v3 v3.5.21) in %s@." dir;
          (* Named by this process until it is whole: two runs may build at once. *)
          let tmp = Printf.sprintf "kvload.%d" (Unix.getpid ()) in
          let log = Printf.sprintf "build-%d.log" (Unix.getpid ()) in
          let cmd =
            Printf.sprintf
              "cd %s && GOTOOLCHAIN=local GOFLAGS=-mod=mod %s build -o %s . >%s 2>&1 && mv %s \
               kvload"
              (Filename.quote dir) (Filename.quote go) tmp log tmp
          in
          if Sys.command cmd = 0 && Sys.file_exists bin then Ok bin
          else Error ("the Go driver did not build: " ^ last_line (dir / log))
        with Sys_error e | Unix.Unix_error (_, e, _) -> Error ("the Go driver: " ^ e))

(* Runs the driver; its one line of output. *)
let drive bin args =
  match Unix.open_process_args_in bin (Array.of_list (bin :: args)) with
  | ic -> (
      try
        let l = try input_line ic with End_of_file -> "" in
        (try
           while true do
             ignore (input_line ic)
           done
         with End_of_file -> ());
        let st = Unix.close_process_in ic in
        (st, l)
      with e ->
        (* Interrupted: the driver goes too. *)
        (try Unix.kill (Unix.process_in_pid ic) Sys.sigkill with Unix.Unix_error _ -> ());
        (try ignore (Unix.close_process_in ic) with _ -> ());
        raise e)
  | exception Unix.Unix_error (e, _, _) -> (Unix.WEXITED 127, Unix.error_message e)

let probe_with bin system endpoint =
  match drive bin [ "probe"; "--system"; system; "--endpoint"; endpoint ] with
  | Unix.WEXITED 0, _ -> Ok ()
  | _, l -> Error (if l = "" then "no answer" else l)

let measure_of_json system (clients, depth) l =
  match Yojson.Safe.from_string l with
  | `Assoc f ->
      let num k =
        match List.assoc_opt k f with Some (`Int i) -> float i | Some (`Float x) -> x | _ -> nan
      in
      let str k = match List.assoc_opt k f with Some (`String s) -> s | _ -> "" in
      let ops = num "ops" and failed = num "failed" in
      if Float.is_nan ops || Float.is_nan failed then Not_measured ("driver: " ^ l)
      else
        Measured
          {
            system;
            clients;
            depth;
            ops = int_of_float ops;
            failed = int_of_float failed;
            seconds = num "seconds";
            p50 = num "p50_ms";
            p99 = num "p99_ms";
            first_error = str "first_error";
          }
  | _ -> Not_measured ("driver: " ^ l)
  | exception Yojson.Json_error e -> Not_measured ("driver: " ^ e)

let run_load bin ~system ~endpoints ~run:((clients, depth) as run) ~seconds ~warmup =
  let _, l =
    drive bin
      [
        "run";
        "--system";
        system;
        "--endpoints";
        String.concat "," endpoints;
        "--clients";
        string_of_int clients;
        "--depth";
        string_of_int depth;
        "--seconds";
        Printf.sprintf "%gs" seconds;
        "--warmup";
        Printf.sprintf "%gs" warmup;
      ]
  in
  measure_of_json system run l

let run_failover bin ~system ~endpoints ~pid =
  let _, l =
    drive bin
      [
        "failover";
        "--system";
        system;
        "--endpoints";
        String.concat "," endpoints;
        "--kill-pid";
        string_of_int pid;
        "--timeout";
        "1s";
      ]
  in
  match Yojson.Safe.from_string l with
  | `Assoc f -> (
      match (List.assoc_opt "error" f, List.assoc_opt "blocked_s" f) with
      | Some (`String e), _ -> Error e
      | _, Some (`Float b) -> Ok b
      | _, Some (`Int b) -> Ok (float b)
      | _ -> Error ("driver: " ^ l))
  | _ -> Error ("driver: " ^ l)
  | exception Yojson.Json_error e -> Error ("driver: " ^ e)

(* {1 etcd} *)

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

let etcd_version etcd =
  match Unix.open_process_args_in etcd [| etcd; "--version" |] with
  | ic ->
      let l = try input_line ic with End_of_file -> "" in
      (try
         while true do
           ignore (input_line ic)
         done
       with End_of_file -> ());
      ignore (Unix.close_process_in ic);
      l
  | exception Unix.Unix_error _ -> ""

(* Three members on loopback, defaults otherwise (a member fsyncs its WAL
   before it acknowledges an entry). *)
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
  (pids, List.map (fun (c, _) -> Printf.sprintf "127.0.0.1:%d" c) ports)

(* {1 Consort's sequencer} *)

let find_sub s sub =
  let n = String.length sub in
  let rec go i =
    if i + n > String.length s then None else if String.sub s i n = sub then Some i else go (i + 1)
  in
  go 0

(* The replica that orders: the view's first member, the coordinator its
   identifier names (["LTIME:COORDINATOR"]); each replica logs with
   --verbose "ME: active in VID, ...". *)
let sequencer logs =
  let active f =
    let l = ref None in
    (match open_in f with
    | ic ->
        (try
           while true do
             let x = input_line ic in
             match find_sub x ": active in " with Some i -> l := Some (x, i) | None -> ()
           done
         with End_of_file -> ());
        close_in ic
    | exception Sys_error _ -> ());
    match !l with
    | None -> None
    | Some (x, i) ->
        let before = String.sub x 0 i in
        let me =
          match String.rindex_opt before ' ' with
          | Some j -> String.sub before (j + 1) (String.length before - j - 1)
          | None -> before
        in
        let rest = String.sub x (i + 12) (String.length x - i - 12) in
        let vid = List.hd (String.split_on_char ',' rest) in
        let coord =
          match String.index_opt vid ':' with
          | Some j -> String.sub vid (j + 1) (String.length vid - j - 1)
          | None -> ""
        in
        Some (me, coord)
  in
  let seen = List.mapi (fun i f -> (i, active f)) logs in
  let coords = List.sort_uniq compare (List.map (fun (_, a) -> Option.map snd a) seen) in
  match
    ( coords,
      List.filter_map
        (fun (i, a) -> match a with Some (me, c) when me = c -> Some i | _ -> None)
        seen )
  with
  | [ Some _ ], [ i ] -> Ok i
  | _ -> Error "the sequencer could not be told from the replicas' logs"

(* {1 The run} *)

let loadavg () =
  try
    let ic = open_in "/proc/loadavg" in
    let l = input_line ic in
    close_in ic;
    String.concat " " (List.filteri (fun i _ -> i < 3) (String.split_on_char ' ' l))
  with _ -> "unknown"

exception Interrupted

let rec run clients_list pipelined seconds warmup no_etcd save json =
  let clients_list = List.map (fun c -> (c, 1)) clients_list @ pipelined in
  (* SIGINT or SIGTERM: the clusters started are stopped and their
     directories removed on the way out (once: the cleanup is not
     interrupted again). *)
  let on_signal =
    Sys.Signal_handle
      (fun _ ->
        Sys.set_signal Sys.sigint Sys.Signal_ignore;
        Sys.set_signal Sys.sigterm Sys.Signal_ignore;
        raise Interrupted)
  in
  Sys.set_signal Sys.sigint on_signal;
  Sys.set_signal Sys.sigterm on_signal;
  try run_ clients_list seconds warmup no_etcd save json
  with Interrupted | Fun.Finally_raised Interrupted ->
    Fmt.epr "consort bench kv: interrupted; the clusters it started are stopped@.";
    130

and run_ (clients_list : (int * int) list) seconds warmup no_etcd save json =
  match Option.bind save Consort_cli.unwritable_dir with
  | Some m -> Consort_cli.fail "bench kv" "--save %s: %s" (Option.get save) m
  | None ->
      let load_start = loadavg () in
      let dir = Filename.temp_file "consort-kv-bench" "" in
      Sys.remove dir;
      Unix.mkdir dir 0o700;
      Fun.protect ~finally:(fun () -> rm_rf dir) @@ fun () ->
      Fmt.pr
        "Key-value store: consort kv (3 replicas, its TCP protocol) and etcd (3 members, gRPC), \
         both driven by one Go program (bench/kv/kvload: go.etcd.io/etcd/client/v3 v3.5.21 and a \
         client of consort kv's protocol); %s: N clients, each a connection of its own and one \
         operation at a time; N x D pipelined, N connections each shared by D goroutines with one \
         operation under way each (etcd: one clientv3 client per connection, its requests \
         multiplexed over gRPC; consort: requests pipelined, answers matched by request number); \
         %g s of warm-up then %g s measured; half puts of 100 bytes, half linearizable gets, 1000 \
         keys; both fsync their log before answering (etcd by default, consort kv always); a run \
         with any failed operation is discarded; data in %s@."
        (String.concat ", " (List.map (fun r -> String.trim (shape r)) clients_list))
        warmup seconds (Filename.dirname dir);
      Fmt.pr "load average (1, 5, 15 min) at the start: %s@." load_start;
      let bin = kvload () in
      (match bin with Error e -> Fmt.pr "kvload: %s@." e | Ok _ -> ());
      let not_measured why = List.map (fun c -> (c, Not_measured why)) clients_list in
      let ready bin system endpoints =
        wait_all ~timeout:30. ~name:Fun.id ~probe:(probe_with bin system) endpoints
      in
      let consort_runs =
        match bin with
        | Error e -> not_measured e
        | Ok bin -> (
            let d = dir / "consort" in
            Unix.mkdir d 0o700;
            let pids, listens = consort_cluster ~dir:d ~n:3 () in
            Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
            match ready bin "consort" listens with
            | Error e -> not_measured ("3 replicas: " ^ e)
            | Ok () ->
                List.map
                  (fun c ->
                    (c, run_load bin ~system:"consort" ~endpoints:listens ~run:c ~seconds ~warmup))
                  clients_list)
      in
      let etcd_bin = if no_etcd then Error "--no-etcd" else install_etcd () in
      let etcd_runs =
        match (bin, etcd_bin) with
        | _, Error e | Error e, _ -> not_measured e
        | Ok bin, Ok etcd -> (
            let d = dir / "etcd" in
            Unix.mkdir d 0o700;
            let pids, eps = etcd_cluster ~etcd ~dir:d in
            Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
            match ready bin "etcd" eps with
            | Error e -> not_measured ("3 members: " ^ e)
            | Ok () ->
                List.map
                  (fun c -> (c, run_load bin ~system:"etcd" ~endpoints:eps ~run:c ~seconds ~warmup))
                  clients_list)
      in
      let pairs =
        List.map (fun c -> (c, List.assoc c consort_runs, List.assoc c etcd_runs)) clients_list
      in
      (* Failover: the sequencer (etcd: the leader) killed under writes; the
         client talks to the others. *)
      let consort_failover params =
        let fname =
          Printf.sprintf "consort kv, 3 replicas, sequencer killed%s"
            (if params = [] then "" else " (" ^ String.concat "," params ^ ")")
        in
        let blocked =
          match bin with
          | Error e -> Error e
          | Ok bin -> (
              let d = dir / ("failover" ^ string_of_int (List.length params)) in
              Unix.mkdir d 0o700;
              let pids, listens = consort_cluster ~params ~verbose:true ~dir:d ~n:3 () in
              Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
              match ready bin "consort" listens with
              | Error e -> Error e
              | Ok () -> (
                  match sequencer (List.init 3 (fun i -> d / Printf.sprintf "kv3-%d.log" i)) with
                  | Error e -> Error e
                  | Ok s ->
                      run_failover bin ~system:"consort"
                        ~endpoints:(List.filteri (fun i _ -> i <> s) listens)
                        ~pid:(List.nth pids s)))
        in
        { fname; blocked }
      in
      let f_default = consort_failover [] in
      let f_short = consort_failover [ "suspect.timeout=1s"; "suspect.verify=300ms" ] in
      let f_etcd =
        let fname = "etcd, 3 members, leader killed" in
        match (bin, etcd_bin) with
        | _, Error e | Error e, _ -> { fname; blocked = Error e }
        | Ok bin, Ok etcd ->
            let d = dir / "failover-etcd" in
            Unix.mkdir d 0o700;
            let pids, eps = etcd_cluster ~etcd ~dir:d in
            Fun.protect ~finally:(fun () -> stop pids) @@ fun () ->
            let blocked =
              match ready bin "etcd" eps with
              | Error e -> Error e
              | Ok () -> (
                  match drive bin [ "leader"; "--endpoints"; String.concat "," eps ] with
                  | Unix.WEXITED 0, l -> (
                      match int_of_string_opt (String.trim l) with
                      | Some i when i >= 0 && i < 3 ->
                          run_failover bin ~system:"etcd"
                            ~endpoints:(List.filteri (fun j _ -> j <> i) eps)
                            ~pid:(List.nth pids i)
                      | _ -> Error ("no leader: " ^ l))
                  | _, l -> Error ("no leader: " ^ l))
            in
            { fname; blocked }
      in
      let failovers = [ f_default; f_short; f_etcd ] in
      let load_end = loadavg () in
      Fmt.pr "load average (1, 5, 15 min) at the end: %s@." load_end;
      List.iter print_endline (report pairs);
      Fmt.pr
        "Failover: one client writes through the other members, each attempt with a 1 s deadline; \
         the sequencer (etcd: the leader) is killed with SIGKILL 2 s in; writes blocked for@.";
      List.iter (fun f -> print_endline (failover_line f)) failovers;
      let header =
        [
          ("bench", `String "kv");
          ( "workload",
            `String
              (Printf.sprintf
                 "one Go driver for both; N clients: each a connection, one operation at a time; N \
                  x D pipelined: N connections, D operations under way on each (etcd: goroutines \
                  sharing a clientv3 client); half puts of 100 bytes, half linearizable gets; 1000 \
                  keys; %g s warm-up, %g s measured"
                 warmup seconds) );
          ("durability", `String "both fsync their log before answering (etcd by default)");
          ( "etcd",
            `String
              (match etcd_bin with
              | Ok e -> etcd_version e ^ ", driven through gRPC (clientv3 v3.5.21)"
              | Error e -> e) );
        ]
      in
      let j = to_json ~header ~load_start ~load_end pairs failovers in
      if json then print_endline (Yojson.Safe.to_string j);
      let saved =
        match save with
        | None -> true
        | Some d -> (
            match Consort_cli.save_result ~dir:d ~name:"kv" (Yojson.Safe.pretty_to_string j) with
            | Ok f ->
                Fmt.pr "kept in %s@." f;
                true
            | Error m ->
                Fmt.epr "consort bench kv: --save %s: %s@." d m;
                false)
      in
      (* The figures could not be kept: 2, as every write that fails. *)
      if not saved then 2
      else if
        (* Exit 1 when a figure is missing: a discarded or unmeasured run (etcd's
         not counted with --no-etcd). *)
        List.for_all
          (fun (_, c, e) -> Result.is_ok (usable c) && (no_etcd || Result.is_ok (usable e)))
          pairs
      then 0
      else 1

let cmd =
  let clients =
    Arg.(
      value
      & opt (list Consort_cli.positive_int) [ 8; 64 ]
      & info [ "clients" ] ~docv:"N,..." ~doc:"Concurrent clients, one run each.")
  in
  let pipelined =
    let depth =
      let parse s =
        match int_of_string_opt (String.trim s) with
        | Some d when d >= 1 && d <= Consort_kv.Client.max_depth -> Ok d
        | _ ->
            Error (`Msg (Printf.sprintf "%S: a depth from 1 to %d" s Consort_kv.Client.max_depth))
      in
      Arg.conv ~docv:"D" (parse, Format.pp_print_int)
    in
    Arg.(
      value
      & opt (list (pair ~sep:'x' Consort_cli.positive_int depth)) [ (8, 8) ]
      & info [ "pipelined" ] ~docv:"NxD,..."
          ~doc:
            "Pipelined runs, one each: N connections with D operations under way on each (Consort: \
             pipelined requests; etcd: D goroutines sharing each clientv3 client). Beside the \
             $(b,--clients) runs.")
  in
  let seconds =
    Arg.(
      value
      & opt Consort_cli.positive_float 10.
      & info [ "seconds" ] ~docv:"S" ~doc:"Measured time of each run (at least 2 s).")
  in
  let warmup =
    Arg.(
      value & opt Consort_cli.positive_float 2.
      & info [ "warmup" ] ~docv:"S" ~doc:"Warm-up before each run, not measured.")
  in
  let no_etcd = Arg.(value & flag & info [ "no-etcd" ] ~doc:"Do not install and run etcd.") in
  let json =
    Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line (as --save).")
  in
  let save =
    Arg.(
      value
      & opt (some string) None
      & info [ "save" ] ~docv:"DIR" ~doc:"Write the figures to $(i,DIR)/kv-YYYYMMDD-HHMMSS.json.")
  in
  let check_seconds s =
    if s < 2. then `Error (false, "--seconds: at least 2 s of steady state") else `Ok s
  in
  Cmd.v
    (Consort_cli.info ~path:"bench kv" "kv"
       ~doc:
         "Key-value operations per second and latency with 3 replicas beside etcd (3 members, \
          gRPC), one Go driver for both; and writes blocked when the sequencer (etcd's leader) is \
          killed.")
    Term.(
      ret
        (const (fun c p s w n sv j ->
             match check_seconds s with `Ok s -> `Ok (run c p s w n sv j) | `Error _ as e -> e)
        $ clients $ pipelined $ seconds $ warmup $ no_etcd $ save $ json))
