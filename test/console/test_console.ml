(* The web console without a browser: the bounded view history and the
   reasons it gives, the page's routes and that it fetches nothing from
   elsewhere, the refusal of an address off loopback, and a real member's
   console under hostile clients (an oversize request line, more
   connections than its bound, partial requests held open): each bounded,
   one line logged, the member still answering. *)

module Loop = Consort_engine.Loop
module Console = Consort_ops.Console
module Serve = Consort_ops.Serve

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

let count s sub =
  let n = String.length s and m = String.length sub in
  let rec go i k =
    if i + m > n then k else if String.sub s i m = sub then go (i + m) (k + 1) else go (i + 1) k
  in
  go 0 0

(* {1 The history} *)

let entry i =
  {
    Console.t = float_of_int i;
    vid = Printf.sprintf "%d:a" i;
    ltime = i;
    members = [ "a" ];
    coordinator = "a";
    changes = [];
  }

let history_bounded () =
  let h = Console.history () in
  Alcotest.(check int) "default bound" 64 (Console.max h);
  for i = 0 to 199 do
    Console.record h (entry i)
  done;
  let l = Console.entries h in
  Alcotest.(check int) "only the last 64 kept" 64 (List.length l);
  Alcotest.(check (list int))
    "the last 64, oldest first"
    (List.init 64 (fun i -> 136 + i))
    (List.map (fun e -> e.Console.ltime) l);
  let h = Console.history ~max:3 () in
  for i = 0 to 9 do
    Console.record h (entry i)
  done;
  Alcotest.(check (list int))
    "a bound of 3" [ 7; 8; 9 ]
    (List.map (fun e -> e.Console.ltime) (Console.entries h));
  match Console.history_json h with
  | `List [ _; _; `Assoc l ] ->
      Alcotest.(check bool) "json names the view" true (List.assoc "view" l = `String "9:a")
  | j -> Alcotest.failf "history_json: %s" (Yojson.Safe.to_string j)

let rates () =
  let r = Console.rates () in
  Console.sample r ~t:100. ~sent:0 ~delivered:0;
  Console.sample r ~t:101. ~sent:10 ~delivered:20;
  Console.sample r ~t:103. ~sent:10 ~delivered:40;
  let got j =
    match j with
    | `List l ->
        List.map
          (function
            | `Assoc a -> (
                match (List.assoc "t" a, List.assoc "sent" a, List.assoc "delivered" a) with
                | `Float t, `Float s, `Float d -> (t, s, d)
                | _ -> Alcotest.fail "not floats")
            | _ -> Alcotest.fail "not an object")
          l
    | _ -> Alcotest.fail "not a list"
  in
  Alcotest.(check (list (triple (float 1e-9) (float 1e-9) (float 1e-9))))
    "a rate for each interval"
    [ (101., 10., 20.); (103., 0., 10.) ]
    (got (Console.rates_json r));
  let r = Console.rates ~span:60 () in
  for i = 0 to 199 do
    Console.sample r ~t:(float_of_int i) ~sent:i ~delivered:(2 * i)
  done;
  let l = got (Console.rates_json r) in
  Alcotest.(check int) "the last 60 intervals" 60 (List.length l);
  Alcotest.(check (triple (float 1e-9) (float 1e-9) (float 1e-9)))
    "the newest last" (199., 1., 2.) (List.nth l 59)

let reasons () =
  let show l = List.map (fun c -> (c.Console.member, c.Console.what)) l in
  let pair = Alcotest.(list (pair string string)) in
  Alcotest.check pair "one joined"
    [ ("b", "joined") ]
    (show (Console.changes ~joined:[ "b" ] ~left:[] ~why:[]));
  Alcotest.check pair "a view of two merged in"
    [ ("c", "merged"); ("d", "merged") ]
    (show (Console.changes ~joined:[ "c"; "d" ] ~left:[] ~why:[]));
  Alcotest.check pair "left and excluded, with the reason given"
    [ ("b", "left"); ("c", "excluded: silent for 5.0 s") ]
    (show
       (Console.changes ~joined:[] ~left:[ "b"; "c" ]
          ~why:[ ("b", "left"); ("c", "excluded: silent for 5.0 s") ]));
  Alcotest.check pair "no reason: left"
    [ ("e", "left") ]
    (show (Console.changes ~joined:[] ~left:[ "e" ] ~why:[]))

(* {1 Routes and the page} *)

