(* The store on disk: recovery after a crash at every disk step, torn and
   corrupt tails cut off and reported, deduplication, limits; a disk that
   fills, fails a write or an fsync stops the store for good, keeping what
   it failed to store pending and leaving no torn record in the log. *)

open Consort_kv
module Io = Consort_util.Io
open Consort_local

(* Memory-backed when there is /dev/shm: what is tested is the order of the
   steps, not the disk. *)
let base =
  if Sys.file_exists "/dev/shm" && Sys.is_directory "/dev/shm" then "/dev/shm"
  else Filename.get_temp_dir_name ()

let fresh name =
  let d = Filename.concat base (Printf.sprintf "kv-store-%s-%d" name (Unix.getpid ())) in
  rm_rf d;
  d

let open_ok ?io ?limits ?snapshot_bytes d =
  match Store.open_ ?io ?limits ?snapshot_bytes d with
  | Ok (t, f) -> (t, f)
  | Error e -> Alcotest.failf "open %s: %s" d e

let cmd ?(client = 1L) req op = { Store.client; req; op }
let resp = Alcotest.testable Op.pp_response ( = )

let basic () =
  let d = fresh "basic" in
  let t, f = open_ok d in
  Alcotest.(check int) "no findings" 0 (List.length f);
  Alcotest.check resp "put" Op.Ok (Store.execute t (cmd 1 (Op.Put ("a", "1"))));
  Alcotest.check resp "get" (Op.Value "1") (Store.execute t (cmd 2 (Op.Get "a")));
  Alcotest.check resp "cas" Op.Ok
    (Store.execute t (cmd 3 (Op.Cas { key = "a"; expect = "1"; set = "2" })));
  Alcotest.check resp "cas fails" Op.Cas_failed
    (Store.execute t (cmd 4 (Op.Cas { key = "a"; expect = "1"; set = "3" })));
  Alcotest.check resp "del absent" Op.Not_found (Store.execute t (cmd 5 (Op.Del "b")));
  (* A retry of the last request: the recorded response, no second effect. *)
  Alcotest.check resp "put b" Op.Ok (Store.execute t (cmd ~client:2L 1 (Op.Put ("b", "x"))));
  Alcotest.check resp "del b" Op.Ok (Store.execute t (cmd ~client:2L 2 (Op.Del "b")));
  let seq = Store.seq t in
  Alcotest.check resp "del b retried" Op.Ok (Store.execute t (cmd ~client:2L 2 (Op.Del "b")));
  Alcotest.(check int) "retry not logged" seq (Store.seq t);
  (match Store.execute t (cmd ~client:2L 1 (Op.Put ("b", "y"))) with
  | Op.Error _ -> ()
  | r -> Alcotest.failf "an older request: %a" Op.pp_response r);
  Alcotest.(check (option string)) "b absent" None (Machine.read (Store.machine t) "b");
  Store.start_epoch t 7;
  Store.sync t;
  let dg = Machine.digest (Store.machine t) in
  Store.close t;
  let t, f = open_ok d in
  Alcotest.(check int) "no findings on reopen" 0 (List.length f);
  Alcotest.(check string) "same state" dg (Machine.digest (Store.machine t));
  Alcotest.(check int) "same seq" seq (Store.seq t);
  Alcotest.(check int) "epoch" 7 (Store.epoch t);
  Store.close t;
  rm_rf d

let limits () =
  let d = fresh "limits" in
  let limits = { Op.default_limits with max_value = 10; max_keys = 2; max_bytes = 100 } in
  let t, _ = open_ok ~limits d in
  (match Store.execute t (cmd 1 (Op.Put ("a", String.make 11 'x'))) with
  | Op.Error e -> Alcotest.(check bool) "says why" true (String.length e > 0)
  | r -> Alcotest.failf "value over the limit: %a" Op.pp_response r);
  ignore (Store.execute t (cmd 2 (Op.Put ("a", "1"))));
  ignore (Store.execute t (cmd 3 (Op.Put ("b", "1"))));
  (match Store.execute t (cmd 4 (Op.Put ("c", "1"))) with
  | Op.Error e -> Alcotest.(check bool) "store full" true (String.length e > 0)
  | r -> Alcotest.failf "third key: %a" Op.pp_response r);
  Alcotest.check resp "overwrite still fits" Op.Ok (Store.execute t (cmd 5 (Op.Put ("a", "2"))));
  Store.close t;
  (* Many clients: the oldest are forgotten, the table stays bounded. *)
  let d2 = fresh "clients" in
  let t, _ = open_ok ~limits:{ Op.default_limits with max_clients = 10 } d2 in
  for c = 1 to 100 do
    ignore (Store.execute t (cmd ~client:(Int64.of_int c) 1 (Op.Put ("k", string_of_int c))))
  done;
  Alcotest.(check int) "clients bounded" 10 (Machine.clients (Store.machine t));
  Store.close t;
  rm_rf d;
  rm_rf d2

