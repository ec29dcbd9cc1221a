(* The replicated directory server and its shell tools as real processes
   over loopback UDP: three replicas sharing one port key; mkdir, ls, link,
   lookup, chmod, rm; rights narrowed along a path through the group
   column; refusals with exit status 2; a replica killed with SIGKILL while
   the others keep serving, restarted, catching up, and serving alone with
   one other. *)

open Consort_cap
open Consort_crypto
open Consort_local

let consort () =
  Filename.concat
    (Filename.dirname Sys.executable_name)
    (Filename.concat ".." (Filename.concat ".." "bin/main.exe"))

let ( / ) = Filename.concat

type replica = { i : int; rpc : string; group : string; mutable pid : int }

(* consort cap dir serve's arguments for replica [r] of [reps] on [data], with [init] (--new, --join
   or nothing). *)
let serve_args d reps r data init =
  let peers =
    String.concat "," (List.filter_map (fun x -> if x.i <> r.i then Some x.group else None) reps)
  in
  [
    "cap";
    "dir";
    "serve";
    "--data";
    data;
    "--key";
    d / "dir.key";
    "--bind";
    r.rpc;
    "--group";
    r.group;
    "--peers";
    peers;
  ]
  @ init

(* [init]: --new at the first start (no store identity in the data directory yet), nothing after;
   or as given (["--join"]). *)
let start ?init d reps r =
  let data = d / Printf.sprintf "r%d" r.i in
  let init =
    match init with
    | Some l -> l
    | None -> if Sys.file_exists (data / "identity") then [] else [ "--new" ]
  in
  let out, w = Unix.pipe ~cloexec:true () in
  let err =
    Unix.openfile
      (d / Printf.sprintf "r%d.log" r.i)
      [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND; Unix.O_CLOEXEC ]
      0o644
  in
  let pid =
    Unix.create_process_env (consort ())
      (Array.of_list ("consort" :: serve_args d reps r data init))
      (Array.append [| "CONSORT_MULTICAST=off" |] (Unix.environment ()))
      Unix.stdin w err
  in
  Unix.close w;
  Unix.close err;
  r.pid <- pid;
  let ic = Unix.in_channel_of_descr out in
  let line = try input_line ic with End_of_file -> "" in
  let line2 = try input_line ic with End_of_file -> "" in
  close_in ic;
  match (String.split_on_char ' ' line, String.split_on_char ' ' line2) with
  | [ "root"; cap ], [ "server"; s ] -> (cap, s)
  | _ -> Alcotest.failf "replica %d's first lines: %S %S" r.i line line2

(* Never pid 0 (the process group): a replica not started, or already reaped. *)
let kill r =
  if r.pid > 0 then begin
    (try Unix.kill r.pid Sys.sigkill with Unix.Unix_error _ -> ());
    (try ignore (Unix.waitpid [] r.pid) with Unix.Unix_error _ -> ());
    r.pid <- 0
  end

let run ~env args =
  let out = Filename.temp_file "dir-out" "" and err = Filename.temp_file "dir-err" "" in
  Fun.protect
    ~finally:(fun () ->
      Sys.remove out;
      Sys.remove err)
    (fun () ->
      let fd p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0 in
      let o = fd out and e = fd err in
      let pid =
        Unix.create_process_env (consort ())
          (Array.of_list ("consort" :: args))
          (Array.append (Array.of_list env) (Unix.environment ()))
          Unix.stdin o e
      in
      Unix.close o;
      Unix.close e;
      let _, st = Unix.waitpid [] pid in
      ((match st with Unix.WEXITED c -> c | _ -> -1), read_file out, read_file err))

let ok ~env args =
  let code, out, err = run ~env args in
  if code <> 0 then Alcotest.failf "consort %s: exit %d: %s" (String.concat " " args) code err;
  out

let refused ~env reason args =
  let code, _, err = run ~env args in
  Alcotest.(check int) (String.concat " " args ^ ": exit 2") 2 code;
  if not (contains err reason) then
    Alcotest.failf "%s: %S does not name %S" (String.concat " " args) err reason;
  Alcotest.(check int) "one line" 1 (List.length (String.split_on_char '\n' (String.trim err)))

(* Until [f] gives Some, at most [n] tries a second apart (the replicas
   form their group; a killed one is excluded). *)
