open Cmdliner
open Consort_cap
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Rpc_udp
module Pd = Consort_capproc.Pd
module Proc_server = Consort_capproc.Proc_server
module Proc_client = Consort_capproc.Proc_client
module P = Consort_capproc.Proc_proto

let rpc_config = Cap_common.rpc_config
let refused = Cap_common.refused
let unknown = Cap_common.unknown

let parse_cap what s =
  match Cap.of_string s with
  | Ok c -> Ok c
  | Error e -> Error (Fmt.str "%s: bad capability: %a" what Cap.pp_decode_error e)

let default_user = "consort-run"

(* The user programs run as: NAME or UID:GID. As root: never root, and the
   default user must exist. Otherwise: the server's own user. *)
let program_user user =
  let lookup name =
    match String.split_on_char ':' name with
    | [ u; g ] when int_of_string_opt u <> None && int_of_string_opt g <> None ->
        Ok (int_of_string u, int_of_string g)
    | _ -> (
        match Unix.getpwnam name with
        | pw -> Ok (pw.Unix.pw_uid, pw.Unix.pw_gid)
        | exception Not_found ->
            Error
              (Printf.sprintf
                 "--user %s: no such user (make deps creates %s; or: useradd --system \
                  --no-create-home --shell /usr/sbin/nologin %s)"
                 name default_user default_user))
  in
  if Unix.geteuid () = 0 then
    match lookup (Option.value user ~default:default_user) with
    | Error e -> Error e
    | Ok (0, _) | Ok (_, 0) -> Error "--user: programs never run as root (uid or gid 0)"
    | Ok ug -> Ok (Some ug)
  else
    match user with
    | None -> Ok None
    | Some name -> (
        match lookup name with
        | Ok (u, _) when u = Unix.geteuid () -> Ok None
        | Ok _ ->
            Error (Printf.sprintf "--user %s: only a server running as root can change user" name)
        | Error e -> Error e)

(* The server's directory, made (0700) if missing: what is wrong with it, if anything (a secret
   in it that another user could read, with how to fix it). *)
let data_problem data =
  match Consort_local.Private.mkdir_p data with
  | exception Unix.Unix_error (e, _, _) -> Some (data ^ ": " ^ Unix.error_message e)
  | () when not (Sys.is_directory data) -> Some (data ^ ": not a directory")
  | () -> Consort_local.Private.exposed (Filename.concat data "server.secret")

(* consort cap proc serve *)
let serve data bind key_file locate max_processes user max_tree max_files no_ns no_cg =
  let key_file = match key_file with Some f -> f | None -> Filename.concat data "port.key" in
  let problem = data_problem data in
  if problem <> None then refused "%s" (Option.get problem)
  else
    match program_user user with
    | Error m -> refused "%s" m
    | Ok user -> (
        match Port.Key.load_or_create key_file with
        | Error m -> refused "key %s: %s" key_file m
        | Ok key -> (
            let loop = Loop.create () in
            match R.open_node ~config:!rpc_config ?locate ~bind loop with
            | Error m -> refused "cannot serve on %s: %s" bind m
            | Ok node -> (
                let config =
                  {
                    (Proc_server.default_config ~data) with
                    max_processes;
                    locate = Rpc.locate_list ?arg:locate ();
                    rpc = !rpc_config;
                    user;
                    max_tree;
                    max_files;
                    namespaces = not no_ns;
                    cgroups = not no_cg;
                  }
                in
                match Proc_server.create config loop node key with
                | Error m ->
                    R.close node;
                    refused "%s" m
                | Ok t ->
                    let run = Cap_common.serve_until_signal loop in
                    Fmt.pr "server %s@." (Cap.to_string (Proc_server.server_cap t));
                    Fmt.epr "consort: process server for port %s on %s (ocamlrun %s)@."
                      (Port.to_hex (Port.Key.port key))
                      (Udp.address_to_string (R.address node))
                      config.ocamlrun;
                    Fmt.epr "consort: %s@." (Proc_server.confinement t);
                    run ();
                    Proc_server.shutdown t;
                    R.close node;
                    0)))

