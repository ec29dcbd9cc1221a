(* Replicas in the simulator under chosen schedules: a sequencer cut off
   from the others answers nothing, while the majority goes on, and gets a
   snapshot after the heal; a replica that restarts catches up from its log
   and the writes it missed, or from a snapshot when its log is too old;
   codecs never raise on garbage. *)

open Consort
open Consort_kv
module Sim = Consort_engine.Sim
module R = Replica.Make (Sim)
open Consort_local

let base = if Sys.file_exists "/dev/shm" then "/dev/shm" else Filename.get_temp_dir_name ()
let s = Time.of_sec

let params =
  Result.get_ok
    (Params.of_string
       "suspect.timeout=2s,suspect.verify=500ms,suspect.grace=500ms,gmp.flush_timeout=2s")

type world = { net : Sim.t; dir : string; addrs : string list; reps : (R.t * Store.t) option array }

let world name =
  let dir = Filename.concat base (Printf.sprintf "kv-replica-%s-%d" name (Unix.getpid ())) in
  rm_rf dir;
  Unix.mkdir dir 0o755;
  let net = Sim.create ~seed:7 () in
  { net; dir; addrs = [ "r0"; "r1"; "r2" ]; reps = Array.make 3 None }

(* The fsync of a replica's log after applying, [latency] apart on the
   simulator's clock (group commit: the replica goes on meanwhile). *)
let sim_fsync w latency : Replica.fsync_runner =
 fun ~fd:_ run k ->
  ignore
    (Sim.at w.net
       (Time.add (Sim.now w.net) latency)
       (fun () -> k (match run () with () -> Ok () | exception x -> Error x)))

let start ?retain ?io ?identity ?fsync ?observe ?(params = params) w i =
  let addr = List.nth w.addrs i in
  let store, _ =
    match Store.open_ ?retain ?io ?identity (Filename.concat w.dir addr) with
    | Ok s -> s
    | Error e -> Alcotest.failf "open %s: %s" addr e
  in
  let cfg =
    {
      (Replica.default_config ~group:"t" ~addr ~peers:(List.filter (( <> ) addr) w.addrs)) with
      request_timeout = s 3.;
    }
  in
  match R.create ~params ~seed:(i + 1) ?fsync ?observe w.net cfg store with
  | Ok r -> w.reps.(i) <- Some (r, store)
  | Error e -> Alcotest.failf "start %s: %s" addr e

let crash w i =
  match w.reps.(i) with
  | Some (r, st) ->
      R.crash r;
      Sim.crash w.net (List.nth w.addrs i);
      Store.close st;
      w.reps.(i) <- None
  | None -> ()

let rep w i =
  match w.reps.(i) with Some (r, _) -> r | None -> Alcotest.failf "replica %d is down" i

let run w d = Sim.run ~until:(Time.add (Sim.now w.net) d) w.net

(* Submits and runs until answered (or [d] passes): the outcome, if any. *)
let call w i ?(d = s 10.) ~client ~req op =
  let got = ref None in
  R.submit (rep w i) { Wire.client; req; op } (fun o -> got := Some o);
  let until = Time.add (Sim.now w.net) d in
  while !got = None && Sim.now w.net < until && Sim.step w.net do
    ()
  done;
  !got

let outcome = Alcotest.testable Wire.pp_outcome ( = )

let finish w =
  Array.iteri (fun i _ -> crash w i) w.reps;
  rm_rf w.dir

let cut_off_sequencer () =
  let w = world "cut" in
  for i = 0 to 2 do
    start w i
  done;
  run w (s 5.);
  Array.iteri
    (fun i _ ->
      Alcotest.(check string)
        (Printf.sprintf "r%d active" i) "active"
        (Fmt.str "%a" Replica.pp_phase (R.phase (rep w i))))
    w.reps;
  Alcotest.(check (option outcome))
    "put" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "1")));
  let sq = List.find (fun i -> R.is_sequencer (rep w i)) [ 0; 1; 2 ] in
  let others = List.filter (( <> ) sq) [ 0; 1; 2 ] in
  Sim.partition w.net [ [ List.nth w.addrs sq ]; List.map (List.nth w.addrs) others ];
  (* The majority writes a new value; the old sequencer, cut off, must not
     answer a read (it would be stale) nor a write (it would be lost). *)
  let read = ref None and write = ref None in
  R.submit (rep w sq) { Wire.client = 2L; req = 1; op = Op.Get "k" } (fun o -> read := Some o);
  R.submit (rep w sq)
    { Wire.client = 3L; req = 1; op = Op.Put ("k", "lost?") }
    (fun o -> write := Some o);
  Alcotest.(check (option outcome))
    "majority writes" (Some (Wire.Done Op.Ok))
    (call w (List.hd others) ~d:(s 20.) ~client:1L ~req:2 (Op.Put ("k", "2")));
  run w (s 5.);
  let not_done name = function
    | Some (Wire.Done r) ->
        Alcotest.failf "%s answered by a cut-off sequencer: %a" name Op.pp_response r
    | _ -> ()
  in
  not_done "read" !read;
  not_done "write" !write;
  (* Now in a view of its own, outside the primary: a new write is
     refused at once, saying why. *)
  (match call w sq ~d:(s 1.) ~client:4L ~req:1 (Op.Put ("k", "minority")) with
  | Some (Wire.Refused why) when String.length why >= 9 && String.sub why 0 9 = "no quorum" -> ()
  | o -> Alcotest.failf "a write outside the primary: %a" Fmt.(option Wire.pp_outcome) o);
  Sim.heal w.net;
  run w (s 8.);
  (* Every replica, the old sequencer included, reads the majority's value
     (or the unknown write's, had it been ordered later), never the old one. *)
  List.iteri
    (fun j i ->
      match call w i ~client:(Int64.of_int (10 + j)) ~req:1 (Op.Get "k") with
      | Some (Wire.Done (Op.Value v)) when v = "2" || v = "lost?" -> ()
      | o -> Alcotest.failf "r%d after the heal: %a" i Fmt.(option Wire.pp_outcome) o)
    [ 0; 1; 2 ];
  let d =
    List.map (fun i -> Machine.digest (Store.machine (snd (Option.get w.reps.(i))))) [ 0; 1; 2 ]
  in
  Alcotest.(check int) "one state" 1 (List.length (List.sort_uniq compare d));
  (* The old sequencer's log ends with a write the others never applied,
     at the same write number and epoch as theirs: not a prefix, so it got
     a whole snapshot. *)
  Alcotest.(check (pair int int))
    "the cut-off sequencer got a snapshot" (0, 1)
    (R.transfers (rep w sq));
  finish w

(* Three replicas; r2 misses 30 writes while it is down, then starts again and runs 8 s. *)
let missed_thirty ?retain name =
  let w = world name in
  for i = 0 to 2 do
    start ?retain w i
  done;
  run w (s 5.);
  crash w 2;
  for i = 1 to 30 do
    match
      call w (i mod 2) ~d:(s 20.) ~client:1L ~req:i
        (Op.Put ("k" ^ string_of_int (i mod 4), string_of_int i))
    with
    | Some (Wire.Done Op.Ok) -> ()
    | o -> Alcotest.failf "put %d: %a" i Fmt.(option Wire.pp_outcome) o
  done;
  start ?retain w 2;
  run w (s 8.);
  w

let restart_catches_up () =
  let w = missed_thirty "restart" in
  Alcotest.(check int)
    "r2 caught up"
    (Store.seq (snd (Option.get w.reps.(0))))
    (Store.seq (snd (Option.get w.reps.(2))));
  (* From its own log and the writes it missed, not a snapshot. *)
  Alcotest.(check (pair int int)) "r2 got a suffix" (1, 0) (R.transfers (rep w 2));
  Alcotest.(check (option outcome))
    "read through r2" (Some (Wire.Done (Op.Value "29")))
    (call w 2 ~client:5L ~req:1 (Op.Get "k1"));
  (* A retried write (same client and number) takes effect once. *)
  Alcotest.(check (option outcome))
    "cas" (Some (Wire.Done Op.Ok))
    (call w 2 ~client:6L ~req:1 (Op.Cas { key = "k1"; expect = "29"; set = "x" }));
  Alcotest.(check (option outcome))
    "cas retried elsewhere" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:6L ~req:1 (Op.Cas { key = "k1"; expect = "29"; set = "x" }));
  Alcotest.(check (option outcome))
    "a new cas fails" (Some (Wire.Done Op.Cas_failed))
    (call w 1 ~client:6L ~req:2 (Op.Cas { key = "k1"; expect = "29"; set = "y" }));
  (* Alone, a replica has no quorum: it refuses at once. *)
  crash w 0;
  crash w 1;
  run w (s 6.);
  (match call w 2 ~client:7L ~req:1 (Op.Get "k1") with
  | Some (Wire.Refused _) -> ()
  | o -> Alcotest.failf "a replica alone: %a" Fmt.(option Wire.pp_outcome) o);
  finish w

(* The others keep only the last 5 writes in memory: a replica that missed
   30 gets a whole snapshot, then goes on as the others. *)
let too_old_gets_snapshot () =
  let w = missed_thirty ~retain:5 "old" in
  Alcotest.(check (pair int int)) "r2 got a snapshot" (0, 1) (R.transfers (rep w 2));
  Alcotest.(check (option outcome))
    "read through r2" (Some (Wire.Done (Op.Value "29")))
    (call w 2 ~client:5L ~req:1 (Op.Get "k1"));
  Alcotest.(check (option outcome))
    "write through r2" (Some (Wire.Done Op.Ok))
    (call w 2 ~client:5L ~req:2 (Op.Put ("k1", "z")));
  let d =
    List.map (fun i -> Machine.digest (Store.machine (snd (Option.get w.reps.(i))))) [ 0; 1; 2 ]
  in
  Alcotest.(check int) "one state" 1 (List.length (List.sort_uniq compare d));
  finish w

(* Two replicas whose logs have the same epoch and length but end with
   different writes (members that ended a view apart, each applying its
   part of it, in the same epoch; then one restarted from its disk): they
   hold states of one age that are not the same state. When they form a
   view, one takes the other's: they must not go on as two stores. *)
let same_age_other_state () =
  let w = world "same-age" in
  let prepare i v =
    let store, _ = Result.get_ok (Store.open_ (Filename.concat w.dir (List.nth w.addrs i))) in
    Store.promise_to store 1;
    Store.start_epoch store 1;
    ignore (Store.execute store { Store.client = 1L; req = 1; op = Op.Put ("k", "base") });
    ignore
      (Store.execute store { Store.client = Int64.of_int (2 + i); req = 1; op = Op.Put ("k", v) });
    Store.sync store;
    Store.close store
  in
  prepare 0 "from-r0";
  prepare 1 "from-r1";
  start w 0;
  start w 1;
  run w (s 8.);
  let st i = snd (Option.get w.reps.(i)) in
  Alcotest.(check (pair int int))
    "same age"
    (Store.epoch (st 0), Store.seq (st 0))
    (Store.epoch (st 1), Store.seq (st 1));
  Alcotest.(check bool)
    "one state" true
    (Machine.digest (Store.machine (st 0)) = Machine.digest (Store.machine (st 1)));
  let read i = call w i ~client:(Int64.of_int (10 + i)) ~req:1 (Op.Get "k") in
  let r0 = read 0 and r1 = read 1 in
  (match r0 with
  | Some (Wire.Done (Op.Value _)) -> ()
  | o -> Alcotest.failf "read through r0: %a" Fmt.(option Wire.pp_outcome) o);
  Alcotest.(check (option outcome)) "both read the same value" r0 r1;
  Alcotest.(check int)
    "one of them took the other's state" 1
    (let a, b = R.transfers (rep w 0) and c, d = R.transfers (rep w 1) in
     a + b + c + d);
  finish w

let fuzz =
  QCheck.Test.make ~count:2000 ~name:"decoders never raise"
    QCheck.(string_gen_of_size Gen.(0 -- 200) Gen.char)
    (fun s ->
      ignore (Wire.decode s);
      ignore (Wire.decode_request s);
      ignore (Wire.decode_reply s);
      ignore (Wire.decode ("\001" ^ s));
      ignore (Wire.decode_request ("\001" ^ s));
      let b = Buffer.create 16 in
      Buffer.add_string b s;
      ignore (Wire.read_frame b);
      true)

let roundtrip =
  QCheck.Test.make ~count:500 ~name:"requests and replies round trip"
    QCheck.(triple int64 small_nat (pair printable_string printable_string))
    (fun (client, req, (k, v)) ->
      let ops = [ Op.Get k; Op.Put (k, v); Op.Del k; Op.Cas { key = k; expect = v; set = k } ] in
      List.for_all
        (fun op ->
          let f = Wire.frame_request { Wire.client; req; op } in
          let b = Buffer.create 16 in
          Buffer.add_string b f;
          match Wire.read_frame b with
          | Ok (Some body) ->
              Wire.decode_request body = Ok { Wire.client; req; op } && Buffer.length b = 0
          | _ -> false)
        ops
      &&
      let f = Wire.frame_reply { Wire.rreq = req; outcome = Wire.Done (Op.Value v) } in
      let b = Buffer.create 16 in
      Buffer.add_string b f;
      match Wire.read_frame b with
      | Ok (Some body) ->
          Wire.decode_reply body = Ok { Wire.rreq = req; outcome = Wire.Done (Op.Value v) }
      | _ -> false)

let oversized () =
  let b = Buffer.create 16 in
  Buffer.add_string b "\255\255\255\255";
  match Wire.read_frame b with Error _ -> () | _ -> Alcotest.fail "a 4 GB frame accepted"

(* A replica alone (a group of one, as a single directory server runs):
   the view and the state transfer's decision both come from inside
   [join], where the layers may deliver the replica's own casts at once;
   it becomes active and answers, with either total order protocol. *)
let alone protocol () =
  let dir = Filename.concat base (Printf.sprintf "kv-replica-alone-%d" (Unix.getpid ())) in
  rm_rf dir;
  Unix.mkdir dir 0o755;
  let w = { net = Sim.create ~seed:7 (); dir; addrs = [ "r0" ]; reps = Array.make 1 None } in
  let params = Params.set "total.protocol" (Params.String protocol) params in
  let store, _ = Result.get_ok (Store.open_ (Filename.concat w.dir "r0")) in
  let cfg =
    { (Replica.default_config ~group:"t" ~addr:"r0" ~peers:[]) with request_timeout = s 3. }
  in
  let start seed store =
    match R.create ~params ~seed w.net cfg store with
    | Ok r -> w.reps.(0) <- Some (r, store)
    | Error e -> Alcotest.failf "start r0: %s" e
  in
  start 1 store;
  run w (s 1.);
  Alcotest.(check string) "active" "active" (Fmt.str "%a" Replica.pp_phase (R.phase (rep w 0)));
  Alcotest.(check (option outcome))
    "put" (Some (Wire.Done Op.Ok))
    (call w 0 ~d:(s 5.) ~client:1L ~req:1 (Op.Put ("k", "1")));
  Alcotest.(check (option outcome))
    "get" (Some (Wire.Done (Op.Value "1")))
    (call w 0 ~d:(s 5.) ~client:1L ~req:2 (Op.Get "k"));
  (* Restarted from its disk: alone again, active again, the write kept. *)
  crash w 0;
  start 2 (fst (Result.get_ok (Store.open_ (Filename.concat w.dir "r0"))));
  run w (s 1.);
  Alcotest.(check string)
    "active again" "active"
    (Fmt.str "%a" Replica.pp_phase (R.phase (rep w 0)));
  Alcotest.(check (option outcome))
    "get after the restart" (Some (Wire.Done (Op.Value "1")))
    (call w 0 ~d:(s 5.) ~client:2L ~req:1 (Op.Get "k"));
  finish w

(* Two replicas (a view of two, where the sequencer's own casts may be
   delivered at once): both active, a write; one crashes (the other,
   alone of two, has no quorum) and restarts (a view change: it catches
   up); a write again, read at both. *)
let two protocol () =
  let w = world ("two-" ^ protocol) in
  let w = { w with addrs = [ "r0"; "r1" ]; reps = Array.make 2 None } in
  let params = Params.set "total.protocol" (Params.String protocol) params in
  let start i =
    let addr = List.nth w.addrs i in
    let store, _ = Result.get_ok (Store.open_ (Filename.concat w.dir addr)) in
    let cfg =
      {
        (Replica.default_config ~group:"t" ~addr ~peers:(List.filter (( <> ) addr) w.addrs)) with
        request_timeout = s 3.;
      }
    in
    match R.create ~params ~seed:(i + 1) w.net cfg store with
    | Ok r -> w.reps.(i) <- Some (r, store)
    | Error e -> Alcotest.failf "start %s: %s" addr e
  in
  let active what =
    List.iter
      (fun i ->
        Alcotest.(check string)
          (Printf.sprintf "%s: r%d active" what i)
          "active"
          (Fmt.str "%a" Replica.pp_phase (R.phase (rep w i))))
      [ 0; 1 ]
  in
  start 0;
  start 1;
  run w (s 5.);
  active "started";
  Alcotest.(check (option outcome))
    "put" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "1")));
  crash w 1;
  run w (s 5.);
  Alcotest.(check string)
    "alone of two" "minority"
    (Fmt.str "%a" Replica.pp_phase (R.phase (rep w 0)));
  start 1;
  run w (s 8.);
  active "after the restart";
  Alcotest.(check (option outcome))
    "put again" (Some (Wire.Done Op.Ok))
    (call w 1 ~client:1L ~req:2 (Op.Put ("k", "2")));
  List.iter
    (fun i ->
      Alcotest.(check (option outcome))
        (Printf.sprintf "read at r%d" i) (Some (Wire.Done (Op.Value "2")))
        (call w i ~client:(Int64.of_int (10 + i)) ~req:1 (Op.Get "k")))
    [ 0; 1 ];
  finish w