let rec eventually n what f =
  match f () with
  | Some x -> x
  | None ->
      if n <= 0 then Alcotest.failf "%s: never" what
      else (
        Unix.sleepf 1.;
        eventually (n - 1) what f)

let rows ls =
  List.filter_map
    (fun l -> match String.split_on_char '\t' l with [ n; _ ] -> Some n | _ -> None)
    (String.split_on_char '\n' ls)

let test_replicated () =
  let d = temp_dir "capdir-e2e" in
  let reps =
    List.init 3 (fun i ->
        {
          i;
          rpc = Printf.sprintf "127.0.0.1:%d" (free_port ());
          group = Printf.sprintf "127.0.0.1:%d" (free_port ());
          pid = 0;
        })
  in
  Fun.protect
    ~finally:(fun () ->
      List.iter kill reps;
      rm_rf d)
    (fun () ->
      (* The first makes the key; the others share it. *)
      let roots = List.map (start d reps) reps in
      let root, dserver = List.hd roots in
      List.iter (fun (r, _) -> Alcotest.(check string) "one root for all replicas" root r) roots;
      let locate l = "CONSORT_LOCATE=" ^ String.concat "," (List.map (fun r -> r.rpc) l) in
      let env = [ "CONSORT_ROOT=" ^ root; locate reps; "CONSORT_MULTICAST=off" ] in
      let home =
        eventually 30 "the first mkdir" (fun () ->
            match run ~env [ "cap"; "mkdir"; "/home" ] with
            | 0, out, _ -> Some (String.trim out)
            | _ -> None)
      in
      Alcotest.(check bool) "mkdir prints a capability" true (Result.is_ok (Cap.of_string home));
      ignore (ok ~env [ "cap"; "mkdir"; "/home/alice" ]);
      (* A capability of another server, stored under a name. *)
      let g = Crypto.deterministic "dir-e2e" in
      let fport = Port.Key.port (Port.Key.generate ~g ()) in
      let file = Cap.owner fport ~obj:7 (Cap.Secret.generate ~g ()) in
      ignore (ok ~env [ "cap"; "dir"; "link"; "/home/alice/notes"; Cap.to_string file ]);
      ignore (ok ~env [ "cap"; "chmod"; "/home/alice/notes"; "all:read:none" ]);
      Alcotest.(check (list string))
        "ls" [ "notes" ]
        (rows (ok ~env [ "cap"; "ls"; "/home/alice" ]));
      (match
         Cap.of_string (String.trim (ok ~env [ "cap"; "dir"; "lookup"; "/home/alice/notes" ]))
       with
      | Ok c -> Alcotest.(check bool) "the owner gets all" true (Cap.equal c file)
      | Error _ -> Alcotest.fail "lookup output");
      (* Through the root's group column: home narrowed to its group and
         other columns, alice likewise, notes to read. *)
      let group_root =
        Result.get_ok (Cap.restrict (Result.get_ok (Cap.of_string root)) (Rights.of_int_exn 0x02))
      in
      (match
         Cap.of_string
           (String.trim
              (ok ~env
                 [ "cap"; "dir"; "lookup"; "--root"; Cap.to_string group_root; "/home/alice/notes" ]))
       with
      | Ok c -> Alcotest.(check string) "the group column reads" "read" (Rights.to_string c.rights)
      | Error _ -> Alcotest.fail "lookup output");
      refused ~env "denied" [ "cap"; "rm"; "--root"; Cap.to_string group_root; "/home/alice/notes" ];
      (* The standard operations: info, status, restrict; destroy refused. *)
      Alcotest.(check bool)
        "std_info" true
        (contains (ok ~env [ "cap"; "info"; home ]) "directory, 1 rows");
      Alcotest.(check bool)
        "std_status" true
        (contains (ok ~env [ "cap"; "status"; dserver ]) "directory replica");
      let narrowed =
        String.trim (ok ~env [ "cap"; "restrict"; Cap.to_string group_root; "--rights"; "0x00" ])
      in
      Alcotest.(check bool)
        "std_restrict" true
        (match Cap.of_string narrowed with Ok c -> Rights.to_int c.rights = 0 | Error _ -> false);
      refused ~env "refused" [ "cap"; "destroy"; home ];
      refused ~env "not found: nothing" [ "cap"; "rm"; "/home/nothing" ];
      refused ~env "no server answered" [ "cap"; "ls"; "/home/alice/notes" ];
      refused ~env "x: not found" [ "cap"; "ls"; "/x/y" ];
      refused ~env "unknown right" [ "cap"; "chmod"; "/home/alice/notes"; "all:bogus" ];
      refused ~env "exists" [ "cap"; "mkdir"; "/home/alice" ];
      refused
        ~env:[ "CONSORT_ROOT=cap1:nonsense"; locate reps ]
        "bad capability" [ "cap"; "ls"; "/" ];
      (* One replica killed: the others go on (once it is excluded). *)
      let r0 = List.nth reps 0 and r1 = List.nth reps 1 in
      kill r0;
      (* Until the failure detector excludes it, a request may come back
         unknown (exit 3) on a loaded machine: then it is tried again, and
         "exists" or "not found" says the first one took effect. *)
      let again ~env args already =
        eventually 30 (String.concat " " args) (fun () ->
            match run ~env args with
            | 0, _, _ -> Some ()
            | 2, _, e when contains e already -> Some ()
            | _ -> None)
      in
      again ~env [ "cap"; "mkdir"; "/home/bob" ] "exists";
      again ~env [ "cap"; "rm"; "/home/alice/notes" ] "not found";
      (* It restarts from its disk and catches up; then another is killed,
         and the restarted one serves with the third. *)
      ignore (start d reps r0 : string * string);
      let env0 = [ "CONSORT_ROOT=" ^ root; locate [ r0 ]; "CONSORT_MULTICAST=off" ] in
      let ls0 =
        eventually 30 "the restarted replica" (fun () ->
            match run ~env:env0 [ "cap"; "ls"; "/home" ] with 0, out, _ -> Some out | _ -> None)
      in
      Alcotest.(check (list string)) "caught up" [ "alice"; "bob" ] (rows ls0);
      kill r1;
      again ~env:env0 [ "cap"; "mkdir"; "/home/carol" ] "exists";
      Alcotest.(check (list string))
        "after the second kill" [ "alice"; "bob"; "carol" ]
        (rows (ok ~env:env0 [ "cap"; "ls"; "/home" ]));
      Alcotest.(check (list string))
        "rm took effect" []
        (rows (ok ~env:env0 [ "cap"; "ls"; "/home/alice" ])))