let with_node locate f =
  let loop = Loop.create () in
  match R.open_node ~config:!rpc_config ?locate loop with
  | Error m -> refused "%s" m
  | Ok node -> Fun.protect ~finally:(fun () -> R.close node) (fun () -> f node)

let call_failed what = function
  | `Status st -> refused "%s refused: %a" what Status.pp st
  | `Rpc e -> (
      match Rpc_error.outcome e with
      | `Not_executed -> refused "%s: %a" what Rpc_error.pp e
      | `Unknown -> unknown "%s: outcome unknown: %a" what Rpc_error.pp e)

let ps locate server =
  match Cap_common.resolve ~config:!rpc_config ?locate "SERVER" server with
  | Error m -> refused "%s" m
  | Ok cap ->
      with_node locate (fun node ->
          match R.Sync.std_status node cap with
          | Ok s ->
              print_endline s;
              0
          | Error e -> call_failed "ps" e)

let kill locate proc signal =
  match (parse_cap "PROCESS" proc, List.assoc_opt (String.uppercase_ascii signal) P.signals) with
  | Error m, _ -> refused "%s" m
  | _, None -> refused "--signal %s: one of %s" signal (String.concat ", " (List.map fst P.signals))
  | Ok cap, Some s ->
      with_node locate (fun node ->
          match
            R.Sync.trans node (Header.request ~offset:(P.signal_to_system s) cap P.ps_signal) ""
          with
          | Ok (h, _) when h.Header.status = `Ok -> 0
          | Ok (h, _) when h.Header.status = `Notnow -> refused "kill: the process has ended"
          | Ok (h, _) -> call_failed "kill" (`Status h.Header.status)
          | Error e -> call_failed "kill" (`Rpc e))

(* The command line. *)

let locate = Cap_common.locate
let exits = Cap_common.exits

let envs =
  [
    Cap_common.locate_env;
    Cmd.Env.info "CONSORT_MULTICAST"
      ~doc:"The IP multicast group where servers listen for locates and clients ask, or $(b,off).";
  ]

let configured t = Cap_common.configured t

let serve_cmd =
  let data =
    Cap_common.data_arg ~doc:"The process server's directory (its key, the programs it runs)."
  in
  let bind = Cap_common.bind_arg ~doc:"Where to serve." in
  let key =
    Cap_common.key_arg ~doc:"The server's key (default $(i,DIR)/port.key, made if missing)."
  in
  let maxp =
    Arg.(
      value & opt Consort_cli.positive_int 32
      & info [ "max-processes" ] ~docv:"N" ~doc:"Processes at once (ended ones count for 60 s).")
  in
  let user =
    Arg.(
      value
      & opt (some string) None
      & info [ "user" ] ~docv:"NAME"
          ~doc:
            "The user programs run as: a name or $(i,UID):$(i,GID). A server running as root needs \
             one and never runs a program as root; the default, $(b,consort-run), is a system user \
             that $(b,make deps) creates. A server not running as root runs programs as itself \
             (they can then read what the server can).")
  in
  let max_tree =
    Arg.(
      value & opt Consort_cli.positive_int 64
      & info [ "max-tree" ] ~docv:"N"
          ~doc:
            "Processes in one program's tree (its cgroup's pids.max; without a pids cgroup, \
             RLIMIT_NPROC, which the kernel counts for all the user's processes together).")
  in
  let max_files =
    Arg.(
      value & opt Consort_cli.positive_int 256
      & info [ "max-files" ] ~docv:"N"
          ~doc:"Open files of each process of a program (RLIMIT_NOFILE).")
  in
  let no_ns =
    Arg.(
      value & flag
      & info [ "no-namespaces" ]
          ~doc:"No PID namespace per program, even where the host allows (the weaker guarantee).")
  in
  let no_cg =
    Arg.(
      value & flag
      & info [ "no-cgroups" ]
          ~doc:"No cgroup per program, even where the host allows (the weaker guarantee).")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap proc serve" "serve" ~exits ~envs
       ~doc:
         "Run a process server: it runs OCaml bytecode programs stored on file servers, under the \
          local $(b,ocamlrun), confined and with resource limits. Its first line on standard \
          output is $(b,server CAP), the capability that allows starting programs; its second line \
          on standard error says what confines programs on this host. Each program runs as \
          $(b,--user), in a private working directory, with no capability in its environment and \
          no inherited descriptor but its streams, its capabilities (3) and its program (4). Where \
          the host has a writable cgroup v2 hierarchy (or v1 pids and cpuacct ones), each \
          program's whole tree is in a cgroup of its own: its CPU time is counted together, its \
          processes bounded by $(b,--max-tree), and all of them killed when it ends. Where PID \
          namespaces can be made, each program has its own (and its own /proc): setsid does not \
          let a descendant escape, and every descendant dies with the program or the server. \
          Without them the guarantee is weaker: limits are rlimits of each process plus the CPU \
          time of the process group, so a descendant that calls setsid escapes the CPU count and \
          the final kill.")
    (configured
    @@ Term.(
         const (fun d b k l m u mt mf nn nc () () -> serve d b k l m u mt mf nn nc)
         $ data $ bind $ key $ locate $ maxp $ user $ max_tree $ max_files $ no_ns $ no_cg
         $ Consort_cli.logging))