let routes () =
  let group = `Assoc [ ("group", `String "g"); ("members", `List [ `String "a" ]) ] in
  let answer = Console.answer ~node:"test" (fun () -> [ group ]) in
  let status r = String.sub r 9 3 in
  let body r =
    let i = ref 0 in
    while String.sub r !i 4 <> "\r\n\r\n" do
      incr i
    done;
    String.sub r (!i + 4) (String.length r - !i - 4)
  in
  let page = answer "GET / HTTP/1.1\r\nHost: x" in
  Alcotest.(check string) "GET /" "200" (status page);
  Alcotest.(check bool) "html" true (contains page "Content-Type: text/html");
  Alcotest.(check string) "the page whole" Console.page (body page);
  let api = answer "GET /api/status?x=1 HTTP/1.1" in
  Alcotest.(check string) "GET /api/status" "200" (status api);
  (match Yojson.Safe.from_string (body api) with
  | `Assoc l -> (
      Alcotest.(check bool) "node" true (List.assoc "node" l = `String "test");
      match List.assoc "groups" l with
      | `List [ g ] -> Alcotest.(check bool) "the group" true (g = group)
      | _ -> Alcotest.fail "groups")
  | _ -> Alcotest.fail "not an object");
  Alcotest.(check string) "404" "404" (status (answer "GET /etc/passwd HTTP/1.1"));
  Alcotest.(check string) "read-only" "405" (status (answer "POST /api/status HTTP/1.1"));
  Alcotest.(check string) "garbage" "400" (status (answer "\000\001"))

(* Works offline: nothing is loaded from another origin. *)
let page_self_contained () =
  let p = String.lowercase_ascii Console.page in
  List.iter
    (fun bad ->
      if contains p bad then Alcotest.failf "the page refers to something outside: %S" bad)
    [
      "src=\"http"; "href=\"http"; "src=\"//"; "href=\"//"; "@import"; "url("; "<link"; "@font-face";
    ];
  (* Scripts are inline only: every <script has no src. *)
  Alcotest.(check int) "one inline script" 1 (count p "<script");
  Alcotest.(check bool) "polls the api" true (contains p "fetch(\"/api/status\"");
  (* Data is written as text, never as markup. *)
  Alcotest.(check int) "no innerHTML" 0 (count p "innerhtml")

let addresses () =
  let ok a p = Console.check_address ~flag:"--http" ~public:p a = Ok () in
  Alcotest.(check bool) "127.0.0.1" true (ok "127.0.0.1:8080" false);
  Alcotest.(check bool) "127.1.2.3" true (ok "127.1.2.3:0" false);
  Alcotest.(check bool) "::1" true (ok "[::1]:8080" false);
  Alcotest.(check bool) "localhost" true (ok "localhost:8080" false);
  Alcotest.(check bool) "0.0.0.0 refused" false (ok "0.0.0.0:8080" false);
  Alcotest.(check bool) "10.1.1.1 refused" false (ok "10.1.1.1:8080" false);
  Alcotest.(check bool) "0.0.0.0 with --http-public" true (ok "0.0.0.0:8080" true)

(* {1 Real members} *)

(* Ports: a window of 10 from 30000, chosen by the process id, so that two runs
   at once (make test and the mutants' baseline) stay apart. *)
let base = 30000 + (10 * (Unix.getpid () mod 100))
let addr n = Printf.sprintf "127.0.0.1:%d" (base + n)

let exe =
  let d = Filename.dirname Sys.executable_name in
  let d = if Filename.is_relative d then Filename.concat (Sys.getcwd ()) d else d in
  Filename.concat d "../../bin/main.exe"

let file s =
  let ic = open_in_bin s in
  let t = really_input_string ic (in_channel_length ic) in
  close_in ic;
  t

(* The exit code of [pid]; a command that should refuse at once but runs (a
   member or a daemon serving) is stopped after 10 s: -2. *)
let wait_exit pid =
  let deadline = Unix.gettimeofday () +. 10. in
  let rec wait () =
    match Unix.waitpid [ WNOHANG ] pid with
    | 0, _ when Unix.gettimeofday () > deadline ->
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid);
        -2
    | 0, _ ->
        Unix.sleepf 0.02;
        wait ()
    | _, WEXITED c -> c
    | _ -> -1
  in
  wait ()

let run_cmd args =
  let err = Filename.temp_file "console" ".err" in
  let e = Unix.openfile err [ O_WRONLY; O_TRUNC ] 0o600 in
  let null = Unix.openfile "/dev/null" [ O_RDWR ] 0 in
  let pid = Unix.create_process exe (Array.of_list (exe :: args)) null null e in
  Unix.close e;
  Unix.close null;
  let code = wait_exit pid in
  let s = file err in
  Sys.remove err;
  (code, s)

let refused_off_loopback () =
  List.iter
    (fun http ->
      let code, err =
        run_cmd [ "member"; "--group"; "cg"; "--bind"; addr 1; "--no-input"; "--http"; http ]
      in
      if code = -2 then Alcotest.failf "--http %s: still running after 10 s, not refused" http;
      Alcotest.(check int) ("exit of --http " ^ http) 2 code;
      Alcotest.(check int) "one line" 1 (count err "\n");
      if not (contains err "--http-public") then Alcotest.failf "stderr: %S" err)
    [ "0.0.0.0:0"; "192.0.2.1:8080" ]

let rec until ?(deadline = Unix.gettimeofday () +. 20.) what f =
  if f () then ()
  else if Unix.gettimeofday () > deadline then Alcotest.failf "timed out waiting for %s" what
  else (
    Unix.sleepf 0.05;
    until ~deadline what f)

(* Starts a member with its console on a port of the kernel's choosing,
   read from what it prints; [f port err_file pid]. *)
let with_member f =
  let dir =
    Filename.concat (Filename.get_temp_dir_name ()) (Printf.sprintf "console-%d" (Unix.getpid ()))
  in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let out = Filename.concat dir "out" and err = Filename.concat dir "err" in
  let o = Unix.openfile out [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600
  and e = Unix.openfile err [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600
  and null = Unix.openfile "/dev/null" [ O_RDONLY ] 0 in
  let args =
    [
      "member";
      "--group";
      "cg";
      "--bind";
      addr 2;
      "--peers";
      addr 3;
      "--no-input";
      "--http";
      "127.0.0.1:0";
    ]
  in
  let pid = Unix.create_process exe (Array.of_list (exe :: args)) null o e in
  List.iter Unix.close [ o; e; null ];
  Fun.protect
    ~finally:(fun () ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      ignore (Unix.waitpid [] pid);
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
    (fun () ->
      let port = ref 0 in
      until "the console's address" (fun () ->
          let s = file out in
          match String.index_opt s '\n' with
          | Some i when contains (String.sub s 0 i) "console at http://127.0.0.1:" ->
              Scanf.sscanf (String.sub s 0 i) "console at http://127.0.0.1:%d/" (fun p -> port := p);
              true
          | _ -> false);
      f !port err pid)

let connect port =
  let s = Unix.socket PF_INET SOCK_STREAM 0 in
  Unix.setsockopt_float s SO_RCVTIMEO 5.;
  Unix.connect s (ADDR_INET (Unix.inet_addr_loopback, port));
  s

let read_all s =
  let b = Buffer.create 256 and chunk = Bytes.create 4096 in
  let rec go () =
    match Unix.read s chunk 0 4096 with
    | 0 -> ()
    | n ->
        Buffer.add_subbytes b chunk 0 n;
        go ()
    | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK | ECONNRESET), _, _) -> ()
  in
  go ();
  Buffer.contents b

let get port path =
  match connect port with
  | exception Unix.Unix_error (e, _, _) -> "no connection: " ^ Unix.error_message e
  | s ->
      let req = Printf.sprintf "GET %s HTTP/1.1\r\nHost: x\r\n\r\n" path in
      (try ignore (Unix.write_substring s req 0 (String.length req)) with Unix.Unix_error _ -> ());
      let r = read_all s in
      Unix.close s;
      r

let answers port = contains (get port "/api/status") "\"node\":\"consort member\""

let hostile () =
  with_member @@ fun port err pid ->
  until "the member answers" (fun () -> answers port);
  (* An oversize request line: 431, one line logged, and the member still answers. *)
  let s = connect port in
  let line = "GET /" ^ String.make 20000 'a' in
  (try ignore (Unix.write_substring s line 0 (String.length line)) with Unix.Unix_error _ -> ());
  let r = read_all s in
  Unix.close s;
  if not (contains r "HTTP/1.1 431 ") then Alcotest.failf "oversize: %S" r;
  until "the refusal logged" (fun () -> count (file err) "refused a request over 8192 bytes" = 1);
  Alcotest.(check bool) "answers after the oversize request" true (answers port);
  (* 40 connections holding partial requests (slowloris): 16 are held, the rest
     closed at once; a new one is refused while they are held; one line says so. *)
  let partial = "GET / HTTP/1.1\r\nHost: x\r\n" in
  let held =
    List.init 40 (fun _ ->
        let s = connect port in
        (try ignore (Unix.write_substring s partial 0 (String.length partial))
         with Unix.Unix_error _ -> ());
        s)
  in
  until "the connections over the bound closed" (fun () ->
      count (file err) "16 connections open, refusing more" = 1);
  Alcotest.(check bool) "a new request refused while 16 are held" false (answers port);
  (* Those over the bound were closed by the member: read gives the end at once. *)
  let closed =
    List.length
      (List.filter
         (fun s ->
           Unix.setsockopt_float s SO_RCVTIMEO 0.2;
           match Unix.read s (Bytes.create 16) 0 16 with
           | 0 -> true
           | _ -> false
           | exception Unix.Unix_error ((ECONNRESET | EPIPE), _, _) -> true
           | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK), _, _) -> false)
         held)
  in
  Alcotest.(check int) "24 closed at once, 16 held" 24 closed;
  List.iter Unix.close held;
  until "answers once the partial requests are gone" (fun () -> answers port);
  Alcotest.(check int)
    "still one line for the full table" 1
    (count (file err) "connections open, refusing more");
  (* Nothing else was logged: one line for each. *)
  Alcotest.(check int) "two lines in all from the server" 2 (count (file err) "consort.ops:");
  (* The member still runs. *)
  Alcotest.(check bool)
    "alive" true
    (match Unix.kill pid 0 with () -> true | exception _ -> false)

(* A partial request left idle is closed after the idle bound, with one line
   (a server of its own, with an idle bound of 0.3 s). *)
let idle_closed () =
  let log = Filename.temp_file "console" ".log" and ready = Filename.temp_file "console" ".port" in
  Sys.remove ready;
  match Unix.fork () with
  | 0 ->
      let oc = open_out log in
      Logs.set_reporter (Logs.format_reporter ~dst:(Format.formatter_of_out_channel oc) ());
      Logs.set_level (Some Logs.Warning);
      let loop = Loop.create () in
      (match
         Console.serve ~idle:0.3 loop
           (Unix.ADDR_INET (Unix.inet_addr_loopback, 0))
           ~node:"idle"
           (fun () -> [])
       with
      | Error e ->
          prerr_endline e;
          exit 3
      | Ok s ->
          (match Serve.address s with
          | ADDR_INET (_, p) ->
              let o = open_out (ready ^ ".tmp") in
              output_string o (string_of_int p);
              close_out o;
              Sys.rename (ready ^ ".tmp") ready
          | _ -> ());
          ignore (Loop.after loop (Consort.Time.of_sec 15.) (fun () -> Loop.stop loop));
          let rec flush () =
            Stdlib.flush oc;
            ignore (Loop.after loop (Consort.Time.of_ms 20) flush)
          in
          flush ();
          Loop.run loop);
      exit 0
  | pid ->
      Fun.protect
        ~finally:(fun () ->
          (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
          ignore (Unix.waitpid [] pid);
          List.iter (fun f -> try Sys.remove f with Sys_error _ -> ()) [ log; ready ])
        (fun () ->
          until "the server's port" (fun () -> Sys.file_exists ready);
          let port = int_of_string (file ready) in
          let s = connect port in
          let partial = "GET / HTTP/1.1\r\n" in
          ignore (Unix.write_substring s partial 0 (String.length partial));
          (* The server closes it: the read ends with nothing (within the 5 s timeout). *)
          let r = read_all s in
          Unix.close s;
          Alcotest.(check string) "closed without an answer" "" r;
          until "the line logged" (fun () ->
              count (file log)
                "closed a connection idle for 0.3 s with a partial request of 16 bytes"
              = 1);
          Alcotest.(check bool) "serves again" true (contains (get port "/api/status") "\"idle\""))

(* {1 consortd} *)

let consortd =
  let d = Filename.dirname Sys.executable_name in
  let d = if Filename.is_relative d then Filename.concat (Sys.getcwd ()) d else d in
  Filename.concat d "../../bin/consortd/consortd.exe"

let deaf =
  {
    Consort_client.view = ignore;
    cast = (fun ~origin:_ _ -> ());
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

(* consortd --http: every member it holds, with its history; a member whose
   client closes is seen to leave. Off loopback without --http-public: exit 2. *)
let daemon () =
  let dir =
    Filename.concat (Filename.get_temp_dir_name ()) (Printf.sprintf "console-d%d" (Unix.getpid ()))
  in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let sock = Filename.concat dir "d.sock" and err = Filename.concat dir "d.err" in
  let start http =
    let e = Unix.openfile err [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600
    and null = Unix.openfile "/dev/null" [ O_RDWR ] 0 in
    let args = [ "--socket"; sock; "--bind"; addr 5; "--ports"; "4"; "--http"; http ] in
    let pid = Unix.create_process consortd (Array.of_list (consortd :: args)) null null e in
    Unix.close e;
    Unix.close null;
    pid
  in
  Fun.protect ~finally:(fun () -> ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  let pid = start "0.0.0.0:0" in
  (match wait_exit pid with
  | 2 -> ()
  | -2 -> Alcotest.fail "consortd --http 0.0.0.0:0: still running after 10 s, not refused"
  | _ -> Alcotest.failf "consortd --http 0.0.0.0:0: not exit 2: %s" (file err));
  if not (contains (file err) "--http-public") then Alcotest.failf "stderr: %S" (file err);
  let pid = start "127.0.0.1:0" in
  Fun.protect ~finally:(fun () ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      ignore (Unix.waitpid [] pid))
  @@ fun () ->
  let port = ref 0 in
  until "the console's address" (fun () ->
      let s = file err in
      match String.index_opt s 'c' with
      | _ when contains s "console at http://127.0.0.1:" ->
          let i =
            let rec find i =
              if String.sub s i 28 = "console at http://127.0.0.1:" then i else find (i + 1)
            in
            find 0
          in
          Scanf.sscanf
            (String.sub s i (String.length s - i))
            "console at http://127.0.0.1:%d/"
            (fun p -> port := p);
          true
      | _ -> false);
  until "the socket" (fun () -> Sys.file_exists sock);
  let conn () = match Consort_client.connect sock with Ok c -> c | Error e -> Alcotest.fail e in
  let ca = conn () and cb = conn () in
  let join c =
    match Consort_client.join c ~group:"dg" deaf with
    | Ok m -> m
    | Error e -> Alcotest.failf "join: %a" Consort_client.pp_join_error e
  in
  let ma = join ca in
  let mb = join cb in
  let status () =
    Consort_client.run ~timeout:0.05 ca;
    Consort_client.run ~timeout:0.05 cb;
    match
      Yojson.Safe.from_string
        (let r = get !port "/api/status" in
         let i = ref 0 in
         while String.sub r !i 4 <> "\r\n\r\n" do
           incr i
         done;
         String.sub r (!i + 4) (String.length r - !i - 4))
    with
    | `Assoc l -> l
    | _ -> Alcotest.fail "not an object"
  in
  let groups l = match List.assoc "groups" l with `List g -> g | _ -> [] in
  let field k = function `Assoc l -> List.assoc_opt k l | _ -> None in
  let members g = match field "members" g with Some (`List l) -> List.length l | _ -> 0 in
  until "both members in a view of 2" (fun () ->
      let g = groups (status ()) in
      List.length g = 2 && List.for_all (fun g -> members g = 2) g);
  let l = status () in
  Alcotest.(check bool) "node" true (List.assoc "node" l = `String "consortd");
  let idb = Consort_client.me mb and ida = Consort_client.me ma in
  let of_a () = List.find (fun g -> field "me" g = Some (`String ida)) (groups (status ())) in
  let history g = match field "history" g with Some (`List h) -> h | _ -> [] in
  let shows g who what =
    List.exists
      (fun e ->
        match field "changes" e with
        | Some (`List cs) ->
            List.exists
              (fun c ->
                field "member" c = Some (`String who) && field "what" c = Some (`String what))
              cs
        | _ -> false)
      (history g)
  in
  Alcotest.(check bool) "a's history: b joined" true (shows (of_a ()) idb "joined");
  (* b's client goes: the daemon fails its member out; a sees it leave. *)
  Consort_client.close cb;
  until "b left, at a" (fun () ->
      let g = of_a () in
      members g = 1 && shows g idb "left");
  Alcotest.(check bool) "the page" true (contains (get !port "/") "<title>Consort console</title>");
  Consort_client.close ca

let () =
  Alcotest.run "console"
    [
      ( "history",
        [
          Alcotest.test_case "bounded" `Quick history_bounded;
          Alcotest.test_case "reasons" `Quick reasons;
          Alcotest.test_case "rates" `Quick rates;
        ] );
      ( "page",
        [
          Alcotest.test_case "routes" `Quick routes;
          Alcotest.test_case "self-contained" `Quick page_self_contained;
          Alcotest.test_case "addresses" `Quick addresses;
        ] );
      ( "member",
        [
          Alcotest.test_case "off loopback refused" `Quick refused_off_loopback;
          Alcotest.test_case "hostile clients" `Quick hostile;
          Alcotest.test_case "idle partial request" `Quick idle_closed;
        ] );
      ("consortd", [ Alcotest.test_case "members and history" `Quick daemon ]);
    ]
