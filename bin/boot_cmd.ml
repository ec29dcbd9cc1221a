open Cmdliner
open Consort_cap
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Rpc_udp
module Decl = Consort_capboot.Decl
module Boot = Consort_capboot.Boot

let refused = Cap_common.refused

let check file =
  match Decl.load file with
  | Error e -> refused "%s" e
  | Ok services ->
      List.iter
        (fun (s : Decl.service) ->
          Fmt.pr "%s%s@." s.name
            (if s.after = [] then "" else " after " ^ String.concat "," s.after))
        services;
      0

let load_secret file =
  match Consort_local.read_file file with
  | s -> Cap.Secret.of_raw s
  | exception Sys_error _ -> (
      let s = Cap.Secret.generate () in
      try
        let oc = open_out_gen [ Open_wronly; Open_creat; Open_excl; Open_binary ] 0o600 file in
        output_string oc (Cap.Secret.to_raw s);
        close_out oc;
        Ok s
      with Sys_error e -> Error e)

let serve decl data bind locate =
  match Decl.load decl with
  | Error e -> refused "%s" e
  | Ok services -> (
      if not (Sys.file_exists data && Sys.is_directory data) then
        refused "%s: no such directory" data
      else
        match
          ( Port.Key.load_or_create (Filename.concat data "port.key"),
            load_secret (Filename.concat data "server.secret") )
        with
        | Error m, _ | _, Error m -> refused "%s: %s" data m
        | Ok key, Ok secret -> (
            let loop = Loop.create () in
            let config = { Rpc.default_config with silence = Consort.Time.of_sec 2. } in
            let locate =
              String.concat ","
                (List.concat_map (fun (s : Decl.service) -> s.at) services
                @ Rpc.locate_list ?arg:locate ())
            in
            match R.open_node ~config ~locate ~bind loop with
            | Error m -> refused "cannot serve on %s: %s" bind m
            | Ok node ->
                let port = Port.Key.port key in
                let on_change name st detail =
                  Fmt.pr "%s %s%s@." name (Boot.state_name st)
                    (if detail = "" then "" else " " ^ detail)
                in
                let boot = Boot.create ~log_dir:data ~on_change loop node services in
                let objects =
                  {
                    Std.secret = (fun o -> if o = 0 then Some secret else None);
                    info = (fun _ -> "consort boot server");
                    destroy = (fun _ -> `Denied);
                    touch = ignore;
                    age = ignore;
                    status = (fun () -> Boot.status boot);
                  }
                in
                let srv = R.serve node key in
                R.serve_std srv objects (fun r -> R.putrep r (Header.reply `Combad) "");
                let stop _ = Loop.stop loop in
                Sys.set_signal Sys.sigterm (Sys.Signal_handle stop);
                Sys.set_signal Sys.sigint (Sys.Signal_handle stop);
                Fmt.pr "server %s@." (Cap.to_string (Cap.owner port ~obj:0 secret));
                Fmt.epr "consort: boot server for port %s on %s, %d services@." (Port.to_hex port)
                  (Udp.address_to_string (R.address node))
                  (List.length services);
                Boot.start boot;
                Loop.run loop;
                Boot.stop boot;
                R.close node;
                0))

let exits =
  Cmd.Exit.info 0 ~doc:"done."
  :: Cmd.Exit.info 2
       ~doc:"refused (a bad declaration file, directory or address): nothing was started."
  :: List.filter (fun i -> Cmd.Exit.info_code i > 3) Cmd.Exit.defaults

let decl_arg =
  Arg.(
    required
    & opt (some string) None
    & info [ "decl" ] ~docv:"FILE" ~doc:"The declaration file (see $(b,consort cap boot check)).")

let locate =
  Arg.(
    value
    & opt (some string) None
    & info [ "locate" ] ~docv:"ADDR:PORT,..."
        ~doc:
          "Where to locate the services' ports, beside their $(b,at) lines (default: \
           $(b,CONSORT_LOCATE)).")

let serve_cmd =
  let data =
    Cap_common.data_arg
      ~doc:"The boot server's directory: its key, and one log per service ($(i,NAME).log)."
  in
  let bind = Cap_common.bind_arg ~doc:"Where to answer std_status." in
  Cmd.v
    (Consort_cli.info ~path:"cap boot serve" "serve" ~exits
       ~doc:
         "Run a boot server: start the declared services in dependency order, poll each with \
          std_status, restart what fails with back-off. Its first line on standard output is \
          $(b,server CAP) (std_status on it lists every service's state); then one line per change \
          of state: $(i,NAME STATE DETAIL), STATE one of cold, starting, up, restarting, down. \
          SIGTERM stops the services, dependents first.")
    Term.(
      const (fun d a b l () -> serve d a b l)
      $ decl_arg $ data $ bind $ locate $ Consort_cli.logging)

let check_cmd =
  let file =
    Arg.(required & pos 0 (some string) None & info [] ~docv:"FILE" ~doc:"The declaration file.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap boot check" "check" ~exits
       ~doc:
         "Check a declaration file and print its services in the order they start. A declaration \
          is $(b,service NAME) followed by $(b,run PROGRAM ARGS...) ($(b,\\$NAME) is that \
          service's capability), and optionally $(b,after NAMES...), $(b,at ADDR:PORT), $(b,cap \
          NAME=CAP), $(b,env VAR=VALUE), $(b,capability stdout|none), $(b,restart \
          always|on-failure|never), $(b,backoff MIN MAX), $(b,poll SECONDS), $(b,start-timeout \
          SECONDS).")
    Term.(const check $ file)

let cmd =
  Cmd.group
    (Cmd.info "boot" ~exits:Consort_cli.exits ~doc:"The boot server.")
    [ serve_cmd; check_cmd ]
