(* consort cap dir ... and the shell tools consort cap ls, mkdir, rm, chmod. *)
open Cmdliner
open Consort_cap
module Dir = Consort_capdir.Dir
module Dir_server = Consort_capdir.Dir_server
module Dir_client = Consort_capdir.Dir_client
module Path = Consort_capdir.Path
module Loop = Consort_engine.Loop

let rpc_config = Cap_common.rpc_config

(* Exit statuses: 0 done, 2 refused (nothing was done), 3 outcome unknown. *)
let refused fmt =
  Fmt.kstr
    (fun s ->
      Fmt.epr "consort: %s@." s;
      2)
    fmt

let failed what (e : Dir_client.error) =
  match e with
  | `Unknown _ ->
      Fmt.epr "consort: %s: %a@." what Dir_client.pp_error e;
      3
  | _ -> refused "%s: %a" what Dir_client.pp_error e

let path_failed what (e : Dir_client.error Path.error) =
  match e with
  | `Lookup (_, `Unknown _) ->
      Fmt.epr "consort: %s: %a@." what (Path.pp_error Dir_client.pp_error) e;
      3
  | e -> refused "%s: %a" what (Path.pp_error Dir_client.pp_error) e

let root_cap = Cap_common.root_cap

let with_dir locate root f =
  match root_cap root with
  | Error m -> refused "%s" m
  | Ok root -> (
      let loop = Loop.create () in
      match Rpc_udp.open_node ~config:!rpc_config ?locate loop with
      | Error m -> refused "%s" m
      | Ok node ->
          let trans ~idempotent h d = Rpc_udp.Sync.trans node ~idempotent h d in
          Fun.protect
            ~finally:(fun () -> Rpc_udp.close node)
            (fun () -> f (Dir_client.create trans) root))

(* The directory of a path's last component, and that component. *)
let with_parent what c root path f =
  match Path.parent path with
  | None -> refused "%s: %S names the root directory" what path
  | Some (parent, name) -> (
      match Dir_client.resolve c root parent with Error e -> path_failed what e | Ok d -> f d name)

let parse_masks s =
  let cols = String.split_on_char ':' s in
  if List.length cols > Dir.max_columns then
    Error (Printf.sprintf "%d column masks, at most %d" (List.length cols) Dir.max_columns)
  else
    List.fold_right
      (fun c acc ->
        match (acc, Rights.of_string c) with
        | Error e, _ -> Error e
        | _, Error e -> Error (Printf.sprintf "%S: %s" c e)
        | Ok l, Ok r -> Ok (r :: l))
      cols (Ok [])

(* Masks as numbers: on a directory row the bits are columns, not the
   file server's read, create, ... *)
let pp_mask ppf r =
  match Rights.to_int r with
  | 0xff -> Fmt.string ppf "all"
  | 0 -> Fmt.string ppf "none"
  | n -> Fmt.pf ppf "0x%02x" n

let pp_masks = Fmt.(list ~sep:(any ":") pp_mask)

let ls_in c root path =
  match Dir_client.resolve c root path with
  | Error e -> path_failed "ls" e
  | Ok d -> (
      match Dir_client.call c (Dir.List d) with
      | Ok (Dir.Listing { seq; columns; rows }) ->
          Fmt.pr "# seq %d, columns %s@." seq (String.concat ":" columns);
          List.iter (fun (n, m) -> Fmt.pr "%s\t%a@." n pp_masks m) rows;
          0
      | Ok r -> refused "ls: unexpected reply %a" Dir.pp_response r
      | Error e -> failed "ls" e)

let ls locate root path = with_dir locate root (fun c root -> ls_in c root path)
let default_masks = Dir.default_masks Dir.Directory

let mkdir_in c root path masks =
  match Option.fold ~none:(Ok default_masks) ~some:parse_masks masks with
  | Error e -> refused "mkdir: --masks: %s" e
  | Ok masks ->
      with_parent "mkdir" c root path (fun d name ->
          let secret = Cap.Secret.to_raw (Cap.Secret.generate ()) in
          match
            Dir_client.call c
              (Dir.Create
                 { via = d; secret; columns = Dir.default_columns; link = Some (name, masks) })
          with
          | Ok (Dir.Created { cap; _ }) ->
              print_endline (Cap.to_string cap);
              0
          | Ok r -> refused "mkdir: unexpected reply %a" Dir.pp_response r
          | Error e -> failed "mkdir" e)

let mkdir locate root path masks = with_dir locate root (fun c root -> mkdir_in c root path masks)

let rm_in c root path =
  with_parent "rm" c root path (fun d name ->
      match Dir_client.call c (Dir.Delete { dir = d; name }) with
      | Ok _ -> 0
      | Error e -> failed "rm" e)

let rm locate root path = with_dir locate root (fun c root -> rm_in c root path)

let chmod_in c root path masks =
  match parse_masks masks with
  | Error e -> refused "chmod: %s" e
  | Ok masks ->
      with_parent "chmod" c root path (fun d name ->
          match Dir_client.call c (Dir.Chmod { dir = d; name; masks }) with
          | Ok _ -> 0
          | Error e -> failed "chmod" e)

let chmod locate root path masks = with_dir locate root (fun c root -> chmod_in c root path masks)

let lookup locate root path =
  with_dir locate root (fun c root ->
      with_parent "lookup" c root path (fun d name ->
          match Dir_client.lookup c d name with
          | Ok entries ->
              List.iter
                (function
                  | Dir.Narrowed c -> print_endline (Cap.to_string c)
                  | Dir.Withheld p ->
                      Fmt.pr "withheld: only its server %a can narrow it@." Port.pp p)
                entries;
              0
          | Error e -> failed "lookup" e))

let link locate root path cap masks =
  match
    ( Cap.of_string cap,
      Option.fold ~none:(Ok None) ~some:(fun m -> Result.map Option.some (parse_masks m)) masks )
  with
  | Error e, _ -> refused "link: bad capability: %a" Cap.pp_decode_error e
  | _, Error e -> refused "link: --masks: %s" e
  | Ok target, Ok masks ->
      with_dir locate root (fun c root ->
          let masks =
            match masks with
            | Some m -> m
            | None -> Dir.default_masks (Dir.kind_of ~port:root.Cap.port target)
          in
          with_parent "link" c root path (fun d name ->
              match
                Dir_client.call c
                  (Dir.Install
                     { dir = d; expect = None; rows = [ { Dir.name; masks; caps = [ target ] } ] })
              with
              | Ok _ -> 0
              | Error e -> failed "link" e))

(* consort cap dir gc --server CAP [--fs CAP ...] [--rounds N]: rounds of
   collection from the root over the directory server and file servers. *)
let gc locate root server fss rounds every =
  let parse what s =
    match Cap.of_string s with
    | Ok c -> Ok c
    | Error e -> Error (Fmt.str "%s: bad capability: %a" what Cap.pp_decode_error e)
  in
  let rec all = function
    | [] -> Ok []
    | x :: l -> Result.bind (parse "--fs" x) (fun c -> Result.map (fun l -> c :: l) (all l))
  in
  match (parse "--server" server, all fss) with
  | Error e, _ | _, Error e -> refused "gc: %s" e
  | Ok dserver, Ok fss ->
      with_dir locate root (fun c root ->
          let trans = Dir_client.trans c in
          let std h =
            match trans ~idempotent:true h "" with
            | Ok (h, _) -> Ok h.Header.status
            | Error e -> Error (Fmt.str "%a" Rpc_error.pp e)
          in
          (* Both servers answer the standard touch. *)
          let std_touch cap =
            match std (Std.touch_request cap) with
            | Ok `Ok -> Ok ()
            | Ok (`Notfound | `Capbad) -> Error (`Dangling "gone")
            | Ok st -> Error (`Failed (Printf.sprintf "status %d" (Status.to_int st)))
            | Error e -> Error (`Failed e)
          in
          let dir_server =
            {
              Consort_capdir.Gc.port = root.Cap.port;
              touch = (fun cap -> std_touch cap);
              age =
                (fun () ->
                  match Dir_client.call c (Dir.Age dserver) with
                  | Ok _ -> Ok ()
                  | Error e -> Error (Fmt.str "%a" Dir_client.pp_error e));
            }
          in

          let fs_server (fs : Cap.t) =
            {
              Consort_capdir.Gc.port = fs.port;
              touch = std_touch;
              age =
                (fun () ->
                  match std (Std.age_request fs) with
                  | Ok `Ok -> Ok ()
                  | Ok st -> Error (Printf.sprintf "status %d" (Status.to_int st))
                  | Error e -> Error e);
            }
          in
          let refs (cap : Cap.t) =
            if not (Port.equal cap.port root.port) then None
            else
              Some
                (match Dir_client.call c (Dir.Refs { server = dserver; dir = cap.obj }) with
                | Ok (Dir.Objects l) -> Ok l
                | Ok r -> Error (Fmt.str "unexpected reply %a" Dir.pp_response r)
                | Error e -> Error (Fmt.str "%a" Dir_client.pp_error e))
          in
          let servers = dir_server :: List.map fs_server fss in
          let rounds =
            match (rounds, every) with Some n, _ -> n | None, None -> 1 | None, Some _ -> max_int
          in
          let rec go i =
            if i > rounds then 0
            else
              match Consort_capdir.Gc.round ~refs ~servers root with
              | Ok r ->
                  Fmt.pr "round %d: %a@." i Consort_capdir.Gc.pp_report r;
                  next i
              | Error e -> (
                  match every with
                  | None -> refused "gc: round %d: %s" i e
                  | Some _ ->
                      (* Collecting by itself: a round that could not touch everything aged
                         nothing; the next one tries again. *)
                      Fmt.pr "round %d: not done (%s); again in the next interval@." i
                        (Consort_cli.one_line e);
                      next i)
          and next i =
            match every with
            | Some e when i < rounds ->
                Unix.sleepf e;
                go (i + 1)
            | _ -> go (i + 1)
          in
          go 1)