(* r1's disk fills under writes: r1 stops acknowledging, refuses with
   "disk full", and leaves; the two others go on, and every write answered
   is on their disks. *)
let disk_full () =
  let w = world "full" in
  let full = ref false in
  let io =
    {
      Consort_util.Io.real with
      write =
        (fun p fd b off len ->
          if !full then raise (Unix.Unix_error (Unix.ENOSPC, "write", p))
          else Consort_util.Io.real.write p fd b off len);
    }
  in
  for i = 0 to 2 do
    start ?io:(if i = 1 then Some io else None) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put before" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "1")));
  full := true;
  for i = 2 to 6 do
    Alcotest.(check (option outcome))
      (Printf.sprintf "put %d while r1's disk is full" i)
      (Some (Wire.Done Op.Ok))
      (call w
         (if i mod 2 = 0 then 0 else 2)
         ~d:(s 20.) ~client:1L ~req:i
         (Op.Put ("k", string_of_int i)))
  done;
  (match R.failure (rep w 1) with
  | Some (Store.Disk_full _) -> ()
  | Some e -> Alcotest.failf "r1 stopped on %a" Store.pp_failure e
  | None -> Alcotest.fail "r1 did not stop");
  Alcotest.(check (option outcome))
    "r1 refuses" (Some (Wire.Refused "disk full"))
    (call w 1 ~d:(s 1.) ~client:2L ~req:1 (Op.Get "k"));
  Alcotest.(check bool)
    "r1 left the view" false
    (Array.exists
       (fun m -> String.length m >= 2 && String.sub m 0 2 = "r1")
       (R.view (rep w 0)).Consort_group.Group.members);
  (* Every write answered is on the disks of r0 and r2. *)
  List.iter
    (fun i ->
      let st = snd (Option.get w.reps.(i)) in
      let dir = Store.dir st in
      crash w i;
      let st, _ = Result.get_ok (Store.open_ dir) in
      Alcotest.(check (option string))
        (Printf.sprintf "r%d's disk" i) (Some "6")
        (Machine.read (Store.machine st) "k");
      Store.close st)
    [ 0; 2 ];
  finish w