(* Garbage collection over processes: one directory replica and a file
   server; a linked file and directory stay through every round, an
   unlinked file and directory go after their lifetimes. *)
(* One directory replica and a file server in a fresh directory: [f d ~env ~root ~dserver ~fserver],
   then both killed and the directory removed. *)
let with_replica_and_fs name f =
  let d = temp_dir name in
  let r =
    {
      i = 0;
      rpc = Printf.sprintf "127.0.0.1:%d" (free_port ());
      group = Printf.sprintf "127.0.0.1:%d" (free_port ());
      pid = 0;
    }
  in
  let fs_addr = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let fs_pid = ref 0 in
  Fun.protect
    ~finally:(fun () ->
      kill r;
      (try Unix.kill !fs_pid Sys.sigkill with Unix.Unix_error _ -> ());
      (try ignore (Unix.waitpid [] !fs_pid) with Unix.Unix_error _ -> ());
      rm_rf d)
    (fun () ->
      let root, dserver = start d [ r ] r in
      let out, w = Unix.pipe ~cloexec:true () in
      fs_pid :=
        Unix.create_process_env (consort ())
          [| "consort"; "cap"; "fs"; "serve"; "--new"; "--data"; d / "fs"; "--bind"; fs_addr |]
          (Array.append [| "CONSORT_MULTICAST=off" |] (Unix.environment ()))
          Unix.stdin w Unix.stderr;
      Unix.close w;
      let ic = Unix.in_channel_of_descr out in
      let fserver =
        match String.split_on_char ' ' (input_line ic) with
        | [ "server"; c ] -> c
        | _ -> Alcotest.fail "file server's first line"
      in
      close_in ic;
      let env =
        [
          "CONSORT_ROOT=" ^ root; "CONSORT_LOCATE=" ^ r.rpc ^ "," ^ fs_addr; "CONSORT_MULTICAST=off";
        ]
      in
      f d ~env ~root ~dserver ~fserver)

