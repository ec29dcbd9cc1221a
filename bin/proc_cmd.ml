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
                    (* A signal before [Loop.run] (which clears a stop) still stops it. *)
                    let stopping = ref false in
                    let stop _ =
                      stopping := true;
                      Loop.stop loop
                    in
                    Sys.set_signal Sys.sigterm (Sys.Signal_handle stop);
                    Sys.set_signal Sys.sigint (Sys.Signal_handle stop);
                    Fmt.pr "server %s@." (Cap.to_string (Proc_server.server_cap t));
                    Fmt.epr "consort: process server for port %s on %s (ocamlrun %s)@."
                      (Port.to_hex (Port.Key.port key))
                      (Udp.address_to_string (R.address node))
                      config.ocamlrun;
                    Fmt.epr "consort: %s@." (Proc_server.confinement t);
                    if not !stopping then Loop.run ~until:(fun () -> !stopping) loop;
                    Proc_server.shutdown t;
                    R.close node;
                    0)))

let default_root () =
  match Sys.getenv_opt "CONSORT_ROOT" with
  | Some s when String.trim s <> "" -> Some (String.trim s)
  | _ -> (
      match Sys.getenv_opt "HOME" with
      | None -> None
      | Some h -> (
          let f = Filename.concat (Filename.concat h ".consort") "root" in
          match open_in f with
          | exception Sys_error _ -> None
          | ic ->
              let l = try Some (String.trim (input_line ic)) with End_of_file -> None in
              close_in ic;
              l))

(* consort cap exec SERVER PROGRAM ARGS... *)
let exec locate server program args caps root with_root cpu memory time no_stdin show_cap =
  (if no_stdin then fun k -> k () else Consort_cli.with_stdin ~instead:"-n" "cap exec") @@ fun () ->
  let ( let* ) r f = match r with Error m -> refused "%s" m | Ok v -> f v in
  let resolve what s = Cap_common.resolve ~config:!rpc_config ?locate ?root what s in
  let* server = resolve "SERVER" server in
  let* program = resolve "PROGRAM" program in
  let* caps =
    List.fold_left
      (fun acc s ->
        match acc with
        | Error _ -> acc
        | Ok l -> (
            match String.index_opt s '=' with
            | None -> Error (Printf.sprintf "--cap %s: expected NAME=CAP" s)
            | Some i -> (
                let name = String.sub s 0 i
                and v = String.sub s (i + 1) (String.length s - i - 1) in
                if not (Pd.valid_name name) then
                  Error
                    (Printf.sprintf "--cap %s: a name is 1-32 characters of a-z, 0-9, _ . -" name)
                else if List.mem name [ "stdin"; "stdout"; "stderr" ] then
                  Error (Printf.sprintf "--cap %s: the standard streams are the terminal's" name)
                else
                  match parse_cap ("--cap " ^ name) v with
                  | Ok c -> Ok ((name, c) :: l)
                  | Error e -> Error e)))
      (Ok []) caps
  in
  let caps = List.rev caps in
  let* caps =
    match (root, List.mem_assoc "root" caps) with
    | _, true -> Ok caps
    | Some r, false -> Result.map (fun c -> ("root", c) :: caps) (parse_cap "--root" r)
    | None, false when not with_root -> Ok caps
    | None, false -> (
        match default_root () with
        | None -> Error "--with-root: no root (set CONSORT_ROOT or ~/.consort/root)"
        | Some r -> Result.map (fun c -> ("root", c) :: caps) (parse_cap "CONSORT_ROOT" r))
  in
  let ms s = int_of_float (s *. 1000.) in
  let limits = { Pd.cpu_ms = ms cpu; memory_kib = memory * 1024; run_ms = ms time } in
  let* _ = Pd.encode { Pd.arch = Pd.arch_bytecode; program; args; caps; limits; hints = [] } in
  let loop = Loop.create () in
  match R.open_node ~config:!rpc_config ?locate loop with
  | Error m -> refused "%s" m
  | Ok node -> (
      let interrupted = ref false in
      Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> interrupted := true));
      let interrupt () =
        let i = !interrupted in
        interrupted := false;
        i
      in
      let started c = if show_cap then Fmt.epr "consort: process %s@." (Cap.to_string c) in
      let stdin = if no_stdin then None else Some Unix.stdin in
      let control =
        if no_stdin then Result.to_option (R.open_node ~config:!rpc_config ?locate loop) else None
      in
      let r =
        Proc_client.exec node ?control ~server ~program ~args ~caps ~limits ?stdin ~interrupt
          ~started ()
      in
      Option.iter R.close control;
      R.close node;
      match r with
      | Error (`Refused _ as e) -> refused "exec: %a" Proc_client.pp_error e
      | Error (`Unknown _ as e) -> unknown "exec: %a" Proc_client.pp_error e
      | Ok o -> (
          match o.kind with
          | P.Exited -> o.code
          | P.Signaled | P.Limit | P.Killed ->
              Fmt.epr "consort: the program %s@." o.text;
              if o.kind = P.Signaled then 128 + o.code else 137
          | P.Failed -> unknown "the program %s" o.text))

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

