(* The capability services on a real host (issue 30): secrets on the disk and the README's
   walk-through.

   - Every file that holds a secret or a capability is created 0600 in 0700 directories, even
     under umask 000; a server refuses to start (exit 2, one line saying how to fix it) on one that
     another user could read; the boot server's logs hold digests, never capabilities; and a local
     user created for the test (useradd, removed after) can read none of them.
   - The README's walk-through, extracted from README.md and run as written, from nothing (an empty
     /var/lib in a mount namespace, loopback in a network namespace of its own). *)

open Consort_local
open Cap_procs
module Store = Consort_capfs.Store
module Dir_store = Consort_kv.Store.Make (Consort_capdir.Dir.Rsm)

let ( / ) = Filename.concat
let here = Filename.dirname Sys.executable_name
let mode p = (Unix.stat p).Unix.st_perm land 0o777

let with_umask u f =
  let old = Unix.umask u in
  Fun.protect ~finally:(fun () -> ignore (Unix.umask old)) f

let with_dir f =
  let d = temp_dir "consort-caphost" in
  Fun.protect ~finally:(fun () -> rm_rf d) (fun () -> f d)

(* Every file under [d] is 0600 and every directory 0700. *)
let rec check_private what d =
  Alcotest.(check string) (what ^ ": " ^ d) "700" (Printf.sprintf "%o" (mode d));
  Array.iter
    (fun n ->
      let p = d / n in
      match (Unix.lstat p).Unix.st_kind with
      | Unix.S_DIR -> check_private what p
      | Unix.S_REG -> Alcotest.(check string) (what ^ ": " ^ p) "600" (Printf.sprintf "%o" (mode p))
      | _ -> ())
    (Sys.readdir d)

let one_line what err =
  let lines = List.filter (( <> ) "") (String.split_on_char '\n' err) in
  if List.length lines <> 1 then Alcotest.failf "%s: %d lines: %S" what (List.length lines) err

let expect_fix what ~fix err =
  one_line what err;
  if not (contains err fix) then Alcotest.failf "%s: no %S in %S" what fix err

let clock () = Consort.Time.zero

