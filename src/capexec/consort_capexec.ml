open Cmdliner
open Consort_cap
module Loop = Consort_engine.Loop
module R = Rpc_udp
module Pd = Consort_capproc.Pd
module Proc_client = Consort_capproc.Proc_client
module P = Consort_capproc.Proc_proto
module Dir_client = Consort_capdir.Dir_client
module Path = Consort_capdir.Path

let rpc_config = ref Rpc.default_config

(* Exit statuses of the capability commands: 0 done, 2 refused (nothing was done), 3 outcome
   unknown; the reason on one line of standard error. *)
let refused fmt =
  Fmt.kstr
    (fun s ->
      Fmt.epr "consort: %s@." (Consort_cli.one_line s);
      2)
    fmt

let unknown fmt =
  Fmt.kstr
    (fun s ->
      Fmt.epr "consort: %s@." (Consort_cli.one_line s);
      3)
    fmt

(* Where a command reads its environment and writes its messages and the program's output: this
   process's own ([consort cap exec], [consort-exec-ml]), or a client's, for the agent
   ([Consort_capagent]), which passes its warm nodes. *)
type host = {
  getenv : string -> string option;
  root_file : string -> string option;
  say : string -> unit;
  stdout : (string -> unit) option;
  stderr : (string -> unit) option;
  output : ((string -> (unit -> unit) -> unit) * (string -> (unit -> unit) -> unit)) option;
  stdin : Unix.file_descr;
  with_stdin : (unit -> int) -> int;
  interrupt : unit -> unit -> bool;
  hangup : unit -> bool;
  nodes :
    ?locate:string ->
    control:bool ->
    unit ->
    (R.node * R.node option * (unit -> unit), string) result;
  circuits : Proc_client.circuits option;
}

let own_nodes ?locate ~control () =
  let loop = Loop.create () in
  match R.open_node ~config:!rpc_config ?locate loop with
  | Error m -> Error m
  | Ok node ->
      let control =
        if control then Result.to_option (R.open_node ~config:!rpc_config ?locate loop) else None
      in
      Ok
        ( node,
          control,
          fun () ->
            Option.iter R.close control;
            R.close node )

let own_host =
  {
    getenv = Sys.getenv_opt;
    root_file = (fun f -> if Sys.file_exists f then Some (Consort_local.read_file f) else None);
    say = (fun s -> Fmt.epr "consort: %s@." s);
    stdout = None;
    stderr = None;
    output = None;
    stdin = Unix.stdin;
    with_stdin = Consort_cli.with_stdin ~instead:"-n" "cap exec";
    interrupt =
      (fun () ->
        let interrupted = ref false in
        Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> interrupted := true));
        fun () ->
          let i = !interrupted in
          interrupted := false;
          i);
    hangup = (fun () -> false);
    nodes = own_nodes;
    circuits = None;
  }

let refused_on host fmt =
  Fmt.kstr
    (fun s ->
      host.say (Consort_cli.one_line s);
      2)
    fmt

let unknown_on host fmt =
  Fmt.kstr
    (fun s ->
      host.say (Consort_cli.one_line s);
      3)
    fmt

let root_file host =
  match host.getenv "HOME" with Some h -> Some (Filename.concat h ".consort/root") | None -> None

let parse what s =
  match Cap.of_string (String.trim s) with
  | Ok c -> Ok c
  | Error e -> Error (Fmt.str "%s: bad capability: %a" what Cap.pp_decode_error e)

let root_cap_on host root =
  match root with
  | Some s -> parse "--root" s
  | None -> (
      match host.getenv "CONSORT_ROOT" with
      | Some s when String.trim s <> "" -> parse "CONSORT_ROOT" s
      | _ -> (
          let none () =
            Error "no root capability: give --root, set CONSORT_ROOT or write it to ~/.consort/root"
          in
          match root_file host with
          | None -> none ()
          | Some f -> (
              match host.root_file f with
              | None -> none ()
              | Some s -> (
                  (* The first line: the file may hold notes after it. *)
                  match String.split_on_char '\n' s with
                  | l :: _ -> parse f l
                  | [] -> parse f s)
              | exception Sys_error e -> Error e)))

let root_cap root = root_cap_on own_host root
let is_cap s = String.length s >= 5 && String.sub s 0 5 = "cap1:"
let path_error e = Fmt.str "%a" (Path.pp_error Dir_client.pp_error) e

