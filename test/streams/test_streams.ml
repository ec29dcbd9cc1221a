(* Every command of the consort command line in an environment that fails
   it: closed standard input, closed standard output, standard output on a
   full disk, a path in a missing directory, a path where nothing can be
   written (a read-only mount) and a path on a full disk (a small tmpfs,
   filled). Each must end with the status of the one rule (Consort_cli:
   2 for whatever the environment refuses), one line on standard error,
   never an uncaught exception (125), a backtrace or a hang.

   The commands and their path options are read from the help pages, so
   that a command or a path option added later without its row here fails
   [every command and path option has a row]. The mounts are made in a
   directory this test creates, and always unmounted. *)

let ( / ) = Filename.concat

let exe =
  let dir = Filename.dirname Sys.executable_name in
  let dir = if Filename.is_relative dir then Sys.getcwd () / dir else dir in
  dir / ".." / ".." / "bin" / "main.exe"

type result = { code : int; out : string; err : string }

let read_file f =
  let ic = open_in_bin f in
  Fun.protect
    ~finally:(fun () -> close_in ic)
    (fun () -> really_input_string ic (in_channel_length ic))

(* Runs [exe args] with standard input from /dev/null or closed, standard
   output to a file of ours, closed, or to [path]; killed after [limit]
   seconds (a command that runs on is a failure: code -1). *)
let run ?(exe = exe) ?(limit = 20.) ?(stdin = `Null) ?(stdout = `Capture) args =
  let tmp_out = Filename.temp_file "streams" ".out"
  and tmp_err = Filename.temp_file "streams" ".err" in
  flush_all ();
  let pid =
    match Unix.fork () with
    | 0 -> (
        try
          let e = Unix.openfile tmp_err [ Unix.O_WRONLY; Unix.O_TRUNC ] 0 in
          Unix.dup2 e Unix.stderr;
          Unix.close e;
          (match stdout with
          | `Capture | `Path _ ->
              let f = match stdout with `Path p -> p | _ -> tmp_out in
              let o = Unix.openfile f [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC ] 0o644 in
              Unix.dup2 o Unix.stdout;
              Unix.close o
          | `Closed -> Unix.close Unix.stdout);
          (match stdin with
          | `Null ->
              let n = Unix.openfile "/dev/null" [ Unix.O_RDONLY ] 0 in
              Unix.dup2 n Unix.stdin;
              Unix.close n
          | `Closed -> Unix.close Unix.stdin);
          Unix.execv exe (Array.of_list (exe :: args))
        with _ -> Unix._exit 127)
    | pid -> pid
  in
  let deadline = Unix.gettimeofday () +. limit in
  (* Polled at 1 ms, then less often: most commands here end within milliseconds. *)
  let rec wait pause =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ ->
        if Unix.gettimeofday () > deadline then (
          Unix.kill pid Sys.sigkill;
          ignore (Unix.waitpid [] pid);
          -1)
        else (
          Unix.sleepf pause;
          wait (Float.min 0.02 (pause *. 2.)))
    | _, Unix.WEXITED c -> c
    | _, (Unix.WSIGNALED _ | Unix.WSTOPPED _) -> -2
  in
  let code = wait 0.001 in
  let out = read_file tmp_out and err = read_file tmp_err in
  Sys.remove tmp_out;
  Sys.remove tmp_err;
  { code; out; err }

let lines s = String.split_on_char '\n' s |> List.filter (fun l -> String.trim l <> "")

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

let show args = String.concat " " ("consort" :: args)

(* No trace of a defect, and one line on standard error for a refusal. *)
let check ?(says = []) what args expected r =
  let name = Printf.sprintf "%s (%s)" (show args) what in
  List.iter
    (fun bad ->
      if contains r.err bad then Alcotest.failf "%s: %S on standard error:\n%s" name bad r.err)
    [ "exception"; "Exception"; "internal error"; "Fatal error"; "Raised at"; "Called from" ];
  if r.code = -1 then Alcotest.failf "%s: still running after its time limit" name;
  if r.code = -2 then Alcotest.failf "%s: killed by a signal" name;
  if r.code <> expected then
    Alcotest.failf "%s: exit %d, expected %d\n%s%s" name r.code expected r.out r.err;
  if expected = 2 then
    (* The key-value client commands answer on standard output, one line ("error: REASON"), as
       their documented form says. *)
    let err =
      match (lines r.err, lines r.out) with
      | [], [ l ] when String.length l > 6 && String.sub l 0 6 = "error:" -> l ^ "\n"
      | _ -> r.err
    in
    match lines err with
    | [ l ] ->
        List.iter
          (fun s -> if not (contains l s) then Alcotest.failf "%s: %S does not say %S" name l s)
          says
    | l ->
        Alcotest.failf "%s: %d lines on standard error, expected one:\n%s" name (List.length l) err