let proc =
  Cmd.group (Cmd.info "proc" ~exits:Consort_cli.exits ~doc:"The process server.") [ serve_cmd ]

(* consort cap exec: Consort_capexec, which the small consort-exec binary runs too. *)
let exec = Consort_capexec.exec_cmd ~name:"exec" ~path:"cap exec"

let ps =
  let server =
    Arg.(
      required
      & pos 0 (some string) None
      & info [] ~docv:"SERVER"
          ~doc:"The process server's capability, or its path from the root directory.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap ps" "ps" ~exits ~envs
       ~doc:"List a process server's processes: object, state, run time, arguments.")
    (configured @@ Term.(const (fun l s () -> ps l s) $ locate $ server))

let kill =
  let proc =
    Arg.(
      required & pos 0 (some string) None & info [] ~docv:"PROCESS" ~doc:"The process's capability.")
  in
  let signal =
    Arg.(
      value & opt string "TERM"
      & info [ "signal"; "s" ] ~docv:"NAME"
          ~doc:"The signal: HUP, INT, QUIT, KILL, USR1, USR2, TERM, STOP or CONT.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap kill" "kill" ~exits ~envs
       ~doc:"Send a signal to a process (SIGTERM by default).")
    (configured @@ Term.(const (fun l p s () -> kill l p s) $ locate $ proc $ signal))

(* consort bench proc: starting a program through the process server beside
   starting ocamlrun locally, in the same run. *)

