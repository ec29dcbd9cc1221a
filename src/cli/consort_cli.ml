open Cmdliner

let ok = 0
let checks_failed = 1
let refused = 2
let unknown = 3

let command_line_exits =
  [
    Cmd.Exit.info Cmd.Exit.cli_error
      ~doc:
        "the command line could not be read: an unknown command or option, a missing or surplus \
         argument, a value not of its option's type (not a number, out of its range, not one of \
         its words). This is decided from the command line alone; whatever is found when the \
         command looks at the world (a path, an address, the disk) is 2.";
    Cmd.Exit.info Cmd.Exit.internal_error
      ~doc:"internal error: a defect in Consort, never an expected outcome.";
  ]

let exits =
  [
    Cmd.Exit.info ok ~doc:"done (for checkers and simulations: every check passed).";
    Cmd.Exit.info checks_failed
      ~doc:"the command ran and what it checked failed (a violation, a failing seed).";
    Cmd.Exit.info refused
      ~doc:
        "refused: a value the command could not use (a file, directory, address, key, capability, \
         name) or an environment that failed it (a closed standard stream, a missing directory, a \
         permission, a full disk); nothing was done. One line on standard error says why.";
    Cmd.Exit.info unknown ~doc:"outcome unknown: a peer was lost while a request was under way.";
  ]
  @ command_line_exits

let bounded_int ~what ~min =
  let parse s =
    match int_of_string_opt (String.trim s) with
    | Some n when n >= min -> Ok n
    | Some _ -> Error (`Msg (Printf.sprintf "%S: expected %s" s what))
    | None -> Error (`Msg (Printf.sprintf "%S: not an integer" s))
  in
  Arg.conv ~docv:"N" (parse, Format.pp_print_int)

let positive_int = bounded_int ~what:"an integer of at least 1" ~min:1
let natural = bounded_int ~what:"an integer of at least 0" ~min:0

let bounded_float ~what ok =
  let parse s =
    match float_of_string_opt (String.trim s) with
    | Some x when Float.is_finite x && ok x -> Ok x
    | Some _ -> Error (`Msg (Printf.sprintf "%S: expected %s" s what))
    | None -> Error (`Msg (Printf.sprintf "%S: not a number" s))
  in
  Arg.conv ~docv:"X" (parse, fun ppf x -> Format.fprintf ppf "%g" x)

let positive_float = bounded_float ~what:"a number greater than 0" (fun x -> x > 0.)
let fraction = bounded_float ~what:"a number from 0 to 1" (fun x -> x >= 0. && x <= 1.)

let one_line s =
  let b = Buffer.create (String.length s) in
  let space = ref false in
  String.iter
    (fun c ->
      match c with
      | ' ' | '\t' | '\n' | '\r' -> space := Buffer.length b > 0
      | c ->
          if !space then Buffer.add_char b ' ';
          space := false;
          Buffer.add_char b c)
    s;
  Buffer.contents b

let fail cmd fmt =
  Format.kasprintf
    (fun msg ->
      Printf.eprintf "consort %s: %s\n%!" cmd (one_line msg);
      refused)
    fmt

(* {2 Standard streams} *)

type streams = { mutable stdin_closed : bool; mutable stdout_closed : bool }

let streams = { stdin_closed = false; stdout_closed = false }

let is_closed fd =
  match Unix.fstat fd with
  | _ -> false
  | exception Unix.Unix_error (Unix.EBADF, _, _) -> true
  | exception Unix.Unix_error _ -> false

(* A closed standard descriptor is taken by /dev/null before anything opens
   a file or a socket, which would otherwise get its number (a UDP socket
   watched as standard input, human output written into a log). Standard
   input takes it write-only, standard output read-only, so that using them
   still fails as on a closed descriptor; standard error takes it writable
   (a line on it goes nowhere, the exit status still tells). *)
let reserve_standard_streams () =
  let reserve fd flag =
    match Unix.openfile "/dev/null" [ flag; Unix.O_CLOEXEC ] 0 with
    | null ->
        if null <> fd then (
          Unix.dup2 ~cloexec:false null fd;
          Unix.close null)
        else Unix.clear_close_on_exec fd
    | exception Unix.Unix_error _ -> ()
  in
  (* In order: a descriptor reserved takes the lowest free number. *)
  if is_closed Unix.stdin then (
    streams.stdin_closed <- true;
    reserve Unix.stdin Unix.O_WRONLY);
  if is_closed Unix.stdout then (
    streams.stdout_closed <- true;
    reserve Unix.stdout Unix.O_RDONLY);
  if is_closed Unix.stderr then reserve Unix.stderr Unix.O_WRONLY