let exec =
  let server =
    Arg.(
      required
      & pos 0 (some string) None
      & info [] ~docv:"SERVER"
          ~doc:"The process server's capability, or its path from the root directory.")
  in
  let program =
    Arg.(
      required
      & pos 1 (some string) None
      & info [] ~docv:"PROGRAM"
          ~doc:
            "The program's bytecode file on a file server: its capability, or its path from the \
             root directory ($(b,/bin/hello)).")
  in
  let args =
    Arg.(
      value & pos_right 1 string []
      & info [] ~docv:"ARG" ~doc:"The program's arguments (after $(b,--) if one starts with -).")
  in
  let caps =
    Arg.(
      value & opt_all string []
      & info [ "cap" ] ~docv:"NAME=CAP"
          ~doc:"A named capability for the program's environment (repeatable).")
  in
  let root =
    Arg.(
      value
      & opt (some string) None
      & info [ "root" ] ~docv:"CAP"
          ~doc:"The program's root directory (none by default; see $(b,--with-root)).")
  in
  let with_root =
    Arg.(
      value & flag
      & info [ "with-root" ]
          ~doc:
            "Give the program this user's root directory ($(b,CONSORT_ROOT), or the first line of \
             ~/.consort/root). Without it (or $(b,--root), or $(b,--cap root=)), the program gets \
             no root: it holds only the capabilities given to it.")
  in
  let cpu =
    Arg.(
      value
      & opt Consort_cli.positive_float 60.
      & info [ "cpu" ] ~docv:"SECONDS" ~doc:"CPU time limit (whole seconds, rounded up).")
  in
  let memory =
    Arg.(
      value & opt Consort_cli.positive_int 1024
      & info [ "memory" ] ~docv:"MB" ~doc:"Address space limit.")
  in
  let time =
    Arg.(
      value
      & opt Consort_cli.positive_float 3600.
      & info [ "time" ] ~docv:"SECONDS" ~doc:"Run time limit.")
  in
  let no_stdin =
    Arg.(
      value & flag
      & info [ "n"; "no-stdin" ]
          ~doc:"Give the program no input (it reads end of file) instead of this standard input.")
  in
  let show =
    Arg.(
      value & flag
      & info [ "show-cap" ]
          ~doc:
            "Print the process's capability on standard error once it runs (for $(b,consort cap \
             kill)).")
  in
  let exits =
    Cmd.Exit.info 0 ~doc:"the program exited with 0 (otherwise: the program's own exit code)."
    :: Cmd.Exit.info 2
         ~doc:
           "refused (bad capability, not a bytecode program, too many processes, ...): nothing \
            runs."
    :: Cmd.Exit.info 3
         ~doc:"outcome unknown: the process server became unreachable (the program may be running)."
    :: Cmd.Exit.info 137
         ~doc:"the program was stopped for a limit or killed (why is printed); 128+N for signal N."
    :: Consort_cli.command_line_exits
  in
  let envs =
    Cmd.Env.info "CONSORT_ROOT"
      ~doc:"The root directory's capability, when $(b,--root) is not given."
    :: envs
  in
  Cmd.v
    (Consort_cli.info ~path:"cap exec" "exec" ~exits ~envs
       ~doc:
         "Run a bytecode program on a process server, its standard streams connected to this \
          terminal by virtual circuits; exits with the program's exit code. Ctrl-C interrupts the \
          program (SIGINT).")
    (configured
    @@ Term.(
         const (fun l s p a c r wr cpu m t n sh () () -> exec l s p a c r wr cpu m t n sh)
         $ locate $ server $ program $ args $ caps $ root $ with_root $ cpu $ memory $ time
         $ no_stdin $ show $ Consort_cli.logging))

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

