(* The FIFO specification: hand-written traces for each rule, and random
   correct traces with random mutations. *)

open Consort_spec
module F = Fifo

let seed = 0x5eed

let qtest ?(count = 300) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let cast s seq = F.Sent { sender = s; kind = F.Cast; seq }
let send s d seq = F.Sent { sender = s; kind = F.Send d; seq }
let dc r s seq = F.Delivered { receiver = r; sender = s; cast = true; seq }
let ds r s seq = F.Delivered { receiver = r; sender = s; cast = false; seq }
let viol = Alcotest.testable F.pp_violation ( = )

let check_ok name ~n trace =
  match F.check ~n trace with
  | Ok () -> ()
  | Error l -> Alcotest.failf "%s: %a" name Fmt.(list ~sep:semi F.pp_violation) l

let check_err name ~n trace expected =
  match F.check ~n trace with
  | Ok () -> Alcotest.failf "%s: accepted" name
  | Error l -> Alcotest.(check (list viol)) name expected l

(* Three endpoints: two casts and a send each way, interleaved. *)
let good =
  [
    cast 0 1;
    dc 0 0 1;
    send 1 0 7;
    cast 0 2;
    dc 1 0 1;
    ds 0 1 7;
    dc 2 0 1;
    dc 2 0 2;
    dc 0 0 2;
    cast 2 5;
    dc 1 0 2;
    dc 2 2 5;
    dc 1 2 5;
    dc 0 2 5;
  ]

let correct_traces () =
  check_ok "empty" ~n:3 [];
  check_ok "one endpoint casting to itself" ~n:1 [ cast 0 0; dc 0 0 0 ];
  check_ok "send to self" ~n:2 [ send 1 1 3; ds 1 1 3 ];
  check_ok "interleaved" ~n:3 good;
  check_ok "sends to others do not order each other" ~n:3
    [ send 0 1 1; send 0 2 2; ds 2 0 2; ds 1 0 1 ];
  check_ok "sequence numbers need not be consecutive" ~n:2
    [ cast 0 10; cast 0 3; dc 0 0 10; dc 1 0 10; dc 0 0 3; dc 1 0 3 ]

let duplicate () =
  check_err "duplicate cast" ~n:3
    (good @ [ dc 1 0 1 ])
    [ F.Duplicate { index = 14; receiver = 1; sender = 0; seq = 1; first = 4 } ];
  check_err "duplicate send" ~n:2
    [ send 1 0 7; ds 0 1 7; ds 0 1 7 ]
    [ F.Duplicate { index = 2; receiver = 0; sender = 1; seq = 7; first = 1 } ]

let reorder () =
  check_err "two casts swapped at one receiver" ~n:2
    [ cast 0 1; cast 0 2; dc 0 0 1; dc 0 0 2; dc 1 0 2; dc 1 0 1 ]
    [ F.Out_of_order { index = 5; receiver = 1; sender = 0; seq = 1; after = 2 } ];
  check_err "send overtaken by a later cast" ~n:2
    [ send 0 1 1; cast 0 2; dc 0 0 2; dc 1 0 2; ds 1 0 1 ]
    [ F.Out_of_order { index = 4; receiver = 1; sender = 0; seq = 1; after = 2 } ];
  check_err "three messages, last first" ~n:1
    [ cast 0 1; cast 0 2; cast 0 3; dc 0 0 3; dc 0 0 1; dc 0 0 2 ]
    [
      F.Out_of_order { index = 4; receiver = 0; sender = 0; seq = 1; after = 3 };
      F.Out_of_order { index = 5; receiver = 0; sender = 0; seq = 2; after = 3 };
    ]

