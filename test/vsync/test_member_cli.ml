(* [consort member] as a new user starts it: standard input from /dev/null
   or a regular file (a start with &, nohup, a service manager),
   --no-input, and command lines that are wrong (addresses, tunables): one
   line on standard error, exit code 2. Each test runs the built binary. *)

module Log = Consort_spec.Log
module Vsync = Consort_spec.Vsync

let exe () =
  let dir = Filename.dirname Sys.executable_name in
  let candidates = [ Filename.concat dir "../../bin/main.exe"; "_build/default/bin/main.exe" ] in
  match List.find_opt Sys.file_exists candidates with
  | Some e -> e
  | None -> Alcotest.fail "consort binary not found"

let free_port () =
  let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
  Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
  let p = match Unix.getsockname s with Unix.ADDR_INET (_, p) -> p | Unix.ADDR_UNIX _ -> 0 in
  Unix.close s;
  p

let counter = ref 0

let temp suffix =
  incr counter;
  Filename.concat (Filename.get_temp_dir_name ())
    (Printf.sprintf "consort-cli-%d-%d%s" (Unix.getpid ()) !counter suffix)

let remove f = try Sys.remove f with Sys_error _ -> ()

let read_file f =
  match open_in_bin f with
  | exception Sys_error _ -> ""
  | ic ->
      let s = really_input_string ic (in_channel_length ic) in
      close_in ic;
      s

(* Runs the binary with [stdin] as its standard input; standard output
   discarded, standard error to a file. *)
