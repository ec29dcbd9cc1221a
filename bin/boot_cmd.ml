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
  match Consort_local.Private.exposed file with
  | Some m -> Error m
  | None -> (
      match Consort_local.read_file file with
      | s -> Cap.Secret.of_raw s
      | exception Sys_error _ -> (
          let s = Cap.Secret.generate () in
          match
            let fd =
              Consort_local.Private.openfile file [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_EXCL ]
            in
            let raw = Cap.Secret.to_raw s in
            Fun.protect
              ~finally:(fun () -> Unix.close fd)
              (fun () -> ignore (Unix.write_substring fd raw 0 (String.length raw)))
          with
          | () -> Ok s
          | exception Unix.Unix_error (e, _, _) -> Error (file ^ ": " ^ Unix.error_message e)))

(* The boot server's directory: made (0700) if missing; its key and secret refused if another
   user could read them. *)
let open_data data =
  match Consort_local.Private.mkdir_p data with
  | exception Unix.Unix_error (e, _, _) -> Error (data ^ ": " ^ Unix.error_message e)
  | () -> (
      if not (Sys.is_directory data) then Error (data ^ ": not a directory")
      else
        match
          ( Port.Key.load_or_create (Filename.concat data "port.key"),
            load_secret (Filename.concat data "server.secret") )
        with
        | Error m, _ | _, Error m -> Error m
        | Ok key, Ok secret -> Ok (key, secret))

let addr_file data = Filename.concat data "address"

(* The capability command: every service's state and the capabilities it printed; needs the
   admin right on the boot server's capability. *)
let boot_capabilities = 2001

let capabilities_text boot =
  String.concat ""
    (List.map
       (fun (name, state, what, cap) ->
         Printf.sprintf "%s %s %s %s\n" name state what
           (match cap with Some c -> Cap.to_string c | None -> "-"))
       (Boot.capabilities boot))

let serve decl data bind locate =
  match Decl.load decl with
  | Error e -> refused "%s" e
  | Ok services -> (
      match open_data data with
      | Error m -> refused "%s" m
      | Ok (key, secret) -> (
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
              R.serve_std srv objects (fun r ->
                  let h = R.header r in
                  if h.Header.command <> boot_capabilities then R.putrep r (Header.reply `Combad) ""
                  else
                    match Std.validate port objects ~need:Rights.admin h with
                    | Error st -> R.putrep r (Header.reply st) ""
                    | Ok _ -> R.putrep r (Header.reply `Ok) (capabilities_text boot));
              (try
                 Consort_local.Private.write_file (addr_file data)
                   (Udp.address_to_string (Udp.query (R.connection node)).Udp.local ^ "\n")
               with Unix.Unix_error _ -> ());
              let run = Cap_common.serve_until_signal loop in
              Fmt.pr "server %s@." (Cap.to_string (Cap.owner port ~obj:0 secret));
              Fmt.epr "consort: boot server for port %s on %s, %d services@." (Port.to_hex port)
                (Udp.address_to_string (R.address node))
                (List.length services);
              Boot.start boot;
              run ();
              Boot.stop boot;
              R.close node;
              0))

(* consort cap boot status: from the boot server's directory (its key and secret give its owner
   capability, [address] where it answers), or from a capability with the admin right. *)
let status_target data cap locate =
  match (data, cap) with
  | Some _, Some _ -> Error "give --data or a capability, not both"
  | None, None -> Error "give --data DIR (the boot server's directory) or its capability"
  | None, Some c -> Result.map (fun c -> (c, locate)) (Cap_common.parse "capability" c)
  | Some d, None -> (
      let key = Filename.concat d "port.key" and secret = Filename.concat d "server.secret" in
      if not (Sys.file_exists key && Sys.file_exists secret) then
        Error (d ^ ": no boot server has run with this directory")
      else
        match (Port.Key.load key, load_secret secret) with
        | Error m, _ | _, Error m -> Error m
        | Ok key, Ok secret ->
            let here =
              match Consort_local.read_file (addr_file d) with
              | s -> (
                  match String.split_on_char ':' (String.trim s) with
                  | [ "0.0.0.0"; p ] -> [ "127.0.0.1:" ^ p ]
                  | _ -> [ String.trim s ])
              | exception Sys_error _ -> []
            in
            let locate = String.concat "," (here @ Option.to_list locate) in
            Ok
              ( Cap.owner (Port.Key.port key) ~obj:0 secret,
                if locate = "" then None else Some locate ))

