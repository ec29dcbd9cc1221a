(* The process server as real processes over loopback UDP: a file server,
   a process server, and consort cap exec / ps / kill. A bytecode program
   runs remotely with its capability environment and its exit code comes
   back; programs over their limits are stopped and the caller is told
   why; bad programs and descriptors are refused with one line. *)

module Pd = Consort_capproc.Pd
open Consort_cap
open Consort_crypto
open Consort_local
open Cap_procs

let here = Filename.dirname Sys.executable_name
let prog_bc = Filename.concat here "prog.bc"
let ( / ) = Filename.concat

type server = { pid : int; cap : string; addr : string }

let start_server ?(env = []) ~log args =
  let r, w = Unix.pipe ~cloexec:true () in
  let err =
    Unix.openfile log [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND; Unix.O_CLOEXEC ] 0o644
  in
  let port = free_port () in
  let addr = Printf.sprintf "127.0.0.1:%d" port in
  let pid =
    Unix.create_process_env (consort ())
      (Array.of_list (("consort" :: args) @ [ "--bind"; addr ]))
      (Array.concat [ Array.of_list (base_env @ env); Unix.environment () ])
      Unix.stdin w err
  in
  Unix.close w;
  Unix.close err;
  let ic = Unix.in_channel_of_descr r in
  let line = try input_line ic with End_of_file -> "" in
  close_in ic;
  match String.split_on_char ' ' line with
  | [ "server"; cap ] -> { pid; cap; addr }
  | _ -> Alcotest.failf "server's first line: %S (log %s)" line (try read_file log with _ -> "")

let stop s =
  (try Unix.kill s.pid Sys.sigterm with Unix.Unix_error _ -> ());
  try ignore (Unix.waitpid [] s.pid) with Unix.Unix_error _ -> ()

