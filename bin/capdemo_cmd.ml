(* consort cap demo: one host's capability services started by the boot server (a file server, a
   directory of three replicas, two process servers), a program stored by path and run on each
   process server, a replica and a process server killed while the system goes on. *)
open Cmdliner
open Consort_cap
open Consort_local
module Loop = Consort_engine.Loop
module Boot = Consort_capboot.Boot
module Decl = Consort_capboot.Decl
module Time = Consort.Time

let ( / ) = Filename.concat

let program =
  {|(* The demo's program: says where it runs, and exits with 7. *)
let () =
  Printf.printf "hello from process %d, arguments: %s\n" (Unix.getpid ())
    (String.concat " " (List.tl (Array.to_list Sys.argv)));
  exit 7
|}

exception Failed of string

let demo timeout keep =
  let exe = Sys.executable_name in
  let t0 = Unix.gettimeofday () in
  let dir = temp_dir "consort-demo" in
  let passed = ref 0 and failed = ref 0 in
  let say fmt = Fmt.kstr (fun s -> Fmt.pr "%6.1f s  %s@." (Unix.gettimeofday () -. t0) s) fmt in
  let check what ok =
    if ok then (
      incr passed;
      say "ok: %s" what)
    else (
      incr failed;
      say "FAILED: %s" what)
  in
  let addr p = Printf.sprintf "127.0.0.1:%d" p in
  let fs = free_port () in
  let dirs = List.init 3 (fun i -> (i + 1, free_port (), free_port ())) in
  let procs = List.init 2 (fun i -> (i + 1, free_port ())) in
  let locate =
    String.concat ","
      ((addr fs :: List.map (fun (_, r, _) -> addr r) dirs) @ List.map (fun (_, p) -> addr p) procs)
  in
  (* The directory's replicas share one key, made here: the root capability follows from it. *)
  let key =
    match Port.Key.load_or_create (dir / "dir.key") with Ok k -> k | Error m -> failwith m
  in
  let root = Consort_capdir.Dir_server.root_of_key key in
  (* The replicas' data directories, made as for a new cluster (cap dir init --new), so that the
     declaration's command line is the same at every restart. *)
  List.iter
    (fun (i, _, _) ->
      match
        Consort_capdir.Dir_server.init
          ~data:(dir / Printf.sprintf "dir%d" i)
          ~key Consort_kv.Store.New
      with
      | Ok () -> ()
      | Error m -> failwith m)
    dirs;
  List.iter (fun d -> Unix.mkdir (dir / d) 0o700) [ "boot"; "proc1"; "proc2" ];
  (* The file server's, made as cap fs init makes it (its first start's --new), for the same
     reason. *)
  (match Fs_data.init ~data:(dir / "fs") ~key_file:(dir / "fs" / "port.key") with
  | Ok _ -> ()
  | Error m -> failwith m);
  let decl =
    String.concat "\n"
      ([
         "# Written by consort cap demo: one host on loopback.";
         "service fs";
         Printf.sprintf "  run %s cap fs serve --data %s --bind %s" exe (dir / "fs") (addr fs);
         "  at " ^ addr fs;
         "  backoff 0.2 2";
       ]
      @ List.concat_map
          (fun (i, rpc, group) ->
            let peers =
              String.concat ","
                (List.filter_map (fun (j, _, g) -> if j <> i then Some (addr g) else None) dirs)
            in
            [
              Printf.sprintf "service dir%d" i;
              Printf.sprintf
                "  run %s cap dir serve --data %s --key %s --bind %s --group %s --peers %s" exe
                (dir / Printf.sprintf "dir%d" i)
                (dir / "dir.key") (addr rpc) (addr group) peers;
              "  at " ^ addr rpc;
              "  after fs";
              "  backoff 0.2 2";
            ])
          dirs
      @ List.concat_map
          (fun (i, p) ->
            [
              Printf.sprintf "service proc%d" i;
              Printf.sprintf "  run %s cap proc serve --data %s --bind %s --locate %s%s" exe
                (dir / Printf.sprintf "proc%d" i)
                (addr p) (addr fs)
                (* as root without make deps' user: nobody's uid and gid *)
                (if Unix.geteuid () = 0 && Result.is_error (Proc_cmd.program_user None) then
                   " --user 65534:65534"
                 else "");
              "  at " ^ addr p;
              "  after fs";
              "  backoff 0.2 2";
            ])
          procs
      @ [
          "# The garbage collector: a round every second over the directory and the file server.";
          "service gc";
          Printf.sprintf "  run %s cap dir gc --server $dir1 --fs $fs --every 1" exe;
          "  env CONSORT_ROOT=" ^ Cap.to_string root;
          "  env CONSORT_LOCATE=" ^ locate;
          "  env CONSORT_MULTICAST=off";
          "  capability none";
          "  after dir2 dir3";
          "  backoff 0.2 2";
        ])
    ^ "\n"
  in
  write_file (dir / "host.decl") decl;
  let loop = Loop.create () in
  let env =
    Array.append
      [|
        "CONSORT_ROOT=" ^ Cap.to_string root; "CONSORT_LOCATE=" ^ locate; "CONSORT_MULTICAST=off";
      |]
      (Unix.environment ())
  in
  Unix.putenv "CONSORT_MULTICAST" "off";
  let node = match Rpc_udp.open_node ~locate loop with Ok n -> n | Error m -> failwith m in
  let services = match Decl.load (dir / "host.decl") with Ok l -> l | Error e -> failwith e in
  let boot =
    Boot.create ~log_dir:(dir / "boot")
      ~on_change:(fun name st detail -> say "boot: %s %s %s" name (Boot.state_name st) detail)
      loop node services
  in
  let deadline = t0 +. timeout in
  (* Runs the loop (the boot server) until [cond], or fails past the deadline. *)
  let wait what cond =
    let tick = ref None in
    let rec arm () = tick := Some (Loop.after loop (Time.of_ms 20) arm) in
    arm ();
    Loop.run ~until:(fun () -> cond () || Unix.gettimeofday () > deadline) loop;
    Option.iter Loop.cancel !tick;
    if not (cond ()) then raise (Failed (what ^ ": not within the demo's time"))
  in
  (* A command of this program as a child, the boot server running meanwhile: its status and
     output. *)
  let run args =
    let out = dir / "out" and err = dir / "err" in
    let fd p =
      Unix.openfile p [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
    in
    let o = fd out and e = fd err in
    let null = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
    let pid = Unix.create_process_env exe (Array.of_list (exe :: args)) env null o e in
    List.iter Unix.close [ o; e; null ];
    let status = ref None in
    (try
       wait
         ("consort " ^ String.concat " " args)
         (fun () ->
           (match !status with
           | None -> (
               match Unix.waitpid [ Unix.WNOHANG ] pid with
               | 0, _ -> ()
               | _, Unix.WEXITED c -> status := Some c
               | _, _ -> status := Some 255)
           | Some _ -> ());
           !status <> None)
     with Failed m ->
       (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
       (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
       raise (Failed m));
    (Option.get !status, read_file out, String.trim (read_file err))
  in
  (* A command retried while refused, as while the replicas form their group. *)
  let rec until_ok ?(tries = 40) args =
    match run args with
    | 0, o, _ -> o
    | c, _, e when tries > 0 ->
        ignore c;
        ignore e;
        let t = Unix.gettimeofday () in
        wait "a pause" (fun () -> Unix.gettimeofday () -. t > 0.5);
        until_ok ~tries:(tries - 1) args
    | c, _, e ->
        raise (Failed (Printf.sprintf "consort %s: exit %d: %s" (String.concat " " args) c e))
  in
  let up name = List.assoc_opt name (Boot.states boot) = Some Boot.Up in
  let all =
    ("fs" :: List.map (fun (i, _, _) -> Printf.sprintf "dir%d" i) dirs)
    @ List.map (fun (i, _) -> Printf.sprintf "proc%d" i) procs
  in
  let cap_of name =
    match Boot.capability boot name with
    | Some c -> Cap.to_string c
    | None -> raise (Failed (name ^ " has no capability"))
  in
  let link_proc i =
    ignore
      (until_ok
         [
           "cap"; "dir"; "link"; Printf.sprintf "/sys/proc%d" i; cap_of (Printf.sprintf "proc%d" i);
         ])
  in
  let exec i =
    let code, out, err =
      run [ "cap"; "exec"; "-n"; Printf.sprintf "/sys/proc%d" i; "/bin/hello"; "from"; "demo" ]
    in
    say "proc%d ran /bin/hello: exit %d, output: %s%s" i code (String.trim out)
      (if err = "" then "" else " (" ^ err ^ ")");
    check
      (Printf.sprintf "the program ran on proc%d and its exit code came back" i)
      (code = 7 && contains out "hello from process" && contains out "from demo")
  in
  let result =
    match
      say "working directory %s" dir;
      say "starting fs, dir1-3, proc1-2 and gc through the boot server (%s)" (dir / "host.decl");
      Boot.start boot;
      wait "every service up" (fun () -> List.for_all up all);
      check "every service is up" true;
      (* The servers, reachable from the root directory. *)
      ignore (until_ok [ "cap"; "mkdir"; "/sys" ]);
      ignore (until_ok [ "cap"; "dir"; "link"; "/sys/fs"; cap_of "fs" ]);
      List.iter (fun (i, _) -> link_proc i) procs;
      ignore (until_ok [ "cap"; "mkdir"; "/bin" ]);
      say "linked /sys/fs, /sys/proc1, /sys/proc2 in the directory";
      (* A program, compiled here, stored by path. *)
      write_file (dir / "hello.ml") program;
      (match
         Unix.create_process "ocamlfind"
           [|
             "ocamlfind";
             "ocamlc";
             "-package";
             "unix";
             "-linkpkg";
             "-o";
             dir / "hello.bc";
             dir / "hello.ml";
           |]
           Unix.stdin Unix.stdout Unix.stderr
       with
      | exception Unix.Unix_error _ -> raise (Failed "cannot run ocamlfind ocamlc")
      | pid -> (
          match Unix.waitpid [] pid with
          | _, Unix.WEXITED 0 -> ()
          | _ -> raise (Failed "ocamlc could not compile the program")));
      ignore (until_ok [ "cap"; "put"; dir / "hello.bc"; "/bin/hello" ]);
      let ls = until_ok [ "cap"; "ls"; "/bin" ] in
      check "the program is stored at /bin/hello" (contains ls "hello\t");
      List.iter (fun (i, _) -> exec i) procs;
      (* A replica and a process server killed. *)
      let victims = [ "dir2"; "proc1" ] in
      List.iter
        (fun v ->
          Boot.hold boot v true;
          match Boot.pid boot v with
          | Some p ->
              say "killing %s (pid %d, SIGKILL; restarts held)" v p;
              Unix.kill p Sys.sigkill
          | None -> raise (Failed (v ^ " has no process")))
        victims;
      let ls = until_ok [ "cap"; "ls"; "/bin" ] in
      check "the directory answers with a replica killed" (contains ls "hello\t");
      exec 2;
      check "dir2 and proc1 were down meanwhile (held by the boot server)"
        (List.for_all (fun v -> (not (up v)) && Boot.pid boot v = None) victims);
      say "releasing dir2 and proc1: the boot server restarts them";
      List.iter (fun v -> Boot.hold boot v false) victims;
      wait "the killed services restarted" (fun () ->
          List.for_all (fun v -> up v && Boot.pid boot v <> None) victims
          && List.for_all (fun v -> List.assoc_opt v (Boot.states boot) = Some Boot.Up) victims);
      check "the boot server restarted dir2 and proc1" true;
      link_proc 1;
      exec 1;
      let ls = until_ok [ "cap"; "ls"; "/sys" ] in
      check "the directory lists the servers" (contains ls "fs\t" && contains ls "proc1\t");
      (* The collector ran by itself, and kept what the root reaches. *)
      let collected () =
        let log = try read_file (dir / "boot" / "gc.log") with Sys_error _ -> "" in
        contains log "objects touched"
      in
      wait "a round of garbage collection" collected;
      check "the collector completed a round by itself" true;
      let ls = until_ok [ "cap"; "ls"; "/bin" ] in
      check "what the root reaches is kept" (contains ls "hello\t")
    with
    | () -> Ok ()
    | exception Failed m -> Error m
  in
  (match result with
  | Ok () -> ()
  | Error m ->
      incr failed;
      say "FAILED: %s" m);
  say "stopping every service";
  Boot.stop boot;
  Rpc_udp.close node;
  let leftover = List.filter_map (fun n -> Boot.pid boot n) all in
  check "nothing left running" (leftover = []);
  if keep then say "kept %s" dir else rm_rf dir;
  Fmt.pr "%d passed, %d failed@." !passed !failed;
  if !failed = 0 then 0 else 1

let cmd =
  let timeout =
    Arg.(
      value
      & opt Consort_cli.positive_float 180.
      & info [ "timeout" ] ~docv:"SECONDS" ~doc:"Give up (and stop everything) after this long.")
  in
  let keep =
    Arg.(
      value & flag & info [ "keep" ] ~doc:"Keep the working directory (logs, stores) at the end.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap demo" "demo"
       ~doc:
         "Start, through the boot server, a file server, a directory of three replicas and two \
          process servers on loopback; store a program by path and run it on each process server; \
          kill a directory replica and a process server and show that the system goes on; stop \
          everything. Ends with $(b,N passed, M failed) over its checks.")
    Term.(const demo $ timeout $ keep)