let spawn ~stdin args =
  let err = temp ".err" in
  let out = Unix.openfile "/dev/null" [ Unix.O_WRONLY ] 0 in
  let errfd =
    Unix.openfile err [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644
  in
  let pid = Unix.create_process (exe ()) (Array.of_list ("consort" :: args)) stdin out errfd in
  Unix.close out;
  Unix.close errfd;
  (pid, err)

(* Waits up to [timeout] seconds for [pid] to end: its exit code. *)
let wait_exit ?(timeout = 10.) pid =
  let deadline = Unix.gettimeofday () +. timeout in
  let rec go () =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ ->
        if Unix.gettimeofday () > deadline then begin
          Unix.kill pid Sys.sigkill;
          ignore (Unix.waitpid [] pid);
          None
        end
        else (
          Unix.sleepf 0.05;
          go ())
    | _, Unix.WEXITED c -> Some c
    | _, (Unix.WSIGNALED s | Unix.WSTOPPED s) -> Some (128 + s)
  in
  go ()

let starts_with s p = String.length s >= String.length p && String.sub s 0 (String.length p) = p

let contains s sub =
  let n = String.length sub and m = String.length s in
  let rec has i = i + n <= m && (String.sub s i n = sub || has (i + 1)) in
  has 0

(* Runs the binary to its end: exit code and standard output. *)
let run_out args =
  let out = temp ".out" in
  Fun.protect
    ~finally:(fun () -> remove out)
    (fun () ->
      let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
      let fd =
        Unix.openfile out [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644
      in
      let pid = Unix.create_process (exe ()) (Array.of_list ("consort" :: args)) null fd null in
      Unix.close null;
      Unix.close fd;
      let code = wait_exit pid in
      (code, read_file out))

let events log = match Log.read_file log with Ok es -> es | Error _ -> []

let wait_until ?(timeout = 10.) f =
  let deadline = Unix.gettimeofday () +. timeout in
  let rec go () =
    f ()
    || Unix.gettimeofday () < deadline
       &&
       (Unix.sleepf 0.05;
        go ())
  in
  go ()

let with_stdin_file path f =
  let fd = Unix.openfile path [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  Fun.protect ~finally:(fun () -> Unix.close fd) (fun () -> f fd)

let member_args ?(extra = []) ~log () =
  let port = free_port () in
  let addr = Printf.sprintf "127.0.0.1:%d" port in
  [ "member"; "--group"; "cli"; "--bind"; addr; "--peers"; addr; "--log"; log; "--quiet" ] @ extra

let is_view = function Log.View _ -> true | _ -> false
let is_exit = function Log.Exit _ -> true | _ -> false

(* The member stays in the group until SIGTERM, then leaves cleanly. *)
let stays_until_term ~stdin ?extra name =
  let log = temp ".log" in
  Fun.protect
    ~finally:(fun () -> remove log)
    (fun () ->
      let pid, err = spawn ~stdin (member_args ?extra ~log ()) in
      Fun.protect
        ~finally:(fun () -> remove err)
        (fun () ->
          if not (wait_until (fun () -> List.exists is_view (events log))) then begin
            Unix.kill pid Sys.sigkill;
            ignore (Unix.waitpid [] pid);
            Alcotest.failf "%s: no view installed; stderr: %s" name (read_file err)
          end;
          Unix.sleepf 0.5;
          (match Unix.waitpid [ Unix.WNOHANG ] pid with
          | 0, _ -> ()
          | _ -> Alcotest.failf "%s: the member ended by itself; stderr: %s" name (read_file err));
          Unix.kill pid Sys.sigterm;
          Alcotest.(check (option int))
            (name ^ ": exit code after SIGTERM")
            (Some 0) (wait_exit pid);
          Alcotest.(check string) (name ^ ": nothing on stderr") "" (read_file err);
          Alcotest.(check bool)
            (name ^ ": the log ends with an exit")
            true
            (match List.rev (events log) with e :: _ -> is_exit e | [] -> false)))

let dev_null () =
  with_stdin_file "/dev/null" (fun fd -> stays_until_term ~stdin:fd "stdin /dev/null")

let no_input () =
  (* A pipe that stays open: without --no-input the member would read it;
     with it, the member ignores it and still stays. *)
  let r, w = Unix.pipe ~cloexec:true () in
  Fun.protect
    ~finally:(fun () ->
      Unix.close r;
      Unix.close w)
    (fun () -> stays_until_term ~stdin:r ~extra:[ "--no-input" ] "--no-input");
  (* The end of a pipe makes a member leave, unless --no-input. *)
  let r, w = Unix.pipe ~cloexec:true () in
  Unix.close w;
  Fun.protect
    ~finally:(fun () -> Unix.close r)
    (fun () -> stays_until_term ~stdin:r ~extra:[ "--no-input" ] "--no-input, closed pipe")

(* A regular file: each line is cast (two equal lines are two messages),
   then the member leaves at its end. *)
let regular_file () =
  let input = temp ".txt" and log = temp ".log" in
  Fun.protect
    ~finally:(fun () ->
      remove input;
      remove log)
    (fun () ->
      let oc = open_out_bin input in
      output_string oc "hello\nhello\nlast line without newline";
      close_out oc;
      with_stdin_file input (fun fd ->
          let pid, err = spawn ~stdin:fd (member_args ~log ()) in
          Fun.protect
            ~finally:(fun () -> remove err)
            (fun () ->
              Alcotest.(check (option int))
                "exit code at the end of the file" (Some 0) (wait_exit pid);
              Alcotest.(check string) "nothing on stderr" "" (read_file err)));
      let es = events log in
      let delivered =
        List.filter_map (function Log.Deliver { seq; len; _ } -> Some (seq, len) | _ -> None) es
      in
      Alcotest.(check (list (pair int int)))
        "three messages, numbered, the equal lines twice"
        [ (1, 5); (2, 5); (3, 25) ]
        delivered;
      (match Vsync.check_files ~quiescent:true [ log ] with
      | Ok s -> Alcotest.(check int) "casts in the log" 3 s.Vsync.casts
      | Error l ->
          Alcotest.failf "%s" (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) l)));
      (* The same log through consort check-logs, then altered. *)
      let code, out = run_out [ "check-logs"; "--quiescent"; log ] in
      Alcotest.(check (option int)) "check-logs: the log holds" (Some 0) code;
      Alcotest.(check bool)
        ("check-logs says so: " ^ out) true
        (starts_with out "virtual synchrony holds: 1 logs, 1 members");
      let altered = temp ".log" in
      Fun.protect
        ~finally:(fun () -> remove altered)
        (fun () ->
          let lines = List.filter (( <> ) "") (String.split_on_char '\n' (read_file log)) in
          let oc = open_out_bin altered in
          (* Each delivery written twice. *)
          List.iter
            (fun l ->
              output_string oc (l ^ "\n");
              if starts_with l "{\"ev\":\"deliver\"" then output_string oc (l ^ "\n"))
            lines;
          close_out oc;
          let code, out = run_out [ "check-logs"; altered ] in
          Alcotest.(check (option int)) "check-logs: a delivery twice" (Some 1) code;
          Alcotest.(check bool)
            ("check-logs names it: " ^ out) true
            (contains out "delivers message 1 of");
          Alcotest.(check bool) ("and counts: " ^ out) true (contains out "3 violation(s)"));
      let code, _ = run_out [ "check-logs"; "/nonexistent/consort.log" ] in
      Alcotest.(check (option int)) "check-logs: a missing file" (Some 2) code)

(* A line longer than 1 MiB is not cast (memory stays bounded), whether
   its end is in the buffer or far beyond; the next one is. *)
let long_line () =
  let input = temp ".txt" and log = temp ".log" in
  Fun.protect
    ~finally:(fun () ->
      remove input;
      remove log)
    (fun () ->
      let oc = open_out_bin input in
      output_string oc (String.make ((1 lsl 20) + 10) 'x');
      output_string oc "\nshort\n";
      output_string oc (String.make (3 lsl 20) 'y');
      output_string oc "\nend\n";
      close_out oc;
      with_stdin_file input (fun fd ->
          let pid, err = spawn ~stdin:fd (member_args ~log ()) in
          Fun.protect
            ~finally:(fun () -> remove err)
            (fun () ->
              Alcotest.(check (option int))
                "exit code at the end of the file" (Some 0) (wait_exit pid);
              let warning =
                "consort member: standard input: a line longer than 1048576 bytes is not cast\n"
              in
              Alcotest.(check string)
                "one line on stderr per long line" (warning ^ warning) (read_file err)));
      let delivered =
        List.filter_map
          (function Log.Deliver { seq; len; _ } -> Some (seq, len) | _ -> None)
          (events log)
      in
      Alcotest.(check (list (pair int int))) "only the short lines" [ (1, 5); (2, 3) ] delivered)

(* Wrong command lines: exit code 2 and one line naming what is wrong. *)
let usage_error name args ~mentions =
  with_stdin_file "/dev/null" (fun fd ->
      let pid, err = spawn ~stdin:fd args in
      Fun.protect
        ~finally:(fun () -> remove err)
        (fun () ->
          let code = wait_exit pid in
          let text = read_file err in
          Alcotest.(check (option int)) (name ^ ": exit code") (Some 2) code;
          let lines = List.filter (( <> ) "") (String.split_on_char '\n' text) in
          Alcotest.(check int) (name ^ ": one line on stderr: " ^ text) 1 (List.length lines);
          List.iter
            (fun sub ->
              let n = String.length sub and m = String.length text in
              let rec has i = i + n <= m && (String.sub text i n = sub || has (i + 1)) in
              if not (has 0) then Alcotest.failf "%s: %S does not mention %S" name text sub)
            mentions))

let bad_command_lines () =
  let base = [ "member"; "--group"; "cli"; "--quiet" ] in
  usage_error "a peer that does not parse"
    (base @ [ "--peers"; "127.0.0.1:7400,localhost:7401" ])
    ~mentions:[ "--peers"; "localhost:7401" ];
  usage_error "a peer without a port"
    (base @ [ "--peers"; "10.0.0.1" ])
    ~mentions:[ "--peers"; "10.0.0.1"; "no port" ];
  usage_error "a peer with a bad port"
    (base @ [ "--peers"; "10.0.0.1:70000" ])
    ~mentions:[ "10.0.0.1:70000"; "port" ];
  usage_error "bind to the wildcard address"
    (base @ [ "--bind"; "0.0.0.0:7400" ])
    ~mentions:[ "--bind 0.0.0.0:7400"; "cannot be reached by peers" ];
  usage_error "bind to port 0"
    (base @ [ "--bind"; "127.0.0.1:0" ])
    ~mentions:[ "--bind 127.0.0.1:0"; "port" ];
  usage_error "bind to a multicast address"
    (base @ [ "--bind"; "239.1.2.3:7400" ])
    ~mentions:[ "multicast" ];
  usage_error "bind to the broadcast address"
    (base @ [ "--bind"; "255.255.255.255:7400" ])
    ~mentions:[ "broadcast" ];
  usage_error "bind to loopback with a peer elsewhere"
    (base @ [ "--bind"; "127.0.0.1:7400"; "--peers"; "10.1.2.3:7400" ])
    ~mentions:[ "127.0.0.1:7400"; "10.1.2.3:7400"; "loopback" ];
  usage_error "a bind address that does not parse"
    (base @ [ "--bind"; "here:7400" ])
    ~mentions:[ "--bind here:7400" ];
  usage_error "a window of zero"
    (base @ [ "--params"; "mnak.window=0" ])
    ~mentions:[ "--params"; "mnak.window=0"; "out of its range [1, " ];
  usage_error "a negative timeout"
    (base @ [ "--params"; "suspect.timeout=-1s" ])
    ~mentions:[ "suspect.timeout"; "out of its range" ];
  usage_error "a tunable of the wrong kind"
    (base @ [ "--params"; "pt2pt.rto=fast" ])
    ~mentions:[ "pt2pt.rto=fast"; "expected a duration" ];
  usage_error "an unknown tunable"
    (base @ [ "--params"; "nope.x=1" ])
    ~mentions:[ "unknown tunable"; "nope.x" ]

let () =
  Alcotest.run "consort-member-cli"
    [
      ( "input",
        [
          Alcotest.test_case "standard input is /dev/null: the member stays" `Quick dev_null;
          Alcotest.test_case "--no-input: the member stays, whatever its input" `Quick no_input;
          Alcotest.test_case "standard input is a regular file: its lines are cast" `Quick
            regular_file;
          Alcotest.test_case "a line over 1 MiB is not cast" `Quick long_line;
        ] );
      ( "command line",
        [
          Alcotest.test_case "wrong addresses and tunables: exit 2, one line" `Quick
            bad_command_lines;
        ] );
    ]