(* {1 The file server's store} *)

let store_modes () =
  with_dir @@ fun base ->
  let d = base / "a" / "fs" in
  with_umask 0 (fun () ->
      match Store.open_ ~clock d with
      | Error _ -> Alcotest.fail "open"
      | Ok (st, _) ->
          let o = Result.get_ok (Store.create st ~commit:true ~safe:true "secret bytes") in
          ignore o;
          ignore (Result.get_ok (Store.create st ~commit:false ~safe:false "uncommitted"));
          Store.close st);
  check_private "store under umask 000" (base / "a");
  Alcotest.(check bool) "a record" true (Array.length (Sys.readdir (d / "meta")) = 1)

let store_refuses () =
  with_dir @@ fun base ->
  let d = base / "fs" in
  (match Store.open_ ~clock d with
  | Ok (st, _) ->
      ignore (Result.get_ok (Store.create st ~commit:true ~safe:true "x"));
      Store.close st
  | Error _ -> Alcotest.fail "open");
  let record = d / "meta" / (Sys.readdir (d / "meta")).(0) in
  List.iter
    (fun (p, bad, good, fix) ->
      Unix.chmod p bad;
      (match Store.open_ ~clock d with
      | Ok (st, _) ->
          Store.close st;
          Alcotest.failf "opened with %s mode %o" p bad
      | Error (`Io m) -> expect_fix p ~fix m
      | Error `Locked -> Alcotest.fail "locked");
      Unix.chmod p good;
      match Store.open_ ~clock d with
      | Ok (st, _) -> Store.close st
      | Error _ -> Alcotest.failf "%s: not opened once fixed" p)
    [
      (d / "server", 0o644, 0o600, "chmod 600");
      (record, 0o644, 0o600, "chmod 600");
      (record, 0o660, 0o600, "chmod 600");
      (record, 0o602, 0o600, "chmod 600");
      (d / "meta", 0o755, 0o700, "chmod 700");
    ]

(* The directory replica's log and snapshot (the key-value store's). *)
let replica_log () =
  with_dir @@ fun base ->
  let d = base / "dir1" in
  let limits = Consort_capdir.Dir.Rsm.default_limits in
  with_umask 0 (fun () ->
      match Dir_store.open_ ~limits d with
      | Ok (s, _) -> Dir_store.close s
      | Error e -> Alcotest.fail e);
  check_private "replica under umask 000" d;
  Alcotest.(check bool) "a log" true (Sys.file_exists (d / "wal"));
  Unix.chmod (d / "wal") 0o644;
  match Dir_store.open_ ~limits d with
  | Ok (s, _) ->
      Dir_store.close s;
      Alcotest.fail "opened a world-readable log"
  | Error m -> expect_fix "wal" ~fix:"chmod 600" m

(* A key file. *)
let key_file () =
  with_dir @@ fun d ->
  let k = Consort_cap.Port.Key.generate () in
  with_umask 0 (fun () ->
      match Consort_cap.Port.Key.save (d / "port.key") k with
      | Ok () -> ()
      | Error e -> Alcotest.fail e);
  Alcotest.(check string) "key 0600" "600" (Printf.sprintf "%o" (mode (d / "port.key")));
  Unix.chmod (d / "port.key") 0o644;
  match Consort_cap.Port.Key.load (d / "port.key") with
  | Ok _ -> Alcotest.fail "loaded a world-readable key"
  | Error m -> expect_fix "key" ~fix:"chmod 600" m

(* {1 The servers, as processes} *)

(* Starts [consort args] under umask 000, waits until its output holds [until] (default: its first
   line), then stops it (SIGTERM). *)
let run_once ?(until = "\n") d what args =
  let out = d / (what ^ ".out") and err = d / (what ^ ".err") in
  let pid = with_umask 0 (fun () -> spawn ~out ~err args) in
  Fun.protect
    ~finally:(fun () ->
      (try Unix.kill pid Sys.sigterm with Unix.Unix_error _ -> ());
      ignore (wait_code pid))
    (fun () ->
      eventually (Printf.sprintf "%s prints %S" what until) (fun () ->
          contains (try read_file out with Sys_error _ -> "") until))

(* A file server as a boot service, on a port of its own that the boot server polls ([at]). *)
let fs_service name data =
  (* Its data directory made before, as the declaration's command line is the same at every
     start (cap fs init, under umask 000 as the servers here). *)
  with_umask 0 (fun () -> fs_init data);
  let a = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  Printf.sprintf "service %s\n  run %s cap fs serve --data %s --bind %s\n  at %s\n" name
    (consort ()) data a a

(* [consort args] refuses to start: exit 2 and one line naming the fix. *)
let refuses d what ~fix ~path args =
  let out = d / (what ^ ".out") and err = d / (what ^ ".err") in
  let code = wait_code (spawn ~out ~err args) in
  Alcotest.(check int) (what ^ ": exit 2") 2 code;
  expect_fix what ~fix (read_file err);
  expect_fix what ~fix:path (read_file err)

let servers_refuse () =
  with_dir @@ fun d ->
  (* The file server. *)
  let fs = d / "srv" / "fs" in
  let fs_args = [ "cap"; "fs"; "serve"; "--data"; fs; "--bind"; "127.0.0.1:0" ] in
  run_once d "fs" [ "cap"; "fs"; "serve"; "--new"; "--data"; fs; "--bind"; "127.0.0.1:0" ];
  check_private "fs serve under umask 000" (d / "srv");
  List.iter
    (fun f ->
      Unix.chmod (fs / f) 0o644;
      refuses d ("fs with " ^ f) ~fix:"chmod 600" ~path:(fs / f) fs_args;
      Unix.chmod (fs / f) 0o600)
    [ "server"; "port.key" ];
  run_once d "fs again" fs_args;
  (* The process server. *)
  let proc = d / "srv" / "proc" in
  let proc_args = [ "cap"; "proc"; "serve"; "--data"; proc; "--bind"; "127.0.0.1:0" ] in
  run_once d "proc" proc_args;
  check_private "proc serve under umask 000" proc;
  List.iter
    (fun f ->
      Unix.chmod (proc / f) 0o640;
      refuses d ("proc with " ^ f) ~fix:"chmod 600" ~path:(proc / f) proc_args;
      Unix.chmod (proc / f) 0o600)
    [ "server.secret"; "port.key" ];
  (* The boot server, with one service that prints a capability before its own. *)
  let decl = d / "boot.decl" in
  write_file decl (fs_service "fs" (d / "srv" / "fs2"));
  let boot = d / "srv" / "boot" in
  let boot_args =
    [ "cap"; "boot"; "serve"; "--decl"; decl; "--data"; boot; "--bind"; "127.0.0.1:0" ]
  in
  run_once d "boot" boot_args;
  check_private "boot serve under umask 000" boot;
  List.iter
    (fun f ->
      Unix.chmod (boot / f) 0o604;
      refuses d ("boot with " ^ f) ~fix:"chmod 600" ~path:(boot / f) boot_args;
      Unix.chmod (boot / f) 0o600)
    [ "server.secret"; "port.key" ]

(* [consort cap boot status]: with the boot server's directory, or its capability with the admin
   right; a capability without it is refused. *)
let boot_status () =
  with_dir @@ fun d ->
  let decl = d / "boot.decl" and boot = d / "boot" in
  write_file decl
    (fs_service "fs" (d / "fs") ^ "service idle\n  run /bin/sleep 120\n  capability none\n");
  let out = d / "boot.out" in
  let pid =
    spawn ~out ~err:(d / "boot.err")
      [ "cap"; "boot"; "serve"; "--decl"; decl; "--data"; boot; "--bind"; "127.0.0.1:0" ]
  in
  Fun.protect
    ~finally:(fun () ->
      Unix.kill pid Sys.sigterm;
      ignore (wait_code pid))
    (fun () ->
      let status what args =
        let o = d / (what ^ ".out") and e = d / (what ^ ".err") in
        let code = wait_code (spawn ~out:o ~err:e ("cap" :: "boot" :: "status" :: args)) in
        (code, read_file o, read_file e)
      in
      let code, o, _ = status "wait" [ "--data"; boot; "--wait"; "30" ] in
      Alcotest.(check int) "status --wait: exit 0" 0 code;
      if not (contains o "fs up server cap1:" && contains o "idle up none -") then
        Alcotest.failf "status: %S" o;
      let code, o, _ = status "only" [ "--data"; boot; "--only"; "fs" ] in
      Alcotest.(check int) "--only fs: exit 0" 0 code;
      let fs_cap = String.trim o in
      Alcotest.(check bool)
        "--only fs: a capability alone" true
        (Result.is_ok (Consort_cap.Cap.of_string fs_cap)
        && contains (read_file (d / "wait.out")) fs_cap);
      let server =
        match String.split_on_char ' ' (List.hd (String.split_on_char '\n' (read_file out))) with
        | [ "server"; c ] -> Result.get_ok (Consort_cap.Cap.of_string c)
        | _ -> Alcotest.fail "no server line"
      in
      let at = String.trim (read_file (boot / "address")) in
      let at = match String.split_on_char ':' at with [ _; p ] -> "127.0.0.1:" ^ p | _ -> at in
      let code, o, _ =
        status "cap" [ Consort_cap.Cap.to_string server; "--locate"; at; "--only"; "fs" ]
      in
      Alcotest.(check int) "with the capability: exit 0" 0 code;
      Alcotest.(check string) "the same capability" fs_cap (String.trim o);
      let no_admin =
        Result.get_ok (Consort_cap.Cap.restrict server (Consort_cap.Rights.of_int_exn 0x7f))
      in
      let code, o, e = status "no admin" [ Consort_cap.Cap.to_string no_admin; "--locate"; at ] in
      Alcotest.(check int) "without admin: exit 2" 2 code;
      Alcotest.(check string) "without admin: nothing printed" "" o;
      expect_fix "without admin" ~fix:"STD_DENIED" e;
      let code, _, e = status "no server" [ "--data"; d / "nothing" ] in
      Alcotest.(check int) "no such boot server: exit 2" 2 code;
      one_line "no such boot server" e;
      Alcotest.(check bool) "status made nothing" false (Sys.file_exists (d / "nothing")))

(* A server told to stop (SIGTERM) while it prints its first line, before its event loop runs,
   stops: its standard output is a pipe already full, so the print blocks until the test reads,
   and the signal comes while it does. *)
let stop_before_loop () =
  with_dir @@ fun d ->
  write_file (d / "idle.decl") "service idle\n  run /bin/sleep 100\n  capability none\n";
  List.iter
    (fun (what, args) ->
      let r, w = Unix.pipe ~cloexec:true () in
      Unix.set_nonblock w;
      let junk = Bytes.make 4096 'j' in
      let filled = ref 0 in
      (try
         while true do
           filled := !filled + Unix.write w junk 0 4096
         done
       with Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) -> ());
      Unix.clear_nonblock w;
      let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
      let exe = consort () in
      let env = Array.append (Array.of_list base_env) (Unix.environment ()) in
      let pid = Unix.create_process_env exe (Array.of_list (exe :: args)) env null w null in
      Unix.close w;
      Unix.close null;
      (* Once it is blocked writing to its standard output ([/proc/PID/syscall]: write, on
         descriptor 1), its signal handlers are set and its loop does not run yet. *)
      eventually (what ^ " blocked in its first print") (fun () ->
          let line () =
            let ic = open_in (Printf.sprintf "/proc/%d/syscall" pid) in
            Fun.protect ~finally:(fun () -> close_in ic) (fun () -> input_line ic)
          in
          match String.split_on_char ' ' (line ()) with
          | "1" :: "0x1" :: _ -> true
          | _ -> false
          | exception (Sys_error _ | End_of_file) -> false);
      Unix.kill pid Sys.sigterm;
      (* Drain what the server writes until it closes its output (it exits). *)
      let buf = Bytes.create 65536 in
      let deadline = Unix.gettimeofday () +. 60. in
      let rec drain got =
        match Unix.select [ r ] [] [] 1. with
        | [], _, _ ->
            if Unix.gettimeofday () > deadline then begin
              Unix.kill pid Sys.sigkill;
              ignore (Unix.waitpid [] pid);
              Alcotest.failf "%s: still running 60 s after SIGTERM" what
            end
            else drain got
        | _ -> ( match Unix.read r buf 0 65536 with 0 -> got | n -> drain (got + n))
      in
      let got = drain 0 in
      Unix.close r;
      Alcotest.(check bool) (what ^ ": the print got through") true (got > !filled);
      let code = code_of (snd (Unix.waitpid [] pid)) in
      Alcotest.(check int) (what ^ ": stopped cleanly") 0 code)
    [
      ("fs serve", [ "cap"; "fs"; "serve"; "--new"; "--data"; d / "fs"; "--bind"; "127.0.0.1:0" ]);
      ("proc serve", [ "cap"; "proc"; "serve"; "--data"; d / "proc"; "--bind"; "127.0.0.1:0" ]);
      ( "boot serve",
        [
          "cap";
          "boot";
          "serve";
          "--decl";
          d / "idle.decl";
          "--data";
          d / "boot";
          "--bind";
          "127.0.0.1:0";
        ] );
    ]

(* {1 Another local user} *)

(* A user made for the test, removed after. *)
let with_user f =
  let name = Printf.sprintf "consort-t%d" (Unix.getpid () mod 100000) in
  if Unix.getuid () <> 0 then Alcotest.fail "needs root (useradd): run the tests as root";
  let code =
    Sys.command (Printf.sprintf "useradd -M -r -s /usr/sbin/nologin %s >/dev/null 2>&1" name)
  in
  if code <> 0 then Alcotest.failf "useradd %s: exit %d" name code;
  Fun.protect
    ~finally:(fun () -> ignore (Sys.command (Printf.sprintf "userdel %s >/dev/null 2>&1" name)))
    (fun () ->
      let pw = Unix.getpwnam name in
      f pw.Unix.pw_uid pw.Unix.pw_gid)

(* What [uid] can read of [paths]: each path it could open, as that user (a child process). *)
let readable_by uid gid paths =
  let r, w = Unix.pipe () in
  match Unix.fork () with
  | 0 ->
      Unix.close r;
      let code =
        try
          Unix.setgroups [| gid |];
          Unix.setgid gid;
          Unix.setuid uid;
          let oc = Unix.out_channel_of_descr w in
          List.iter
            (fun p ->
              match Unix.openfile p [ Unix.O_RDONLY ] 0 with
              | fd ->
                  Unix.close fd;
                  output_string oc (p ^ "\n")
              | exception Unix.Unix_error _ -> ())
            paths;
          close_out oc;
          0
        with _ -> 1
      in
      Unix._exit code
  | pid ->
      Unix.close w;
      let ic = Unix.in_channel_of_descr r in
      let rec lines acc =
        match input_line ic with l -> lines (l :: acc) | exception End_of_file -> List.rev acc
      in
      let l = lines [] in
      close_in ic;
      Alcotest.(check int) "reader ran" 0 (code_of (snd (Unix.waitpid [] pid)));
      l

let rec files d =
  Array.fold_left
    (fun acc n ->
      let p = d / n in
      match (Unix.lstat p).Unix.st_kind with
      | Unix.S_DIR -> (p :: files p) @ acc
      | Unix.S_REG -> p :: acc
      | _ -> acc)
    [] (Sys.readdir d)

let other_user () =
  with_dir @@ fun d ->
  (* A world-searchable place, so that only the modes below keep the user out. *)
  Unix.chmod d 0o755;
  let fs = d / "fs" and boot = d / "boot" and rep = d / "dir1" and proc = d / "proc" in
  (match with_umask 0 (fun () -> Store.open_ ~clock fs) with
  | Ok (st, _) ->
      ignore (Result.get_ok (Store.create st ~commit:true ~safe:true "a secret file"));
      Store.close st
  | Error _ -> Alcotest.fail "open");
  (match
     with_umask 0 (fun () -> Dir_store.open_ ~limits:Consort_capdir.Dir.Rsm.default_limits rep)
   with
  | Ok (s, _) -> Dir_store.close s
  | Error e -> Alcotest.fail e);
  let decl = d / "boot.decl" in
  write_file decl (fs_service "fs2" (d / "fs2"));
  Unix.chmod decl 0o644;
  run_once ~until:"fs2 up" d "boot"
    [ "cap"; "boot"; "serve"; "--decl"; decl; "--data"; boot; "--bind"; "127.0.0.1:0" ];
  run_once d "proc" [ "cap"; "proc"; "serve"; "--data"; proc; "--bind"; "127.0.0.1:0" ];
  Alcotest.(check bool) "a service log" true (Sys.file_exists (boot / "fs2.log"));
  let secrets = files fs @ files boot @ files rep @ files proc @ files (d / "fs2") in
  Alcotest.(check bool) "secrets to try" true (List.length secrets >= 10);
  with_user (fun uid gid ->
      (* The test reads as that user at all: a file of its own is readable. *)
      let probe = d / "probe" in
      write_file probe "x";
      Unix.chmod probe 0o644;
      Alcotest.(check (list string))
        "the user reads a world-readable file" [ probe ] (readable_by uid gid [ probe ]);
      Alcotest.(check (list string))
        "secrets another user can read" [] (readable_by uid gid secrets))

(* {1 The README's walk-through} *)

let readme () =
  (* From the repository's root (as scripts/test.sh runs it), else dune's copy. *)
  let candidates = [ "README.md"; here / ".." / ".." / "README.md" ] in
  match List.find_opt Sys.file_exists candidates with
  | Some p -> read_file p
  | None -> Alcotest.fail "README.md not found"

(* The shell block after the walk-through marker, as written. *)
let walk_through_block () =
  let lines = String.split_on_char '\n' (readme ()) in
  let rec find = function
    | l :: rest when contains l "<!-- walk-through" -> (
        match rest with
        | "```sh" :: body ->
            let rec take acc = function
              | "```" :: _ -> List.rev acc
              | l :: r -> take (l :: acc) r
              | [] -> Alcotest.fail "walk-through: no end of block"
            in
            take [] body
        | _ -> Alcotest.fail "walk-through: no ```sh block after the marker")
    | _ :: rest -> find rest
    | [] -> Alcotest.fail "README.md: no walk-through marker"
  in
  String.concat "\n" (find lines) ^ "\n"

let walk_through () =
  with_dir @@ fun d ->
  let bin = d / "bin" and work = d / "work" in
  Unix.mkdir bin 0o700;
  Unix.mkdir work 0o700;
  Unix.mkdir (work / "examples") 0o700;
  Unix.mkdir (work / "examples" / "boot") 0o700;
  let decl =
    List.find Sys.file_exists
      [ "examples/boot/host.decl"; here / ".." / ".." / "examples" / "boot" / "host.decl" ]
  in
  write_file (work / "examples" / "boot" / "host.decl") (read_file decl);
  List.iter
    (fun (name, exe) ->
      write_file (bin / name) (Printf.sprintf "#!/bin/sh\nexec %s \"$@\"\n" exe);
      Unix.chmod (bin / name) 0o755)
    [
      ("consort", consort ());
      ("consort-exec", here / ".." / ".." / "bin" / "exec" / "consort_exec.exe");
    ];
  write_file (d / "walk.sh") (walk_through_block ());
  (* Around it: the namespace's own /var/lib and loopback, umask 000, and what the test checks
     afterwards copied out before the namespace goes. *)
  write_file (d / "run.sh")
    (String.concat "\n"
       [
         "set -u";
         "mount -t tmpfs tmpfs /var/lib || exit 90";
         "ip link set lo up || exit 91";
         "umask 000";
         Printf.sprintf "cd %s" work;
         Printf.sprintf "export PATH=%s:$PATH HOME=%s CONSORT_MULTICAST=off" bin work;
         "unset CONSORT_ROOT CONSORT_LOCATE CONSORT_FS";
         Printf.sprintf "bash -e -o pipefail %s > %s 2> %s" (d / "walk.sh") (d / "walk.out")
           (d / "walk.err");
         "rc=$?";
         Printf.sprintf "find /var/lib/consort -printf '%%m %%y %%p\\n' > %s" (d / "modes");
         Printf.sprintf "cat /var/lib/consort/boot/*.log > %s" (d / "logs");
         "exit $rc";
         "";
       ]);
  let code =
    Sys.command
      (Printf.sprintf
         "timeout 300 unshare --mount --net --pid --fork --mount-proc bash %s > %s 2>&1"
         (d / "run.sh") (d / "run.log"))
  in
  let out = read_file (d / "walk.out") in
  if code <> 0 then
    Alcotest.failf "the walk-through failed (exit %d)\n--- output\n%s\n--- errors\n%s\n--- run\n%s"
      code out
      (read_file (d / "walk.err"))
      (read_file (d / "run.log"));
  let count sub =
    let n = String.length sub in
    let rec go i acc =
      if i + n > String.length out then acc
      else if String.sub out i n = sub then go (i + n) (acc + 1)
      else go (i + 1) acc
    in
    go 0 0
  in
  List.iter
    (fun s -> if not (contains out s) then Alcotest.failf "no %S in the output:\n%s" s out)
    [ "fs up server cap1:"; "proc up server cap1:"; "dir1 up root cap1:"; "dir3 up server cap1:" ];
  Alcotest.(check int) "the notes, read by the owner and by the group" 2 (count "meet at noon");
  Alcotest.(check int) "the program ran once" 1 (count "hello world");
  Alcotest.(check int) "and once through consort-exec" 1 (count "hello again");
  Alcotest.(check int) "the group may not run programs" 1 (count "refused: exit 2");
  Alcotest.(check string) "the copy" "meet at noon\n" (read_file (work / "copy.txt"));
  (* Every file of every server 0600, every directory 0700, under umask 000. *)
  let modes = String.split_on_char '\n' (read_file (d / "modes")) in
  Alcotest.(check bool) "servers' files listed" true (List.length modes > 20);
  List.iter
    (fun l ->
      match String.split_on_char ' ' l with
      | [ "600"; "f"; _ ] | [ "700"; "d"; _ ] | [ "" ] -> ()
      (* The process server's cache of programs: read-only for everyone, so that a program's
         user can open its own program through /proc/self/fd, behind a 0700 directory that
         only the server enters. *)
      | [ "444"; "f"; p ] when contains p "/proc/cache/" -> ()
      | _ -> Alcotest.failf "not private: %s" l)
    modes;
  let logs = read_file (d / "logs") in
  Alcotest.(check bool) "a digest of the root in the logs" true (contains logs "root ");
  if contains logs "cap1:" then Alcotest.failf "a capability in the services' logs:\n%s" logs

let () =
  Alcotest.run "caphost"
    [
      ( "secrets",
        [
          Alcotest.test_case "the file store: 0600 in 0700 under umask 000" `Quick store_modes;
          Alcotest.test_case "the file store refuses exposed secrets" `Quick store_refuses;
          Alcotest.test_case "a directory replica's log" `Quick replica_log;
          Alcotest.test_case "a key file" `Quick key_file;
          Alcotest.test_case "servers refuse exposed secrets (exit 2)" `Quick servers_refuse;
          Alcotest.test_case "another local user reads none" `Quick other_user;
          Alcotest.test_case "boot status: capabilities for the admin right" `Quick boot_status;
          Alcotest.test_case "stopped before its loop runs" `Quick stop_before_loop;
        ] );
      ("readme", [ Alcotest.test_case "the walk-through, as written" `Quick walk_through ]);
    ]