(* The CPU time (user and system, with its waited-for children) of process [pid] so far, in
   seconds: /proc/PID/stat's utime, stime, cutime and cstime, in USER_HZ (100) ticks. *)
(* The first line of a file of /proc (its size is 0: read_file would read nothing). *)
let proc_line f =
  match open_in f with
  | exception Sys_error _ -> None
  | ic ->
      let l = try Some (input_line ic) with End_of_file | Sys_error _ -> None in
      close_in_noerr ic;
      l

let proc_cpu pid =
  match proc_line (Printf.sprintf "/proc/%d/stat" pid) with
  | None -> 0.
  | Some s -> (
      match String.rindex_opt s ')' with
      | None -> 0.
      | Some i -> (
          (* After "PID (comm) ": state is field 3; utime is 14 .. cstime 17. *)
          let f = String.split_on_char ' ' (String.sub s (i + 2) (String.length s - i - 2)) in
          match List.filteri (fun k _ -> k >= 11 && k <= 14) f with
          | [ a; b; c; d ] ->
              float_of_int
                (List.fold_left
                   (fun acc x -> acc + Option.value ~default:0 (int_of_string_opt x))
                   0 [ a; b; c; d ])
              /. 100.
          | _ -> 0.))

(* consort-exec beside this binary: installed (PREFIX/bin), or in the build tree. *)
let find_consort_exec exe =
  let d = Filename.dirname exe in
  List.find_opt Sys.file_exists
    [
      Filename.concat d "consort-exec";
      Filename.concat (Filename.concat d "exec") "consort_exec.exe";
    ]

let children_cpu () =
  let t = Unix.times () in
  t.Unix.tms_cutime +. t.Unix.tms_cstime

let load_average () =
  match proc_line "/proc/loadavg" with
  | None -> "?"
  | Some s -> String.concat " " (List.filteri (fun i _ -> i < 3) (String.split_on_char ' ' s))

let bench_proc rounds json save =
  let exe = Sys.executable_name in
  match (Option.bind save Consort_cli.unwritable_dir, find_consort_exec exe) with
  | Some m, _ -> refused "bench proc: --save %s: %s" (Option.get save) m
  | None, None ->
      refused
        "bench proc: no consort-exec beside %s (make build makes it, make install installs it)" exe
  | None, Some small_exe -> (
      let dir = Consort_local.temp_dir "consort-bench-proc" in
      let children = ref [] in
      let cleanup () =
        List.iter
          (fun pid ->
            (try Unix.kill pid Sys.sigterm with Unix.Unix_error _ -> ());
            try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
          !children;
        Consort_local.rm_rf dir
      in
      Fun.protect ~finally:cleanup @@ fun () ->
      let ( / ) = Filename.concat in
      let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
      let wait_ok pid = match Unix.waitpid [] pid with _, Unix.WEXITED 0 -> true | _ -> false in
      let load_start = load_average () in
      (* The program: the smallest bytecode executable, compiled here. *)
      let src = dir / "hello.ml" and byte = dir / "hello.byte" in
      let oc = open_out src in
      output_string oc "let () = exit 0\n";
      close_out oc;
      let compiled =
        match
          Unix.create_process "ocamlc" [| "ocamlc"; "-o"; byte; src |] devnull devnull Unix.stderr
        with
        | pid -> wait_ok pid
        | exception Unix.Unix_error _ -> false
      in
      if not compiled then refused "bench proc: cannot compile a bytecode program (ocamlc)"
      else
        let free_port () = Printf.sprintf "127.0.0.1:%d" (Consort_local.free_port ()) in
        let start args =
          let r, w = Unix.pipe ~cloexec:true () in
          let pid = Unix.create_process exe (Array.of_list (exe :: args)) devnull w devnull in
          children := pid :: !children;
          Unix.close w;
          let ic = Unix.in_channel_of_descr r in
          let line = try input_line ic with End_of_file -> "" in
          close_in ic;
          match String.split_on_char ' ' line with
          | [ "server"; c ] -> Option.map (fun c -> (c, pid)) (Result.to_option (Cap.of_string c))
          | _ -> None
        in
        Unix.mkdir (dir / "fs") 0o700;
        Unix.mkdir (dir / "ps") 0o700;
        let fsa = free_port () and psa = free_port () in
        match
          ( start [ "cap"; "fs"; "serve"; "--new"; "--data"; dir / "fs"; "--bind"; fsa ],
            start
              ([ "cap"; "proc"; "serve"; "--data"; dir / "ps"; "--bind"; psa; "--locate"; fsa ]
              (* as root without make deps' user: nobody's uid and gid *)
              @
              if Unix.geteuid () = 0 && Result.is_error (program_user None) then
                [ "--user"; "65534:65534" ]
              else []) )
        with
        | None, _ | _, None -> refused "bench proc: the servers did not start"
        | Some (fs, fs_pid), Some (ps, ps_pid) -> (
            let loop = Loop.create () in
            match R.open_node ~locate:(fsa ^ "," ^ psa) ~multicast:None loop with
            | Error m -> refused "bench proc: %s" m
            | Ok node -> (
                Fun.protect ~finally:(fun () -> R.close node) @@ fun () ->
                let trans ~idempotent h d = R.Sync.trans node ~idempotent h d in
                let size = (Unix.stat byte).Unix.st_size in
                let ic = open_in_bin byte in
                let put =
                  Fun.protect
                    ~finally:(fun () -> close_in ic)
                    (fun () ->
                      Consort_capfs_server.Fs_client.put trans ~server:fs ~size (fun b o l ->
                          input ic b o l))
                in
                match put with
                | Error e -> refused "bench proc: put: %a" Consort_capfs_server.Fs_client.pp_error e
                | Ok program -> (
                    let ocamlrun = (Proc_server.default_config ~data:dir).ocamlrun in
                    (* A child's wall time, and its CPU time (with its own children's). *)
                    let child argv env =
                      let t0 = Unix.gettimeofday () and c0 = children_cpu () in
                      let pid = Unix.create_process_env argv.(0) argv env devnull devnull devnull in
                      if not (wait_ok pid) then failwith (argv.(0) ^ " failed");
                      (Unix.gettimeofday () -. t0, children_cpu () -. c0)
                    in
                    let env =
                      Array.append
                        [| "CONSORT_LOCATE=" ^ fsa ^ "," ^ psa; "CONSORT_MULTICAST=off" |]
                        (Unix.environment ())
                    in
                    let local () = child [| ocamlrun; byte |] env in
                    let remote () =
                      let t0 = Unix.gettimeofday () in
                      match
                        Proc_client.exec node ~server:ps ~program ~stdout:ignore ~stderr:ignore ()
                      with
                      | Ok { Proc_client.kind = P.Exited; code = 0; _ } ->
                          Unix.gettimeofday () -. t0
                      | Ok o -> failwith o.Proc_client.text
                      | Error e -> failwith (Fmt.str "%a" Proc_client.pp_error e)
                    in
                    let caps = [ Cap.to_string ps; Cap.to_string program ] in
                    let cli () = child (Array.of_list ([ exe; "cap"; "exec"; "-n" ] @ caps)) env in
                    (* consort-exec, with the CPU time the servers spent on it. *)
                    let servers_cpu () = proc_cpu ps_pid +. proc_cpu fs_pid in
                    let small () =
                      let s0 = servers_cpu () in
                      let w, c = child (Array.of_list ([ small_exe; "-n" ] @ caps)) env in
                      (w, c, servers_cpu () -. s0)
                    in
                    (* The floor of cap exec: this binary starting and exiting. *)
                    let bare () = child [| exe; "--version" |] env in
                    match
                      ignore (local ());
                      (* The first start: the port located, a session opened and the program
                         fetched (the server caches it). *)
                      let first = remote () in
                      let rs =
                        List.init rounds (fun _ ->
                            let b = bare () in
                            let l = local () in
                            let r = remote () in
                            let c = cli () in
                            let s = small () in
                            (b, l, r, c, s))
                      in
                      (first, rs)
                    with
                    | exception Failure m -> refused "bench proc: %s" m
                    | first, rs -> (
                        let med f =
                          let a = Array.of_list (List.map f rs) in
                          Array.sort compare a;
                          a.(Stdlib.( / ) (Array.length a) 2)
                        in
                        let ms x = x *. 1000. in
                        let b = med (fun (b, _, _, _, _) -> fst b)
                        and l = med (fun (_, l, _, _, _) -> fst l)
                        and r = med (fun (_, _, r, _, _) -> r)
                        and c = med (fun (_, _, _, c, _) -> fst c)
                        and s = med (fun (_, _, _, _, (w, _, _)) -> w) in
                        let lc = med (fun (_, l, _, _, _) -> snd l)
                        and cc = med (fun (_, _, _, c, _) -> snd c)
                        and sc = med (fun (_, _, _, _, (_, c, _)) -> c) in
                        (* The servers' CPU in ticks of 10 ms: a mean over the rounds. *)
                        let srv =
                          List.fold_left (fun a (_, _, _, _, (_, _, x)) -> a +. x) 0. rs
                          /. float_of_int rounds
                        in
                        let bcpu = med (fun (b, _, _, _, _) -> snd b) in
                        let load_end = load_average () in
                        Fmt.pr
                          "Process start: a %d-byte bytecode program that exits at once, %d rounds \
                           (medians; load %s at the start, %s at the end)@."
                          size rounds load_start load_end;
                        Fmt.pr "  %-60s %8s %8s %7s@." "" "wall ms" "CPU ms" "ratio";
                        let row what w cpu =
                          Fmt.pr "  %-60s %8.2f %8s %7.1f@." what (ms w)
                            (match cpu with Some c -> Fmt.str "%.2f" (ms c) | None -> "-")
                            (w /. l)
                        in
                        row "ocamlrun locally (fork, exec, run, wait)" l (Some lc);
                        row "first start through the server (locate, session, fetch)" first None;
                        row "warm: through the server (session open, program cached)" r None;
                        row "consort-exec (a new client: locate, session; cached)" s (Some sc);
                        row "consort cap exec (the same from the consort binary)" c (Some cc);
                        row "consort --version (the consort binary alone)" b (Some bcpu);
                        Fmt.pr
                          "  CPU per consort-exec start: client %.2f ms + servers %.1f ms (ticks \
                           of 10 ms, mean) = %.1f ms, %.1fx ocamlrun's %.2f ms@."
                          (ms sc) (ms srv)
                          (ms (sc +. srv))
                          ((sc +. srv) /. lc)
                          (ms lc);
                        let line =
                          Printf.sprintf
                            "{\"bench\":\"proc\",\"rounds\":%d,\"size\":%d,\"load_start\":\"%s\",\"load_end\":\"%s\",\"local_ms\":%.3f,\"local_cpu_ms\":%.3f,\"first_ms\":%.3f,\"remote_ms\":%.3f,\"exec_ms\":%.3f,\"exec_cpu_ms\":%.3f,\"servers_cpu_ms\":%.2f,\"cli_ms\":%.3f,\"cli_cpu_ms\":%.3f,\"binary_ms\":%.3f,\"binary_cpu_ms\":%.3f,\"ratio\":%.2f,\"exec_ratio\":%.2f,\"cli_ratio\":%.2f,\"exec_cpu_ratio\":%.2f}"
                            rounds size load_start load_end (ms l) (ms lc) (ms first) (ms r) (ms s)
                            (ms sc) (ms srv) (ms c) (ms cc) (ms b) (ms bcpu) (r /. l) (s /. l)
                            (c /. l)
                            ((sc +. srv) /. lc)
                        in
                        if json then print_endline line;
                        match save with
                        | None -> 0
                        | Some d -> (
                            let tm = Unix.gmtime (Unix.time ()) in
                            let f =
                              d
                              / Printf.sprintf "proc-%04d%02d%02d-%02d%02d%02d.json"
                                  (tm.Unix.tm_year + 1900) (tm.tm_mon + 1) tm.tm_mday tm.tm_hour
                                  tm.tm_min tm.tm_sec
                            in
                            match Consort_local.write_file f (line ^ "\n") with
                            | () ->
                                Fmt.pr "  kept in %s@." f;
                                0
                            | exception (Sys_error m | Unix.Unix_error (_, m, _)) ->
                                refused "bench proc: --save %s: %s" d m))))))

let bench =
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 20
      & info [ "rounds" ] ~docv:"N" ~doc:"Rounds, each starting the program each way.")
  in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  let save =
    Arg.(
      value
      & opt (some string) None
      & info [ "save" ] ~docv:"DIR"
          ~doc:"Also keep the JSON line in $(i,DIR)/proc-$(i,DATE)-$(i,TIME).json (UTC).")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench proc" "proc"
       ~doc:
         "Process start latency through a process server (file and process servers on loopback) \
          beside starting ocamlrun locally, in the same run: warm (the client's session open, the \
          program cached by the server), through consort-exec and consort cap exec (a new client \
          process each time, the program cached), and the first start (program fetched). Wall \
          times and, for the processes the bench waits for, CPU times.")
    Term.(const bench_proc $ rounds $ json $ save)
