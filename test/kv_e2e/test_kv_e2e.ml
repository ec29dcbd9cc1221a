(* The replicated store as real processes on loopback: three replicas,
   concurrent clients in their own processes, one replica killed with
   SIGKILL and restarted (it catches up), then every replica killed and
   restarted from its disk; the history of every client, final reads
   included, is linearizable, so no acknowledged write was lost. A log with
   a torn tail is repaired on start, and the replica says so. The command
   line's outputs and exit statuses. A replica alone refuses (exit 2, not
   unknown); a wiped data directory is refused, or joins without a vote
   until caught up; a directory of another group is refused; data
   directories on a tiny tmpfs that fills: the full replica stops (one
   line, exit 2), nothing acknowledged is lost. *)

module Kv = Consort_kv
module L = Consort_spec.Linearizable
open Consort_local

let consort () =
  Filename.concat
    (Filename.dirname Sys.executable_name)
    (Filename.concat ".." (Filename.concat ".." "bin/main.exe"))

let ( / ) = Filename.concat

let free_port ty =
  let s = Unix.socket Unix.PF_INET ty 0 in
  Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
  let p = match Unix.getsockname s with Unix.ADDR_INET (_, p) -> p | _ -> assert false in
  Unix.close s;
  p

let params = "suspect.timeout=2s,suspect.verify=500ms,suspect.grace=500ms,gmp.flush_timeout=2s"

type replica = { data : string; log : string; bind : string; listen : string; mutable pid : int }

(* [init]: --new the first time (no identity in the directory yet), nothing
   after, unless told. *)
let start ?init ?(group = "e2e") ~peers r =
  let init =
    match init with
    | Some l -> l
    | None -> if Sys.file_exists (Filename.concat r.data "identity") then [] else [ "--new" ]
  in
  let err =
    Unix.openfile r.log [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND; Unix.O_CLOEXEC ] 0o644
  in
  let out = Unix.openfile "/dev/null" [ Unix.O_WRONLY ] 0 in
  r.pid <-
    Unix.create_process (consort ())
      (Array.append
         [|
           "consort";
           "kv";
           "serve";
           "--group";
           group;
           "--data";
           r.data;
           "--bind";
           r.bind;
           "--peers";
           String.concat "," peers;
           "--listen";
           r.listen;
           "--params";
           params;
         |]
         (Array.of_list init))
      Unix.stdin out err;
  Unix.close err;
  Unix.close out

let kill ?(signal = Sys.sigkill) r =
  if r.pid > 0 then begin
    (try Unix.kill r.pid signal with Unix.Unix_error _ -> ());
    (try ignore (Unix.waitpid [] r.pid) with Unix.Unix_error _ -> ());
    r.pid <- 0
  end

let servers rs = List.map (fun r -> r.listen) rs

(* Waits until a read through [via] answers. *)
let wait_ready via =
  let c = Result.get_ok (Kv.Client.create ~timeout:2. via) in
  let t0 = Unix.gettimeofday () in
  let rec go () =
    match Kv.Client.call c (Kv.Op.Get "ready") with
    | Kv.Wire.Done _ -> Kv.Client.close c
    | o ->
        if Unix.gettimeofday () -. t0 > 30. then
          Alcotest.failf "no answer through %s: %a" (String.concat "," via) Kv.Wire.pp_outcome o;
        Unix.sleepf 0.2;
        go ()
  in
  go ()

let now_us () = int_of_float (Unix.gettimeofday () *. 1e6)

let op_line c call ret op resp =
  Kv.History.line ~client:c ~call ~return:(if ret < 0 then None else Some ret) op resp

let parse_line l =
  match Kv.History.parse l with
  | Ok e -> e
  | Error e -> Alcotest.failf "bad history line %S: %s" l e

let keys = [| "a"; "b"; "c"; "d" |]

(* A client process: operations until [until], one at a time; its history
   goes to [file]. *)
let client_proc ~id ~servers ~until ~file =
  match Unix.fork () with
  | 0 ->
      let code =
        try
          let oc = open_out file in
          let c = Result.get_ok (Kv.Client.create ~timeout:10. servers) in
          let rng = Random.State.make [| id |] in
          let n = ref 0 and last = Hashtbl.create 4 in
          while Unix.gettimeofday () < until && !n < 20000 do
            incr n;
            let k = keys.(Random.State.int rng (Array.length keys)) in
            let v = Printf.sprintf "%d.%d" id !n in
            let op =
              match Random.State.int rng 10 with
              | 0 | 1 | 2 -> Kv.Op.Get k
              | 3 | 4 | 5 -> Kv.Op.Put (k, v)
              | 6 -> Kv.Op.Del k
              | _ ->
                  Kv.Op.Cas
                    {
                      key = k;
                      expect = Option.value (Hashtbl.find_opt last k) ~default:"none";
                      set = v;
                    }
            in
            let call = now_us () in
            let o = Kv.Client.call c op in
            let ret = now_us () in
            (match o with Kv.Wire.Done (Kv.Op.Value x) -> Hashtbl.replace last k x | _ -> ());
            (match op with Kv.Op.Put (k, v) -> Hashtbl.replace last k v | _ -> ());
            match o with
            | Kv.Wire.Done (Kv.Op.Error e) -> Printf.fprintf oc "#error %s\n" e
            | Kv.Wire.Done r -> output_string oc (op_line id call ret op (Some r) ^ "\n")
            | Kv.Wire.Unknown _ -> output_string oc (op_line id call (-1) op None ^ "\n")
            | Kv.Wire.Refused _ -> ()
          done;
          close_out oc;
          0
        with e ->
          prerr_endline (Printexc.to_string e);
          1
      in
      Unix._exit code
  | pid -> pid