(* Group commit: the fsync of r1's log takes 50 ms (the others' 2 ms), and
   the orders r1 applies while one runs wait for the next. The fsync that
   covers A succeeds; the next one, covering B, C and D (applied while the
   first ran), fails. A is answered; nobody in the failed group is: r1
   stops and answers them unknown. Acknowledging a group before its fsync
   returns, or acknowledging at the end of an fsync the orders applied
   while it ran, answers them done. *)
let group_fsync_fails () =
  let w = world "group" in
  let fsyncs = ref 0 and fail_from = ref max_int in
  let io =
    {
      Consort_util.Io.real with
      fsync =
        (fun p fd ->
          incr fsyncs;
          if !fsyncs >= !fail_from then raise (Unix.Unix_error (Unix.EIO, "fsync", p))
          else Consort_util.Io.real.fsync p fd);
    }
  in
  for i = 0 to 2 do
    if i = 1 then start ~io ~fsync:(sim_fsync w (Time.of_ms 50)) w i
    else start ~fsync:(sim_fsync w (Time.of_ms 2)) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put before" (Some (Wire.Done Op.Ok))
    (call w 1 ~client:1L ~req:1 (Op.Put ("k", "0")));
  run w (s 1.);
  fail_from := !fsyncs + 2;
  let got = Array.make 4 None in
  let submit j =
    R.submit (rep w 1)
      { Wire.client = Int64.of_int (10 + j); req = 1; op = Op.Put ("k", string_of_int j) }
      (fun o -> got.(j) <- Some o)
  in
  submit 0;
  for j = 1 to 3 do
    run w (Time.of_ms 8);
    submit j
  done;
  run w (s 5.);
  Alcotest.(check (option outcome)) "A, its fsync done" (Some (Wire.Done Op.Ok)) got.(0);
  for j = 1 to 3 do
    match got.(j) with
    | Some (Wire.Unknown _) -> ()
    | o ->
        Alcotest.failf "request %c, in the group whose fsync failed: %a (unknown expected)"
          (Char.chr (Char.code 'A' + j))
          Fmt.(option ~none:(any "no answer") Wire.pp_outcome)
          o
  done;
  (match R.failure (rep w 1) with
  | Some (Store.Io_error _) -> ()
  | Some e -> Alcotest.failf "r1 stopped on %a" Store.pp_failure e
  | None -> Alcotest.fail "r1 did not stop");
  finish w

