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

let root_file () =
  match Sys.getenv_opt "HOME" with
  | Some h -> Some (Filename.concat h ".consort/root")
  | None -> None

let parse what s =
  match Cap.of_string (String.trim s) with
  | Ok c -> Ok c
  | Error e -> Error (Fmt.str "%s: bad capability: %a" what Cap.pp_decode_error e)

let root_cap root =
  match root with
  | Some s -> parse "--root" s
  | None -> (
      match Sys.getenv_opt "CONSORT_ROOT" with
      | Some s when String.trim s <> "" -> parse "CONSORT_ROOT" s
      | _ -> (
          match root_file () with
          | Some f when Sys.file_exists f -> (
              match Consort_local.read_file f with
              | s -> (
                  (* The first line: the file may hold notes after it. *)
                  match String.split_on_char '\n' s with
                  | l :: _ -> parse f l
                  | [] -> parse f s)
              | exception Sys_error e -> Error e)
          | _ ->
              Error
                "no root capability: give --root, set CONSORT_ROOT or write it to ~/.consort/root"))

let is_cap s = String.length s >= 5 && String.sub s 0 5 = "cap1:"
let path_error e = Fmt.str "%a" (Path.pp_error Dir_client.pp_error) e

let resolve ~config ?locate ?root what s =
  if is_cap s then parse what s
  else
    match root_cap root with
    | Error m -> Error (Printf.sprintf "%s %s: %s" what s m)
    | Ok r -> (
        let loop = Loop.create () in
        match R.open_node ~config ?locate loop with
        | Error m -> Error m
        | Ok node ->
            Fun.protect
              ~finally:(fun () -> R.close node)
              (fun () ->
                let c =
                  Dir_client.create (fun ~idempotent h d -> R.Sync.trans node ~idempotent h d)
                in
                match Dir_client.resolve c r s with
                | Ok cap -> Ok cap
                | Error e -> Error (Printf.sprintf "%s %s: %s" what s (path_error e))))

(* The caller's own root, given to the program only with --with-root. *)
let default_root () =
  match Sys.getenv_opt "CONSORT_ROOT" with
  | Some s when String.trim s <> "" -> Some (String.trim s)
  | _ -> (
      match root_file () with
      | None -> None
      | Some f -> (
          match open_in f with
          | exception Sys_error _ -> None
          | ic ->
              let l = try Some (String.trim (input_line ic)) with End_of_file -> None in
              close_in ic;
              l))

let exec locate server program args caps root with_root cpu memory time no_stdin show_cap =
  (if no_stdin then fun k -> k () else Consort_cli.with_stdin ~instead:"-n" "cap exec") @@ fun () ->
  let ( let* ) r f = match r with Error m -> refused "%s" m | Ok v -> f v in
  let resolve what s = resolve ~config:!rpc_config ?locate ?root what s in
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
        match default_root () with
        | None -> Error "--with-root: no root (set CONSORT_ROOT or ~/.consort/root)"
        | Some r -> Result.map (fun c -> ("root", c) :: caps) (parse "CONSORT_ROOT" r))
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

let exec_cmd ~name ~path =
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
    [
      Cmd.Env.info "CONSORT_ROOT"
        ~doc:"The root directory's capability, when $(b,--root) is not given.";
      Cmd.Env.info "CONSORT_LOCATE"
        ~doc:
          "Where to ask for servers' ports ($(i,ADDR:PORT,...)), when $(b,--locate) is not given.";
      Cmd.Env.info "CONSORT_MULTICAST"
        ~doc:"The IP multicast group where servers listen for locates and clients ask, or $(b,off).";
    ]
  in
  Cmd.v
    (Consort_cli.info ~path name ~exits ~envs
       ~doc:
         "Run a bytecode program on a process server, its standard streams connected to this \
          terminal by virtual circuits; exits with the program's exit code. Ctrl-C interrupts the \
          program (SIGINT). $(b,consort-exec) is the same command in a small binary of its own, \
          which starts faster than $(b,consort).")
    (configured
    @@ Term.(
         const (fun l s p a c r wr cpu m t n sh () () -> exec l s p a c r wr cpu m t n sh)
         $ locate $ server $ program $ args $ caps $ root $ with_root $ cpu $ memory $ time
         $ no_stdin $ show $ Consort_cli.logging))
