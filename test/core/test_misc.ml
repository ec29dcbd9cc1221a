(* Params, View, Time, Rng, Event and Contract. *)

open Consort
open Util

let () =
  Params.register "test.int" (Params.Int 5) ~doc:"an int";
  Params.register "test.float" (Params.Float 0.5) ~doc:"a float";
  Params.register "test.bool" (Params.Bool false) ~doc:"a bool";
  Params.register "test.time" (Params.Time (Time.of_ms 10)) ~doc:"a time";
  Params.register "test.string" (Params.String "x") ~doc:"a string";
  Params.register ~min:(Params.Int 4) ~max:(Params.Int 8) "test.ranged" (Params.Int 5)
    ~doc:"a ranged int"

let params_defaults_and_overrides () =
  let p = Params.empty in
  Alcotest.(check int) "int default" 5 (Params.int p "test.int");
  Alcotest.(check (float 0.)) "float default" 0.5 (Params.float p "test.float");
  Alcotest.(check bool) "bool default" false (Params.bool p "test.bool");
  Alcotest.(check int) "time default" 10_000_000 (Params.time p "test.time");
  Alcotest.(check string) "string default" "x" (Params.string p "test.string");
  let p = Params.set "test.int" (Params.Int 7) p in
  let p = Params.set "test.int" (Params.Int 8) p in
  Alcotest.(check int) "override, last wins" 8 (Params.int p "test.int");
  Alcotest.(check int) "empty unchanged" 5 (Params.int Params.empty "test.int");
  raises_invalid "unknown name" (fun () -> Params.int p "test.nope");
  raises_invalid "wrong kind" (fun () -> Params.bool p "test.int");
  Params.register "test.int" (Params.Int 5) ~doc:"an int";
  raises_invalid "registered twice with another kind" (fun () ->
      Params.register "test.int" (Params.Bool true) ~doc:"");
  let names = List.map (fun (n, _, _) -> n) (Params.registered ()) in
  Alcotest.(check bool) "registered lists ours" true (List.mem "test.time" names);
  Alcotest.(check bool) "sorted" true (List.sort compare names = names);
  Alcotest.(check string)
    "doc kept" "a bool"
    (List.find_map
       (fun (n, _, d) -> if n = "test.bool" then Some d else None)
       (Params.registered ())
    |> Option.get);
  Alcotest.(check string)
    "pp time" "10.0ms"
    (Fmt.str "%a" Params.pp_value (Params.Time (Time.of_ms 10)));
  Alcotest.(check string) "pp int" "3" (Fmt.str "%a" Params.pp_value (Params.Int 3))

let params_of_string () =
  let ok s =
    match Params.of_string s with
    | Ok p -> p
    | Error e -> Alcotest.failf "%S: %a" s Params.pp_error e
  in
  let p = ok "test.int=42, test.float=1.25,test.bool=true,test.string=hello" in
  Alcotest.(check int) "int" 42 (Params.int p "test.int");
  Alcotest.(check (float 0.)) "float" 1.25 (Params.float p "test.float");
  Alcotest.(check bool) "bool" true (Params.bool p "test.bool");
  Alcotest.(check string) "string" "hello" (Params.string p "test.string");
  Alcotest.(check int) "empty string" 5 (Params.int (ok "") "test.int");
  Alcotest.(check int) "empty items skipped" 1 (Params.int (ok ",test.int=1,,") "test.int");
  List.iter
    (fun (s, ns) -> Alcotest.(check int) s ns (Params.time (ok ("test.time=" ^ s)) "test.time"))
    [
      ("7ns", 7);
      ("3us", 3_000);
      ("20ms", 20_000_000);
      ("2s", 2_000_000_000);
      ("1.5ms", 1_500_000);
      ("0.25s", 250_000_000);
    ];
  let error s sub =
    match Params.of_string s with
    | Ok _ -> Alcotest.failf "%S accepted" s
    | Error e -> check_contains s ~sub (Fmt.str "%a" Params.pp_error e)
  in
  error "test.nope=1" "unknown tunable \"test.nope\"";
  error "test.int=abc" "test.int=abc: expected an integer";
  error "test.int=1.5" "expected an integer";
  error "test.bool=yes" "expected true or false";
  error "test.time=10" "expected a duration";
  error "test.time=ms" "expected a duration";
  error "test.time=10h" "expected a duration";
  error "test.time=1e300s" "test.time=1e300s: expected a duration";
  error "test.time=infms" "expected a duration";
  error "test.time=nans" "expected a duration";
  error "test.int=0" "test.int=0 is out of its range [1, 1099511627776]";
  error "test.int=-3" "test.int=-3 is out of its range [1, ";
  error "test.time=0ms" "test.time=0ns is out of its range [1ns, ";
  error "test.time=2000000s" "is out of its range";
  error "test.float=-0.5" "test.float=-0.5 is out of its range [0, ";
  error "test.float=nan" "out of its range";
  error "test.ranged=3" "test.ranged=3 is out of its range [4, 8]";
  error "test.ranged=9" "test.ranged=9 is out of its range [4, 8]";
  Alcotest.(check int) "in range, bounds included" 8 (Params.int (ok "test.ranged=8") "test.ranged");
  Alcotest.(check int) "lower bound" 4 (Params.int (ok "test.ranged=4") "test.ranged");
  error "test.int" "expected NAME=VALUE";
  error "test.int=1,oops" "expected NAME=VALUE"

