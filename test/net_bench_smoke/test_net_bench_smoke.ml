(* The TCP benchmark end to end in a tiny configuration: every figure is
   there and sane, the table and the JSON line say what they should, and
   nothing is left behind. *)

module B = Consort_net_bench.Tcp_bench

let cfg = { B.default with bytes = 4_000_000; seconds = 8.; rr_count = 300; rounds = 2 }

let report =
  lazy
    (match B.impossible () with
    | Some why -> Alcotest.failf "the TCP benchmark cannot run here: %s" why
    | None -> (
        match B.run cfg with
        | Ok r -> r
        | Error e -> Alcotest.failf "the TCP benchmark failed: %s" e))

let contains hay needle =
  let n = String.length needle in
  let rec go i = i + n <= String.length hay && (String.sub hay i n = needle || go (i + 1)) in
  go 0

let finite x = Float.is_finite x && not (Float.is_nan x)

let check_flow name (f : B.flow) =
  Alcotest.(check int) (name ^ ": every byte arrived") cfg.bytes f.bytes;
  let mbit = B.mbit_s f in
  if not (finite mbit && mbit > 10. && mbit < 1e6) then
    Alcotest.failf "%s: %f Mbit/s is not plausible" name mbit;
  let cpu = B.cpu_ms_per_mb f in
  if not (finite cpu && cpu > 0. && cpu < 1000.) then
    Alcotest.failf "%s: %f CPU ms/MB is not plausible" name cpu;
  List.iter
    (fun (c : B.cpu) ->
      if c.user < 0. || c.sys < 0. then Alcotest.failf "%s: negative CPU time for %s" name c.who)
    f.cpu;
  if f.machine < 0. then Alcotest.failf "%s: negative machine time" name;
  Alcotest.(check int) (name ^ ": one rate per round") cfg.rounds (List.length f.rates);
  if not (List.mem mbit f.rates && List.for_all (fun r -> r <= mbit) f.rates) then
    Alcotest.failf "%s: %.0f Mbit/s is not the best of the rounds" name mbit

let check_rr name (x : B.rr) =
  Alcotest.(check int) (name ^ ": every round trip measured") cfg.rr_count x.rounds;
  Alcotest.(check int) (name ^ ": message size") cfg.rr_size x.size;
  if not (x.min_us > 0. && x.min_us <= x.median_us && x.median_us <= x.p99_us && x.p99_us < 1e6)
  then
    Alcotest.failf
      "%s: round trips min %.1f median %.1f p99 %.1f us are not ordered or not plausible" name
      x.min_us x.median_us x.p99_us

let flows () =
  let r = Lazy.force report in
  check_flow "kernel -> consort" r.consort_in;
  check_flow "consort -> kernel" r.consort_out;
  check_flow "bridge" r.bridge;
  check_flow "veth" r.veth;
  Alcotest.(check (list string))
    "processes measured, bridge run" [ "source"; "bridge"; "sink" ]
    (List.map (fun (c : B.cpu) -> c.who) r.bridge.cpu);
  Alcotest.(check (list string))
    "processes measured, our stack receiving" [ "source"; "consort" ]
    (List.map (fun (c : B.cpu) -> c.who) r.consort_in.cpu)

let latencies () =
  let r = Lazy.force report in
  check_rr "consort, one CPU" r.consort_rr;
  check_rr "consort, any CPU" r.consort_rr_any;
  check_rr "bridge, one CPU" r.bridge_rr;
  check_rr "bridge, any CPU" r.bridge_rr_any;
  check_rr "veth, one CPU" r.veth_rr;
  check_rr "veth, any CPU" r.veth_rr_any

let offloads () =
  let r = Lazy.force report in
  if not (r.ethtool || contains r.offloads "tso=0 gso=0 gro=0") then
    Alcotest.failf "veth offloads are not off: %s" r.offloads

let output () =
  let r = Lazy.force report in
  let table = Fmt.str "%a" B.pp_table r in
  List.iter
    (fun row ->
      if not (contains table row) then Alcotest.failf "the table has no %S row:\n%s" row table)
    [
      "kernel -> consort (TAP)";
      "consort -> kernel (TAP)";
      "C TAP bridge";
      "veth, no offload";
      "throughput / bridge";
      "latency / bridge";
    ];
  let json = B.to_json r in
  Alcotest.(check bool)
    "one JSON object on one line" true
    (String.length json > 2
    && json.[0] = '{'
    && json.[String.length json - 1] = '}'
    && not (String.contains json '\n'));
  List.iter
    (fun key ->
      if not (contains json ("\"" ^ key ^ "\":")) then Alcotest.failf "no %s in %s" key json)
    [
      "consort_in_mbit_s";
      "bridge_mbit_s";
      "veth_mbit_s";
      "consort_rr_median_us";
      "throughput_ratio_in";
      "throughput_ratio_out";
      "latency_ratio";
      "targets_met";
    ];
  List.iter
    (fun bad -> if contains json bad then Alcotest.failf "%s in %s" bad json)
    [ "nan"; "inf" ];
  let i, o = B.throughput_ratios r in
  if not (finite i && finite o && i > 0. && o > 0.) then
    Alcotest.failf "throughput ratios %f %f" i o

let nothing_left () =
  ignore (Lazy.force report);
  (match B.leftovers () with
  | [] -> ()
  | l -> Alcotest.failf "left behind: %s" (String.concat ", " l));
  if
    Sys.file_exists
      (Filename.concat (Filename.get_temp_dir_name ())
         (Printf.sprintf "consort-netbench-%d" (Unix.getpid ())))
  then Alcotest.fail "the build directory of the C helpers is left"

let () =
  Alcotest.run "consort-net-bench-smoke"
    [
      ( "tcp",
        [
          Alcotest.test_case "bulk transfers: every byte, plausible rate and CPU" `Quick flows;
          Alcotest.test_case "request/response: every round trip, ordered percentiles" `Quick
            latencies;
          Alcotest.test_case "veth offloads off" `Quick offloads;
          Alcotest.test_case "table and JSON line" `Quick output;
          Alcotest.test_case "no namespace, device or file left" `Quick nothing_left;
        ] );
    ]