let stdin_closed () = streams.stdin_closed
let stdout_closed () = streams.stdout_closed

let with_stdin ?(instead = "") cmd k =
  if streams.stdin_closed then
    fail cmd "standard input is closed (give it a file or /dev/null%s)"
      (if instead = "" then "" else ", or " ^ instead)
  else k ()

let unwritable_dir d =
  match Unix.stat d with
  | exception Unix.Unix_error (e, _, _) -> Some (Unix.error_message e)
  | { Unix.st_kind = Unix.S_DIR; _ } -> (
      match Unix.access d [ Unix.W_OK; Unix.X_OK ] with
      | () -> None
      | exception Unix.Unix_error (e, _, _) -> Some (Unix.error_message e))
  | _ -> Some "not a directory"

let save_result ~dir ~name text =
  let tm = Unix.gmtime (Unix.time ()) in
  let f =
    Filename.concat dir
      (Printf.sprintf "%s-%04d%02d%02d-%02d%02d%02d.json" name (tm.Unix.tm_year + 1900)
         (tm.tm_mon + 1) tm.tm_mday tm.tm_hour tm.tm_min tm.tm_sec)
  in
  match
    let oc = open_out f in
    Fun.protect
      ~finally:(fun () -> close_out_noerr oc)
      (fun () ->
        output_string oc (text ^ "\n");
        close_out oc)
  with
  | () -> Ok f
  | exception Sys_error m -> Error m

(* Errors of the system a command runs on, not of Consort: a file, a
   directory, a descriptor, the disk, the network or the local users. *)
let environment_error = function
  | Unix.EBADF | ENOSPC | EIO | EROFS | EACCES | EPERM | ENOENT | ENOTDIR | EISDIR | ENAMETOOLONG
  | ELOOP | EEXIST | ENOTEMPTY | EXDEV | EMFILE | ENFILE | ENOMEM | EFBIG | EPIPE | ENXIO | ENODEV
  | EBUSY | ECONNREFUSED | ECONNRESET | EADDRINUSE | EADDRNOTAVAIL | ENETUNREACH | EHOSTUNREACH
  | ENETDOWN | ETIMEDOUT ->
      true
  | _ -> false