let missing () =
  check_err "cast missing at one receiver" ~n:3
    (List.filter (( <> ) (dc 2 0 2)) good)
    [ F.Missing { receiver = 2; sender = 0; seq = 2 } ];
  check_err "cast missing at its sender" ~n:2
    [ cast 1 4; dc 0 1 4 ]
    [ F.Missing { receiver = 1; sender = 1; seq = 4 } ];
  check_err "send missing" ~n:2
    [ send 0 1 1; send 0 1 2; ds 1 0 2 ]
    [ F.Missing { receiver = 1; sender = 0; seq = 1 } ];
  check_err "nothing delivered, in send order then receiver order" ~n:2
    [ cast 1 1; send 0 1 2; cast 0 3 ]
    [
      F.Missing { receiver = 1; sender = 0; seq = 2 };
      F.Missing { receiver = 0; sender = 0; seq = 3 };
      F.Missing { receiver = 1; sender = 0; seq = 3 };
      F.Missing { receiver = 0; sender = 1; seq = 1 };
      F.Missing { receiver = 1; sender = 1; seq = 1 };
    ]

let invented () =
  check_err "never sent" ~n:2
    [ dc 1 0 9 ]
    [ F.Not_sent { index = 0; receiver = 1; sender = 0; seq = 9 } ];
  check_err "delivered before sent" ~n:2
    [ ds 1 0 1; send 0 1 1; ds 1 0 1 ]
    [ F.Not_sent { index = 0; receiver = 1; sender = 0; seq = 1 } ];
  check_err "sent by another endpoint" ~n:2
    [ cast 0 1; dc 0 0 1; dc 1 0 1; dc 1 1 1 ]
    [ F.Not_sent { index = 3; receiver = 1; sender = 1; seq = 1 } ]

let misaddressed () =
  check_err "send delivered elsewhere" ~n:3
    [ send 0 1 1; ds 1 0 1; ds 2 0 1 ]
    [ F.Misaddressed { index = 2; receiver = 2; sender = 0; seq = 1; dst = 1 } ];
  check_err "send delivered as a cast" ~n:2
    [ send 0 1 1; dc 1 0 1 ]
    [ F.Wrong_kind { index = 1; receiver = 1; sender = 0; seq = 1; sent = F.Send 1 } ];
  check_err "cast delivered as a send" ~n:2
    [ cast 0 1; dc 0 0 1; ds 1 0 1 ]
    [ F.Wrong_kind { index = 2; receiver = 1; sender = 0; seq = 1; sent = F.Cast } ]

let malformed () =
  check_err "endpoints out of range" ~n:2
    [ cast 2 1; send 0 5 1; dc (-1) 0 1; F.Crashed 9 ]
    [
      F.Bad_endpoint { index = 0; endpoint = 2 };
      F.Bad_endpoint { index = 1; endpoint = 5 };
      F.Bad_endpoint { index = 2; endpoint = -1 };
      F.Bad_endpoint { index = 3; endpoint = 9 };
    ];
  check_err "seq reused" ~n:1
    [ cast 0 1; dc 0 0 1; cast 0 1 ]
    [ F.Resent { index = 2; sender = 0; seq = 1; first = 0 } ];
  Alcotest.check_raises "n < 1" (Invalid_argument "Fifo.create: n < 1") (fun () ->
      ignore (F.create ~n:0))

let crashes () =
  check_ok "crashed sender: casts may be missing anywhere" ~n:3
    [ cast 0 1; cast 0 2; dc 1 0 1; F.Crashed 0; dc 2 0 2 ];
  check_ok "crash recorded after the sends still exempts" ~n:2
    [ send 0 1 1; cast 0 2; dc 1 0 2; F.Crashed 0 ];
  check_ok "crashed receiver misses messages, others get them" ~n:3
    [ cast 0 1; F.Crashed 2; dc 0 0 1; dc 1 0 1; send 1 2 2 ];
  check_ok "gap to a crashed receiver" ~n:2
    [ cast 0 1; cast 0 2; cast 0 3; F.Crashed 1; dc 0 0 1; dc 0 0 2; dc 0 0 3; dc 1 0 1; dc 1 0 3 ];
  check_err "crash does not excuse a duplicate" ~n:2
    [ cast 0 1; F.Crashed 1; dc 0 0 1; dc 1 0 1; dc 1 0 1 ]
    [ F.Duplicate { index = 4; receiver = 1; sender = 0; seq = 1; first = 3 } ];
  check_err "crash does not excuse reordering" ~n:2
    [ cast 0 1; cast 0 2; F.Crashed 0; dc 1 0 2; dc 1 0 1 ]
    [ F.Out_of_order { index = 4; receiver = 1; sender = 0; seq = 1; after = 2 } ];
  check_err "crash does not excuse invention" ~n:2
    [ F.Crashed 0; dc 1 0 1 ]
    [ F.Not_sent { index = 1; receiver = 1; sender = 0; seq = 1 } ];
  check_err "other pairs still checked" ~n:3
    [ cast 0 1; cast 1 2; F.Crashed 2; dc 0 0 1; dc 1 0 1; dc 0 1 2 ]
    [ F.Missing { receiver = 1; sender = 1; seq = 2 } ]