(* A workload of batches, each synced; the process "dies" at disk step
   [n] (the hook raises). After a real reopen, the state must be that
   after some prefix of the writes that includes every synced one. *)
exception Died

let workload ~seed =
  let rng = Random.State.make [| seed |] in
  List.init 30 (fun b ->
      List.init
        (1 + Random.State.int rng 5)
        (fun i ->
          let client = Int64.of_int (1 + Random.State.int rng 4) in
          let key = "k" ^ string_of_int (Random.State.int rng 5) in
          let op =
            match Random.State.int rng 4 with
            | 0 -> Op.Put (key, Printf.sprintf "v%d.%d" b i)
            | 1 -> Op.Del key
            | 2 ->
                Op.Cas
                  {
                    key;
                    expect = Printf.sprintf "v%d.%d" (max 0 (b - 1)) i;
                    set = Printf.sprintf "c%d.%d" b i;
                  }
            | _ -> Op.Put (key, String.make (Random.State.int rng 300) 'x')
          in
          cmd ~client ((b * 10) + i + 1) op))

let crash_points () =
  let batches = workload ~seed:3 in
  (* Digests of the model after each write, by sequence number. *)
  let model = Machine.create Op.default_limits in
  let digests = Hashtbl.create 64 in
  let seq = ref 0 in
  Hashtbl.replace digests 0 (Machine.digest model);
  List.iter
    (List.iter (fun (c : Store.cmd) ->
         let _, changed = Machine.apply model ~client:c.client ~req:c.req c.op in
         if changed then (
           incr seq;
           Hashtbl.replace digests !seq (Machine.digest model))))
    batches;
  let steps = ref 0 in
  let n = ref 1 and finished = ref false in
  let tried = ref 0 in
  while not !finished do
    let d = fresh "crash" in
    let count = ref 0 in
    let io =
      Io.hooked
        (fun _ ->
          incr count;
          if !count = !n then raise Died)
        Io.real
    in
    let acked = ref 0 and attempted = ref 0 in
    (try
       let t, _ =
         match Store.open_ ~io ~snapshot_bytes:2000 d with
         | Ok x -> x
         | Error e -> Alcotest.failf "open: %s" e
       in
       List.iter
         (fun batch ->
           List.iter (fun c -> ignore (Store.execute t c)) batch;
           attempted := Store.seq t;
           Store.sync t;
           acked := Store.seq t)
         batches;
       Store.close t;
       finished := true
     with Died -> ());
    steps := max !steps !count;
    (* The process is gone: its lock with it (lockf locks are per process,
       so reopen in this process works once the descriptors are gone). *)
    let t, f = open_ok d in
    let s = Store.seq t in
    if s < !acked || s > !attempted then
      Alcotest.failf "crash at step %d: recovered write %d, synced %d, attempted %d" !n s !acked
        !attempted;
    Alcotest.(check string)
      (Printf.sprintf "crash at step %d: state after write %d" !n s)
      (Hashtbl.find digests s)
      (Machine.digest (Store.machine t));
    List.iter
      (fun x ->
        if Store.is_damage x then Alcotest.failf "crash at step %d: %a" !n Store.pp_finding x)
      f;
    Store.close t;
    rm_rf d;
    incr tried;
    incr n
  done;
  Fmt.pr "%d crash points, %d disk steps in a full run@." !tried !steps;
  Alcotest.(check bool) "snapshots were taken" true (!steps > 60)