(* {1 The commands and their paths, from the help pages} *)

let helps = Hashtbl.create 64

let help path =
  match Hashtbl.find_opt helps path with
  | Some page -> page
  | None ->
      let r = run (path @ [ "--help=plain" ]) in
      if r.code <> 0 then Alcotest.failf "%s --help: exit %d" (show path) r.code;
      Hashtbl.replace helps path r.out;
      r.out

(* The entries of a section of a help page: lines indented by 7 spaces. *)
let section name page =
  let inside = ref false in
  List.filter_map
    (fun l ->
      if String.length l > 0 && l.[0] <> ' ' then (
        inside := l = name;
        None)
      else if !inside && String.length l > 7 && String.sub l 0 7 = "       " && l.[7] <> ' ' then
        Some (String.trim l)
      else None)
    (String.split_on_char '\n' page)

let rec leaves path =
  List.concat_map
    (fun entry ->
      match String.split_on_char ' ' entry with
      | name :: rest when name <> "" && name.[0] >= 'a' && name.[0] <= 'z' ->
          if List.mem "COMMAND" rest then leaves (path @ [ name ]) else [ path @ [ name ] ]
      | _ -> [])
    (section "COMMANDS" (help path))

(* Internal commands, left out of their parent's list. *)
let hidden = [ [ "mcast-peer" ]; [ "bench"; "peer" ] ]
let all_commands = lazy (leaves [] @ hidden)

(* The path options of a command: "--name=DOCV" with a DOCV naming a file,
   a directory or a socket, and the positional arguments of those names. *)
let path_docvs = [ "FILE"; "DIR"; "PATH" ]

(* A positional PATH is a path in the directory graph (consort cap), not a local file. *)
let positional_docvs = [ "FILE"; "LOG"; "HISTORY"; "LOCAL" ]

let path_arguments cmd =
  let page = help cmd in
  let options =
    List.filter_map
      (fun e ->
        match String.index_opt e '=' with
        | Some i when String.length e > 2 && String.sub e 0 2 = "--" ->
            let docv =
              let rest = String.sub e (i + 1) (String.length e - i - 1) in
              match String.index_opt rest ' ' with Some j -> String.sub rest 0 j | None -> rest
            in
            if List.mem docv path_docvs then Some (String.sub e 0 i) else None
        | _ -> None)
      (section "OPTIONS" page)
  in
  let positional =
    List.filter_map
      (fun e ->
        let name = List.hd (String.split_on_char ' ' e) in
        if List.mem name positional_docvs then Some name else None)
      (section "ARGUMENTS" page)
  in
  (* And those of the synopsis, documented or not. *)
  let synopsis =
    String.concat " " (section "SYNOPSIS" page)
    |> String.split_on_char ' '
    |> List.filter_map (fun w ->
           let w =
             String.concat "" (String.split_on_char '[' w)
             |> String.split_on_char ']' |> String.concat ""
           in
           let w =
             if contains w "\xe2\x80\xa6" then String.sub w 0 (String.index w '\xe2') else w
           in
           if List.mem w positional_docvs then Some w else None)
  in
  let positional = positional @ synopsis in
  List.sort_uniq compare (options @ positional)

(* {1 The table} *)

let existing = "/etc/hostname"

(* A new empty directory, removed at exit. *)
let scratch () =
  let d = Filename.temp_file "consort-streams" ".d" in
  Sys.remove d;
  Unix.mkdir d 0o700;
  at_exit (fun () -> ignore (Sys.command ("rm -rf " ^ Filename.quote d)));
  d

(* A boot declaration that parses (its service is never started here). *)
let decl =
  lazy
    (let f = Filename.temp_file "consort-streams" ".decl" in
     let oc = open_out f in
     output_string oc "service idle\n  run /bin/sleep 1\n  capability none\n";
     close_out oc;
     at_exit (fun () -> try Sys.remove f with Sys_error _ -> ());
     f)

let bad_cap = "cap1:AAAA"

(* A capability that parses (of no server). *)
let some_cap = "cap1:AQ" ^ String.make 52 'A'

type stdin_use =
  | Unread  (** the command does not read standard input: closed, it runs as with /dev/null *)
  | Reads  (** it reads it: closed, it is refused before it does anything *)

(* Each command: an invocation that ends within seconds whatever the
   streams (a refusal, a small run, or one the command line reader ends),
   and whether it reads standard input. *)
let commands : (string list * string list * stdin_use) list =
  [
    ([ "bench"; "checksum" ], [ "--no-such-option" ], Unread);
    ([ "bench"; "dir" ], [ "--clients"; "0" ], Unread);
    ([ "bench"; "failover" ], [ "--params"; "no.such=1" ], Unread);
    ([ "bench"; "fs" ], [ "--size"; "0" ], Unread);
    ([ "bench"; "join" ], [ "--sizes"; "x" ], Unread);
    ([ "bench"; "kv" ], [ "--clients"; "0" ], Unread);
    ([ "bench"; "layering" ], [ "--iterations"; "1" ], Unread);
    ([ "bench"; "membership" ], [ "--rounds"; "0" ], Unread);
    ([ "bench"; "peer" ], [ "--index"; "0"; "--addrs"; "nonsense"; "--kind"; "rtt" ], Unread);
    ([ "bench"; "rpc" ], [ "--calls"; "0" ], Unread);
    ([ "bench"; "proc" ], [ "--rounds"; "0" ], Unread);
    ([ "bench"; "rtt" ], [ "--params"; "no.such=1" ], Unread);
    ([ "bench"; "scale" ], [ "--params"; "no.such=1" ], Unread);
    ([ "bench"; "tcp" ], [ "--mtu"; "0" ], Unread);
    ([ "bench"; "tcp-sim" ], [ "--connections"; "0" ], Unread);
    ([ "bench"; "throughput" ], [ "--params"; "no.such=1" ], Unread);
    ([ "cap"; "boot"; "check" ], [ existing ], Unread);
    ([ "cap"; "boot"; "serve" ], [ "--decl"; existing; "--data"; "/tmp" ], Unread);
    ([ "cap"; "boot"; "status" ], [ "--data"; "/nonexistent/consort" ], Unread);
    ([ "cap"; "agent" ], [ "--socket"; "/nonexistent/consort.sock" ], Unread);
    ([ "cap"; "cat" ], [ "/a"; "--root"; bad_cap ], Unread);
    ([ "cap"; "chmod" ], [ "/a"; "all"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "demo" ], [ "--timeout"; "0" ], Unread);
    ([ "cap"; "destroy" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "dir"; "gc" ], [ "--server"; "not-a-cap" ], Unread);
    ([ "cap"; "dir"; "link" ], [ "/a"; "not-a-cap" ], Unread);
    ([ "cap"; "dir"; "lookup" ], [ "/a"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "dir"; "init" ], [ "--data"; "/proc/1/consort"; "--new" ], Unread);
    ([ "cap"; "dir"; "serve" ], [ "--data"; "/proc/1/consort"; "--group"; "127.0.0.1:1" ], Unread);
    ([ "cap"; "exec" ], [ bad_cap; bad_cap ], Reads);
    ([ "cap"; "fs"; "fsck" ], [ "--data"; existing ], Unread);
    ([ "cap"; "fs"; "get" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "fs"; "put" ], [ "--server"; "x"; existing ], Unread);
    ([ "cap"; "fs"; "revoke" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "fs"; "serve" ], [ "--data"; "/proc/1/consort" ], Unread);
    ([ "cap"; "fs"; "init" ], [ "--data"; "/proc/1/consort" ], Unread);
    ([ "cap"; "fs"; "size" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "get" ], [ "/a"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "info" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "kill" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "ls" ], [ "/"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "mkdir" ], [ "/a"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "proc"; "serve" ], [ "--data"; "/proc/1/consort" ], Unread);
    ([ "cap"; "ps" ], [ "not-a-cap" ], Unread);
    ([ "cap"; "put" ], [ existing; "/a"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "restrict" ], [ "not-a-cap"; "--rights"; "read" ], Unread);
    ([ "cap"; "rm" ], [ "/a"; "--root"; "not-a-cap" ], Unread);
    ([ "cap"; "shell" ], [ "--root"; "not-a-cap" ], Reads);
    ([ "cap"; "status" ], [ "not-a-cap" ], Unread);
    ([ "cast" ], [ "--control"; "/nonexistent/consort.sock"; "x" ], Unread);
    ([ "check" ], [ existing ], Unread);
    ([ "check-logs" ], [ "/dev/null" ], Unread);
    ([ "counters" ], [ "--control"; "/nonexistent/consort.sock" ], Unread);
    ([ "demo" ], [ "--limit"; "0" ], Unread);
    ([ "keygen" ], [ "/nonexistent/consort.key" ], Unread);
    ([ "kv"; "cas" ], [ "k"; "a"; "b"; "--servers"; "bad" ], Unread);
    ([ "kv"; "check" ], [ "/dev/null" ], Unread);
    ([ "kv"; "del" ], [ "k"; "--servers"; "bad" ], Unread);
    ([ "kv"; "get" ], [ "k"; "--servers"; "bad" ], Unread);
    ([ "kv"; "put" ], [ "k"; "v"; "--servers"; "bad" ], Unread);
    ( [ "kv"; "serve" ],
      [ "--group"; "g"; "--data"; "/tmp"; "--bind"; "nowhere"; "--listen"; "127.0.0.1:8" ],
      Unread );
    ([ "kv"; "shell" ], [ "--servers"; "127.0.0.1:1" ], Reads);
    ([ "mcast-peer" ], [ "--rank"; "0"; "--members"; "nonsense" ], Unread);
    ([ "member" ], [ "--group"; "g"; "--bind"; "127.0.0.1:7479" ], Reads);
    ([ "net"; "up" ], [ "--tap"; "consort-none"; "--ip"; "nonsense" ], Unread);
    ([ "params" ], [], Unread);
    ([ "send" ], [ "--control"; "/nonexistent/consort.sock"; "id"; "x" ], Unread);
    ([ "sim" ], [ "--scenario"; "vsync-crash"; "--seeds"; "1"; "--quiet" ], Unread);
    ([ "stack" ], [ "--props"; "vsync" ], Unread);
    ([ "status" ], [ "--control"; "/nonexistent/consort.sock" ], Unread);
  ]

type use =
  | Read  (** read or connected to: missing, refused *)
  | Written  (** created or written: missing, read-only and full, refused *)
  | Data_dir
      (** a data directory, made with its parents when missing: under a file, read-only and full,
          refused *)
  | Socket  (** a socket made there: missing and read-only, refused (a socket takes no blocks) *)
  | Watched of string  (** may be missing, read when it appears: nothing to refuse, and why *)
  | After_server of string
      (** used only once a server answered: not reached here, and the test that covers it *)

(* Each path argument of each command: how it is used, and the command line
   that puts [path] there (complete otherwise, and quick to refuse). *)
let paths : (string list * string * use * (string -> string list)) list =
  [
    ([ "cap"; "boot"; "check" ], "FILE", Read, fun p -> [ p ]);
    ( [ "cap"; "boot"; "serve" ],
      "--data",
      Data_dir,
      fun p -> [ "--decl"; Lazy.force decl; "--data"; p; "--bind"; "127.0.0.1:7474" ] );
    ([ "cap"; "boot"; "serve" ], "--decl", Read, fun p -> [ "--decl"; p; "--data"; scratch () ]);
    ([ "cap"; "boot"; "status" ], "--data", Read, fun p -> [ "--data"; p ]);
    ([ "cap"; "dir"; "init" ], "--data", Data_dir, fun p -> [ "--data"; p; "--new" ]);
    ([ "cap"; "dir"; "init" ], "--key", Read, fun p -> [ "--data"; scratch (); "--new"; "--key"; p ]);
    ( [ "cap"; "dir"; "serve" ],
      "--data",
      Data_dir,
      fun p -> [ "--data"; p; "--group"; "127.0.0.1:1"; "--bind"; "127.0.0.1:1" ] );
    ( [ "cap"; "dir"; "serve" ],
      "--key",
      Read,
      fun p -> [ "--data"; scratch (); "--key"; p; "--group"; "127.0.0.1:1" ] );
    ( [ "bench"; "proc" ],
      "--save",
      After_server
        "checked at start for a directory it can write, written at the end of the run (a full disk \
         then is one line and 2, as for every write)",
      fun p -> [ "--rounds"; "1"; "--save"; p ] );
    ( [ "bench"; "rpc" ],
      "--save",
      After_server
        "checked at start for a directory it can write, written at the end of the run (a full disk \
         then is one line and 2, as for every write)",
      fun p -> [ "--rounds"; "1"; "--no-grpc"; "--save"; p ] );
    ([ "bench"; "membership" ], "--save", Written, fun p -> [ "--rounds"; "1"; "--save"; p ]);
    ( [ "bench"; "kv" ],
      "--save",
      After_server
        "checked at start for a directory it can write (a missing one is refused), written at the \
         end of a run of minutes with three etcd and three Consort replicas (a failed write then \
         is one line and 2)",
      fun p -> [ "--no-etcd"; "--save"; p ] );
    ( [ "bench"; "tcp" ],
      "--save",
      After_server
        "with --impair: checked at start for a directory it can write (test_cli: a missing one), \
         written at the end of a run of minutes as root (a full disk then is one line and 2)",
      fun p -> [ "--impair"; "loss=2%"; "--save"; p ] );
    ([ "cap"; "agent" ], "--socket", Socket, fun p -> [ "--socket"; p ]);
    ([ "cap"; "fs"; "fsck" ], "--data", Read, fun p -> [ "--data"; p ]);
    ([ "cap"; "fs"; "put" ], "FILE", Read, fun p -> [ "--server"; some_cap; p ]);
    ( [ "cap"; "fs"; "serve" ],
      "--data",
      Data_dir,
      fun p -> [ "--new"; "--data"; p; "--bind"; "127.0.0.1:1" ] );
    ([ "cap"; "fs"; "serve" ], "--key", Read, fun p -> [ "--new"; "--data"; scratch (); "--key"; p ]);
    ([ "cap"; "fs"; "init" ], "--data", Data_dir, fun p -> [ "--data"; p ]);
    ([ "cap"; "fs"; "init" ], "--key", Read, fun p -> [ "--data"; scratch (); "--key"; p ]);
    ( [ "cap"; "get" ],
      "LOCAL",
      After_server "written once the file is read: test_fs_e2e and test_dir_e2e",
      fun p -> [ "/a"; p ] );
    ( [ "cap"; "proc"; "serve" ],
      "--data",
      Data_dir,
      fun p -> [ "--data"; p; "--bind"; "127.0.0.1:1" ] );
    ([ "cap"; "proc"; "serve" ], "--key", Read, fun p -> [ "--data"; scratch (); "--key"; p ]);
    ( [ "cap"; "put" ],
      "LOCAL",
      After_server "read once the directory answered: test_dir_e2e",
      fun p -> [ p; "/a" ] );
    ([ "cast" ], "--control", Read, fun p -> [ "--control"; p; "x" ]);
    ([ "check" ], "LOG", Read, fun p -> [ p ]);
    ([ "check-logs" ], "LOG", Read, fun p -> [ p ]);
    ([ "counters" ], "--control", Read, fun p -> [ "--control"; p ]);
    ([ "keygen" ], "FILE", Written, fun p -> [ p ]);
    ([ "kv"; "check" ], "HISTORY", Read, fun p -> [ p ]);
    ( [ "kv"; "serve" ],
      "--data",
      Data_dir,
      fun p ->
        [
          "--new";
          "--group";
          "g";
          "--data";
          p;
          "--bind";
          "127.0.0.1:7471";
          "--listen";
          "127.0.0.1:7472";
        ] );
    ( [ "member" ],
      "--control",
      Socket,
      fun p -> [ "--group"; "g"; "--no-input"; "--bind"; "127.0.0.1:7473"; "--control"; p ] );
    ( [ "member" ],
      "--drop-file",
      Watched "a test hook, re-read as it changes: missing, nothing is dropped",
      fun p -> [ "--group"; "g"; "--no-input"; "--bind"; "127.0.0.1:7473"; "--drop-file"; p ] );
    ( [ "member" ],
      "--key",
      Read,
      fun p -> [ "--group"; "g"; "--no-input"; "--bind"; "127.0.0.1:7473"; "--key"; p ] );
    ( [ "member" ],
      "--log",
      Written,
      fun p -> [ "--group"; "g"; "--no-input"; "--bind"; "127.0.0.1:7473"; "--log"; p ] );
    ( [ "member" ],
      "--pcap",
      Written,
      fun p -> [ "--group"; "g"; "--no-input"; "--bind"; "127.0.0.1:7473"; "--pcap"; p ] );
    ([ "send" ], "--control", Read, fun p -> [ "--control"; p; "id"; "x" ]);
    ( [ "sim" ],
      "--trace",
      Written,
      fun p -> [ "--scenario"; "vsync-crash"; "--seeds"; "1"; "--quiet"; "--trace"; p ] );
    ([ "status" ], "--control", Read, fun p -> [ "--control"; p ]);
  ]

(* {1 Mounts} *)

let sh cmd =
  match Unix.system cmd with Unix.WEXITED 0 -> () | _ -> Alcotest.failf "%s: failed" cmd

(* Two tmpfs under a directory of ours: [full], filled to its last block,
   and [ro], read-only. *)
let with_mounts f =
  let dir = Filename.temp_file "consort-streams" "" in
  Sys.remove dir;
  Unix.mkdir dir 0o700;
  let full = dir / "full" and ro = dir / "ro" in
  Unix.mkdir full 0o755;
  Unix.mkdir ro 0o755;
  let mounted = ref [] in
  Fun.protect
    ~finally:(fun () ->
      List.iter
        (fun m -> ignore (Unix.system (Printf.sprintf "umount %s || umount -l %s" m m)))
        !mounted;
      List.iter (fun d -> try Unix.rmdir d with Unix.Unix_error _ -> ()) [ full; ro; dir ])
    (fun () ->
      sh
        (Printf.sprintf "mount -t tmpfs -o size=256k consort-streams-full %s" (Filename.quote full));
      mounted := [ full ];
      sh (Printf.sprintf "mount -t tmpfs -o ro,size=64k consort-streams-ro %s" (Filename.quote ro));
      mounted := ro :: !mounted;
      let fd = Unix.openfile (full / "filler") [ Unix.O_WRONLY; Unix.O_CREAT ] 0o644 in
      let b = Bytes.make 4096 'f' in
      let rec fill () =
        match Unix.write fd b 0 4096 with
        | _ -> fill ()
        | exception Unix.Unix_error (Unix.ENOSPC, _, _) -> ()
      in
      fill ();
      (* And the last bytes of the last block. *)
      let rec fill1 () =
        match Unix.write fd b 0 1 with
        | _ -> fill1 ()
        | exception Unix.Unix_error (Unix.ENOSPC, _, _) -> ()
      in
      fill1 ();
      Unix.close fd;
      f ~full ~ro)

(* {1 The tests} *)

let every_command_has_a_row () =
  let all = Lazy.force all_commands in
  if List.length all < 40 then Alcotest.failf "only %d commands in the help pages" (List.length all);
  List.iter
    (fun c ->
      if not (List.exists (fun (p, _, _) -> p = c) commands) then
        Alcotest.failf "%s has no row in the streams test's commands" (show c);
      List.iter
        (fun a ->
          if not (List.exists (fun (p, n, _, _) -> p = c && n = a) paths) then
            Alcotest.failf "%s %s (a path) has no row in the streams test's paths" (show c) a)
        (path_arguments c))
    all;
  List.iter
    (fun (p, _, _) -> if not (List.mem p all) then Alcotest.failf "%s is no command" (show p))
    commands;
  List.iter
    (fun (p, n, _, _) ->
      if not (List.mem n (path_arguments p)) then
        Alcotest.failf "%s has no path argument %s" (show p) n)
    paths

(* The help of every command: one text for 124 and 125, the root's. *)
let one_rule_in_every_help () =
  let exit_section page = String.concat " " (section "EXIT STATUS" page |> List.map String.trim) in
  let entry code page =
    (* The text after "CODE " up to the next status. *)
    let lines =
      List.map String.trim (String.split_on_char '\n' page)
      |> List.fold_left
           (fun (inside, acc) l ->
             if l = "EXIT STATUS" then (true, acc)
             else if
               inside && l <> "" && l.[0] >= 'A' && l.[0] <= 'Z' && String.uppercase_ascii l = l
             then (false, acc)
             else if inside then (true, l :: acc)
             else (false, acc))
           (false, [])
      |> snd |> List.rev
    in
    let text = String.concat " " lines in
    let key = string_of_int code ^ " " in
    let rec find i =
      if i + String.length key > String.length text then None
      else if String.sub text i (String.length key) = key && (i = 0 || text.[i - 1] = ' ') then
        Some i
      else find (i + 1)
    in
    match find 0 with
    | None -> None
    | Some i ->
        let rest =
          String.sub text (i + String.length key) (String.length text - i - String.length key)
        in
        let stop =
          List.fold_left
            (fun acc c ->
              match
                let k = " " ^ string_of_int c ^ " " in
                let rec f j =
                  if j + String.length k > String.length rest then None
                  else if String.sub rest j (String.length k) = k then Some j
                  else f (j + 1)
                in
                f 0
              with
              | Some j -> min acc j
              | None -> acc)
            (String.length rest) [ 0; 1; 2; 3; 124; 125; 137 ]
        in
        Some (String.trim (String.sub rest 0 stop))
  in
  let root = help [] in
  let e124 = entry 124 root and e125 = entry 125 root in
  (match e124 with
  | Some t when contains t "decided from the command line alone" -> ()
  | _ -> Alcotest.failf "consort --help: 124 does not state the rule: %S" (exit_section root));
  List.iter
    (fun c ->
      let page = help c in
      if entry 124 page <> e124 || entry 125 page <> e125 then
        Alcotest.failf "%s --help: 124 or 125 differ from consort --help's:\n%s" (show c)
          (exit_section page);
      if entry 2 page = None then Alcotest.failf "%s --help: no status 2" (show c);
      if entry 123 page <> None then
        Alcotest.failf "%s --help: documents 123, which consort never gives" (show c))
    (Lazy.force all_commands)

let row c =
  match List.find_opt (fun (p, _, _) -> p = c) commands with
  | Some (_, args, use) -> (args, use)
  | None -> Alcotest.failf "%s has no row" (show c)

(* Each command's run with standard input from /dev/null and its output captured: what the other
   runs are compared with. *)
let references = Hashtbl.create 64

let reference args =
  match Hashtbl.find_opt references args with
  | Some r -> r
  | None ->
      let r = run args in
      Hashtbl.replace references args r;
      r

let closed_stdout () =
  List.iter
    (fun c ->
      let args, _ = row c in
      check "standard output closed" (c @ args) 2 ~says:[ "standard output is closed" ]
        (run ~stdout:`Closed (c @ args)))
    (Lazy.force all_commands);
  check "standard output closed" [ "--help" ] 2
    ~says:[ "consort: standard output is closed" ]
    (run ~stdout:`Closed [ "--help" ]);
  (* consortd, the other program, follows the same rule. *)
  let consortd = Filename.dirname exe / "consortd" / "consortd.exe" in
  let sock =
    Filename.get_temp_dir_name () / Printf.sprintf "consort-streams-%d.sock" (Unix.getpid ())
  in
  check "standard output closed"
    [ "(consortd)"; "--socket"; sock ]
    2
    ~says:[ "consortd: standard output is closed" ]
    (run ~exe:consortd ~stdout:`Closed [ "--socket"; sock ]);
  if Sys.file_exists sock then Alcotest.failf "consortd refused, yet made its socket %s" sock

let closed_stdin () =
  List.iter
    (fun c ->
      let args, use = row c in
      match use with
      | Reads ->
          check "standard input closed" (c @ args) 2 ~says:[ "standard input is closed" ]
            (run ~stdin:`Closed (c @ args))
      | Unread ->
          let reference = reference (c @ args) in
          check "standard input /dev/null" (c @ args) reference.code reference;
          let r = run ~stdin:`Closed (c @ args) in
          check "standard input closed" (c @ args) reference.code r;
          if List.length (lines r.err) <> List.length (lines reference.err) then
            Alcotest.failf "%s: standard input closed: %S, with /dev/null: %S"
              (show (c @ args))
              r.err reference.err)
    (Lazy.force all_commands)

(* Standard output on a full disk: a command that writes there is refused
   in one line naming standard output; one that writes nothing is not
   troubled. *)
let stdout_on_full_disk () =
  with_mounts (fun ~full ~ro:_ ->
      let out = full / "out" in
      let wrote = ref 0 in
      List.iter
        (fun c ->
          let args, use = row c in
          if use = Unread then
            let reference = reference (c @ args) in
            let r = run ~stdout:(`Path out) (c @ args) in
            if reference.out <> "" then (
              incr wrote;
              check "standard output on a full disk" (c @ args) 2
                ~says:[ "standard output"; "No space left" ]
                r)
            else check "standard output on a full disk" (c @ args) reference.code r)
        (Lazy.force all_commands);
      if !wrote < 4 then Alcotest.failf "only %d commands wrote on standard output" !wrote)

