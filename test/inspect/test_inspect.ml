(* Inspection without setup, and the refusals it reports: members started without --control open a
   socket in $XDG_RUNTIME_DIR/consort, and consort status with no
   arguments lists every one of them, a stale socket noted and skipped, and
   another user's socket never asked. Members and sockets live in a
   directory of this test (XDG_RUNTIME_DIR); every process started here is
   killed by its id at the end. *)

let ( / ) = Filename.concat

let exe =
  let dir = Filename.dirname Sys.executable_name in
  let dir = if Filename.is_relative dir then Sys.getcwd () / dir else dir in
  dir / ".." / ".." / "bin" / "main.exe"

let started = ref []

let kill_started () =
  List.iter
    (fun pid ->
      (try Unix.kill pid Sys.sigterm with Unix.Unix_error _ -> ());
      try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
    !started;
  started := []

let () = at_exit kill_started

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

let read_file f =
  let ic = open_in_bin f in
  Fun.protect
    ~finally:(fun () -> close_in ic)
    (fun () -> really_input_string ic (in_channel_length ic))

(* [consort args] in [env], as user [uid] when given; its status and outputs. *)
let run ?(exe = exe) ?uid ~env args =
  let out = Filename.temp_file "inspect" ".out" and err = Filename.temp_file "inspect" ".err" in
  Option.iter
    (fun u ->
      Unix.chown out u (-1);
      Unix.chown err u (-1))
    uid;
  flush_all ();
  let pid =
    match Unix.fork () with
    | 0 -> (
        try
          let o = Unix.openfile out [ Unix.O_WRONLY ] 0
          and e = Unix.openfile err [ Unix.O_WRONLY ] 0 in
          let n = Unix.openfile "/dev/null" [ Unix.O_RDONLY ] 0 in
          Unix.dup2 n Unix.stdin;
          Unix.dup2 o Unix.stdout;
          Unix.dup2 e Unix.stderr;
          Option.iter
            (fun u ->
              Unix.setgid u;
              Unix.setuid u)
            uid;
          Unix.execve exe (Array.of_list (exe :: args)) (Array.append env (Unix.environment ()))
        with _ -> Unix._exit 127)
    | pid -> pid
  in
  let t0 = Unix.gettimeofday () in
  let rec wait () =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ when Unix.gettimeofday () -. t0 > 30. ->
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid);
        Alcotest.failf "consort %s: still running after 30 s" (String.concat " " args)
    | 0, _ ->
        Unix.sleepf 0.02;
        wait ()
    | _, Unix.WEXITED c -> c
    | _ -> Alcotest.failf "consort %s: killed" (String.concat " " args)
  in
  let code = wait () in
  let o = read_file out and e = read_file err in
  Sys.remove out;
  Sys.remove err;
  (code, o, e)

let spawn ~env args =
  let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let pid =
    Unix.create_process_env exe
      (Array.of_list (exe :: args))
      (Array.append env (Unix.environment ()))
      null null null
  in
  Unix.close null;
  started := pid :: !started;
  pid

let wait_until what f =
  let t0 = Unix.gettimeofday () in
  while not (f ()) do
    if Unix.gettimeofday () -. t0 > 30. then Alcotest.failf "timed out waiting for %s" what;
    Unix.sleepf 0.05
  done

let temp_dir () =
  let d = Filename.temp_file "consort-inspect" "" in
  Sys.remove d;
  Unix.mkdir d 0o755;
  d

let port () = 27000 + (Unix.getpid () mod 500 * 4)

(* A socket file nobody listens on: a member killed by SIGKILL. *)
let stale path =
  let s = Unix.socket Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  Unix.bind s (Unix.ADDR_UNIX path);
  Unix.close s