let history files =
  List.concat_map
    (fun f ->
      String.split_on_char '\n' (read_file f)
      |> List.filter (fun l -> l <> "")
      |> List.map (fun l ->
             if String.length l > 0 && l.[0] = '#' then Alcotest.failf "%s: %s" f l;
             parse_line l))
    files

(* Final reads of every key, one client each, as part of the history. *)
let final_reads ~servers ~base =
  Array.to_list keys
  |> List.mapi (fun i k ->
         let c = Result.get_ok (Kv.Client.create ~timeout:30. servers) in
         let call = now_us () in
         let o = Kv.Client.call c (Kv.Op.Get k) in
         let ret = now_us () in
         Kv.Client.close c;
         match o with
         | Kv.Wire.Done r -> parse_line (op_line (base + i) call ret (Kv.Op.Get k) (Some r))
         | o -> Alcotest.failf "final read of %s: %a" k Kv.Wire.pp_outcome o)

let with_cluster f =
  let dir = temp_dir "kv-e2e" in
  let rs =
    List.init 3 (fun i ->
        {
          data = dir / Printf.sprintf "r%d" i;
          log = dir / Printf.sprintf "r%d.log" i;
          bind = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_DGRAM);
          listen = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_STREAM);
          pid = 0;
        })
  in
  let peers = List.map (fun r -> r.bind) rs in
  Fun.protect
    ~finally:(fun () ->
      List.iter (fun r -> kill r) rs;
      rm_rf dir)
    (fun () -> f dir rs peers)

let check_history name h =
  let known = List.length (List.filter (fun e -> e.L.return <> None) h) in
  let t0 = Unix.gettimeofday () in
  let r = L.check h in
  Fmt.pr "%s: %d operations (%d with a known outcome), checked in %.2f s: %a@." name (List.length h)
    known
    (Unix.gettimeofday () -. t0)
    L.pp_result r;
  match r with L.Linearizable -> () | _ -> Alcotest.failf "%s: %a" name L.pp_result r

(* Runs consort with [args] and [stdin]; exit status and output. *)
let run ?(stdin = "") args =
  let inp = Filename.temp_file "kv-in" "" and out = Filename.temp_file "kv-out" "" in
  Fun.protect
    ~finally:(fun () ->
      Sys.remove inp;
      Sys.remove out)
    (fun () ->
      let oc = open_out inp in
      output_string oc stdin;
      close_out oc;
      let i = Unix.openfile inp [ Unix.O_RDONLY ] 0
      and o = Unix.openfile out [ Unix.O_WRONLY; Unix.O_TRUNC ] 0 in
      let pid =
        Unix.create_process (consort ()) (Array.of_list ("consort" :: args)) i o Unix.stderr
      in
      Unix.close i;
      Unix.close o;
      let _, st = Unix.waitpid [] pid in
      ((match st with Unix.WEXITED c -> c | _ -> -1), read_file out))