let path_cases () =
  with_mounts (fun ~full ~ro ->
      let missing = Filename.get_temp_dir_name () / "consort-streams-no-such-dir" / "x" in
      List.iter
        (fun (c, name, use, args) ->
          let case what path =
            let r = run (c @ args path) in
            check (name ^ " " ^ what) (c @ args path) 2 ~says:[ path ] r
          in
          match use with
          | After_server why | Watched why ->
              if String.length why < 10 then Alcotest.failf "%s %s: no reason given" (show c) name
          | Read -> case "missing" missing
          | Socket ->
              case "missing" missing;
              case "read-only" (ro / "x")
          | Data_dir ->
              case "under a file" (existing / "x");
              case "read-only" (ro / "x");
              case "on a full disk" (full / "x")
          | Written ->
              case "missing" missing;
              case "read-only" (ro / "x");
              case "on a full disk" (full / "x"))
        paths)

(* consort sim over many seeds draws its progress on standard error when it
   is a terminal (a pseudo-terminal from script(1)), and nothing when it is
   not; the result line is the same. *)
let progress_on_a_terminal () =
  let args = [ "sim"; "--scenario"; "vsync-crash"; "--seeds"; "3"; "--quiet" ] in
  let plain = run args in
  check "no terminal" args 0 plain;
  if plain.err <> "" then Alcotest.failf "progress without a terminal: %S" plain.err;
  let cmd = String.concat " " (List.map Filename.quote (exe :: args)) in
  let r = run ~exe:"/usr/bin/script" [ "-qec"; cmd; "/dev/null" ] in
  if r.code <> 0 then Alcotest.failf "script: exit %d: %s" r.code r.err;
  List.iter
    (fun s -> if not (contains r.out s) then Alcotest.failf "on a terminal, no %S in %S" s r.out)
    [ "consort sim: seed 1 of 3"; "consort sim: seed 3 of 3"; "\r\027[K3 passed, 0 failed" ]