(* Three replicas whose fsyncs take [fsync_ms] of simulated time, counted in
   the returned reference, after one put has gone through. *)
let counted_fsync_world name fsync_ms =
  let w = world name in
  let fsyncs = ref 0 in
  let io =
    {
      Consort_util.Io.real with
      fsync =
        (fun p fd ->
          incr fsyncs;
          Consort_util.Io.real.fsync p fd);
    }
  in
  for i = 0 to 2 do
    start ~io ~fsync:(sim_fsync w (Time.of_ms fsync_ms)) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put before" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "0")));
  run w (s 1.);
  (w, fsyncs)

(* Group commit: one fsync of a replica's log for all the orders it applied
   while the previous one ran. Requests come one every millisecond for 60
   ms, each in an order of its own; the fsync takes 10 ms: about one fsync
   per ten orders, and every request answered. *)
let group_commit () =
  let w, fsyncs = counted_fsync_world "gc" 10 in
  let before = !fsyncs in
  let n = 60 in
  let got = Array.make n None in
  for j = 0 to n - 1 do
    R.submit
      (rep w (j mod 3))
      { Wire.client = Int64.of_int (10 + j); req = 1; op = Op.Put (string_of_int j, "v") }
      (fun o -> got.(j) <- Some o);
    run w (Time.of_ms 1)
  done;
  run w (s 2.);
  Array.iteri
    (fun j o ->
      Alcotest.(check (option outcome)) (Printf.sprintf "put %d" j) (Some (Wire.Done Op.Ok)) o)
    got;
  let per_replica = (!fsyncs - before) / 3 in
  if per_replica > n / 4 then
    Alcotest.failf "%d fsyncs per replica for %d orders one every ms (fsync: 10 ms)" per_replica n;
  if per_replica < 2 then Alcotest.failf "%d fsyncs per replica for %d writes" per_replica n;
  finish w