(* Torn and corrupt tails: cut short, a flipped byte, garbage appended. *)
let tails () =
  let make d =
    let t, _ = open_ok d in
    for i = 1 to 20 do
      ignore (Store.execute t (cmd i (Op.Put ("k" ^ string_of_int i, String.make 50 'v'))));
      Store.sync t
    done;
    Store.close t
  in
  let size p = (Unix.stat p).Unix.st_size in
  let damage name f expect_seq =
    let d = fresh name in
    make d;
    let wal = Filename.concat d "wal" in
    f wal;
    let t, findings = open_ok d in
    (match List.filter Store.is_damage findings with
    | [ (Store.Torn_tail { dropped; _ } as x) ] ->
        Fmt.pr "%s: %a@." name Store.pp_finding x;
        Alcotest.(check bool) "dropped bytes" true (dropped > 0)
    | l -> Alcotest.failf "%s: findings %a" name Fmt.(list Store.pp_finding) l);
    Alcotest.(check int) (name ^ ": writes kept") expect_seq (Store.seq t);
    Store.close t;
    (* Repaired: a second start finds nothing. *)
    let t, findings = open_ok d in
    Alcotest.(check int) (name ^ ": clean after repair") 0 (List.length findings);
    Alcotest.(check int) (name ^ ": same writes") expect_seq (Store.seq t);
    ignore (Store.execute t (cmd 100 (Op.Put ("after", "repair"))));
    Store.sync t;
    Store.close t;
    let t, findings = open_ok d in
    Alcotest.(check int) (name ^ ": appends after repair") 0 (List.length findings);
    Alcotest.(check (option string))
      (name ^ ": new write kept") (Some "repair")
      (Machine.read (Store.machine t) "after");
    Store.close t;
    rm_rf d
  in
  let truncate_by k wal = Unix.truncate wal (size wal - k) in
  let flip off_from_end wal =
    let fd = Unix.openfile wal [ Unix.O_RDWR ] 0 in
    let pos = size wal - off_from_end in
    ignore (Unix.lseek fd pos Unix.SEEK_SET);
    let b = Bytes.create 1 in
    ignore (Unix.read fd b 0 1);
    Bytes.set b 0 (Char.chr (Char.code (Bytes.get b 0) lxor 0x40));
    ignore (Unix.lseek fd pos Unix.SEEK_SET);
    ignore (Unix.write fd b 0 1);
    Unix.close fd
  in
  let append s wal =
    let oc = open_out_gen [ Open_append; Open_binary ] 0o644 wal in
    output_string oc s;
    close_out oc
  in
  damage "cut short" (truncate_by 7) 19;
  damage "flipped byte" (flip 3) 19;
  damage "garbage appended" (append "\000\000\000\005garbage!") 20;
  damage "huge length" (append "\255\255\255\255xxxxxxxxxxxxxxxx") 20;
  (* A corrupt snapshot is never used. *)
  let d = fresh "snap" in
  let t, _ = open_ok ~snapshot_bytes:500 d in
  for i = 1 to 20 do
    ignore (Store.execute t (cmd i (Op.Put ("k" ^ string_of_int i, String.make 50 'v'))));
    Store.sync t
  done;
  Store.close t;
  flip 10 (Filename.concat d "snapshot");
  (match Store.open_ d with
  | Ok _ -> Alcotest.fail "a corrupt snapshot accepted"
  | Error e ->
      Fmt.pr "corrupt snapshot: %s@." e;
      (* It advises what is safe: an empty directory with --join, never without. *)
      Alcotest.(check bool) "advises --join" true (Consort_local.contains e "with --join"));
  rm_rf d

let transfer () =
  (* A snapshot installed elsewhere, and entries since a point. *)
  let d1 = fresh "a" and d2 = fresh "b" in
  let a, _ = open_ok d1 and b, _ = open_ok d2 in
  for i = 1 to 10 do
    ignore (Store.execute a (cmd i (Op.Put ("k" ^ string_of_int (i mod 3), string_of_int i))))
  done;
  Store.start_epoch a 5;
  Store.sync a;
  (match Store.install b (Store.snapshot a) with Ok () -> () | Error e -> Alcotest.fail e);
  Alcotest.(check string)
    "installed"
    (Machine.digest (Store.machine a))
    (Machine.digest (Store.machine b));
  Alcotest.(check int) "epoch" 5 (Store.epoch b);
  for i = 11 to 15 do
    ignore (Store.execute a (cmd i (Op.Put ("k", string_of_int i))))
  done;
  (match Store.entries_since a 10 with
  | Some l ->
      Alcotest.(check int) "five since" 5 (List.length l);
      Store.apply_entries b l
  | None -> Alcotest.fail "entries kept");
  Store.sync b;
  Alcotest.(check string)
    "caught up"
    (Machine.digest (Store.machine a))
    (Machine.digest (Store.machine b));
  Store.close b;
  let b, _ = open_ok d2 in
  Alcotest.(check string)
    "durable"
    (Machine.digest (Store.machine a))
    (Machine.digest (Store.machine b));
  Alcotest.(check int) "seq" 15 (Store.seq b);
  Store.close a;
  Store.close b;
  rm_rf d1;
  rm_rf d2