let incremental () =
  let t = F.create ~n:2 in
  List.iter (F.add t) [ cast 0 1; dc 0 0 1; dc 0 0 1 ];
  Alcotest.(check int) "events" 3 (F.events t);
  Alcotest.(check (list viol))
    "safety found at once"
    [ F.Duplicate { index = 2; receiver = 0; sender = 0; seq = 1; first = 1 } ]
    (F.violations t);
  Alcotest.(check (list viol))
    "finish adds missing"
    [
      F.Duplicate { index = 2; receiver = 0; sender = 0; seq = 1; first = 1 };
      F.Missing { receiver = 1; sender = 0; seq = 1 };
    ]
    (F.finish t);
  F.add t (dc 1 0 1);
  Alcotest.(check int) "finish again, after more events" 1 (List.length (F.finish t))

let printers () =
  let s v = Fmt.str "%a" F.pp_violation v in
  Alcotest.(check string)
    "duplicate" "event 14: 1 delivered #1 of 0 again (first at event 4)"
    (s (F.Duplicate { index = 14; receiver = 1; sender = 0; seq = 1; first = 4 }));
  Alcotest.(check string)
    "out of order" "event 5: 1 delivered #1 of 0 out of order, after #2 which 0 sent later"
    (s (F.Out_of_order { index = 5; receiver = 1; sender = 0; seq = 1; after = 2 }));
  Alcotest.(check string)
    "missing" "2 never delivered #2 of 0, though both stayed correct"
    (s (F.Missing { receiver = 2; sender = 0; seq = 2 }));
  Alcotest.(check string)
    "not sent" "event 0: 1 delivered #9 of 0, which 0 had not sent"
    (s (F.Not_sent { index = 0; receiver = 1; sender = 0; seq = 9 }));
  Alcotest.(check string)
    "misaddressed" "event 2: 2 delivered #1 of 0, which was sent to 1 only"
    (s (F.Misaddressed { index = 2; receiver = 2; sender = 0; seq = 1; dst = 1 }));
  Alcotest.(check string)
    "wrong kind" "event 1: 1 delivered #1 of 0 as a cast, but it was sent as a send to 1"
    (s (F.Wrong_kind { index = 1; receiver = 1; sender = 0; seq = 1; sent = F.Send 1 }));
  Alcotest.(check string)
    "resent" "event 2: 0 sent #1 again (first sent at event 0)"
    (s (F.Resent { index = 2; sender = 0; seq = 1; first = 0 }));
  Alcotest.(check string)
    "bad endpoint" "event 3: endpoint 9 does not exist"
    (s (F.Bad_endpoint { index = 3; endpoint = 9 }));
  Alcotest.(check string) "event" "1 delivered #7 of 0 (send)" (Fmt.str "%a" F.pp_event (ds 1 0 7));
  Alcotest.(check string) "sent" "0 sent #3 (send to 2)" (Fmt.str "%a" F.pp_event (send 0 2 3))

(* Random correct traces: senders put each message on a FIFO queue per
   addressee; a scheduler delivers queue heads in random order. Crashed
   ends may lose any queued message (but never reorder). *)