(* Runs consort; its exit status, standard output and error. *)
let run ?env ?stdin_file args =
  let out = Filename.temp_file "capproc-out" "" and err = Filename.temp_file "capproc-err" "" in
  Fun.protect
    ~finally:(fun () ->
      Sys.remove out;
      Sys.remove err)
    (fun () ->
      let stdin_fd =
        Option.map (fun f -> Unix.openfile f [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0) stdin_file
      in
      let pid = spawn ?env ?stdin_fd ~out ~err args in
      Option.iter Unix.close stdin_fd;
      let code = wait_code pid in
      (code, read_file out, read_file err))

type world = { dir : string; fs : server; ps : server; prog : string; env : string list }

(* As root, programs run as make deps' user consort-run, or as nobody's uid
   if it was not made. *)
let user_args, program_uid =
  if Unix.geteuid () <> 0 then ([], None)
  else
    match Unix.getpwnam "consort-run" with
    | pw -> ([], Some pw.Unix.pw_uid)
    | exception Not_found -> ([ "--user"; "65534:65534" ], Some 65534)

let with_world ?(ps_args = []) f =
  let d = temp_dir "capproc" in
  Unix.mkdir (d / "fs") 0o700;
  Unix.mkdir (d / "ps") 0o700;
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  let fs = start_server ~log:(d / "fs.log") [ "cap"; "fs"; "serve"; "--new"; "--data"; d / "fs" ] in
  Fun.protect ~finally:(fun () -> stop fs) @@ fun () ->
  (* Programs built here find the C stubs of Consort's libraries in a copy
     their user can read (the build tree may be in a directory only root
     enters, as under scripts/mutants.sh). *)
  Unix.chmod d 0o711;
  let stubs = d / "stubs" in
  Unix.mkdir stubs 0o755;
  List.iter
    (fun l ->
      let f = Printf.sprintf "dllconsort_%s_stubs.so" l in
      write_file (stubs / f) (read_file (Filename.concat here (".." / ".." / "src" / l / f)));
      Unix.chmod (stubs / f) 0o755)
    [ "cap"; "crypto"; "engine" ];
  let ps =
    start_server
      ~env:[ "CAML_LD_LIBRARY_PATH=" ^ stubs ]
      ~log:(d / "ps.log")
      ([ "cap"; "proc"; "serve"; "--data"; d / "ps"; "--locate"; fs.addr ] @ user_args @ ps_args)
  in
  Fun.protect ~finally:(fun () -> stop ps) @@ fun () ->
  let env = [ "CONSORT_LOCATE=" ^ fs.addr ^ "," ^ ps.addr ] in
  let code, prog, err = run ~env [ "cap"; "fs"; "put"; "--server"; fs.cap; prog_bc ] in
  if code <> 0 then Alcotest.failf "put prog.bc: %s" err;
  f { dir = d; fs; ps; prog = String.trim prog; env }

let exec ?stdin_file w args = run ~env:w.env ?stdin_file ([ "cap"; "exec"; w.ps.cap; w.prog ] @ args)

let test_remote_run () =
  with_world @@ fun w ->
  let input = w.dir / "input" in
  write_file input "hello\nworld\n";
  let extra = w.fs.cap in
  let code, out, err =
    exec ~stdin_file:input w [ "--cap"; "extra=" ^ extra; "echo"; "7"; "a"; "b c" ]
  in
  Alcotest.(check string) "stderr" "bye\n" err;
  Alcotest.(check string)
    "stdout"
    (Printf.sprintf
       "args: a b c\ncaps: stdin,stdout,stderr,extra\nextra: %s\nself: true\nHELLO\nWORLD\n" extra)
    out;
  Alcotest.(check int) "the program's exit code" 7 code;
  (* With no input (-n): the caller's root (CONSORT_ROOT) is not handed
     over unless asked for (--with-root). *)
  let code, out, _ =
    run
      ~env:(("CONSORT_ROOT=" ^ extra) :: w.env)
      [ "cap"; "exec"; "-n"; w.ps.cap; w.prog; "echo"; "0" ]
  in
  Alcotest.(check int) "exit 0" 0 code;
  Alcotest.(check bool)
    ("no root unless asked: " ^ out) true
    (contains out "caps: stdout,stderr\n" && not (contains out extra));
  let code, out, _ =
    run
      ~env:(("CONSORT_ROOT=" ^ extra) :: w.env)
      [ "cap"; "exec"; "-n"; "--with-root"; w.ps.cap; w.prog; "echo"; "0" ]
  in
  Alcotest.(check int) "exit 0" 0 code;
  Alcotest.(check bool)
    "root given, no stdin" true
    (contains out (Printf.sprintf "caps: stdout,stderr,root\nroot: %s\n" extra));
  (* More output than a circuit holds: every line, in order. *)
  let code, out, _ = exec w [ "-n"; "big"; "30000" ] in
  Alcotest.(check int) "big: exit 0" 0 code;
  let lines = String.split_on_char '\n' out in
  Alcotest.(check int) "every line" 30001 (List.length lines);
  Alcotest.(check bool) "in order" true (List.nth lines 29999 = "line 30000 " ^ String.make 50 'x')

(* consort-exec, the small client binary (with no agent, its OCaml client): the same command as
   consort cap exec. Its program's
   streams and exit code, the caller's root not handed over, and a refusal (one line, exit 2). *)
let consort_exec = here / ".." / ".." / "bin" / "exec" / "consort_exec.exe"

let run_small ~env ?stdin_file args =
  let out = Filename.temp_file "capproc-out" "" and err = Filename.temp_file "capproc-err" "" in
  Fun.protect
    ~finally:(fun () ->
      Sys.remove out;
      Sys.remove err)
    (fun () ->
      let fd p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0 in
      let o = fd out and e = fd err in
      let i = Unix.openfile (Option.value stdin_file ~default:"/dev/null") [ Unix.O_RDONLY ] 0 in
      let pid =
        Unix.create_process_env consort_exec
          (Array.of_list ("consort-exec" :: args))
          (* No agent unless the test names one (CONSORT_AGENT in [env] comes first). *)
          (Array.concat
             [ Array.of_list (base_env @ env @ [ "CONSORT_AGENT=off" ]); Unix.environment () ])
          i o e
      in
      List.iter Unix.close [ i; o; e ];
      let code = wait_code pid in
      (code, read_file out, read_file err))

let test_consort_exec () =
  with_world @@ fun w ->
  let input = w.dir / "input" in
  write_file input "hello\nworld\n";
  let extra = w.fs.cap in
  let code, out, err =
    run_small
      ~env:(("CONSORT_ROOT=" ^ extra) :: w.env)
      ~stdin_file:input
      [ w.ps.cap; w.prog; "--cap"; "extra=" ^ extra; "echo"; "7"; "a"; "b c" ]
  in
  Alcotest.(check string) "stderr" "bye\n" err;
  Alcotest.(check string)
    "stdout"
    (Printf.sprintf
       "args: a b c\ncaps: stdin,stdout,stderr,extra\nextra: %s\nself: true\nHELLO\nWORLD\n" extra)
    out;
  Alcotest.(check int) "the program's exit code" 7 code;
  let code, out, err = run_small ~env:w.env [ "-n"; w.ps.cap; w.prog; "echo"; "0" ] in
  Alcotest.(check int) ("exit 0: " ^ err) 0 code;
  Alcotest.(check bool) ("no input: " ^ out) true (contains out "caps: stdout,stderr\n");
  let code, _, err = run_small ~env:w.env [ "-n"; w.ps.cap; "cap1:nothing" ] in
  Alcotest.(check int) "a bad capability: exit 2" 2 code;
  Alcotest.(check bool)
    ("one line: " ^ err) true
    (String.length err > 0 && String.index err '\n' = String.length err - 1)

(* consort cap agent: consort-exec's starts through it, as without it; a limit named; a foreign
   uid refused; bad requests answered while it goes on; killed mid-request, exit 3; a stale
   socket, then no agent: the OCaml client runs. *)
module Agent = Consort_capagent

let agent_dir w = w.dir / "agent"
let agent_sock w = agent_dir w / "agent.sock"
let agent_log w = w.dir / "agent.log"

(* The agents started, killed at the end whatever happened (a failed check included). *)
let agents = ref []

let start_agent w =
  let pid =
    spawn ~env:w.env ~out:(w.dir / "agent.out") ~err:(agent_log w)
      [ "cap"; "agent"; "--socket"; agent_sock w ]
  in
  agents := pid :: !agents;
  eventually "the agent serves" (fun () ->
      contains (try read_file (agent_log w) with Sys_error _ -> "") "serving uid");
  pid

(* The agent's counts, said when it stops. *)
let stop_agent w pid =
  Unix.kill pid Sys.sigterm;
  Alcotest.(check int) "the agent stops: exit 0" 0 (wait_code pid);
  let log = read_file (agent_log w) in
  match List.find_opt (fun l -> contains l "stopped:") (String.split_on_char '\n' log) with
  | Some l -> l
  | None -> Alcotest.failf "no counts in the agent's log: %s" log

(* A request by hand: its answer line (or what came before the end). *)
let raw_request ?(fds = [||]) w bytes =
  let s = Unix.socket ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  Fun.protect ~finally:(fun () -> Unix.close s) @@ fun () ->
  Unix.connect s (Unix.ADDR_UNIX (agent_sock w));
  (try
     let n = if bytes = "" then 0 else Agent.send_fds s bytes fds in
     if n < String.length bytes then
       ignore (Unix.write_substring s bytes n (String.length bytes - n))
   with Unix.Unix_error _ -> ());
  let b = Bytes.create 512 in
  let rec go acc =
    match Unix.read s b 0 512 with
    | 0 -> acc
    | n ->
        let acc = acc ^ Bytes.sub_string b 0 n in
        if String.contains acc '\n' then acc else go acc
    | exception Unix.Unix_error _ -> acc
  in
  go ""

let request w argv =
  Agent.encode
    {
      Agent.home = None;
      consort_root = None;
      consort_locate =
        Some (List.hd (List.map (fun e -> String.sub e 15 (String.length e - 15)) w.env));
      consort_multicast = Some "off";
      root_file = None;
      argv;
    }

let test_agent () =
  with_world @@ fun w ->
  Fun.protect ~finally:(fun () ->
      List.iter
        (fun pid ->
          match Unix.waitpid [ Unix.WNOHANG ] pid with
          | 0, _ -> (
              (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
              try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
          | _ | (exception Unix.Unix_error _) -> ())
        !agents;
      agents := [])
  @@ fun () ->
  Unix.mkdir (agent_dir w) 0o700;
  let through = ("CONSORT_AGENT=" ^ agent_sock w) :: w.env in
  let input = w.dir / "input" in
  write_file input "hello\nworld\n";
  let extra = w.fs.cap in
  let env = ("CONSORT_ROOT=" ^ extra) :: through in
  let echo = [ w.ps.cap; w.prog; "--cap"; "extra=" ^ extra; "echo"; "7"; "a"; "b c" ] in
  (* No agent: the OCaml client runs. *)
  let alone = run_small ~env ~stdin_file:input echo in
  let code, out, err = alone in
  Alcotest.(check (triple int string string))
    "no agent: the program's output and exit code" (7, "bye\n", "")
    (code, err, if contains out "HELLO\nWORLD\n" then "" else out);
  let pid = start_agent w in
  let served = ref 0 in
  let through_agent ?(stdin_file = input) ?(env = env) args =
    incr served;
    run_small ~env ~stdin_file args
  in
  Alcotest.(check (triple int string string))
    "through the agent: the same output and exit code" alone (through_agent echo);
  (* The caller's root, read by the client, given with --with-root. *)
  let code, out, _ = through_agent [ "-n"; "--with-root"; w.ps.cap; w.prog; "echo"; "0" ] in
  Alcotest.(check int) "--with-root: exit 0" 0 code;
  Alcotest.(check bool)
    ("the client's root given: " ^ out)
    true
    (contains out (Printf.sprintf "caps: stdout,stderr,root\nroot: %s\n" extra));
  (* ~/.consort/root, read by the client. *)
  let home = w.dir / "home" in
  Unix.mkdir home 0o700;
  Unix.mkdir (home / ".consort") 0o700;
  write_file (home / ".consort" / "root") (extra ^ "\nnotes\n");
  let code, out, _ =
    through_agent ~env:(("HOME=" ^ home) :: through)
      [ "-n"; "--with-root"; w.ps.cap; w.prog; "echo"; "0" ]
  in
  Alcotest.(check int) "--with-root from ~/.consort/root: exit 0" 0 code;
  Alcotest.(check bool)
    ("the root file's root given: " ^ out)
    true
    (contains out (Printf.sprintf "caps: stdout,stderr,root\nroot: %s\n" extra));
  (* A limit (memory: at once, where CPU time takes long on a loaded machine). *)
  let code, _, err = through_agent [ "-n"; "--memory"; "64"; w.ps.cap; w.prog; "hog" ] in
  Alcotest.(check int) ("a limit: exit 137; " ^ err) 137 code;
  Alcotest.(check bool)
    ("the limit named, as without the agent: " ^ err)
    true
    (contains err "\nconsort: the program stopped: memory limit (65536 KiB) exceeded\n");
  let code, _, err = through_agent [ "-n"; w.ps.cap; "cap1:nothing" ] in
  Alcotest.(check int) "a bad capability: exit 2" 2 code;
  Alcotest.(check string)
    "one line, as without the agent" "consort: PROGRAM: bad capability: "
    (String.sub err 0 (min 34 (String.length err)));
  (* Ctrl-C: passed on by consort-exec, the program's SIGINT. *)
  incr served;
  let iout = w.dir / "intr.out" and ierr = w.dir / "intr.err" in
  let client =
    let fd p =
      Unix.openfile p [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644
    in
    let o = fd iout and e = fd ierr in
    let i = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
    let pid =
      Unix.create_process_env consort_exec
        [| "consort-exec"; "-n"; w.ps.cap; w.prog; "sleepint" |]
        (Array.concat [ Array.of_list (base_env @ through); Unix.environment () ])
        i o e
    in
    List.iter Unix.close [ i; o; e ];
    pid
  in
  eventually "the program sleeps" (fun () -> contains (read_file iout) "waiting");
  Unix.kill client Sys.sigint;
  Alcotest.(check int) ("interrupted: its exit code; " ^ read_file ierr) 42 (wait_code client);
  Alcotest.(check bool) "it saw SIGINT" true (contains (read_file iout) "interrupted");
  (* Bad requests: one line each, and the agent goes on. *)
  let bad = ref 0 in
  let expect_bad what bytes sub =
    incr bad;
    let r = raw_request w bytes in
    Alcotest.(check bool)
      (what ^ ": " ^ r)
      true
      (String.length r > 1 && r.[0] = 'E' && contains r sub)
  in
  expect_bad "not a request" "GET / HTTP/1.0\r\n\r\n" "not a consort-exec request";
  expect_bad "over the bound"
    ("CXA1\x7f\xff\xff\xff" ^ String.make 70_000 'a')
    (Printf.sprintf "at most %d" Agent.max_body);
  let good = request w [ "consort-exec"; "-n"; w.ps.cap; w.prog; "echo"; "0" ] in
  let frame body =
    let n = String.length body in
    Printf.sprintf "CXA1%c%c%c%c%s"
      (Char.chr (n lsr 24))
      (Char.chr ((n lsr 16) land 255))
      (Char.chr ((n lsr 8) land 255))
      (Char.chr (n land 255))
      body
  in
  expect_bad "truncated" (frame (String.sub good 8 12)) "truncated";
  expect_bad "no streams" good "three standard streams";
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
  expect_bad "a body that lies"
    (let b = Bytes.of_string good in
     Bytes.set b 8 '\007';
     Bytes.to_string b)
    "presence";
  (* A well-formed request by hand, with its streams: run. *)
  incr served;
  let r = raw_request ~fds:[| devnull; devnull; devnull |] w good in
  Alcotest.(check string) "a request by hand" "X0\n" r;
  (* A foreign uid: refused at once, even with a good request and its streams; the C client run
     as nobody does not send it, and runs the OCaml client. *)
  Unix.chmod (agent_dir w) 0o711;
  Unix.chmod (agent_sock w) 0o666;
  let me = Unix.geteuid () in
  let nobody_request () =
    match Unix.fork () with
    | 0 ->
        let code =
          try
            Unix.setgroups [| 65534 |];
            Unix.setgid 65534;
            Unix.setuid 65534;
            let r = raw_request ~fds:[| devnull; devnull; devnull |] w good in
            if r = Printf.sprintf "Ethis agent serves uid %d only\n" me then 0 else 1
          with _ -> 2
        in
        Unix._exit code
    | child -> wait_code child
  in
  let foreign = ref 0 in
  if Unix.geteuid () = 0 then begin
    incr foreign;
    Alcotest.(check int) "nobody's request refused" 0 (nobody_request ());
    (* The C client as nobody, from a copy it may run. *)
    let bin = w.dir / "bin" in
    Unix.mkdir bin 0o755;
    List.iter
      (fun f ->
        write_file (bin / f) (read_file (here / ".." / ".." / "bin" / "exec" / f));
        Unix.chmod (bin / f) 0o755)
      [ "consort_exec.exe"; "consort_exec_ml.exe" ];
    incr foreign;
    let out = w.dir / "nobody.out" and err = w.dir / "nobody.err" in
    let fd p =
      Unix.openfile p [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o666
    in
    let o = fd out and e = fd err in
    Unix.chmod out 0o666;
    Unix.chmod err 0o666;
    let pid =
      Unix.create_process_env "setpriv"
        [|
          "setpriv";
          "--reuid=65534";
          "--regid=65534";
          "--clear-groups";
          bin / "consort_exec.exe";
          "-n";
          w.ps.cap;
          w.prog;
          "echo";
          "0";
        |]
        (Array.concat
           [ Array.of_list ((("HOME=" ^ w.dir) :: base_env) @ through); Unix.environment () ])
        devnull o e
    in
    Unix.close o;
    Unix.close e;
    let code = wait_code pid in
    Alcotest.(check int) ("nobody's consort-exec: its own client ran; " ^ read_file err) 0 code;
    Alcotest.(check bool) "its output" true (contains (read_file out) "caps: stdout,stderr\n");
    eventually "the agent counted it" (fun () ->
        contains
          (read_file (agent_log w))
          "refused a client of uid 65534: this agent serves uid 0 only (2 refused)");
    (* An "agent" of another user (root's socket, open to all) gets nothing from nobody's
       consort-exec: not a byte of its request, which holds its capabilities. *)
    let fake = w.dir / "fake.sock" in
    let l = Unix.socket ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
    Unix.bind l (Unix.ADDR_UNIX fake);
    Unix.chmod fake 0o666;
    Unix.listen l 1;
    let o = fd out and e = fd err in
    let pid =
      Unix.create_process_env "setpriv"
        [|
          "setpriv";
          "--reuid=65534";
          "--regid=65534";
          "--clear-groups";
          bin / "consort_exec.exe";
          "-n";
          w.ps.cap;
          w.prog;
          "echo";
          "0";
        |]
        (Array.concat
           [
             Array.of_list
               (("HOME=" ^ w.dir) :: ("CONSORT_AGENT=" ^ fake) :: ("CONSORT_ROOT=" ^ extra)
                :: base_env
               @ w.env);
             Unix.environment ();
           ])
        devnull o e
    in
    Unix.close o;
    Unix.close e;
    let got =
      match Unix.select [ l ] [] [] 30. with
      | [], _, _ -> Alcotest.fail "nobody's consort-exec did not connect"
      | _ ->
          let c, _ = Unix.accept ~cloexec:true l in
          let b = Bytes.create 4096 in
          (* Until the client closes (the real one, at once) or sends (the request). *)
          let n =
            match Unix.select [ c ] [] [] 30. with
            | [], _, _ -> -1
            | _ -> ( try Unix.read c b 0 4096 with Unix.Unix_error _ -> 0)
          in
          Unix.close c;
          n
    in
    Unix.close l;
    Alcotest.(check int) "another user's agent got no byte" 0 got;
    Alcotest.(check int) ("then its own client ran; " ^ read_file err) 0 (wait_code pid);
    Alcotest.(check bool) "its output" true (contains (read_file out) "caps: stdout,stderr\n")
  end;
  Unix.chmod (agent_dir w) 0o700;
  Unix.close devnull;
  let counts = stop_agent w pid in
  Alcotest.(check string)
    "the agent's counts"
    (Printf.sprintf
       "consort: agent: stopped: %d served, %d refused for their uid, %d bad, 0 not run here"
       !served !foreign !bad)
    counts;
  (* The caller killed while its program runs: the program is hung up on, as with its own client
     (SIGHUP once the server finds its circuits dead). *)
  let pid = start_agent w in
  let client, err =
    let err = w.dir / "hup.err" in
    let o = Unix.openfile "/dev/null" [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0 in
    let e = Unix.openfile err [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
    let i = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
    let client =
      Unix.create_process_env consort_exec
        [| "consort-exec"; "-n"; "--show-cap"; w.ps.cap; w.prog; "sleep" |]
        (Array.concat [ Array.of_list (base_env @ through); Unix.environment () ])
        i o e
    in
    List.iter Unix.close [ i; o; e ];
    (client, err)
  in
  eventually "the program runs" (fun () -> contains (read_file err) "consort: process cap1:");
  Unix.kill client Sys.sigkill;
  ignore (wait_code client);
  eventually "the program was hung up on" (fun () ->
      let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
      contains o "killed by SIGHUP");
  (* The agent free again. *)
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
  eventually "the agent runs a start again" (fun () ->
      raw_request ~fds:[| devnull; devnull; devnull |] w good = "X0\n");
  Unix.close devnull;
  (* Killed mid-request: exit 3. A start asked while a program runs runs too. *)
  let out = w.dir / "long.out" and err = w.dir / "long.err" in
  let fd p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let o = fd out and e = fd err in
  let i = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  let client =
    Unix.create_process_env consort_exec
      [| "consort-exec"; "-n"; "--show-cap"; w.ps.cap; w.prog; "sleep" |]
      (Array.concat [ Array.of_list (base_env @ through); Unix.environment () ])
      i o e
  in
  List.iter Unix.close [ i; o; e ];
  eventually "the program runs" (fun () -> contains (read_file err) "consort: process cap1:");
  let code, out2, _ = run_small ~env:through [ "-n"; w.ps.cap; w.prog; "echo"; "0" ] in
  Alcotest.(check int) "a start meanwhile: exit 0" 0 code;
  Alcotest.(check bool) "its output" true (contains out2 "caps: stdout,stderr\n");
  Unix.kill pid Sys.sigkill;
  ignore (wait_code pid);
  Alcotest.(check int) "the agent killed mid-request: exit 3" 3 (wait_code client);
  Alcotest.(check bool)
    ("outcome unknown, one line: " ^ read_file err)
    true
    (contains (read_file err)
       "\nconsort: exec: outcome unknown: the agent stopped without an answer\n");
  (match String.split_on_char ' ' (List.hd (String.split_on_char '\n' (read_file err))) with
  | [ "consort:"; "process"; p ] -> ignore (run ~env:w.env [ "cap"; "kill"; "--signal"; "KILL"; p ])
  | _ -> ());
  (* Its socket is left: stale. consort-exec runs its own client. *)
  Alcotest.(check bool) "a stale socket" true (Sys.file_exists (agent_sock w));
  Alcotest.(check (triple int string string))
    "a stale socket: the same output and exit code" alone
    (run_small ~env ~stdin_file:input echo);
  (* A new agent takes the stale socket's place. *)
  let pid = start_agent w in
  Alcotest.(check (triple int string string))
    "through a new agent" alone
    (run_small ~env ~stdin_file:input echo);
  Alcotest.(check string)
    "the new agent served it"
    "consort: agent: stopped: 1 served, 0 refused for their uid, 0 bad, 0 not run here"
    (stop_agent w pid);
  Alcotest.(check bool) "its socket removed" false (Sys.file_exists (agent_sock w))

(* The agent's circuits: one port for every start (the server's node keeps its session with
   it), each start's circuits its own and hung up when the start ends. A program that outlives its
   start (a child in a session of its own, on a server without namespace or cgroup, where it
   survives) writes into its start's stdout circuit while the next start runs: refused, and the
   next start's output is its own. Then two starts in a row with input: each the output and exit
   code of a start without the agent. *)
let test_agent_circuits () =
  with_world ~ps_args:[ "--no-namespaces"; "--no-cgroups" ] @@ fun w ->
  Fun.protect ~finally:(fun () ->
      List.iter
        (fun pid ->
          match Unix.waitpid [ Unix.WNOHANG ] pid with
          | 0, _ -> (
              (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
              try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
          | _ | (exception Unix.Unix_error _) -> ())
        !agents;
      agents := [])
  @@ fun () ->
  let code, stale, err =
    run ~env:w.env [ "cap"; "fs"; "put"; "--server"; w.fs.cap; here / "prog_stale.bc" ]
  in
  if code <> 0 then Alcotest.failf "put prog_stale.bc: %s" err;
  let stale = String.trim stale in
  Unix.mkdir (agent_dir w) 0o700;
  let through = ("CONSORT_AGENT=" ^ agent_sock w) :: w.env in
  (* A directory the programs' user can write. *)
  let shared = w.dir / "shared" in
  Unix.mkdir shared 0o700;
  Unix.chmod shared 0o777;
  let result = shared / "result" in
  let pid = start_agent w in
  let code, out1, err1 = run_small ~env:through [ "-n"; w.ps.cap; stale; "1"; result ] in
  Alcotest.(check (pair int string)) "the first start: exit 0" (0, "") (code, err1);
  Alcotest.(check bool) ("its port: " ^ out1) true (contains out1 "port: ");
  (* The next start runs until the stale program has tried (30 s at most). *)
  let code, out2, err2 = run_small ~env:through [ "-n"; w.ps.cap; w.prog; "waitfile"; result ] in
  Alcotest.(check (triple int string string))
    "the next start: its own output only" (0, "seen\n", "") (code, out2, err2);
  let outcome = read_file result in
  (* Refused because the circuit was retired when its start ended (hung up, or forgotten 10 s
     later), not merely because its stream was closed. *)
  Alcotest.(check bool)
    ("the stale program's write into its start's circuit is refused, the circuit hung up: "
   ^ outcome)
    true
    (List.mem outcome [ "refused: the start ended"; "refused: the circuit is gone" ]);
  (* The same port for every start's circuits. *)
  let code, out3, _ = run_small ~env:through [ "-n"; w.ps.cap; stale; "-"; "-" ] in
  Alcotest.(check (pair int string)) "a third start: the first one's port" (0, out1) (code, out3);
  (* Two starts in a row with input: as without the agent. *)
  let input = w.dir / "input" in
  write_file input "hello\nworld\n";
  let echo = [ w.ps.cap; w.prog; "echo"; "7"; "a" ] in
  let alone = run_small ~env:w.env ~stdin_file:input echo in
  let code, out, err = alone in
  Alcotest.(check (triple int string string))
    "without the agent" (7, "bye\n", "")
    (code, err, if contains out "args: a\n" && contains out "HELLO\nWORLD\n" then "" else out);
  Alcotest.(check (triple int string string))
    "a start through the agent" alone
    (run_small ~env:through ~stdin_file:input echo);
  Alcotest.(check (triple int string string))
    "the next start through the agent" alone
    (run_small ~env:through ~stdin_file:input echo);
  Alcotest.(check string)
    "every start served by the agent"
    "consort: agent: stopped: 5 served, 0 refused for their uid, 0 bad, 0 not run here"
    (stop_agent w pid);
  (* One handshake with the circuits' port for the five starts (the process server's node, kept
     from one program to the next), one for the stale program's own node. *)
  Alcotest.(check bool)
    ("two sessions with the circuits' port: " ^ read_file (agent_log w))
    true
    (contains (read_file (agent_log w)) "consort: agent: its circuits' port: 2 sessions\n")

(* consort-exec started and not waited for: its pid; standard output and error to [name].out and
   [name].err in the world's directory, no input. *)
let spawn_small w ~env name args =
  let fd p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let o = fd (w.dir / (name ^ ".out")) and e = fd (w.dir / (name ^ ".err")) in
  let i = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  let pid =
    Unix.create_process_env consort_exec
      (Array.of_list ("consort-exec" :: args))
      (Array.concat [ Array.of_list (base_env @ env); Unix.environment () ])
      i o e
  in
  List.iter Unix.close [ i; o; e ];
  pid

let kill_agents () =
  List.iter
    (fun pid ->
      match Unix.waitpid [ Unix.WNOHANG ] pid with
      | 0, _ -> (
          (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
          try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
      | _ | (exception Unix.Unix_error _) -> ())
    !agents;
  agents := []

(* Several programs at once through one agent (--max-running 2): two programs that print 40 lines
   each at the same time, each caller getting its own lines in order, its own stderr and exit code;
   a third start while both run is not run by the agent (its caller's own client runs it, with
   the same output); one caller killed while another's program runs on: the first program hung up
   on (SIGHUP), the second's output and exit code whole; the slots free again afterwards. *)
let test_agent_concurrent () =
  with_world @@ fun w ->
  Fun.protect ~finally:kill_agents @@ fun () ->
  Unix.mkdir (agent_dir w) 0o700;
  let through = ("CONSORT_AGENT=" ^ agent_sock w) :: w.env in
  let shared = w.dir / "shared" in
  Unix.mkdir shared 0o700;
  Unix.chmod shared 0o777;
  let pid =
    spawn ~env:w.env ~out:(w.dir / "agent.out") ~err:(agent_log w)
      [ "cap"; "agent"; "--socket"; agent_sock w; "--max-running"; "2" ]
  in
  agents := pid :: !agents;
  eventually "the agent serves" (fun () ->
      contains (try read_file (agent_log w) with Sys_error _ -> "") "serving uid");
  let lines label n =
    String.concat "" (List.init n (fun i -> Printf.sprintf "%s %d\n" label (i + 1)))
  in
  let running name = contains (read_file (w.dir / (name ^ ".err"))) "consort: process cap1:" in
  let go = shared / "go" in
  let ticks label code =
    spawn_small w ~env:through label
      [ "-n"; "--show-cap"; w.ps.cap; w.prog; "ticks"; label; "40"; string_of_int code; go ]
  in
  let a = ticks "a" 5 and b = ticks "b" 6 in
  eventually "both programs run" (fun () -> running "a" && running "b");
  (* Both slots taken: a third start runs in its caller's own client, as without the agent. *)
  let code, out, err = run_small ~env:through [ "-n"; w.ps.cap; w.prog; "echo"; "0" ] in
  Alcotest.(check (triple int bool string))
    "a start beyond --max-running: run by its caller, exit 0" (0, true, "bye\n")
    (code, contains out "caps: stdout,stderr\n", err);
  write_file go "";
  Alcotest.(check int) "the first program's exit code" 5 (wait_code a);
  Alcotest.(check int) "the second program's exit code" 6 (wait_code b);
  let check name =
    Alcotest.(check string)
      (name ^ ": its own lines, in order")
      (lines name 40)
      (read_file (w.dir / (name ^ ".out")));
    let err = read_file (w.dir / (name ^ ".err")) in
    Alcotest.(check bool)
      (name ^ ": its own stderr: " ^ err)
      true
      (contains err (name ^ " done\n")
      && not (contains err ((if name = "a" then "b" else "a") ^ " done")))
  in
  check "a";
  check "b";
  (* One caller killed while another's program runs on. *)
  Sys.remove go;
  let c = ticks "c" 7 in
  let d = spawn_small w ~env:through "d" [ "-n"; "--show-cap"; w.ps.cap; w.prog; "sleep" ] in
  eventually "both programs run again" (fun () -> running "c" && running "d");
  Unix.kill d Sys.sigkill;
  ignore (wait_code d);
  eventually "the killed caller's program was hung up on" (fun () ->
      let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
      contains o "killed by SIGHUP");
  write_file go "";
  Alcotest.(check int) "the other program ran on: its exit code" 7 (wait_code c);
  Alcotest.(check string) "its lines, whole" (lines "c" 40) (read_file (w.dir / "c.out"));
  (* The slots are free again: two starts at once through the agent. *)
  let e = ticks "e" 8 and f = ticks "f" 9 in
  Alcotest.(check (pair int int)) "two more at once" (8, 9) (wait_code e, wait_code f);
  Alcotest.(check (pair string string))
    "their own lines"
    (lines "e" 40, lines "f" 40)
    (read_file (w.dir / "e.out"), read_file (w.dir / "f.out"));
  (* A caller that does not read its output (a pipe nobody reads, 3,000 lines of 58 bytes: more
     than the pipe holds) holds up its own program only: another start runs meanwhile; then the
     pipe is read, and every line comes, in order. *)
  let r, wr = Unix.pipe ~cloexec:true () in
  let big =
    let e =
      Unix.openfile (w.dir / "big.err")
        [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ]
        0o644
    in
    let i = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
    let pid =
      Unix.create_process_env consort_exec
        [| "consort-exec"; "-n"; "--show-cap"; w.ps.cap; w.prog; "big"; "3000" |]
        (Array.concat [ Array.of_list (base_env @ through); Unix.environment () ])
        i wr e
    in
    List.iter Unix.close [ i; wr; e ];
    pid
  in
  eventually "the program that writes runs" (fun () -> running "big");
  let code, out, err = run_small ~env:through [ "-n"; w.ps.cap; w.prog; "echo"; "3" ] in
  Alcotest.(check (triple int bool string))
    "a start while another caller does not read its output" (3, true, "bye\n")
    (code, contains out "caps: stdout,stderr\n", err);
  let got =
    let b = Buffer.create 200_000 and chunk = Bytes.create 65536 in
    let rec go () =
      match Unix.read r chunk 0 65536 with
      | 0 -> ()
      | n ->
          Buffer.add_subbytes b chunk 0 n;
          go ()
    in
    go ();
    Unix.close r;
    Buffer.contents b
  in
  Alcotest.(check int) "the caller that read late: exit 0" 0 (wait_code big);
  Alcotest.(check string)
    "its 3,000 lines, in order"
    (String.concat ""
       (List.init 3000 (fun i -> Printf.sprintf "line %d %s\n" (i + 1) (String.make 50 'x'))))
    got;
  (* a, b, c, d, e, f, big and the start meanwhile served; the third start not run here. *)
  Alcotest.(check string)
    "the agent's counts"
    "consort: agent: stopped: 8 served, 0 refused for their uid, 0 bad, 1 not run here"
    (stop_agent w pid);
  Alcotest.(check bool)
    ("two starts ran at once: " ^ read_file (agent_log w))
    true
    (contains (read_file (agent_log w)) "consort: agent: 2 starts ran at once at most\n")

(* systemd: dist/consort-agent.socket and .service, as systemd reads them (systemd-analyze verify,
   ExecStart pointed at this build), the fields the agent needs; an agent started as systemd starts
   it (LISTEN_PID its pid, LISTEN_FDS=1, the listening socket on descriptor 3) serves on it, says
   so, and leaves the socket to systemd at its end; one passed open to others is refused (exit 2,
   one line) and so is a descriptor that is not a listening socket. *)
let dist f = here / ".." / ".." / "dist" / f

let test_agent_systemd () =
  let socket_unit = read_file (dist "consort-agent.socket")
  and service = read_file (dist "consort-agent.service") in
  let has text line = List.mem line (String.split_on_char '\n' text) in
  List.iter
    (fun l -> Alcotest.(check bool) ("consort-agent.socket: " ^ l) true (has socket_unit l))
    [ "ListenStream=%t/consort/agent.sock"; "SocketMode=0600"; "DirectoryMode=0700"; "Accept=no" ];
  List.iter
    (fun l -> Alcotest.(check bool) ("consort-agent.service: " ^ l) true (has service l))
    [
      "ExecStart=/usr/bin/consort cap agent"; "Requires=consort-agent.socket"; "KillSignal=SIGTERM";
    ];
  (if Sys.command "command -v systemd-analyze >/dev/null 2>&1" <> 0 then
     print_endline "SKIPPED (systemd-analyze verify: no systemd-analyze here)"
   else
     let d = temp_dir "agent-units" in
     Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
     let exe = Unix.realpath (consort ()) in
     write_file (d / "consort-agent.socket") socket_unit;
     write_file (d / "consort-agent.service")
       (String.concat "\n"
          (List.map
             (fun l ->
               if l = "ExecStart=/usr/bin/consort cap agent" then "ExecStart=" ^ exe ^ " cap agent"
               else l)
             (String.split_on_char '\n' service)));
     let out = d / "verify.out" in
     let code =
       Sys.command
         (Printf.sprintf "cd %s && systemd-analyze verify --man=no %s %s >%s 2>&1"
            (Filename.quote d)
            (Filename.quote (d / "consort-agent.socket"))
            (Filename.quote (d / "consort-agent.service"))
            (Filename.quote out))
     in
     Alcotest.(check (pair int string))
       "systemd-analyze verify: no complaint" (0, "")
       (code, read_file out));
  with_world @@ fun w ->
  Fun.protect ~finally:kill_agents @@ fun () ->
  Unix.mkdir (agent_dir w) 0o700;
  let listening mode =
    (try Unix.unlink (agent_sock w) with Unix.Unix_error _ -> ());
    let s = Unix.socket Unix.PF_UNIX Unix.SOCK_STREAM 0 in
    Unix.bind s (Unix.ADDR_UNIX (agent_sock w));
    Unix.chmod (agent_sock w) mode;
    Unix.listen s 16;
    s
  in
  (* As systemd starts it: the socket on descriptor 3, LISTEN_PID the agent's own pid. *)
  let activated (fd : Unix.file_descr) =
    let err =
      Unix.openfile (agent_log w)
        [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ]
        0o644
    in
    let null = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
    let pid =
      Unix.create_process_env "/bin/sh"
        [|
          "sh";
          "-c";
          (let n : int = Obj.magic fd in
           (if n = 3 then "" else Printf.sprintf "exec 3<&%d %d<&-; " n n)
           ^ "LISTEN_PID=$$; LISTEN_FDS=1; export LISTEN_PID LISTEN_FDS; exec \"$0\" cap agent");
          consort ();
        |]
        (Array.concat [ Array.of_list (base_env @ w.env); Unix.environment () ])
        null null err
    in
    List.iter Unix.close [ err; null ];
    agents := pid :: !agents;
    pid
  in
  let s = listening 0o600 in
  let pid = activated s in
  Unix.close s;
  eventually "the agent serves systemd's socket" (fun () ->
      contains
        (read_file (agent_log w))
        (Printf.sprintf "serving uid %d on %s (the socket systemd passed)" (Unix.geteuid ())
           (agent_sock w)));
  let through = ("CONSORT_AGENT=" ^ agent_sock w) :: w.env in
  let code, out, err = run_small ~env:through [ "-n"; w.ps.cap; w.prog; "echo"; "4" ] in
  Alcotest.(check (triple int bool string))
    "a start on the inherited socket" (4, true, "bye\n")
    (code, contains out "caps: stdout,stderr\n", err);
  Alcotest.(check string)
    "the agent ran it"
    "consort: agent: stopped: 1 served, 0 refused for their uid, 0 bad, 0 not run here"
    (stop_agent w pid);
  Alcotest.(check bool) "systemd's socket left in place" true (Sys.file_exists (agent_sock w));
  (* A socket open to others: refused. *)
  let s = listening 0o666 in
  let pid = activated s in
  Unix.close s;
  Alcotest.(check int) "a socket open to others: exit 2" 2 (wait_code pid);
  let log = read_file (agent_log w) in
  Alcotest.(check bool)
    ("one line that says why: " ^ log)
    true
    (contains log "not this user's or open to others (SocketMode=0600)"
    && String.index log '\n' = String.length log - 1);
  (* Not a listening socket: refused. *)
  let f = Unix.openfile "/dev/null" [ Unix.O_RDONLY ] 0 in
  let pid = activated f in
  Unix.close f;
  Alcotest.(check int) "a descriptor that is not a socket: exit 2" 2 (wait_code pid);
  Alcotest.(check bool)
    ("one line: " ^ read_file (agent_log w))
    true
    (contains (read_file (agent_log w)) "the descriptor systemd passed (3)")

(* A program that uses a capability of its environment: std_info through
   the RPC, located where the process server says. *)
let test_capability_use () =
  with_world @@ fun w ->
  let code, prog, err =
    run ~env:w.env [ "cap"; "fs"; "put"; "--server"; w.fs.cap; here / "prog_cap.bc" ]
  in
  if code <> 0 then Alcotest.failf "put prog_cap.bc: %s" err;
  let code, out, err =
    run ~env:w.env [ "cap"; "exec"; "-n"; "--cap"; "files=" ^ w.fs.cap; w.ps.cap; String.trim prog ]
  in
  Alcotest.(check (pair int string))
    ("the program reached its capability; " ^ err)
    (0, "info: consort file server\n")
    (code, out)

let test_limits () =
  with_world @@ fun w ->
  let code, _, err = exec w [ "-n"; "--cpu"; "1"; "spin" ] in
  Alcotest.(check int) ("cpu: exit 137; " ^ err) 137 code;
  Alcotest.(check bool) ("cpu: told why: " ^ err) true (contains err "cpu time limit");
  let code, _, err = exec w [ "-n"; "--memory"; "64"; "hog" ] in
  Alcotest.(check int) ("memory: exit 137; " ^ err) 137 code;
  Alcotest.(check bool)
    ("memory: told why: " ^ err) true
    (contains err "memory limit (65536 KiB) exceeded");
  let code, _, err = exec w [ "-n"; "--time"; "0.5"; "sleep" ] in
  Alcotest.(check int) ("run time: exit 137; " ^ err) 137 code;
  Alcotest.(check bool)
    ("run time: told why: " ^ err) true
    (contains err "run time limit (500 ms) exceeded");
  (* ps lists them, ended. *)
  let code, out, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
  Alcotest.(check int) "ps" 0 code;
  Alcotest.(check bool)
    ("ps lists the ended processes: " ^ out)
    true
    (contains out "cpu time limit" && contains out "run time limit")

let test_refusals () =
  with_world @@ fun w ->
  let not_bc = w.dir / "script" in
  write_file not_bc "#!/bin/sh\necho hello\n";
  let code, cap, _ = run ~env:w.env [ "cap"; "fs"; "put"; "--server"; w.fs.cap; not_bc ] in
  Alcotest.(check int) "put" 0 code;
  let code, out, err = run ~env:w.env [ "cap"; "exec"; "-n"; w.ps.cap; String.trim cap ] in
  Alcotest.(check int) ("not bytecode: exit 2; " ^ err) 2 code;
  Alcotest.(check string) "nothing ran" "" out;
  Alcotest.(check bool)
    ("one line naming the reason: " ^ err)
    true
    (contains err "not an OCaml bytecode executable"
    && List.length (String.split_on_char '\n' (String.trim err)) = 1);
  (* A bytecode file for another runtime: the trailer's magic changed. *)
  let other = w.dir / "other.bc" in
  let s = read_file prog_bc in
  let n = String.length s in
  write_file other (String.sub s 0 (n - 3) ^ "999");
  let _, cap, _ = run ~env:w.env [ "cap"; "fs"; "put"; "--server"; w.fs.cap; other ] in
  let code, _, err = run ~env:w.env [ "cap"; "exec"; "-n"; w.ps.cap; String.trim cap ] in
  Alcotest.(check int) "other runtime: exit 2" 2 code;
  Alcotest.(check bool) ("names the runtime: " ^ err) true (contains err "another OCaml runtime");
  (* A program capability that names nothing. *)
  let _, cap2, _ = run ~env:w.env [ "cap"; "fs"; "put"; "--server"; w.fs.cap; not_bc ] in
  let code, _, _ = run ~env:w.env [ "cap"; "destroy"; String.trim cap2 ] in
  Alcotest.(check int) "destroy" 0 code;
  let code, _, err = run ~env:w.env [ "cap"; "exec"; "-n"; w.ps.cap; String.trim cap2 ] in
  Alcotest.(check int) ("destroyed program: exit 2; " ^ err) 2 code;
  (* The file server's capability is not a process server's. *)
  let code, _, _ = run ~env:w.env [ "cap"; "exec"; "-n"; w.fs.cap; w.prog ] in
  Alcotest.(check int) "not a process server: exit 2" 2 code;
  (* A process server capability without the create right. *)
  let _, ro, _ = run ~env:w.env [ "cap"; "restrict"; w.ps.cap; "--rights"; "read" ] in
  let code, _, err = run ~env:w.env [ "cap"; "exec"; "-n"; String.trim ro; w.prog; "echo"; "0" ] in
  Alcotest.(check int) ("no create right: exit 2; " ^ err) 2 code;
  Alcotest.(check bool) "denied" true (contains err "STD_DENIED");
  let code, _, _ =
    run ~env:w.env [ "cap"; "exec"; "-n"; "--cap"; "BAD NAME=x"; w.ps.cap; w.prog ]
  in
  Alcotest.(check int) "bad --cap: exit 2" 2 code;
  (* The server goes on. *)
  let code, _, _ = exec w [ "-n"; "echo"; "5" ] in
  Alcotest.(check int) "still serving" 5 code

let test_kill_and_interrupt () =
  with_world @@ fun w ->
  let out = w.dir / "k.out" and err = w.dir / "k.err" in
  let pid =
    spawn ~env:w.env ~out ~err [ "cap"; "exec"; "-n"; "--show-cap"; w.ps.cap; w.prog; "sleep" ]
  in
  let cap = ref "" in
  eventually "the process's capability" (fun () ->
      let e = read_file err in
      match String.index_opt e '\n' with
      | Some i when contains e "process cap1:" ->
          cap := String.trim (List.nth (String.split_on_char ' ' (String.sub e 0 i)) 2);
          true
      | _ -> false);
  let code, _, kerr = run ~env:w.env [ "cap"; "kill"; "--signal"; "KILL"; !cap ] in
  Alcotest.(check int) ("kill: " ^ kerr) 0 code;
  Alcotest.(check int) "the exec ends with 137" 137 (wait_code pid);
  Alcotest.(check bool) "told it was killed" true (contains (read_file err) "killed");
  let code, _, _ = run ~env:w.env [ "cap"; "kill"; !cap ] in
  Alcotest.(check int) "kill of an ended process: refused" 2 code;
  (* Ctrl-C at the caller: an interrupt over the circuit, SIGINT for the program. *)
  let r, wr = Unix.pipe ~cloexec:true () in
  let pid = spawn ~env:w.env ~stdin_fd:r ~out ~err [ "cap"; "exec"; w.ps.cap; w.prog; "intr" ] in
  Unix.close r;
  eventually "the program waits" (fun () -> contains (read_file out) "waiting");
  Unix.kill pid Sys.sigint;
  let code = wait_code pid in
  Unix.close wr;
  Alcotest.(check int) ("interrupted program's exit code; " ^ read_file err) 42 code;
  Alcotest.(check bool) "it saw SIGINT" true (contains (read_file out) "interrupted");
  (* With no input (-n), Ctrl-C is a SIGINT asked of the server. *)
  let pid = spawn ~env:w.env ~out ~err [ "cap"; "exec"; "-n"; w.ps.cap; w.prog; "sleepint" ] in
  eventually "the program sleeps" (fun () -> contains (read_file out) "waiting");
  Unix.kill pid Sys.sigint;
  Alcotest.(check int) ("-n: interrupted program's exit code; " ^ read_file err) 42 (wait_code pid);
  Alcotest.(check bool) "-n: it saw SIGINT" true (contains (read_file out) "interrupted")

(* A caller that dies: the program's standard input circuit hangs up (its
   host fell silent), the program gets SIGHUP and the server says so. And
   a server that allows 2 processes refuses a third, and takes new ones once
   those ended are old enough to go. *)
let test_dead_caller_and_bound () =
  with_world ~ps_args:[ "--max-processes"; "2"; "--log-level"; "info" ] @@ fun w ->
  let out = w.dir / "d.out" and err = w.dir / "d.err" in
  let r, wr = Unix.pipe ~cloexec:true () in
  let pid = spawn ~env:w.env ~stdin_fd:r ~out ~err [ "cap"; "exec"; w.ps.cap; w.prog; "intr" ] in
  Unix.close r;
  eventually "the program waits" (fun () -> contains (read_file out) "waiting");
  let pid2 =
    spawn ~env:w.env ~out:(w.dir / "s.out") ~err:(w.dir / "s.err")
      [ "cap"; "exec"; "-n"; w.ps.cap; w.prog; "sleep" ]
  in
  eventually "two running" (fun () ->
      let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
      List.length (List.filter (fun l -> contains l "running pid") (String.split_on_char '\n' o))
      = 2);
  let code, _, e = exec w [ "-n"; "echo"; "0" ] in
  Alcotest.(check int) ("a third is refused: " ^ e) 2 code;
  Alcotest.(check bool) "with the reason" true (contains e "2 processes already");
  Unix.kill pid Sys.sigkill;
  ignore (wait_code pid);
  Unix.close wr;
  (* The other caller dies too: its program reads nothing, writes nothing,
     but its circuits' host is gone. *)
  Unix.kill pid2 Sys.sigkill;
  ignore (wait_code pid2);
  let last = ref "" in
  try
    eventually "both programs were hung up on" (fun () ->
        let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
        last := o;
        List.length
          (List.filter (fun l -> contains l "killed by SIGHUP") (String.split_on_char '\n' o))
        = 2)
  with e ->
    prerr_endline ("cap ps: " ^ !last);
    prerr_endline ("server: " ^ read_file (w.dir / "ps.log"));
    raise e

(* The fields of /proc/PID/stat after the command's name (state, ppid, ...). *)
let stat_fields pid =
  match open_in (Printf.sprintf "/proc/%d/stat" pid) with
  | exception Sys_error _ -> None
  | ic -> (
      let l = try input_line ic with End_of_file | Sys_error _ -> "" in
      close_in_noerr ic;
      match String.rindex_opt l ')' with
      | None -> None
      | Some i -> Some (String.split_on_char ' ' (String.sub l (i + 2) (String.length l - i - 2))))

let children_of ppid =
  Array.to_list (Sys.readdir "/proc")
  |> List.filter_map int_of_string_opt
  |> List.filter (fun pid ->
         match stat_fields pid with
         | Some (_ :: p :: _) -> int_of_string_opt p = Some ppid
         | _ -> false)

(* Those of [pids] still running (a zombie has ended). *)
let alive pids =
  List.filter
    (fun pid -> match stat_fields pid with Some (st :: _) -> st <> "Z" | _ -> false)
    pids

(* A process server that dies (SIGKILL) while a program runs: the caller
   says the outcome is unknown (exit 3), and neither the program nor the
   spare made for the next nor the zygote outlives its server. *)
let test_dead_server () =
  with_world @@ fun w ->
  let out = w.dir / "x.out" and err = w.dir / "x.err" in
  let pid = spawn ~env:w.env ~out ~err [ "cap"; "exec"; "-n"; w.ps.cap; w.prog; "sleep" ] in
  let child = ref 0 in
  eventually "the program runs" (fun () ->
      let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
      match List.find_opt (fun l -> contains l "running pid") (String.split_on_char '\n' o) with
      | Some l -> (
          match String.split_on_char ' ' l with
          | _ :: "running" :: "pid" :: p :: _ ->
              child := int_of_string p;
              true
          | _ -> false)
      | None -> false);
  (* Its children: the program (cap ps shows its namespace's init, if it has one), the spare
     made for the next, and the zygote that makes the spares. *)
  let kids = children_of w.ps.pid in
  (* A spare left behind (a failure) is killed; it runs the server's command line. *)
  let serving k =
    match open_in_bin (Printf.sprintf "/proc/%d/cmdline" k) with
    | exception Sys_error _ -> false
    | ic ->
        let l = try input_line ic with End_of_file | Sys_error _ -> "" in
        close_in_noerr ic;
        contains l "serve"
  in
  Fun.protect ~finally:(fun () ->
      List.iter
        (fun k -> try Unix.kill k Sys.sigkill with Unix.Unix_error _ -> ())
        (List.filter serving (alive kids)))
  @@ fun () ->
  Alcotest.(check bool)
    (Printf.sprintf "the program and a spare are the server's children (%d)" (List.length kids))
    true (List.mem !child kids);
  Alcotest.(check bool)
    "a spare waits for the next program, and the zygote" true
    (List.length kids >= 3);
  Unix.kill w.ps.pid Sys.sigkill;
  Alcotest.(check int) ("exit 3; " ^ read_file err) 3 (wait_code pid);
  Alcotest.(check bool) "outcome unknown, said so" true (contains (read_file err) "outcome unknown");
  eventually "the program is gone with its server" (fun () ->
      try
        (* A zombie whose parent died is reaped by init; gone or a zombie is gone. *)
        Unix.kill !child 0;
        contains (try read_file (Printf.sprintf "/proc/%d/stat" !child) with _ -> ") Z") ") Z"
      with Unix.Unix_error _ -> true);
  eventually "the spare and the zygote are gone with their server" (fun () -> alive kids = [])

(* Hostile programs. Each attacks one promise of the confinement. *)

(* A file of /proc (its length is not known beforehand). *)
let read_proc f =
  match open_in_bin f with
  | exception Sys_error _ -> ""
  | ic ->
      let b = Buffer.create 4096 in
      (try
         while true do
           Buffer.add_channel b ic 1
         done
       with End_of_file | Sys_error _ -> ());
      close_in_noerr ic;
      Buffer.contents b

(* Host processes of programs (ocamlrun /proc/self/fd/4 ...) whose command
   line holds [marker]. *)
let with_marker marker =
  Array.to_list (Sys.readdir "/proc")
  |> List.filter (fun d ->
         int_of_string_opt d <> None
         &&
         let s = read_proc (Printf.sprintf "/proc/%s/cmdline" d) in
         contains s marker && contains s "/proc/self/fd/4")

let marker () = Printf.sprintf "marker-%d-%d" (Unix.getpid ()) (Random.int 1_000_000_000)

(* What confines programs here: a PID namespace needs root (and a kernel
   that allows it); tests of what only it (or a cgroup) holds say why they
   are skipped elsewhere. *)
let namespaces =
  lazy
    (Unix.geteuid () = 0 && Sys.command "unshare --pid --fork --mount-proc true >/dev/null 2>&1" = 0)

let skip why = Printf.printf "SKIPPED (%s)\n%!" why

(* Defect 1: not root, a private directory, no descriptor and no capability
   but its own. *)
let test_user_and_environment () =
  with_world @@ fun w ->
  let code, out, err = exec w [ "-n"; "--cap"; "secret=" ^ w.fs.cap; "whoami" ] in
  Alcotest.(check int) ("whoami: exit 0; " ^ err) 0 code;
  (match program_uid with
  | Some uid ->
      Alcotest.(check bool)
        ("runs as the program user, not root: " ^ out)
        true
        (contains out (Printf.sprintf "uid %d euid %d " uid uid))
  | None -> skip "not root: programs run as the server's user");
  Alcotest.(check bool)
    ("a private directory under DATA/run: " ^ out)
    true
    (contains out ("cwd " ^ (w.dir / "ps" / "run") ^ "/"));
  Alcotest.(check bool) ("no other descriptor: " ^ out) true (contains out "extra descriptors 0\n");
  Alcotest.(check bool)
    ("no capability in the environment: " ^ out)
    true
    (contains out "environment capabilities 0\n");
  if Lazy.force namespaces then
    Alcotest.(check bool) ("in a PID namespace (pid 2): " ^ out) true (contains out " pid 2\n")
  else skip "no PID namespace on this host"

(* Where a program tries to write in /etc: a name of this run, removed
   whatever happens (a mutant that runs programs as root writes it). *)
let etc_file = Printf.sprintf "/etc/consort-trespass-%d" (Unix.getpid ())

let no_etc_file f =
  Fun.protect ~finally:(fun () -> try Sys.remove etc_file with Sys_error _ -> ()) f

let test_trespass () =
  no_etc_file @@ fun () ->
  with_world @@ fun w ->
  if Unix.geteuid () <> 0 then skip "not root: programs run as the server's user"
  else begin
    let code, out, err = exec w [ "-n"; "trespass"; w.dir / "ps"; etc_file ] in
    Alcotest.(check int) ("trespass: exit 0; " ^ err) 0 code;
    List.iter
      (fun l -> Alcotest.(check bool) ("refused: " ^ out) true (contains out (l ^ ": denied\n")))
      [
        "read /etc/shadow";
        "read " ^ (w.dir / "ps" / "server.secret");
        "read " ^ (w.dir / "ps" / "port.key");
        "write " ^ etc_file;
        "write " ^ (w.dir / "ps" / "trespass");
        "write " ^ (w.dir / "ps" / "run" / "trespass");
      ];
    Alcotest.(check bool)
      "its own directory is writable" true
      (contains out "write own directory: ok\n");
    Alcotest.(check bool) "nothing was written in /etc" false (Sys.file_exists etc_file);
    eventually "its directory is removed, with what it wrote" (fun () ->
        Sys.readdir (w.dir / "ps" / "run") = [||])
  end

(* Another program's environment and descriptors hold no capability; a
   program whose caller dies does not run on. *)
let test_environ_and_dead_caller () =
  with_world @@ fun w ->
  let m = marker () in
  let out = w.dir / "a.out" and err = w.dir / "a.err" in
  let pid =
    spawn ~env:w.env ~out ~err
      [ "cap"; "exec"; "-n"; "--cap"; "secret=" ^ w.fs.cap; w.ps.cap; w.prog; "stubborn"; m ]
  in
  eventually "the first program runs" (fun () -> contains (read_file out) "waiting");
  (match with_marker m with
  | [] -> Alcotest.fail "the program is not seen on the host"
  | ps ->
      List.iter
        (fun p ->
          let env = read_proc (Printf.sprintf "/proc/%s/environ" p) in
          Alcotest.(check bool)
            ("its environment holds no capability: " ^ env)
            false (contains env "cap1:");
          Alcotest.(check bool) "its environment was read" true (contains env "CONSORT_CAPS="))
        ps);
  (* cap ps counts the processes of its tree (its cgroup's). *)
  if Unix.geteuid () = 0 then begin
    let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
    Alcotest.(check bool) ("ps counts the tree: " ^ o) true (contains o " processes) ")
  end
  else skip "not root: no cgroup counts the tree";
  let code, o, e = exec w [ "-n"; "environs" ] in
  Alcotest.(check int) ("environs: exit 0; " ^ e) 0 code;
  Alcotest.(check bool)
    ("another program finds no capability: " ^ o)
    true
    (contains o "capabilities found 0\n");
  (* The caller dies: the program ignores SIGHUP, and is killed. *)
  Unix.kill pid Sys.sigkill;
  ignore (wait_code pid);
  eventually "the program is stopped when its caller is gone" (fun () ->
      let _, o, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
      contains o "its caller hung up");
  eventually "no process of it is left" (fun () -> with_marker m = [])

(* Defect 3: a fork bomb is bounded by --max-tree; the server goes on. *)
let test_fork_bomb () =
  if Unix.geteuid () <> 0 then
    skip "not root: no pids cgroup; RLIMIT_NPROC counts all of this user's processes"
  else
    with_world ~ps_args:[ "--max-tree"; "16" ] @@ fun w ->
    let code, out, err = exec w [ "-n"; "--time"; "20"; "forkbomb" ] in
    Alcotest.(check int) ("fork bomb: exit 0; " ^ err) 0 code;
    (match String.split_on_char ' ' (String.trim out) with
    | [ "forked"; n; "refused"; "true" ] ->
        Alcotest.(check bool) ("fewer than 16 forks: " ^ out) true (int_of_string n < 16)
    | _ -> Alcotest.failf "fork bomb: %S" out);
    let _, ps, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
    Alcotest.(check bool)
      ("the limit is named: " ^ ps) true
      (contains ps "process limit 16 reached");
    let code, _, _ = exec w [ "-n"; "echo"; "5" ] in
    Alcotest.(check int) "still serving" 5 code

(* Defect 3: CPU time is the whole tree's. *)
let test_tree_cpu () =
  with_world @@ fun w ->
  let code, _, err = exec w [ "-n"; "--cpu"; "1"; "spinkids" ] in
  Alcotest.(check int) ("children spinning: exit 137; " ^ err) 137 code;
  Alcotest.(check bool)
    ("the cpu limit is named: " ^ err)
    true
    (contains err "cpu time limit (1000 ms) exceeded")

(* Without namespace or cgroup (the weaker guarantee): the CPU time of the
   process group still counts the children's. *)
let test_fallback () =
  no_etc_file @@ fun () ->
  with_world ~ps_args:[ "--no-namespaces"; "--no-cgroups" ] @@ fun w ->
  let code, out, _ = exec w [ "-n"; "whoami" ] in
  Alcotest.(check int) "whoami: exit 0" 0 code;
  Alcotest.(check bool) ("no PID namespace: " ^ out) false (contains out " pid 2\n");
  let code, _, err = exec w [ "-n"; "--cpu"; "1"; "spinkids" ] in
  Alcotest.(check int) ("children spinning: exit 137; " ^ err) 137 code;
  Alcotest.(check bool)
    ("the cpu limit is named: " ^ err)
    true
    (contains err "cpu time limit (1000 ms) exceeded");
  (* What it wrote is removed by its own user (nothing holds its tree). *)
  let code, out, _ = exec w [ "-n"; "trespass"; w.dir / "ps"; etc_file ] in
  Alcotest.(check int) "trespass: exit 0" 0 code;
  Alcotest.(check bool) "it wrote its directory" true (contains out "write own directory: ok\n");
  eventually "its directory is removed, with what it wrote" (fun () ->
      Sys.readdir (w.dir / "ps" / "run") = [||])

(* Defect 3: a grandchild in a session of its own does not outlive the
   program. *)
let test_setsid_escape () =
  with_world @@ fun w ->
  let m = marker () in
  let code, out, err = exec w [ "-n"; "escape"; m ] in
  Alcotest.(check int) ("escape: exit 0; " ^ err) 0 code;
  Alcotest.(check string) "it ran" "escaped\n" out;
  if Lazy.force namespaces || Unix.geteuid () = 0 then
    eventually ~n:100 "nothing of the program is left" (fun () -> with_marker m = [])
  else skip "not root: no PID namespace or cgroup holds the tree"

let field out key =
  List.find_map
    (fun l ->
      match String.index_opt l ' ' with
      | Some i when String.sub l 0 i = key -> Some (String.sub l (i + 1) (String.length l - i - 1))
      | _ -> None)
    (String.split_on_char '\n' out)

(* A setsid grandchild without a PID namespace: the program's cgroup alone holds the tree, and
   killing it is what ends the grandchild. *)
let test_setsid_cgroup_alone () =
  if Unix.geteuid () <> 0 then skip "not root: no cgroup holds the tree"
  else
    with_world ~ps_args:[ "--no-namespaces" ] @@ fun w ->
    let m = marker () in
    Fun.protect ~finally:(fun () ->
        List.iter
          (fun d -> try Unix.kill (int_of_string d) Sys.sigkill with _ -> ())
          (with_marker m))
    @@ fun () ->
    let code, out, err = exec w [ "-n"; "escape"; m ] in
    Alcotest.(check int) ("escape: exit 0; " ^ err) 0 code;
    Alcotest.(check string) "it ran" "escaped\n" out;
    (* The programs that follow at once never share a cgroup with what may still be left of it
       (its cgroup is given to a next program only once it is empty). *)
    for _ = 1 to 3 do
      let code, out, err = exec w [ "-n"; "limits" ] in
      Alcotest.(check int) ("limits: exit 0; " ^ err) 0 code;
      Alcotest.(check (option string))
        ("alone in its cgroup: " ^ out) (Some "0") (field out "strangers")
    done;
    eventually ~n:100 "nothing of the program is left" (fun () -> with_marker m = [])

(* Spares: each start hands its program to a confined child made beforehand (its cgroups
   joined, its PID namespace made). What a request asks is applied when it is handed over, not
   when the spare was made; each program has cgroups and a namespace of its own. Three programs in
   a row, each with other limits. *)

let test_spares () =
  with_world @@ fun w ->
  let run args =
    let code, out, err = exec w (("-n" :: args) @ [ "limits" ]) in
    Alcotest.(check int) ("limits: exit 0; " ^ err) 0 code;
    out
  in
  let a = run [ "--memory"; "64"; "--cpu"; "2" ] in
  let b = run [ "--memory"; "128"; "--cpu"; "3" ] in
  let c = run [] in
  let check what out key v =
    Alcotest.(check (option string)) (what ^ " " ^ key ^ ": " ^ out) (Some v) (field out key)
  in
  check "first" a "as" "67108864 67108864";
  check "first" a "cpu" "2 3";
  check "second" b "as" "134217728 134217728";
  check "second" b "cpu" "3 4";
  check "default" c "as" "1073741824 1073741824";
  check "default" c "cpu" "60 61";
  List.iter (fun o -> check "each" o "files" "256 256") [ a; b; c ];
  if Unix.geteuid () = 0 then begin
    let cg o = Option.value ~default:"" (field o "cgroup") in
    List.iter
      (fun o ->
        Alcotest.(check bool) ("in the server's cgroups: " ^ o) true (contains o "consort-proc-"))
      [ a; b; c ];
    (* b's spare (its cgroups) was made while a ran; c's, while b ran, in a's emptied ones. *)
    Alcotest.(check bool)
      (Printf.sprintf "cgroups of its own: %s / %s / %s" (cg a) (cg b) (cg c))
      true
      (cg a <> cg b && cg b <> cg c);
    Alcotest.(check string) "the first program's emptied cgroups given to the third" (cg a) (cg c);
    List.iter (fun o -> check "alone in its cgroup" o "strangers" "0") [ a; b; c ]
  end
  else skip "not root: no cgroups";
  if Lazy.force namespaces then
    List.iter (fun o -> check "a namespace of its own" o "pid" "2") [ a; b; c ]
  else skip "no PID namespace here"

(* Emptied cgroups are given to later programs instead of a rmdir and mkdir per start, keeping
   each promise: the limits and counters are the new program's (a program that spent 700 ms of
   CPU under --cpu 1 is followed in its cgroup by another that spends 700 ms and is not stopped;
   a fork bomb's refused forks are not told of the next program), and a cgroup that holds a
   process is never given to another program (one put into an emptied cgroup by hand is killed
   with it, and the next program is in another cgroup, alone). *)
let test_cgroup_reuse () =
  if Unix.geteuid () <> 0 then skip "not root: no cgroups"
  else
    with_world ~ps_args:[ "--max-tree"; "16" ] @@ fun w ->
    let go args =
      let code, out, err = exec w ("-n" :: args) in
      Alcotest.(check int) (String.concat " " args ^ ": exit 0; " ^ err) 0 code;
      out
    in
    let v2 o =
      Option.bind (field o "cgroup") (fun c ->
          List.find_opt
            (fun x -> String.length x > 3 && String.sub x 0 3 = "0::")
            (String.split_on_char ' ' c))
      |> function
      | Some x -> String.sub x 3 (String.length x - 3)
      | None -> Alcotest.failf "no v2 cgroup: %s" o
    in
    let alone o =
      Alcotest.(check (option string)) ("alone: " ^ o) (Some "0") (field o "strangers")
    in
    let a = go [ "--cpu"; "1"; "burn"; "700" ] in
    ignore (go [ "forkbomb" ]);
    let c = go [ "--cpu"; "1"; "burn"; "700" ] in
    Alcotest.(check string) "the first program's cgroup given to the third" (v2 a) (v2 c);
    let d = go [ "limits" ] in
    List.iter alone [ a; c; d ];
    let _, ps, _ = run ~env:w.env [ "cap"; "ps"; w.ps.cap ] in
    Alcotest.(check int)
      ("the refused forks told of the fork bomb alone: " ^ ps)
      1
      (List.length
         (List.filter
            (fun l -> contains l "process limit 16 reached")
            (String.split_on_char '\n' ps)));
    (* d's cgroup, emptied and kept for the next spare: a process is put into it by hand. *)
    let mp =
      match
        List.find_map
          (fun l ->
            match String.split_on_char ' ' l with
            | _ :: _ :: _ :: "/" :: mp :: rest when List.mem "cgroup2" rest -> Some mp
            | _ -> None)
          (let ic = open_in "/proc/self/mountinfo" in
           let rec all acc =
             match input_line ic with l -> all (l :: acc) | exception End_of_file -> acc
           in
           Fun.protect ~finally:(fun () -> close_in ic) (fun () -> all []))
      with
      | Some mp -> mp
      | None -> Alcotest.fail "no cgroup2 mount"
    in
    let null = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
    let sleeper = Unix.create_process "sleep" [| "sleep"; "3600" |] null null null in
    Unix.close null;
    let status = ref None in
    Fun.protect ~finally:(fun () ->
        if !status = None then
          try
            Unix.kill sleeper Sys.sigkill;
            ignore (Unix.waitpid [] sleeper)
          with Unix.Unix_error _ -> ())
    @@ fun () ->
    write_file (mp ^ v2 d ^ "/cgroup.procs") (string_of_int sleeper);
    let f = go [ "limits" ] in
    let g = go [ "limits" ] in
    List.iter alone [ f; g ];
    Alcotest.(check bool)
      (Printf.sprintf "a cgroup holding a process is given to no program: %s, %s / %s" (v2 d) (v2 f)
         (v2 g))
      true
      (v2 f <> v2 d && v2 g <> v2 d);
    (* Killed when its cgroup was found held (bounded: 10 s). *)
    eventually ~n:200 "the process found in the program's cgroup is killed" (fun () ->
        match Unix.waitpid [ Unix.WNOHANG ] sleeper with
        | 0, _ -> false
        | _, st ->
            status := Some st;
            true);
    match !status with
    | Some (Unix.WSIGNALED s) when s = Sys.sigkill -> ()
    | _ -> Alcotest.fail "the process found in the program's cgroup did not die of SIGKILL"

(* Defect 4 and 10 GB: the memory limit always named. *)
let test_memory () =
  with_world @@ fun w ->
  let code, _, err = exec w [ "-n"; "huge" ] in
  Alcotest.(check int) ("10 GB: exit 137; " ^ err) 137 code;
  Alcotest.(check bool) ("named: " ^ err) true (contains err "memory limit (1048576 KiB) exceeded");
  (* The runtime's message is still in the pipe as the program ends in
     about a third of the runs here: fifteen runs, so that an end told
     before the pipe is drained is seen (with it, 1 in 200 would pass). *)
  for i = 1 to 15 do
    let code, _, err = exec w [ "-n"; "--memory"; "64"; "noisyhog" ] in
    let last = List.hd (List.rev (String.split_on_char '\n' (String.trim err))) in
    Alcotest.(check int) (Printf.sprintf "noisy %d: exit 137; %s" i last) 137 code;
    Alcotest.(check bool)
      ("named: " ^ last) true
      (contains last "memory limit (65536 KiB) exceeded")
  done

(* The descriptor: round trip, bounds, and every truncation and corruption
   refused with a message, never an exception. *)
let test_descriptor () =
  let g = Crypto.deterministic "pd" in
  let port = Port.Key.port (Port.Key.generate ~g ()) in
  let c n = Cap.owner port ~obj:n (Cap.Secret.generate ~g ()) in
  let pd =
    {
      Pd.arch = Pd.arch_bytecode;
      program = c 1;
      args = [ "a"; ""; String.make 300 'x' ];
      caps = [ ("stdin", c 2); ("root", c 3) ];
      limits = { Pd.cpu_ms = 1000; memory_kib = 65536; run_ms = 5000 };
      hints = [ "127.0.0.1:7000" ];
    }
  in
  let s = Result.get_ok (Pd.encode pd) in
  (match Pd.decode s with
  | Ok p ->
      Alcotest.(check bool)
        "round trip" true
        (p.Pd.args = pd.args && p.limits = pd.limits
        && List.map fst p.caps = [ "stdin"; "root" ]
        && Cap.equal p.program pd.program && p.hints = pd.hints)
  | Error e -> Alcotest.fail e);
  for n = 0 to String.length s - 1 do
    match Pd.decode (String.sub s 0 n) with
    | Ok _ -> Alcotest.failf "truncated at %d accepted" n
    | Error _ -> ()
  done;
  Alcotest.(check bool) "trailing bytes" true (Result.is_error (Pd.decode (s ^ "x")));
  let rs = Random.State.make [| 7 |] in
  for _ = 1 to 2000 do
    let b = Bytes.of_string s in
    for _ = 1 to 1 + Random.State.int rs 4 do
      Bytes.set b (Random.State.int rs (Bytes.length b)) (Char.chr (Random.State.int rs 256))
    done;
    match Pd.decode (Bytes.to_string b) with Ok _ | Error _ -> ()
  done;
  Alcotest.(check bool)
    "too many args" true
    (Result.is_error (Pd.encode { pd with args = List.init 257 string_of_int }));
  Alcotest.(check bool)
    "bad name" true
    (Result.is_error (Pd.encode { pd with caps = [ ("Root", c 3) ] }));
  Alcotest.(check bool)
    "name twice" true
    (Result.is_error (Pd.encode { pd with caps = [ ("root", c 3); ("root", c 4) ] }));
  Alcotest.(check bool)
    "larger than the bound" true
    (Result.is_error (Pd.decode (String.make (Pd.max_size + 1) 'C')));
  Alcotest.(check bool)
    "another version" true
    (match Pd.decode ("CPD\002" ^ String.sub s 4 (String.length s - 4)) with
    | Error m -> contains m "version 2"
    | Ok _ -> false)

(* The zygote gives back its copy of the server's OCaml heaps (each spare it clones would copy
   and take down their page table entries): with 32 MB in this process's heap, the zygote holds
   at least 24 MB less anonymous memory than this process (what is left is memory outside the
   OCaml heap), and still makes spares that run programs. *)
let test_zygote_heaps () =
  let module Spawn = Consort_capproc.Spawn in
  let big = Bytes.make (32 * 1024 * 1024) 'x' in
  let anon pid =
    let f = read_proc (Printf.sprintf "/proc/%d/status" pid) in
    match
      List.find_opt
        (fun l -> String.length l > 8 && String.sub l 0 8 = "RssAnon:")
        (String.split_on_char '\n' f)
    with
    | Some l -> Scanf.sscanf (String.sub l 8 (String.length l - 8)) " %d" (fun k -> k)
    | None -> Alcotest.failf "no RssAnon in /proc/%d/status" pid
  in
  let z = Spawn.zygote () in
  Fun.protect ~finally:(fun () -> Spawn.stop_zygote z) @@ fun () ->
  (* A spare made: the zygote is past its start. *)
  let s = Spawn.prepare ~zygote:z ~cgroups:[] ~pid_namespace:false () in
  let mine = anon (Unix.getpid ()) and its = anon (Spawn.zygote_pid z) in
  Alcotest.(check bool)
    (Printf.sprintf "this process holds the 32 MB (%d kB)" mine)
    true (mine >= 32768);
  Alcotest.(check bool)
    (Printf.sprintf "the zygote %d kB, without the 32 MB of this process's %d kB" its mine)
    true
    (its + (24 * 1024) < mine);
  let null = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
  let c =
    {
      Spawn.uid = -1;
      gid = -1;
      cwd = "";
      cgroups = [];
      nproc = 0;
      nofile = 0;
      pid_namespace = false;
    }
  in
  let started =
    Spawn.start_spare s c "/bin/sh" [| "/bin/sh"; "-c"; "exit 7" |] [||] (null, null, null)
  in
  Unix.close null;
  Alcotest.(check bool) "the spare was made by the zygote" false (Spawn.zygote_gone z);
  (match Unix.waitpid [] started.Spawn.pid with
  | _, Unix.WEXITED n -> Alcotest.(check int) "the program ran to its end" 7 n
  | _ -> Alcotest.fail "the program did not exit");
  ignore (Sys.opaque_identity big)

let () =
  Alcotest.run "capproc"
    [
      ("descriptor", [ Alcotest.test_case "codec" `Quick test_descriptor ]);
      ( "processes",
        [
          Alcotest.test_case "remote run, environment, exit code" `Quick test_remote_run;
          Alcotest.test_case "consort-exec" `Quick test_consort_exec;
          Alcotest.test_case "consort-exec through the agent" `Quick test_agent;
          Alcotest.test_case "a capability used" `Quick test_capability_use;
          Alcotest.test_case "limits" `Quick test_limits;
          Alcotest.test_case "refusals" `Quick test_refusals;
          Alcotest.test_case "kill and interrupt" `Quick test_kill_and_interrupt;
          Alcotest.test_case "dead caller, bounded processes" `Quick test_dead_caller_and_bound;
          Alcotest.test_case "dead server" `Quick test_dead_server;
          Alcotest.test_case "the agent's circuits: kept, each start its own" `Quick
            test_agent_circuits;
          Alcotest.test_case "several programs at once through the agent" `Quick
            test_agent_concurrent;
          Alcotest.test_case "the agent under systemd: units, an inherited socket" `Quick
            test_agent_systemd;
        ] );
      ( "hostile",
        [
          Alcotest.test_case "user, directory, descriptors, environment" `Quick
            test_user_and_environment;
          Alcotest.test_case "shadow, secrets, writing outside" `Quick test_trespass;
          Alcotest.test_case "another's environment, a dead caller" `Quick
            test_environ_and_dead_caller;
          Alcotest.test_case "fork bomb" `Quick test_fork_bomb;
          Alcotest.test_case "cpu of forked children" `Quick test_tree_cpu;
          Alcotest.test_case "setsid grandchild" `Quick test_setsid_escape;
          Alcotest.test_case "without namespace or cgroup" `Quick test_fallback;
          Alcotest.test_case "10 GB, out of memory told" `Quick test_memory;
          Alcotest.test_case "setsid grandchild, the cgroup alone" `Quick test_setsid_cgroup_alone;
          Alcotest.test_case "spares: limits as asked, a cgroup each" `Quick test_spares;
          Alcotest.test_case "the zygote holds no OCaml heap" `Quick test_zygote_heaps;
          Alcotest.test_case "emptied cgroups reused, limits fresh" `Quick test_cgroup_reuse;
        ] );
    ]