(* Group commit and reads: a read marker applied while an fsync runs
   writes nothing, so it is acknowledged when that fsync returns, not
   behind the next one, which covers a put applied after the marker. The
   fsyncs take 20 ms; a put, 5 ms later a get (its marker applied during
   the put's fsync), 3 ms later another put: the get is answered once the
   three replicas' fsyncs of the first put are done, before any fsync of
   the second put ran, and reads the first put. *)
let marker_not_behind_next_write () =
  let w, fsyncs = counted_fsync_world "gc-read" 20 in
  let before = !fsyncs in
  let got = Array.make 3 None and at = Array.make 3 (-1) in
  let submit j i op =
    R.submit (rep w i)
      { Wire.client = Int64.of_int (10 + j); req = 1; op }
      (fun o ->
        got.(j) <- Some o;
        at.(j) <- !fsyncs - before)
  in
  submit 0 1 (Op.Put ("k", "1"));
  run w (Time.of_ms 5);
  submit 1 1 (Op.Get "k");
  run w (Time.of_ms 3);
  submit 2 0 (Op.Put ("k", "2"));
  run w (s 2.);
  Alcotest.(check (option outcome)) "first put" (Some (Wire.Done Op.Ok)) got.(0);
  Alcotest.(check (option outcome)) "get" (Some (Wire.Done (Op.Value "1"))) got.(1);
  Alcotest.(check (option outcome)) "second put" (Some (Wire.Done Op.Ok)) got.(2);
  Alcotest.(check int)
    "fsyncs done when the get was answered: the first put's, at 3 replicas" 3 at.(1);
  finish w

(* Group commit when flow control refuses the acknowledgement: r2 is paused
   (not long enough to be suspected) while r0 casts, so that the casts it
   has not credited fill r0's window and queue, and the group refuses r0's
   sends. The acknowledgement of an fsync that returned then waits for the
   retry, 5 ms later; the replica neither starts fsyncs that cover nothing
   nor sets timers over and over at the same instant (a busy loop that
   would keep the simulator's clock from advancing). When r2 resumes,
   every request is answered. *)
let ack_refused () =
  let w = world "ackflow" in
  let params =
    Params.set "mflow.window" (Params.Int 2048) (Params.set "mflow.queue" (Params.Int 2048) params)
  in
  for i = 0 to 2 do
    start ~params ~fsync:(sim_fsync w (Time.of_ms 2)) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put before" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "0")));
  run w (s 1.);
  Sim.pause w.net "r2" ~until:(Time.add (Sim.now w.net) (Time.of_ms 1200));
  let n = 200 in
  let got = Array.make n None in
  let bounded d =
    let until = Time.add (Sim.now w.net) d in
    Sim.run ~until ~max_events:100_000 w.net;
    if Sim.now w.net < until then
      Alcotest.failf "100,000 events in less than %a of the simulator's time (at %a)" Time.pp d
        Time.pp (Sim.now w.net)
  in
  (* One request every half millisecond, each in a cast of its own; a few
     hundred events a millisecond at most, unless a busy loop holds the
     clock. *)
  for j = 0 to n - 1 do
    R.submit
      (rep w (j mod 2))
      {
        Wire.client = Int64.of_int (10 + j);
        req = 1;
        op = Op.Put (string_of_int j, String.make 100 'v');
      }
      (fun o -> got.(j) <- Some o);
    bounded (Time.of_us 500)
  done;
  for _ = 1 to 50 do
    bounded (Time.of_ms 100)
  done;
  Array.iteri
    (fun j o ->
      Alcotest.(check (option outcome)) (Printf.sprintf "put %d" j) (Some (Wire.Done Op.Ok)) o)
    got;
  finish w

(* An acknowledgement vouches only for the orders it names: r2 stops (its
   member goes on, so the view stays), and an acknowledgement from it with
   the right count but another chain of orders commits nothing. *)
let forged_ack () =
  let w = world "ack" in
  for i = 0 to 2 do
    start w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "1")));
  R.halt (rep w 2);
  let r2 =
    (R.view (rep w 0)).Consort_group.Group.members |> Array.to_list
    |> List.find (fun m -> String.sub m 0 2 = "r2")
  in
  let got = ref None in
  R.submit (rep w 0) { Wire.client = 1L; req = 2; op = Op.Put ("k", "2") } (fun o -> got := Some o);
  run w (s 1.);
  Alcotest.(check (option outcome)) "no answer without r2" None !got;
  (* The second order of the view, with another chain: *)
  let vid = (R.view (rep w 0)).Consort_group.Group.vid in
  let forged = Wire.encode ~vid (Wire.Ack { count = 2; digest = Digest.string "another order" }) in
  R.deliver_send (rep w 0) ~origin:r2 forged;
  R.deliver_send (rep w 1) ~origin:r2 forged;
  run w (s 1.);
  Alcotest.(check (option outcome)) "a forged acknowledgement commits nothing" None !got;
  finish w

