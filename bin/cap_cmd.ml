open Cmdliner
open Consort_cap
open Consort_crypto
module Store = Consort_capfs.Store
module Fs_server = Consort_capfs_server.Fs_server
module Fs_client = Consort_capfs_server.Fs_client
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Rpc_udp

let rpc_config = Cap_common.rpc_config
let random n = Crypto.random n
let clock () = int_of_float (Unix.gettimeofday () *. 1e9)

(* Exit statuses: 0 done, 2 refused (nothing was done), 3 outcome unknown. *)
let refused fmt =
  Fmt.kstr
    (fun s ->
      Fmt.epr "consort: %s@." s;
      2)
    fmt

let failed what (e : Fs_client.error) =
  match Fs_client.outcome e with
  | `Refused -> refused "%s refused: %a" what Fs_client.pp_error e
  | `Unknown ->
      (match e with
      | `Cut _ -> Fmt.epr "consort: %s: the output is incomplete, %a@." what Fs_client.pp_error e
      | _ -> Fmt.epr "consort: %s: outcome unknown: %a@." what Fs_client.pp_error e);
      3

(* consort cap fs fsck --data DIR *)
let fsck data =
  if not (Sys.file_exists data && Sys.is_directory data) then refused "%s: no such directory" data
  else
    match Store.open_ ~clock data with
    | Error `Locked -> refused "%s is in use by a running file server" data
    | Error (`Io m) -> refused "%s" m
    | Ok (t, found) ->
        List.iter (fun f -> Fmt.pr "%a@." Store.pp_finding f) found;
        Fmt.pr "%a@." Store.pp_stats (Store.stats t);
        Store.close t;
        if List.exists Store.is_damage found then 1 else 0

(* consort cap fs serve [--new] --data DIR [--bind ADDR:PORT] [--key FILE] *)
let serve ~fresh data bind key_file =
  let key_file = match key_file with Some f -> f | None -> Filename.concat data "port.key" in
  match Fs_data.check ~fresh data key_file with
  | Error m -> refused "%s" m
  | Ok () -> (
      match Store.open_ ~random ~clock data with
      | Error `Locked -> refused "%s is in use by another file server" data
      | Error (`Io m) -> refused "%s" m
      | Ok (store, found) -> (
          List.iter (fun f -> Fmt.epr "consort: recovery: %a@." Store.pp_finding f) found;
          match Port.Key.load_or_create key_file with
          | Error m ->
              Store.close store;
              refused "key %s: %s" key_file m
          | Ok key -> (
              let loop = Loop.create () in
              match R.open_node ~config:!rpc_config ~bind loop with
              | Error m ->
                  Store.close store;
                  refused "cannot serve on %s: %s" bind m
              | Ok node -> (
                  let fs = Fs_server.create store (Port.Key.port key) in
                  let server = R.serve node key in
                  (* Fail-stop: a durable write that failed (a full disk, an I/O
                 error, a failed fsync) was refused to its client; the
                 server then stops, one line, exit 2. *)
                  let failure = ref None in
                  let check_disk () =
                    match Store.disk_error store with
                    | Some e when !failure = None ->
                        failure := Some e;
                        Loop.stop loop
                    | _ -> ()
                  in
                  Loop.on_error loop (function Loop.Timer e | Loop.Descriptor (_, e) ->
                      if !failure = None then
                        failure := Some (Printf.sprintf "internal error: %s" (Printexc.to_string e));
                      Loop.stop loop);
                  R.listen server (fun r ->
                      let h, d = Fs_server.handle fs (R.header r) (R.data r) in
                      R.putrep r h d;
                      check_disk ());
                  let rec age () =
                    ignore (Store.age store);
                    check_disk ();
                    ignore (Loop.after loop (Consort.Time.of_sec 10.) age)
                  in
                  age ();
                  let run = Cap_common.serve_until_signal loop in
                  Fmt.pr "server %s@." (Cap.to_string (Fs_server.server_cap fs));
                  Fmt.epr "consort: file server for port %s on %s, %a@."
                    (Port.to_hex (Port.Key.port key))
                    (Udp.address_to_string (R.address node))
                    Store.pp_stats (Store.stats store);
                  run ();
                  R.close node;
                  Store.close store;
                  match !failure with None -> 0 | Some e -> refused "file server stopped: %s" e))))

(* consort cap fs init --data DIR [--key FILE]: what a first start with --new makes, without
   serving. *)
let init data key_file =
  let key_file = match key_file with Some f -> f | None -> Filename.concat data "port.key" in
  match Fs_data.init ~data ~key_file with
  | Error m -> refused "%s" m
  | Ok port ->
      Fmt.pr "%s: a new file server's data directory, port %s@." data port;
      0

(* Clients. *)

let with_client locate f =
  let loop = Loop.create () in
  match R.open_node ~config:!rpc_config ?locate loop with
  | Error m -> refused "%s" m
  | Ok node ->
      let trans ~idempotent h d = R.Sync.trans node ~idempotent h d in
      Fun.protect ~finally:(fun () -> R.close node) (fun () -> f trans)

let parse_cap s =
  match Cap.of_string s with
  | Ok c -> Ok c
  | Error e -> Error (Fmt.str "bad capability: %a" Cap.pp_decode_error e)

(* A progress bar on standard error, when it is a terminal and the transfer large. *)
let progress_bar ~total =
  if total < 4 lsl 20 || not (Unix.isatty Unix.stderr) then ((fun _ -> ()), ignore)
  else
    let start = Unix.gettimeofday () and last = ref 0. in
    let draw n =
      let now = Unix.gettimeofday () in
      if now -. !last >= 0.1 || n >= total then (
        last := now;
        let width = 40 in
        let filled = n * width / max total 1 in
        Printf.eprintf "\r[%s%s] %3d%% %7.1f MB/s%!" (String.make filled '#')
          (String.make (width - filled) ' ')
          (n * 100 / max total 1)
          (float n /. 1e6 /. max (now -. start) 1e-3))
    in
    (draw, fun () -> prerr_string "\r\027[K")

let put locate server file =
  match parse_cap server with
  | Error m -> refused "%s" m
  | Ok server -> (
      match open_in_bin file with
      | exception Sys_error m -> refused "%s" m
      | ic -> (
          Fun.protect ~finally:(fun () -> close_in_noerr ic) @@ fun () ->
          (* A pipe has no length: then the end of the input ends the file. *)
          let size = try in_channel_length ic with Sys_error _ -> max_int in
          let read_error = ref None in
          let input b off len =
            try input ic b off len
            with Sys_error m ->
              read_error := Some m;
              0
          in
          with_client locate @@ fun trans ->
          let draw, clear = progress_bar ~total:(if size = max_int then 0 else size) in
          let r = Fs_client.put trans ~server ~progress:draw ~size input in
          clear ();
          match (r, !read_error) with
          | Ok c, None ->
              print_endline (Cap.to_string c);
              0
          | Ok c, Some m ->
              (* What was read is stored; the file is incomplete: take it back. *)
              ignore (Fs_client.destroy trans c);
              refused "%s: %s" file m
          | Error (`Refused _ as e), _ ->
              refused "put refused: %a; the file was not stored" Fs_client.pp_error e
          | Error e, _ -> failed "put" e))

