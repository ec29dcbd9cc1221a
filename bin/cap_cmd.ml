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
       Proc_cmd.ps;
       Proc_cmd.kill;
       Boot_cmd.cmd;
     ]
    @ Dir_cmd.commands @ Capsh_cmd.commands @ [ Capdemo_cmd.cmd ])

(* consort bench fs: reading a 100 MB file from the server beside cat. *)

let bench_fs size_mb rounds json =
  let exe = Sys.executable_name in
  let dir = Consort_local.temp_dir "consort-bench-fs" in
  let server = ref None in
  let cleanup_server () =
    match !server with
    | Some pid -> (
        server := None;
        (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
        try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
    | None -> ()
  in
  let cleanup () =
    cleanup_server ();
    Consort_local.rm_rf dir
  in
  Fun.protect ~finally:cleanup @@ fun () ->
  let file = Filename.concat dir "file" and data = Filename.concat dir "data" in
  let size = size_mb * 1_000_000 in
  let oc = open_out_bin file in
  let st = Random.State.make [| 42 |] in
  let chunk = Bytes.create 1_000_000 in
  for _ = 1 to size_mb do
    for i = 0 to Bytes.length chunk - 1 do
      Bytes.unsafe_set chunk i (Char.unsafe_chr (Random.State.bits st land 255))
    done;
    output_bytes oc chunk
  done;
  close_out oc;
  let addr = Printf.sprintf "127.0.0.1:%d" (Consort_local.free_port ()) in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
  (* Starts the server; its first line. *)
  let start_server params =
    let r, w = Unix.pipe ~cloexec:true () in
    let pid =
      Unix.create_process exe
        (Array.append [| exe; "cap"; "fs"; "serve"; "--data"; data; "--bind"; addr |] params)
        devnull w devnull
    in
    server := Some pid;
    Unix.close w;
    let ic = Unix.in_channel_of_descr r in
    let line = try input_line ic with End_of_file -> "" in
    close_in ic;
    line
  in
  let line = start_server [||] in
  let env = Array.append [| "CONSORT_LOCATE=" ^ addr |] (Unix.environment ()) in
  (* The server's CPU time so far (Linux: /proc/PID/stat, in clock ticks of
     1/100 s), or nan. *)
  let server_time () =
    match !server with
    | None -> nan
    | Some pid -> (
        try
          let ic = open_in (Printf.sprintf "/proc/%d/stat" pid) in
          let l = Fun.protect ~finally:(fun () -> close_in ic) (fun () -> input_line ic) in
          let rest =
            String.sub l (String.rindex l ')' + 2) (String.length l - String.rindex l ')' - 2)
          in
          match String.split_on_char ' ' rest with
          | _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: ut :: st :: _ ->
              (float_of_string ut /. 100.) +. (float_of_string st /. 100.)
          | _ -> nan
        with _ -> nan)
  in
  (* Runs [argv]: its exit status, wall time, CPU time, and the server's CPU
     time meanwhile. *)
  let run argv ~stdout =
    let t0 = Unix.gettimeofday () and c0 = Unix.times () and s0 = server_time () in
    let pid = Unix.create_process_env argv.(0) argv env devnull stdout Unix.stderr in
    let _, st = Unix.waitpid [] pid in
    let c1 = Unix.times () and s1 = server_time () in
    ( st,
      Unix.gettimeofday () -. t0,
      c1.tms_cutime +. c1.tms_cstime -. c0.tms_cutime -. c0.tms_cstime,
      s1 -. s0 )
  in
  match String.split_on_char ' ' line with
  | [ "server"; scap ] -> (
      let out = Filename.concat dir "cap" in
      let o =
        Unix.openfile out [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
      in
      let st, put_s, _, _ = run [| exe; "cap"; "fs"; "put"; "--server"; scap; file |] ~stdout:o in
      Unix.close o;
      match st with
      | Unix.WEXITED 0 -> (
          let cap =
            let ic = open_in_bin out in
            Fun.protect ~finally:(fun () -> close_in ic) (fun () -> String.trim (input_line ic))
          in
          let blob =
            match Sys.readdir (Filename.concat data "blobs") with
            | [| b |] -> Filename.concat (Filename.concat data "blobs") b
            | _ -> file
          in
          (* Each round: cat, then the get, then (as between machines) the get
             with 8 KB fragments; every ratio is of one round's figures. *)
          let lan = [| "--params"; "rpc.loopback_fragment=0" |] in
          match
            List.init rounds (fun _ ->
                let st1, t_cat, c_cat, _ = run [| "cat"; blob |] ~stdout:devnull in
                let st2, t_get, c_get, s_get =
                  run [| exe; "cap"; "fs"; "get"; cap |] ~stdout:devnull
                in
                let st3, t_lan, _, _ =
                  run (Array.append [| exe; "cap"; "fs"; "get"; cap |] lan) ~stdout:devnull
                in
                if st1 <> Unix.WEXITED 0 || st2 <> Unix.WEXITED 0 || st3 <> Unix.WEXITED 0 then
                  raise Exit;
                (t_cat, t_get, t_lan, c_cat, c_get, s_get))
          with
          | exception Exit ->
              Fmt.epr "consort: bench fs: a read failed@.";
              1
          | rounds_l ->
              Unix.close devnull;
              (* The store alone, in this process, once the server is gone. *)
              cleanup_server ();
              let t_store =
                match Store.open_ ~clock data with
                | Error _ -> nan
                | Ok (store, _) ->
                    Fun.protect ~finally:(fun () -> Store.close store) @@ fun () ->
                    let obj = List.hd (Store.files store) in
                    let buf = Bytes.create read_size in
                    let best = ref infinity in
                    for _ = 1 to rounds do
                      let t0 = Unix.gettimeofday () in
                      let rec go off =
                        match Store.read_into store obj ~off buf 0 (Bytes.length buf) with
                        | Ok 0 | Error _ -> ()
                        | Ok n -> go (off + n)
                      in
                      go 0;
                      best := min !best (Unix.gettimeofday () -. t0)
                    done;
                    !best
              in
              let mbs t = float size /. 1e6 /. t in
              let load =
                try
                  let ic = open_in "/proc/loadavg" in
                  Fun.protect
                    ~finally:(fun () -> close_in ic)
                    (fun () -> List.hd (String.split_on_char ' ' (input_line ic)))
                with _ -> "?"
              in
              Fmt.pr
                "File server: reading a %d MB file, %d rounds (load %s; the put took %.2f s, %.1f \
                 MB/s)@."
                size_mb rounds load put_s (mbs put_s);
              List.iteri
                (fun i (t_cat, t_get, t_lan, c_cat, c_get, s_get) ->
                  Fmt.pr
                    "  round %d: cat %.1f MB/s, get %.1f MB/s (8 KB fragments %.1f), ratio %.3f; \
                     CPU: cat %.3f s, get %.3f s, server %.3f s@."
                    (i + 1) (mbs t_cat) (mbs t_get) (mbs t_lan) (t_cat /. t_get) c_cat c_get s_get)
                rounds_l;
              let median key =
                let a = Array.of_list rounds_l in
                Array.sort (fun x y -> compare (key x) (key y)) a;
                a.(Array.length a / 2)
              in
              let t_cat, t_get, _, _, _, _ = median (fun (c, g, _, _, _, _) -> c /. g) in
              let t_cat8, _, t_lan, _, _, _ = median (fun (c, _, l, _, _, _) -> c /. l) in
              Fmt.pr "  the median round of each comparison, both sides from that round:@.";
              Fmt.pr "  %-36s %8s  %8s@." "" "rate" "time";
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s@." "cat of the stored file" (mbs t_cat) t_cat;
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s  ratio get / cat %.3f@."
                "consort cap fs get (RPC, loopback)" (mbs t_get) t_get (t_cat /. t_get);
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s  ratio to cat %.3f (cat %.1f MB/s)@."
                "the same, 8 KB fragments (LAN)" (mbs t_lan) t_lan (t_cat8 /. t_lan) (mbs t_cat8);
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s@." "the store alone (in process)" (mbs t_store)
                t_store;
              (* Per second of CPU of the busier process (server or reader: they
             run side by side), which other load does not change. *)
              let _, _, _, c_cat, c_get, s_get =
                median (fun (_, _, _, c, g, sv) -> c /. Float.max g sv)
              in
              let busier = Float.max c_get s_get in
              Fmt.pr
                "  per second of CPU (cat's; the busier of server and reader): cat %.1f MB/s, get \
                 %.1f MB/s, ratio %.3f@."
                (mbs c_cat) (mbs busier) (c_cat /. busier);
              (* Every byte read is sealed by the server and opened by the client
             (two processes, so the two overlap): the cipher's rate on one
             side bounds any encrypted read. *)
              let seal = Consort_cap_bench.Rpc_bench.gcm_seal (size / 2) in
              Fmt.pr
                "  what bounds it: AES-256-GCM sealing 60 KB fragments alone, %.1f MB/s per second \
                 of CPU: ratio to cat %.3f;@."
                seal
                (seal /. mbs c_cat);
              Fmt.pr "  the get reaches %.0f%% of that (per second of CPU of the busier side)@."
                (100. *. mbs busier /. seal);
              if json then
                Fmt.pr
                  "{\"bench\":\"fs\",\"size_mb\":%d,\"cat_mbs\":%.1f,\"get_mbs\":%.1f,\"ratio\":%.4f,\"cat_cpu_s\":%.3f,\"get_cpu_s\":%.3f,\"server_cpu_s\":%.3f,\"store_mbs\":%.1f,\"put_mbs\":%.1f,\"gcm_seal_mbs\":%.1f,\"get_cpu_mbs\":%.1f,\"cat_cpu_mbs\":%.1f,\"get_8k_mbs\":%.1f}@."
                  size_mb (mbs t_cat) (mbs t_get) (t_cat /. t_get) c_cat c_get s_get (mbs t_store)
                  (mbs put_s) seal (mbs busier) (mbs c_cat) (mbs t_lan);
              0)
      | _ ->
          Fmt.epr "consort: bench fs: the put failed@.";
          1)
  | _ ->
      Fmt.epr "consort: bench fs: the server did not start@.";
      1

let bench =
  let size =
    Arg.(
      value & opt Consort_cli.positive_int 100 & info [ "size" ] ~docv:"MB" ~doc:"File size in MB.")
  in
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "rounds" ] ~docv:"N"
          ~doc:
            "Rounds, each timing cat and the reads; the median round of each comparison is shown.")
  in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  Cmd.v
    (Consort_cli.info ~path:"bench fs" "fs"
       ~doc:"File server read throughput of a 100 MB file beside cat of the same file.")
    Term.(const bench_fs $ size $ rounds $ json)