(* A promise is durable at once, survives the snapshots that empty the log,
   and only grows. *)
let promise () =
  let d = fresh "promise" in
  let st, _ = open_ok ~snapshot_bytes:2048 d in
  Store.promise_to st 7;
  Store.promise_to st 5;
  Alcotest.(check int) "the greatest" 7 (Store.promise st);
  for i = 1 to 200 do
    ignore (Store.execute st (cmd i (Op.Put ("k" ^ string_of_int (i mod 10), String.make 50 'v'))));
    Store.sync st
  done;
  Store.close st;
  let st, _ = open_ok d in
  Alcotest.(check int) "after snapshots and a restart" 7 (Store.promise st);
  Alcotest.(check int) "the writes too" 200 (Store.seq st);
  Store.close st;
  rm_rf d

(* A full disk (a write that stores its first chunk, then ENOSPC), a write
   that fails with EIO, an fsync that fails: the sync raises [Failed], what
   failed stays pending, and every later sync fails too, even once the disk
   is fine again (a failed fsync is never retried). On reopen, every write
   whose sync returned is there, and no torn record is left in the log. *)
let disk_faults () =
  List.iter
    (fun (name, fault, full) ->
      let d = fresh ("fault-" ^ name) in
      let armed = ref false and writes = ref 0 in
      let io =
        {
          Io.real with
          write =
            (fun p fd b off len ->
              if !armed then begin
                incr writes;
                match fault with
                | `Enospc when !writes >= 2 -> raise (Unix.Unix_error (Unix.ENOSPC, "write", p))
                | `Eio -> raise (Unix.Unix_error (Unix.EIO, "write", p))
                | _ -> Io.real.write p fd b off len
              end
              else Io.real.write p fd b off len);
          fsync =
            (fun p fd ->
              if !armed && fault = `Fsync then raise (Unix.Unix_error (Unix.EIO, "fsync", p))
              else Io.real.fsync p fd);
        }
      in
      let t, _ = open_ok ~io d in
      (* Two values of 40 KB: the sync writes them in two chunks of Io.chunk. *)
      let big c = String.make 40_000 c in
      ignore (Store.execute t (cmd 1 (Op.Put ("a", big 'a'))));
      Store.sync t;
      armed := true;
      ignore (Store.execute t (cmd 2 (Op.Put ("b", big 'b'))));
      ignore (Store.execute t (cmd 3 (Op.Put ("b2", big 'b'))));
      let expect_failed what =
        match Store.sync t with
        | () -> Alcotest.failf "%s: %s: the sync returned" name what
        | exception Store.Failed (Store.Disk_full _) when full -> ()
        | exception Store.Failed (Store.Io_error _) when not full -> ()
        | exception Store.Failed e -> Alcotest.failf "%s: %s: %a" name what Store.pp_failure e
      in
      expect_failed "the faulty sync";
      Alcotest.(check bool) (name ^ ": still pending") true (Store.dirty t);
      Alcotest.(check bool) (name ^ ": failed") true (Store.failed t <> None);
      (* The disk is fine again: the store still refuses. *)
      armed := false;
      ignore (Store.execute t (cmd 4 (Op.Put ("c", "3"))));
      expect_failed "a later sync";
      (match Store.promise_to t 9 with
      | () -> Alcotest.failf "%s: a promise after the failure returned" name
      | exception Store.Failed _ -> ());
      Store.close t;
      let t, found = open_ok d in
      List.iter
        (fun f ->
          if Store.is_damage f then Alcotest.failf "%s: on reopen: %a" name Store.pp_finding f)
        found;
      Alcotest.(check bool)
        (name ^ ": the write synced before is there")
        true
        (Machine.read (Store.machine t) "a" = Some (big 'a'));
      Alcotest.(check (option string))
        (name ^ ": never synced") None
        (Machine.read (Store.machine t) "c");
      if fault <> `Fsync then
        Alcotest.(check int) (name ^ ": the log ends at write 1") 1 (Store.seq t);
      Store.close t;
      rm_rf d)
    [ ("enospc", `Enospc, true); ("eio", `Eio, false); ("fsync", `Fsync, false) ]

(* A data directory's identity: an empty one needs --new or --join; one of
   another group or store is refused naming both; --new and --join are
   refused where there is state; a joining replica becomes a member. *)
let identity () =
  let d = fresh "identity" in
  let contains s sub =
    let n = String.length sub in
    let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
    go 0
  in
  let refused what ?(says = []) r =
    match r with
    | Ok (t, _) ->
        Store.close t;
        Alcotest.failf "%s: opened" what
    | Error e ->
        if String.contains e '\n' then Alcotest.failf "%s: more than one line: %S" what e;
        List.iter
          (fun w -> if not (contains e w) then Alcotest.failf "%s: %S does not say %S" what e w)
          says
  in
  refused "empty, neither --new nor --join" ~says:[ "--new"; "--join" ]
    (Store.open_ ~identity:("g", Store.Existing) d);
  let t, _ = Result.get_ok (Store.open_ ~identity:("g", Store.New) d) in
  Alcotest.(check bool) "fresh" true (Store.membership t = Store.Fresh);
  ignore (Store.execute t (cmd 1 (Op.Put ("a", "1"))));
  Store.sync t;
  Store.set_member t "c1";
  Store.close t;
  refused "another group"
    ~says:[ "group g"; "group h"; "cluster c1" ]
    (Store.open_ ~identity:("h", Store.Existing) d);
  refused "--new on a directory with state" ~says:[ "--new" ]
    (Store.open_ ~identity:("g", Store.New) d);
  refused "--join on a member's directory" ~says:[ "--join" ]
    (Store.open_ ~identity:("g", Store.Join) d);
  let t, _ = Result.get_ok (Store.open_ ~identity:("g", Store.Existing) d) in
  Alcotest.(check bool) "a member of c1" true (Store.membership t = Store.Member "c1");
  Alcotest.(check (option string)) "its state" (Some "1") (Machine.read (Store.machine t) "a");
  Store.close t;
  rm_rf d;
  let t, _ = Result.get_ok (Store.open_ ~identity:("g", Store.Join) d) in
  Alcotest.(check bool) "joining" true (Store.membership t = Store.Joining);
  Store.close t;
  let t, _ = Result.get_ok (Store.open_ ~identity:("g", Store.Existing) d) in
  Alcotest.(check bool) "still joining after a restart" true (Store.membership t = Store.Joining);
  Store.close t;
  rm_rf d;
  (* A directory made before identities: taken as it is, and marked. *)
  let t, _ = open_ok d in
  ignore (Store.execute t (cmd 1 (Op.Put ("a", "1"))));
  Store.sync t;
  Store.close t;
  refused "--new on an old directory with state" (Store.open_ ~identity:("g", Store.New) d);
  let t, _ = Result.get_ok (Store.open_ ~identity:("g", Store.Existing) d) in
  Alcotest.(check bool) "legacy" true (Store.membership t = Store.Legacy);
  Store.close t;
  refused "then another group" ~says:[ "group g"; "group h" ]
    (Store.open_ ~identity:("h", Store.Existing) d);
  rm_rf d

(* A promise survives an I/O error at any step of the snapshot that empties
   the log (issue 28, kv-disk-faults seed 566: the log was replaced by an
   empty one and the write of the promise after it failed, and the replica
   later took part in starting an epoch below its promise). *)
let promise_through_faults () =
  let n = ref 1 and failed_once = ref true in
  while !failed_once do
    let d = fresh "promise-fault" in
    let armed = ref false and steps = ref 0 in
    let io =
      Io.hooked
        (fun _ ->
          if !armed then begin
            incr steps;
            if !steps = !n then raise (Unix.Unix_error (Unix.EIO, "step", ""))
          end)
        Io.real
    in
    let t, _ = open_ok ~io ~snapshot_bytes:2048 d in
    Store.promise_to t 7;
    armed := true;
    (failed_once :=
       try
         for i = 1 to 100 do
           ignore (Store.execute t (cmd i (Op.Put ("k", String.make 100 'v'))));
           Store.sync t
         done;
         false
       with Store.Failed _ -> true);
    Store.close t;
    let t, _ = open_ok d in
    Alcotest.(check int)
      (Printf.sprintf "the promise, after an error at step %d" !n)
      7 (Store.promise t);
    Store.close t;
    rm_rf d;
    incr n
  done;
  Alcotest.(check bool) "every step of a sync and a snapshot was tried" true (!n > 8)

(* Group commit's two halves: an fsync started covers what was written
   before it, not what is logged after; a snapshot while one runs keeps its
   log open for it; its failure stops the store for good. *)
let group_commit () =
  let d = fresh "group" in
  let fsyncs = ref 0 in
  let io =
    {
      Io.real with
      fsync =
        (fun p fd ->
          incr fsyncs;
          Io.real.fsync p fd);
    }
  in
  let t, _ = open_ok ~io ~snapshot_bytes:200 d in
  ignore (Store.execute t (cmd 1 (Op.Put ("a", "1"))));
  let f = Store.sync_start t in
  Alcotest.(check bool) "written: an fsync needed" true f.needed;
  Alcotest.(check bool) "nothing pending" false (Store.dirty t);
  (* Logged while the fsync runs: pending, for the next. *)
  ignore (Store.execute t (cmd 2 (Op.Put ("b", String.make 300 'x'))));
  Alcotest.(check bool) "the later write pending" true (Store.dirty t);
  (* A sync meanwhile snapshots (the log is past 200 bytes): the log the
     running fsync holds stays open. *)
  let ino = (Unix.fstat f.fd).st_ino in
  Store.sync t;
  Alcotest.(check bool) "the log replaced" true ((Unix.stat (Filename.concat d "wal")).st_ino <> ino);
  Alcotest.(check int)
    "the running fsync's log still open (not another file's descriptor)" ino
    (Unix.fstat f.fd).st_ino;
  let before = !fsyncs in
  f.run ();
  Alcotest.(check int) "the fsync ran on the old log" (before + 1) !fsyncs;
  Store.sync_finish t (Ok ());
  let g = Store.sync_start t in
  Alcotest.(check bool) "nothing written since: no fsync needed" false g.needed;
  Store.sync_finish t (Ok ());
  ignore (Store.execute t (cmd 3 (Op.Put ("c", "3"))));
  let h = Store.sync_start t in
  Alcotest.(check bool) "needed again" true h.needed;
  (match Store.sync_finish t (Error (Unix.Unix_error (Unix.EIO, "fsync", "wal"))) with
  | () -> Alcotest.fail "a failed fsync finished"
  | exception Store.Failed (Store.Io_error _) -> ()
  | exception Store.Failed e -> Alcotest.failf "failed as %a" Store.pp_failure e);
  (match Store.sync_start t with
  | _ -> Alcotest.fail "a store whose fsync failed starts another"
  | exception Store.Failed _ -> ());
  (match Store.sync t with
  | () -> Alcotest.fail "a store whose fsync failed syncs"
  | exception Store.Failed _ -> ());
  Store.close t;
  let t, _ = open_ok d in
  Alcotest.(check (option string))
    "the synced writes" (Some "1")
    (Machine.read (Store.machine t) "a");
  Store.close t;
  rm_rf d

let () =
  Alcotest.run "kv-store"
    [
      ( "store",
        [
          Alcotest.test_case "operations, retries, reopen" `Quick basic;
          Alcotest.test_case "limits" `Quick limits;
          Alcotest.test_case "crash at every disk step" `Quick crash_points;
          Alcotest.test_case "torn and corrupt tails" `Quick tails;
          Alcotest.test_case "snapshot and entries to another store" `Quick transfer;
          Alcotest.test_case "promises survive snapshots" `Quick promise;
          Alcotest.test_case "full disk, EIO, failed fsync: fail-stop" `Quick disk_faults;
          Alcotest.test_case "the data directory's identity" `Quick identity;
          Alcotest.test_case "group commit: fsync apart, snapshot meanwhile, failure" `Quick
            group_commit;
          Alcotest.test_case "a promise survives an error during a snapshot" `Quick
            promise_through_faults;
        ] );
    ]