(* Reads outstanding at once in a get, each on its own node (session), and
   their size: 4 MB in flight keeps the server busy while the client takes
   in and writes out the last read. *)
let get_lanes = 4
let read_size = 1 lsl 20

let get locate cap =
  match parse_cap cap with
  | Error m -> refused "%s" m
  | Ok cap -> (
      let loop = Loop.create () in
      let rec open_nodes i acc =
        if i = 0 then Ok acc
        else
          match R.open_node ~config:!rpc_config ?locate loop with
          | Error m ->
              List.iter R.close acc;
              Error m
          | Ok n -> open_nodes (i - 1) (n :: acc)
      in
      match open_nodes get_lanes [] with
      | Error m -> refused "%s" m
      | Ok nodes -> (
          Fun.protect ~finally:(fun () -> List.iter R.close nodes) @@ fun () ->
          let lanes =
            Array.of_list (List.map (fun n ~idempotent h d k -> R.trans n ~idempotent h d k) nodes)
          in
          let run cond = if not (cond ()) then Loop.run ~until:cond loop in
          flush stdout;
          let write_error = ref None in
          (* Each read straight to the file descriptor, in one write. *)
          let output d =
            if !write_error = None then
              try Consort_util.Io.write_string Unix.stdout d
              with Unix.Unix_error (e, _, _) -> write_error := Some (Unix.error_message e)
          in
          let bar = ref None in
          let progress n total =
            let draw =
              match !bar with
              | Some (d, _) -> d
              | None ->
                  let b = progress_bar ~total in
                  bar := Some b;
                  fst b
            in
            draw n
          in
          let r = Fs_client.get_pipelined lanes ~run ~read_size ~progress cap output in
          (match !bar with Some (_, clear) -> clear () | None -> ());
          match (!write_error, r) with
          | Some m, _ ->
              Fmt.epr "consort: get: cannot write the output: %s@." m;
              2
          | None, Ok _ -> 0
          | None, Error e -> failed "get" e))