let resolve_on host ?locate ?root what s =
  if is_cap s then parse what s
  else
    match root_cap_on host root with
    | Error m -> Error (Printf.sprintf "%s %s: %s" what s m)
    | Ok r -> (
        match host.nodes ?locate ~control:false () with
        | Error m -> Error m
        | Ok (node, _, release) ->
            Fun.protect ~finally:release (fun () ->
                let c =
                  Dir_client.create (fun ~idempotent h d -> R.Sync.trans node ~idempotent h d)
                in
                match Dir_client.resolve c r s with
                | Ok cap -> Ok cap
                | Error e -> Error (Printf.sprintf "%s %s: %s" what s (path_error e))))

let resolve ~config ?locate ?root what s =
  let nodes ?locate ~control () =
    let saved = !rpc_config in
    rpc_config := config;
    Fun.protect ~finally:(fun () -> rpc_config := saved) (fun () -> own_nodes ?locate ~control ())
  in
  resolve_on { own_host with nodes } ?locate ?root what s

(* The caller's own root, given to the program only with --with-root. *)
let default_root host =
  match host.getenv "CONSORT_ROOT" with
  | Some s when String.trim s <> "" -> Some (String.trim s)
  | _ -> (
      match root_file host with
      | None -> None
      | Some f -> (
          match host.root_file f with
          | exception Sys_error _ -> None
          | None | Some "" -> None
          | Some s -> (
              match String.index_opt s '\n' with
              | Some i -> Some (String.trim (String.sub s 0 i))
              | None -> Some (String.trim s))))

type request = {
  locate : string option;
  server : string;
  program : string;
  args : string list;
  caps : string list;
  root : string option;
  with_root : bool;
  cpu : float;
  memory : int;
  time : float;
  no_stdin : bool;
  show_cap : bool;
}

(* What a start needs, checked and resolved before anything runs: the exit status of a refusal
   (said on [host]) otherwise. *)
type prepared = {
  p_server : Cap.t;
  p_program : Cap.t;
  p_args : string list;
  p_caps : (string * Cap.t) list;
  p_limits : Pd.limits;
  p_locate : string option;
  p_no_stdin : bool;
  p_show_cap : bool;
}

let prepare host
    { locate; server; program; args; caps; root; with_root; cpu; memory; time; no_stdin; show_cap }
    =
  let refused fmt = refused_on host fmt in
  let ( let* ) r f = match r with Error m -> Error (refused "%s" m) | Ok v -> f v in
  let resolve what s = resolve_on host ?locate ?root what s in
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
                  match parse ("--cap " ^ name) v with
                  | Ok c -> Ok ((name, c) :: l)
                  | Error e -> Error e)))
      (Ok []) caps
  in
  let caps = List.rev caps in
  let* caps =
    match (root, List.mem_assoc "root" caps) with
    | _, true -> Ok caps
    | Some r, false -> Result.map (fun c -> ("root", c) :: caps) (parse "--root" r)
    | None, false when not with_root -> Ok caps
    | None, false -> (
        match default_root host with
        | None -> Error "--with-root: no root (set CONSORT_ROOT or ~/.consort/root)"
        | Some r -> Result.map (fun c -> ("root", c) :: caps) (parse "CONSORT_ROOT" r))
  in
  let ms s = int_of_float (s *. 1000.) in
  let limits = { Pd.cpu_ms = ms cpu; memory_kib = memory * 1024; run_ms = ms time } in
  let* _ = Pd.encode { Pd.arch = Pd.arch_bytecode; program; args; caps; limits; hints = [] } in
  Ok
    {
      p_server = server;
      p_program = program;
      p_args = args;
      p_caps = caps;
      p_limits = limits;
      p_locate = locate;
      p_no_stdin = no_stdin;
      p_show_cap = show_cap;
    }

