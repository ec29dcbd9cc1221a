open Cmdliner

let props_arg =
  let parse s =
    match Consort_group.Properties.of_string s with
    | Ok p -> Ok p
    | Error e -> Error (`Msg (Fmt.str "%a" Consort_group.Properties.pp_error e))
  in
  let print ppf p = Consort_group.Properties.pp ppf p in
  Arg.conv (parse, print)

let props =
  Arg.(
    value
    & opt props_arg Consort_group.Properties.vsync
    & info [ "props" ] ~docv:"P"
        ~doc:"Comma-separated properties, such as $(b,Gmp,Sync,Heal) or $(b,vsync).")

module Member = Consort_member.Member
module Seal = Consort_seal.Seal

(* The secret and mode a member seals with: [Privacy] if asked, [Auth] if
   asked or if a key is given; a property that needs a key without one is
   refused. Rekey comes with either unless seal.rekey=false. *)
let seal_of props key =
  let privacy = List.mem Consort_group.Properties.Privacy props in
  let rekey = List.mem Consort_group.Properties.Rekey props in
  let auth = privacy || rekey || List.mem Consort_group.Properties.Auth props in
  match key with
  | None when auth ->
      Error
        (Printf.sprintf "property %s needs --key FILE (consort keygen FILE writes one)"
           (if privacy then "Privacy" else if rekey then "Rekey" else "Auth"))
  | None -> Ok None
  | Some file -> (
      match Seal.read_key file with
      | Error e -> Error ("--key: " ^ e)
      | Ok secret -> Ok (Some (secret, if privacy then Seal.Privacy else Seal.Auth)))

(* Properties the library offers that this command has no way to use:
   refused with the reason rather than run a member that ignores them. *)
let not_here props =
  if List.mem Consort_group.Properties.Migrate props then
    Some
      "property Migrate: this command has no way to move a member; use Group.migrate from the \
       library (Consort_group.Group)"
  else if List.mem Consort_group.Properties.Cltsvr props then
    Some
      "property Cltsvr: this command serves no clients; use Consort_group.Cltsvr (Server.attach, \
       Client.connect) from the library"
  else None

(* [--metrics] off loopback names the group and its members, which Privacy hides on the wire:
   refused unless [--metrics-public] says it is meant. *)
let metrics_exposed metrics public =
  match metrics with
  | Some addr when not public ->
      let host =
        match String.rindex_opt addr ':' with Some i -> String.sub addr 0 i | None -> addr
      in
      let host =
        if String.length host >= 2 && host.[0] = '[' then String.sub host 1 (String.length host - 2)
        else host
      in
      let loopback =
        host = "localhost" || host = "::1"
        || (String.length host >= 4 && String.sub host 0 4 = "127.")
      in
      if loopback then None
      else
        Some
          (Printf.sprintf
             "--metrics %s: the metrics name the group and its members (what Privacy hides on the \
              wire): on an address other than loopback, add --metrics-public"
             addr)
  | _ -> None

let member (levels, log_format) group props bind peers log params quiet verbose seed drop_file
    discovery no_input key control ((metrics, metrics_public), (http, http_public)) pcap =
  Consort_cli.setup_logs ~verbose log_format levels;
  Consort_cli.set_log_context Member.log_context;
  let refused =
    match not_here props with
    | Some e -> Some e
    | None -> (
        match metrics_exposed metrics metrics_public with
        | Some e -> Some e
        | None -> (
            match http with
            | None -> None
            | Some a -> (
                match Consort_ops.Console.check_address ~flag:"--http" ~public:http_public a with
                | Ok () -> None
                | Error e -> Some e)))
  in
  match (refused, seal_of props key) with
  | Some e, _ ->
      Fmt.epr "consort member: %s@." e;
      2
  | None, Error e ->
      Fmt.epr "consort member: %s@." e;
      2
  | None, Ok seal -> (
      let params =
        match params with None -> Ok Consort.Params.empty | Some s -> Consort.Params.of_string s
      in
      match params with
      | Error e ->
          Fmt.epr "consort member: --params: %a@." Consort.Params.pp_error e;
          2
      | Ok params
        when seal <> None
             && List.mem Consort_group.Properties.Rekey props
             && not (Consort.Params.bool params Seal.rekey_param) ->
          Fmt.epr "consort member: property Rekey and --params %s=false contradict each other@."
            Seal.rekey_param;
          2
      | Ok _ when (not no_input) && Consort_cli.stdin_closed () ->
          Consort_cli.with_stdin ~instead:"--no-input" "member" (fun () -> 0)
      | Ok params -> (
          let peers =
            match peers with
            | Some l -> List.filter (fun p -> p <> "" && p <> "none") l
            | None -> if discovery = None then Member.default_peers else []
          in
          let seed =
            match seed with
            | Some s -> s
            | None -> Unix.getpid () * 7919 lxor int_of_float (Unix.gettimeofday () *. 1e6)
          in
          let input = if no_input then Member.No_input else Member.Fd Unix.stdin in
          (* Without --control: a socket in the runtime directory, for consort status alone. *)
          let control =
            match control with
            | Some "none" -> None
            | Some p -> Some p
            | None -> (
                match Consort_ops.Sockets.member_dir () with
                | None -> None
                | Some dir -> (
                    match Consort_ops.Sockets.prepare dir with
                    | Ok () ->
                        ignore (Consort_ops.Sockets.sweep dir);
                        Some (Consort_ops.Sockets.member_path dir ~group)
                    | Error e ->
                        Logs.warn (fun m -> m "no control socket: %s" e);
                        None))
          in
          let cfg =
            {
              Member.group;
              props;
              bind;
              peers;
              log;
              params;
              quiet;
              input;
              seed;
              drop_file;
              discovery;
              seal;
              control;
              metrics;
              http;
              pcap;
            }
          in
          match Member.check_config cfg with
          | Error e ->
              (* The command line is wrong: a usage error. *)
              Fmt.epr "consort member: %a@." Member.pp_error e;
              2
          | Ok () -> (
              match Member.run cfg with
              | Ok () -> 0
              | Error e ->
                  Fmt.epr "consort member: %a@." Member.pp_error e;
                  Consort_cli.refused)))

let member =
  let group =
    Arg.(
      required & opt (some string) None & info [ "group" ] ~docv:"NAME" ~doc:"The group to join.")
  in
  let bind =
    Arg.(
      value
      & opt (some string) None
      & info [ "bind" ] ~docv:"ADDR:PORT"
          ~doc:"Local address (default: the first free port of 127.0.0.1:7400-7415).")
  in
  let peers =
    Arg.(
      value
      & opt (some (list string)) None
      & info [ "peers" ] ~docv:"ADDR:PORT,..."
          ~doc:"Where to look for the group's other members (default: 127.0.0.1:7400-7415).")
  in
  let log =
    Arg.(
      value
      & opt (some string) None
      & info [ "log" ] ~docv:"FILE" ~doc:"Write one JSON object per event here.")
  in
  let params =
    Arg.(
      value
      & opt (some string) None
      & info [ "params" ] ~docv:"NAME=VALUE,..."
          ~doc:"Override layer tunables (see $(b,consort params)).")
  in
  let quiet = Arg.(value & flag & info [ "quiet"; "q" ] ~doc:"Print nothing on standard output.") in
  let verbose =
    Arg.(
      value & flag
      & info [ "verbose"; "v" ] ~doc:"Log view changes and suspicions on standard error.")
  in
  let seed =
    Arg.(
      value
      & opt (some int) None
      & info [ "seed" ] ~docv:"S" ~doc:"Seed of the member's random choices.")
  in
  let discovery =
    Arg.(
      value
      & opt (some string) None
      & info [ "mcast" ] ~docv:"GROUP:PORT"
          ~doc:
            "Also find the group's members through this IP multicast group (where the network has \
             multicast); with it, $(b,--peers) defaults to none.")
  in
  let drop_file =
    Arg.(
      value
      & opt (some string) None
      & info [ "drop-file" ] ~docv:"FILE"
          ~doc:
            "For tests: drop datagrams from the addresses listed in $(docv), one per line, re-read \
             as it changes.")
  in
  let no_input =
    Arg.(
      value & flag
      & info [ "no-input" ]
          ~doc:
            "Do not read standard input: cast nothing and stay in the group until SIGTERM or \
             SIGINT (for a start in the background or by a service manager). Without it, a regular \
             file on standard input is read and cast line by line, and /dev/null counts as no \
             input.")
  in
  let key =
    Arg.(
      value
      & opt (some string) None
      & info [ "key" ] ~docv:"FILE"
          ~doc:
            "The group's secret (a file from $(b,consort keygen), mode 0600). With it every \
             datagram is sealed (property Auth, implied) and only members holding the same secret \
             are heard; with property Privacy payloads are also encrypted. Each view's traffic is \
             also sealed under a key of its own, agreed at the view change (property Rekey, \
             implied; $(b,--params seal.rekey=false) turns it off), so that a member that left or \
             was excluded can neither read nor forge it.")
  in
  let doc =
    "Join a group over UDP, print views and deliveries, and cast each line of standard input."
  in
  let man =
    [
      `S Manpage.s_description;
      `P "The member leaves the group cleanly at the end of its input or on SIGTERM.";
      `P
        "On SIGUSR1 and at exit it prints one line, $(b,counters) followed by every non-zero \
         counter since it joined as $(i,LAYER.NAME=VALUE): the group's own (views installed, \
         refused messages, malformed side-channel datagrams), each layer's in the current view, \
         and Bottom's since it joined, which say why datagrams were dropped (garbage, wrong_group, \
         bad_rank, from_self) and, with $(b,--key), the seal's (seal.bad_tag, seal.replayed, ...). \
         The line goes to standard output; with $(b,--quiet), only SIGUSR1 prints it, on standard \
         error.";
      `P
        "With $(b,--log), each event is one JSON object on its own line: view, block, cast, send, \
         deliver, refused, lost, exit (see the README).";
      `P
        "Addresses are IPv4 $(i,IP:PORT). $(b,--bind) must be an address the peers can reach: not \
         0.0.0.0, a broadcast or multicast address, or port 0. A wrong address or tunable is a \
         usage error (exit code 2).";
    ]
  in
  let control =
    Arg.(
      value
      & opt (some string) None
      & info [ "control" ] ~docv:"PATH"
          ~doc:
            "Answer $(b,consort status), $(b,consort counters), $(b,consort cast) and $(b,consort \
             send) on this Unix socket (created with mode 0600, removed at exit). Without it: \
             $(b,XDG_RUNTIME_DIR/consort/member-GROUP-PID.ctl) (or, for root without \
             XDG_RUNTIME_DIR, under $(b,/run/consort)), in a directory of mode 0700, where \
             $(b,consort status) finds it; $(b,none) opens no socket.")
  in
  let metrics =
    Arg.(
      value
      & opt (some string) None
      & info [ "metrics" ] ~docv:"ADDR:PORT"
          ~doc:
            "Serve the counters and the view in the Prometheus text format at \
             http://$(docv)/metrics (loopback unless $(b,--metrics-public)).")
  in
  let metrics_public =
    Arg.(
      value & flag
      & info [ "metrics-public" ]
          ~doc:
            "Allow $(b,--metrics) on an address other than loopback (0.0.0.0, a public interface): \
             the metrics name the group and its members, which Privacy hides on the wire. Without \
             it such an address is refused.")
  in
  let http =
    Arg.(
      value
      & opt (some string) None
      & info [ "http" ] ~docv:"ADDR:PORT"
          ~doc:
            "Serve a live web console at http://$(docv)/ (read-only: the view and its members \
             with              their roles, the last views and why each changed, quorum, flow \
             control, rates and              counters), its data as JSON at /api/status (loopback \
             unless $(b,--http-public)).")
  in
  let http_public =
    Arg.(
      value & flag
      & info [ "http-public" ]
          ~doc:
            "Allow $(b,--http) on an address other than loopback: the console names the group and \
             its members, which Privacy hides on the wire. Without it such an address is refused.")
  in
  let metrics =
    Term.(const (fun m p h hp -> ((m, p), (h, hp))) $ metrics $ metrics_public $ http $ http_public)
  in
  let pcap =
    Arg.(
      value
      & opt (some string) None
      & info [ "pcap" ] ~docv:"FILE"
          ~doc:
            "Record every datagram sent and received in $(docv) (pcap, for tcpdump -r or \
             Wireshark; created with mode 0600, never overwritten; at most 1 GiB).")
  in
  Cmd.v
    (Consort_cli.info ~path:"member" "member" ~doc ~man)
    Term.(
      const member $ Consort_cli.log_options $ group $ props $ bind $ peers $ log $ params $ quiet
      $ verbose $ seed $ drop_file $ discovery $ no_input $ key $ control $ metrics $ pcap)