let trace ?(crashes = 0) ~n ~msgs rand =
  let q = Array.init (n * n) (fun _ -> Queue.create ()) in
  let crashed = Array.make n false in
  let nextseq = Array.make n 0 in
  let out = ref [] in
  let emit e = out := e :: !out in
  let sent = ref 0 and queued = ref 0 and ncrashed = ref 0 in
  let rint k = Random.State.int rand k in
  let deliver_one () =
    (* Pick a random non-empty queue, scanning from a random start. *)
    let start = rint (n * n) in
    let rec find i =
      let k = (start + i) mod (n * n) in
      if Queue.is_empty q.(k) then find (i + 1) else k
    in
    let k = find 0 in
    let r = k / n and s = k mod n in
    let seq, cast = Queue.pop q.(k) in
    decr queued;
    if (crashed.(r) || crashed.(s)) && rint 3 = 0 then ()
    else emit (F.Delivered { receiver = r; sender = s; cast; seq })
  in
  while !sent < msgs || !queued > 0 do
    if !ncrashed < crashes && rint 50 = 0 then begin
      let e = rint n in
      if not crashed.(e) then (
        crashed.(e) <- true;
        incr ncrashed;
        emit (F.Crashed e))
    end
    else if !sent < msgs && (!queued = 0 || rint 2 = 0) then begin
      let s = rint n in
      (* Sequence numbers increase with gaps. *)
      let seq = nextseq.(s) in
      nextseq.(s) <- seq + 1 + rint 3;
      incr sent;
      if rint 3 = 0 then begin
        let d = rint n in
        emit (F.Sent { sender = s; kind = F.Send d; seq });
        Queue.push (seq, false) q.((d * n) + s);
        incr queued
      end
      else begin
        emit (F.Sent { sender = s; kind = F.Cast; seq });
        for r = 0 to n - 1 do
          Queue.push (seq, true) q.((r * n) + s);
          incr queued
        done
      end
    end
    else deliver_one ()
  done;
  Array.of_list (List.rev !out)

type mutation = Drop of int | Dup of int * int | Swap of int * int

let pp_mutation ppf = function
  | Drop i -> Fmt.pf ppf "drop %d" i
  | Dup (i, j) -> Fmt.pf ppf "duplicate %d at %d" i j
  | Swap (i, j) -> Fmt.pf ppf "swap %d and %d" i j

let deliveries tr =
  List.filter
    (fun i -> match tr.(i) with F.Delivered _ -> true | _ -> false)
    (List.init (Array.length tr) Fun.id)

let pair_of tr i =
  match tr.(i) with F.Delivered { receiver; sender; _ } -> (receiver, sender) | _ -> (-1, -1)

(* A mutation of a delivery: drop it, copy it to a later place, or swap it
   with a later delivery of the same pair (when there is one). *)
let mutate ~allow_drop tr rand =
  let ds = Array.of_list (deliveries tr) in
  let rint k = Random.State.int rand k in
  let i = ds.(rint (Array.length ds)) in
  let later_same_pair =
    List.filter (fun j -> j > i && pair_of tr j = pair_of tr i) (Array.to_list ds)
  in
  match rint 3 with
  | 0 when allow_drop -> Drop i
  | 1 when later_same_pair <> [] ->
      Swap (i, List.nth later_same_pair (rint (List.length later_same_pair)))
  | _ -> Dup (i, i + 1 + rint (Array.length tr - i))

let apply tr = function
  | Drop i -> List.filteri (fun j _ -> j <> i) (Array.to_list tr)
  | Dup (i, at) ->
      let l = Array.to_list tr in
      List.filteri (fun j _ -> j < at) l @ [ tr.(i) ] @ List.filteri (fun j _ -> j >= at) l
  | Swap (i, j) ->
      let a = Array.copy tr in
      a.(i) <- tr.(j);
      a.(j) <- tr.(i);
      Array.to_list a

let gen_trace ~crashes =
  QCheck.Gen.(
    triple (int_range 1 5) (int_range 1 40) int >|= fun (n, msgs, s) ->
    (n, trace ~crashes ~n ~msgs (Random.State.make [| s |])))

let print_trace (n, tr) = Fmt.str "n=%d@.%a" n Fmt.(array ~sep:cut F.pp_event) tr