let status_without_setup () =
  let xdg = temp_dir () in
  Fun.protect ~finally:(fun () ->
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote xdg)))
  @@ fun () ->
  let env = [| "XDG_RUNTIME_DIR=" ^ xdg |] in
  let a = Printf.sprintf "127.0.0.1:%d" (port ())
  and b = Printf.sprintf "127.0.0.1:%d" (port () + 1) in
  let pa = spawn ~env [ "member"; "--group"; "insp"; "--no-input"; "--bind"; a; "--peers"; b ] in
  let pb = spawn ~env [ "member"; "--group"; "insp"; "--no-input"; "--bind"; b; "--peers"; a ] in
  let dir = xdg / "consort" in
  let sock pid = dir / Printf.sprintf "member-insp-%d.ctl" pid in
  (* The socket of a member killed by SIGKILL (its process gone): swept by the next member. *)
  let dead =
    match Unix.fork () with
    | 0 -> Unix._exit 0
    | pid ->
        ignore (Unix.waitpid [] pid);
        pid
  in
  wait_until "the directory" (fun () -> Sys.file_exists dir);
  stale (sock dead);
  let pc =
    spawn ~env
      [
        "member";
        "--group";
        "insp";
        "--no-input";
        "--bind";
        Printf.sprintf "127.0.0.1:%d" (port () + 3);
        "--peers";
        "none";
      ]
  in
  wait_until "the third member's socket" (fun () -> Sys.file_exists (sock pc));
  Alcotest.(check bool) "a dead member's socket swept" false (Sys.file_exists (sock dead));
  Unix.kill pc Sys.sigterm;
  ignore (Unix.waitpid [] pc);
  started := List.filter (( <> ) pc) !started;
  wait_until "both control sockets" (fun () ->
      Sys.file_exists (sock pa) && Sys.file_exists (sock pb));
  let st = Unix.stat dir in
  Alcotest.(check int) "the directory is 0700" 0o700 st.Unix.st_perm;
  stale (dir / "member-insp-1.ctl");
  (* Both members, in one view of two, as each sees it. *)
  wait_until "a view of two at both" (fun () ->
      let code, out, _ = run ~env [ "status" ] in
      code = 0
      && List.length (List.filter (fun l -> contains l "2 members") (String.split_on_char '\n' out))
         = 2);
  let code, out, err = run ~env [ "status" ] in
  Alcotest.(check int) ("status: " ^ err) 0 code;
  List.iter
    (fun s ->
      if not (contains out s) then Alcotest.failf "consort status does not say %S:\n%s" s out)
    [
      sock pa ^ ":";
      sock pb ^ ":";
      "group insp";
      a ^ "#";
      b ^ "#";
      dir / "member-insp-1.ctl: skipped: stale";
    ];
  let code, out, _ = run ~env [ "status"; "--json" ] in
  Alcotest.(check int) "status --json" 0 code;
  let j = Yojson.Safe.from_string out in
  let sockets = Yojson.Safe.Util.(member "sockets" j |> to_list) in
  let answered =
    List.filter_map
      (fun s ->
        match Yojson.Safe.Util.member "status" s with
        | `Null -> None
        | st -> Some (Yojson.Safe.Util.(member "path" s |> to_string), st))
      sockets
  in
  List.iter
    (fun pid ->
      match List.assoc_opt (sock pid) answered with
      | Some st ->
          Alcotest.(check string) "group" "insp" Yojson.Safe.Util.(member "group" st |> to_string);
          Alcotest.(check int)
            "members" 2
            (List.length Yojson.Safe.Util.(member "members" st |> to_list))
      | None -> Alcotest.failf "status --json has no answer from %s:\n%s" (sock pid) out)
    [ pa; pb ];
  if
    not
      (List.exists
         (fun s ->
           Yojson.Safe.Util.(member "path" s) = `String (dir / "member-insp-1.ctl")
           && Yojson.Safe.Util.(member "skipped" s) <> `Null)
         sockets)
  then Alcotest.failf "status --json does not skip the stale socket:\n%s" out;
  (* A member that leaves removes its socket. *)
  Unix.kill pa Sys.sigterm;
  ignore (Unix.waitpid [] pa);
  started := List.filter (( <> ) pa) !started;
  Alcotest.(check bool) "the socket of a member gone" false (Sys.file_exists (sock pa))

(* Another user's socket is never asked, though it answers: for user
   65534, a member of root's in its runtime directory is skipped, named as
   another user's. *)
let another_users_socket () =
  (* Under /tmp, and the program copied there: another user can reach neither a build tree nor a
     temporary directory of root's. *)
  let xdg = Filename.temp_file ~temp_dir:"/tmp" "consort-inspect" "" in
  Sys.remove xdg;
  Unix.mkdir xdg 0o755;
  Fun.protect ~finally:(fun () ->
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote xdg)))
  @@ fun () ->
  let nobody = 65534 in
  let dir = xdg / "consort" in
  Unix.mkdir dir 0o700;
  Unix.chown dir nobody nobody;
  Unix.chmod xdg 0o755;
  let a = Printf.sprintf "127.0.0.1:%d" (port () + 2) in
  let root_sock = dir / "member-root.ctl" in
  let _ =
    spawn ~env:[||]
      [
        "member";
        "--group";
        "other";
        "--no-input";
        "--bind";
        a;
        "--peers";
        "none";
        "--control";
        root_sock;
      ]
  in
  wait_until "root's member socket" (fun () -> Sys.file_exists root_sock);
  let env = [| "XDG_RUNTIME_DIR=" ^ xdg |] in
  let copy = xdg / "consort-copy" in
  if Sys.command (Printf.sprintf "cp %s %s" (Filename.quote exe) (Filename.quote copy)) <> 0 then
    Alcotest.fail "cannot copy the program";
  Unix.chmod copy 0o755;
  let code, out, err = run ~exe:copy ~uid:nobody ~env [ "status" ] in
  Alcotest.(check int) ("status as another user: " ^ err) 0 code;
  if not (contains out (root_sock ^ ": skipped: owned by user 0")) then
    Alcotest.failf "root's socket is not skipped as another user's:\n%s%s" out err;
  (* Root asks it. *)
  let code, out, _ = run ~env [ "status" ] in
  Alcotest.(check int) "status as root" 0 code;
  if not (contains out "group other") then Alcotest.failf "root does not see its member:\n%s" out

(* No socket at all: one line saying where it looked, exit 0. *)
let nothing_found () =
  let xdg = temp_dir () in
  Fun.protect ~finally:(fun () -> ignore (Sys.command ("rm -rf " ^ Filename.quote xdg)))
  @@ fun () ->
  let code, out, _ = run ~env:[| "XDG_RUNTIME_DIR=" ^ xdg |] [ "status" ] in
  Alcotest.(check int) "exit" 0 code;
  if (not (Sys.file_exists "/run/consort")) && not (contains out ("looked in " ^ (xdg / "consort")))
  then Alcotest.failf "status with nothing to find: %S" out

(* A runtime directory that other users may enter (0755, made by someone
   else's mistake): the member puts no socket there, and says why. *)
let open_directory_refused () =
  let xdg = temp_dir () in
  Fun.protect ~finally:(fun () ->
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote xdg)))
  @@ fun () ->
  let dir = xdg / "consort" in
  Unix.mkdir dir 0o755;
  Unix.chmod dir 0o755;
  let env = [| "XDG_RUNTIME_DIR=" ^ xdg |] in
  let a = Printf.sprintf "127.0.0.1:%d" (port () + 3) in
  let err = Filename.temp_file "inspect" ".err" in
  let e = Unix.openfile err [ Unix.O_WRONLY; Unix.O_TRUNC ] 0 in
  let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let pid =
    Unix.create_process_env exe
      [| exe; "member"; "--group"; "open"; "--no-input"; "--bind"; a; "--peers"; "none" |]
      (Array.append env (Unix.environment ()))
      null null e
  in
  Unix.close null;
  Unix.close e;
  started := pid :: !started;
  wait_until "the member's warning" (fun () -> contains (read_file err) "open to other users");
  Sys.remove err;
  Alcotest.(check (list string))
    "no socket in an open directory" []
    (Array.to_list (Sys.readdir dir))

(* status --group NAME --all: two members of group "all" have control
   sockets here, the third none (as a member on another machine would): it
   is asked through the group by one of the others, and its status comes
   back. A member of another group is left out. Then the third is stopped
   (SIGSTOP): it is named as not answering, with the reason, and the
   others still answer. *)
let group_all () =
  let xdg = temp_dir () in
  let stopped = ref [] in
  Fun.protect ~finally:(fun () ->
      List.iter (fun p -> try Unix.kill p Sys.sigcont with Unix.Unix_error _ -> ()) !stopped;
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote xdg)))
  @@ fun () ->
  let env = [| "XDG_RUNTIME_DIR=" ^ xdg |] in
  let addr i = Printf.sprintf "127.0.0.1:%d" (port () + i) in
  let peers = String.concat "," [ addr 0; addr 1; addr 2 ] in
  let member ?(extra = []) group i =
    spawn ~env
      ([
         "member";
         "--group";
         group;
         "--no-input";
         "--bind";
         addr i;
         "--peers";
         peers;
         "--params";
         "suspect.timeout=120s";
       ]
      @ extra)
  in
  let _ = member "all" 0 and _ = member "all" 1 in
  let p2 = member ~extra:[ "--control"; "none" ] "all" 2 in
  let _ = member "other" 3 in
  let answer = ref `Null in
  let open Yojson.Safe.Util in
  let all_json () =
    match run ~env [ "status"; "--group"; "all"; "--all"; "--json" ] with
    | 0, out, _ ->
        let j = Yojson.Safe.from_string out in
        answer := j;
        Some j
    | _ -> None
  in
  wait_until "a view of three, two of them here, one through the group" (fun () ->
      match all_json () with
      | Some j -> (
          match member "members" j |> to_list with
          | [ a; b; c ] ->
              List.for_all
                (fun m -> List.length (member "status" m |> member "members" |> to_list) = 3)
                [ a; b; c ]
          | _ -> false)
      | None -> false);
  let ms = member "members" !answer |> to_list in
  let local = List.filter (fun m -> member "path" m <> `Null) ms
  and remote = List.filter (fun m -> member "through" m <> `Null) ms in
  Alcotest.(check int) "two asked here" 2 (List.length local);
  (match remote with
  | [ m ] ->
      let me = member "status" m |> member "me" |> to_string in
      if not (contains me (addr 2 ^ "#")) then Alcotest.failf "through the group: %s" me;
      Alcotest.(check bool)
        "its status as its member reports it (quorum field)" true
        (member "status" m |> to_assoc |> List.mem_assoc "quorum")
  | _ -> Alcotest.failf "one member through the group: %s" (Yojson.Safe.to_string !answer));
  Alcotest.(check int) "none elsewhere" 0 (List.length (member "elsewhere" !answer |> to_list));
  List.iter
    (fun m ->
      if member "status" m |> member "group" <> `String "all" then
        Alcotest.failf "a member of another group: %s" (Yojson.Safe.to_string m))
    ms;
  let code, out, _ = run ~env [ "status"; "--group"; "all"; "--all" ] in
  Alcotest.(check int) "status --group --all" 0 code;
  if
    not
      (contains out "group all: 3 members answered, 2 on this machine and 1 through the group"
      && contains out "(through the group, asked by 127.0.0.1:")
  then Alcotest.failf "status --group all --all:\n%s" out;
  (* The third stops answering. *)
  Unix.kill p2 Sys.sigstop;
  stopped := [ p2 ];
  (match all_json () with
  | None -> Alcotest.fail "status --all with a member stopped"
  | Some j -> (
      Alcotest.(check int) "two answer" 2 (List.length (member "members" j |> to_list));
      match member "unanswered" j |> to_list with
      | [ u ] ->
          if
            not
              (contains (member "me" u |> to_string) (addr 2 ^ "#")
              && contains (member "error" u |> to_string) "no answer within")
          then Alcotest.failf "unanswered: %s" (Yojson.Safe.to_string u)
      | _ -> Alcotest.failf "one unanswered: %s" (Yojson.Safe.to_string j)));
  let code, out, _ = run ~env [ "status"; "--group"; "all"; "--all" ] in
  Alcotest.(check int) "status --group --all, one stopped" 0 code;
  if not (contains out "; no answer from 127.0.0.1:") then
    Alcotest.failf "status --group all --all, one stopped:\n%s" out;
  let code, _, err = run ~env [ "status"; "--all" ] in
  Alcotest.(check int) "--all without --group: refused" 2 code;
  if not (contains err "--all needs --group") then Alcotest.failf "%S" err

(* Quorum state, as corosync-quorumtool -s shows it: a member of a group of
   3 expected votes, alone, is not quorate. *)
let quorum () =
  let xdg = temp_dir () in
  Fun.protect ~finally:(fun () ->
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote xdg)))
  @@ fun () ->
  let env = [| "XDG_RUNTIME_DIR=" ^ xdg |] in
  let a = Printf.sprintf "127.0.0.1:%d" (port () + 2) in
  let pid =
    spawn ~env
      [
        "member";
        "--group";
        "q";
        "--no-input";
        "--bind";
        a;
        "--peers";
        "none";
        "--props";
        "vsync,Primary";
        "--params";
        "primary.expected=3";
      ]
  in
  let sock = xdg / "consort" / Printf.sprintf "member-q-%d.ctl" pid in
  wait_until "the socket" (fun () -> Sys.file_exists sock);
  let q = ref `Null in
  wait_until "a quorum state" (fun () ->
      match run ~env [ "status"; "--control"; sock; "--json" ] with
      | 0, out, _ -> (
          match Yojson.Safe.Util.member "quorum" (Yojson.Safe.from_string out) with
          | `Assoc _ as j ->
              q := j;
              true
          | _ -> false)
      | _ -> false);
  let get k = Yojson.Safe.Util.member k !q in
  Alcotest.(check bool) "not quorate" true (get "quorate" = `Bool false);
  Alcotest.(check bool) "1 vote" true (get "votes" = `Int 1);
  Alcotest.(check bool) "3 expected" true (get "expected" = `Int 3);
  Alcotest.(check bool) "2 needed" true (get "needed" = `Int 2);
  let code, out, _ = run ~env [ "status"; "--control"; sock ] in
  Alcotest.(check int) "status" 0 code;
  if not (contains out "quorum: not quorate (not primary), 1 of 3 expected votes, 2 needed") then
    Alcotest.failf "status does not show the quorum:\n%s" out

(* A member of [group] at [me] with [peer], its control socket at [sock],
   its standard output into [out] (or /dev/null). *)
let start_member ~group ~params ?out me peer sock =
  let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let o =
    match out with
    | Some f -> Unix.openfile f [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC ] 0o600
    | None -> null
  in
  let pid =
    Unix.create_process exe
      [|
        exe;
        "member";
        "--group";
        group;
        "--no-input";
        "--bind";
        me;
        "--peers";
        peer;
        "--params";
        params;
        "--control";
        sock;
      |]
      null o null
  in
  if o <> null then Unix.close o;
  Unix.close null;
  started := pid :: !started;
  pid

(* consort cast --control into a member whose flow control is full (a
   small window, the other member stopped by SIGSTOP so that no credit comes
   back): the member's refusal reaches the operator, one line and exit 2,
   never "ok"; nothing refused is delivered. *)
let flow_control_refusal () =
  let dir = temp_dir () in
  Fun.protect ~finally:(fun () ->
      List.iter (fun p -> try Unix.kill p Sys.sigcont with Unix.Unix_error _ -> ()) !started;
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  let a = Printf.sprintf "127.0.0.1:%d" (port ())
  and b = Printf.sprintf "127.0.0.1:%d" (port () + 1) in
  let params = "mflow.window=1024,mflow.queue=1024,suspect.timeout=120s" in
  let log = dir / "a.out" in
  let member = start_member ~group:"flow" ~params in
  let sa = dir / "a.sock" in
  let _ = member ~out:log a b sa in
  let pb = member b a (dir / "b.sock") in
  wait_until "a view of two" (fun () ->
      match run ~env:[||] [ "status"; "--control"; sa ] with
      | 0, out, _ -> contains out "2 members"
      | _ -> false);
  Unix.kill pb Sys.sigstop;
  let text = String.make 400 'f' in
  let answers = List.init 16 (fun _ -> run ~env:[||] [ "cast"; "--control"; sa; text ]) in
  let refused =
    List.filter (fun (code, _, err) -> code = 2 && contains err "flow control") answers
  in
  List.iter
    (fun (code, out, err) ->
      match code with
      | 0 -> if String.trim out <> "ok" then Alcotest.failf "a cast answered %S" out
      | 2 ->
          if List.length (String.split_on_char '\n' (String.trim err)) <> 1 || out <> "" then
            Alcotest.failf "a refusal not in one line: %S %S" out err
      | c -> Alcotest.failf "cast: exit %d: %s" c err)
    answers;
  (* 16 casts of 400 bytes against 2048 bytes of window and queue: most are refused. *)
  if List.length refused < 8 then
    Alcotest.failf "%d of 16 casts refused for flow control" (List.length refused);
  let ok = List.length answers - List.length refused in
  let delivered =
    List.length
      (List.filter
         (fun l -> contains l "cast from" && contains l text)
         (String.split_on_char '\n' (read_file log)))
  in
  Unix.kill pb Sys.sigcont;
  if delivered > ok then Alcotest.failf "%d casts delivered, %d accepted" delivered ok

(* A control socket asked one line, its answer read. *)
let control_request sock line =
  let s = Unix.socket Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  Fun.protect ~finally:(fun () -> Unix.close s) @@ fun () ->
  Unix.connect s (Unix.ADDR_UNIX sock);
  let ic = Unix.in_channel_of_descr s and oc = Unix.out_channel_of_descr s in
  output_string oc (line ^ "\n");
  flush oc;
  input_line ic

(* consort cast --control into a member that is leaving (it asked to leave
   while the other member, stopped by SIGSTOP, cannot answer the flush): the
   refusal reaches the operator, one line naming it and exit 2, never "ok";
   nothing is delivered. *)
let leaving_refusal () =
  let dir = temp_dir () in
  Fun.protect ~finally:(fun () ->
      List.iter (fun p -> try Unix.kill p Sys.sigcont with Unix.Unix_error _ -> ()) !started;
      kill_started ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  let a = Printf.sprintf "127.0.0.1:%d" (port () + 2)
  and b = Printf.sprintf "127.0.0.1:%d" (port () + 3) in
  let member = start_member ~group:"leaving" ~params:"suspect.timeout=120s" in
  let sock x = dir / (x ^ ".sock") and out x = dir / (x ^ ".out") in
  let pa = member ~out:(out "a") a b (sock "a") in
  let pb = member ~out:(out "b") b a (sock "b") in
  let status = ref `Null in
  wait_until "a view of two" (fun () ->
      match run ~env:[||] [ "status"; "--json"; "--control"; sock "a" ] with
      | 0, out, _ ->
          status := Yojson.Safe.from_string out;
          List.length Yojson.Safe.Util.(member "members" !status |> to_list) = 2
      | _ -> false);
  (* The leaver is the member that does not coordinate: its leave waits on
     the coordinator, which is stopped. *)
  let coord = Yojson.Safe.Util.(member "coordinator" !status |> to_string) in
  let leaver, stopped = if contains coord (a ^ "#") then ("b", pa) else ("a", pb) in
  Unix.kill stopped Sys.sigstop;
  Alcotest.(check string) "leave" {|{"ok":true}|} (control_request (sock leaver) "leave");
  let text = "after the leave" in
  let code, out_, err = run ~env:[||] [ "cast"; "--control"; sock leaver; text ] in
  Alcotest.(check int) ("cast while leaving: " ^ out_ ^ err) 2 code;
  Alcotest.(check string) "nothing on standard output" "" out_;
  if List.length (String.split_on_char '\n' (String.trim err)) <> 1 then
    Alcotest.failf "the refusal is not one line: %S" err;
  if not (contains err "leaving") then Alcotest.failf "the refusal does not say why: %S" err;
  Unix.kill stopped Sys.sigcont;
  let delivered =
    List.exists
      (fun x ->
        List.exists
          (fun l -> contains l "cast from" && contains l text)
          (String.split_on_char '\n' (read_file (out x))))
      [ "a"; "b" ]
  in
  Alcotest.(check bool) "the refused cast is not delivered" false delivered

let () =
  Alcotest.run "inspect"
    [
      ( "status",
        [
          Alcotest.test_case "every member without setup, stale sockets skipped" `Quick
            status_without_setup;
          Alcotest.test_case "another user's socket is not asked" `Quick another_users_socket;
          Alcotest.test_case "nothing to find" `Quick nothing_found;
          Alcotest.test_case "a runtime directory open to others is not used" `Quick
            open_directory_refused;
          Alcotest.test_case "quorum state, text and JSON" `Quick quorum;
          Alcotest.test_case "status --group NAME --all" `Quick group_all;
          Alcotest.test_case "cast refused by flow control: exit 2, one line" `Quick
            flow_control_refusal;
          Alcotest.test_case "cast refused while leaving: exit 2, one line" `Quick leaving_refusal;
        ] );
    ]