let crash_restart () =
  with_cluster @@ fun dir rs peers ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let until = Unix.gettimeofday () +. 8. in
  let files = List.init 4 (fun i -> dir / Printf.sprintf "client%d" i) in
  let pids =
    List.mapi (fun i file -> client_proc ~id:(i + 1) ~servers:(servers rs) ~until ~file) files
  in
  (* One replica is killed and comes back while the clients go on. *)
  Unix.sleepf 2.;
  let victim = List.nth rs 2 in
  let killed_at = now_us () in
  kill victim;
  Unix.sleepf 2.;
  start ~peers victim;
  let restarted_at = now_us () in
  List.iter
    (fun pid ->
      match Unix.waitpid [] pid with
      | _, Unix.WEXITED 0 -> ()
      | _ -> Alcotest.fail "a client process failed")
    pids;
  (* It caught up: reads through it alone answer, from its own state. *)
  wait_ready [ victim.listen ];
  let h1 = history files @ final_reads ~servers:[ victim.listen ] ~base:100 in
  check_history "with a replica killed and restarted" h1;
  (* The same check from the command line, on the clients' files. *)
  let code, out = run ("kv" :: "check" :: files) in
  Alcotest.(check int) ("consort kv check: " ^ out) 0 code;
  let bad = dir / "bad" in
  let oc = open_out bad in
  output_string oc
    (op_line 99 (now_us ()) (now_us () + 1) (Kv.Op.Get "a") (Some (Kv.Op.Value "never-written"))
    ^ "\n");
  close_out oc;
  let code, out = run ("kv" :: "check" :: bad :: files) in
  Alcotest.(check int) ("consort kv check, a value never written: " ^ out) 1 code;
  let during =
    List.length
      (List.filter
         (fun e ->
           e.L.call < killed_at && match e.L.return with Some r -> r > killed_at | None -> true)
         h1)
  in
  let after = List.length (List.filter (fun e -> e.L.call > restarted_at && e.L.client < 100) h1) in
  Fmt.pr "%d operations in flight at the kill, %d made after the restart@." during after;
  Alcotest.(check bool) "clients made progress" true (List.length h1 > 100);
  Alcotest.(check bool) "operations after the restart" true (after > 0);
  (* Every replica is killed, then restarted from its disk. *)
  List.iter (fun r -> kill r) rs;
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let h2 = h1 @ final_reads ~servers:(servers rs) ~base:200 in
  check_history "after every replica restarted from disk" h2

let torn_tail () =
  with_cluster @@ fun _dir rs peers ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let c = Result.get_ok (Kv.Client.create (servers rs)) in
  for i = 1 to 50 do
    match Kv.Client.call c (Kv.Op.Put ("k" ^ string_of_int (i mod 5), string_of_int i)) with
    | Kv.Wire.Done Kv.Op.Ok -> ()
    | o -> Alcotest.failf "put %d: %a" i Kv.Wire.pp_outcome o
  done;
  let r0 = List.hd rs in
  kill ~signal:Sys.sigterm r0;
  (* The tail of its log is torn: the last record cut short, garbage after. *)
  let wal = r0.data / "wal" in
  let size = (Unix.stat wal).Unix.st_size in
  Unix.truncate wal (size - 5);
  let oc = open_out_gen [ Open_append; Open_binary ] 0o644 wal in
  output_string oc "\001\002garbage";
  close_out oc;
  let before = try read_file r0.log with Sys_error _ -> "" in
  start ~peers r0;
  wait_ready [ r0.listen ];
  let log = read_file r0.log in
  let said = String.sub log (String.length before) (String.length log - String.length before) in
  let lines =
    String.split_on_char '\n' said |> List.filter (fun l -> contains l "torn or corrupt tail")
  in
  (match lines with
  | [ l ] -> Fmt.pr "the replica said: %s@." l
  | _ -> Alcotest.failf "the replica did not say it repaired its log in one line: %S" said);
  (* It caught up from the others: every value is the last one written. *)
  let c0 = Result.get_ok (Kv.Client.create [ r0.listen ]) in
  for j = 0 to 4 do
    let last = if j = 0 then 50 else 45 + j in
    match Kv.Client.call c0 (Kv.Op.Get ("k" ^ string_of_int j)) with
    | Kv.Wire.Done (Kv.Op.Value v) ->
        Alcotest.(check string) ("k" ^ string_of_int j) (string_of_int last) v
    | o -> Alcotest.failf "get k%d: %a" j Kv.Wire.pp_outcome o
  done;
  Kv.Client.close c0;
  Kv.Client.close c

let cli () =
  with_cluster @@ fun _dir rs peers ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let s = String.concat "," (servers rs) in
  let expect args code out =
    let c, o = run (args @ [ "--servers"; s ]) in
    Alcotest.(check (pair int string)) (String.concat " " args) (code, out) (c, o)
  in
  expect [ "kv"; "get"; "x" ] 0 "not-found\n";
  expect [ "kv"; "put"; "x"; "1" ] 0 "ok\n";
  expect [ "kv"; "get"; "x" ] 0 "value 1\n";
  expect [ "kv"; "cas"; "x"; "2"; "3" ] 0 "cas-failed\n";
  expect [ "kv"; "cas"; "x"; "1"; "3" ] 0 "ok\n";
  expect [ "kv"; "del"; "x" ] 0 "ok\n";
  expect [ "kv"; "del"; "x" ] 0 "not-found\n";
  let c, o = run [ "kv"; "put"; "big"; String.make 70000 'x'; "--servers"; s ] in
  Alcotest.(check int) "value over the limit: exit 2" 2 c;
  Alcotest.(check bool) "error line" true (String.length o > 7 && String.sub o 0 7 = "error: ");
  let c, o =
    run ~stdin:"put y 1\nget y\n\nfrob y\ncas y 1 2\nget y\ndel y\nget y\n"
      [ "kv"; "shell"; "--servers"; s ]
  in
  Alcotest.(check string)
    "shell"
    "ok\n\
     value 1\n\
     error: unknown command \"frob\" (get, put, del, cas)\n\
     ok\n\
     value 2\n\
     ok\n\
     not-found\n"
    o;
  Alcotest.(check int) "shell exit: its worst" 2 c;
  (* No replica listening: certainly not done. *)
  let dead = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_STREAM) in
  let c, o = run [ "kv"; "put"; "z"; "1"; "--servers"; dead ] in
  Alcotest.(check int) "nobody listening: exit 2" 2 c;
  Alcotest.(check bool) "error line" true (String.sub o 0 7 = "error: ");
  (* A replica that stops answering mid-request: unknown. A fake server
     that accepts and never answers. *)
  let sock = Unix.socket Unix.PF_INET Unix.SOCK_STREAM 0 in
  Unix.setsockopt sock Unix.SO_REUSEADDR true;
  Unix.bind sock (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
  Unix.listen sock 8;
  let port = match Unix.getsockname sock with Unix.ADDR_INET (_, p) -> p | _ -> 0 in
  let c, o =
    run [ "kv"; "put"; "z"; "1"; "--timeout"; "1"; "--servers"; Printf.sprintf "127.0.0.1:%d" port ]
  in
  Unix.close sock;
  Alcotest.(check int) "no answer: exit 3" 3 c;
  Alcotest.(check bool) "unknown line" true (String.length o > 9 && String.sub o 0 9 = "unknown: ")

(* Waits (at most [secs]) for a replica's process to exit: its status. *)
let wait_exit ?(secs = 30.) r =
  let t0 = Unix.gettimeofday () in
  let rec go () =
    match Unix.waitpid [ Unix.WNOHANG ] r.pid with
    | 0, _ ->
        if Unix.gettimeofday () -. t0 > secs then Alcotest.failf "%s did not exit" r.data;
        Unix.sleepf 0.1;
        go ()
    | _, st ->
        r.pid <- 0;
        st
  in
  go ()

let log_since r before =
  let log = try read_file r.log with Sys_error _ -> "" in
  String.sub log (String.length before) (String.length log - String.length before)
  |> String.split_on_char '\n'
  |> List.filter (( <> ) "")

let exits_with_one_line what r before ~says =
  (match wait_exit r with
  | Unix.WEXITED 2 -> ()
  | Unix.WEXITED c -> Alcotest.failf "%s: exit %d" what c
  | _ -> Alcotest.failf "%s: killed" what);
  match log_since r before with
  | [ l ] ->
      List.iter
        (fun w -> if not (contains l w) then Alcotest.failf "%s: %S does not say %S" what l w)
        says;
      Fmt.pr "%s: %s@." what l
  | ls -> Alcotest.failf "%s: not one line: %a" what Fmt.(Dump.list string) ls

(* A replica alone, its view without the others: a request is refused at
   once, and the command says so (exit 2), never "unknown" after running
   into its own timeout. *)
let minority () =
  with_cluster @@ fun _dir rs peers ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let r0 = List.hd rs in
  List.iter (fun r -> kill r) (List.tl rs);
  let c = Result.get_ok (Kv.Client.create ~timeout:1. [ r0.listen ]) in
  let t0 = Unix.gettimeofday () in
  let rec until_refused () =
    match Kv.Client.call c (Kv.Op.Get "x") with
    | Kv.Wire.Refused _ -> ()
    | o ->
        if Unix.gettimeofday () -. t0 > 30. then
          Alcotest.failf "r0 alone still does not refuse: %a" Kv.Wire.pp_outcome o;
        until_refused ()
  in
  until_refused ();
  Kv.Client.close c;
  List.iter
    (fun args ->
      let code, out = run (args @ [ "--servers"; r0.listen; "--timeout"; "3" ]) in
      Alcotest.(check int) (String.concat " " args ^ ": " ^ out) 2 code;
      Alcotest.(check bool) ("a refusal: " ^ out) true (contains out "error: no quorum"))
    [ [ "kv"; "get"; "x" ]; [ "kv"; "put"; "x"; "1" ] ]

(* Pipelining, on a replica of one: requests sent on one connection without
   waiting for the answers, which are matched by request number. 300
   compare-and-sets of one key, each expecting the value the one before
   sets, sent at once (beyond the 64 a connection may have under way): all
   succeed only if applied in the order sent. One client id per request: a
   client's deduplication holds its last request only. Then a client that
   reads its answers 2 s late, into a small buffer: 300 gets of a 64 KB
   value, and 10,000 gets of a 1 KB value, each sent at once (19 and 10 MB
   of answers; the second read slowly, 4 KB at a time). The server takes no
   more than 32 requests under way (it closes a connection past 4 MB of
   answers waiting): every answer comes. *)
let pipelined () =
  with_cluster @@ fun _dir rs _ ->
  let r0 = List.hd rs in
  start ~peers:[ r0.bind ] r0;
  wait_ready [ r0.listen ];
  let fd = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_STREAM 0 in
  Fun.protect ~finally:(fun () -> Unix.close fd) @@ fun () ->
  (* No autotuning (up to 32 MB here): the answers wait at the server. *)
  Unix.setsockopt_int fd Unix.SO_RCVBUF 65536;
  Unix.connect fd (Result.get_ok (Kv.Server.parse_addr r0.listen));
  Unix.setsockopt_float fd Unix.SO_RCVTIMEO 30.;
  let send frames =
    let s = String.concat "" frames in
    let rec go off =
      if off < String.length s then go (off + Unix.write_substring fd s off (String.length s - off))
    in
    go 0
  in
  let req i op = Kv.Wire.frame_request { Kv.Wire.client = Int64.of_int (1000 + i); req = i; op } in
  let buf = Buffer.create 65536 and b = Bytes.create 65536 in
  (* [slow]: 4 KB a read, a pause of 0.5 ms after each. *)
  let rec reply ?(slow = false) () =
    match Kv.Wire.read_frame buf with
    | Error e -> Alcotest.failf "reply: %s" e
    | Ok (Some f) -> (
        match Kv.Wire.decode_reply f with Ok r -> r | Error e -> Alcotest.failf "reply: %s" e)
    | Ok None -> (
        match Unix.read fd b 0 (if slow then 4096 else Bytes.length b) with
        | 0 -> Alcotest.fail "the server closed the connection"
        | n ->
            Buffer.add_subbytes buf b 0 n;
            if slow then Unix.sleepf 0.0005;
            reply ~slow ()
        | exception Unix.Unix_error (e, _, _) ->
            Alcotest.failf "reading the replies: %s" (Unix.error_message e))
  in
  let outcome = Alcotest.testable Kv.Wire.pp_outcome ( = ) in
  let collect ?slow n =
    let got = Hashtbl.create n in
    for _ = 1 to n do
      let r = reply ?slow () in
      if Hashtbl.mem got r.Kv.Wire.rreq then Alcotest.failf "request %d answered twice" r.rreq;
      Hashtbl.replace got r.rreq r.outcome
    done;
    got
  in
  let n = 300 in
  send
    (req 0 (Kv.Op.Put ("c", "0"))
    :: List.init n (fun i ->
           req (i + 1)
             (Kv.Op.Cas { key = "c"; expect = string_of_int i; set = string_of_int (i + 1) })));
  let got = collect (n + 1) in
  for i = 0 to n do
    Alcotest.(check (option outcome))
      (Printf.sprintf "request %d" i) (Some (Kv.Wire.Done Kv.Op.Ok)) (Hashtbl.find_opt got i)
  done;
  let late ?slow ~first ~key ~size m =
    let v = String.make size 'v' in
    send [ req first (Kv.Op.Put (key, v)) ];
    Alcotest.(check (option outcome))
      ("put " ^ key) (Some (Kv.Wire.Done Kv.Op.Ok))
      (Hashtbl.find_opt (collect 1) first);
    send (List.init m (fun i -> req (first + 1 + i) (Kv.Op.Get key)));
    Unix.sleepf 2.;
    let got = collect ?slow m in
    for i = first + 1 to first + m do
      match Hashtbl.find_opt got i with
      | Some (Kv.Wire.Done (Kv.Op.Value x)) when x = v -> ()
      | o ->
          Alcotest.failf "get %d of %s: %a" i key
            Fmt.(option ~none:(any "no answer") Kv.Wire.pp_outcome)
            o
    done
  in
  late ~first:1000 ~key:"big" ~size:65536 300;
  late ~slow:true ~first:2000 ~key:"small" ~size:1024 10_000

(* A fake replica in a child process: [serve fd] on the first connection
   accepted at the port returned; it exits when [serve] returns. *)
let fake serve =
  let sock = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_STREAM 0 in
  Unix.setsockopt sock Unix.SO_REUSEADDR true;
  Unix.bind sock (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
  Unix.listen sock 8;
  let port = match Unix.getsockname sock with Unix.ADDR_INET (_, p) -> p | _ -> 0 in
  match Unix.fork () with
  | 0 ->
      let code =
        try
          let fd, _ = Unix.accept sock in
          Unix.close sock;
          Unix.setsockopt_float fd Unix.SO_RCVTIMEO 20.;
          serve fd;
          Unix.close fd;
          0
        with e ->
          prerr_endline ("fake replica: " ^ Printexc.to_string e);
          1
      in
      Unix._exit code
  | pid ->
      Unix.close sock;
      (Printf.sprintf "127.0.0.1:%d" port, pid)

let fake_exit pid =
  match Unix.waitpid [] pid with
  | _, Unix.WEXITED 0 -> ()
  | _ -> Alcotest.fail "the fake replica failed (its error is above)"

(* [n] requests read off [fd], in order. *)
let read_requests fd buf n =
  let b = Bytes.create 4096 in
  let rec go acc k =
    if k = 0 then List.rev acc
    else
      match Kv.Wire.read_frame buf with
      | Error e -> failwith e
      | Ok (Some f) -> go (Result.get_ok (Kv.Wire.decode_request f) :: acc) (k - 1)
      | Ok None -> (
          match Unix.read fd b 0 (Bytes.length b) with
          | 0 -> failwith "the client closed the connection"
          | m ->
              Buffer.add_subbytes buf b 0 m;
              go acc k)
  in
  go [] n

let answer fd rreq outcome =
  let s = Kv.Wire.frame_reply { Kv.Wire.rreq; outcome } in
  ignore (Unix.write_substring fd s 0 (String.length s))

(* The client's pipeline against a fake replica that waits for 8 requests
   under way before it answers any, then answers them last first, twice:
   each outcome goes back to its own request, in the order given, and the
   requests under way had client ids of their own. *)
let pipeline_matched () =
  let addr, pid =
    fake (fun fd ->
        let buf = Buffer.create 4096 in
        for _ = 1 to 2 do
          let reqs = read_requests fd buf 8 in
          let ids = List.sort_uniq compare (List.map (fun r -> r.Kv.Wire.client) reqs) in
          List.iter
            (fun (r : Kv.Wire.request) ->
              answer fd r.req
                (Kv.Wire.Done
                   (match r.op with
                   | _ when List.length ids <> 8 -> Kv.Op.Error "a client id used twice under way"
                   | Kv.Op.Get k -> Kv.Op.Value ("of " ^ k)
                   | _ -> Kv.Op.Ok)))
            (List.rev reqs)
        done)
  in
  let c = Result.get_ok (Kv.Client.create ~timeout:20. [ addr ]) in
  let got = ref [] and i = ref 0 in
  Kv.Client.pipeline ~depth:8 c (fun () ->
      if !i = 16 then None
      else begin
        let k = Printf.sprintf "k%d" !i in
        incr i;
        Some (Kv.Client.Op (Kv.Op.Get k, fun o -> got := (k, o) :: !got))
      end);
  Kv.Client.close c;
  fake_exit pid;
  let outcome = Alcotest.testable Kv.Wire.pp_outcome ( = ) in
  Alcotest.(check (list (pair string outcome)))
    "each get its own answer, in order"
    (List.init 16 (fun i ->
         let k = Printf.sprintf "k%d" i in
         (k, Kv.Wire.Done (Kv.Op.Value ("of " ^ k)))))
    (List.rev !got)

(* A connection lost with three commands under way, the second answered:
   the first and third print unknown (exit 3), the second its result, the
   fourth (no server left) an error; a bad line keeps its place. *)
let pipeline_lost () =
  let addr, pid =
    fake (fun fd ->
        let reqs = read_requests fd (Buffer.create 4096) 3 in
        answer fd (List.nth reqs 1).Kv.Wire.req (Kv.Wire.Done Kv.Op.Ok))
  in
  let code, out =
    run ~stdin:"put a 1\nput b 2\nfrob\nput c 3\nput d 4\n"
      [ "kv"; "shell"; "--pipeline"; "4"; "--servers"; addr ]
  in
  fake_exit pid;
  let lines = String.split_on_char '\n' out in
  let starts p l = String.length l >= String.length p && String.sub l 0 (String.length p) = p in
  (match lines with
  | [ a; b; frob; c; d; "" ]
    when starts "unknown: " a && b = "ok"
         && starts "error: unknown command" frob
         && starts "unknown: " c && starts "error: " d ->
      ()
  | _ -> Alcotest.failf "shell --pipeline 4 printed:\n%s" out);
  Alcotest.(check int) "exit 3: outcomes unknown" 3 code

(* Pipelined clients at three replicas: each sends, 8 at a time on one
   connection, pairs of a put of its own key and a get of it (the get must
   see that put: a replica orders a connection's get after the writes sent
   before it), among puts and gets of four shared keys. The replicas may
   order a write after a read sent before it, so the checker takes the
   requests under way on one connection as concurrent; the history is
   linearizable. *)
let pipeline_order () =
  with_cluster @@ fun dir rs peers ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let procs =
    List.init 3 (fun id ->
        let file = dir / Printf.sprintf "p%d.hist" id in
        let servers =
          List.map
            (fun r -> r.listen)
            (List.filteri (fun j _ -> j >= id) rs @ List.filteri (fun j _ -> j < id) rs)
        in
        match Unix.fork () with
        | 0 ->
            let code =
              try
                Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
                let oc = open_out file in
                let c = Result.get_ok (Kv.Client.create ~timeout:20. servers) in
                let rng = Random.State.make [| 7; id |] in
                let n = ref 0 and wrong = ref 0 and own = Printf.sprintf "own%d" id in
                let record op call o =
                  let ret = now_us () in
                  match o with
                  | Kv.Wire.Done (Kv.Op.Error e) -> Printf.fprintf oc "#error %s\n" e
                  | Kv.Wire.Done r -> output_string oc (op_line id call ret op (Some r) ^ "\n")
                  | Kv.Wire.Unknown _ -> output_string oc (op_line id call (-1) op None ^ "\n")
                  | Kv.Wire.Refused e -> Printf.fprintf oc "#refused %s\n" e
                in
                let pending = Queue.create () in
                Kv.Client.pipeline ~depth:8 c (fun () ->
                    if Queue.is_empty pending && !n < 400 then begin
                      incr n;
                      let v = Printf.sprintf "%d.%d" id !n in
                      Queue.push (Kv.Op.Put (own, v)) pending;
                      Queue.push (Kv.Op.Get own) pending;
                      let k = keys.(Random.State.int rng (Array.length keys)) in
                      Queue.push
                        (if Random.State.bool rng then Kv.Op.Put (k, v) else Kv.Op.Get k)
                        pending
                    end;
                    match Queue.take_opt pending with
                    | None -> None
                    | Some op ->
                        let call = now_us () in
                        (* A put sent after the get may be ordered before it: a value
                           as new or newer. *)
                        let expect =
                          match op with Kv.Op.Get k when k = own -> Some !n | _ -> None
                        in
                        let older m x =
                          match String.split_on_char '.' x with
                          | [ _; j ] -> int_of_string j < m
                          | _ -> true
                        in
                        Some
                          (Kv.Client.Op
                             ( op,
                               fun o ->
                                 (match (expect, o) with
                                 | Some m, Kv.Wire.Done (Kv.Op.Value x) when older m x ->
                                     Printf.eprintf "get %s after put %d.%d read %s\n%!" own id m x;
                                     incr wrong
                                 | Some _, Kv.Wire.Done Kv.Op.Not_found -> incr wrong
                                 | _ -> ());
                                 record op call o )));
                close_out oc;
                if !wrong > 0 then 1 else 0
              with e ->
                prerr_endline (Printexc.to_string e);
                1
            in
            Unix._exit code
        | pid -> (pid, file))
  in
  List.iter
    (fun (pid, _) ->
      match Unix.waitpid [] pid with
      | _, Unix.WEXITED 0 -> ()
      | _ -> Alcotest.fail "a pipelined client saw a get miss the put before it (above)")
    procs;
  let h = history (List.map snd procs) in
  Alcotest.(check bool)
    "the clients got answers" true
    (List.length h >= 3_240 (* nine tenths of 3 x 1,200 *));
  check_history "pipelined clients" h

(* Issue 28's wiped replica, as processes: put x 1; r2 down; put x 2; r0
   and r1 down; r0's directory wiped. Without --join it is refused; with
   it, beside the stale r2, nothing is served (never x = 1) until r1 is
   back. Then a replica started on a directory of another group is
   refused, naming both. *)
let wiped_and_foreign () =
  with_cluster @@ fun dir rs peers ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let r0, r1, r2 = match rs with [ a; b; c ] -> (a, b, c) | _ -> assert false in
  let put ~via k v =
    let code, out = run [ "kv"; "put"; k; v; "--servers"; String.concat "," (servers via) ] in
    Alcotest.(check (pair int string)) ("put " ^ k ^ " " ^ v) (0, "ok\n") (code, out)
  in
  put ~via:rs "x" "1";
  kill r2;
  put ~via:[ r0; r1 ] "x" "2";
  kill r0;
  kill r1;
  rm_rf r0.data;
  let before = try read_file r0.log with Sys_error _ -> "" in
  start ~init:[] ~peers r0;
  exits_with_one_line "an empty directory without --join" r0 before ~says:[ "--new"; "--join" ];
  start ~init:[ "--join" ] ~peers r0;
  start ~peers r2;
  let c = Result.get_ok (Kv.Client.create ~timeout:1. (servers [ r0; r2 ])) in
  (* Until they have said "no quorum" for 3 s (at most 30 s): never x = 1. *)
  let t0 = Unix.gettimeofday () and refused = ref 0 and first = ref None in
  while
    Unix.gettimeofday () -. t0 < 30.
    && match !first with Some t1 -> Unix.gettimeofday () -. t1 < 3. | None -> true
  do
    match Kv.Client.call c (Kv.Op.Get "x") with
    | Kv.Wire.Done r ->
        Alcotest.failf "an empty replica and a stale one answered: %a" Kv.Op.pp_response r
    | Kv.Wire.Refused _ ->
        incr refused;
        if !first = None then first := Some (Unix.gettimeofday ())
    | Kv.Wire.Unknown _ -> ()
  done;
  Kv.Client.close c;
  Alcotest.(check bool) "they refused" true (!refused > 0);
  start ~peers r1;
  wait_ready (servers rs);
  List.iter
    (fun r ->
      let code, out = run [ "kv"; "get"; "x"; "--servers"; r.listen ] in
      Alcotest.(check (pair int string)) ("get x through " ^ r.data) (0, "value 2\n") (code, out))
    rs;
  (* A directory of another group (a cluster of one). *)
  let other =
    {
      data = dir / "other";
      log = dir / "other.log";
      bind = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_DGRAM);
      listen = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_STREAM);
      pid = 0;
    }
  in
  start ~group:"other" ~peers:[] other;
  wait_ready [ other.listen ];
  put ~via:[ other ] "x" "other";
  kill other;
  kill r0;
  let r0' = { r0 with data = other.data; pid = 0 } in
  let before = try read_file r0'.log with Sys_error _ -> "" in
  start ~peers r0';
  exits_with_one_line "a directory of another group" r0' before ~says:[ "group other"; "group e2e" ];
  List.iter
    (fun r ->
      let code, out = run [ "kv"; "get"; "x"; "--servers"; r.listen ] in
      Alcotest.(check (pair int string)) ("get x through " ^ r.data) (0, "value 2\n") (code, out))
    [ r1; r2 ]

let mount_tmpfs d size =
  match
    Unix.system
      (Printf.sprintf "mount -t tmpfs -o size=%s consort-kv-e2e %s" size (Filename.quote d))
  with
  | Unix.WEXITED 0 -> ()
  | _ -> Alcotest.failf "mount -t tmpfs %s failed (root is needed)" d

let umount d = ignore (Unix.system (Printf.sprintf "umount %s" (Filename.quote d)))

(* r2's data directory on a 1 MB tmpfs, 30 KB values: it fills, r2 stops
   (one line, exit 2) and the others go on; then every replica restarts,
   r2 on a larger disk, and every write answered reads back. *)
let one_full () =
  with_cluster @@ fun _dir rs peers ->
  let r0, r1, r2 = match rs with [ a; b; c ] -> (a, b, c) | _ -> assert false in
  Unix.mkdir r2.data 0o700;
  mount_tmpfs r2.data "1m";
  Fun.protect ~finally:(fun () ->
      kill r2;
      umount r2.data)
  @@ fun () ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let before = try read_file r2.log with Sys_error _ -> "" in
  let c = Result.get_ok (Kv.Client.create ~timeout:20. (servers [ r0; r1 ])) in
  let value i = String.make 30_000 (Char.chr (Char.code 'a' + (i mod 26))) in
  for i = 1 to 60 do
    match Kv.Client.call c (Kv.Op.Put ("k" ^ string_of_int (i mod 10), value i)) with
    | Kv.Wire.Done Kv.Op.Ok -> ()
    | o -> Alcotest.failf "put %d: %a" i Kv.Wire.pp_outcome o
  done;
  Kv.Client.close c;
  exits_with_one_line "r2 on a full disk" r2 before ~says:[ "disk full" ];
  List.iter (fun r -> kill r) rs;
  ignore (Unix.system (Printf.sprintf "mount -o remount,size=16m %s" (Filename.quote r2.data)));
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  List.iter
    (fun r ->
      let c = Result.get_ok (Kv.Client.create ~timeout:20. [ r.listen ]) in
      for j = 0 to 9 do
        let last = if j = 0 then 60 else 50 + j in
        match Kv.Client.call c (Kv.Op.Get ("k" ^ string_of_int j)) with
        | Kv.Wire.Done (Kv.Op.Value v) when v = value last -> ()
        | o -> Alcotest.failf "k%d through %s: %a" j r.data Kv.Wire.pp_outcome o
      done;
      Kv.Client.close c)
    rs

(* Every replica's data directory on one 2 MB tmpfs (issue 28's case),
   30 KB values: once the disk is full the replicas stop (one line each,
   exit 2) and nothing more is acknowledged; after a restart on a larger
   disk every write answered ok reads back. *)