let view () =
  let v = View.v ~group:"grp" ~ltime:3 ~members:[| "a"; "b" |] ~rank:1 () in
  Alcotest.(check int) "nmembers" 2 (View.nmembers v);
  Alcotest.(check string) "pp" "grp@3:a[a, b] rank 1" (Fmt.str "%a" View.pp v);
  Alcotest.(check string) "default id" "3:a" v.View.id;
  Alcotest.(check bool)
    "stamp depends on the view" true
    (View.stamp v <> View.stamp (View.v ~group:"grp" ~ltime:4 ~members:[| "a"; "b" |] ~rank:1 ()));
  Alcotest.(check int)
    "ltime default" 0 (View.v ~group:"g" ~members:[| "a" |] ~rank:0 ()).View.ltime;
  raises_invalid "rank too big" (fun () -> View.v ~group:"g" ~members:[| "a" |] ~rank:1 ());
  raises_invalid "negative rank" (fun () -> View.v ~group:"g" ~members:[| "a" |] ~rank:(-1) ());
  let h g = View.group_hash (View.v ~group:g ~members:[| "a" |] ~rank:0 ()) in
  (* FNV-1a 32-bit reference values. *)
  Alcotest.(check int) "fnv empty" 0x811c9dc5 (h "");
  Alcotest.(check int) "fnv a" 0xe40c292c (h "a");
  Alcotest.(check int) "fnv foobar" 0xbf9cf968 (h "foobar")

let time () =
  Alcotest.(check int) "of_ns" 5 (Time.of_ns 5);
  Alcotest.(check int) "of_us" 5_000 (Time.of_us 5);
  Alcotest.(check int) "of_ms" 5_000_000 (Time.of_ms 5);
  Alcotest.(check int) "of_sec" 1_500_000_000 (Time.of_sec 1.5);
  Alcotest.(check (float 1e-9)) "to_us" 1.5 (Time.to_us 1_500);
  Alcotest.(check (float 1e-9)) "to_ms" 2.5 (Time.to_ms 2_500_000);
  Alcotest.(check (float 1e-9)) "to_sec" 0.25 (Time.to_sec 250_000_000);
  Alcotest.(check int) "add" 7 (Time.add 3 4);
  Alcotest.(check int) "diff" (-1) (Time.diff 3 4);
  Alcotest.(check int) "zero" 0 Time.zero;
  List.iter
    (fun (t, s) -> Alcotest.(check string) s s (Fmt.str "%a" Time.pp t))
    [
      (999, "999ns");
      (1_500, "1.5us");
      (12_300_000, "12.3ms");
      (2_500_000_000, "2.500s");
      (-5_000_000, "-5.0ms");
      (0, "0ns");
    ]

