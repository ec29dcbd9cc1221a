(* The operations surface: the Prometheus text, the bounded request server
   under hostile clients, and real members answering consort status,
   counters, cast and send through their control sockets. *)

module Loop = Consort_engine.Loop
module Serve = Consort_ops.Serve
module Metrics = Consort_ops.Metrics

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

(* {1 The exposition format} *)

let render () =
  let s l v =
    {
      Metrics.name = "consort_layer_counter";
      help = "a\nb \\ c";
      kind = `Counter;
      labels = l;
      value = v;
    }
  in
  let text =
    Metrics.render
      [
        s [ ("layer", "mnak"); ("counter", "retrans") ] 12.;
        s [ ("layer", "we\"ird\\\n") ] 0.5;
        { Metrics.name = "bad-name 1"; help = "g"; kind = `Gauge; labels = []; value = 3. };
      ]
  in
  let lines = List.filter (( <> ) "") (String.split_on_char '\n' text) in
  Alcotest.(check (list string))
    "exposition"
    [
      "# HELP consort_layer_counter a\\nb \\\\ c";
      "# TYPE consort_layer_counter counter";
      "consort_layer_counter{layer=\"mnak\",counter=\"retrans\"} 12";
      "consort_layer_counter{layer=\"we\\\"ird\\\\\\n\"} 0.5";
      "# HELP bad_name_1 g";
      "# TYPE bad_name_1 gauge";
      "bad_name_1 3";
    ]
    lines

(* {1 The request server, in a child process} *)

(* Runs a server in a child for [seconds]; [f] talks to it; the child is
   reaped afterwards. *)
let with_server ?(seconds = 20.) ?max_connections ?max_request ?idle framing answer f =
  let path =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-ops-%d.sock" (Unix.getpid ()))
  in
  let addr, ready =
    match framing with
    | Serve.Lines -> (Unix.ADDR_UNIX path, path ^ ".ready")
    | Http -> (Unix.ADDR_INET (Unix.inet_addr_loopback, 0), path ^ ".ready")
  in
  (try Sys.remove ready with Sys_error _ -> ());
  match Unix.fork () with
  | 0 ->
      let loop = Loop.create () in
      (match Serve.listen ?max_connections ?max_request ?idle loop addr framing answer with
      | Error e ->
          prerr_endline e;
          exit 3
      | Ok s ->
          (* Written whole, then renamed: the parent never reads half a file. *)
          let oc = open_out (ready ^ ".tmp") in
          (match Serve.address s with
          | ADDR_INET (_, p) -> output_string oc (string_of_int p)
          | ADDR_UNIX _ -> output_string oc "0");
          close_out oc;
          Sys.rename (ready ^ ".tmp") ready;
          ignore (Loop.after loop (Consort.Time.of_sec seconds) (fun () -> Loop.stop loop));
          (* A file asks the child to report its refusals. *)
          let rec report () =
            if Sys.file_exists (ready ^ ".ask") then (
              let oc = open_out (ready ^ ".refused.tmp") in
              Printf.fprintf oc "%d %d" (Serve.refused s) (Serve.connections s);
              close_out oc;
              Sys.rename (ready ^ ".refused.tmp") (ready ^ ".refused");
              Sys.remove (ready ^ ".ask"));
            ignore (Loop.after loop (Consort.Time.of_ms 20) report)
          in
          report ();
          Loop.run loop;
          Serve.close s);
      exit 0
  | pid -> (
      let rec wait n =
        if (not (Sys.file_exists ready)) && n > 0 then (
          Unix.sleepf 0.02;
          wait (n - 1))
      in
      wait 1500;
      let port =
        int_of_string
          (String.trim
             (let ic = open_in ready in
              let l = input_line ic in
              close_in ic;
              l))
      in
      let addr =
        match framing with
        | Serve.Lines -> Unix.ADDR_UNIX path
        | Http -> Unix.ADDR_INET (Unix.inet_addr_loopback, port)
      in
      let refused () =
        let q = ready ^ ".refused" in
        (try Sys.remove q with Sys_error _ -> ());
        close_out (open_out (ready ^ ".ask"));
        let rec w n =
          if (not (Sys.file_exists q)) && n > 0 then (
            Unix.sleepf 0.02;
            w (n - 1))
        in
        w 750;
        let ic = open_in q in
        let r = Scanf.sscanf (input_line ic) "%d %d" (fun a b -> (a, b)) in
        close_in ic;
        r
      in
      let finish () =
        (try Unix.kill pid Sys.sigterm with Unix.Unix_error _ -> ());
        ignore (Unix.waitpid [] pid);
        List.iter
          (fun f -> try Sys.remove f with Sys_error _ -> ())
          [ ready; ready ^ ".refused"; path ]
      in
      match f addr refused with
      | () -> finish ()
      | exception e ->
          finish ();
          raise e)