let all_full () =
  let dir = temp_dir "kv-e2e-full" in
  let small = dir / "small" in
  Unix.mkdir small 0o700;
  mount_tmpfs small "2m";
  let rs =
    List.init 3 (fun i ->
        {
          data = small / Printf.sprintf "r%d" i;
          log = dir / Printf.sprintf "r%d.log" i;
          bind = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_DGRAM);
          listen = Printf.sprintf "127.0.0.1:%d" (free_port Unix.SOCK_STREAM);
          pid = 0;
        })
  in
  let peers = List.map (fun r -> r.bind) rs in
  Fun.protect ~finally:(fun () ->
      List.iter (fun r -> kill r) rs;
      umount small;
      rm_rf dir)
  @@ fun () ->
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let c = Result.get_ok (Kv.Client.create ~timeout:10. (servers rs)) in
  let value i = Printf.sprintf "%04d" i ^ String.make 30_000 'v' in
  let acked = ref [] and refused = ref 0 and unknown = ref 0 and i = ref 0 and whys = ref [] in
  while !i < 120 && !refused + !unknown < 5 do
    incr i;
    match Kv.Client.call c (Kv.Op.Put ("p" ^ string_of_int !i, value !i)) with
    | Kv.Wire.Done Kv.Op.Ok -> acked := !i :: !acked
    | Kv.Wire.Done r -> Alcotest.failf "put %d: %a" !i Kv.Op.pp_response r
    | Kv.Wire.Refused why ->
        incr refused;
        whys := ("error: " ^ why) :: !whys
    | Kv.Wire.Unknown why ->
        incr unknown;
        whys := ("unknown: " ^ why) :: !whys
  done;
  Kv.Client.close c;
  Fmt.pr "%d puts acknowledged, then %d refused and %d unknown@." (List.length !acked) !refused
    !unknown;
  List.iter (fun w -> Fmt.pr "  %s@." w) (List.rev !whys);
  Alcotest.(check bool) "the disk filled" true (!refused + !unknown >= 5);
  List.iter
    (fun r ->
      match wait_exit r with
      | Unix.WEXITED 2 -> (
          match log_since r "" with
          | [ l ] when contains l "disk full" -> ()
          | ls -> Alcotest.failf "%s: %a" r.log Fmt.(Dump.list string) ls)
      | _ -> Alcotest.failf "%s did not exit 2" r.data)
    rs;
  ignore (Unix.system (Printf.sprintf "mount -o remount,size=64m %s" (Filename.quote small)));
  List.iter (start ~peers) rs;
  wait_ready (servers rs);
  let c = Result.get_ok (Kv.Client.create ~timeout:20. (servers rs)) in
  List.iter
    (fun i ->
      match Kv.Client.call c (Kv.Op.Get ("p" ^ string_of_int i)) with
      | Kv.Wire.Done (Kv.Op.Value v) when v = value i -> ()
      | o -> Alcotest.failf "acknowledged put %d: %a" i Kv.Wire.pp_outcome o)
    !acked;
  Kv.Client.close c

let () =
  Alcotest.run "kv-e2e"
    [
      ( "processes",
        [
          Alcotest.test_case "command line" `Quick cli;
          Alcotest.test_case "torn log tail repaired on start" `Quick torn_tail;
          Alcotest.test_case "kill, restart, restart all from disk" `Quick crash_restart;
          Alcotest.test_case "a replica alone refuses: exit 2" `Quick minority;
          Alcotest.test_case "pipelined requests on one connection, answers read late" `Quick
            pipelined;
          Alcotest.test_case "a wiped and a foreign data directory" `Quick wiped_and_foreign;
          Alcotest.test_case "client pipeline: answers matched by request number" `Quick
            pipeline_matched;
          Alcotest.test_case "client pipeline: a lost connection is unknown (exit 3)" `Quick
            pipeline_lost;
          Alcotest.test_case "client pipeline: a get sees the put before it; linearizable" `Quick
            pipeline_order;
          Alcotest.test_case "one replica on a full tmpfs" `Quick one_full;
          Alcotest.test_case "every replica on one full tmpfs" `Quick all_full;
        ] );
    ]