(* Output left in the buffers, written before the exit status is given: a
   closed or full standard output is the environment's, one line and 2. *)
let flush_output () =
  match
    Format.pp_print_flush Format.std_formatter ();
    flush stdout
  with
  | () -> Ok ()
  | exception Sys_error m -> Error m

let exit_now code =
  (try
     Format.pp_print_flush Format.err_formatter ();
     flush stderr
   with Sys_error _ -> ());
  (* Buffers that could not be written are dropped, not tried again at exit. *)
  Unix._exit code

let program = ref "consort"

let environment fmt =
  Format.kasprintf
    (fun msg ->
      (try Printf.eprintf "%s: %s\n%!" !program (one_line msg) with Sys_error _ -> ());
      refused)
    fmt

let main cmd =
  program := Cmd.name cmd;
  reserve_standard_streams ();
  let output_reported = ref false in
  let code =
    if streams.stdout_closed then
      environment "standard output is closed (nothing was done; give it /dev/null to discard it)"
    else
      match Cmd.eval' ~catch:false cmd with
      | code -> code
      | exception Sys_error m -> (
          match flush_output () with
          | Error _ ->
              output_reported := true;
              environment "standard output: %s" m
          | Ok () -> environment "%s" m)
      | exception Unix.Unix_error (e, fn, arg) when environment_error e ->
          environment "%s%s: %s" fn (if arg = "" then "" else " " ^ arg) (Unix.error_message e)
      | exception Stack_overflow ->
          prerr_endline "consort: internal error: stack overflow";
          Cmd.Exit.internal_error
      | exception Out_of_memory ->
          prerr_endline "consort: internal error: out of memory";
          Cmd.Exit.internal_error
      | exception e ->
          Printf.eprintf "consort: internal error: %s\n%!" (one_line (Printexc.to_string e));
          Cmd.Exit.internal_error
  in
  match flush_output () with
  | Ok () -> exit code
  | Error m ->
      (* Said even after a refusal: what the command wrote on standard output did not arrive. *)
      let said = if !output_reported then refused else environment "standard output: %s" m in
      exit_now (if code = ok || code = checks_failed then said else code)

(* Every command's examples: (command path, [(what, command line)]). *)
let table =
  [
    ("bench checksum", [ ("Checksum speed beside memcpy:", "consort bench checksum") ]);
    ( "bench failover",
      [
        ("Failure detection and view change after a SIGKILL:", "consort bench failover");
        ("With a shorter suspicion timeout:", "consort bench failover --params suspect.timeout=1s");
      ] );
    ( "bench fs",
      [
        ("Read a 100 MB file through the file server beside cat:", "consort bench fs");
        ("A quicker run:", "consort bench fs --size 10 --rounds 1");
      ] );
    ( "bench join",
      [
        ("Join latency of groups of 2 to 8 processes:", "consort bench join");
        ("Only groups of 3 and 5:", "consort bench join --sizes 3,5");
      ] );
    ( "bench dir",
      [
        ( "Directory lookups and installs beside the key-value store, 3 replicas each:",
          "consort bench dir" );
      ] );
    ( "bench kv",
      [
        ("Key-value operations per second beside etcd:", "consort bench kv");
        ("Without etcd, for 2 seconds:", "consort bench kv --no-etcd --seconds 2");
      ] );
    ( "bench layering",
      [ ("The cost of 1 to 20 layers beside a direct call:", "consort bench layering") ] );
    ( "bench membership",
      [
        ( "Join, failover and a restart at the same address, this binary, 5 rounds:",
          "consort bench membership" );
        ( "A build from before a change beside this one, in one run, kept in bench/results:",
          "consort bench membership --consort before=/tmp/old/consort --consort \
           after=/usr/local/bin/consort --save bench/results" );
      ] );
    ( "bench peer",
      [
        ( "Started by the rtt and throughput benchmarks, not by hand:",
          "consort bench peer --kind group-rtt --index 0 --addrs 127.0.0.1:7500,127.0.0.1:7501" );
      ] );
    ("bench rpc", [ ("Null RPC and 1 MB transfers beside raw UDP and gRPC:", "consort bench rpc") ]);
    ( "bench rtt",
      [
        ("Round trips of 16-byte casts beside UDP:", "consort bench rtt");
        ("With total order, and sealed:", "consort bench rtt --total --seal");
      ] );
    ( "bench scale",
      [
        ( "Cost per member of the vsync stack at 16, 32 and 64 simulated members:",
          "consort bench scale" );
        ("At 64 and 128 members:", "consort bench scale --sizes 64,128");
      ] );
    ("bench tcp", [ ("Consort's TCP over TAP beside the kernel's:", "consort bench tcp") ]);
    ( "bench proc",
      [
        ( "Process start through a process server beside ocamlrun locally:",
          "consort bench proc --rounds 50" );
      ] );
    ( "bench tcp-sim",
      [ ("TCP in the simulator: setup rate and bulk transfer:", "consort bench tcp-sim") ] );
    ( "bench throughput",
      [
        ("Casts per second among 3 processes beside UDP:", "consort bench throughput");
        ("Total order among 5 members:", "consort bench throughput --total --members 5");
      ] );
    ( "cap boot check",
      [
        ( "Check a declaration file and list its services in starting order:",
          "consort cap boot check /etc/consort/boot.decl" );
      ] );
    ( "cap boot serve",
      [
        ( "Start and watch the services of this host:",
          "consort cap boot serve --decl /etc/consort/boot.decl --data /var/lib/consort/boot \
           --bind 127.0.0.1:7690" );
      ] );
    ( "cap boot status",
      [
        ( "Each service of this host, its state and its capabilities, once all are up:",
          "consort cap boot status --data /var/lib/consort/boot --wait 30" );
        ( "The directory's root capability:",
          "consort cap boot status --data /var/lib/consort/boot --only dir1/root" );
      ] );
    ( "cap agent",
      [
        ("Keep consort-exec's starts warm for this user (in the background):", "consort cap agent &");
      ] );
    ("cap destroy", [ ("Destroy a stored file:", "consort cap destroy cap1:...") ]);
    ( "cap exec",
      [
        ( "Run a stored bytecode program on a process server, with this terminal:",
          "consort cap exec cap1:SERVER... cap1:PROGRAM... arg1 arg2" );
        ( "With limits and a named capability, no input:",
          "consort cap exec -n --cpu 10 --memory 256 --cap data=cap1:... cap1:SERVER... \
           cap1:PROGRAM..." );
      ] );
    ( "cap kill",
      [ ("Interrupt a process, then kill it:", "consort cap kill --signal INT cap1:PROCESS...") ] );
    ( "cap proc serve",
      [
        ( "Serve processes, fetching programs from a file server on 127.0.0.1:7700:",
          "consort cap proc serve --data /var/lib/consort/proc --locate 127.0.0.1:7700" );
      ] );
    ("cap ps", [ ("A process server's processes:", "consort cap ps cap1:SERVER...") ]);
    ( "cap chmod",
      [
        ( "Let the group column read a file, and no one else:",
          "consort cap chmod /home/alice/notes all:read:none" );
      ] );
    ( "cap dir gc",
      [
        ( "Collect the directory server's and a file server's garbage:",
          "consort cap dir gc --server cap1:... --fs cap1:..." );
      ] );
    ( "cap dir link",
      [
        ( "Store a file's capability under a name:",
          "consort cap dir link /home/alice/notes cap1:... --masks all:read:none" );
      ] );
    ( "cap dir lookup",
      [ ("The capability a path names:", "consort cap dir lookup /home/alice/notes") ] );
    ( "cap dir serve",
      [
        ( "One of three replicas of a new directory cluster, on loopback, sharing one key file \
           (--new the first time only):",
          "consort cap dir serve --new --data /var/lib/consort/dir1 --key /etc/consort/dir.key \
           --bind 127.0.0.1:7711 --group 127.0.0.1:7721 --peers 127.0.0.1:7722,127.0.0.1:7723" );
        ( "A replica whose data directory was lost, replaced on an empty one:",
          "consort cap dir serve --join --data /var/lib/consort/dir1 --key /etc/consort/dir.key \
           --bind 127.0.0.1:7711 --group 127.0.0.1:7721 --peers 127.0.0.1:7722,127.0.0.1:7723" );
      ] );
    ( "cap dir init",
      [
        ( "Prepare the data directory of a new cluster's replica, for a boot server's declaration:",
          "consort cap dir init --new --data /var/lib/consort/dir1 --key /etc/consort/dir.key" );
        ( "Replace a lost replica's data directory (it catches up before it votes):",
          "consort cap dir init --join --data /var/lib/consort/dir1 --key /etc/consort/dir.key" );
      ] );
    ( "cap ls",
      [
        ("List a directory (the root capability from CONSORT_ROOT):", "consort cap ls /home/alice");
      ] );
    ("cap mkdir", [ ("Make a directory under the root:", "consort cap mkdir /home") ]);
    ("cap rm", [ ("Remove a row:", "consort cap rm /home/alice/notes") ]);
    ( "cap put",
      [
        ("Store a file and link it by path:", "consort cap put notes.txt /home/alice/notes");
        ("From standard input, replacing the row:", "date | consort cap put --force - /tmp/now");
      ] );
    ( "cap get",
      [
        ( "Copy a file here (written whole or not at all):",
          "consort cap get /home/alice/notes notes.txt" );
      ] );
    ("cap cat", [ ("Print files:", "consort cap cat /home/alice/notes /etc/motd") ]);
    ( "cap demo",
      [
        ("Run the demo (a few seconds; ends with N passed, M failed):", "consort cap demo");
        ("Keep its logs and stores to look at:", "consort cap demo --keep");
      ] );
    ( "cap shell",
      [
        ("Browse the directory graph (Tab completes names):", "consort cap shell");
        ("Run commands from a script:", "printf 'cd /home\\nls\\n' | consort cap shell");
      ] );
    ( "cap fs fsck",
      [ ("Check a stopped file server's store:", "consort cap fs fsck --data /var/lib/consort/fs") ]
    );
    ( "cap fs get",
      [ ("Write a file's bytes to a local file:", "consort cap fs get cap1:... > notes.txt") ] );
    ( "cap fs put",
      [
        ("Store a file, printing its capability:", "consort cap fs put --server cap1:... notes.txt");
      ] );
    ( "cap fs serve",
      [
        ( "Start a new file server on a fixed address (--new the first time only):",
          "consort cap fs serve --new --data /var/lib/consort/fs --bind 127.0.0.1:7700" );
        ( "Serve its store again, after a stop:",
          "consort cap fs serve --data /var/lib/consort/fs --bind 127.0.0.1:7700" );
      ] );
    ( "cap fs init",
      [
        ( "Prepare a new file server's data directory, for a boot server's declaration:",
          "consort cap fs init --data /var/lib/consort/fs" );
      ] );
    ( "cap fs revoke",
      [
        ( "Revoke every capability of a file; prints the new owner capability:",
          "consort cap fs revoke cap1:..." );
      ] );
    ("cap fs size", [ ("A stored file's size:", "consort cap fs size cap1:...") ]);
    ("cap info", [ ("What a capability designates, and its rights:", "consort cap info cap1:...") ]);
    ( "cap restrict",
      [ ("A read-only capability to give away:", "consort cap restrict cap1:... --rights read") ] );
    ("cap status", [ ("A server's status:", "consort cap status cap1:...") ]);
    ( "check-logs",
      [
        ( "Check the logs of a run against virtual synchrony:",
          "consort check-logs a.log b.log c.log" );
        ("And total order, for a group with Total:", "consort check-logs --total a.log b.log c.log");
      ] );
    ( "check",
      [
        ( "Check the logs of a run against virtual synchrony and total order:",
          "consort check --total a.log b.log c.log" );
      ] );
    ("demo", [ ("The main job: a group of processes, a crash, a restart:", "consort demo") ]);
    ("keygen", [ ("A key file for a secured group (mode 0600):", "consort keygen group.key") ]);
    ( "kv cas",
      [
        ( "Set a key only if it holds a given value:",
          "consort kv cas --servers 127.0.0.1:7801 colour red blue" );
      ] );
    ( "kv check",
      [ ("Check a recorded history for linearizability:", "consort kv check history.jsonl") ] );
    ( "kv del",
      [ ("Delete a key:", "consort kv del --servers 127.0.0.1:7801,127.0.0.1:7802 colour") ] );
    ( "kv get",
      [
        ( "Read a key, trying two replicas in turn:",
          "consort kv get --servers 127.0.0.1:7801,127.0.0.1:7802 colour" );
      ] );
    ("kv put", [ ("Write a key:", "consort kv put --servers 127.0.0.1:7801 colour red") ]);
    ( "kv serve",
      [
        ( "One of three replicas of a new cluster (--new the first time only):",
          "consort kv serve --new --group kv --data /var/lib/consort/kv1 --bind 127.0.0.1:7901 \
           --peers 127.0.0.1:7902,127.0.0.1:7903 --listen 127.0.0.1:7801" );
        ( "A replica that replaces a lost one, on an empty directory:",
          "consort kv serve --join --group kv --data /var/lib/consort/kv1 --bind 127.0.0.1:7901 \
           --peers 127.0.0.1:7902,127.0.0.1:7903 --listen 127.0.0.1:7801" );
      ] );
    ( "kv shell",
      [
        ( "Commands from a script, one result line each:",
          "printf 'put a 1\\nget a\\n' | consort kv shell --servers 127.0.0.1:7801" );
      ] );
    ( "mcast-peer",
      [
        ( "Started by the demo, not by hand:",
          "consort mcast-peer --rank 0 --members 127.0.0.1:7450,127.0.0.1:7451" );
      ] );
    ( "member",
      [
        ( "Join group chat on the first free port of 7400-7415 and cast each line typed:",
          "consort member --group chat" );
        ( "With total order and a log for consort check-logs:",
          "consort member --group chat --props vsync,Total --log chat.log" );
        ( "A secured, private group:",
          "consort member --group chat --props vsync,Privacy --key group.key" );
      ] );
    ( "net up",
      [
        ( "Bring Consort's TCP/IP stack up on a TAP device for a minute:",
          "consort net up --tap tap0 --ip 10.0.0.2/24 --for 60" );
      ] );
    ("params", [ ("Every tunable with its default:", "consort params") ]);
    ( "sim",
      [
        ( "2000 seeded schedules of a scenario, checked by the specifications:",
          "consort sim --scenario vsync-crash --seeds 2000" );
        ( "Seed 17 alone, with its trace:",
          "consort sim --scenario vsync-crash --seed 17 --trace t.txt" );
      ] );
    ( "stack",
      [
        ("The layers chosen for total order:", "consort stack --props vsync,Total");
        ("Every property, and what it guarantees:", "consort stack --list");
      ] );
    ( "status",
      [
        ( "Every member and daemon of this machine (their sockets in XDG_RUNTIME_DIR/consort and \
           /run/consort):",
          "consort status" );
        ( "A member started with --control /run/consort/chat.sock:",
          "consort status --control /run/consort/chat.sock" );
        ("The same as JSON, for scripts:", "consort status --control /run/consort/chat.sock --json");
        ( "Every member a consortd holds in group chat (its --control):",
          "consort status --control /run/consort/consortd.ctl --group chat" );
      ] );
    ( "counters",
      [
        ( "Every counter of a running member, per layer:",
          "consort counters --control /run/consort/chat.sock" );
        ( "A consortd's counters, then each member's per layer:",
          "consort counters --control /run/consort/consortd.ctl" );
      ] );
    ( "cast",
      [
        ( "Cast a line to the group through a running member:",
          "consort cast --control /run/consort/chat.sock 'deploy finished'" );
        ( "Through a consortd, in group chat:",
          "consort cast --control /run/consort/consortd.ctl --group chat 'deploy finished'" );
      ] );
    ( "send",
      [
        ( "Send to one member (an id from consort status):",
          "consort send --control /run/consort/chat.sock 127.0.0.1:7401#1a2b3c4d 'hello'" );
      ] );
  ]

let examples path =
  match List.assoc_opt path table with
  | None -> []
  | Some l ->
      `S Manpage.s_examples
      :: List.concat_map (fun (what, cmd) -> [ `P what; `Pre ("    " ^ cmd) ]) l

let info ?(man = []) ?envs ?(exits = exits) ?(hidden = false) ~path ~doc name =
  let docs = if hidden then Some Manpage.s_none else None in
  Cmd.info name ?docs ?envs ~exits ~doc ~man:(man @ examples path)

type log_format = Text | Json

let level_of_string = function
  | "quiet" | "none" | "off" -> Ok None
  | "error" -> Ok (Some Logs.Error)
  | "warning" | "warn" -> Ok (Some Logs.Warning)
  | "info" -> Ok (Some Logs.Info)
  | "debug" -> Ok (Some Logs.Debug)
  | "app" -> Ok (Some Logs.App)
  | s -> Error (Printf.sprintf "%S is not a level (quiet, error, warning, info, debug)" s)

let level_to_string = function
  | None -> "quiet"
  | Some l -> String.lowercase_ascii (Logs.level_to_string (Some l))

let log_levels =
  let parse s =
    let parts = List.filter (( <> ) "") (List.map String.trim (String.split_on_char ',' s)) in
    let rec go default srcs = function
      | [] -> Ok (default, List.rev srcs)
      | p :: rest -> (
          match String.index_opt p '=' with
          | None -> (
              match level_of_string p with Ok l -> go l srcs rest | Error e -> Error (`Msg e))
          | Some i -> (
              let src = String.sub p 0 i and lv = String.sub p (i + 1) (String.length p - i - 1) in
              match level_of_string lv with
              | Ok l when src <> "" -> go default ((src, l) :: srcs) rest
              | Ok _ -> Error (`Msg (Printf.sprintf "%S: a source name is missing" p))
              | Error e -> Error (`Msg e)))
    in
    go (Some Logs.Warning) [] parts
  in
  let print ppf (d, srcs) =
    Format.pp_print_string ppf
      (String.concat ","
         (level_to_string d :: List.map (fun (s, l) -> s ^ "=" ^ level_to_string l) srcs))
  in
  Arg.conv ~docv:"LEVEL[,SOURCE=LEVEL...]" (parse, print)

