(* Commands that write files, on a disk that fills while they run: a tmpfs
   of 1 MiB mounted on a directory the test creates (always unmounted
   after), filled up to a few KiB. Each must stop with one line on standard
   error and exit 2 (after a clean leave from its group, where it has one),
   never flood standard error, never hang, never end in an uncaught
   exception (125). *)

let ( / ) = Filename.concat
let build = Filename.dirname Sys.executable_name / ".." / ".."
let consort = build / "bin" / "main.exe"
let consortd = build / "bin" / "consortd" / "consortd.exe"
let logmember = build / ".." / ".." / "clients" / "python" / "examples" / "logmember.py"

let logmember () =
  if Sys.file_exists logmember then logmember else "clients/python/examples/logmember.py"

(* Every process started here, killed (by its id) if still running at the end. *)
let started = ref []
let kill_started_ref = ref (fun () -> ())

let () =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  at_exit (fun () -> !kill_started_ref ())

let spawn ?(env = []) ?(stdin = Unix.stdin) ~out ~err argv =
  let o = Unix.openfile out [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let e = Unix.openfile err [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let env = Array.append (Array.of_list env) (Unix.environment ()) in
  let pid = Unix.create_process_env argv.(0) argv env stdin o e in
  Unix.close o;
  Unix.close e;
  started := pid :: !started;
  pid

let forget pid = started := List.filter (( <> ) pid) !started

(* Kills (by id) every process started here that is still running. *)
let kill_started () =
  List.iter
    (fun pid ->
      try
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid)
      with Unix.Unix_error _ -> ())
    !started;
  started := []

let () = kill_started_ref := kill_started

(* The exit status of [pid] within [secs] seconds; fails (after SIGKILL) if it is still running. *)
let wait_exit ?(secs = 30.) what pid =
  let t0 = Unix.gettimeofday () in
  let rec go () =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ ->
        if Unix.gettimeofday () -. t0 > secs then begin
          (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
          ignore (Unix.waitpid [] pid);
          forget pid;
          Alcotest.failf "%s still running after %.0f s" what secs
        end;
        Unix.sleepf 0.05;
        go ()
    | _, Unix.WEXITED c ->
        forget pid;
        c
    | _, (Unix.WSIGNALED s | Unix.WSTOPPED s) ->
        forget pid;
        Alcotest.failf "%s killed by signal %d" what s
  in
  go ()

let read_file f =
  try
    let ic = open_in_bin f in
    Fun.protect
      ~finally:(fun () -> close_in ic)
      (fun () -> really_input_string ic (in_channel_length ic))
  with Sys_error _ -> ""

let lines f = List.filter (( <> ) "") (String.split_on_char '\n' (read_file f))

let contains s sub =
  let n = String.length sub in
  let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
  go 0

let starts_with s p = String.length s >= String.length p && String.sub s 0 (String.length p) = p

let ends_with s p =
  let n = String.length s and k = String.length p in
  n >= k && String.sub s (n - k) k = p

(* Waits (at most [secs]) until [f ()]. *)
let wait_until ?(secs = 60.) what f =
  let t0 = Unix.gettimeofday () in
  while not (f ()) do
    if Unix.gettimeofday () -. t0 > secs then Alcotest.failf "timed out waiting for %s" what;
    Unix.sleepf 0.05
  done

let run cmd =
  match Unix.system cmd with Unix.WEXITED 0 -> () | _ -> Alcotest.failf "%s: failed" cmd

(* A directory with a tmpfs of 1 MiB on it, filled up to [free] bytes, for [f]. *)
let with_full_disk ?(free = 8192) f =
  let dir = Filename.temp_file "consort-disk-full" "" in
  Sys.remove dir;
  Unix.mkdir dir 0o755;
  run (Printf.sprintf "mount -t tmpfs -o size=1m consort-disk-full %s" (Filename.quote dir));
  Fun.protect
    ~finally:(fun () ->
      (* A test that failed may leave its processes running, files open there. *)
      kill_started ();
      ignore (Unix.system (Printf.sprintf "umount %s || umount -l %s" dir dir));
      try Unix.rmdir dir with Unix.Unix_error _ -> ())
    (fun () ->
      let filler = dir / "filler" in
      let fd = Unix.openfile filler [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_CLOEXEC ] 0o644 in
      let b = Bytes.make 4096 'f' in
      let rec fill n =
        match Unix.write fd b 0 4096 with
        | k -> fill (n + k)
        | exception Unix.Unix_error (Unix.ENOSPC, _, _) -> n
      in
      let n = fill 0 in
      Unix.ftruncate fd (max 0 (n - free));
      Unix.close fd;
      f dir)

(* The one line a command that stopped wrote on standard error (after
   [skip] lines it wrote when it started). *)
let one_line ?(skip = 0) what err ~says =
  let l = List.filteri (fun i _ -> i >= skip) (lines err) in
  let size = String.length (read_file err) in
  if List.length l <> 1 || size > 1000 then
    Alcotest.failf "%s: %d lines (%d bytes) on standard error, not 1:\n%s" what (List.length l) size
      (String.concat "\n" (List.filteri (fun i _ -> i < 10) l));
  let line = List.hd l in
  List.iter
    (fun s -> if not (contains line s) then Alcotest.failf "%s: %S does not say %S" what line s)
    says

let free_port () =
  let s = Unix.socket Unix.PF_INET Unix.SOCK_DGRAM 0 in
  Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
  let p = match Unix.getsockname s with Unix.ADDR_INET (_, p) -> p | _ -> assert false in
  Unix.close s;
  p

let params = "suspect.timeout=2s,suspect.verify=500ms,suspect.grace=500ms,gmp.flush_timeout=2s"

(* The views a member printed, as member lists. *)
let views out =
  List.filter_map
    (fun l ->
      if String.length l > 5 && String.sub l 0 5 = "view " then
        (* "view VID: M1 M2 (rank ...": the vid has colons, not ": ". *)
        let rec colon i =
          if i + 1 >= String.length l then None
          else if l.[i] = ':' && l.[i + 1] = ' ' then Some i
          else colon (i + 1)
        in
        match (colon 0, String.index_opt l '(') with
        | Some i, Some j when j > i ->
            Some
              (List.filter (( <> ) "")
                 (String.split_on_char ' ' (String.sub l (i + 1) (j - i - 1))))
        | _ -> None
      else None)
    (lines out)

(* Writes [n] lines of casts into [fd] (non-blocking) until all are written,
   the reader is gone, or [secs] have passed. *)
let feed ?(n = 20000) ?(secs = 20.) fd =
  Unix.set_nonblock fd;
  let t0 = Unix.gettimeofday () in
  let rec go i pending =
    if Unix.gettimeofday () -. t0 > secs then ()
    else if pending = "" && i >= n then ()
    else
      let pending =
        if pending = "" then Printf.sprintf "cast %d %s\n" i (String.make 300 'x') else pending
      in
      match Unix.write_substring fd pending 0 (String.length pending) with
      | k when k = String.length pending -> go (i + 1) ""
      | k -> go i (String.sub pending k (String.length pending - k))
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) ->
          Unix.sleepf 0.002;
          go i pending
      | exception Unix.Unix_error (Unix.EPIPE, _, _) -> ()
  in
  go 0 ""

(* A healthy member [a] (stdout to [dir]/a.out), stdin /dev/null; its address. *)
let healthy_member tmp ~group ~peers ~bind =
  let null = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  let pid =
    spawn ~stdin:null ~out:(tmp / "a.out") ~err:(tmp / "a.err")
      [|
        consort;
        "member";
        "--group";
        group;
        "--bind";
        bind;
        "--peers";
        String.concat "," peers;
        "--params";
        params;
      |]
  in
  Unix.close null;
  pid

let temp_dir () =
  let d = Filename.temp_file "consort-disk-full-out" "" in
  Sys.remove d;
  Unix.mkdir d 0o755;
  d

let cleanup d =
  if Sys.getenv_opt "DISK_FULL_KEEP" = None then ignore (Unix.system ("rm -rf " ^ Filename.quote d))

(* consort member with its log (or capture) on the full disk, in a group
   with a healthy member: it stops with one line and exit 2, and the other
   member sees it leave (not excluded as failed). *)
let member_full_disk ~flag ~says () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  with_full_disk (fun dir ->
      (* The healthy member coordinates (the lower address): a coordinator
         that leaves under load is excluded for silence instead (the group
         layer's own matter, not the disk's). *)
      let p1 = free_port () and p2 = free_port () in
      let pa = min p1 p2 and pb = max p1 p2 in
      let a = Printf.sprintf "127.0.0.1:%d" pa and b = Printf.sprintf "127.0.0.1:%d" pb in
      let group = Printf.sprintf "disk-full-%d" (Unix.getpid ()) in
      let apid = healthy_member tmp ~group ~peers:[ a; b ] ~bind:a in
      let r, w = Unix.pipe ~cloexec:true () in
      let file = dir / "member.out" in
      let bpid =
        spawn ~stdin:r ~out:(tmp / "b.out") ~err:(tmp / "b.err")
          [|
            consort;
            "member";
            "--group";
            group;
            "--bind";
            b;
            "--peers";
            a ^ "," ^ b;
            "--params";
            params;
            flag;
            file;
            "--quiet";
          |]
      in
      Unix.close r;
      wait_until "the two members in one view" (fun () ->
          List.exists (fun v -> List.length v = 2) (views (tmp / "a.out")));
      feed w;
      let code = wait_exit "the member on the full disk" bpid in
      Unix.close w;
      Alcotest.(check int) "exit status" 2 code;
      one_line "consort member" (tmp / "b.err") ~says:(file :: says);
      (* A log ends at the last line written whole, at most one line after it torn. *)
      if flag = "--log" then begin
        let l = String.split_on_char '\n' (read_file file) in
        let whole = List.filteri (fun i _ -> i < List.length l - 1) l in
        Alcotest.(check bool) "lines logged before the disk filled" true (List.length whole > 2);
        List.iter
          (fun line ->
            if not (starts_with line "{\"ev\":" && ends_with line "}") then
              Alcotest.failf "a torn line before the end of the log: %S" line)
          whole
      end;
      wait_until ~secs:10. "the healthy member to see it leave" (fun () ->
          List.exists
            (fun l -> starts_with l (b ^ "#") && ends_with l " left")
            (lines (tmp / "a.out")));
      Unix.kill apid Sys.sigterm;
      Alcotest.(check int)
        "the healthy member's exit status" 0
        (wait_exit "the healthy member" apid))

let member_log =
  member_full_disk ~flag:"--log" ~says:[ "cannot write the log"; "No space left"; "left the group" ]

let member_pcap =
  member_full_disk ~flag:"--pcap" ~says:[ "--pcap"; "No space left"; "left the group" ]

(* consortd --pcap on the full disk, holding a member (a Python client's) in
   a group with a healthy member that casts: one line, exit 2, its member
   leaves. *)
let consortd_pcap () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  with_full_disk (fun dir ->
      let p1 = free_port () and p2 = free_port () in
      let ports = 4 in
      let pa = min p1 p2 and base = max p1 p2 in
      let a = Printf.sprintf "127.0.0.1:%d" pa in
      let drange = List.init ports (fun i -> Printf.sprintf "127.0.0.1:%d" (base + i)) in
      let group = Printf.sprintf "disk-full-d-%d" (Unix.getpid ()) in
      let sock = tmp / "d.sock" and file = dir / "d.pcap" in
      let dpid =
        spawn ~out:(tmp / "d.out") ~err:(tmp / "d.err")
          [|
            consortd;
            "--socket";
            sock;
            "--bind";
            Printf.sprintf "127.0.0.1:%d" base;
            "--ports";
            string_of_int ports;
            "--peers";
            a;
            "--pcap";
            file;
          |]
      in
      wait_until "the daemon's socket" (fun () -> Sys.file_exists sock);
      let r, w = Unix.pipe ~cloexec:true () in
      let apid =
        spawn ~stdin:r ~out:(tmp / "a.out") ~err:(tmp / "a.err")
          [|
            consort; "member"; "--group"; group; "--bind"; a; "--peers"; String.concat "," drange;
          |]
      in
      Unix.close r;
      let pr, pw = Unix.pipe ~cloexec:true () in
      let ppid =
        spawn ~stdin:pr ~out:(tmp / "p.out") ~err:(tmp / "p.err")
          [| "/usr/bin/python3"; logmember (); sock; group; "vsync"; tmp / "p.log"; a |]
      in
      Unix.close pr;
      wait_until "the two members in one view" (fun () ->
          List.exists (fun v -> List.length v = 2) (views (tmp / "a.out")));
      feed ~secs:10. w;
      let code = wait_exit "consortd on the full disk" dpid in
      Alcotest.(check int) "exit status" 2 code;
      one_line "consortd" (tmp / "d.err") ~says:[ "--pcap"; file; "No space left"; "stopped" ];
      wait_until ~secs:10. "the healthy member to see the daemon's member leave" (fun () ->
          List.exists
            (fun l -> ends_with l " left" && List.exists (fun d -> starts_with l (d ^ "#")) drange)
            (lines (tmp / "a.out")));
      Unix.close w;
      Unix.close pw;
      ignore (wait_exit "the Python client" ppid);
      Unix.kill apid Sys.sigterm;
      Alcotest.(check int)
        "the healthy member's exit status" 0
        (wait_exit "the healthy member" apid))

(* A command run to its end (at most 30 s): its status, output and error. *)
let command ?env tmp args =
  let pid =
    spawn ?env ~out:(tmp / "c.out") ~err:(tmp / "c.err") (Array.of_list (consort :: args))
  in
  let code = wait_exit ("consort " ^ String.concat " " args) pid in
  (code, read_file (tmp / "c.out"), read_file (tmp / "c.err"))

let first_line_field what file key =
  wait_until ("the first lines of " ^ what) (fun () ->
      List.exists (fun l -> starts_with l (key ^ " ")) (lines file));
  let l = List.find (fun l -> starts_with l (key ^ " ")) (lines file) in
  String.sub l (String.length key + 1) (String.length l - String.length key - 1)

let copy_dir src dst = run (Printf.sprintf "cp -a %s %s" (Filename.quote src) (Filename.quote dst))

(* --new at a file server's first start (its data directory does not exist yet). *)
let fs_new data = if Sys.file_exists data then [] else [ "--new" ]

(* consort cap fs serve with its data on the disk that fills while puts
   come: every put is acknowledged or refused; the server refuses the one
   that met the full disk, then stops (one line, exit 2); restarted on a
   larger disk, it has every file it acknowledged, intact. *)
let fs_serve () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  let bind = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let env = [ "CONSORT_MULTICAST=off"; "CONSORT_LOCATE=" ^ bind ] in
  let serve data =
    spawn ~env ~out:(tmp / "s.out") ~err:(tmp / "s.err")
      (Array.of_list
         ([ consort; "cap"; "fs"; "serve" ] @ fs_new data @ [ "--data"; data; "--bind"; bind ]))
  in
  let acked =
    with_full_disk ~free:(96 * 1024) (fun dir ->
        let pid = serve (dir / "fs") in
        let server = first_line_field "the file server" (tmp / "s.out") "server" in
        let rec puts i acc =
          if i > 100 then Alcotest.fail "100 puts of 8 KiB on a full disk, none refused";
          let file = tmp / Printf.sprintf "f%d" i in
          let contents = String.init 8192 (fun k -> Char.chr (((i * 7) + k) land 0xff)) in
          let oc = open_out_bin file in
          output_string oc contents;
          close_out oc;
          match command ~env tmp [ "cap"; "fs"; "put"; "--server"; server; file ] with
          | 0, out, _ -> puts (i + 1) ((String.trim out, contents) :: acc)
          | 2, _, _ -> acc
          | c, _, err -> Alcotest.failf "put %d: exit %d: %s" i c err
        in
        let acked = puts 0 [] in
        Alcotest.(check bool) "some puts acknowledged before the disk filled" true (acked <> []);
        Alcotest.(check int) "the server's exit status" 2 (wait_exit "the file server" pid);
        one_line ~skip:1 "consort cap fs serve" (tmp / "s.err")
          ~says:[ "file server stopped"; "no space left" ];
        copy_dir (dir / "fs") (tmp / "fs");
        acked)
  in
  let pid = serve (tmp / "fs") in
  ignore (first_line_field "the restarted file server" (tmp / "s.out") "server");
  List.iter
    (fun (cap, contents) ->
      match command ~env tmp [ "cap"; "fs"; "get"; cap ] with
      | 0, out, _ ->
          if out <> contents then Alcotest.failf "%s: other contents after the restart" cap
      | c, _, err -> Alcotest.failf "an acknowledged file is lost: get %s: exit %d: %s" cap c err)
    acked;
  Unix.kill pid Sys.sigterm;
  Alcotest.(check int) "the restarted server's exit status" 0 (wait_exit "the file server" pid)

(* --new at a directory replica's first start (its data directory has no store identity yet). *)
let new_unless_identity data =
  if Sys.file_exists (Filename.concat data "identity") then [||] else [| "--new" |]

(* consort cap dir serve (one replica) with its data on the disk that fills
   while directories are made: it stops (one line, exit 2, leaving its
   group); restarted on a larger disk, it has every directory it
   acknowledged. *)
let dir_serve () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  let bind = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let group = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let serve data =
    spawn ~env:[ "CONSORT_MULTICAST=off" ] ~out:(tmp / "s.out") ~err:(tmp / "s.err")
      (Array.append
         [|
           consort;
           "cap";
           "dir";
           "serve";
           "--data";
           data;
           "--key";
           tmp / "dir.key";
           "--bind";
           bind;
           "--group";
           group;
           "--peers";
           "";
         |]
         (new_unless_identity data))
  in
  let name i = Printf.sprintf "d%d-%s" i (String.make 200 'n') in
  let acked, root =
    with_full_disk ~free:(24 * 1024) (fun dir ->
        let pid = serve (dir / "r0") in
        let root = first_line_field "the directory replica" (tmp / "s.out") "root" in
        let env = [ "CONSORT_MULTICAST=off"; "CONSORT_LOCATE=" ^ bind; "CONSORT_ROOT=" ^ root ] in
        let rec mkdirs i acc =
          if i > 1000 then Alcotest.fail "1000 directories on a full disk, none refused";
          match command ~env tmp [ "cap"; "mkdir"; "/" ^ name i ] with
          | 0, _, _ -> mkdirs (i + 1) (name i :: acc)
          | (2 | 3), _, _ -> acc
          | c, _, err -> Alcotest.failf "mkdir %d: exit %d: %s" i c err
        in
        let acked = mkdirs 0 [] in
        Alcotest.(check bool)
          "some directories acknowledged before the disk filled" true (acked <> []);
        Alcotest.(check int) "the replica's exit status" 2 (wait_exit "the directory replica" pid);
        one_line ~skip:1 "consort cap dir serve" (tmp / "s.err")
          ~says:[ "disk full"; "No space left"; "left the group" ];
        copy_dir (dir / "r0") (tmp / "r0");
        (acked, root))
  in
  let pid = serve (tmp / "r0") in
  ignore (first_line_field "the restarted replica" (tmp / "s.out") "root");
  let env = [ "CONSORT_MULTICAST=off"; "CONSORT_LOCATE=" ^ bind; "CONSORT_ROOT=" ^ root ] in
  let rec ls n =
    match command ~env tmp [ "cap"; "ls"; "/" ] with
    | 0, out, _ -> out
    | c, _, err ->
        if n = 0 then Alcotest.failf "ls after the restart: exit %d: %s" c err;
        Unix.sleepf 0.5;
        ls (n - 1)
  in
  let listed = ls 20 in
  List.iter
    (fun d ->
      if not (contains listed d) then Alcotest.failf "an acknowledged directory is lost: %s" d)
    acked;
  Unix.kill pid Sys.sigterm;
  Alcotest.(check int) "the restarted replica's exit status" 0 (wait_exit "the replica" pid)

(* consort sim --trace into a missing directory, and onto the full disk. *)
let sim_trace () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  let sim trace =
    let pid =
      spawn ~out:(tmp / "s.out") ~err:(tmp / "s.err")
        [|
          consort; "sim"; "--scenario"; "vsync-crash"; "--seeds"; "3"; "--quiet"; "--trace"; trace;
        |]
    in
    wait_exit ~secs:60. "consort sim" pid
  in
  let missing = tmp / "no-such-dir" / "trace.txt" in
  Alcotest.(check int) "missing directory: exit status" 2 (sim missing);
  one_line "consort sim" (tmp / "s.err") ~says:[ "--trace"; missing; "No such file" ];
  with_full_disk (fun dir ->
      let file = dir / "trace.txt" in
      Alcotest.(check int) "full disk: exit status" 2 (sim file);
      one_line "consort sim" (tmp / "s.err") ~says:[ "--trace"; file; "No space left" ])

(* Keys and identities written on a disk with no room: refused with one
   line, and nothing torn left behind (a torn key would be refused at every
   later start and never overwritten). *)
let keys_on_full_disk () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  with_full_disk ~free:0 (fun dir ->
      let key = dir / "group.key" in
      (match command tmp [ "keygen"; key ] with
      | 2, _, _ -> ()
      | c, _, err -> Alcotest.failf "consort keygen on a full disk: exit %d: %s" c err);
      one_line "consort keygen" (tmp / "c.err") ~says:[ key ];
      Alcotest.(check bool) "no key file left" false (Sys.file_exists key);
      let data = dir / "fs" in
      (match
         command ~env:[ "CONSORT_MULTICAST=off" ] tmp
           [ "cap"; "fs"; "serve"; "--new"; "--data"; data; "--bind"; "127.0.0.1:1" ]
       with
      | 2, _, _ -> ()
      | c, _, err -> Alcotest.failf "consort cap fs serve on a full disk: exit %d: %s" c err);
      one_line "consort cap fs serve" (tmp / "c.err") ~says:[ data ];
      Alcotest.(check bool) "no port key left" false (Sys.file_exists (data / "port.key"));
      Alcotest.(check bool) "no identity left" false (Sys.file_exists (data / "service-identity")))

(* Data directories with an identity: minted at the first start, the same
   at every later one; a file server given another port's data, a
   directory replica given a file server's or another directory service's,
   a directory that is no store at all: refused, one line naming both,
   nothing in it changed. *)
let identity () =
  let tmp = temp_dir () in
  Fun.protect ~finally:(fun () -> cleanup tmp) @@ fun () ->
  let bind = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let fs ?(extra = []) data =
    spawn ~env:[ "CONSORT_MULTICAST=off" ] ~out:(tmp / "s.out") ~err:(tmp / "s.err")
      (Array.of_list
         ([ consort; "cap"; "fs"; "serve" ] @ fs_new data
         @ [ "--data"; data; "--bind"; bind ]
         @ extra))
  in
  let dir data key =
    spawn ~env:[ "CONSORT_MULTICAST=off" ] ~out:(tmp / "s.out") ~err:(tmp / "s.err")
      (Array.append
         [|
           consort;
           "cap";
           "dir";
           "serve";
           "--data";
           data;
           "--key";
           key;
           "--bind";
           bind;
           "--group";
           Printf.sprintf "127.0.0.1:%d" (free_port ());
           "--peers";
           "";
         |]
         (new_unless_identity data))
  in
  let serves what pid =
    ignore (first_line_field what (tmp / "s.out") (if what = "dir" then "root" else "server"));
    Unix.kill pid Sys.sigterm;
    Alcotest.(check int) (what ^ ": exit status after SIGTERM") 0 (wait_exit what pid)
  in
  let refused what pid ~says =
    Alcotest.(check int) (what ^ ": exit status") 2 (wait_exit what pid);
    one_line what (tmp / "s.err") ~says
  in
  let field f k =
    match List.find_opt (fun l -> starts_with l (k ^ " ")) (lines f) with
    | Some l -> String.sub l (String.length k + 1) (String.length l - String.length k - 1)
    | None -> Alcotest.failf "%s: no %s line" f k
  in
  (* A file server: its identity minted once, the same after a restart. *)
  let fsd = tmp / "fs" in
  serves "fs" (fs fsd);
  let id_file = fsd / "service-identity" in
  Alcotest.(check string) "kind" "capfs" (field id_file "kind");
  let id = field id_file "id" and service = field id_file "service" in
  Alcotest.(check int) "a minted id of 128 bits" 32 (String.length id);
  serves "fs" (fs fsd);
  Alcotest.(check string) "the same id after a restart" id (field id_file "id");
  (* Another port's key on the same data: refused, both services named. *)
  refused "fs with another key"
    (fs ~extra:[ "--key"; tmp / "other.key" ] fsd)
    ~says:[ fsd; "belongs to another store"; service; "this server is kind capfs, service" ];
  (* A directory replica on the file server's data. *)
  let before = Sys.readdir fsd in
  refused "dir on a file server's data"
    (dir fsd (tmp / "dir.key"))
    ~says:[ fsd; "kind capfs"; "this server is kind capdir" ];
  Alcotest.(check (array string)) "nothing made in it" before (Sys.readdir fsd);
  (* A directory replica, then another directory service's replica on its data. *)
  let dd = tmp / "dir" in
  serves "dir" (dir dd (tmp / "dir.key"));
  Alcotest.(check string) "kind" "capdir" (field (dd / "service-identity") "kind");
  let dservice = field (dd / "service-identity") "service" in
  serves "dir" (dir dd (tmp / "dir.key"));
  refused "dir with another service's key"
    (dir dd (tmp / "dir2.key"))
    ~says:[ dd; dservice; "this server is kind capdir, service capdir-" ];
  (* A directory that is no store: refused, left alone. *)
  let junk = tmp / "junk" in
  Unix.mkdir junk 0o755;
  close_out (open_out (junk / "notes.txt"));
  refused "fs on a directory that is no store" (fs junk) ~says:[ junk; "no identity" ];
  refused "dir on a directory that is no store"
    (dir junk (tmp / "dir.key"))
    ~says:[ junk; "no identity" ];
  Alcotest.(check (array string)) "left alone" [| "notes.txt" |] (Sys.readdir junk)

let () =
  Alcotest.run "disk_full"
    [
      ( "full disk",
        [
          Alcotest.test_case "consort member --log" `Quick member_log;
          Alcotest.test_case "consort member --pcap" `Quick member_pcap;
          Alcotest.test_case "consortd --pcap" `Quick consortd_pcap;
          Alcotest.test_case "consort sim --trace" `Quick sim_trace;
          Alcotest.test_case "consort cap fs serve" `Quick fs_serve;
          Alcotest.test_case "consort cap dir serve" `Quick dir_serve;
        ] );
      ( "data directories",
        [
          Alcotest.test_case "an identity, checked" `Quick identity;
          Alcotest.test_case "keys and identities on a full disk" `Quick keys_on_full_disk;
        ] );
    ]