let bench_proc rounds json =
  let exe = Sys.executable_name in
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
      | [ "server"; c ] -> Cap.of_string c |> Result.to_option
      | _ -> None
    in
    Unix.mkdir (dir / "fs") 0o700;
    Unix.mkdir (dir / "ps") 0o700;
    let fsa = free_port () and psa = free_port () in
    match
      ( start [ "cap"; "fs"; "serve"; "--data"; dir / "fs"; "--bind"; fsa ],
        start
          ([ "cap"; "proc"; "serve"; "--data"; dir / "ps"; "--bind"; psa; "--locate"; fsa ]
          (* as root without make deps' user: nobody's uid and gid *)
          @
          if Unix.geteuid () = 0 && Result.is_error (program_user None) then
            [ "--user"; "65534:65534" ]
          else []) )
    with
    | None, _ | _, None -> refused "bench proc: the servers did not start"
    | Some fs, Some ps -> (
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
                let local () =
                  let t0 = Unix.gettimeofday () in
                  let pid =
                    Unix.create_process ocamlrun [| ocamlrun; byte |] devnull devnull devnull
                  in
                  if not (wait_ok pid) then failwith "ocamlrun failed";
                  Unix.gettimeofday () -. t0
                in
                let remote () =
                  let t0 = Unix.gettimeofday () in
                  match
                    Proc_client.exec node ~server:ps ~program ~stdout:ignore ~stderr:ignore ()
                  with
                  | Ok { Proc_client.kind = P.Exited; code = 0; _ } -> Unix.gettimeofday () -. t0
                  | Ok o -> failwith o.Proc_client.text
                  | Error e -> failwith (Fmt.str "%a" Proc_client.pp_error e)
                in
                let cli () =
                  let t0 = Unix.gettimeofday () in
                  let env =
                    Array.append
                      [| "CONSORT_LOCATE=" ^ fsa ^ "," ^ psa; "CONSORT_MULTICAST=off" |]
                      (Unix.environment ())
                  in
                  let pid =
                    Unix.create_process_env exe
                      [| exe; "cap"; "exec"; "-n"; Cap.to_string ps; Cap.to_string program |]
                      env devnull devnull devnull
                  in
                  if not (wait_ok pid) then failwith "consort cap exec failed";
                  Unix.gettimeofday () -. t0
                in
                (* The floor of cap exec: this binary starting and exiting. *)
                let bare () =
                  let t0 = Unix.gettimeofday () in
                  let pid =
                    Unix.create_process exe [| exe; "--version" |] devnull devnull devnull
                  in
                  if not (wait_ok pid) then failwith "consort --version failed";
                  Unix.gettimeofday () -. t0
                in
                let bares = ref [] in
                match
                  ignore (local ());
                  ignore (remote ());
                  List.init rounds (fun _ ->
                      bares := bare () :: !bares;
                      (local (), remote (), cli ()))
                with
                | exception Failure m -> refused "bench proc: %s" m
                | rs ->
                    let med f =
                      let a = Array.of_list (List.map f rs) in
                      Array.sort compare a;
                      a.(Stdlib.( / ) (Array.length a) 2)
                    in
                    let ms x = x *. 1000. in
                    let l = med (fun (l, _, _) -> l)
                    and r = med (fun (_, r, _) -> r)
                    and c = med (fun (_, _, c) -> c) in
                    let ratio = r /. l in
                    let b =
                      let a = Array.of_list !bares in
                      Array.sort compare a;
                      a.(Stdlib.( / ) (Array.length a) 2)
                    in
                    Fmt.pr
                      "Process start: a %d-byte bytecode program that exits at once, %d rounds \
                       (medians)@."
                      size rounds;
                    Fmt.pr "  %-58s %8.2f ms@." "ocamlrun locally (fork, exec, run, wait)" (ms l);
                    Fmt.pr "  %-58s %8.2f ms  ratio %.1f@."
                      "through the process server (fetch, check, run, exit code)" (ms r) ratio;
                    Fmt.pr "  %-58s %8.2f ms  ratio %.1f@."
                      "consort cap exec (a new client process as well)" (ms c) (c /. l);
                    Fmt.pr "  %-58s %8.2f ms  ratio %.1f@."
                      "consort --version (the binary alone: cap exec's floor)" (ms b) (b /. l);
                    if json then
                      Fmt.pr
                        "{\"bench\":\"proc\",\"rounds\":%d,\"local_ms\":%.3f,\"remote_ms\":%.3f,\"cli_ms\":%.3f,\"binary_ms\":%.3f,\"ratio\":%.2f,\"cli_ratio\":%.2f}@."
                        rounds (ms l) (ms r) (ms c) (ms b) ratio (c /. l);
                    0)))

let bench =
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 20
      & info [ "rounds" ] ~docv:"N" ~doc:"Rounds, each starting the program each way.")
  in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  Cmd.v
    (Consort_cli.info ~path:"bench proc" "proc"
       ~doc:
         "Process start latency through a process server (file and process servers on loopback) \
          beside starting ocamlrun locally.")
    Term.(const bench_proc $ rounds $ json)
