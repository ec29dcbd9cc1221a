open Cmdliner
module Kv = Consort_kv

let setup_logs ((levels, format), verbose) = Consort_cli.setup_logs ~verbose format levels

let verbose =
  Arg.(
    value & flag
    & info [ "verbose"; "v" ] ~doc:"Log view changes and state transfers on standard error.")

let serve group data bind peers listen params init verbose =
  setup_logs verbose;
  match Option.fold ~none:(Ok Consort.Params.empty) ~some:Consort.Params.of_string params with
  | Error e ->
      Fmt.epr "consort kv serve: --params: %a@." Consort.Params.pp_error e;
      2
  | Ok params -> (
      let peers = List.filter (fun p -> p <> "" && p <> bind) peers in
      match Kv.Server.parse_addr bind with
      | Error e ->
          Fmt.epr "consort kv serve: --bind %s@." e;
          2
      | Ok _ -> (
          match
            List.find_map
              (fun p -> match Kv.Server.parse_addr p with Error e -> Some e | Ok _ -> None)
              peers
          with
          | Some e ->
              Fmt.epr "consort kv serve: --peers %s@." e;
              2
          | None -> (
              match
                Kv.Server.run
                  ~on_ready:(fun () ->
                    Fmt.pr "serving %s on %s, group %s at %s@." data listen group bind)
                  {
                    Kv.Server.group;
                    data;
                    bind;
                    peers;
                    listen;
                    params;
                    max_connections = 1024;
                    init;
                  }
              with
              | Ok () -> 0
              | Error e ->
                  Fmt.epr "consort kv serve: %s@." e;
                  Consort_cli.refused)))

let servers =
  Arg.(
    required
    & opt (some (list string)) None
    & info [ "servers" ] ~docv:"ADDR:PORT,..."
        ~doc:"The replicas' client addresses ($(b,--listen)), tried in turn.")

let timeout =
  Arg.(
    value
    & opt Consort_cli.positive_float 15.
    & info [ "timeout" ] ~docv:"SECONDS" ~doc:"How long a request may take in all.")