let simple what f locate cap =
  match parse_cap cap with
  | Error m -> refused "%s" m
  | Ok cap ->
      with_client locate (fun trans ->
          match f trans cap with Ok () -> 0 | Error e -> failed what e)

let size = simple "size" (fun trans cap -> Result.map (Fmt.pr "%d@.") (Fs_client.size trans cap))
let destroy = simple "destroy" Fs_client.destroy

let info_ =
  simple "info" (fun trans cap ->
      Result.map (fun s -> Fmt.pr "%a %s@." Cap.pp cap s) (Fs_client.info trans cap))

(* consort cap fs revoke CAP: the object gets a secret chosen here, so that
   the new capability is known even when the outcome is not. *)
let revoke locate cap =
  match parse_cap cap with
  | Error m -> refused "%s" m
  | Ok cap ->
      let secret = Cap.Secret.generate () in
      with_client locate (fun trans ->
          match Fs_client.revoke trans cap secret with
          | Ok c ->
              print_endline (Cap.to_string c);
              0
          | Error e when Fs_client.outcome e = `Unknown ->
              Fmt.epr
                "consort: revoke: outcome unknown: %a; if it was carried out, the owner capability \
                 is now %s@."
                Fs_client.pp_error e
                (Cap.to_string (Cap.owner cap.Cap.port ~obj:cap.Cap.obj secret));
              3
          | Error e -> failed "revoke" e)

let status =
  simple "status" (fun trans cap -> Result.map print_endline (Fs_client.status trans cap))

let restrict locate cap rights =
  match Rights.of_string rights with
  | Error m -> refused "bad rights %S: %s" rights m
  | Ok mask ->
      simple "restrict"
        (fun trans cap ->
          Result.map (fun c -> print_endline (Cap.to_string c)) (Fs_client.restrict trans cap mask))
        locate cap

(* The command line. *)

let data = Cap_common.data_arg ~doc:"The file server's data directory."
let bind = Cap_common.bind_arg ~doc:"The UDP address to serve on."

let key =
  Cap_common.key_arg
    ~doc:
      "The server's private key, which its port is derived from (made if missing). Default: \
       $(b,port.key) in the data directory."

let locate = Cap_common.locate
let exits = Cap_common.exits

let cap_arg =
  Arg.(
    required & pos 0 (some string) None & info [] ~docv:"CAP" ~doc:"A capability ($(b,cap1:...)).")

let envs =
  [
    Cap_common.locate_env;
    Cmd.Env.info "CONSORT_MULTICAST"
      ~doc:
        ("The IP multicast group where servers listen for locates and clients ask \
          ($(i,ADDR:PORT)), or $(b,off). Default: " ^ Rpc_udp.default_multicast
       ^ ", where the network has multicast.");
  ]

let params_arg =
  Cap_common.params_arg_with
    ~doc:
      "RPC tunables ($(b,rpc.*), listed by $(b,consort params)), such as \
       $(b,rpc.fragment=61440,rpc.window=16) for larger fragments between machines on jumbo frames \
       ($(b,rpc.loopback_fragment) applies to peers on 127.0.0.0/8)."

let configured t = Cap_common.configured ~setup:R.keep_memory ~params:params_arg t

let fsck_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap fs fsck" "fsck"
       ~doc:
         "Check a file server's data directory (the server must not be running): report each torn \
          or corrupt file on one line and set it aside. Exits 1 if anything was damaged.")
    Term.(const fsck $ data)

let fresh =
  Arg.(
    value & flag
    & info [ "new" ]
        ~doc:
          "Start a brand-new file server on an empty (or missing) $(b,--data), the first time only \
           (as $(b,kv serve --new)). Refused on a directory that holds anything. Without it, an \
           empty or missing data directory is refused: a file server has no replicas, so an empty \
           directory where its store was is a lost store, never a new one.")

let serve_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap fs serve" "serve" ~exits ~envs
       ~doc:
         "Run a file server. Its first line on standard output is $(b,server CAP), the capability \
          that allows creating files. The first start needs $(b,--new) (or $(b,cap fs init) before \
          it).")
    (configured
    @@ Term.(
         const (fun f d b k () () -> serve ~fresh:f d b k)
         $ fresh $ data $ bind $ key $ Consort_cli.logging))

let init_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap fs init" "init" ~exits
       ~doc:
         "Prepare an empty (or missing) data directory for $(b,cap fs serve), as its first start \
          with $(b,--new) would, without serving: a later $(b,cap fs serve) without $(b,--new) \
          starts on it (for a command line that never changes, as a boot server's declaration). \
          Prints the directory and the server's port.")
    Term.(const init $ data $ key)

let put_cmd =
  let server =
    Arg.(
      required
      & opt (some string) None
      & info [ "server" ] ~docv:"CAP" ~doc:"The server's capability.")
  in
  let file =
    Arg.(required & pos 0 (some string) None & info [] ~docv:"FILE" ~doc:"The file to store.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap fs put" "put" ~exits ~envs
       ~doc:"Store a file (committed, safe) and print its capability.")
    (configured @@ Term.(const (fun l s f () -> put l s f) $ locate $ server $ file))

let get_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap fs get" "get" ~exits ~envs
       ~doc:"Write a file's bytes to standard output.")
    (configured @@ Term.(const (fun l c () -> get l c) $ locate $ cap_arg))

let size_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap fs size" "size" ~exits ~envs ~doc:"Print a file's size.")
    (configured @@ Term.(const (fun l c () -> size l c) $ locate $ cap_arg))

let revoke_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap fs revoke" "revoke" ~exits ~envs
       ~doc:
         "Revoke every capability of a file, or of the server itself (its $(b,server) capability): \
          the object gets a new secret, and the new owner capability is printed. Needs a \
          capability with every right.")
    (configured @@ Term.(const (fun l c () -> revoke l c) $ locate $ cap_arg))

let fs_cmd =
  Cmd.group
    (Cmd.info "fs" ~exits:Consort_cli.exits
       ~doc:"The immutable file server (Bullet semantics) and its tools.")
    [ serve_cmd; init_cmd; put_cmd; get_cmd; size_cmd; revoke_cmd; fsck_cmd ]

let restrict_cmd =
  let rights =
    Arg.(
      required
      & opt (some string) None
      & info [ "rights" ] ~docv:"LIST"
          ~doc:"The rights to keep: $(b,read,create,modify,destroy,admin,...).")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap restrict" "restrict" ~exits ~envs
       ~doc:
         "Print a capability with fewer rights (made locally from an owner capability, asked of \
          the server otherwise).")
    (configured @@ Term.(const (fun l c r () -> restrict l c r) $ locate $ cap_arg $ rights))

let destroy_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap destroy" "destroy" ~exits ~envs ~doc:"Destroy an object.")
    (configured @@ Term.(const (fun l c () -> destroy l c) $ locate $ cap_arg))

let info_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap info" "info" ~exits ~envs
       ~doc:"Print a capability's port, object and rights, and the server's description.")
    (configured @@ Term.(const (fun l c () -> info_ l c) $ locate $ cap_arg))

let status_cmd =
  Cmd.v
    (Consort_cli.info ~path:"cap status" "status" ~exits ~envs
       ~doc:"Print a server's status (std_status).")
    (configured @@ Term.(const (fun l c () -> status l c) $ locate $ cap_arg))

let cmd =
  Cmd.group
    (Cmd.info "cap" ~exits:Consort_cli.exits
       ~doc:"Capability services: the file server, capabilities.")
    ([
       fs_cmd;
       restrict_cmd;
       destroy_cmd;
       info_cmd;
       status_cmd;
       Proc_cmd.proc;
       Proc_cmd.exec;
       Proc_cmd.agent;
       Proc_cmd.ps;
       Proc_cmd.kill;
       Boot_cmd.cmd;
     ]
    @ Dir_cmd.commands @ Capsh_cmd.commands @ [ Capdemo_cmd.cmd ])