let keygen file =
  match Seal.write_key file (Seal.generate ()) with
  | Ok () ->
      Printf.printf "wrote %s (mode 0600): give it to every member with --key\n" file;
      0
  | Error e ->
      Fmt.epr "consort keygen: %s@." e;
      Consort_cli.refused

let keygen =
  let file =
    Arg.(required & pos 0 (some string) None & info [] ~docv:"FILE" ~doc:"The key file to create.")
  in
  let man =
    [
      `S Manpage.s_description;
      `P
        "Writes a new group secret (32 random bytes from the system's generator) to $(i,FILE), \
         created with mode 0600; an existing file is never overwritten. Members given the same \
         file with $(b,--key) admit only each other and seal every datagram (property Auth; with \
         Privacy, also encrypt it).";
      `S Manpage.s_examples;
      `Pre
        "consort keygen /etc/consort/orders.key\n\
         consort member --group orders --key /etc/consort/orders.key --props vsync,Privacy";
    ]
  in
  Cmd.v
    (Consort_cli.info ~path:"keygen" "keygen" ~doc:"Write a new group secret to a key file." ~man)
    Term.(const keygen $ file)

module P = Consort_group.Properties

(* [--props] for [consort stack]: a name that is no property cannot be
   read (124); a known property that is not built, or a set that cannot
   work, is refused when the command runs (2), with the reason. *)