let depth =
  let parse s =
    match int_of_string_opt (String.trim s) with
    | Some n when n >= 1 && n <= Kv.Client.max_depth -> Ok n
    | _ ->
        Error (`Msg (Printf.sprintf "%S: expected an integer from 1 to %d" s Kv.Client.max_depth))
  in
  Arg.conv ~docv:"N" (parse, Format.pp_print_int)

let pipeline =
  Arg.(
    value & opt depth 1
    & info [ "pipeline" ] ~docv:"N"
        ~doc:
          "Commands under way at once on one connection (1 to 32; 1: each waits for the one \
           before, and a failed one goes on at the next server).")

(* One result line; the exit status says what it means. *)
let print_outcome = function
  | Kv.Wire.Done (Kv.Op.Error e) ->
      Fmt.pr "error: %s@." e;
      2
  | Kv.Wire.Done r ->
      Fmt.pr "%a@." Kv.Op.pp_response r;
      0
  | Kv.Wire.Unknown e ->
      Fmt.pr "unknown: %s@." e;
      3
  | Kv.Wire.Refused e ->
      Fmt.pr "error: %s@." e;
      2

let one op servers timeout =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  match Kv.Client.create ~timeout servers with
  | Error e ->
      Fmt.pr "error: %s@." e;
      2
  | Ok c -> (
      match Kv.Op.check Kv.Op.default_limits op with
      | Error e ->
          Fmt.pr "error: %s@." e;
          2
      | Ok () ->
          let code = print_outcome (Kv.Client.call c op) in
          Kv.Client.close c;
          code)

let shell servers timeout depth =
  Consort_cli.with_stdin "kv shell" @@ fun () ->
  match Kv.Client.create ~timeout servers with
  | Error e ->
      Fmt.pr "error: %s@." e;
      2
  | Ok c ->
      (* A replica that closes the connection under a write: EPIPE, not death. *)
      Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
      let worst = ref 0 in
      let note code = worst := max !worst code in
      let refuse e =
        Fmt.pr "error: %s@." e;
        note 2
      in
      (* The next command: [Ok op], [Error why] for a line refused here. *)
      let rec command () =
        match input_line stdin with
        | exception End_of_file -> None
        | line -> (
            let words = String.split_on_char ' ' (String.trim line) |> List.filter (( <> ) "") in
            if words = [] then command ()
            else
              match Kv.Op.parse words with
              | Error e -> Some (Error e)
              | Ok op -> (
                  match Kv.Op.check Kv.Op.default_limits op with
                  | Error e -> Some (Error e)
                  | Ok () -> Some (Ok op)))
      in
      if depth <= 1 then begin
        let rec go () =
          match command () with
          | None -> ()
          | Some (Error e) ->
              refuse e;
              go ()
          | Some (Ok op) ->
              note (print_outcome (Kv.Client.call c op));
              go ()
        in
        go ()
      end
      else
        Kv.Client.pipeline ~depth c (fun () ->
            match command () with
            | None -> None
            | Some (Error e) -> Some (Kv.Client.Note (fun () -> refuse e))
            | Some (Ok op) -> Some (Kv.Client.Op (op, fun o -> note (print_outcome o))));
      Kv.Client.close c;
      !worst

let check files =
  let rec read acc = function
    | [] -> Ok (List.concat (List.rev acc))
    | f :: rest -> (
        match Kv.History.read f with Ok h -> read (h :: acc) rest | Error e -> Error e)
  in
  match read [] files with
  | Error e ->
      Fmt.epr "consort kv check: %s@." e;
      2
  | Ok h -> (
      match Consort_spec.Linearizable.check h with
      | Consort_spec.Linearizable.Linearizable ->
          Fmt.pr "%d operations: linearizable@." (List.length h);
          0
      | r ->
          Fmt.pr "%d operations: %a@." (List.length h) Consort_spec.Linearizable.pp_result r;
          1)

let key = Arg.(required & pos 0 (some string) None & info [] ~docv:"KEY")
let value n docv = Arg.(required & pos n (some string) None & info [] ~docv)

let exits =
  [
    Cmd.Exit.info 0 ~doc:"on $(b,ok), $(b,value VALUE), $(b,not-found) or $(b,cas-failed).";
    Cmd.Exit.info 2
      ~doc:"refused, on $(b,error: REASON): the request certainly did not take effect.";
    Cmd.Exit.info 3 ~doc:"on $(b,unknown: REASON): the request may or may not have taken effect.";
  ]
  @ Consort_cli.command_line_exits

let cmd =
  let serve =
    let group =
      Arg.(
        required
        & opt (some string) None
        & info [ "group" ] ~docv:"NAME" ~doc:"The replicas' group.")
    in
    let data =
      Arg.(
        required
        & opt (some string) None
        & info [ "data" ] ~docv:"DIR" ~doc:"The replica's log and snapshots.")
    in
    let bind =
      Arg.(
        required
        & opt (some string) None
        & info [ "bind" ] ~docv:"ADDR:PORT" ~doc:"The replica's address in the group (UDP).")
    in
    let peers =
      Arg.(
        value
        & opt (list string) []
        & info [ "peers" ] ~docv:"ADDR:PORT,..."
            ~doc:
              "The other replicas' group addresses; with this one, they are the replicas a \
               majority is counted of.")
    in
    let init =
      let choice =
        Arg.(
          value
          & vflag Kv.Store.Existing
              [
                ( Kv.Store.New,
                  info [ "new" ]
                    ~doc:
                      "Start a replica of a brand-new cluster on an empty (or missing) $(b,--data) \
                       (as etcd's --initial-cluster-state new). Refused on a directory that holds \
                       state." );
                ( Kv.Store.Join,
                  info [ "join" ]
                    ~doc:
                      "Replace a lost replica: start on an empty (or missing) $(b,--data), catch \
                       up from the others, and count toward a quorum only then (as etcd's \
                       --initial-cluster-state existing). Refused on a directory that holds state."
                );
              ])
      in
      choice
    in
    let listen =
      Arg.(
        required
        & opt (some string) None
        & info [ "listen" ] ~docv:"ADDR:PORT" ~doc:"Where clients connect (TCP).")
    in
    let params =
      Arg.(
        value
        & opt (some string) None
        & info [ "params" ] ~docv:"NAME=VALUE,..."
            ~doc:
              "Override layer tunables (over the replica's own defaults, \
               suspect.timeout=2s,suspect.verify=500ms; total.protocol=sequencer|token chooses the \
               total order).")
    in
    Cmd.v
      (Consort_cli.info ~path:"kv serve" "serve"
         ~doc:"Run a replica of the key-value store until SIGTERM or SIGINT."
         ~man:
           [
             `S Manpage.s_description;
             `P
               "The replica recovers its state from $(b,--data) (a torn or corrupt log tail is cut \
                off and reported on standard error), joins the group of replicas, catches up by \
                state transfer, and serves clients on $(b,--listen).";
             `P
               "The data directory has an identity (the store, the group, the cluster): a \
                directory of another group or cluster is refused. An empty directory needs \
                $(b,--new) (every replica of a brand-new cluster) or $(b,--join) (a replica that \
                replaces a lost one: it has no vote until it has caught up from the others).";
             `P
               "Only a group view holding a majority of the replicas ($(b,--bind) and \
                $(b,--peers)) serves requests. Reads and writes are ordered by the view's \
                sequencer; a request is answered once every replica of the view has it on disk.";
           ])
      Term.(
        const serve $ group $ data $ bind $ peers $ listen $ params $ init
        $ (const (fun l v -> (l, v)) $ Consort_cli.log_options $ verbose))
  in
  let op name doc term =
    Cmd.v
      (Consort_cli.info ~path:("kv " ^ name) name ~doc ~exits)
      Term.(const one $ term $ servers $ timeout)
  in
  let get =
    op "get" "Print $(b,value VALUE) or $(b,not-found)." Term.(const (fun k -> Kv.Op.Get k) $ key)
  in
  let put =
    op "put" "Set KEY to VALUE; print $(b,ok)."
      Term.(const (fun k v -> Kv.Op.Put (k, v)) $ key $ value 1 "VALUE")
  in
  let del =
    op "del" "Remove KEY; print $(b,ok) or $(b,not-found)."
      Term.(const (fun k -> Kv.Op.Del k) $ key)
  in
  let cas =
    op "cas" "Set KEY to NEW if it holds OLD; print $(b,ok) or $(b,cas-failed)."
      Term.(
        const (fun k e s -> Kv.Op.Cas { key = k; expect = e; set = s })
        $ key $ value 1 "OLD" $ value 2 "NEW")
  in
  let shell =
    Cmd.v
      (Consort_cli.info ~path:"kv shell" "shell" ~exits
         ~doc:
           "Read commands ($(b,get KEY), $(b,put KEY VALUE), $(b,del KEY), $(b,cas KEY OLD NEW)), \
            one per line, from standard input (words separated by spaces: in the shell a key or \
            value cannot hold a space); print one result line for each, in order. Exits with the \
            worst status of its commands. With $(b,--pipeline) N, up to N commands are under way \
            at once on one connection (results still in order): a connection lost with commands \
            under way prints $(b,unknown: REASON) for each of them (exit 3), and the commands \
            after them go to the next server.")
      Term.(const shell $ servers $ timeout $ pipeline)
  in
  let check =
    (* Read when checked: a missing file is refused with 2, not by the command line reader. *)
    let files = Arg.(non_empty & pos_all string [] & info [] ~docv:"HISTORY") in
    Cmd.v
      (Consort_cli.info ~path:"kv check" "check"
         ~doc:
           "Check histories of client operations (one per line: CLIENT, CALL, RETURN, the \
            operation, $(b,=>), the response, separated by tabs; RETURN -1 and response $(b,?) for \
            an unknown outcome) for linearizability. Exit 0 if linearizable, 1 if not, 2 if a file \
            cannot be read.")
      Term.(const check $ files)
  in
  Cmd.group
    (Cmd.info "kv" ~exits:Consort_cli.exits
       ~doc:"A replicated key-value store with linearizable operations.")
    [ serve; get; put; del; cas; shell; check ]