(* The exit status of a start's end, why said on [host]. *)
let status host r =
  let refused fmt = refused_on host fmt and unknown fmt = unknown_on host fmt in
  match r with
  | Error (`Refused _ as e) -> refused "exec: %a" Proc_client.pp_error e
  | Error (`Unknown _ as e) -> unknown "exec: %a" Proc_client.pp_error e
  | Ok o -> (
      match o.Proc_client.kind with
      | P.Exited -> o.code
      | P.Signaled | P.Limit | P.Killed ->
          host.say ("the program " ^ o.text);
          if o.kind = P.Signaled then 128 + o.code else 137
      | P.Failed -> unknown "the program %s" o.text)

(* Runs [p] on [host]'s nodes: [exec] waits for the end, [start] does not. *)
let launch host p exec k =
  match host.nodes ?locate:p.p_locate ~control:p.p_no_stdin () with
  | Error m -> k (refused_on host "%s" m)
  | Ok (node, control, release) ->
      let interrupt = host.interrupt () in
      let started c = if p.p_show_cap then host.say ("process " ^ Cap.to_string c) in
      let stdin = if p.p_no_stdin then None else Some host.stdin in
      exec node ?control ?circuits:host.circuits ~server:p.p_server ~program:p.p_program
        ~args:p.p_args ~caps:p.p_caps ~limits:p.p_limits ?stdin ?stdout:host.stdout
        ?stderr:host.stderr ~interrupt ~hangup:host.hangup ~started (fun r ->
          release ();
          k (status host r))

let run host req =
  (if req.no_stdin then fun k -> k () else host.with_stdin) @@ fun () ->
  match prepare host req with
  | Error code -> code
  | Ok p ->
      let code = ref 2 in
      launch host p
        (fun node ?control ?circuits ~server ~program ~args ~caps ~limits ?stdin ?stdout ?stderr
             ~interrupt ~hangup ~started k ->
          k
            (Proc_client.exec node ?control ?circuits ~server ~program ~args ~caps ~limits ?stdin
               ?stdout ?stderr ~interrupt ~hangup ~started ()))
        (fun c -> code := c);
      !code

let start host req k =
  match prepare host req with
  | Error code -> k code
  | Ok p ->
      launch host p
        (fun node ?control ?circuits ~server ~program ~args ~caps ~limits ?stdin ?stdout ?stderr
             ~interrupt ~hangup ~started k ->
          Proc_client.start node ?control ?circuits ~server ~program ~args ~caps ~limits ?stdin
            ?stdout ?stderr ?output:host.output ~interrupt ~hangup ~started k)
        k

(* The command line. *)

let locate =
  Arg.(
    value
    & opt (some string) None
    & info [ "locate" ] ~docv:"ADDR:PORT,..."
        ~doc:
          "Where to ask for servers' ports (default: the $(b,CONSORT_LOCATE) environment variable).")

let params =
  Arg.(
    value
    & opt (some string) None
    & info [ "params" ] ~docv:"NAME=VALUE,..."
        ~doc:"RPC tunables ($(b,rpc.*), listed by $(b,consort params)).")

let configured t =
  let run params f =
    match params with
    | None -> f ()
    | Some s -> (
        match Consort.Params.of_string s with
        | Error e -> refused "--params: %a" Consort.Params.pp_error e
        | Ok p ->
            rpc_config := Rpc.config_of_params p;
            f ())
  in
  Term.(const run $ params $ t)

let request_term =
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
  Term.(
    const (fun locate server program args caps root with_root cpu memory time no_stdin show_cap ->
        {
          locate;
          server;
          program;
          args;
          caps;
          root;
          with_root;
          cpu;
          memory;
          time;
          no_stdin;
          show_cap;
        })
    $ locate $ server $ program $ args $ caps $ root $ with_root $ cpu $ memory $ time $ no_stdin
    $ show)

let exec_info ~name ~path =
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
    [
      Cmd.Env.info "CONSORT_ROOT"
        ~doc:"The root directory's capability, when $(b,--root) is not given.";
      Cmd.Env.info "CONSORT_LOCATE"
        ~doc:
          "Where to ask for servers' ports ($(i,ADDR:PORT,...)), when $(b,--locate) is not given.";
      Cmd.Env.info "CONSORT_AGENT"
        ~doc:
          "$(b,consort-exec) only: the socket of the $(b,consort cap agent) to ask (default: \
           $(b,\\$XDG_RUNTIME_DIR/consort/agent.sock), else $(b,~/.consort/agent.sock)), or \
           $(b,off) for none.";
      Cmd.Env.info "CONSORT_MULTICAST"
        ~doc:"The IP multicast group where servers listen for locates and clients ask, or $(b,off).";
    ]
  in
  Consort_cli.info ~path name ~exits ~envs
    ~doc:
      "Run a bytecode program on a process server, its standard streams connected to this terminal \
       by virtual circuits; exits with the program's exit code. Ctrl-C interrupts the program \
       (SIGINT). $(b,consort-exec) is the same command in a small binary of its own, which starts \
       faster than $(b,consort): it has this user's $(b,consort cap agent) run the start when one \
       runs (CONSORT_AGENT names its socket, $(b,off) none), else $(b,consort-exec-ml)."

let exec_cmd ~name ~path =
  Cmd.v (exec_info ~name ~path)
    (configured
    @@ Term.(const (fun req () () -> run own_host req) $ request_term $ Consort_cli.logging))

let agent_cmd =
  Cmd.v
    (exec_info ~name:"consort-exec" ~path:"cap exec")
    Term.(
      const (fun p req logs -> (p, req, logs)) $ params $ request_term $ Consort_cli.log_options)
