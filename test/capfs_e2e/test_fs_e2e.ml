(* The file server and its shell tools as real processes over loopback UDP:
   put / get / size / restrict / destroy / info, refusals with exit status 2,
   an unknown outcome with 3, and a server killed with SIGKILL during
   uploads, restarted with every acknowledged file intact. *)

open Consort_local

let consort () =
  Filename.concat
    (Filename.dirname Sys.executable_name)
    (Filename.concat ".." (Filename.concat ".." "bin/main.exe"))

let with_dir f =
  let d = temp_dir "capfs-e2e" in
  Fun.protect ~finally:(fun () -> rm_rf d) (fun () -> f d)

let ( / ) = Filename.concat

(* A free UDP port on loopback. *)
type server = { pid : int; cap : string; addr : string }

(* [fresh] (default: the directory does not exist yet): the server's first start, with --new. *)
let start_server ?(env = []) ?fresh ~data ~port () =
  let fresh = match fresh with Some f -> f | None -> not (Sys.file_exists data) in
  let r, w = Unix.pipe ~cloexec:true () in
  let err =
    Unix.openfile (data ^ ".log")
      [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND; Unix.O_CLOEXEC ]
      0o644
  in
  let addr = Printf.sprintf "127.0.0.1:%d" port in
  let pid =
    Unix.create_process_env (consort ())
      (Array.of_list
         ([ "consort"; "cap"; "fs"; "serve" ]
         @ (if fresh then [ "--new" ] else [])
         @ [ "--data"; data; "--bind"; addr ]))
      (Array.append (Array.of_list env) (Unix.environment ()))
      Unix.stdin w err
  in
  Unix.close w;
  Unix.close err;
  let ic = Unix.in_channel_of_descr r in
  let line = try input_line ic with End_of_file -> "" in
  close_in ic;
  match String.split_on_char ' ' line with
  | [ "server"; cap ] -> { pid; cap; addr }
  | _ -> Alcotest.failf "server's first line: %S" line

let stop s =
  (try Unix.kill s.pid Sys.sigkill with Unix.Unix_error _ -> ());
  try ignore (Unix.waitpid [] s.pid) with Unix.Unix_error _ -> ()

(* Runs consort with [args]; its exit status, standard output and error. *)
let run ?(env = []) ?exe ?stdin_file ?stdout_file args =
  let out = Filename.temp_file "capfs-out" "" and err = Filename.temp_file "capfs-err" "" in
  Fun.protect
    ~finally:(fun () ->
      Sys.remove out;
      Sys.remove err)
    (fun () ->
      let fd p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0 in
      let o = fd (Option.value stdout_file ~default:out) and e = fd err in
      let i =
        match stdin_file with Some f -> Unix.openfile f [ Unix.O_RDONLY ] 0 | None -> Unix.stdin
      in
      let env = Array.append (Array.of_list env) (Unix.environment ()) in
      let prog, argv0 = match exe with Some x -> (x, x) | None -> (consort (), "consort") in
      let pid = Unix.create_process_env prog (Array.of_list (argv0 :: args)) env i o e in
      Unix.close o;
      Unix.close e;
      let _, st = Unix.waitpid [] pid in
      let code = match st with Unix.WEXITED c -> c | _ -> -1 in
      (code, read_file out, read_file err))

let locate s = [ "CONSORT_LOCATE=" ^ s.addr ]
let trim = String.trim

let expect_refused ~env name reason args =
  let code, _, err = run ~env args in
  Alcotest.(check int) (name ^ ": exit 2") 2 code;
  let contains s sub =
    let n = String.length sub in
    let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
    go 0
  in
  if not (contains err reason) then Alcotest.failf "%s: message %S does not name %S" name err reason

let test_tools () =
  with_dir @@ fun d ->
  let s = start_server ~data:(d / "data") ~port:(free_port ()) () in
  Fun.protect ~finally:(fun () -> stop s) @@ fun () ->
  let env = locate s in
  let small = d / "small" and big = d / "big" in
  write_file small "hello, capabilities\n";
  let big_data =
    String.init ((5 * 1048576) + 3) (fun i -> Char.chr (i * 31 lxor (i lsr 9) land 255))
  in
  write_file big big_data;
  let code, f, err = run ~env [ "cap"; "fs"; "put"; "--server"; s.cap; small ] in
  Alcotest.(check int) ("put: " ^ err) 0 code;
  let f = trim f in
  let code, out, _ = run ~env [ "cap"; "fs"; "get"; f ] in
  Alcotest.(check (pair int string)) "get" (0, "hello, capabilities\n") (code, out);
  let code, out, _ = run ~env [ "cap"; "fs"; "size"; f ] in
  Alcotest.(check (pair int string)) "size" (0, "20\n") (code, out);
  let code, b, _ = run ~env [ "cap"; "fs"; "put"; "--server"; s.cap; big ] in
  Alcotest.(check int) "put of 5 MiB" 0 code;
  let code, out, _ = run ~env [ "cap"; "fs"; "get"; trim b ] in
  Alcotest.(check bool) "get of 5 MiB" true (code = 0 && out = big_data);
  (* An output that fails (a full disk): the environment's, a message and exit 2, not an exception. *)
  if Sys.file_exists "/dev/full" then begin
    let code, _, err = run ~env ~stdout_file:"/dev/full" [ "cap"; "fs"; "get"; trim b ] in
    Alcotest.(check int) ("get to a full disk: " ^ err) 2 code;
    Alcotest.(check bool)
      "one line naming the output" true
      (String.length err > 0
      && String.index err '\n' = String.length err - 1
      && String.sub err 0 (min 40 (String.length err))
         = String.sub "consort: get: cannot write the output: No" 0 (min 40 (String.length err)))
  end;
  let code, out, _ = run ~env [ "cap"; "info"; f ] in
  Alcotest.(check int) "info" 0 code;
  Alcotest.(check bool)
    "info names the size" true
    (String.length out > 0 && String.sub (trim out) (String.length (trim out) - 8) 8 = "20 bytes");
  let code, r, _ = run ~env [ "cap"; "restrict"; f; "--rights"; "read" ] in
  Alcotest.(check int) "restrict" 0 code;
  let r = trim r in
  let code, out, _ = run ~env [ "cap"; "fs"; "get"; r ] in
  Alcotest.(check (pair int string))
    "get with a read-only capability" (0, "hello, capabilities\n") (code, out);
  let code, r0, _ = run ~env [ "cap"; "restrict"; r; "--rights"; "none" ] in
  Alcotest.(check int) "restrict a restricted capability (std_restrict)" 0 code;
  expect_refused ~env "get with no rights" "too few rights" [ "cap"; "fs"; "get"; trim r0 ];
  expect_refused ~env "destroy with read only" "too few rights" [ "cap"; "destroy"; r ];
  expect_refused ~env "put with a file's capability" "bad argument"
    [ "cap"; "fs"; "put"; "--server"; f; small ];
  (* Altered capabilities: rights raised on a restricted one, a check changed. *)
  let raw s =
    Base64.decode_exn ~pad:false ~alphabet:Base64.uri_safe_alphabet
      (String.sub s 5 (String.length s - 5))
  in
  let text b = "cap1:" ^ Base64.encode_exn ~pad:false ~alphabet:Base64.uri_safe_alphabet b in
  let widened = Bytes.of_string (raw r) in
  Bytes.set widened 23 '\xff';
  expect_refused ~env "over-rights capability" "bad capability"
    [ "cap"; "destroy"; text (Bytes.to_string widened) ];
  let forged = Bytes.of_string (raw f) in
  Bytes.set forged 39 (Char.chr (Char.code (Bytes.get forged 39) lxor 1));
  expect_refused ~env "forged check" "bad capability"
    [ "cap"; "fs"; "get"; text (Bytes.to_string forged) ];
  expect_refused ~env "not a capability" "bad capability" [ "cap"; "fs"; "size"; "cap1:nonsense" ];
  (* Revocation: a new owner capability; the old one and its restrictions fail. *)
  expect_refused ~env "revoke with a restricted capability" "too few rights"
    [ "cap"; "fs"; "revoke"; r ];
  let code, b', err = run ~env [ "cap"; "fs"; "revoke"; trim b ] in
  Alcotest.(check int) ("revoke: " ^ err) 0 code;
  let b' = trim b' in
  Alcotest.(check bool)
    "a new capability" true
    (b' <> trim b && String.length b' > 5 && String.sub b' 0 5 = "cap1:");
  expect_refused ~env "a revoked capability" "bad capability" [ "cap"; "fs"; "size"; trim b ];
  let code, out, _ = run ~env [ "cap"; "fs"; "size"; b' ] in
  Alcotest.(check (pair int string))
    "the new capability"
    (0, string_of_int (String.length big_data) ^ "\n")
    (code, out);
  let b = b' in
  let code, _, _ = run ~env [ "cap"; "destroy"; f ] in
  Alcotest.(check int) "destroy" 0 code;
  expect_refused ~env "a destroyed file" "not found" [ "cap"; "fs"; "get"; f ];
  expect_refused ~env "a destroyed file, restricted" "not found" [ "cap"; "fs"; "size"; r ];
  (* Found by multicast too, when the network has it. *)
  let code, _, _ =
    run
      ~env:[ Printf.sprintf "CONSORT_LOCATE=127.0.0.1:%d" (free_port ()) ]
      [ "cap"; "fs"; "size"; trim b ]
  in
  Alcotest.(check bool) "found, or refused without multicast" true (code = 0 || code = 2);
  stop s;
  expect_refused ~env "no server" "RPC_NOTFOUND" [ "cap"; "fs"; "size"; trim b ]

(* A server that dies during a transfer: the client cannot know the outcome. *)
let test_unknown_outcome () =
  with_dir @@ fun d ->
  let s = start_server ~data:(d / "data") ~port:(free_port ()) () in
  Fun.protect ~finally:(fun () -> stop s) @@ fun () ->
  let big = d / "big" in
  write_file big (String.make (64 * 1048576) 'z');
  let env = Array.append [| "CONSORT_LOCATE=" ^ s.addr |] (Unix.environment ()) in
  let pid =
    Unix.create_process_env (consort ())
      [| "consort"; "cap"; "fs"; "put"; "--server"; s.cap; big |]
      env Unix.stdin Unix.stdout Unix.stderr
  in
  (* Wait until the upload is under way: the server holds an uncommitted file. *)
  let rec wait n =
    if n = 0 then Alcotest.fail "the upload never started";
    let _, out, _ = run ~env:(locate s) [ "cap"; "status"; s.cap ] in
    let started =
      match String.split_on_char ',' out with
      | [ _; u ] -> (
          try
            Scanf.sscanf (String.trim u) "%d uncommitted files (%d bytes)" (fun f b ->
                f = 1 && b > 0)
          with _ -> false)
      | _ -> false
    in
    if not started then (
      Unix.sleepf 0.02;
      wait (n - 1))
  in
  wait 500;
  Unix.kill s.pid Sys.sigstop;
  let _, st = Unix.waitpid [] pid in
  Unix.kill s.pid Sys.sigcont;
  Alcotest.(check bool)
    "put exits 3 when the server falls silent mid-upload" true (st = Unix.WEXITED 3)

(* Servers killed with SIGKILL while several clients upload; every file
   whose capability a put printed (exit 0) must come back whole after a
   restart. *)
let test_crash_restart () =
  with_dir @@ fun d ->
  let data = d / "data" and port = free_port () in
  let files =
    Array.init 12 (fun i ->
        let p = d / Printf.sprintf "f%d" i in
        (* The largest take longer than the first kill even on an idle machine. *)
        let n = [| 10; 70_000; 1_100_000; 32_000_000 |].(i mod 4) + i in
        write_file p (String.init n (fun j -> Char.chr (((i * 7) + j) land 255)));
        p)
  in
  let acked = ref [] and unknown = ref 0 in
  for round = 0 to 2 do
    let s = start_server ~data ~port () in
    let env = Array.append [| "CONSORT_LOCATE=" ^ s.addr |] (Unix.environment ()) in
    let puts =
      Array.mapi
        (fun i f ->
          let out = d / Printf.sprintf "out%d.%d" round i in
          let o =
            Unix.openfile out [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644
          in
          let e = Unix.openfile "/dev/null" [ Unix.O_WRONLY ] 0 in
          let pid =
            Unix.create_process_env (consort ())
              [| "consort"; "cap"; "fs"; "put"; "--server"; s.cap; f |]
              env Unix.stdin o e
          in
          Unix.close o;
          Unix.close e;
          (pid, out, f))
        files
    in
    Unix.sleepf (0.15 +. (0.1 *. float round));
    stop s;
    Array.iter
      (fun (pid, out, f) ->
        match Unix.waitpid [] pid with
        | _, Unix.WEXITED 0 -> acked := (trim (read_file out), f) :: !acked
        | _, Unix.WEXITED (2 | 3) -> incr unknown
        | _ -> Alcotest.fail "put died")
      puts
  done;
  let s = start_server ~data ~port () in
  Fun.protect ~finally:(fun () -> stop s) @@ fun () ->
  let log = read_file (data ^ ".log") in
  List.iter
    (fun l ->
      let bad = [ "corrupt"; "lost"; "unknown file"; "server record bad" ] in
      List.iter
        (fun b ->
          let n = String.length b in
          let rec has i = i + n <= String.length l && (String.sub l i n = b || has (i + 1)) in
          if has 0 then Alcotest.failf "recovery found damage: %s" l)
        bad)
    (String.split_on_char '\n' log);
  List.iter
    (fun (cap, f) ->
      let code, out, err = run ~env:(locate s) [ "cap"; "fs"; "get"; cap ] in
      if code <> 0 then Alcotest.failf "acknowledged file lost: %s" err;
      if out <> read_file f then Alcotest.failf "acknowledged file %s has other bytes" f)
    !acked;
  Alcotest.(check bool) "some puts were acknowledged" true (List.length !acked >= 3);
  Alcotest.(check bool) "some puts were cut by the kill" true (!unknown >= 1)

(* Multicast off: only the configured places are asked, so a wrong one
   finds nothing even where the network has multicast. *)
let no_mcast = "CONSORT_MULTICAST=off"

(* --locate on every client command, over a wrong CONSORT_LOCATE; lists
   with a dead place first; bad values. *)
let test_locate () =
  with_dir @@ fun d ->
  let s = start_server ~env:[ no_mcast ] ~data:(d / "data") ~port:(free_port ()) () in
  Fun.protect ~finally:(fun () -> stop s) @@ fun () ->
  let dead = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let env = [ no_mcast; "CONSORT_LOCATE=" ^ dead ] in
  let loc = [ "--locate"; dead ^ "," ^ s.addr ] in
  let small = d / "small" in
  write_file small "located\n";
  let ok name args =
    let code, out, err = run ~env (args @ loc) in
    if code <> 0 then Alcotest.failf "%s with --locate: exit %d: %s" name code err;
    let code, _, err = run ~env args in
    Alcotest.(check int) (name ^ " with only a wrong CONSORT_LOCATE: exit 2") 2 code;
    if not (contains err "RPC_NOTFOUND") then
      Alcotest.failf "%s: %S does not say RPC_NOTFOUND" name err;
    out
  in
  let f = trim (ok "put" [ "cap"; "fs"; "put"; "--server"; s.cap; small ]) in
  Alcotest.(check string) "get" "located\n" (ok "get" [ "cap"; "fs"; "get"; f ]);
  Alcotest.(check string) "size" "8\n" (ok "size" [ "cap"; "fs"; "size"; f ]);
  ignore (ok "info" [ "cap"; "info"; f ]);
  ignore (ok "status" [ "cap"; "status"; s.cap ]);
  (* Locally from an owner capability, then by the server. *)
  let code, r, _ = run ~env [ "cap"; "restrict"; f; "--rights"; "read" ] in
  Alcotest.(check int) "restrict an owner capability: locally, no server needed" 0 code;
  let r = trim r in
  ignore (ok "restrict (std_restrict)" [ "cap"; "restrict"; r; "--rights"; "none" ]);
  (* CONSORT_LOCATE alone, a list with spaces and a dead place first. *)
  let code, out, _ =
    run
      ~env:[ no_mcast; Printf.sprintf "CONSORT_LOCATE= %s , %s" dead s.addr ]
      [ "cap"; "fs"; "size"; f ]
  in
  Alcotest.(check (pair int string)) "CONSORT_LOCATE list" (0, "8\n") (code, out);
  ignore (ok "destroy" [ "cap"; "destroy"; f ]);
  expect_refused ~env "bad --locate" "--locate" [ "cap"; "fs"; "size"; f; "--locate"; "nowhere" ];
  expect_refused ~env:[ "CONSORT_LOCATE=nowhere:x" ] "bad CONSORT_LOCATE" "--locate"
    [ "cap"; "fs"; "size"; f ];
  expect_refused ~env:[ "CONSORT_MULTICAST=bogus" ] "bad CONSORT_MULTICAST" "CONSORT_MULTICAST"
    [ "cap"; "fs"; "size"; f ];
  expect_refused ~env "unknown tunable" "--params"
    [ "cap"; "fs"; "size"; f; "--params"; "rpc.bogus=1" ];
  expect_refused ~env "fragment too large" "fragment size"
    [ "cap"; "status"; s.cap; "--params"; "rpc.fragment=100000" ];
  (* Tunables reach the RPC: with 4 KB fragments to loopback the file still comes back. *)
  let big = d / "big" in
  let content = String.init 3_000_000 (fun i -> Char.chr (i * 7 land 255)) in
  write_file big content;
  let p = [ "--params"; "rpc.loopback_fragment=4096,rpc.loopback_window=4" ] in
  let code, b, _ = run ~env ([ "cap"; "fs"; "put"; "--server"; s.cap; big ] @ loc @ p) in
  Alcotest.(check int) "put with --params" 0 code;
  let code, out, _ = run ~env ([ "cap"; "fs"; "get"; trim b ] @ loc @ p) in
  Alcotest.(check bool) "get with --params" true (code = 0 && out = content)

(* A client gives up on a silent server after 2 s rather than 5. *)
let short_silence = "rpc.silence=2s"

(* A get whose standard output nobody reads for a while: it blocks after
   its first 4 MiB read, on a session the test can then cut. *)
let start_stalled_get ~env cap =
  let r, w = Unix.pipe ~cloexec:true () in
  let err = Filename.temp_file "capfs-err" "" in
  let e = Unix.openfile err [ Unix.O_WRONLY; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0 in
  let pid =
    Unix.create_process_env (consort ())
      [| "consort"; "cap"; "fs"; "get"; cap; "--params"; short_silence |]
      (Array.append (Array.of_list env) (Unix.environment ()))
      Unix.stdin w e
  in
  Unix.close w;
  Unix.close e;
  (* Its output has begun: the first read is done. *)
  let first = Bytes.create 1 in
  if Unix.read r first 0 1 <> 1 then Alcotest.fail "the get wrote nothing";
  let finish () =
    let b = Buffer.create (1 lsl 20) in
    Buffer.add_bytes b first;
    let chunk = Bytes.create 65536 in
    let rec drain () =
      match Unix.read r chunk 0 65536 with
      | 0 -> ()
      | n ->
          Buffer.add_subbytes b chunk 0 n;
          drain ()
    in
    drain ();
    Unix.close r;
    let _, st = Unix.waitpid [] pid in
    let msg = read_file err in
    Sys.remove err;
    (st, Buffer.contents b, msg)
  in
  finish

let pattern n = String.init n (fun i -> Char.chr (i * 13 lxor (i lsr 11) land 255))

(* The server is killed mid-get and restarts elsewhere (another address,
   the same data and key): the same client process falls silent on the old
   place, forgets it, locates the port again and finishes the file. Killed
   for good instead, the get exits 3. *)
let test_server_moves () =
  with_dir @@ fun d ->
  let data = d / "data" and big = d / "big" in
  let content = pattern ((3 * 4194304) + 5) in
  write_file big content;
  let p1 = free_port () and p2 = free_port () in
  let s1 = start_server ~env:[ no_mcast ] ~data ~port:p1 () in
  let env = [ no_mcast; Printf.sprintf "CONSORT_LOCATE=127.0.0.1:%d,127.0.0.1:%d" p1 p2 ] in
  let code, f, err = run ~env [ "cap"; "fs"; "put"; "--server"; s1.cap; big ] in
  if code <> 0 then (
    stop s1;
    Alcotest.failf "put: %s" err);
  let f = trim f in
  let finish = start_stalled_get ~env f in
  stop s1;
  let s2 = start_server ~env:[ no_mcast ] ~data ~port:p2 () in
  Fun.protect ~finally:(fun () -> stop s2) @@ fun () ->
  let st, out, err = finish () in
  if st <> Unix.WEXITED 0 then Alcotest.failf "get across the move: %s" err;
  Alcotest.(check bool) "the whole file, across the move" true (out = content);
  let finish = start_stalled_get ~env f in
  stop s2;
  let st, out, err = finish () in
  Alcotest.(check bool) "get exits 3 when its server is killed mid-file" true (st = Unix.WEXITED 3);
  Alcotest.(check bool) "the message says the output is cut" true (contains err "cut short");
  Alcotest.(check bool)
    "what was written is a prefix" true
    (String.length out < String.length content && out = String.sub content 0 (String.length out))

(* A put from a pipe whose server is killed by SIGKILL mid-upload exits 3. *)
let test_put_killed () =
  with_dir @@ fun d ->
  let s = start_server ~env:[ no_mcast ] ~data:(d / "data") ~port:(free_port ()) () in
  Fun.protect ~finally:(fun () -> stop s) @@ fun () ->
  let env = [ no_mcast; "CONSORT_LOCATE=" ^ s.addr ] in
  let fifo = d / "fifo" in
  Unix.mkfifo fifo 0o600;
  let err = d / "put.err" in
  let e = Unix.openfile err [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let pid =
    Unix.create_process_env (consort ())
      [| "consort"; "cap"; "fs"; "put"; "--server"; s.cap; fifo; "--params"; short_silence |]
      (Array.append (Array.of_list env) (Unix.environment ()))
      Unix.stdin Unix.stdout e
  in
  Unix.close e;
  let w = Unix.openfile fifo [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0 in
  let piece = Bytes.of_string (pattern 1048576) in
  let write () = ignore (Unix.write w piece 0 (Bytes.length piece)) in
  write ();
  write ();
  write ();
  (* The server holds the uncommitted file. *)
  let rec wait n =
    if n = 0 then Alcotest.fail "the upload never reached the server";
    let _, out, _ = run ~env [ "cap"; "status"; s.cap ] in
    if not (contains out "1 uncommitted file") then (
      Unix.sleepf 0.02;
      wait (n - 1))
  in
  wait 500;
  stop s;
  write ();
  Unix.close w;
  let _, st = Unix.waitpid [] pid in
  Alcotest.(check bool) "put exits 3 when its server is killed mid-upload" true (st = Unix.WEXITED 3);
  Alcotest.(check bool) "it says so" true (contains (read_file err) "outcome unknown")

(* The progress bar is drawn on a terminal (a pseudo-terminal from
   script(1)) and never into a file or a pipe. *)
let test_progress_bar () =
  with_dir @@ fun d ->
  let s = start_server ~env:[ no_mcast ] ~data:(d / "data") ~port:(free_port ()) () in
  Fun.protect ~finally:(fun () -> stop s) @@ fun () ->
  let env = [ no_mcast; "CONSORT_LOCATE=" ^ s.addr ] in
  let big = d / "big" in
  write_file big (pattern (6 * 1048576));
  let code, f, err = run ~env [ "cap"; "fs"; "put"; "--server"; s.cap; big ] in
  Alcotest.(check int) "put" 0 code;
  Alcotest.(check string) "nothing on a standard error that is not a terminal (put)" "" err;
  let f = trim f in
  let code, _, err = run ~env [ "cap"; "fs"; "get"; f ] in
  Alcotest.(check int) "get" 0 code;
  Alcotest.(check string) "nothing on a standard error that is not a terminal (get)" "" err;
  let term args =
    let cmd =
      String.concat " " (List.map Filename.quote (("env" :: env) @ (consort () :: args)))
      ^ " > /dev/null"
    in
    run ~exe:"script" [ "-q"; "-e"; "-c"; cmd; "/dev/null" ]
  in
  let code, out, _ = term [ "cap"; "fs"; "get"; f ] in
  Alcotest.(check int) "get on a terminal" 0 code;
  if not (contains out "100%" && contains out "MB/s" && contains out "\r") then
    Alcotest.failf "no progress bar on a terminal: %S" out;
  let code, out, _ = term [ "cap"; "fs"; "put"; "--server"; s.cap; big ] in
  Alcotest.(check int) "put on a terminal" 0 code;
  if not (contains out "100%" && contains out "MB/s") then
    Alcotest.failf "no progress bar for put on a terminal: %S" out

(* The tools with no address to ask, only a multicast group
   (CONSORT_MULTICAST), inside a network namespace this test creates (with
   a multicast route on its loopback) and removes. *)
let test_multicast () =
  let ip = List.find_opt Sys.file_exists [ "/usr/sbin/ip"; "/sbin/ip"; "/usr/bin/ip"; "/bin/ip" ] in
  match ip with
  | None -> Alcotest.fail "the multicast test needs the ip command (iproute2)"
  | Some _ when Unix.getuid () <> 0 ->
      Alcotest.fail "the multicast test needs root, to create a network namespace"
  | Some ip ->
      let ns = Printf.sprintf "consort-capfs-%d" (Unix.getpid ()) in
      let sh argv =
        let pid = Unix.create_process argv.(0) argv Unix.stdin Unix.stdout Unix.stderr in
        match Unix.waitpid [] pid with
        | _, Unix.WEXITED 0 -> ()
        | _ -> Alcotest.failf "%s failed" (String.concat " " (Array.to_list argv))
      in
      sh [| ip; "netns"; "add"; ns |];
      Fun.protect ~finally:(fun () -> try sh [| ip; "netns"; "delete"; ns |] with _ -> ())
      @@ fun () ->
      sh [| ip; "netns"; "exec"; ns; ip; "link"; "set"; "lo"; "up"; "multicast"; "on" |];
      sh [| ip; "netns"; "exec"; ns; ip; "route"; "add"; "224.0.0.0/4"; "dev"; "lo" |];
      with_dir @@ fun d ->
      let group = "CONSORT_MULTICAST=239.192.67.81:47471" in
      let no_list = "CONSORT_LOCATE=" in
      let in_ns args = ip :: "netns" :: "exec" :: ns :: consort () :: args in
      let run_ns ~env args =
        let code, out, err = run ~exe:"env" (env @ in_ns args) in
        (code, out, err)
      in
      (* The server, in the namespace. *)
      let r, w = Unix.pipe ~cloexec:true () in
      let err =
        Unix.openfile (d / "server.log") [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_CLOEXEC ] 0o644
      in
      let argv =
        Array.of_list
          ("env" :: group
          :: in_ns
               [ "cap"; "fs"; "serve"; "--new"; "--data"; d / "data"; "--bind"; "127.0.0.1:47470" ]
          )
      in
      let pid = Unix.create_process "env" argv Unix.stdin w err in
      Unix.close w;
      Unix.close err;
      let stop () =
        (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
        ignore (Unix.waitpid [] pid)
      in
      Fun.protect ~finally:stop @@ fun () ->
      let ic = Unix.in_channel_of_descr r in
      let line = try input_line ic with End_of_file -> "" in
      close_in ic;
      let scap =
        match String.split_on_char ' ' line with
        | [ "server"; c ] -> c
        | _ -> Alcotest.failf "server's first line: %S" line
      in
      let small = d / "small" in
      write_file small "found by multicast\n";
      let code, f, e =
        run_ns ~env:[ group; no_list ] [ "cap"; "fs"; "put"; "--server"; scap; small ]
      in
      if code <> 0 then
        Alcotest.failf "put by multicast: exit %d: %s (server: %s)" code e
          (read_file (d / "server.log"));
      let code, out, _ = run_ns ~env:[ group; no_list ] [ "cap"; "fs"; "get"; trim f ] in
      Alcotest.(check (pair int string)) "get by multicast" (0, "found by multicast\n") (code, out);
      (* Without the group, nothing is asked: not found. *)
      let code, _, e =
        run_ns ~env:[ "CONSORT_MULTICAST=off"; no_list ] [ "cap"; "fs"; "size"; trim f ]
      in
      Alcotest.(check int) "without multicast: exit 2" 2 code;
      if not (contains e "RPC_NOTFOUND") then Alcotest.failf "without multicast: %S" e

(* The data directory (issue 28): a file server is one server, not a replica group, so a missing
   or empty data directory becomes a store only with --new (or cap fs init before the first
   start); --new on a directory that holds a store is refused; a directory whose store is gone,
   its identity left, is refused without --new. A refusal is one line and exit 2, and makes or
   changes nothing. *)
let test_data_dir () =
  with_dir @@ fun d ->
  let port = free_port () in
  let check_refused name reason (code, out, err) =
    Alcotest.(check int) (Printf.sprintf "%s: exit 2 (%s)" name err) 2 code;
    Alcotest.(check string) (name ^ ": nothing on standard output") "" out;
    if String.index_opt err '\n' <> Some (String.length err - 1) then
      Alcotest.failf "%s: not one line: %S" name err;
    if not (contains err reason) then Alcotest.failf "%s: %S does not say %S" name err reason
  in
  (* A server that starts instead of refusing prints its capability first: it is killed, and
     the test fails (no wait on a server that would run on). *)
  let refused name reason args =
    let r, w = Unix.pipe ~cloexec:true () in
    let errf = d / "refused.err" in
    let e =
      Unix.openfile errf [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644
    in
    let pid = Unix.create_process (consort ()) (Array.of_list ("consort" :: args)) Unix.stdin w e in
    Unix.close w;
    Unix.close e;
    let ic = Unix.in_channel_of_descr r in
    let line = try input_line ic with End_of_file -> "" in
    close_in ic;
    if line <> "" then begin
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      ignore (Unix.waitpid [] pid);
      Alcotest.failf "%s: served (%S) instead of refusing" name line
    end;
    let code = match Unix.waitpid [] pid with _, Unix.WEXITED c -> c | _ -> -1 in
    check_refused name reason (code, "", read_file errf)
  in
  let serve args = [ "cap"; "fs"; "serve"; "--bind"; Printf.sprintf "127.0.0.1:%d" port ] @ args in
  let missing = d / "missing" in
  refused "a missing directory" "with --new" (serve [ "--data"; missing ]);
  Alcotest.(check bool) "the missing directory is not made" false (Sys.file_exists missing);
  let data = d / "data" in
  Unix.mkdir data 0o700;
  refused "an empty directory" "an empty data directory" (serve [ "--data"; data ]);
  Alcotest.(check (array string)) "the empty directory stays empty" [||] (Sys.readdir data);
  let small = d / "small" in
  write_file small "kept\n";
  let s = start_server ~fresh:true ~data ~port () in
  let code, f, err = run ~env:(locate s) [ "cap"; "fs"; "put"; "--server"; s.cap; small ] in
  stop s;
  Alcotest.(check int) ("put: " ^ err) 0 code;
  let f = trim f in
  refused "--new on a store" "--new starts a file server on an empty directory only"
    (serve [ "--new"; "--data"; data ]);
  let s = start_server ~fresh:false ~data ~port () in
  let code, out, _ = run ~env:(locate s) [ "cap"; "fs"; "get"; f ] in
  stop s;
  Alcotest.(check (pair int string)) "the file, after --new was refused" (0, "kept\n") (code, out);
  (* The store is lost, the identity and the key are left: never taken for a new store. *)
  Array.iter
    (fun n -> if n <> "service-identity" && n <> "port.key" then rm_rf (data / n))
    (Sys.readdir data);
  refused "a lost store" "with no store in it" (serve [ "--data"; data ]);
  Alcotest.(check int) "nothing made by the refusal" 2 (Array.length (Sys.readdir data));
  let s = start_server ~fresh:true ~data ~port () in
  let code, _, _ = run ~env:(locate s) [ "cap"; "fs"; "get"; f ] in
  stop s;
  Alcotest.(check int) "an empty store on purpose (--new): the old file is not there" 2 code;
  (* cap fs init: the first start's --new, made beforehand. *)
  let pre = d / "pre" in
  let code, out, err = run [ "cap"; "fs"; "init"; "--data"; pre ] in
  Alcotest.(check int) ("cap fs init: " ^ err) 0 code;
  if not (contains out "port") then Alcotest.failf "cap fs init prints %S" out;
  check_refused "cap fs init twice" "not an empty directory"
    (run [ "cap"; "fs"; "init"; "--data"; pre ]);
  let s = start_server ~fresh:false ~data:pre ~port () in
  stop s

let () =
  Alcotest.run "fs_e2e"
    [
      ( "processes",
        [
          Alcotest.test_case "the shell tools" `Quick test_tools;
          Alcotest.test_case "outcome unknown: exit 3" `Quick test_unknown_outcome;
          Alcotest.test_case "SIGKILL during uploads, restart" `Quick test_crash_restart;
          Alcotest.test_case "--locate and CONSORT_LOCATE on every command" `Quick test_locate;
          Alcotest.test_case "the server moves mid-get; killed: exit 3" `Quick test_server_moves;
          Alcotest.test_case "SIGKILL mid-put from a pipe: exit 3" `Quick test_put_killed;
          Alcotest.test_case "progress bar only on a terminal" `Quick test_progress_bar;
          Alcotest.test_case "located by multicast only (network namespace)" `Quick test_multicast;
          Alcotest.test_case "data directory: --new, cap fs init, a lost store" `Quick test_data_dir;
        ] );
    ]