(* The long benchmarks draw their progress the same way (Consort_cli's
   progress line): one line per run on a terminal, erased before the table,
   and nothing on standard error when it is not a terminal. *)
let bench_progress_on_a_terminal () =
  let args = [ "bench"; "join"; "--sizes"; "2"; "--reps"; "3" ] in
  let plain = run args in
  check "no terminal" args 0 plain;
  if plain.err <> "" then Alcotest.failf "progress without a terminal: %S" plain.err;
  if not (contains plain.out "vsync") then Alcotest.failf "no table: %S" plain.out;
  let cmd = String.concat " " (List.map Filename.quote (exe :: args)) in
  let r = run ~exe:"/usr/bin/script" [ "-qec"; cmd; "/dev/null" ] in
  if r.code <> 0 then Alcotest.failf "script: exit %d: %s" r.code r.err;
  List.iter
    (fun s -> if not (contains r.out s) then Alcotest.failf "on a terminal, no %S in %S" s r.out)
    [
      "\r\027[Kconsort bench join: run 1 of 3";
      "\r\027[Kconsort bench join: run 3 of 3";
      "\r\027[Kstack ";
    ]

let () =
  if Unix.getuid () <> 0 then (
    prerr_endline "test_streams mounts tmpfs: it must run as root";
    exit 1);
  Alcotest.run "streams"
    [
      ( "every command",
        [
          Alcotest.test_case "every command and path option has a row" `Quick
            every_command_has_a_row;
          Alcotest.test_case "one rule for 2 and 124 in every --help" `Quick one_rule_in_every_help;
          Alcotest.test_case "standard output closed" `Quick closed_stdout;
          Alcotest.test_case "standard input closed" `Quick closed_stdin;
          Alcotest.test_case "standard output on a full disk" `Quick stdout_on_full_disk;
          Alcotest.test_case "paths: missing, read-only, on a full disk" `Quick path_cases;
          Alcotest.test_case "progress on a terminal only" `Quick progress_on_a_terminal;
          Alcotest.test_case "bench progress on a terminal only" `Quick bench_progress_on_a_terminal;
        ] );
    ]