let test_gc () =
  with_replica_and_fs "capdir-gc" @@ fun d ~env ~root:_ ~dserver ~fserver ->
  let data = d / "data.txt" in
  let oc = open_out data in
  output_string oc "kept";
  close_out oc;
  let put () = String.trim (ok ~env [ "cap"; "fs"; "put"; "--server"; fserver; data ]) in
  let kept =
    eventually 30 "the first put" (fun () ->
        match run ~env [ "cap"; "fs"; "put"; "--server"; fserver; data ] with
        | 0, o, _ -> Some (String.trim o)
        | _ -> None)
  in
  let lost = put () in
  let home =
    eventually 30 "the first mkdir" (fun () ->
        match run ~env [ "cap"; "mkdir"; "/home" ] with
        | 0, o, _ -> Some (String.trim o)
        | _ -> None)
  in
  let gone_dir = String.trim (ok ~env [ "cap"; "mkdir"; "/tmp" ]) in
  ignore (ok ~env [ "cap"; "dir"; "link"; "/home/kept"; kept ]);
  refused ~env "not a directory" [ "cap"; "ls"; "/home/kept" ];
  ignore (ok ~env [ "cap"; "dir"; "link"; "/tmp/lost"; lost ]);
  ignore (ok ~env [ "cap"; "rm"; "/tmp" ]);
  let report =
    ok ~env [ "cap"; "dir"; "gc"; "--server"; dserver; "--fs"; fserver; "--rounds"; "25" ]
  in
  Alcotest.(check int)
    "25 rounds" 25
    (List.length (List.filter (fun l -> l <> "") (String.split_on_char '\n' report)));
  Alcotest.(check string)
    "a reachable file stays" "4"
    (String.trim (ok ~env [ "cap"; "fs"; "size"; kept ]));
  refused ~env "not found" [ "cap"; "fs"; "size"; lost ];
  refused ~env "not found" [ "cap"; "ls"; "--root"; gone_dir; "/" ];
  Alcotest.(check (list string))
    "a reachable directory stays" [ "kept" ]
    (rows (ok ~env [ "cap"; "ls"; "--root"; home; "/" ]))

(* consort bench dir in a tiny configuration: it runs to the end, every
   operation of every row succeeds. *)
let test_bench () =
  let code, out, err = run ~env:[] [ "bench"; "dir"; "--clients"; "2"; "--seconds"; "1" ] in
  if code <> 0 then Alcotest.failf "bench dir: exit %d: %s%s" code out err;
  let rows = List.filter (fun l -> contains l "ops/s") (String.split_on_char '\n' out) in
  Alcotest.(check int) "four rows" 4 (List.length rows);
  List.iter (fun l -> if contains l "failed" then Alcotest.failf "bench dir: %s" l) rows

(* consort cap put, get, cat and shell: files by path over a real directory replica and file
   server, the file server found at /sys/fs. *)
