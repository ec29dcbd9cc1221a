(* consortd at its edges (issue 29): what a key promises holds for members
   held by the daemon (Rekey on by default, as in [consort member]), and
   they merge with [consort member --key] members of their group. *)

open Harness
module Wire = Consort_daemon.Wire
module C = Consort_client
module Seal = Consort_seal.Seal
module S = Seal.Make (Consort_engine.Udp)

let check = Alcotest.(check bool)

(* Ports: a window of 50 from 17000, chosen by the process id (test_daemon
   uses 20000-23999, the clients' tests 24000-26999, the chaos 27000-29999). *)
let base = 17000 + (50 * (Unix.getpid () mod 20))
let addr n = Printf.sprintf "127.0.0.1:%d" (base + n)

let contains s sub =
  let n = String.length sub in
  let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
  go 0

let read_file f =
  let ic = open_in_bin f in
  Fun.protect
    ~finally:(fun () -> close_in ic)
    (fun () -> really_input_string ic (in_channel_length ic))

(* The consort command built beside this test. *)
let consort () =
  let here = Filename.dirname Sys.executable_name in
  match
    List.find_opt Sys.file_exists
      [ Filename.concat here "../../bin/main.exe"; "_build/default/bin/main.exe" ]
  with
  | Some p -> p
  | None -> failwith "main.exe not built"

let new_key dir =
  let key = Filename.concat dir "k.key" and secret = Seal.generate () in
  (match Seal.write_key key secret with Ok () -> () | Error e -> Alcotest.fail e);
  (key, secret)

(* The UDP payloads of a pcap file of raw IPv4 records ([--pcap]). *)
let udp_payloads file =
  let s = read_file file in
  let rec go pos acc =
    if pos + 16 > String.length s then List.rev acc
    else
      let incl = Int32.to_int (String.get_int32_le s (pos + 8)) in
      let r = String.sub s (pos + 16) incl in
      let ihl = Char.code r.[0] land 0xf * 4 in
      go (pos + 16 + incl) (String.sub r (ihl + 8) (String.length r - ihl - 8) :: acc)
  in
  go 24 []

let privacy = "vsync,Privacy"

(* A Privacy group held by the daemon, captured (--pcap): with the key file
   alone (what any past holder has, an excluded member included) the side
   channel opens, no payload of the stack does: it goes under view keys. *)
let test_capture_needs_view_keys () =
  let dir = tmpdir () in
  let key, secret = new_key dir in
  let pcap = Filename.concat dir "d.pcap" in
  let d = start ~dir ~args:[ "--key"; key; "--pcap"; pcap ] ~bind:(addr 0) () in
  Fun.protect
    ~finally:(fun () ->
      if alive d then stop d;
      rm_rf dir)
    (fun () ->
      let a = member ~props:privacy d "private" and b = member ~props:privacy d "private" in
      check "a view of two" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      let mark = Printf.sprintf "PLAINTEXT-MARK-%d-" (Unix.getpid ()) in
      for i = 1 to 20 do
        check "cast" true (C.cast a.m (mark ^ string_of_int i) = Ok ())
      done;
      check "delivered" true (until [ a.conn; b.conn ] (fun () -> List.length !(b.casts) = 20));
      C.close a.conn;
      C.close b.conn;
      stop d;
      let ds = udp_payloads pcap in
      let held =
        match
          S.held
            (S.wrap ~group:"private" (Consort_engine.Loop.create ()) (Some (secret, Seal.Privacy)))
        with
        | Some h -> h
        | None -> Alcotest.fail "no keys"
      in
      let opened = List.filter_map (Seal.open_held held) ds in
      check "the capture holds the casts' datagrams" true (List.length ds > 20);
      check "the key file opens the side channel (the check can read)" true (opened <> []);
      check "no cast opens with the key file alone" false
        (List.exists (fun p -> contains p mark) opened);
      check "stack datagrams sealed under a view key (mode 4)" true
        (List.exists (fun d -> String.length d > 2 && d.[1] = '\004') ds))

(* A member through the daemon and a [consort member --key] process, one
   group: one view of both (before, each stayed alone: one rekeyed, the
   other not). *)
let test_merges_with_member () =
  let dir = tmpdir () in
  let key, _ = new_key dir in
  let mport = base + 20 in
  let d =
    start ~dir
      ~args:[ "--key"; key; "--peers"; Printf.sprintf "127.0.0.1:%d" mport ]
      ~bind:(addr 10) ()
  in
  let log = Filename.concat dir "m.log" in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let err = Unix.openfile (Filename.concat dir "m.err") [ O_WRONLY; O_CREAT ] 0o600 in
  let pid =
    Unix.create_process (consort ())
      [|
        "consort";
        "member";
        "--group";
        "mixed";
        "--props";
        "vsync,Privacy";
        "--key";
        key;
        "--bind";
        Printf.sprintf "127.0.0.1:%d" mport;
        "--peers";
        String.concat "," (List.init 8 (fun i -> addr (10 + i)));
        "--no-input";
        "--quiet";
        "--log";
        log;
      |]
      devnull devnull err
  in
  Unix.close devnull;
  Unix.close err;
  Fun.protect
    ~finally:(fun () ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
      stop d;
      rm_rf dir)
    (fun () ->
      let a = member ~props:privacy d "mixed" in
      let other () =
        match !(a.views) with
        | v :: _ ->
            Array.exists (fun id -> contains id (Printf.sprintf "127.0.0.1:%d#" mport)) v.C.members
        | [] -> false
      in
      let merged = until [ a.conn ] (fun () -> view_size a = 2 && other ()) in
      if not merged then
        Alcotest.failf "no view of both; member: %s; daemon: %s"
          (try read_file (Filename.concat dir "m.err") with Sys_error _ -> "")
          (daemon_stderr d);
      check "the member's log names the daemon's member" true
        (until ~timeout:5. [ a.conn ] (fun () ->
             try contains (read_file log) (C.me a.m) with Sys_error _ -> false));
      C.close a.conn)

let deaf =
  {
    C.view = ignore;
    cast = (fun ~origin:_ _ -> ());
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

(* What the daemon cannot provide is refused at JOIN with its reason: Rekey
   without a key, Rekey with seal.rekey=false; seal.rekey=false alone is
   the explicit way out, as in [consort member]. *)
let test_rekey_refused () =
  let refused ?params d props code word =
    let conn = match C.connect d.socket with Ok c -> c | Error e -> Alcotest.fail e in
    (match C.join ~props ?params conn ~group:"r" deaf with
    | Error (C.Refused (c, reason)) ->
        check ("refused: " ^ Wire.code_name code) true (c = code);
        check ("the reason says " ^ word ^ ": " ^ reason) true (contains reason word)
    | Ok _ -> Alcotest.fail "joined"
    | Error e -> Alcotest.failf "%a" C.pp_join_error e);
    C.close conn
  in
  let d = start ~bind:(addr 30) () in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf d.dir)
    (fun () -> refused d "vsync,Rekey" Wire.Join_failed "--key");
  let dir = tmpdir () in
  let key, _ = new_key dir in
  let d = start ~dir ~args:[ "--key"; key ] ~bind:(addr 40) () in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf dir)
    (fun () ->
      refused ~params:"seal.rekey=false" d "vsync,Privacy,Rekey" Wire.Bad_params "contradict";
      let conn = match C.connect d.socket with Ok c -> c | Error e -> Alcotest.fail e in
      (match C.join ~props:privacy ~params:"seal.rekey=false" conn ~group:"r" deaf with
      | Ok _ -> ()
      | Error e -> Alcotest.failf "seal.rekey=false alone: %a" C.pp_join_error e);
      (* The seal is chosen at JOIN: a SWITCH cannot add Privacy (or Rekey to
         a member without view keys), and says so instead of ignoring it. *)
      let switch_refused m props word =
        match C.switch m props with
        | Error (code, reason) ->
            check ("SWITCH " ^ props ^ ": bad-switch") true (code = Wire.Bad_switch);
            check ("the reason says " ^ word ^ ": " ^ reason) true (contains reason word)
        | Ok () -> Alcotest.failf "SWITCH to %s taken, and its seal ignored" props
      in
      let plain =
        match C.join conn ~group:"s" deaf with Ok m -> m | Error _ -> Alcotest.fail "join"
      in
      switch_refused plain "vsync,Privacy" "Privacy";
      let norekey =
        match C.join ~params:"seal.rekey=false" conn ~group:"t" deaf with
        | Ok m -> m
        | Error _ -> Alcotest.fail "join"
      in
      switch_refused norekey "vsync,Rekey" "Rekey";
      check "SWITCH within what the member has: taken" true
        (C.switch plain "vsync,Auth,Total" = Ok ());
      C.close conn)

(* {1 Who may connect} *)

(* A local user made for the test (useradd), removed after. *)
let with_user f =
  if Unix.geteuid () <> 0 then Alcotest.fail "needs root, to create a local user (useradd)";
  let name = Printf.sprintf "consortt%d" (Unix.getpid () mod 1_000_000) in
  let quiet cmd = Sys.command (cmd ^ " >/dev/null 2>&1") in
  ignore (quiet ("userdel " ^ name));
  if
    quiet
      ("useradd --system --user-group --no-create-home --home-dir /nonexistent --shell \
        /usr/sbin/nologin " ^ name)
    <> 0
  then Alcotest.fail "useradd failed";
  Fun.protect
    ~finally:(fun () -> ignore (quiet ("userdel " ^ name)))
    (fun () ->
      let pw = Unix.getpwnam name in
      f name pw.Unix.pw_uid pw.Unix.pw_gid)

(* [as_user uid gid f]: [f ()] in a child process of that user and group
   (and the supplementary [groups]); the line it returns. *)
let as_user ?(groups = []) uid gid f =
  let r, w = Unix.pipe ~cloexec:true () in
  match Unix.fork () with
  | 0 ->
      Unix.close r;
      let line =
        try
          Unix.setgroups (Array.of_list (gid :: groups));
          Unix.setgid gid;
          Unix.setuid uid;
          f ()
        with e -> "exception " ^ Printexc.to_string e
      in
      ignore (Unix.write_substring w line 0 (String.length line));
      Unix._exit 0
  | pid ->
      Unix.close w;
      let b = Buffer.create 256 and chunk = Bytes.create 256 in
      let deadline = Unix.gettimeofday () +. 20. in
      let rec go () =
        let left = deadline -. Unix.gettimeofday () in
        if left > 0. then
          match Unix.select [ r ] [] [] left with
          | [], _, _ -> ()
          | _ -> (
              match Unix.read r chunk 0 256 with
              | 0 -> ()
              | n ->
                  Buffer.add_subbytes b chunk 0 n;
                  go ())
          | exception Unix.Unix_error (Unix.EINTR, _, _) -> go ()
      in
      go ();
      Unix.close r;
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      ignore (Unix.waitpid [] pid);
      Buffer.contents b

(* What a client gets: connects to [address] (a path, or "tcp:IP:PORT"),
   says HELLO (with [token] if given) and, if it is answered, JOINs a
   Privacy group. "joined", "error CODE: REASON", "closed", "timeout" or
   "connect: ERROR". *)
let attempt ?(token = "") address =
  let dom, sa =
    if String.length address > 4 && String.sub address 0 4 = "tcp:" then
      let a = String.sub address 4 (String.length address - 4) in
      let i = String.rindex a ':' in
      ( Unix.PF_INET,
        Unix.ADDR_INET
          ( Unix.inet_addr_of_string (String.sub a 0 i),
            int_of_string (String.sub a (i + 1) (String.length a - i - 1)) ) )
    else (Unix.PF_UNIX, Unix.ADDR_UNIX address)
  in
  let fd = Unix.socket ~cloexec:true dom Unix.SOCK_STREAM 0 in
  match Unix.connect fd sa with
  | exception Unix.Unix_error (e, _, _) ->
      Unix.close fd;
      "connect: " ^ Unix.error_message e
  | () ->
      let r = { fd; fr = Wire.framer ~max:(1 lsl 26); buf = Bytes.create 65536 } in
      let get () =
        match next ~timeout:5. r with
        | `Event (Wire.Error { code; reason; _ }) ->
            Printf.sprintf "error %s: %s" (Wire.code_name code) reason
        | `Event e -> Fmt.str "%a" (fun ppf _ -> Fmt.string ppf "event") e
        | `Closed -> "closed"
        | `Timeout -> "timeout"
      in
      (* A peer refused on sight may have its connection closed before
         HELLO is written: the ERROR waits to be read all the same. *)
      (try
         put r
           (Wire.encode_request
              (Wire.Hello { min_version = 1; max_version = 1; name = "x"; token }))
       with Unix.Unix_error ((Unix.EPIPE | Unix.ECONNRESET), _, _) -> ());
      let res =
        match next ~timeout:5. r with
        | `Event (Wire.Hello_ok _) -> (
            put r
              (Wire.encode_request
                 (Wire.Join
                    {
                      handle = 1;
                      group = "keyed";
                      props = "vsync,Privacy";
                      params = "";
                      flags = 0;
                      peers = [];
                    }));
            match next ~timeout:5. r with `Event (Wire.Ok _) -> "joined" | _ -> get ())
        | `Event (Wire.Error { code; reason; _ }) ->
            Printf.sprintf "error %s: %s" (Wire.code_name code) reason
        | `Event _ -> "another event"
        | `Closed -> "closed"
        | `Timeout -> "timeout"
      in
      close_raw r;
      res