let prop_correct =
  qtest "random correct traces pass"
    (QCheck.make ~print:print_trace (gen_trace ~crashes:0))
    (fun (n, tr) -> F.check ~n (Array.to_list tr) = Ok ())

let prop_correct_crashes =
  qtest "random correct traces with crashes and losses pass"
    (QCheck.make ~print:print_trace (gen_trace ~crashes:2))
    (fun (n, tr) -> F.check ~n (Array.to_list tr) = Ok ())

let caught tr n m =
  match F.check ~n (apply tr m) with
  | Ok () -> false
  | Error l ->
      let expected v =
        match (m, v) with
        | Drop i, F.Missing { receiver; sender; seq } -> (
            match tr.(i) with
            | F.Delivered d -> d.receiver = receiver && d.sender = sender && d.seq = seq
            | _ -> false)
        | Dup _, F.Duplicate _ -> true
        | Swap _, (F.Out_of_order _ | F.Not_sent _) -> true
        | _ -> false
      in
      List.exists expected l
      || QCheck.Test.fail_reportf "%a: wrong report %a" pp_mutation m
           Fmt.(list ~sep:semi F.pp_violation)
           l

let gen_mutated ~crashes ~allow_drop =
  QCheck.Gen.(
    gen_trace ~crashes >>= fun (n, tr) ->
    int >|= fun s ->
    let m =
      if deliveries tr = [] then None else Some (mutate ~allow_drop tr (Random.State.make [| s |]))
    in
    (n, tr, m))

let print_mutated (n, tr, m) =
  print_trace (n, tr)
  ^ "\n"
  ^ match m with None -> "no mutation" | Some m -> Fmt.str "%a" pp_mutation m

let prop_mutation =
  qtest ~count:500 "drop, duplicate or swap of a delivery is caught"
    (QCheck.make ~print:print_mutated (gen_mutated ~crashes:0 ~allow_drop:true))
    (fun (n, tr, m) -> match m with None -> true | Some m -> caught tr n m)

let prop_mutation_crashes =
  qtest ~count:500 "duplicate or swap is caught despite crashes"
    (QCheck.make ~print:print_mutated (gen_mutated ~crashes:2 ~allow_drop:false))
    (fun (n, tr, m) -> match m with None -> true | Some m -> caught tr n m)

(* Long traces must be checked in about linear time. *)
let large () =
  let rand = Random.State.make [| seed |] in
  let tr = trace ~n:4 ~msgs:60_000 rand in
  let len = Array.length tr in
  Alcotest.(check bool) "over 100,000 events" true (len > 100_000);
  let t0 = Sys.time () in
  (match F.check ~n:4 (Array.to_list tr) with
  | Ok () -> ()
  | Error l -> Alcotest.failf "%d violations" (List.length l));
  let tr' = Array.to_list tr |> List.filteri (fun i _ -> i <> len - 1) in
  (match F.check ~n:4 tr' with
  | Error [ F.Missing _ ] -> ()
  | _ -> Alcotest.fail "last delivery dropped, not reported as missing");
  let dt = Sys.time () -. t0 in
  if dt > 5. then Alcotest.failf "two checks of %d events took %.1fs" len dt

let tests =
  [
    Alcotest.test_case "correct traces pass" `Quick correct_traces;
    Alcotest.test_case "duplicate" `Quick duplicate;
    Alcotest.test_case "reordering" `Quick reorder;
    Alcotest.test_case "missing" `Quick missing;
    Alcotest.test_case "invented" `Quick invented;
    Alcotest.test_case "misaddressed and wrong kind" `Quick misaddressed;
    Alcotest.test_case "bad endpoints, reused seq" `Quick malformed;
    Alcotest.test_case "crash exemptions" `Quick crashes;
    Alcotest.test_case "incremental checker" `Quick incremental;
    Alcotest.test_case "printers" `Quick printers;
    prop_correct;
    prop_correct_crashes;
    prop_mutation;
    prop_mutation_crashes;
    Alcotest.test_case "large trace, linear time" `Quick large;
  ]

let () = Alcotest.run "consort-spec" [ ("fifo", tests) ]