let stack_props =
  let parse s =
    match P.of_string s with
    | Error (P.Unknown _ as e) -> Error (`Msg (Fmt.str "%a" P.pp_error e))
    | r -> Ok r
  in
  let print ppf = function Ok p -> P.pp ppf p | Error e -> P.pp_error ppf e in
  Arg.(
    value
    & opt (conv (parse, print)) (Ok P.vsync)
    & info [ "props" ] ~docv:"P"
        ~doc:
          "Comma-separated properties, such as $(b,Gmp,Sync,Heal) or $(b,vsync) (see $(b,--list)).")

let list =
  Arg.(
    value & flag
    & info [ "list" ] ~doc:"List every property: what it guarantees, or why it is not available.")

let print_list () =
  let rows =
    List.map (fun p -> (P.to_string p, P.doc p)) P.all
    @ List.map (fun (n, what) -> (n, "not available in this version: " ^ what)) P.not_available
  in
  let rows =
    List.sort
      (fun (a, _) (b, _) -> compare (String.lowercase_ascii a) (String.lowercase_ascii b))
      rows
  in
  List.iter (fun (n, d) -> Fmt.pr "%-8s %s@." n d) rows;
  0

(* One line per layer, top first: its name and what it gives the layers
   above it. *)
let print_stack l =
  let width =
    List.fold_left (fun w layer -> max w (String.length (Consort.Layer.name layer))) 0 l
  in
  List.iter
    (fun layer ->
      let provides = List.map Consort.Contract.name (Consort.Layer.provides layer) in
      Fmt.pr "%-*s %s@." width (Consort.Layer.name layer)
        (match provides with [] -> "-" | l -> String.concat ", " l))
    l;
  0

let stack props list =
  if list then print_list ()
  else
    match Result.bind props P.layers with
    | Ok l -> print_stack l
    | Error e ->
        Fmt.epr "consort stack: %a@." P.pp_error e;
        Consort_cli.refused

let stack =
  let man =
    [
      `S Manpage.s_description;
      `P
        "Prints the layers Consort stacks for a set of properties, one line per layer, top first: \
         the layer's name and what it provides to the layers above it. A property that is not \
         available in this version, or a set that cannot work (such as $(b,Total) without \
         $(b,Gmp)), is refused with the reason (exit 2).";
    ]
  in
  Cmd.v
    (Consort_cli.info ~man ~path:"stack" "stack"
       ~doc:"Print the stack of layers chosen for a set of properties, top first.")
    Term.(const stack $ stack_props $ list)
