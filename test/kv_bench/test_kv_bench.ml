(* consort bench kv without etcd: a run with failed operations gives no
   figure and no ratio; readiness waits for every member in one pass. *)

module K = Consort_kv_bench.Kv_bench

let m ?(failed = 0) ?(ops = 20_000) ?(p99 = 4.) ?(depth = 1) system clients =
  {
    K.system;
    clients;
    depth;
    ops;
    failed;
    seconds = 10.;
    p50 = 1.;
    p99;
    first_error = (if failed > 0 then "etcdserver: request timed out" else "");
  }

let contains s sub =
  let n = String.length sub in
  let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
  go 0

let verdict () =
  Alcotest.(check bool) "clean run holds" true (Result.is_ok (K.verdict (m "etcd" 8)));
  (match K.verdict (m ~failed:1 "etcd" 8) with
  | Ok _ -> Alcotest.fail "a run with one failed operation was kept"
  | Error e ->
      Alcotest.(check bool) "says discarded" true (contains e "discarded: 1 failed operation"));
  match K.verdict (m ~ops:0 "etcd" 8) with
  | Ok _ -> Alcotest.fail "a run with no operation was kept"
  | Error e -> Alcotest.(check bool) "says discarded" true (contains e "discarded")

(* The run the issue names: etcd at 137 ops/s with 661,559 failed. *)
let failed_not_reported () =
  let pairs =
    [
      ((8, 1), K.Measured (m "consort" 8), K.Measured (m ~ops:1370 ~failed:661_559 "etcd" 8));
      ( (64, 1),
        K.Measured (m ~ops:40_000 "consort" 64),
        K.Measured (m ~ops:10_000 ~p99:8. "etcd" 64) );
    ]
  in
  let lines = K.report pairs in
  (* A few failures beside many operations: discarded too. *)
  let few =
    K.report [ ((16, 1), K.Measured (m ~failed:2 "consort" 16), K.Measured (m "etcd" 16)) ]
  in
  Alcotest.(check bool) "few failures discarded" true (contains (List.hd few) "discarded: 2 failed");
  Alcotest.(check bool) "no ratio at 16" true (contains (List.nth few 2) "no ratio");
  let etcd8 = List.nth lines 1 in
  Alcotest.(check bool) "etcd row discarded" true (contains etcd8 "discarded: 661559 failed");
  Alcotest.(check bool) "etcd row gives no rate" false (contains etcd8 "ops/s");
  Alcotest.(check bool) "no 137 ops/s" false (List.exists (fun l -> contains l "137") lines);
  let r8 = List.find (fun l -> contains l "  8 clients:") lines in
  Alcotest.(check bool) "no ratio at 8" true (contains r8 "no ratio");
  let r64 = List.find (fun l -> contains l " 64 clients:") lines in
  Alcotest.(check bool) "ratio at 64" true (contains r64 "consort / etcd = 4.00x");
  let j = K.to_json ~header:[] ~load_start:"1.00 1.00 1.00" ~load_end:"2.00 2.00 2.00" pairs [] in
  let open Yojson.Safe.Util in
  let ratios = j |> member "ratios" |> to_list in
  Alcotest.(check (list int))
    "one ratio, at 64" [ 64 ]
    (List.map (fun r -> member "clients" r |> to_int) ratios);
  let runs = j |> member "runs" |> to_list in
  let etcd8 = List.nth runs 1 in
  Alcotest.(check string) "etcd run discarded" "discarded" (member "status" etcd8 |> to_string);
  Alcotest.(check bool) "no ops_per_s" true (member "ops_per_s" etcd8 = `Null);
  Alcotest.(check string) "load kept" "1.00 1.00 1.00" (member "load_average_start" j |> to_string)

(* A pipelined pair has rows and a ratio of its own, named by its shape,
   beside the unpipelined run of as many connections. *)
let pipelined_rows () =
  let pairs =
    [
      ((8, 1), K.Measured (m ~ops:20_000 "consort" 8), K.Measured (m ~ops:10_000 "etcd" 8));
      ( (8, 8),
        K.Measured (m ~ops:60_000 ~depth:8 "consort" 8),
        K.Measured (m ~ops:20_000 ~depth:8 "etcd" 8) );
    ]
  in
  let lines = K.report pairs in
  let r = List.find (fun l -> contains l "8 x 8 pipelined:") lines in
  Alcotest.(check bool) "pipelined ratio" true (contains r "consort / etcd = 3.00x");
  let r1 = List.find (fun l -> contains l "  8 clients:") lines in
  Alcotest.(check bool) "unpipelined ratio" true (contains r1 "consort / etcd = 2.00x");
  let j = K.to_json ~header:[] ~load_start:"" ~load_end:"" pairs [] in
  let open Yojson.Safe.Util in
  Alcotest.(check (list int))
    "depths of the ratios" [ 1; 8 ]
    (List.map (fun r -> member "depth" r |> to_int) (j |> member "ratios" |> to_list));
  Alcotest.(check (list int))
    "depths of the runs" [ 1; 1; 8; 8 ]
    (List.map (fun r -> member "depth" r |> to_int) (j |> member "runs" |> to_list))

let not_measured () =
  let lines = K.report [ ((8, 1), K.Measured (m "consort" 8), K.Not_measured "no Go toolchain") ] in
  Alcotest.(check bool) "reason" true (contains (List.nth lines 1) "not measured: no Go toolchain");
  Alcotest.(check bool) "no ratio" true (contains (List.nth lines 2) "no ratio")

(* A fake clock: sleeping moves it. *)
let clock () =
  let t = ref 0. in
  ((fun () -> !t), fun d -> t := !t +. d)

let ready_all () =
  let now, sleep = clock () in
  (* m2 answers from its 4th probe on. *)
  let n = Hashtbl.create 3 in
  let probe x =
    let k = 1 + Option.value (Hashtbl.find_opt n x) ~default:0 in
    Hashtbl.replace n x k;
    if x = "m2" && k < 4 then Error "no leader" else Ok ()
  in
  (match K.wait_all ~now ~sleep ~timeout:30. ~name:Fun.id ~probe [ "m0"; "m1"; "m2" ] with
  | Ok () -> ()
  | Error e -> Alcotest.fail e);
  Alcotest.(check int) "m2 probed until ready" 4 (Hashtbl.find n "m2");
  Alcotest.(check int) "m0 probed in the last pass too" 4 (Hashtbl.find n "m0")

let one_never_ready () =
  let now, sleep = clock () in
  let probe x = if x = "m1" then Error "connection refused" else Ok () in
  match K.wait_all ~now ~sleep ~timeout:30. ~name:Fun.id ~probe [ "m0"; "m1"; "m2" ] with
  | Ok () -> Alcotest.fail "ready with a member down"
  | Error e ->
      Alcotest.(check bool) "names m1" true (contains e "m1: connection refused");
      Alcotest.(check bool) "not m0" false (contains e "m0");
      Alcotest.(check bool) "waited the timeout" true (now () >= 30.)

(* A member that answers only every other probe: never all in one pass. *)
let flapping () =
  let now, sleep = clock () in
  let k = ref 0 in
  let probe x =
    if x = "m0" then (
      incr k;
      if !k mod 2 = 0 then Ok () else Error "no leader")
    else if x = "m2" then if !k mod 2 = 0 then Error "no leader" else Ok ()
    else Ok ()
  in
  Alcotest.(check bool)
    "not ready" true
    (Result.is_error (K.wait_all ~now ~sleep ~timeout:5. ~name:Fun.id ~probe [ "m0"; "m1"; "m2" ]))

let sequencer () =
  let dir = Filename.temp_file "kvbench" "" in
  Sys.remove dir;
  Unix.mkdir dir 0o700;
  let write i lines =
    let f = Filename.concat dir (string_of_int i) in
    let oc = open_out f in
    List.iter (fun l -> output_string oc (l ^ "\n")) lines;
    close_out oc;
    f
  in
  let fs =
    [
      write 0
        [
          "consort: [INFO] a1: active in 1:a1, epoch 1, write 0";
          "consort: [INFO] a1: active in 3:b2, epoch 2, write 0";
        ];
      write 1 [ "consort: [INFO] b2: active in 3:b2, epoch 2, write 0" ];
      write 2 [ "consort: [INFO] c3: active in 3:b2, epoch 2, write 0" ];
    ]
  in
  Alcotest.(check (result int string)) "b2's replica" (Ok 1) (K.sequencer fs);
  Alcotest.(check bool) "none" true (Result.is_error (K.sequencer [ List.nth fs 2 ]));
  let other = write 3 [ "consort: [INFO] c3: active in 4:c3, epoch 3, write 0" ] in
  Alcotest.(check bool)
    "views disagree" true
    (Result.is_error (K.sequencer [ List.nth fs 0; List.nth fs 1; other ]));
  Sys.remove other;
  List.iter Sys.remove fs;
  Unix.rmdir dir

(* The Go driver speaks consort kv's client protocol as src/kv/wire.ml
   frames it: the same bytes as bench/kv/kvload/consort_test.go expects, and
   the same version. *)
let driver_protocol () =
  let f =
    Consort_kv.Wire.frame_request
      {
        Consort_kv.Wire.client = 0x0102030405060708L;
        req = 300;
        op = Consort_kv.Op.Put ("key0001", "v");
      }
  in
  let hex =
    String.concat ""
      (List.init (String.length f) (fun i -> Printf.sprintf "%02x" (Char.code f.[i])))
  in
  Alcotest.(check string) "put frame" "00000016030102030405060708ac0201076b6579303030310176" hex;
  let go = List.assoc "consort.go" Consort_kv_bench.Kvload_src.files in
  Alcotest.(check bool)
    "kvload's version" true
    (contains go (Printf.sprintf "kvVersion  = %d\n" (Char.code f.[4])))

let () =
  Alcotest.run "kv_bench"
    [
      ( "report",
        [
          Alcotest.test_case "verdict" `Quick verdict;
          Alcotest.test_case "failed run gives no figure or ratio" `Quick failed_not_reported;
          Alcotest.test_case "pipelined rows and ratio" `Quick pipelined_rows;
          Alcotest.test_case "not measured" `Quick not_measured;
          Alcotest.test_case "driver's protocol" `Quick driver_protocol;
        ] );
      ( "readiness",
        [
          Alcotest.test_case "every member" `Quick ready_all;
          Alcotest.test_case "one never ready" `Quick one_never_ready;
          Alcotest.test_case "flapping" `Quick flapping;
          Alcotest.test_case "sequencer from logs" `Quick sequencer;
        ] );
    ]
