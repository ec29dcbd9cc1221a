(* What the capability commands share: the root capability, and capabilities named by path. *)
open Consort_cap
module Dir_client = Consort_capdir.Dir_client
module Path = Consort_capdir.Path
module Loop = Consort_engine.Loop

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

(* A capability given on the command line: as text, or as a path from the root directory. *)
let resolve ~config ?locate ?root what s =
  if is_cap s then parse what s
  else
    match root_cap root with
    | Error m -> Error (Printf.sprintf "%s %s: %s" what s m)
    | Ok r -> (
        let loop = Loop.create () in
        match Rpc_udp.open_node ~config ?locate loop with
        | Error m -> Error m
        | Ok node ->
            Fun.protect
              ~finally:(fun () -> Rpc_udp.close node)
              (fun () ->
                let c =
                  Dir_client.create (fun ~idempotent h d -> Rpc_udp.Sync.trans node ~idempotent h d)
                in
                match Dir_client.resolve c r s with
                | Ok cap -> Ok cap
                | Error e -> Error (Printf.sprintf "%s %s: %s" what s (path_error e))))

(* The command line the capability commands share. *)

(* The RPC tunables, set from --params before a command runs. *)
let rpc_config = ref Rpc.default_config

(* Exit statuses 0, 2 and 3, with what refused and unknown mean to a command. *)
let exits_with ~refused ~unknown =
  let open Cmdliner in
  Cmd.Exit.info 0 ~doc:"done." :: Cmd.Exit.info 2 ~doc:refused :: Cmd.Exit.info 3 ~doc:unknown
  :: Consort_cli.command_line_exits

let exits =
  exits_with
    ~refused:
      "refused (bad capability, too few rights, not found, an output that cannot be written, ...): \
       nothing was done."
    ~unknown:"outcome unknown: the server became unreachable during the request."

let locate =
  Cmdliner.Arg.(
    value
    & opt (some string) None
    & info [ "locate" ] ~docv:"ADDR:PORT,..."
        ~doc:
          "Where to ask for servers' ports (default: the $(b,CONSORT_LOCATE) environment variable).")

let locate_env =
  Cmdliner.Cmd.Env.info "CONSORT_LOCATE"
    ~doc:"Where to ask for servers' ports ($(i,ADDR:PORT,...)), when $(b,--locate) is not given."

let params_arg_with ~doc =
  Cmdliner.Arg.(value & opt (some string) None & info [ "params" ] ~docv:"NAME=VALUE,..." ~doc)

let params_arg = params_arg_with ~doc:"RPC tunables ($(b,rpc.*), listed by $(b,consort params))."

(* [configured t]: the command [t] with --params ([params]) applied first, after [setup ()]. *)
let configured ?(setup = ignore) ?(params = params_arg) t =
  let run params f =
    setup ();
    match params with
    | None -> f ()
    | Some s -> (
        match Consort.Params.of_string s with
        | Error e -> refused "--params: %a" Consort.Params.pp_error e
        | Ok p ->
            rpc_config := Rpc.config_of_params p;
            f ())
  in
  Cmdliner.Term.(const run $ params $ t)

(* A server's --data (required), --bind (0.0.0.0:0 by default) and --key. *)
let data_arg ~doc =
  Cmdliner.Arg.(required & opt (some string) None & info [ "data" ] ~docv:"DIR" ~doc)

let bind_arg ~doc =
  Cmdliner.Arg.(value & opt string "0.0.0.0:0" & info [ "bind" ] ~docv:"ADDR:PORT" ~doc)

let key_arg ~doc = Cmdliner.Arg.(value & opt (some string) None & info [ "key" ] ~docv:"FILE" ~doc)