let connect addr =
  let s = Unix.socket (Unix.domain_of_sockaddr addr) SOCK_STREAM 0 in
  Unix.setsockopt_float s SO_RCVTIMEO 5.;
  Unix.connect s addr;
  s

let read_all s =
  let b = Buffer.create 256 and chunk = Bytes.create 4096 in
  let rec go () =
    match Unix.read s chunk 0 4096 with
    | 0 -> ()
    | n ->
        Buffer.add_subbytes b chunk 0 n;
        go ()
    | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK), _, _) -> ()
    | exception Unix.Unix_error (ECONNRESET, _, _) -> ()
  in
  go ();
  Buffer.contents b

let echo l = "echo:" ^ l

let lines_served () =
  with_server Lines echo (fun addr _ ->
      Alcotest.(check (result string string))
        "one request" (Ok "echo:hello") (Serve.request addr "hello");
      (* Several lines in one write, each answered in order. *)
      let s = connect addr in
      (let r = "a\nb\r\nc\n" in
       ignore (Unix.write_substring s r 0 (String.length r)));
      Unix.shutdown s SHUTDOWN_SEND;
      Alcotest.(check string) "pipelined" "echo:a\necho:b\necho:c\n" (read_all s);
      Unix.close s)

let connections_bounded () =
  with_server ~max_connections:8 Lines echo (fun addr refused ->
      let held = List.init 40 (fun _ -> connect addr) in
      Unix.sleepf 0.3;
      let r, open_now = refused () in
      if open_now > 8 then Alcotest.failf "%d connections held, over the bound of 8" open_now;
      if r < 32 then Alcotest.failf "only %d connections refused of 40 over a bound of 8" r;
      List.iter Unix.close held;
      Unix.sleepf 0.2;
      Alcotest.(check (result string string)) "serves again" (Ok "echo:x") (Serve.request addr "x"))

let request_bounded () =
  with_server ~max_request:1024 Lines echo (fun addr refused ->
      let s = connect addr in
      let big = String.make 5000 'z' in
      (try ignore (Unix.write_substring s big 0 5000) with Unix.Unix_error _ -> ());
      let answer = read_all s in
      Unix.close s;
      if not (contains answer "request over 1024 bytes") then
        Alcotest.failf "no error for an oversize request: %S" answer;
      let r, _ = refused () in
      if r < 1 then Alcotest.fail "the oversize request was not counted";
      Alcotest.(check (result string string)) "serves again" (Ok "echo:y") (Serve.request addr "y"))

let idle_closed () =
  with_server ~idle:0.3 Lines echo (fun addr refused ->
      let s = connect addr in
      ignore (Unix.write_substring s "partial" 0 7);
      Unix.sleepf 1.0;
      let _, open_now = refused () in
      Alcotest.(check int) "the idle connection is closed" 0 open_now;
      Unix.close s)

let reader_that_never_reads () =
  (* A client asks a lot and reads nothing: the server drops it after its
     write bound and goes on serving others. *)
  let big = String.make 60000 'x' in
  with_server Lines
    (fun _ -> big)
    (fun addr _ ->
      let s = connect addr in
      let req = String.concat "" (List.init 2000 (fun _ -> "q\n")) in
      (try ignore (Unix.write_substring s req 0 (String.length req)) with Unix.Unix_error _ -> ());
      Unix.sleepf 2.5;
      (match Serve.request ~timeout:5. addr "q" with
      | Ok a -> Alcotest.(check int) "another client is served" 60000 (String.length a)
      | Error e -> Alcotest.failf "another client is not served: %s" e);
      Unix.close s)