let timestamp () =
  let t = Unix.gettimeofday () in
  let tm = Unix.gmtime t in
  Printf.sprintf "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" (tm.tm_year + 1900) (tm.tm_mon + 1)
    tm.tm_mday tm.tm_hour tm.tm_min tm.tm_sec
    (int_of_float ((t -. Float.of_int (int_of_float t)) *. 1000.))

let json_string s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  String.iter
    (fun c ->
      match c with
      | '"' -> Buffer.add_string b "\\\""
      | '\\' -> Buffer.add_string b "\\\\"
      | '\n' -> Buffer.add_string b "\\n"
      | c when Char.code c < 0x20 -> Printf.bprintf b "\\u%04x" (Char.code c)
      | c -> Buffer.add_char b c)
    s;
  Buffer.add_char b '"';
  Buffer.contents b

let log_context = ref (fun () -> [])
let set_log_context f = log_context := f
let reserved = [ "t"; "level"; "src"; "msg" ]

let context_fields () =
  match !log_context () with
  | fields ->
      String.concat ""
        (List.filter_map
           (fun (k, v) ->
             if List.mem k reserved then None
             else Some (Printf.sprintf ",%s:%s" (json_string k) (json_string v)))
           fields)
  | exception _ -> ""

let reporter format =
  let report src level ~over k msgf =
    msgf @@ fun ?header:_ ?tags:_ fmt ->
    Format.kasprintf
      (fun msg ->
        let line =
          match format with
          | Text ->
              Printf.sprintf "%s %s %s: %s" (timestamp ())
                (String.uppercase_ascii (Logs.level_to_string (Some level)))
                (Logs.Src.name src) (one_line msg)
          | Json ->
              Printf.sprintf "{\"t\":%s,\"level\":%s,\"src\":%s,\"msg\":%s%s}"
                (json_string (timestamp ()))
                (json_string (String.lowercase_ascii (Logs.level_to_string (Some level))))
                (json_string (Logs.Src.name src))
                (json_string (one_line msg))
                (context_fields ())
        in
        prerr_endline line;
        over ();
        k ())
      fmt
  in
  { Logs.report }