let test_shell () =
  with_replica_and_fs "capdir-shell" @@ fun d ~env ~root:_ ~dserver:_ ~fserver ->
  ignore
    (eventually 30 "the first mkdir" (fun () ->
         match run ~env [ "cap"; "mkdir"; "/sys" ] with 0, o, _ -> Some o | _ -> None));
  ignore (ok ~env [ "cap"; "mkdir"; "/home" ]);
  (* No file server known yet: put says so. *)
  let write p content =
    let oc = open_out_bin p in
    output_string oc content;
    close_out oc
  in
  write (d / "small") "hello";
  refused ~env "no file server" [ "cap"; "put"; d / "small"; "/home/small" ];
  ignore (ok ~env [ "cap"; "dir"; "link"; "/sys/fs"; fserver ]);
  (* Binary content, an empty file, and a file of several chunks (1 MiB each). *)
  let binary = String.init 70_000 (fun i -> Char.chr (i * 7 land 255)) in
  let big =
    String.init (((5 lsl 20) lsr 1) + 123) (fun i -> Char.chr (((i * 31) + (i lsr 9)) land 255))
  in
  write (d / "bin") binary;
  write (d / "empty") "";
  write (d / "big") big;
  List.iter
    (fun n -> ignore (ok ~env [ "cap"; "put"; d / n; "/home/" ^ n ]))
    [ "small"; "bin"; "empty"; "big" ];
  Alcotest.(check string) "cat" "hello" (ok ~env [ "cap"; "cat"; "/home/small" ]);
  Alcotest.(check string)
    "cat of two" "hellohello"
    (ok ~env [ "cap"; "cat"; "/home/small"; "/home/small" ]);
  Alcotest.(check string) "empty" "" (ok ~env [ "cap"; "cat"; "/home/empty" ]);
  ignore (ok ~env [ "cap"; "get"; "/home/bin"; d / "bin.back" ]);
  Alcotest.(check bool) "binary round trip" true (read_file (d / "bin.back") = binary);
  ignore (ok ~env [ "cap"; "get"; "/home/big"; d / "big.back" ]);
  Alcotest.(check int)
    "several chunks: size" (String.length big)
    (String.length (read_file (d / "big.back")));
  Alcotest.(check bool) "several chunks: bytes" true (read_file (d / "big.back") = big);
  (* Refusals: one line, exit 2, nothing changed. *)
  refused ~env "exists" [ "cap"; "put"; d / "bin"; "/home/small" ];
  Alcotest.(check string) "not replaced" "hello" (ok ~env [ "cap"; "cat"; "/home/small" ]);
  ignore (ok ~env [ "cap"; "put"; "--force"; d / "bin"; "/home/small" ]);
  Alcotest.(check bool) "--force replaces" true (ok ~env [ "cap"; "cat"; "/home/small" ] = binary);
  refused ~env "not a file" [ "cap"; "cat"; "/home" ];
  refused ~env "not found" [ "cap"; "cat"; "/home/nothing" ];
  refused ~env "not found" [ "cap"; "get"; "/home/nothing"; d / "nothing" ];
  Alcotest.(check bool) "a failed get writes nothing" false (Sys.file_exists (d / "nothing"));
  (* A file capability without the read right, linked by path: cat is refused by its server. *)
  let cap = String.trim (ok ~env [ "cap"; "dir"; "lookup"; "/home/empty" ]) in
  let noread = String.trim (ok ~env [ "cap"; "restrict"; cap; "--rights"; "destroy" ]) in
  ignore (ok ~env [ "cap"; "dir"; "link"; "/home/noread"; noread ]);
  let code, _, err = run ~env [ "cap"; "cat"; "/home/noread" ] in
  Alcotest.(check int) "no read right: exit 2" 2 code;
  Alcotest.(check int)
    "no read right: one line" 1
    (List.length (String.split_on_char '\n' (String.trim err)));
  (* The shell, line by line from a file: cd, ls, cat, pwd, completion, a failure. *)
  write (d / "script")
    "cd /home\n\
     pwd\n\
     ls\n\
     cat empty\n\
     complete b\n\
     complete /home/sm\n\
     complete /sys/\n\
     cd small\n\
     cd ..\n\
     pwd\n";
  let sh = Unix.openfile (d / "script") [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  let o =
    Unix.openfile (d / "sh.out") [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
  in
  let e =
    Unix.openfile (d / "sh.err") [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
  in
  let pid =
    Unix.create_process_env (consort ()) [| "consort"; "cap"; "shell" |]
      (Array.append (Array.of_list env) (Unix.environment ()))
      sh o e
  in
  List.iter Unix.close [ sh; o; e ];
  let _, st = Unix.waitpid [] pid in
  Alcotest.(check bool) "the shell ends with the last command's status" true (st = Unix.WEXITED 0);
  let lines = String.split_on_char '\n' (read_file (d / "sh.out")) in
  let has l = List.mem l lines in
  Alcotest.(check bool) "pwd after cd" true (has "/home");
  Alcotest.(check bool) "ls lists" true (List.exists (fun l -> contains l "big\t") lines);
  Alcotest.(check bool) "completion in the current directory" true (has "big" && has "bin");
  Alcotest.(check bool) "completion of an absolute path" true (has "/home/small");
  Alcotest.(check bool) "completion lists a directory" true (has "/sys/fs");
  Alcotest.(check bool) "completion offers only matching names" false (has "small" || has "empty");
  Alcotest.(check bool) "cd .. back to the root" true (has "/");
  Alcotest.(check bool)
    "cd into a file is refused" true
    (contains (read_file (d / "sh.err")) "not a directory")

(* Data directories with an identity (issue 28): a replica whose data directory was wiped, and one
   started on another cluster's directory of the same directory service, are refused or caught up,
   never trusted.

   Three replicas; /x made; r2 killed; /y made (on r0 and r1 only); r0 and r1 killed, r0's data
   directory wiped. r0 restarted as before on its empty directory is refused (one line naming
   --new and --join); with --join, beside the stale r2, it has no vote: the pair refuses (no
   quorum) instead of serving r2's old state without /y. Once r1 is back, r0 catches up, and it
   votes: with r1 killed again, r0 and r2 serve /x and /y. Then r2 restarted on the data directory
   of another cluster of the same service (one replica of its own, started with --new, that made
   /z) stops with one line naming both clusters; /z never appears. Last, two replicas of a third
   directory service started with --join on empty directories, the third never started, make no
   cluster of their own: refused, never served. *)
let test_lost_dirs () =
  let d = temp_dir "capdir-lost" in
  let mk i =
    {
      i;
      rpc = Printf.sprintf "127.0.0.1:%d" (free_port ());
      group = Printf.sprintf "127.0.0.1:%d" (free_port ());
      pid = 0;
    }
  in
  let reps = List.init 3 mk in
  (* The foreign cluster: one replica (no peers) of the same service, in [d/foreign]. *)
  let foreign = { (mk 9) with i = 9 } in
  (* Two replicas of another service, with a key and replicas of their own, in [d/joiners]. *)
  let dj = d / "joiners" in
  let joiners = List.init 3 mk in
  let all () = foreign :: (reps @ joiners) in
  Fun.protect
    ~finally:(fun () ->
      List.iter kill (all ());
      rm_rf d)
    (fun () ->
      let locate l = "CONSORT_LOCATE=" ^ String.concat "," (List.map (fun r -> r.rpc) l) in
      let env root l = [ "CONSORT_ROOT=" ^ root; locate l; "CONSORT_MULTICAST=off" ] in
      (* Exit status of [r]'s process within [secs] seconds, or a failure. *)
      let exits what r secs =
        let t0 = Unix.gettimeofday () in
        let rec go () =
          match Unix.waitpid [ Unix.WNOHANG ] r.pid with
          | 0, _ ->
              if Unix.gettimeofday () -. t0 > secs then
                Alcotest.failf "%s: still running after %.0f s" what secs
              else (
                Unix.sleepf 0.1;
                go ())
          | _, Unix.WEXITED c -> c
          | _ -> Alcotest.failf "%s: killed by a signal" what
        in
        let c = go () in
        r.pid <- 0;
        c
      in
      let last_line r =
        match
          List.rev
            (List.filter (( <> ) "")
               (String.split_on_char '\n' (read_file (d / Printf.sprintf "r%d.log" r.i))))
        with
        | l :: _ -> l
        | [] -> ""
      in
      let says what line words =
        List.iter
          (fun w ->
            if not (contains line w) then Alcotest.failf "%s: %S does not say %S" what line w)
          words
      in
      (* Until [l]'s answer to ls /: a refusal saying [refusal], or a listing (which must hold
         [want]); at most 30 tries a second apart. *)
      let ls_until root l ~refusal ~want =
        eventually 30 "ls /" (fun () ->
            match run ~env:(env root l) [ "cap"; "ls"; "/" ] with
            | 0, out, _ ->
                let got = rows out in
                List.iter
                  (fun n ->
                    if not (List.mem n got) then
                      Alcotest.failf "ls / lists %s: %s is lost (a stale state served)"
                        (String.concat "," got) n)
                  want;
                Some `Listed
            | 2, _, err when refusal <> "" && contains err refusal -> Some `Refused
            | _ -> None)
      in
      (* The foreign cluster first: one replica of the same service, /z made, stopped. *)
      let froot, _ = start d [ foreign ] foreign in
      ignore
        (eventually 30 "mkdir /z on the foreign cluster" (fun () ->
             match run ~env:(env froot [ foreign ]) [ "cap"; "mkdir"; "/z" ] with
             | 0, o, _ -> Some o
             | _ -> None));
      kill foreign;
      let r0 = List.nth reps 0 and r1 = List.nth reps 1 and r2 = List.nth reps 2 in
      let root, _ = start d reps r0 in
      ignore (start d reps r1 : string * string);
      ignore (start d reps r2 : string * string);
      let again l args already =
        eventually 30 (String.concat " " args) (fun () ->
            match run ~env:(env root l) args with
            | 0, _, _ -> Some ()
            | 2, _, e when contains e already -> Some ()
            | _ -> None)
      in
      again reps [ "cap"; "mkdir"; "/x" ] "exists";
      kill r2;
      again [ r0; r1 ] [ "cap"; "mkdir"; "/y" ] "exists";
      kill r0;
      kill r1;
      rm_rf (d / "r0");
      (* Restarted as before on an empty directory: refused, one line. *)
      let code, err =
        let e = d / "refused.err" in
        let fd =
          Unix.openfile e [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
        in
        let null = Unix.openfile "/dev/null" [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0 in
        r0.pid <-
          Unix.create_process_env (consort ())
            (Array.of_list ("consort" :: serve_args d reps r0 (d / "r0") []))
            (Array.append [| "CONSORT_MULTICAST=off" |] (Unix.environment ()))
            Unix.stdin null fd;
        Unix.close fd;
        Unix.close null;
        let c = exits "r0 on an empty directory" r0 20. in
        (c, read_file e)
      in
      Alcotest.(check int) "an empty directory without --join: exit 2" 2 code;
      Alcotest.(check int) "one line" 1 (List.length (String.split_on_char '\n' (String.trim err)));
      says "an empty directory without --join" err [ "empty"; "--new"; "--join" ];
      (* With --join beside the stale r2: no vote until caught up, so no quorum. *)
      ignore (start ~init:[ "--join" ] d reps r0 : string * string);
      ignore (start d reps r2 : string * string);
      (match ls_until root [ r0; r2 ] ~refusal:"with a vote" ~want:[ "x"; "y" ] with
      | `Refused -> ()
      | `Listed -> Alcotest.fail "the wiped and the stale replica served together");
      (* r1 back: r0 catches up, then votes. *)
      ignore (start d reps r1 : string * string);
      ignore (ls_until root reps ~refusal:"" ~want:[ "x"; "y" ]);
      kill r1;
      (match ls_until root [ r0; r2 ] ~refusal:"" ~want:[ "x"; "y" ] with
      | `Listed -> ()
      | `Refused -> Alcotest.fail "unreachable");
      (* r2 on the foreign cluster's directory, beside r0 and r1: it stops. *)
      ignore (start d reps r1 : string * string);
      ignore (ls_until root [ r0; r1 ] ~refusal:"" ~want:[ "x"; "y" ]);
      kill r2;
      rm_rf (d / "r2");
      if
        Sys.command
          (Printf.sprintf "cp -a %s %s" (Filename.quote (d / "r9")) (Filename.quote (d / "r2")))
        <> 0
      then Alcotest.fail "cp -a";
      ignore (start d reps r2 : string * string);
      Alcotest.(check int) "a replica on another cluster's directory: exit 2" 2 (exits "r2" r2 60.);
      says "a replica on another cluster's directory" (last_line r2)
        [ "wrong data directory"; "cluster"; "left the group" ];
      (match ls_until root reps ~refusal:"" ~want:[ "x"; "y" ] with
      | `Listed -> ()
      | `Refused -> Alcotest.fail "unreachable");
      Alcotest.(check (list string))
        "the foreign cluster's /z never appears" [ "x"; "y" ]
        (rows (ok ~env:(env root [ r0; r1 ]) [ "cap"; "ls"; "/" ]));
      (* --join on empty directories with no cluster to join: nothing is served. *)
      Unix.mkdir dj 0o700;
      let j0 = List.nth joiners 0 and j1 = List.nth joiners 1 in
      let jroot, _ = start ~init:[ "--join" ] dj joiners j0 in
      ignore (start ~init:[ "--join" ] dj joiners j1 : string * string);
      match
        eventually 30 "mkdir on two joining replicas" (fun () ->
            match run ~env:(env jroot [ j0; j1 ]) [ "cap"; "mkdir"; "/w" ] with
            | 0, _, _ -> Some `Done
            | 2, _, e when contains e "with a vote" -> Some `Refused
            | _ -> None)
      with
      | `Refused -> ()
      | `Done -> Alcotest.fail "two replicas started with --join made a cluster of their own")

let () =
  Alcotest.run "capdir-e2e"
    [
      ("replicas", [ Alcotest.test_case "three replicas, tools, kills" `Quick test_replicated ]);
      ( "identity",
        [ Alcotest.test_case "a wiped and a foreign data directory" `Quick test_lost_dirs ] );
      ("gc", [ Alcotest.test_case "collection over a directory and a file server" `Quick test_gc ]);
      ("bench", [ Alcotest.test_case "bench dir runs" `Quick test_bench ]);
      ("shell", [ Alcotest.test_case "put, get, cat and the shell by path" `Quick test_shell ]);
    ]