(* The stock Python client (clients/python), as the issue's attacker used it,
   copied where any user can read it (the tree may be in a directory of mode
   0700). *)
let python_pkg =
  lazy
    (let here = Filename.dirname Sys.executable_name in
     match
       List.find_opt
         (fun d -> Sys.file_exists (Filename.concat d "clients/python/consort_client/client.py"))
         [ Sys.getcwd (); Filename.concat here "../../../.."; Filename.concat here "../../.." ]
     with
     | None -> Alcotest.fail "no clients/python in this tree"
     | Some root ->
         let d = tmpdir () in
         Unix.chmod d 0o755;
         at_exit (fun () -> rm_rf d);
         let src = Filename.concat (Unix.realpath root) "clients/python/consort_client" in
         if
           Sys.command
             (Printf.sprintf "cp -r %s %s && chmod -R a+rX %s" (Filename.quote src)
                (Filename.quote d) (Filename.quote d))
           <> 0
         then Alcotest.fail "cannot copy clients/python";
         d)

(* [python_client pkg address]: connects to [address] and joins a keyed
   Privacy group with the package copied in [pkg]. Its one line. *)
let python_client pkg address =
  let script =
    Printf.sprintf
      "import sys\n\
       sys.path.insert(0, %S)\n\
       from consort_client import Client, ConsortError\n\
       try:\n\
      \    c = Client(%S, timeout=10)\n\
      \    c.join('keyed', props='vsync,Privacy')\n\
      \    print('joined')\n\
       except ConsortError as e:\n\
      \    print('refused: %%s' %% e)\n"
      pkg address
  in
  let ic =
    Unix.open_process_args_in "/usr/bin/env"
      [| "env"; "PYTHONDONTWRITEBYTECODE=1"; "python3"; "-c"; script |]
  in
  let line = try input_line ic with End_of_file -> "no output" in
  ignore (Unix.close_process_in ic);
  line