let serve data key_file bind group peers params init =
  let key_file = match key_file with Some f -> f | None -> Filename.concat data "port.key" in
  match Consort.Params.of_string (Option.value params ~default:"") with
  | Error e -> refused "--params: %a" Consort.Params.pp_error e
  | Ok params -> (
      (* The data directory's identity first: the key is made only in a
         new directory or one of this directory service's replicas. *)
      match
        Consort_datadir.check ~ignore:[ "port.key" ] ~looks_like:Dir_server.looks_like
          ~kind:Dir_server.kind
          ~service:(fun () ->
            match Port.Key.load_or_create key_file with
            | Ok key -> Ok (Dir_server.service key)
            | Error m -> Error (Printf.sprintf "key %s: %s" key_file m))
          data
      with
      | Error m -> refused "%s" m
      | Ok _ -> (
          match Port.Key.load_or_create key_file with
          | Error m -> refused "key %s: %s" key_file m
          | Ok key -> (
              let peers = List.filter (( <> ) "") (String.split_on_char ',' peers) in
              match
                Dir_server.run
                  { Dir_server.data; key; bind; group_bind = group; peers; params; init }
              with
              | Ok () -> 0
              | Error e -> refused "%s" e)))

(* consort cap dir init: the identity a first start would write, without serving. *)
let init data key_file how =
  let key_file = match key_file with Some f -> f | None -> Filename.concat data "port.key" in
  match
    Consort_datadir.check ~ignore:[ "port.key" ] ~looks_like:Dir_server.looks_like
      ~kind:Dir_server.kind
      ~service:(fun () ->
        match Port.Key.load_or_create key_file with
        | Ok key -> Ok (Dir_server.service key)
        | Error m -> Error (Printf.sprintf "key %s: %s" key_file m))
      data
  with
  | Error m -> refused "%s" m
  | Ok _ -> (
      match Port.Key.load_or_create key_file with
      | Error m -> refused "key %s: %s" key_file m
      | Ok key -> (
          match Dir_server.init ~data ~key how with
          | Error e -> refused "%s" e
          | Ok () ->
              Fmt.pr "%s: %s of the directory service %s@." data
                (match how with
                | Consort_kv.Store.Join -> "a replica joining (no vote until caught up)"
                | _ -> "a replica of a new cluster")
                (Dir_server.service key);
              0))

(* The command line. *)

let locate = Cap_common.locate

let root =
  Arg.(
    value
    & opt (some string) None
    & info [ "root" ] ~docv:"CAP"
        ~doc:
          "The root directory's capability (default: $(b,CONSORT_ROOT), then $(b,~/.consort/root)).")

let path_arg =
  Arg.(
    required
    & pos 0 (some string) None
    & info [] ~docv:"PATH" ~doc:"A path from the root directory: $(b,/home/alice/notes).")

let masks_opt =
  Arg.(
    value
    & opt (some string) None
    & info [ "masks" ] ~docv:"MASK:MASK:..."
        ~doc:
          "The row's rights mask for each column (owner, group, other), separated by colons, each \
           a list of rights ($(b,all), $(b,read,modify), $(b,0x06), ...). Default, as the table in \
           src/capdir/README.md: $(b,all:0x06:0x04) for a directory (the group column sees the \
           group and other columns, the other column the other column), $(b,all:read:read) for a \
           file, $(b,all:read:none) for a server's capability (object 0, as under /sys).")

let exits = Cap_common.exits

let envs =
  [
    Cmd.Env.info "CONSORT_ROOT"
      ~doc:"The root directory's capability, when $(b,--root) is not given.";
    Cap_common.locate_env;
  ]

let configured t = Cap_common.configured t

let client_cmd name ~path ~doc term =
  Cmd.v (Consort_cli.info ~path name ~exits ~envs ~doc) (configured term)

let ls_cmd =
  client_cmd "ls" ~path:"cap ls"
    ~doc:"List a directory: its sequence number, its columns, and each row's name and column masks."
    Term.(const (fun l r p () -> ls l r p) $ locate $ root $ path_arg)

let mkdir_cmd =
  client_cmd "mkdir" ~path:"cap mkdir"
    ~doc:"Make a directory and link it under PATH, in one step; prints its owner capability."
    Term.(const (fun l r p m () -> mkdir l r p m) $ locate $ root $ path_arg $ masks_opt)

let rm_cmd =
  client_cmd "rm" ~path:"cap rm"
    ~doc:
      "Remove a row from its directory (needs the delete right; the object itself goes when no \
       directory reaches it, at garbage collection)."
    Term.(const (fun l r p () -> rm l r p) $ locate $ root $ path_arg)

let chmod_cmd =
  let masks =
    Arg.(
      required
      & pos 1 (some string) None
      & info [] ~docv:"MASK:MASK:..." ~doc:"The new column masks, as $(b,--masks) of $(b,mkdir).")
  in
  client_cmd "chmod" ~path:"cap chmod"
    ~doc:"Set the column masks of a row (needs the modify right)."
    Term.(const (fun l r p m () -> chmod l r p m) $ locate $ root $ path_arg $ masks)

let lookup_cmd =
  client_cmd "lookup" ~path:"cap dir lookup"
    ~doc:"Print the capabilities of the row PATH names, narrowed to what the path's columns allow."
    Term.(const (fun l r p () -> lookup l r p) $ locate $ root $ path_arg)

let link_cmd =
  let cap =
    Arg.(required & pos 1 (some string) None & info [] ~docv:"CAP" ~doc:"The capability to store.")
  in
  client_cmd "link" ~path:"cap dir link"
    ~doc:
      "Store a capability (a file, a directory, any object) under PATH, replacing a row of that \
       name."
    Term.(const (fun l r p c m () -> link l r p c m) $ locate $ root $ path_arg $ cap $ masks_opt)

(* --new, --join or neither: how a replica starts on its data directory (as kv serve). *)
let init_choice ~default =
  Arg.(
    vflag default
      [
        ( Consort_kv.Store.New,
          info [ "new" ]
            ~doc:
              "A replica of a brand-new directory cluster, on an empty (or missing) $(b,--data) \
               (as etcd's --initial-cluster-state new): every replica of the new cluster starts \
               so, the first time only. Refused on a directory that holds state." );
        ( Consort_kv.Store.Join,
          info [ "join" ]
            ~doc:
              "Replace a lost replica: an empty (or missing) $(b,--data) that catches up from the \
               others and counts toward no quorum until then (as etcd's --initial-cluster-state \
               existing). Refused on a directory that holds state." );
      ])

let init_arg = Arg.value (init_choice ~default:Consort_kv.Store.Existing)

let serve_cmd =
  let data = Cap_common.data_arg ~doc:"This replica's store." in
  let key =
    Cap_common.key_arg
      ~doc:
        "The directory's port key, the same file at every replica (made if missing). Default: \
         $(b,port.key) in the data directory."
  in
  let bind = Cap_common.bind_arg ~doc:"The UDP address of the RPC." in
  let group =
    Arg.(
      required
      & opt (some string) None
      & info [ "group" ] ~docv:"ADDR:PORT" ~doc:"This replica's address in the replicas' group.")
  in
  let peers =
    Arg.(
      value & opt string ""
      & info [ "peers" ] ~docv:"ADDR:PORT,..." ~doc:"The other replicas' group addresses.")
  in
  let params =
    Arg.(
      value
      & opt (some string) None
      & info [ "params" ] ~docv:"NAME=VALUE,..."
          ~doc:("The group's tunables, over " ^ Dir_server.default_params ^ "."))
  in
  Cmd.v
    (Consort_cli.info ~path:"cap dir serve" "serve" ~exits
       ~doc:
         "Run a replica of the directory server; prints the root and server capabilities, serves \
          until SIGTERM or SIGINT. An empty data directory needs $(b,--new) (every replica of a \
          brand-new directory cluster) or $(b,--join) (a replica that replaces a lost one: no vote \
          until it has caught up); a directory of another cluster is refused or stops the replica.")
    Term.(const serve $ data $ key $ bind $ group $ peers $ params $ init_arg)

let init_cmd =
  let data = Cap_common.data_arg ~doc:"The replica's data directory (empty or missing)." in
  let key =
    Cap_common.key_arg
      ~doc:
        "The directory's port key, the same file at every replica (made if missing). Default: \
         $(b,port.key) in the data directory."
  in
  let how =
    Arg.(
      required
      & vflag None
          [
            ( Some Consort_kv.Store.New,
              info [ "new" ] ~doc:"A replica of a brand-new directory cluster." );
            ( Some Consort_kv.Store.Join,
              info [ "join" ]
                ~doc:"A replica that replaces a lost one (no vote until it has caught up)." );
          ])
  in
  Cmd.v
    (Consort_cli.info ~path:"cap dir init" "init" ~exits
       ~doc:
         "Prepare an empty data directory for $(b,cap dir serve), as its first start with \
          $(b,--new) or $(b,--join) would, without serving: a later $(b,cap dir serve) without \
          either starts on it (for a command line that never changes, as a boot server's \
          declaration).")
    Term.(const init $ data $ key $ how)

let gc_cmd =
  let server =
    Arg.(
      required
      & opt (some string) None
      & info [ "server" ] ~docv:"CAP"
          ~doc:
            "The directory server's capability (printed by $(b,cap dir serve)): ageing and reading \
             rows need its admin right.")
  in
  let fss =
    Arg.(
      value & opt_all string []
      & info [ "fs" ] ~docv:"CAP"
          ~doc:
            "A file server's capability (printed by $(b,cap fs serve)), to touch and age its \
             files; repeat for each.")
  in
  let rounds =
    Arg.(
      value
      & opt (some Consort_cli.positive_int) None
      & info [ "rounds" ] ~docv:"N" ~doc:"Rounds to run (default 1; with $(b,--every), no end).")
  in
  let every =
    Arg.(
      value
      & opt (some Consort_cli.positive_float) None
      & info [ "every" ] ~docv:"SECONDS"
          ~doc:
            "Collect by itself: a round every SECONDS, as a service of the boot server would; a \
             round that fails is reported and the next one tries again.")
  in
  client_cmd "gc" ~path:"cap dir gc"
    ~doc:
      "Collect garbage: touch every object reachable from the root directory, then age the \
       directory server's and the file servers' objects; unreachable ones go after their lifetime \
       (8 rounds for directories, 24 for files). A round that cannot touch everything ages \
       nothing."
    Term.(
      const (fun l r s f n e () -> gc l r s f n e) $ locate $ root $ server $ fss $ rounds $ every)

let dir_cmd =
  Cmd.group
    (Cmd.info "dir" ~exits:Consort_cli.exits
       ~doc:"The replicated directory server (SOAP semantics).")
    [ serve_cmd; init_cmd; lookup_cmd; link_cmd; gc_cmd ]

let commands = [ dir_cmd; ls_cmd; mkdir_cmd; rm_cmd; chmod_cmd ]