(* Issue 28's wiped replica: put x 1; r2 down; put x 2 (r0 and r1 have
   it); r0 and r1 down; r0's directory wiped. r0 (empty, --join) and r2
   (stale) must not serve x = 1 as a primary view: they refuse, until r1
   is back and gives both the state. *)
let wiped_dir () =
  let w = world "wiped" in
  let id init = ("t", init) in
  for i = 0 to 2 do
    start ~identity:(id Store.New) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put x 1" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("x", "1")));
  crash w 2;
  Alcotest.(check (option outcome))
    "put x 2" (Some (Wire.Done Op.Ok))
    (call w 0 ~d:(s 20.) ~client:1L ~req:2 (Op.Put ("x", "2")));
  crash w 0;
  crash w 1;
  rm_rf (Filename.concat w.dir "r0");
  (match Store.open_ ~identity:(id Store.Existing) (Filename.concat w.dir "r0") with
  | Ok _ -> Alcotest.fail "an empty directory opened without --join"
  | Error _ -> ());
  start ~identity:(id Store.Join) w 0;
  start ~identity:(id Store.Existing) w 2;
  run w (s 6.);
  List.iter
    (fun i ->
      match call w i ~d:(s 2.) ~client:(Int64.of_int (10 + i)) ~req:1 (Op.Get "x") with
      | Some (Wire.Refused _) -> ()
      | o -> Alcotest.failf "r%d, without a quorum of voters: %a" i Fmt.(option Wire.pp_outcome) o)
    [ 0; 2 ];
  start ~identity:(id Store.Existing) w 1;
  run w (s 8.);
  List.iter
    (fun i ->
      Alcotest.(check (option outcome))
        (Printf.sprintf "get x through r%d" i)
        (Some (Wire.Done (Op.Value "2")))
        (call w i ~d:(s 10.) ~client:(Int64.of_int (20 + i)) ~req:1 (Op.Get "x")))
    [ 0; 1; 2 ];
  (match Store.membership (snd (Option.get w.reps.(0))) with
  | Store.Member _ -> ()
  | _ -> Alcotest.fail "r0 did not become a member once caught up");
  finish w

(* A replica restarted on a data directory of another cluster of the same
   group (a second cluster made with --new): it stops (wrong data
   directory), and the others keep their state. *)
let foreign_dir () =
  let w = world "foreign" in
  let id init = ("t", init) in
  for i = 0 to 2 do
    start ~identity:(id Store.New) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put x 1" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("x", "1")));
  (* Another cluster, alone, with more epochs and writes. *)
  let other = world "foreign-b" in
  let ob = { other with addrs = [ "r2" ] } in
  start ~identity:(id Store.New) ob 0;
  run ob (s 3.);
  for i = 1 to 5 do
    ignore (call ob 0 ~client:9L ~req:i (Op.Put ("x", "b" ^ string_of_int i)))
  done;
  let b_dir = Store.dir (snd (Option.get ob.reps.(0))) in
  crash ob 0;
  crash w 2;
  rm_rf (Filename.concat w.dir "r2");
  Unix.rename b_dir (Filename.concat w.dir "r2");
  rm_rf other.dir;
  start ~identity:(id Store.Existing) w 2;
  run w (s 8.);
  (match R.failure (rep w 2) with
  | Some (Store.Wrong_dir _) -> ()
  | Some e -> Alcotest.failf "r2 stopped on %a" Store.pp_failure e
  | None -> Alcotest.fail "r2, on another cluster's directory, did not stop");
  List.iter
    (fun i ->
      Alcotest.(check (option outcome))
        (Printf.sprintf "get x through r%d" i)
        (Some (Wire.Done (Op.Value "1")))
        (call w i ~d:(s 10.) ~client:(Int64.of_int (20 + i)) ~req:1 (Op.Get "x")))
    [ 0; 1 ];
  finish w