let starts_with p s = String.length s >= String.length p && String.sub s 0 (String.length p) = p

let expect_refused what res =
  if not (starts_with "error not-allowed" res) then
    Alcotest.failf "%s: expected ERROR not-allowed, got %S" what res

let expect_joined what res = if res <> "joined" then Alcotest.failf "%s: got %S" what res

(* A daemon whose socket anyone may reach on the file system (a directory
   of mode 0755, --socket-mode 0666): only the peer check stands between
   another local user and the keyed groups. *)
let open_daemon ?(args = []) ~bind () =
  let dir = tmpdir () in
  Unix.chmod dir 0o755;
  let key, _ = new_key dir in
  start ~dir ~args:([ "--key"; key; "--socket-mode"; "0666" ] @ args) ~bind ()

let with_d d f =
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf d.dir)
    (fun () -> f d)

(* Another local user, refused on the Unix socket by its credentials; the
   daemon's own user (root here) served; the user allowed by name
   (--allow-uid) or by its group (--allow-gid) served. *)
let test_unix_peer () =
  with_user (fun name uid gid ->
      with_d
        (open_daemon ~bind:(addr 0) ())
        (fun d ->
          expect_refused "another user" (as_user uid gid (fun () -> attempt d.socket));
          let pkg = Lazy.force python_pkg in
          let py = as_user uid gid (fun () -> python_client pkg d.socket) in
          check
            ("the Python client, another user: " ^ py)
            true
            (starts_with "refused: not-allowed" py);
          check "the refusal names the uid" true
            (contains (as_user uid gid (fun () -> attempt d.socket)) (Printf.sprintf "uid %d" uid));
          expect_joined "the daemon's own user" (attempt d.socket);
          check "one warning line per refusal" true (contains (daemon_stderr d) "refused: uid"));
      with_d
        (open_daemon ~args:[ "--allow-uid"; name ] ~bind:(addr 10) ())
        (fun d -> expect_joined "--allow-uid NAME" (as_user uid gid (fun () -> attempt d.socket)));
      with_d
        (open_daemon ~args:[ "--allow-gid"; string_of_int gid ] ~bind:(addr 20) ())
        (fun d -> expect_joined "--allow-gid GID" (as_user uid gid (fun () -> attempt d.socket)));
      (* A supplementary group of the peer (SO_PEERGROUPS), as a user added to
         the daemon's group has. *)
      let extra = 40000 + (Unix.getpid () mod 20000) in
      with_d
        (open_daemon ~args:[ "--allow-gid"; string_of_int extra ] ~bind:(addr 25) ())
        (fun d ->
          expect_refused "not in the group" (as_user uid gid (fun () -> attempt d.socket));
          expect_joined "a supplementary group"
            (as_user ~groups:[ extra ] uid gid (fun () -> attempt d.socket))))

(* The socket's mode is --socket-mode's (0660 by default), whatever the
   umask (000 here): another user cannot even connect. *)
let test_socket_mode () =
  with_user (fun _ uid gid ->
      let old = Unix.umask 0 in
      let d =
        Fun.protect
          ~finally:(fun () -> ignore (Unix.umask old))
          (fun () ->
            let dir = tmpdir () in
            Unix.chmod dir 0o755;
            start ~dir ~bind:(addr 30) ())
      in
      with_d d (fun d ->
          Alcotest.(check int) "mode 0660 under umask 000" 0o660 (Unix.stat d.socket).Unix.st_perm;
          let res = as_user uid gid (fun () -> attempt d.socket) in
          check ("another user cannot connect: " ^ res) true (starts_with "connect: " res)))

(* Over TCP with a key, the token: another local user without it, or with
   another, refused; with it served (the token is the credential), as is
   the daemon's user. *)
let test_tcp_token () =
  with_user (fun _ uid gid ->
      let dir = tmpdir () in
      let key, _ = new_key dir in
      let token = Filename.concat dir "t.token" in
      (match Seal.write_key token (Seal.generate ()) with
      | Ok () -> ()
      | Error e -> Alcotest.fail e);
      let text = String.trim (read_file token) in
      let tcp = addr 49 in
      with_d
        (start ~dir ~args:[ "--key"; key; "--tcp"; tcp; "--token"; token ] ~bind:(addr 40) ())
        (fun d ->
          let tcp = "tcp:" ^ tcp in
          expect_refused "another user, no token" (as_user uid gid (fun () -> attempt tcp));
          expect_refused "another user, another token"
            (as_user uid gid (fun () -> attempt ~token:(String.make (String.length text) 'x') tcp));
          expect_refused "the daemon's user, no token" (attempt tcp);
          (* The stock Python client, as another local user. *)
          let pkg = Lazy.force python_pkg in
          let py = as_user uid gid (fun () -> python_client pkg tcp) in
          check
            ("the Python client, another user, no token: " ^ py)
            true
            (starts_with "refused: not-allowed" py);
          expect_joined "another user with the token"
            (as_user uid gid (fun () -> attempt ~token:text tcp));
          expect_joined "the daemon's user with the token" (attempt ~token:text tcp);
          (* The OCaml client, from the file CONSORT_TOKEN_FILE names. *)
          Unix.putenv "CONSORT_TOKEN_FILE" token;
          let ok = C.connect tcp in
          Unix.putenv "CONSORT_TOKEN_FILE" "";
          (match ok with Ok c -> C.close c | Error e -> Alcotest.failf "CONSORT_TOKEN_FILE: %s" e);
          (match C.connect tcp with
          | Ok _ -> Alcotest.fail "connected without the token"
          | Error e -> check ("refused without: " ^ e) true (contains e "not-allowed"));
          (* No token is read or sent on a Unix socket. *)
          Unix.putenv "CONSORT_TOKEN_FILE" (Filename.concat dir "missing");
          let ok = C.connect d.socket in
          Unix.putenv "CONSORT_TOKEN_FILE" "";
          match ok with
          | Ok c -> C.close c
          | Error e -> Alcotest.failf "the Unix socket with CONSORT_TOKEN_FILE: %s" e))

(* consortd run to its end: exit code and standard error. *)
let run_daemon args =
  let dir = tmpdir () in
  let errf = Filename.concat dir "err" in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let err = Unix.openfile errf [ O_WRONLY; O_CREAT ] 0o600 in
  let pid =
    Unix.create_process (consortd ()) (Array.of_list ("consortd" :: args)) devnull devnull err
  in
  Unix.close devnull;
  Unix.close err;
  let deadline = Unix.gettimeofday () +. 10. in
  let rec wait () =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ when Unix.gettimeofday () < deadline ->
        ignore (Unix.select [] [] [] 0.02);
        wait ()
    | 0, _ ->
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid);
        -1
    | _, Unix.WEXITED n -> n
    | _ -> -2
  in
  let code = wait () in
  let e = read_file errf in
  rm_rf dir;
  (code, e)

(* Refused at start, exit 2 and one line: --tcp with --key and no token, a
   token file others can read, --metrics on 0.0.0.0 without
   --metrics-public, a key file owned by another user, or a FIFO. *)
let test_refused_at_start () =
  let dir = tmpdir () in
  Fun.protect
    ~finally:(fun () -> rm_rf dir)
    (fun () ->
      let key, _ = new_key dir in
      let sock = Filename.concat dir "s.sock" in
      let refused what args words =
        let code, e = run_daemon ([ "--socket"; sock; "--bind"; addr 45 ] @ args) in
        Alcotest.(check int) (what ^ ": exit 2") 2 code;
        let lines = List.filter (( <> ) "") (String.split_on_char '\n' e) in
        Alcotest.(check int) (what ^ ": one line: " ^ e) 1 (List.length lines);
        List.iter (fun w -> check (what ^ ": says " ^ w ^ ": " ^ e) true (contains e w)) words;
        check (what ^ ": the socket is not left") false (Sys.file_exists sock)
      in
      refused "--tcp with --key, no token" [ "--key"; key; "--tcp"; addr 46 ] [ "--token" ];
      let loose = Filename.concat dir "loose.token" in
      (match Seal.write_key loose (Seal.generate ()) with
      | Ok () -> ()
      | Error e -> Alcotest.fail e);
      Unix.chmod loose 0o644;
      refused "a token others can read"
        [ "--key"; key; "--tcp"; addr 46; "--token"; loose ]
        [ "644" ];
      refused "--metrics 0.0.0.0"
        [ "--metrics"; "0.0.0.0:" ^ string_of_int (base + 47) ]
        [ "--metrics-public" ];
      let fifo = Filename.concat dir "fifo" in
      Unix.mkfifo fifo 0o600;
      refused "a FIFO as key" [ "--key"; fifo ] [ "not a regular file" ];
      with_user (fun _ uid gid ->
          let theirs = Filename.concat dir "theirs.key" in
          (match Seal.write_key theirs (Seal.generate ()) with
          | Ok () -> ()
          | Error e -> Alcotest.fail e);
          Unix.chown theirs uid gid;
          refused "a key owned by another user" [ "--key"; theirs ] [ Printf.sprintf "uid %d" uid ]);
      (* --metrics-public: served on 0.0.0.0. *)
      let d =
        start ~dir
          ~args:[ "--metrics"; "0.0.0.0:" ^ string_of_int (base + 47); "--metrics-public" ]
          ~bind:(addr 45) ()
      in
      check "--metrics-public: the daemon runs" true (alive d);
      stop d)

(* Seal.read_key (and the token's Seal.read_private): what is checked is the
   file opened. Owned by another uid (root chowns it): refused, naming the
   uid; a FIFO: refused at once, not waited on; a symbolic link to a good
   key: read (the file it names is checked); a directory: refused. *)
let test_key_file_checks () =
  let dir = tmpdir () in
  Fun.protect
    ~finally:(fun () -> rm_rf dir)
    (fun () ->
      let key, secret = new_key dir in
      let same s = Fmt.str "%a" Seal.pp_secret s = Fmt.str "%a" Seal.pp_secret secret in
      (match Seal.read_key key with
      | Ok s -> check "read back" true (same s)
      | Error e -> Alcotest.fail e);
      let link = Filename.concat dir "link.key" in
      Unix.symlink key link;
      (match Seal.read_key link with
      | Ok s -> check "through a symbolic link" true (same s)
      | Error e -> Alcotest.fail e);
      let refused what path word =
        match Seal.read_key path with
        | Ok _ -> Alcotest.failf "%s: accepted" what
        | Error e ->
            check (what ^ ": " ^ e) true (contains e word);
            check (what ^ ": one line") false (String.contains e '\n')
      in
      if Unix.geteuid () = 0 then begin
        let theirs = Filename.concat dir "theirs.key" in
        (match Seal.write_key theirs (Seal.generate ()) with
        | Ok () -> ()
        | Error e -> Alcotest.fail e);
        Unix.chown theirs 54321 54321;
        refused "owned by another uid" theirs "uid 54321"
      end
      else Alcotest.fail "needs root, to give a file to another uid";
      let fifo = Filename.concat dir "fifo" in
      Unix.mkfifo fifo 0o600;
      let t0 = Unix.gettimeofday () in
      refused "a FIFO" fifo "not a regular file";
      check "a FIFO is not waited on" true (Unix.gettimeofday () -. t0 < 5.);
      refused "a directory" dir "not a regular file";
      Unix.chmod key 0o640;
      refused "mode 0640" key "chmod 600")

let () =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  Alcotest.run "daemon_sec"
    [
      ( "rekey",
        [
          Alcotest.test_case "a captured Privacy group needs view keys" `Quick
            test_capture_needs_view_keys;
          Alcotest.test_case "daemon members merge with consort member --key" `Quick
            test_merges_with_member;
          Alcotest.test_case "what the daemon cannot provide is refused at JOIN" `Quick
            test_rekey_refused;
        ] );
      ( "who may connect",
        [
          Alcotest.test_case "another local user refused on the Unix socket" `Quick test_unix_peer;
          Alcotest.test_case "the socket's mode, whatever the umask" `Quick test_socket_mode;
          Alcotest.test_case "over TCP, the token" `Quick test_tcp_token;
          Alcotest.test_case "refused at start, one line" `Quick test_refused_at_start;
          Alcotest.test_case "key files: the file opened is checked" `Quick test_key_file_checks;
        ] );
    ]