let status data cap locate wait only =
  let deadline = Unix.gettimeofday () +. Option.value wait ~default:0. in
  let only =
    Option.map
      (fun o ->
        match String.index_opt o '/' with
        | Some i -> (String.sub o 0 i, String.sub o (i + 1) (String.length o - i - 1))
        | None -> (o, "server"))
      only
  in
  (* One answer: [Ok text], or [Error (code, why)]. *)
  let ask () =
    match status_target data cap locate with
    | Error m -> Error (2, m)
    | Ok (cap, locate) -> (
        let loop = Loop.create () in
        let config = { Rpc.default_config with silence = Consort.Time.of_sec 2. } in
        match R.open_node ~config ?locate loop with
        | Error m -> Error (2, m)
        | Ok node -> (
            let r = R.Sync.trans node ~idempotent:true (Header.request cap boot_capabilities) "" in
            R.close node;
            match r with
            | Ok ({ Header.status = `Ok; _ }, text) -> Ok text
            | Ok (h, _) -> Error (2, Fmt.str "boot status refused: %a" Status.pp h.Header.status)
            | Error e when Rpc_error.outcome e = `Unknown ->
                Error (3, Fmt.str "boot server: %a" Rpc_error.pp e)
            | Error e -> Error (2, Fmt.str "boot server: %a" Rpc_error.pp e)))
  in
  let rows text =
    List.filter_map
      (fun l ->
        match String.split_on_char ' ' l with [ n; st; w; c ] -> Some (n, st, w, c) | _ -> None)
      (String.split_on_char '\n' text)
  in
  let all_up text =
    List.for_all (fun (_, st, w, c) -> st = "up" && (c <> "-" || w = "none")) (rows text)
  in
  let rec go () =
    let r = ask () in
    let ready = match r with Ok text -> all_up text | Error _ -> false in
    if (not ready) && wait <> None && Unix.gettimeofday () < deadline then begin
      Unix.sleepf 0.2;
      go ()
    end
    else
      match (r, only) with
      | Error (2, m), _ -> refused "%s" m
      | Error (_, m), _ -> Cap_common.unknown "%s" m
      | Ok text, _ when wait <> None && not ready ->
          print_string text;
          Cap_common.unknown "not every service is up after %g s" (Option.get wait)
      | Ok text, None ->
          print_string text;
          0
      | Ok text, Some (name, what) -> (
          match List.find_opt (fun (n, _, w, _) -> n = name && w = what) (rows text) with
          | Some (_, _, _, c) when c <> "-" ->
              print_endline c;
              0
          | Some _ -> Cap_common.unknown "%s has no %s capability yet" name what
          | None -> refused "no service %s with a %s capability" name what)
  in
  go ()

let exits =
  Cmd.Exit.info 0 ~doc:"done."
  :: Cmd.Exit.info 2
       ~doc:"refused (a bad declaration file, directory or address): nothing was started."
  :: Consort_cli.command_line_exits

let status_exits =
  Cmd.Exit.info 0 ~doc:"done."
  :: Cmd.Exit.info 2 ~doc:"refused: no such boot server, a bad directory or capability."
  :: Cmd.Exit.info 3
       ~doc:"the boot server did not answer, or with $(b,--wait), not every service came up."
  :: Consort_cli.command_line_exits

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

let status_cmd =
  let data =
    Arg.(
      value
      & opt (some string) None
      & info [ "data" ] ~docv:"DIR"
          ~doc:"The boot server's directory (as given to $(b,consort cap boot serve)).")
  in
  let cap =
    Arg.(
      value
      & pos 0 (some string) None
      & info [] ~docv:"CAP" ~doc:"The boot server's capability (with the admin right).")
  in
  let wait =
    Arg.(
      value
      & opt (some Consort_cli.positive_float) None
      & info [ "wait" ] ~docv:"SECONDS"
          ~doc:
            "Wait until every service is up with its capabilities (at most $(docv); exit 3 if not).")
  in
  let only =
    Arg.(
      value
      & opt (some string) None
      & info [ "only" ] ~docv:"NAME[/WHAT]"
          ~doc:
            "Print only that capability of that service ($(b,fs), $(b,dir1/root)), alone on its \
             line.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap boot status" "status" ~exits:status_exits
       ~doc:
         "Print each declared service, its state and the capabilities it published, one per line: \
          $(i,NAME STATE WHAT CAP), WHAT being $(b,server) (its $(b,server CAP) line) or the name \
          of another capability it printed first ($(b,root) for a directory replica); $(b,-) while \
          it has none. Needs the boot server's capability with the admin right: given, or made \
          from its directory ($(b,--data), readable by its owner alone).")
    Term.(
      const (fun d c l w o () -> status d c l w o)
      $ data $ cap $ locate $ wait $ only $ Consort_cli.logging)

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
    [ serve_cmd; status_cmd; check_cmd ]