(* {2 Reads through the order in batches} *)

(* Reads come through r1 one every 50 us for 10 ms, while its read markers
   are on their way: each joins the marker on its way, so r1 applies a
   handful of orders for 200 reads (one per read, or one per arrival
   instant as when reads were ordered with the writes, would be 200), and
   each reads the value written before. *)
let reads_batched () =
  let w = world "reads-batched" in
  let applied = ref 0 in
  let observe = function Replica.Applied _ -> incr applied | Replica.Counted _ -> () in
  for i = 0 to 2 do
    start ?observe:(if i = 1 then Some observe else None) w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "v")));
  run w (s 1.);
  let before = !applied in
  let n = 200 in
  let got = Array.make n None in
  for j = 0 to n - 1 do
    ignore
      (Sim.at w.net
         (Time.add (Sim.now w.net) (Time.of_us (50 * j)))
         (fun () ->
           R.submit (rep w 1)
             { Wire.client = Int64.of_int (100 + j); req = 1; op = Op.Get "k" }
             (fun o -> got.(j) <- Some o)))
  done;
  run w (s 2.);
  Array.iteri
    (fun j o ->
      Alcotest.(check (option outcome))
        (Printf.sprintf "read %d" j) (Some (Wire.Done (Op.Value "v"))) o)
    got;
  let markers = !applied - before in
  if markers < 1 || markers > 20 then
    Alcotest.failf "200 reads cost r1 %d orders (at most 20 expected)" markers;
  finish w

