(* The group runtime's feature modules, each driven alone (no network, no simulator):
   Group_queue (admission, the queue of a view change, the flow callback) and Group_primary (a
   view with the quorum is pending until confirmed, and was never primary if it ends first) and
   Group_status (answers counted a second, queries and their answers). *)

open Consort
module G = Consort_group
module Q = G.Group_queue
module GP = G.Group_primary
module P = G.Primary

let pp_error ppf = function
  | Q.Flow_control -> Fmt.string ppf "Flow_control"
  | Too_big { size; max } -> Fmt.pf ppf "Too_big %d > %d" size max
  | Not_member m -> Fmt.pf ppf "Not_member %s" m
  | Leaving -> Fmt.string ppf "Leaving"
  | Exited -> Fmt.string ppf "Exited"
  | Not_primary s -> Fmt.pf ppf "Not_primary %s" s

let error = Alcotest.testable pp_error ( = )
let result = Alcotest.(result unit error)

let admission () =
  let told = ref [] in
  let q = Q.create ~limit:200 ~flow:(fun b -> told := b :: !told) in
  let admit ?(exited = false) ?(leaving = false) ?(blocked = false) size =
    Q.admit q ~exited ~leaving ~max_message:100 ~blocked size
  in
  Alcotest.check result "exited" (Error Exited) (admit ~exited:true ~leaving:true 1);
  Alcotest.check result "leaving" (Error Leaving) (admit ~leaving:true 1);
  Alcotest.check result "too big" (Error (Too_big { size = 101; max = 100 })) (admit 101);
  (* Nothing queued and no view change: the queue's bound does not apply. *)
  Alcotest.check result "goes now" (Ok ()) (admit 100);
  Alcotest.check result "first queued" (Ok ()) (admit ~blocked:true 100);
  Q.push q (`Cast (String.make 100 'a'));
  (* 100 + 64 queued, 10 + 64 more is over 200. *)
  Alcotest.check result "no room" (Error Flow_control) (admit ~blocked:true 10);
  Alcotest.(check (list bool)) "told to pause" [ true ] !told;
  Alcotest.check result "still no room, even unblocked" (Error Flow_control) (admit 10);
  Alcotest.(check (list bool)) "told once" [ true ] !told;
  Alcotest.(check int) "queued" 1 (Q.length q);
  let out = ref [] in
  Q.flush q ~ready:(fun () -> true) (fun item -> out := item :: !out);
  Alcotest.(check int) "flushed" 1 (List.length !out);
  Alcotest.(check bool) "empty" true (Q.is_empty q);
  Q.update_flow q ~exited:false;
  Alcotest.(check (list bool)) "told to go on" [ false; true ] !told;
  Alcotest.check result "room again" (Ok ()) (admit ~blocked:true 10);
  Q.set_stack_flow q true;
  Alcotest.check result "stack's flow control" (Error Flow_control) (admit 1);
  Q.update_flow q ~exited:true;
  Alcotest.(check (list bool)) "nothing told once exited" [ false; true ] !told;
  ignore (Q.refuse q Flow_control : (unit, Q.error) result);
  Alcotest.(check int) "refusals counted" 1 (Q.refused q)

let flush_stops () =
  let q = Q.create ~limit:1000 ~flow:ignore in
  Q.push q (`Cast "a");
  Q.push q (`Send ("m", "b"));
  let n = ref 0 in
  (* Not ready after the first: the second waits (a view change began). *)
  Q.flush q ~ready:(fun () -> !n = 0) (fun _ -> incr n);
  Alcotest.(check int) "one out" 1 !n;
  Alcotest.(check int) "one left" 1 (Q.length q);
  (* 1 + 64 queued, 936 + 64 more is over 1000. *)
  Alcotest.check result "the one left counts against the bound" (Error Flow_control)
    (Q.admit q ~exited:false ~leaving:false ~max_message:2000 ~blocked:false 936)

let static3 () =
  let params = Params.empty |> Params.set P.Param.expected (Params.Int 3) in
  match P.config params with Ok c -> c | Error e -> Alcotest.fail e

let primary () =
  let heard = ref [] and ctls = ref [] in
  let p =
    GP.create ~me:"a" ~config:(Some (static3 ())) ~on_primary:(fun q -> heard := q :: !heard)
  in
  let dn_ctl e = ctls := e :: !ctls in
  let d = GP.install p ~layers:[ P.layer ] ~members:[ ("a", "A"); ("b", "B") ] in
  Alcotest.(check bool) "pending" true (GP.waiting p);
  Alcotest.(check (option string)) "casts wait, not refused" None (GP.refusal p);
  GP.start p ~vid:"1:a" ~dn_ctl d;
  (match !ctls with [ P.Start ] -> () | _ -> Alcotest.fail "Start not sent down");
  Alcotest.(check int) "nothing told yet" 0 (List.length !heard);
  Alcotest.(check bool) "decided" true (GP.on_ctl p ~vid:"1:a" ~dn_ctl P.Confirmed);
  Alcotest.(check bool) "no longer pending" false (GP.waiting p);
  (match !heard with
  | [ q ] -> Alcotest.(check bool) "told primary" true q.P.primary
  | _ -> Alcotest.fail "not told once");
  Alcotest.(check bool)
    "a second Confirmed decides nothing" false
    (GP.on_ctl p ~vid:"1:a" ~dn_ctl P.Confirmed)

let pending_ends () =
  let heard = ref [] in
  let p =
    GP.create ~me:"a" ~config:(Some (static3 ())) ~on_primary:(fun q -> heard := q :: !heard)
  in
  let d = GP.install p ~layers:[ P.layer ] ~members:[ ("a", "A"); ("b", "B") ] in
  GP.start p ~vid:"1:a" ~dn_ctl:ignore d;
  (* The view ends before every member said it is there. *)
  GP.end_view p;
  (match !heard with
  | [ q ] -> Alcotest.(check bool) "told never primary" false q.P.primary
  | _ -> Alcotest.fail "not told once");
  Alcotest.(check bool) "not pending" false (GP.waiting p);
  Alcotest.(check bool) "a queued cast is lost" true (GP.outside_primary p);
  Alcotest.(check bool) "casts refused" true (GP.refusal p <> None);
  GP.end_view p;
  Alcotest.(check int) "told once" 1 (List.length !heard)

let minority () =
  let heard = ref [] and ctls = ref 0 in
  let p =
    GP.create ~me:"a" ~config:(Some (static3 ())) ~on_primary:(fun q -> heard := q :: !heard)
  in
  let d = GP.install p ~layers:[ P.layer ] ~members:[ ("a", "A") ] in
  Alcotest.(check bool) "not pending" false (GP.waiting p);
  Alcotest.(check bool) "refused" true (GP.refusal p <> None);
  GP.start p ~vid:"1:a" ~dn_ctl:(fun _ -> incr ctls) d;
  Alcotest.(check int) "nothing sent down" 0 !ctls;
  match !heard with
  | [ q ] -> Alcotest.(check bool) "told not primary" false q.P.primary
  | _ -> Alcotest.fail "not told once"

let without_layer () =
  let p =
    GP.create ~me:"a" ~config:(Some (static3 ())) ~on_primary:(fun _ -> Alcotest.fail "told")
  in
  let d = GP.install p ~layers:[] ~members:[ ("a", "A") ] in
  GP.start p ~vid:"1:a" ~dn_ctl:(fun _ -> Alcotest.fail "sent down") d;
  Alcotest.(check bool) "no quorum" true (GP.quorum p = None);
  Alcotest.(check (option string)) "nothing refused" None (GP.refusal p)

module S = G.Group_status

(* Answers a second: at most [max_answers] in one second, counted again in the next. *)
let status_answers () =
  let t : unit S.t = S.create () in
  let n = ref 0 in
  for _ = 1 to S.max_answers + 10 do
    if S.may_answer t ~now:(Time.of_ms 1500) then incr n
  done;
  Alcotest.(check int) "one second's answers" S.max_answers !n;
  Alcotest.(check bool) "later in that second" false (S.may_answer t ~now:(Time.of_ms 2400));
  Alcotest.(check bool) "the next second" true (S.may_answer t ~now:(Time.of_ms 2500))

(* This member's document: the handler's, the runtime's when it raises, an error when too big. *)
let status_mine () =
  let t : unit S.t = S.create () in
  let default () = {|{"view":"1:a"}|} in
  Alcotest.(check string) "no handler" (default ()) (S.mine t ~default);
  S.set_handler t (fun () -> {|{"app":1}|});
  Alcotest.(check string) "the handler's" {|{"app":1}|} (S.mine t ~default);
  S.set_handler t (fun () -> failwith "broken");
  Alcotest.(check string) "a raising handler" (default ()) (S.mine t ~default);
  S.set_handler t (fun () -> String.make (G.Side.max_status + 1) 'x');
  Alcotest.(check bool)
    "too big" true
    (String.length (S.mine t ~default) < 100 && String.sub (S.mine t ~default) 0 9 = {|{"error":|});
  Alcotest.(check string) "escaped" {|"a\"b\\c\u000a"|} (S.json_string "a\"b\\c\n")

let outcome = Alcotest.(result (list (pair string (result string string))) string)

(* A query waits for every other member of its view; each answer is taken once, from a member it
   waits for, under its nonce and view; the last one finishes it and cancels its timer. *)
let status_query () =
  let t : int S.t = S.create () in
  let got = ref [] and cancelled = ref [] in
  let cancel tm = cancelled := tm :: !cancelled in
  let q =
    S.start t ~nonce:"n1" ~vid:"1:a" ~members:[| "a"; "b"; "c" |] ~me:("a", "A")
      ~timeout:(Time.of_sec 2.) (fun o -> got := o :: !got)
  in
  S.set_timer q 7;
  Alcotest.(check (list string)) "waits for the others" [ "b"; "c" ] (S.waiting q);
  Alcotest.(check bool) "wrong nonce" false (S.answer t ~cancel ~vid:"1:a" ~nonce:"n2" ~eid:"b" "B");
  Alcotest.(check bool) "wrong view" false (S.answer t ~cancel ~vid:"2:a" ~nonce:"n1" ~eid:"b" "B");
  Alcotest.(check bool) "not asked" false (S.answer t ~cancel ~vid:"1:a" ~nonce:"n1" ~eid:"z" "Z");
  Alcotest.(check bool) "b" true (S.answer t ~cancel ~vid:"1:a" ~nonce:"n1" ~eid:"b" "B");
  Alcotest.(check bool) "b again" false (S.answer t ~cancel ~vid:"1:a" ~nonce:"n1" ~eid:"b" "B2");
  Alcotest.(check int) "not finished" 0 (List.length !got);
  Alcotest.(check bool) "c" true (S.answer t ~cancel ~vid:"1:a" ~nonce:"n1" ~eid:"c" "C");
  Alcotest.(check (list outcome))
    "finished"
    [ Ok [ ("a", Ok "A"); ("b", Ok "B"); ("c", Ok "C") ] ]
    !got;
  Alcotest.(check (list int)) "timer cancelled" [ 7 ] !cancelled;
  S.finish t ~cancel q;
  Alcotest.(check int) "finished once" 1 (List.length !got)

(* A query's timeout: members that did not answer are named; at most [max_queries] are out. *)
let status_timeout () =
  let t : int S.t = S.create () in
  let got = ref [] in
  let cancel _ = () in
  let start nonce =
    S.start t ~nonce ~vid:"1:a" ~members:[| "a"; "b" |] ~me:("a", "A") ~timeout:(Time.of_sec 2.)
      (fun o -> got := o :: !got)
  in
  let qs = List.init S.max_queries (fun i -> start (string_of_int i)) in
  Alcotest.(check bool) "full" true (S.refusal t <> None);
  S.finish t ~cancel (List.hd qs);
  Alcotest.(check (list outcome))
    "no answer"
    [ Ok [ ("a", Ok "A"); ("b", Error "no answer within 2.0 s") ] ]
    !got;
  Alcotest.(check (option string)) "room again" None (S.refusal t)

(* Group_pause: a pause is the periodic work later than a merge timeout; what this member learns
   within two merge timeouts of running again (a view that went on without it) refuses casts for
   two merge timeouts at most, or until a view with others. *)
let pause () =
  let module P = G.Group_pause in
  let mt = Time.of_ms 2000 in
  let p = P.create ~merge_timeout:mt in
  let ms = Time.of_ms in
  P.tick p ~now:(ms 1000);
  P.tick p ~now:(ms 1500);
  Alcotest.(check bool) "on time: no pause" false (P.recently_resumed p ~now:(ms 1500));
  P.tick p ~now:(ms 3500);
  Alcotest.(check bool)
    "exactly a merge timeout late: no pause" false
    (P.recently_resumed p ~now:(ms 3500));
  P.tick p ~now:(ms 5600);
  Alcotest.(check bool) "later: a pause" true (P.recently_resumed p ~now:(ms 5600));
  Alcotest.(check bool) "two merge timeouts after" true (P.recently_resumed p ~now:(ms 9600));
  Alcotest.(check bool) "not after that" false (P.recently_resumed p ~now:(ms 9601));
  Alcotest.(check (option string)) "casts taken" None (P.refusal p ~now:(ms 6000));
  P.dead_view p ~now:(ms 6000) "view 3:a went on without this member";
  Alcotest.(check (option string))
    "casts refused" (Some "view 3:a went on without this member")
    (P.refusal p ~now:(ms 6000));
  P.installed p ~size:1;
  Alcotest.(check (option string))
    "still refused in a view of one" (Some "view 3:a went on without this member")
    (P.refusal p ~now:(ms 10000));
  Alcotest.(check (option string))
    "for two merge timeouts at most" None
    (P.refusal p ~now:(ms 10001));
  P.dead_view p ~now:(ms 11000) "again";
  P.installed p ~size:2;
  Alcotest.(check (option string))
    "taken again in a view with others" None
    (P.refusal p ~now:(ms 11000))

let () =
  Alcotest.run "features"
    [
      ("pause", [ Alcotest.test_case "pauses and a view gone on without this member" `Quick pause ]);
      ( "queue",
        [
          Alcotest.test_case "admission, bound and flow" `Quick admission;
          Alcotest.test_case "flush stops when not ready" `Quick flush_stops;
        ] );
      ( "primary",
        [
          Alcotest.test_case "pending until confirmed" `Quick primary;
          Alcotest.test_case "a pending view that ends was never primary" `Quick pending_ends;
          Alcotest.test_case "a minority view is told at once" `Quick minority;
          Alcotest.test_case "without the Primary layer" `Quick without_layer;
        ] );
      ( "status",
        [
          Alcotest.test_case "answers counted a second" `Quick status_answers;
          Alcotest.test_case "this member's document" `Quick status_mine;
          Alcotest.test_case "a query and its answers" `Quick status_query;
          Alcotest.test_case "a query's timeout, queries bounded" `Quick status_timeout;
        ] );
    ]