let http () =
  let samples () =
    [ { Metrics.name = "consort_up"; help = "up"; kind = `Gauge; labels = []; value = 1. } ]
  in
  let path =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-http-%d" (Unix.getpid ()))
  in
  match Unix.fork () with
  | 0 ->
      let loop = Loop.create () in
      (match Metrics.serve loop (Unix.ADDR_INET (Unix.inet_addr_loopback, 0)) samples with
      | Ok s ->
          let oc = open_out (path ^ ".tmp") in
          (match Serve.address s with
          | ADDR_INET (_, p) -> output_string oc (string_of_int p)
          | _ -> ());
          close_out oc;
          Sys.rename (path ^ ".tmp") path;
          ignore (Loop.after loop (Consort.Time.of_sec 15.) (fun () -> Loop.stop loop));
          Loop.run loop
      | Error e -> prerr_endline e);
      exit 0
  | pid ->
      let rec wait n =
        if (not (Sys.file_exists path)) && n > 0 then (
          Unix.sleepf 0.02;
          wait (n - 1))
      in
      wait 1500;
      Unix.sleepf 0.05;
      let port =
        let ic = open_in path in
        let l = input_line ic in
        close_in ic;
        int_of_string l
      in
      let addr = Unix.ADDR_INET (Unix.inet_addr_loopback, port) in
      let ask req =
        let s = connect addr in
        ignore (Unix.write_substring s req 0 (String.length req));
        let a = read_all s in
        Unix.close s;
        a
      in
      let finish () =
        Unix.kill pid Sys.sigterm;
        ignore (Unix.waitpid [] pid);
        Sys.remove path
      in
      (try
         let a = ask "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" in
         if
           not (contains a "HTTP/1.1 200" && contains a "consort_up 1" && contains a "version=0.0.4")
         then Alcotest.failf "GET /metrics: %S" a;
         if not (contains (ask "GET /nope HTTP/1.1\r\n\r\n") "HTTP/1.1 404") then
           Alcotest.fail "no 404";
         if not (contains (ask "POST /metrics HTTP/1.1\r\n\r\n") "HTTP/1.1 405") then
           Alcotest.fail "no 405";
         if
           not
             (contains
                (ask ("GET /metrics HTTP/1.1\r\nX: " ^ String.make 20000 'a'))
                "HTTP/1.1 431")
         then Alcotest.fail "no 431 for a huge header";
         if not (contains (ask "\001\002garbage\r\n\r\n") "HTTP/1.1 400") then
           Alcotest.fail "no 400 for garbage"
       with e ->
         finish ();
         raise e);
      finish ()

(* {1 Real members} *)

let exe =
  let d = Filename.dirname Sys.executable_name in
  let d = if Filename.is_relative d then Filename.concat (Sys.getcwd ()) d else d in
  Filename.concat d "../../bin/main.exe"

let run_cmd args =
  let out = Filename.temp_file "ops" ".out" and err = Filename.temp_file "ops" ".err" in
  let o = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600
  and e = Unix.openfile err [ O_WRONLY; O_TRUNC ] 0o600 in
  let pid = Unix.create_process exe (Array.of_list (exe :: args)) Unix.stdin o e in
  Unix.close o;
  Unix.close e;
  let code = match Unix.waitpid [] pid with _, WEXITED c -> c | _ -> -1 in
  let read f =
    let ic = open_in_bin f in
    let s = really_input_string ic (in_channel_length ic) in
    close_in ic;
    Sys.remove f;
    s
  in
  (code, read out, read err)

let spawn args out =
  let o = Unix.openfile out [ O_WRONLY; O_CREAT; O_TRUNC ] 0o600 in
  let null = Unix.openfile "/dev/null" [ O_RDONLY ] 0 in
  let pid = Unix.create_process exe (Array.of_list (exe :: args)) null o o in
  Unix.close o;
  Unix.close null;
  pid

let file s =
  let ic = open_in_bin s in
  let t = really_input_string ic (in_channel_length ic) in
  close_in ic;
  t

let rec until ?(n = 750) what f =
  if f () then ()
  else if n = 0 then Alcotest.failf "timed out waiting for %s" what
  else (
    Unix.sleepf 0.04;
    until ~n:(n - 1) what f)

let members () =
  let dir =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-ops-m%d" (Unix.getpid ()))
  in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let sock = Filename.concat dir "a.sock"
  and out_a = Filename.concat dir "a.out"
  and out_b = Filename.concat dir "b.out" in
  let a = "127.0.0.1:7476" and b = "127.0.0.1:7477" in
  let pcap = Filename.concat dir "a.pcap" in
  let pa =
    spawn
      [
        "member";
        "--group";
        "opsg";
        "--bind";
        a;
        "--peers";
        b;
        "--no-input";
        "--control";
        sock;
        "--metrics";
        "127.0.0.1:9476";
        "--pcap";
        pcap;
      ]
      out_a
  in
  let pb = spawn [ "member"; "--group"; "opsg"; "--bind"; b; "--peers"; a; "--no-input" ] out_b in
  let pids = ref [ pa; pb ] in
  let stop () =
    List.iter
      (fun p ->
        (try Unix.kill p Sys.sigkill with Unix.Unix_error _ -> ());
        ignore (Unix.waitpid [] p))
      !pids;
    pids := []
  in
  Fun.protect ~finally:(fun () ->
      stop ();
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  until "a view of 2" (fun () ->
      match run_cmd [ "status"; "--control"; sock; "--json" ] with
      | 0, out, _ -> (
          match Yojson.Safe.from_string out with
          | `Assoc l -> (
              List.assoc_opt "members" l |> function Some (`List [ _; _ ]) -> true | _ -> false)
          | _ -> false)
      | _ -> false);
  let code, out, _ = run_cmd [ "status"; "--control"; sock ] in
  Alcotest.(check int) "status exit" 0 code;
  if not (contains out "2 members" && contains out "(coordinator") then
    Alcotest.failf "status: %S" out;
  (* A cast given on the command line is delivered at the other member. *)
  let code, out, _ = run_cmd [ "cast"; "--control"; sock; "ops says hi" ] in
  Alcotest.(check (pair int string)) "cast" (0, "ok\n") (code, out);
  until "the cast at b" (fun () -> contains (file out_b) "ops says hi");
  (* The capture holds the cast as it went on the wire, readable by tcpdump. *)
  until "the cast in the capture" (fun () -> contains (file pcap) "ops says hi");
  let dump = Filename.concat dir "dump.txt" in
  let rc =
    Sys.command
      (Printf.sprintf "tcpdump -nn -r %s > %s 2>&1" (Filename.quote pcap) (Filename.quote dump))
  in
  Alcotest.(check int) "tcpdump reads the capture" 0 rc;
  let d = file dump in
  if
    not
      (contains d "IP 127.0.0.1.7476 > 127.0.0.1.7477: UDP"
      && contains d "IP 127.0.0.1.7477 > 127.0.0.1.7476: UDP")
  then Alcotest.failf "tcpdump: both directions not found:\n%s" d;
  let code, _, err =
    run_cmd
      [ "member"; "--group"; "opsg"; "--bind"; "127.0.0.1:7479"; "--no-input"; "--pcap"; pcap ]
  in
  Alcotest.(check int) "an existing capture file is refused" 2 code;
  if not (contains err "--pcap") then Alcotest.failf "pcap refusal: %S" err;
  (* A send to b's id. *)
  let code, out, _ = run_cmd [ "status"; "--control"; sock; "--json" ] in
  Alcotest.(check int) "status --json" 0 code;
  let ids =
    match Yojson.Safe.from_string out with
    | `Assoc l -> (
        match List.assoc "members" l with
        | `List m -> List.map (function `String s -> s | _ -> "") m
        | _ -> [])
    | _ -> []
  in
  let b_id = List.find (fun id -> String.length id > 14 && String.sub id 0 14 = b) ids in
  let code, _, _ = run_cmd [ "send"; "--control"; sock; b_id; "just for b" ] in
  Alcotest.(check int) "send" 0 code;
  until "the send at b" (fun () -> contains (file out_b) "just for b");
  let code, _, err = run_cmd [ "send"; "--control"; sock; "127.0.0.1:1#00000000"; "x" ] in
  Alcotest.(check int) "send to a stranger: refused" 2 code;
  if not (contains err "not a member") then Alcotest.failf "send to a stranger: %S" err;
  (* Counters as JSON and as Prometheus text. *)
  let code, out, _ = run_cmd [ "counters"; "--control"; sock; "--json" ] in
  Alcotest.(check int) "counters" 0 code;
  (match Yojson.Safe.from_string out with
  | `Assoc l ->
      if not (List.mem_assoc "group" l && List.mem_assoc "mnak" l && List.mem_assoc "seal" l) then
        Alcotest.failf "counters: %S" out
  | _ -> Alcotest.failf "counters: %S" out);
  let s = connect (Unix.ADDR_INET (Unix.inet_addr_loopback, 9476)) in
  let req = "GET /metrics HTTP/1.0\r\n\r\n" in
  ignore (Unix.write_substring s req 0 (String.length req));
  let m = read_all s in
  Unix.close s;
  if not (contains m "consort_view_members{group=\"opsg\"" && contains m "layer=\"mnak\"") then
    Alcotest.failf "metrics: %S" m;
  (* A second member on the same control path is refused; after a SIGKILL
     the stale socket is replaced. *)
  let code, _, err =
    run_cmd
      [
        "member";
        "--group";
        "opsg";
        "--bind";
        "127.0.0.1:7478";
        "--peers";
        a;
        "--no-input";
        "--control";
        sock;
      ]
  in
  Alcotest.(check int) "control path in use: refused" 2 code;
  if not (contains err "already answers") then Alcotest.failf "in use: %S" err;
  Unix.kill pa Sys.sigkill;
  ignore (Unix.waitpid [] pa);
  pids := [ pb ];
  if not (Sys.file_exists sock) then
    Alcotest.fail "the killed member's socket file is gone: nothing stale to replace";
  let pc =
    spawn
      [
        "member";
        "--group";
        "opsg";
        "--bind";
        "127.0.0.1:7478";
        "--peers";
        b;
        "--no-input";
        "--control";
        sock;
      ]
      (Filename.concat dir "c.out")
  in
  pids := pc :: !pids;
  until "the new member's status" (fun () ->
      match run_cmd [ "status"; "--control"; sock ] with
      | 0, out, _ -> contains out "127.0.0.1:7478"
      | _ -> false);
  (* A clean exit removes the socket. *)
  Unix.kill pc Sys.sigterm;
  ignore (Unix.waitpid [] pc);
  pids := [ pb ];
  Alcotest.(check bool) "socket removed at exit" false (Sys.file_exists sock)

(* A member's refusals reach the operator: a lone member of a group that
   expects 3 votes is not primary, so its casts are refused, and the command
   says why and exits 2 (refused); a message over the largest the stack
   carries is refused as too big. Nothing refused is delivered or answered "ok". *)
let refusals () =
  let dir =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-ops-r%d" (Unix.getpid ()))
  in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let sock = Filename.concat dir "p.sock" and log = Filename.concat dir "p.out" in
  let pid =
    spawn
      [
        "member";
        "--group";
        "opsr";
        "--bind";
        "127.0.0.1:7486";
        "--peers";
        "127.0.0.1:7487";
        "--no-input";
        "--props";
        "vsync,Primary";
        "--params";
        "primary.expected=3,frag.max_message=4096";
        "--control";
        sock;
      ]
      log
  in
  Fun.protect ~finally:(fun () ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  until "the lone member's view" (fun () ->
      match run_cmd [ "status"; "--control"; sock; "--json" ] with
      | 0, out, _ -> contains out "\"view\""
      | _ -> false);
  let code, out, err = run_cmd [ "cast"; "--control"; sock; "not primary here" ] in
  Alcotest.(check (pair int string))
    "cast in a view that is not primary: refused" (2, "") (code, out);
  if not (contains err "not primary") then Alcotest.failf "not primary: %S" err;
  if List.length (String.split_on_char '\n' (String.trim err)) <> 1 then
    Alcotest.failf "not one line: %S" err;
  let code, _, err = run_cmd [ "cast"; "--control"; sock; "--group"; "opsr"; "again" ] in
  Alcotest.(check int) "through --group: refused" 2 code;
  if not (contains err "not primary") then Alcotest.failf "not primary (--group): %S" err;
  let code, _, err = run_cmd [ "cast"; "--control"; sock; String.make 5000 'x' ] in
  Alcotest.(check int) "too big: refused" 2 code;
  if not (contains err "over the largest") then Alcotest.failf "too big: %S" err;
  if contains (file log) "cast from" then
    Alcotest.failf "a refused cast was delivered: %S" (file log);
  if not (contains (file log) "cast refused: this member's view is not primary") then
    Alcotest.failf "the member does not say it refused: %S" (file log)

(* {1 The Prometheus text format, checked} *)

(* The rules of the text exposition format (0.0.4) and its naming
   conventions, checked line by line: every sample's metric has one TYPE line
   before its samples, which are contiguous; names and label names are valid;
   label values are quoted, with only backslash, double quote and newline
   escaped; a value is a float; no series twice; a counter's name ends in _total and a gauge's does
   not. Returns every series (name and labels as written) with its type and
   value, or fails naming the line. *)
let check_exposition text =
  let bad fmt = Printf.ksprintf (fun m -> Alcotest.failf "exposition: %s:\n%s" m text) fmt in
  let name_ok ~colon n =
    n <> ""
    && String.length n > 0
    && (match n.[0] with 'a' .. 'z' | 'A' .. 'Z' | '_' -> true | ':' -> colon | _ -> false)
    && String.for_all
         (function 'a' .. 'z' | 'A' .. 'Z' | '_' | '0' .. '9' -> true | ':' -> colon | _ -> false)
         n
  in
  let types = Hashtbl.create 16 and finished = Hashtbl.create 16 and seen = Hashtbl.create 64 in
  let current = ref "" in
  let series = ref [] in
  List.iter
    (fun line ->
      if line = "" then ()
      else if String.length line > 7 && String.sub line 0 7 = "# TYPE " then begin
        match String.split_on_char ' ' line with
        | [ _; _; n; t ] ->
            if not (name_ok ~colon:true n) then bad "bad metric name %S" n;
            if Hashtbl.mem types n then bad "a second TYPE line for %s" n;
            if not (List.mem t [ "counter"; "gauge"; "untyped"; "summary"; "histogram" ]) then
              bad "bad type %S" t;
            let total = Filename.check_suffix n "_total" in
            if t = "counter" && not total then bad "counter %s without _total" n;
            if t = "gauge" && total then bad "gauge %s named _total" n;
            Hashtbl.replace types n t;
            if !current <> "" then Hashtbl.replace finished !current ();
            current := n
        | _ -> bad "bad TYPE line %S" line
      end
      else if line.[0] = '#' then begin
        if not (String.length line > 7 && String.sub line 0 7 = "# HELP ") then
          bad "a comment that is neither HELP nor TYPE: %S" line
      end
      else begin
        let name_end =
          match String.index_opt line '{' with
          | Some i -> i
          | None -> ( match String.index_opt line ' ' with Some i -> i | None -> bad "%S" line)
        in
        let n = String.sub line 0 name_end in
        if not (name_ok ~colon:true n) then bad "bad metric name %S" n;
        if n <> !current then
          if Hashtbl.mem finished n then bad "samples of %s not together" n
          else bad "%s has no TYPE line before its samples" n;
        (* Labels: k="v", with escapes. *)
        let i = ref name_end and labels = ref [] in
        if line.[!i] = '{' then begin
          incr i;
          let rec pairs () =
            if line.[!i] = '}' then incr i
            else begin
              let eq = String.index_from line !i '=' in
              let k = String.sub line !i (eq - !i) in
              if not (name_ok ~colon:false k) then bad "bad label name %S" k;
              if line.[eq + 1] <> '"' then bad "unquoted label value in %S" line;
              let b = Buffer.create 16 in
              let j = ref (eq + 2) in
              while line.[!j] <> '"' do
                if line.[!j] = '\\' then begin
                  (match line.[!j + 1] with
                  | '\\' -> Buffer.add_char b '\\'
                  | '"' -> Buffer.add_char b '"'
                  | 'n' -> Buffer.add_char b '\n'
                  | c -> bad "bad escape \\%c in %S" c line);
                  j := !j + 2
                end
                else begin
                  Buffer.add_char b line.[!j];
                  incr j
                end
              done;
              if List.mem_assoc k !labels then bad "label %s twice in %S" k line;
              labels := (k, Buffer.contents b) :: !labels;
              i := !j + 1;
              if line.[!i] = ',' then incr i;
              pairs ()
            end
          in
          try pairs () with Invalid_argument _ | Not_found -> bad "unterminated labels: %S" line
        end;
        if !i >= String.length line || line.[!i] <> ' ' then bad "no value in %S" line;
        let v = String.sub line (!i + 1) (String.length line - !i - 1) in
        let v =
          match float_of_string_opt v with
          | Some x -> x
          | None -> ( match v with "+Inf" | "-Inf" | "NaN" -> nan | _ -> bad "bad value %S" v)
        in
        let key = String.sub line 0 !i in
        if Hashtbl.mem seen key then bad "series %s twice" key;
        Hashtbl.replace seen key ();
        series := (key, Hashtbl.find types n, List.rev !labels, v) :: !series
      end)
    (String.split_on_char '\n' text);
  List.rev !series

let scrape port =
  let s = connect (Unix.ADDR_INET (Unix.inet_addr_loopback, port)) in
  let req = "GET /metrics HTTP/1.0\r\n\r\n" in
  ignore (Unix.write_substring s req 0 (String.length req));
  let m = read_all s in
  Unix.close s;
  match String.index_opt m '\r' with
  | _ -> (
      let sep = "\r\n\r\n" in
      let n = String.length m and k = String.length sep in
      let rec find i =
        if i + k > n then None else if String.sub m i k = sep then Some i else find (i + 1)
      in
      match find 0 with
      | Some i -> String.sub m (i + k) (n - i - k)
      | None -> Alcotest.failf "no HTTP body: %S" m)

(* A member's metrics over its life: casts alone, then a second member joins
   (a view change: the stack is replaced and its layers count from 0), casts,
   and leaves (another). Every scrape follows the format's rules; no counter
   ever goes down; the levels (queues, rounds) are gauges; the member label
   is the address, the incarnation is in consort_member_info. *)
let metrics_conventions () =
  let dir =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-ops-c%d" (Unix.getpid ()))
  in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let sock = Filename.concat dir "a.sock" in
  let a = "127.0.0.1:7488" and b = "127.0.0.1:7489" in
  let pa =
    spawn
      [
        "member";
        "--group";
        "opsc";
        "--bind";
        a;
        "--peers";
        b;
        "--no-input";
        "--control";
        sock;
        "--metrics";
        "127.0.0.1:9488";
      ]
      (Filename.concat dir "a.out")
  in
  let pids = ref [ pa ] in
  Fun.protect ~finally:(fun () ->
      List.iter
        (fun p ->
          (try Unix.kill p Sys.sigkill with Unix.Unix_error _ -> ());
          try ignore (Unix.waitpid [] p) with Unix.Unix_error _ -> ())
        !pids;
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  let view_of n =
    until (Printf.sprintf "a view of %d" n) (fun () ->
        match run_cmd [ "status"; "--control"; sock; "--json" ] with
        | 0, out, _ -> (
            match Yojson.Safe.from_string out with
            | `Assoc l -> (
                match List.assoc_opt "members" l with
                | Some (`List m) -> List.length m = n
                | _ -> false)
            | _ -> false)
        | _ -> false)
  in
  let casts k =
    for i = 1 to k do
      let code, _, err = run_cmd [ "cast"; "--control"; sock; Printf.sprintf "m%d" i ] in
      if code <> 0 then Alcotest.failf "cast: %d %S" code err
    done
  in
  let scrapes = ref [] in
  let take () = scrapes := check_exposition (scrape 9488) :: !scrapes in
  view_of 1;
  casts 5;
  until "the casts counted" (fun () ->
      List.exists
        (fun (_, _, l, v) ->
          List.assoc_opt "layer" l = Some "mnak" && List.assoc_opt "counter" l <> None && v >= 5.)
        (check_exposition (scrape 9488)));
  take ();
  let pb =
    spawn
      [ "member"; "--group"; "opsc"; "--bind"; b; "--peers"; a; "--no-input" ]
      (Filename.concat dir "b.out")
  in
  pids := pb :: !pids;
  view_of 2;
  take ();
  casts 3;
  take ();
  Unix.kill pb Sys.sigterm;
  ignore (Unix.waitpid [] pb);
  pids := [ pa ];
  view_of 1;
  take ();
  let scrapes = List.rev !scrapes in
  (* Counters never decrease from one scrape to the next. *)
  let rec pairs = function
    | s1 :: (s2 :: _ as rest) ->
        List.iter
          (fun (key, t, _, v1) ->
            if t = "counter" then
              match List.find_opt (fun (k, _, _, _) -> k = key) s2 with
              | Some (_, _, _, v2) when v2 < v1 ->
                  Alcotest.failf "counter %s went down across a view change: %g then %g" key v1 v2
              | Some _ -> ()
              | None -> Alcotest.failf "counter %s disappeared" key)
          s1;
        pairs rest
    | _ -> ()
  in
  pairs scrapes;
  let last = List.nth scrapes 3 in
  let find name pred =
    List.exists
      (fun (k, t, l, _) ->
        (ignore k;
         t = name)
        && pred l)
      last
  in
  ignore find;
  let has name l' =
    List.exists
      (fun (k, _, l, _) ->
        String.length k >= String.length name
        && String.sub k 0 (String.length name) = name
        && List.for_all (fun (a, v) -> List.assoc_opt a l = Some v) l')
      last
  in
  List.iter
    (fun g ->
      if not (has "consort_layer_gauge{" [ ("gauge", g) ]) then Alcotest.failf "%s is not a gauge" g)
    [ "round_coord"; "buffered" ];
  List.iter
    (fun (k, _, l, _) ->
      match List.assoc_opt "member" l with
      | Some m when m <> a -> Alcotest.failf "member label %S in %s: not the address %s" m k a
      | _ -> ())
    last;
  if not (has "consort_member_info{" [ ("member", a); ("group", "opsc") ]) then
    Alcotest.fail "no consort_member_info"

(* A member's JSON log records carry the group, and from its first view the
   member's id and the view's: the record of its leave names the member and
   view that status showed. *)
let json_log_fields () =
  let dir =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-ops-j%d" (Unix.getpid ()))
  in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (EEXIST, _, _) -> ());
  let sock = Filename.concat dir "j.sock" and log = Filename.concat dir "j.err" in
  let pid =
    spawn
      [
        "member";
        "--group";
        "opsj";
        "--bind";
        "127.0.0.1:7491";
        "--peers";
        "127.0.0.1:7492";
        "--no-input";
        "--quiet";
        "--log-level";
        "info";
        "--log-format";
        "json";
        "--control";
        sock;
      ]
      log
  in
  let live = ref true in
  Fun.protect ~finally:(fun () ->
      if !live then begin
        (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
        try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ()
      end;
      ignore (Sys.command ("rm -rf " ^ Filename.quote dir)))
  @@ fun () ->
  let status = ref `Null in
  until "the member's view" (fun () ->
      match run_cmd [ "status"; "--control"; sock; "--json" ] with
      | 0, out, _ when contains out "\"view\"" ->
          status := Yojson.Safe.from_string out;
          true
      | _ -> false);
  let field j k =
    match j with
    | `Assoc l -> ( match List.assoc_opt k l with Some (`String s) -> s | _ -> "")
    | _ -> ""
  in
  let me = field !status "me" and view = field !status "view" in
  Unix.kill pid Sys.sigterm;
  ignore (Unix.waitpid [] pid);
  live := false;
  let records =
    List.filter_map
      (fun l ->
        if l = "" then None
        else
          match Yojson.Safe.from_string l with
          | j -> Some j
          | exception Yojson.Json_error e -> Alcotest.failf "not a JSON record: %S (%s)" l e)
      (String.split_on_char '\n' (file log))
  in
  if records = [] then Alcotest.fail "no log records";
  List.iter
    (fun j ->
      if field j "group" <> "opsj" then Alcotest.failf "no group: %s" (Yojson.Safe.to_string j))
    records;
  match List.find_opt (fun j -> contains (field j "msg") "left the group") records with
  | None -> Alcotest.failf "no record of the leave in %S" (file log)
  | Some j ->
      Alcotest.(check (pair string string))
        "member and view" (me, view)
        (field j "member", field j "view")

(* [group NAME REQUEST] at a member's control socket: answered as REQUEST
   for its own group (so the ops commands' --group works against a member
   as against a daemon), refused for another. *)
let group_prefix () =
  let casts = ref [] in
  let h =
    {
      Consort_ops.Control.status = (fun () -> `Assoc [ ("group", `String "g") ]);
      counters = (fun () -> [ ("gmp", [ ("views", 2) ]) ]);
      cast =
        (fun t ->
          casts := t :: !casts;
          Ok ());
      send = (fun _ _ -> Ok ());
      suspect = ignore;
      leave = ignore;
      status_all = (fun k -> k (`Assoc [ ("group", `String "g"); ("members", `List []) ]));
    }
  in
  let a = Consort_ops.Control.answer h in
  Alcotest.(check string) "group g status" (a "status") (a "group g status");
  Alcotest.(check string) "group g counters" (a "counters") (a "group g counters");
  Alcotest.(check string) "group g cast" {|{"ok":true}|} (a "group g cast hi there");
  Alcotest.(check (list string)) "cast once, the text whole" [ "hi there" ] !casts;
  Alcotest.(check string)
    "another group" {|{"error":"this member is in group \"g\", not \"h\""}|} (a "group h cast x");
  Alcotest.(check bool)
    "no nesting" true
    (String.length (a "group g group g status") > 9
    && String.sub (a "group g group g status") 0 9 = {|{"error":|})

(* {1 Status documents}

   [consort status] (a member's control socket), consortd's control socket and the web console's
   GROUP objects build their member fields with one builder: its field order and values, pinned
   to the letter (scripts and the console read them). *)

let status_documents () =
  let fields =
    Consort_ops.Control.status_fields ~group:"g" ~me:"a" ~view:"v3" ~ltime:3 ~coordinator:"c"
      ~members:[ "c"; "a" ] ~rank:1 ~blocked:false ~flow_blocked:true
  in
  Alcotest.(check string)
    "status fields"
    {|{"group":"g","me":"a","view":"v3","ltime":3,"coordinator":"c","members":["c","a"],"rank":1,"blocked":false,"flow_blocked":true}|}
    (Yojson.Safe.to_string (`Assoc fields));
  let h = Consort_ops.Console.history ~max:4 () and r = Consort_ops.Console.rates () in
  Consort_ops.Console.record h
    { t = 1.5; vid = "v3"; ltime = 3; members = [ "c"; "a" ]; coordinator = "c"; changes = [] };
  Consort_ops.Console.sample r ~t:10. ~sent:0 ~delivered:0;
  Consort_ops.Console.sample r ~t:12. ~sent:4 ~delivered:8;
  let group =
    Consort_ops.Console.group_json
      ~status:[ ("group", `String "g") ]
      ~counters:[ ("mnak", [ ("retrans", 2) ]) ]
      ~quorum:`Null ~coordinator:"c" ~sequencer:(Some "c") ~token_holder:None h r
  in
  Alcotest.(check string)
    "console group"
    {|{"group":"g","counters":{"mnak":{"retrans":2}},"quorum":null,"roles":{"coordinator":"c","sequencer":"c","token_holder":null},"history":[{"t":1.5,"view":"v3","ltime":3,"coordinator":"c","members":["c","a"],"changes":[]}],"history_max":4,"rates":[{"t":12.0,"sent":2.0,"delivered":4.0}]}|}
    (Yojson.Safe.to_string group)

let () =
  Alcotest.run "ops"
    [
      ( "metrics",
        [
          Alcotest.test_case "exposition format" `Quick render;
          Alcotest.test_case "HTTP: 200, 404, 405, 431, 400" `Quick http;
        ] );
      ( "serve",
        [
          Alcotest.test_case "lines answered in order" `Quick lines_served;
          Alcotest.test_case "connections bounded" `Quick connections_bounded;
          Alcotest.test_case "request size bounded" `Quick request_bounded;
          Alcotest.test_case "idle connections closed" `Quick idle_closed;
          Alcotest.test_case "a client that never reads is dropped" `Quick reader_that_never_reads;
        ] );
      ("status", [ Alcotest.test_case "one builder, pinned" `Quick status_documents ]);
      ( "member",
        [
          Alcotest.test_case "status, cast, send, counters, metrics over real members" `Quick
            members;
          Alcotest.test_case "group NAME REQUEST" `Quick group_prefix;
          Alcotest.test_case "refusals reach the operator, exit 2" `Quick refusals;
          Alcotest.test_case "metrics follow the conventions across view changes" `Quick
            metrics_conventions;
          Alcotest.test_case "JSON log records: member, group, view" `Quick json_log_fields;
        ] );
    ]