let setup_logs ?(verbose = false) format (default, srcs) =
  Logs.set_reporter (reporter format);
  let default =
    if verbose && (default = None || default = Some Logs.Warning || default = Some Logs.Error) then
      Some Logs.Info
    else default
  in
  Logs.set_level ~all:true default;
  List.iter
    (fun (name, level) ->
      let family = String.length name > 0 && name.[String.length name - 1] = '.' in
      List.iter
        (fun s ->
          let n = Logs.Src.name s in
          let m = String.length name in
          if n = name || (family && String.length n >= m && String.sub n 0 m = name) then
            Logs.Src.set_level s level)
        (Logs.Src.list ()))
    srcs

let log_options =
  let levels =
    Arg.(
      value
      & opt log_levels (Some Logs.Warning, [])
      & info [ "log-level" ] ~docv:"LEVEL[,SOURCE=LEVEL...]"
          ~doc:
            "How much to log on standard error: a level for every source ($(b,quiet), $(b,error), \
             $(b,warning), $(b,info), $(b,debug)), then levels for named sources, e.g. \
             $(b,warning,consort.gmp=debug,consort.tcp.=info) (a name ending in a dot names a \
             family).")
  in
  let format =
    Arg.(
      value
      & opt (enum [ ("text", Text); ("json", Json) ]) Text
      & info [ "log-format" ] ~docv:"FORMAT"
          ~doc:
            "$(b,text): one line per record, with a UTC timestamp, the level and the source; \
             $(b,json): one JSON object per line.")
  in
  Term.(const (fun levels format -> (levels, format)) $ levels $ format)

let logging = Term.(const (fun (levels, format) -> setup_logs format levels) $ log_options)

type progress = {
  what : string;
  total : int;
  tty : bool;
  mutable drawn : bool;
  mutable last : float;
}

let progress what ~total =
  { what; total; tty = total > 1 && Unix.isatty Unix.stderr; drawn = false; last = 0. }

let step p k =
  let now = Unix.gettimeofday () in
  if p.tty && (k <= 1 || k >= p.total || now -. p.last >= 0.1) then begin
    p.last <- now;
    Printf.eprintf "\r\027[K%s: run %d of %d%!" p.what k p.total;
    p.drawn <- true
  end

let finish p =
  if p.drawn then begin
    prerr_string "\r\027[K";
    flush stderr;
    p.drawn <- false
  end

let with_progress what ~total f =
  let p = progress what ~total in
  Fun.protect ~finally:(fun () -> finish p) (fun () -> f p)
