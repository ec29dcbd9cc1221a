(* The web console in a real headless browser (Debian's chromium): three
   members of a group on loopback, the first serving its console; the page,
   once its script has run, shows the two others joined, then one of them
   excluded (silent for 1.0 s) after it is killed, the roles, the quorum,
   the flow control state and the counters. A screenshot is saved (to
   $CONSORT_CONSOLE_SHOT when set: make console-shot writes doc/console.png
   that way). Every wait polls with a deadline. *)

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

let index_of s sub =
  let n = String.length s and m = String.length sub in
  let rec go i =
    if i + m > n then None else if String.sub s i m = sub then Some i else go (i + 1)
  in
  go 0

let count s sub =
  let n = String.length s and m = String.length sub in
  let rec go i k =
    if i + m > n then k else if String.sub s i m = sub then go (i + m) (k + 1) else go (i + 1) k
  in
  go 0 0

let file s =
  let ic = open_in_bin s in
  let t = really_input_string ic (in_channel_length ic) in
  close_in ic;
  t

let exe =
  let d = Filename.dirname Sys.executable_name in
  let d = if Filename.is_relative d then Filename.concat (Sys.getcwd ()) d else d in
  Filename.concat d "../../bin/main.exe"

let chromium = match Sys.getenv_opt "CHROMIUM" with Some c -> c | None -> "/usr/bin/chromium"

let dir =
  Filename.concat (Filename.get_temp_dir_name ())
    (Printf.sprintf "console-browser-%d" (Unix.getpid ()))

(* Runs [prog args] in a process group of its own, its output to [out];
   after [seconds] the whole group is killed. [true] if it exited 0. *)
let run_bounded ~seconds prog args out =
  let o = Unix.openfile out [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600 in
  let err = Filename.concat dir "chromium.err" in
  let e = Unix.openfile err [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600 in
  match Unix.fork () with
  | 0 -> (
      ignore (Unix.setsid ());
      Unix.dup2 o Unix.stdout;
      Unix.dup2 e Unix.stderr;
      try Unix.execv prog (Array.of_list (prog :: args)) with _ -> Unix._exit 127)
  | pid ->
      Unix.close o;
      Unix.close e;
      let deadline = Unix.gettimeofday () +. seconds in
      let rec wait () =
        match Unix.waitpid [ WNOHANG ] pid with
        | 0, _ ->
            if Unix.gettimeofday () > deadline then (
              (try Unix.kill (-pid) Sys.sigkill with Unix.Unix_error _ -> ());
              ignore (Unix.waitpid [] pid);
              false)
            else (
              Unix.sleepf 0.05;
              wait ())
        | _, WEXITED 0 -> true
        | _ -> false
      in
      wait ()

let browser_flags profile =
  [
    "--headless";
    "--no-sandbox";
    "--disable-gpu";
    "--disable-quic";
    "--no-first-run";
    "--disable-background-networking";
    "--disable-component-update";
    "--disable-sync";
    "--hide-scrollbars";
    "--user-data-dir=" ^ profile;
    "--window-size=1280,1000";
    (* Time enough, in the page's virtual time, for its fetches and a few polls. *)
    "--virtual-time-budget=4000";
  ]

let runs = ref 0

(* The DOM after the page's script ran. *)
let dom url =
  incr runs;
  let out = Filename.concat dir "dom.html" in
  let profile = Filename.concat dir (Printf.sprintf "profile%d" !runs) in
  if run_bounded ~seconds:25. chromium (browser_flags profile @ [ "--dump-dom"; url ]) out then
    Some (file out)
  else None

let rec until ?(deadline = Unix.gettimeofday () +. 25.) what url f =
  let d = dom url in
  match d with
  | Some d when f d -> d
  | _ ->
      if Unix.gettimeofday () > deadline then
        Alcotest.failf
          "timed out waiting for the page to show %s; the last page:\n%s\nchromium:\n%s" what
          (match d with Some d -> d | None -> "(chromium failed)")
          (try file (Filename.concat dir "chromium.err") with Sys_error _ -> "")
      else until ~deadline what url f

(* The row of the members' table for [id]. *)
let member_row d id =
  match index_of d (Printf.sprintf "<tr data-member=\"%s\">" id) with
  | None -> None
  | Some i -> (
      let rest = String.sub d i (String.length d - i) in
      match index_of rest "</tr>" with Some j -> Some (String.sub rest 0 j) | None -> None)

(* The highest rate the chart shows (its data-peak-LABEL attribute). *)
let peak d label =
  let key = Printf.sprintf "data-peak-%s=\"" label in
  match index_of d key with
  | None -> 0.
  | Some i ->
      let rest = String.sub d (i + String.length key) (String.length d - i - String.length key) in
      Option.value ~default:0.
        (match index_of rest "\"" with
        | Some j -> float_of_string_opt (String.sub rest 0 j)
        | None -> None)

let spawn args out =
  let o = Unix.openfile out [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600 in
  let null = Unix.openfile "/dev/null" [ O_RDONLY ] 0 in
  let pid = Unix.create_process exe (Array.of_list (exe :: args)) null o o in
  Unix.close o;
  Unix.close null;
  pid

let rec wait_for ?(deadline = Unix.gettimeofday () +. 20.) what f =
  if f () then ()
  else if Unix.gettimeofday () > deadline then Alcotest.failf "timed out waiting for %s" what
  else (
    Unix.sleepf 0.05;
    wait_for ~deadline what f)

let params = "suspect.timeout=1s,suspect.verify=300ms,suspect.grace=300ms,gmp.flush_timeout=1s"

let console () =
  if not (Sys.file_exists chromium) then
    Alcotest.failf "%s not found: the console test needs Debian's chromium (make deps installs it)"
      chromium;
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let key = Filename.concat dir "key" in
  (* Ports: a window of 10 from 30000 chosen by the process id (as test_console). *)
  let base = 30000 + (10 * (Unix.getpid () mod 100)) in
  let port n = base + n in
  let a = Printf.sprintf "127.0.0.1:%d" (port 1)
  and b = Printf.sprintf "127.0.0.1:%d" (port 2)
  and c = Printf.sprintf "127.0.0.1:%d" (port 3) in
  let member ?(extra = []) bind out =
    spawn
      ([
         "member";
         "--group";
         "console";
         "--bind";
         bind;
         "--peers";
         String.concat "," (List.filter (( <> ) bind) [ a; b; c ]);
         "--no-input";
         "--props";
         "vsync,Total,Primary,Privacy";
         "--key";
         key;
         "--params";
         params ^ ",primary.expected=3";
       ]
      @ extra)
      (Filename.concat dir out)
  in
  let ctl = Filename.concat dir "a.ctl" in
  let pids = ref [] in
  Fun.protect ~finally:(fun () ->
      List.iter
        (fun p ->
          (try Unix.kill p Sys.sigkill with Unix.Unix_error _ -> ());
          ignore (Unix.waitpid [] p))
        !pids;
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  if
    Sys.command (Printf.sprintf "%s keygen %s >/dev/null" (Filename.quote exe) (Filename.quote key))
    <> 0
  then Alcotest.fail "consort keygen";
  let pa = member ~extra:[ "--http"; "127.0.0.1:0"; "--control"; ctl ] a "a.out" in
  pids := [ pa ];
  let http = ref 0 in
  wait_for "the console's address" (fun () ->
      let s = file (Filename.concat dir "a.out") in
      match index_of s "console at http://127.0.0.1:" with
      | Some i ->
          Scanf.sscanf
            (String.sub s i (String.length s - i))
            "console at http://127.0.0.1:%d/"
            (fun p -> http := p);
          true
      | None -> false);
  let url = Printf.sprintf "http://127.0.0.1:%d/" !http in
  (* Alone, with 3 votes expected: not primary. *)
  let d = until "a alone, not primary" url (fun d -> contains d "not primary (1 vote") in
  let id_of out =
    let s = file (Filename.concat dir out) in
    match index_of s "member " with
    | Some i -> Scanf.sscanf (String.sub s i (String.length s - i)) "member %s " (fun x -> x)
    | None -> ""
  in
  let ida = id_of "a.out" in
  Alcotest.(check bool) "a's row" true (member_row d ida <> None);
  let pb = member b "b.out" in
  pids := pb :: !pids;
  let pc = member c "c.out" in
  pids := pc :: !pids;
  wait_for "b and c started" (fun () -> id_of "b.out" <> "" && id_of "c.out" <> "");
  let idb = id_of "b.out" and idc = id_of "c.out" in
  let d =
    until "b and c joined" url (fun d ->
        member_row d idb <> None
        && member_row d idc <> None
        && contains d "id=\"quorum-console\">primary (3 votes of 2 needed")
  in
  List.iter
    (fun id ->
      if not (contains d (Printf.sprintf "%s joined" id) || contains d (id ^ " merged")) then
        Alcotest.failf "the timeline does not show %s joining:\n%s" id d)
    [ idb; idc ];
  (* c dies: excluded for its silence. *)
  Unix.kill pc Sys.sigkill;
  ignore (Unix.waitpid [] pc);
  pids := List.filter (( <> ) pc) !pids;
  let excluded d =
    match index_of d (idc ^ " excluded: ") with
    | None -> None
    | Some i -> (
        let rest = String.sub d i (String.length d - i) in
        match index_of rest "<" with Some j -> Some (String.sub rest 0 j) | None -> None)
  in
  let d = until "c excluded" url (fun d -> member_row d idc = None && excluded d <> None) in
  (* Why, as the suspicion said it: its silence seen here ("silent for 1.0 s") or by b first
     ("suspected by 1 (heartbeat) and silent here too", "... though heard here"). *)
  (match excluded d with
  | Some why
    when let r =
           String.sub why (String.length idc + 11) (String.length why - String.length idc - 11)
         in
         contains r "silent for " || contains r "suspected by " ->
      ()
  | why -> Alcotest.failf "c's exclusion: %S" (Option.value ~default:"" why));
  (* Casts through a's control socket: the counters and rates move. *)
  for i = 1 to 30 do
    match Consort_ops.Serve.request (Unix.ADDR_UNIX ctl) (Printf.sprintf "cast hello %d" i) with
    | Ok r when contains r "\"ok\":true" -> ()
    | Ok r | Error r -> Alcotest.failf "cast %d: %s" i r
  done;
  (* Datagrams without the group's key, from a stranger: the seal drops them. *)
  let u = Unix.socket PF_INET SOCK_DGRAM 0 in
  for i = 1 to 5 do
    let junk = Printf.sprintf "not sealed %d" i in
    ignore
      (Unix.sendto_substring u junk 0 (String.length junk) []
         (ADDR_INET (Unix.inet_addr_loopback, port 1)))
  done;
  Unix.close u;
  let d =
    until "the casts counted and the stranger's datagrams dropped" url (fun d ->
        contains d "<td>sent</td><td class=\"nonzero\">30</td>"
        && contains d "<td class=\"nonzero drop\">5</td>"
        && peak d "delivered" > 0.
        && peak d "sent" > 0.)
  in
  (match member_row d ida with
  | Some r ->
      List.iter
        (fun role -> if not (contains r role) then Alcotest.failf "a's roles lack %s: %s" role r)
        [ "this member"; "coordinator"; "sequencer" ]
  | None -> Alcotest.fail "a's row is gone");
  (match member_row d idb with
  | Some r ->
      if contains r "coordinator" || contains r "this member" then Alcotest.failf "b's roles: %s" r
  | None -> Alcotest.fail "b's row is gone");
  Alcotest.(check int) "two members in the table" 2 (count d "<tr data-member=");
  List.iter
    (fun s -> if not (contains d s) then Alcotest.failf "the page lacks %S:\n%s" s d)
    [
      "class=\"ok\">live</span>";
      "state ok\" id=\"quorum-console\">primary (2 votes of 2 needed, 3 expected)";
      "state ok\">sending";
      "<th>seal</th><td>Privacy, rekey</td>";
      "<table class=\"seal\">";
      "<svg class=\"chart\"";
      "<td>group</td><td>delivered</td>";
    ];
  (* The screenshot. *)
  let shot =
    match Sys.getenv_opt "CONSORT_CONSOLE_SHOT" with
    | Some f -> f
    | None -> Filename.concat dir "console.png"
  in
  let profile = Filename.concat dir "profile-shot" in
  let ok =
    run_bounded ~seconds:25. chromium
      (browser_flags profile @ [ "--screenshot=" ^ shot; url ])
      (Filename.concat dir "shot.out")
  in
  Alcotest.(check bool) "chromium took the screenshot" true ok;
  let png = file shot in
  Alcotest.(check string) "a PNG" "\137PNG\r\n\026\n" (String.sub png 0 8);
  let be32 i =
    (Char.code png.[i] lsl 24)
    lor (Char.code png.[i + 1] lsl 16)
    lor (Char.code png.[i + 2] lsl 8)
    lor Char.code png.[i + 3]
  in
  Alcotest.(check (pair int int)) "1280x1000" (1280, 1000) (be32 16, be32 20);
  Printf.printf "screenshot: %s (%d bytes); chromium ran %d times\n" shot (String.length png) !runs

let () =
  Alcotest.run "console-browser" [ ("chromium", [ Alcotest.test_case "console" `Quick console ]) ]