let rng () =
  let draw r = (Rng.int r 1000, Rng.float r 1.0, Rng.bool r, Rng.bits64 r) in
  let seq seed =
    let r = Rng.create seed in
    List.init 50 (fun _ -> draw r)
  in
  Alcotest.(check bool) "same seed, same sequence" true (seq 42 = seq 42);
  Alcotest.(check bool) "other seed, other sequence" true (seq 42 <> seq 43);
  let a = Rng.create 7 and b = Rng.create 7 in
  let sa = Rng.split a and sb = Rng.split b in
  Alcotest.(check bool)
    "split deterministic" true
    (List.init 20 (fun _ -> Rng.int sa 1_000_000) = List.init 20 (fun _ -> Rng.int sb 1_000_000));
  Alcotest.(check bool)
    "split advances parent alike" true
    (Rng.int a 1_000_000 = Rng.int b 1_000_000);
  let c = Rng.create 7 in
  let child = Rng.split c in
  Alcotest.(check bool)
    "child differs from parent" true
    (List.init 20 (fun _ -> Rng.int child 1_000_000) <> List.init 20 (fun _ -> Rng.int c 1_000_000));
  let r = Rng.create 1 in
  for _ = 1 to 1000 do
    let i = Rng.int r 7 in
    if i < 0 || i >= 7 then Alcotest.fail "int out of range";
    let f = Rng.float r 2.0 in
    if f < 0. || f >= 2.0 then Alcotest.fail "float out of range";
    if Rng.chance r 0. then Alcotest.fail "chance 0";
    if not (Rng.chance r 1.) then Alcotest.fail "chance 1";
    if Rng.bits64 r < 0L then Alcotest.fail "bits64 negative"
  done;
  let hits = List.length (List.filter Fun.id (List.init 10_000 (fun _ -> Rng.chance r 0.3))) in
  Alcotest.(check bool) "chance 0.3 near 30%" true (hits > 2700 && hits < 3300)

type Event.up_ctl += Custom_up of string
type Event.dn_ctl += Custom_dn

let events () =
  let str pp x = Fmt.str "%a" pp x in
  Alcotest.(check string) "cast" "cast" (str Event.pp_dst Event.Cast);
  Alcotest.(check string) "send" "send(3)" (str Event.pp_dst (Event.Send 3));
  Alcotest.(check string) "cast from" "cast from 1" (str Event.pp_src (Event.Cast_from 1));
  Alcotest.(check string) "send from" "send from 2" (str Event.pp_src (Event.Send_from 2));
  Alcotest.(check string) "raw" "raw" (str Event.pp_src Event.Raw);
  Alcotest.(check string) "lost" "lost-message(4)" (str Event.pp_up_ctl (Event.Lost_message 4));
  Alcotest.(check string) "blocked" "blocked(true)" (str Event.pp_up_ctl (Event.Blocked true));
  Alcotest.(check string) "stop" "stop" (str Event.pp_dn_ctl Event.Stop);
  Alcotest.(check string) "unknown up" "<control event>" (str Event.pp_up_ctl (Custom_up "x"));
  Alcotest.(check string) "unknown dn" "<control event>" (str Event.pp_dn_ctl Custom_dn);
  Event.register_up_ctl_printer (function
    | Custom_up s -> Some (fun ppf -> Fmt.pf ppf "custom(%s)" s)
    | _ -> None);
  Event.register_dn_ctl_printer (function
    | Custom_dn -> Some (fun ppf -> Fmt.string ppf "custom-dn")
    | _ -> None);
  Alcotest.(check string) "registered up" "custom(x)" (str Event.pp_up_ctl (Custom_up "x"));
  Alcotest.(check string) "registered dn" "custom-dn" (str Event.pp_dn_ctl Custom_dn);
  Alcotest.(check string)
    "builtin still printed" "blocked(false)"
    (str Event.pp_up_ctl (Event.Blocked false))

let contract () =
  let a = Contract.v "p" ~doc:"one" and b = Contract.v "p" ~doc:"two" in
  Alcotest.(check bool) "equal by name" true (Contract.equal a b);
  Alcotest.(check bool) "different names" false (Contract.equal a Contract.net);
  Alcotest.(check string) "name" "p" (Contract.name a);
  Alcotest.(check string) "doc" "two" (Contract.doc b);
  Alcotest.(check string) "pp" "reliable-send" (Fmt.str "%a" Contract.pp Contract.reliable_send);
  let names = List.map Contract.name Contract.[ net; datagram; reliable_send; reliable_cast ] in
  Alcotest.(check int) "builtins distinct" 4 (List.length (List.sort_uniq compare names))

let tests =
  [
    Alcotest.test_case "params defaults and overrides" `Quick params_defaults_and_overrides;
    Alcotest.test_case "params of_string" `Quick params_of_string;
    Alcotest.test_case "view" `Quick view;
    Alcotest.test_case "time" `Quick time;
    Alcotest.test_case "rng" `Quick rng;
    Alcotest.test_case "event printers" `Quick events;
    Alcotest.test_case "contract" `Quick contract;
  ]
