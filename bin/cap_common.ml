(* What the capability commands share: the root capability, and capabilities named by path. *)
open Consort_cap
module Dir_client = Consort_capdir.Dir_client
module Path = Consort_capdir.Path
module Loop = Consort_engine.Loop

(* Exit statuses of the capability commands: 0 done, 2 refused (nothing was done), 3 outcome
   unknown; the reason on one line of standard error (Consort_capexec's, consort-exec's). *)
let refused = Consort_capexec.refused
let unknown = Consort_capexec.unknown

(* The root capability, and capabilities named by path: Consort_capexec's (consort-exec's). *)
let parse = Consort_capexec.parse
let root_cap = Consort_capexec.root_cap
let is_cap = Consort_capexec.is_cap
let path_error = Consort_capexec.path_error
let resolve = Consort_capexec.resolve

(* A server's event loop, stopped by SIGTERM or SIGINT: [let run = serve_until_signal loop in
   ...; run ()]. The handlers are set at once and their flag is the loop's [until], so a signal
   that comes before [run] (while the server prints its first lines: [Loop.run] clears an earlier
   [Loop.stop]) still stops it. *)
let serve_until_signal loop =
  let stopping = ref false in
  let stop _ =
    stopping := true;
    Loop.stop loop
  in
  Sys.set_signal Sys.sigterm (Sys.Signal_handle stop);
  Sys.set_signal Sys.sigint (Sys.Signal_handle stop);
  fun () -> if not !stopping then Loop.run ~until:(fun () -> !stopping) loop

(* The command line the capability commands share. *)

(* The RPC tunables, set from --params before a command runs. *)
let rpc_config = Consort_capexec.rpc_config

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