(* A read joins the marker on its way only if no write came through this
   replica after the marker was cast: a connection's requests are ordered
   in the order they were read, so a get sent after a put on one
   connection (pipelined, without waiting for the put's answer) reads the
   put's value, whether the put was still waiting to be cast when the get
   came or had been cast after the marker. *)
let read_follows_write () =
  let w = world "read-after-write" in
  for i = 0 to 2 do
    start w i
  done;
  run w (s 5.);
  Alcotest.(check (option outcome))
    "put" (Some (Wire.Done Op.Ok))
    (call w 0 ~client:1L ~req:1 (Op.Put ("k", "old")));
  run w (s 1.);
  let r1 = rep w 1 in
  let submit client op =
    let got = ref None in
    R.submit r1 { Wire.client; req = 1; op } (fun o -> got := Some o);
    got
  in
  let tick () = run w (Time.of_us 1) in
  (* A marker on its way (cast within the microsecond, not yet applied). *)
  let first = submit 10L (Op.Get "k") in
  tick ();
  (* A put and a get at the same instant: the put is not cast yet. *)
  let p1 = submit 11L (Op.Put ("k", "a")) in
  let g1 = submit 12L (Op.Get "k") in
  tick ();
  (* A put cast after the marker, then a get. *)
  let p2 = submit 13L (Op.Put ("k", "b")) in
  tick ();
  let g2 = submit 14L (Op.Get "k") in
  run w (s 2.);
  Alcotest.(check (option outcome)) "first get" (Some (Wire.Done (Op.Value "old"))) !first;
  Alcotest.(check (option outcome)) "put a" (Some (Wire.Done Op.Ok)) !p1;
  Alcotest.(check (option outcome)) "put b" (Some (Wire.Done Op.Ok)) !p2;
  (match !g1 with
  | Some (Wire.Done (Op.Value ("a" | "b"))) -> ()
  | o -> Alcotest.failf "a get after a put not yet cast: %a" Fmt.(option Wire.pp_outcome) o);
  Alcotest.(check (option outcome))
    "a get after a put cast after the marker" (Some (Wire.Done (Op.Value "b"))) !g2;
  finish w

(* Clients at every replica, up to three requests under way each
   (pipelined: a new one every 1 to 5 ms while fewer are under way), gets
   mostly, puts of values never written before, on four keys; the
   sequencer is cut off from the others for 4 s (its clients stop, their
   requests under way are answered unknown or not at all), then the
   partition heals. The history
   of every client is linearizable: each read, batched behind a marker,
   saw every write acknowledged before it was issued, and no write that
   was not committed. *)
let reads_linearizable protocol () =
  let w = world ("reads-lin-" ^ protocol) in
  let params = Params.set "total.protocol" (Params.String protocol) params in
  for i = 0 to 2 do
    start ~params w i
  done;
  run w (s 5.);
  let rng = Random.State.make [| 33 |] in
  let events = ref [] and reads = ref 0 and writes = ref 0 in
  let now () = int_of_float (Time.to_us (Sim.now w.net)) in
  let next_value = ref 0 in
  let issue under_way i client req =
    match w.reps.(i) with
    | None -> ()
    | Some (r, _) ->
        incr under_way;
        let key = "k" ^ string_of_int (Random.State.int rng 4) in
        let op =
          if Random.State.int rng 10 < 7 then Op.Get key
          else begin
            incr next_value;
            Op.Put (key, string_of_int !next_value)
          end
        in
        let call = now () in
        let record return response =
          events :=
            { Consort_spec.Linearizable.client; key; op = Op.to_spec op; call; return; response }
            :: !events
        in
        let answered = ref false in
        R.submit r
          { Wire.client = Int64.of_int client; req; op }
          (fun o ->
            answered := true;
            decr under_way;
            match o with
            | Wire.Done resp when Op.response_to_spec resp <> None ->
                if Op.is_read op then incr reads else incr writes;
                record (Some (now ())) (Op.response_to_spec resp)
            | Wire.Refused _ -> ()
            | _ -> record None None);
        (* A request that gets no answer (its replica was cut off) may
           still take effect. *)
        ignore
          (Sim.at w.net
             (Time.add (Sim.now w.net) (s 30.))
             (fun () -> if not !answered then record None None))
  in
  (* Each request has a client id of its own, as a pipelining client's. *)
  let next_client = ref 1000 in
  let cut = ref None in
  let rec client under_way i until =
    if Sim.now w.net < until && !cut <> Some i then begin
      if !under_way < 3 then begin
        incr next_client;
        issue under_way i !next_client 1
      end;
      ignore
        (Sim.at w.net
           (Time.add (Sim.now w.net) (Time.of_us (1000 + Random.State.int rng 4000)))
           (fun () -> client under_way i until))
    end
  in
  let t0 = Sim.now w.net in
  for i = 0 to 2 do
    for _ = 1 to 2 do
      client (ref 0) i (Time.add t0 (s 8.))
    done
  done;
  run w (s 2.);
  let sq = List.find (fun i -> R.is_sequencer (rep w i)) [ 0; 1; 2 ] in
  let others = List.filter (( <> ) sq) [ 0; 1; 2 ] in
  Sim.partition w.net [ [ List.nth w.addrs sq ]; List.map (List.nth w.addrs) others ];
  (* The sequencer's clients stop with the requests they have under way. *)
  cut := Some sq;
  run w (s 4.);
  Sim.heal w.net;
  run w (s 40.);
  if Sys.getenv_opt "KVDBG" <> None then
    Printf.printf "%d reads, %d writes, %d unknown\n%!" !reads !writes
      (List.length
         (List.filter (fun (e : Consort_spec.Linearizable.event) -> e.return = None) !events));
  if !reads < 300 || !writes < 100 then
    Alcotest.failf "too few operations answered: %d reads, %d writes" !reads !writes;
  (match Consort_spec.Linearizable.check !events with
  | Consort_spec.Linearizable.Linearizable -> ()
  | r -> Alcotest.failf "%a" Consort_spec.Linearizable.pp_result r);
  finish w

let () =
  if Sys.getenv_opt "KVDBG" <> None then begin
    Logs.set_reporter (Logs.format_reporter ());
    Logs.Src.set_level Replica.src (Some Logs.Info);
    List.iter
      (fun s -> if Logs.Src.name s = "consort.xfer" then Logs.Src.set_level s (Some Logs.Info))
      (Logs.Src.list ())
  end;
  Alcotest.run "kv-replica"
    [
      ( "replica",
        [
          Alcotest.test_case "a cut-off sequencer answers nothing" `Quick cut_off_sequencer;
          Alcotest.test_case "a restarted replica catches up; retries once" `Quick
            restart_catches_up;
          Alcotest.test_case "a log too old: a snapshot" `Quick too_old_gets_snapshot;
          Alcotest.test_case "same age, another state: one is taken" `Quick same_age_other_state;
          Alcotest.test_case "alone (sequencer)" `Quick (alone "sequencer");
          Alcotest.test_case "alone (token)" `Quick (alone "token");
          Alcotest.test_case "two (sequencer)" `Quick (two "sequencer");
          Alcotest.test_case "two (token)" `Quick (two "token");
          Alcotest.test_case "a full disk: the replica stops, the others go on" `Quick disk_full;
          Alcotest.test_case "an acknowledgement of other orders is not counted" `Quick forged_ack;
          Alcotest.test_case "group commit: a failed fsync answers nobody in its group" `Quick
            group_fsync_fails;
          Alcotest.test_case "group commit: one fsync for the orders applied while one ran" `Quick
            group_commit;
          Alcotest.test_case "group commit: a read marker is not acknowledged behind a later write"
            `Quick marker_not_behind_next_write;
          Alcotest.test_case "group commit: an acknowledgement refused by flow control waits" `Quick
            ack_refused;
          Alcotest.test_case "a wiped replica has no vote until caught up" `Quick wiped_dir;
          Alcotest.test_case "a replica on another cluster's directory stops" `Quick foreign_dir;
        ] );
      ( "reads",
        [
          Alcotest.test_case "reads that come while a marker is on its way join it" `Quick
            reads_batched;
          Alcotest.test_case "a read follows the writes of its connection" `Quick read_follows_write;
          Alcotest.test_case "pipelined reads and writes, a cut-off sequencer: linearizable" `Quick
            (reads_linearizable "sequencer");
          Alcotest.test_case "the same with the token" `Quick (reads_linearizable "token");
        ] );
      ( "wire",
        [
          Alcotest.test_case "decoders never raise" `Quick (fun () ->
              QCheck.Test.check_exn ~rand:(Random.State.make [| 3 |]) fuzz);
          Alcotest.test_case "round trips" `Quick (fun () ->
              QCheck.Test.check_exn ~rand:(Random.State.make [| 4 |]) roundtrip);
          Alcotest.test_case "oversized frame refused" `Quick oversized;
        ] );
    ]
