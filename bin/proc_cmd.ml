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

(* consort cap agent: the starts of consort-exec, warm (Consort_capagent). *)
let agent = Consort_capagent.cmd

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
