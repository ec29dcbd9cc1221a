(* Dynamic votes (primary.mode=dynamic): the decision rule of Primary.decide_dynamic, as every
   member of a view computes it from every member's knowledge, and the knowledge it keeps. *)

open Consort
module P = Consort_group.Primary

let config ?(expected = 5) () =
  let params =
    Params.empty
    |> Params.set P.Param.mode (Params.String "dynamic")
    |> Params.set P.Param.expected (Params.Int expected)
  in
  match P.config params with Ok c -> c | Error e -> Alcotest.fail e

let c5 = config ()
let view ids = List.map (fun id -> (id, id)) ids
let session epoch ids = { P.epoch; members = List.map (fun id -> (id, 1)) ids }
let knows ?last ?(ambiguous = []) () = { P.last; ambiguous }

let decide ids ks =
  let q, s = P.decide_dynamic c5 ~members:(view ids) ks in
  (q.P.primary, s.P.epoch)

let check_decision msg want ids ks = Alcotest.(check (pair bool int)) msg want (decide ids ks)

(* No primary ever: every configured vote is needed (wait for all). *)
let first_primary () =
  let none = List.init 5 (fun _ -> P.no_knowledge) in
  check_decision "4 of 5, no primary yet" (false, 1) [ "a"; "b"; "c"; "d" ]
    (List.filteri (fun i _ -> i < 4) none);
  check_decision "all 5" (true, 1) [ "a"; "b"; "c"; "d"; "e" ] none

(* A primary of 5 shrinks to 3, then to 2 of those 3; the others are not primary. *)
let shrinks () =
  let l1 = session 1 [ "a"; "b"; "c"; "d"; "e" ] in
  let k1 = knows ~last:l1 () in
  check_decision "3 of the last 5" (true, 2) [ "a"; "b"; "c" ] [ k1; k1; k1 ];
  check_decision "2 of the last 5" (false, 2) [ "d"; "e" ] [ k1; k1 ];
  let l2 = session 2 [ "a"; "b"; "c" ] in
  let k2 = knows ~last:l2 () in
  check_decision "2 of the last 3" (true, 3) [ "a"; "b" ] [ k2; k2 ];
  (* c was cut off before l2 formed at it, d and e never knew: 1 of l2 with the two of l1. *)
  check_decision "1 of the last 3 beside stale members" (false, 3) [ "c"; "d"; "e" ] [ k2; k1; k1 ];
  check_decision "heal: everyone" (true, 3) [ "a"; "b"; "c"; "d"; "e" ] [ k2; k2; k2; k1; k1 ]

(* Exactly half: the half that holds the last primary's least member. *)
let tie_break () =
  let l = session 2 [ "a"; "b"; "c"; "d" ] in
  let k = knows ~last:l () in
  check_decision "a, b: half with the least" (true, 3) [ "a"; "b" ] [ k; k ];
  check_decision "c, d: half without it" (false, 3) [ "c"; "d" ] [ k; k ]

(* The case dynamic voting gets wrong without ambiguous sessions. The last primary was {a, b, c}
   (epoch 2); {a, b} attempted epoch 3; a heard b's attempt (formed: its last primary), b did not
   hear a's before the cut (ambiguous at b). a alone is primary: half of {a, b} with its least
   member. So {b, c}, a majority of {a, b, c}, must not be: b's ambiguous {a, b} binds it. *)
let ambiguous_binds () =
  let l2 = session 2 [ "a"; "b"; "c" ] and s3 = session 3 [ "a"; "b" ] in
  let ka = knows ~last:s3 () and kb = knows ~last:l2 ~ambiguous:[ s3 ] () in
  let kc = knows ~last:l2 () in
  check_decision "a alone: half of {a, b} with its least" (true, 4) [ "a" ] [ ka ];
  check_decision "b, c: a majority of {a, b, c}, bound by {a, b}" (false, 3) [ "b"; "c" ] [ kb; kc ];
  (* Once a, b, c are together again the ambiguity is resolved by the primary they form. *)
  check_decision "a, b, c together" (true, 4) [ "a"; "b"; "c" ] [ ka; kb; kc ];
  let q, _ = P.decide_dynamic c5 ~members:(view [ "b"; "c" ]) [ kb; kc ] in
  Alcotest.(check bool) "says what blocks it" true (q.P.blocking <> None)

(* An ambiguous session older than the last primary anyone knows binds nothing. *)
let stale_ambiguity () =
  let s2 = session 2 [ "a"; "b"; "c" ] and l3 = session 3 [ "a"; "d"; "e" ] in
  let kb = knows ~last:(session 1 [ "a"; "b"; "c"; "d"; "e" ]) ~ambiguous:[ s2 ] () in
  let kd = knows ~last:l3 () in
  check_decision "d, e with b: 2 of the last 3" (true, 4) [ "b"; "d"; "e" ] [ kb; kd; kd ];
  let learnt = P.learn kb [ kb; kd; kd ] in
  Alcotest.(check int)
    "learns the later primary" 3
    (match learnt.P.last with Some s -> s.P.epoch | None -> 0);
  Alcotest.(check int) "forgets the older ambiguity" 0 (List.length learnt.P.ambiguous)

(* Every member decides the same whatever the order of what it heard. *)
let same_everywhere () =
  let l2 = session 2 [ "a"; "b"; "c" ] and s3 = session 3 [ "a"; "b" ] in
  let ks = [ knows ~last:l2 ~ambiguous:[ s3 ] (); knows ~last:l2 (); P.no_knowledge ] in
  let ids = [ "b"; "c"; "f" ] in
  let a = decide ids ks and b = decide ids (List.rev ks) in
  Alcotest.(check (pair bool int)) "order of knowledge" a b

(* A member holding the most unresolved attempts blocks a view rather than forget one. *)
let bounded () =
  let l = session 1 [ "a"; "b"; "c" ] in
  let amb = List.init P.max_ambiguous (fun i -> session (2 + i) [ "a"; "b"; "c" ]) in
  check_decision "too many attempts" (false, 2) [ "a"; "b"; "c" ]
    [ knows ~last:l ~ambiguous:amb (); knows ~last:l (); knows ~last:l () ]

(* The least member of the last primary restarted as a new incarnation, which kept nothing: it
   is not counted as its old self, so the rest of the group is not primary without it; but a view
   that holds every configured vote is, since no other component holds any. *)
let restarted_least () =
  let l2 = session 2 [ "a"; "b" ] in
  let k = knows ~last:l2 () in
  check_decision "b and the new a, 1 of the 2 of {a, b} without its least" (false, 3)
    [ "a2"; "b"; "c"; "d" ] [ P.no_knowledge; k; k; k ];
  check_decision "every configured vote" (true, 3) [ "a2"; "b"; "c"; "d"; "e" ]
    [ P.no_knowledge; k; k; k; k ];
  let q, _ = P.decide_dynamic c5 ~members:(view [ "a2"; "b"; "c"; "d"; "e" ]) [ k ] in
  Alcotest.(check bool) "on the configured votes" true (q.P.basis = P.Configured)

(* {a, b, c, d, e} (the last primary, epoch 1) attempted epoch 2: formed at d and e, ambiguous at
   a, b, c; {a, b, c} then formed epoch 2 too. The attempt of the same epoch as the last primary
   stays with a, b and c (not older than it): {a, b} holds 2 of 3 of their last primary but 2 of
   5 of the attempt that d and e took as primary, and is not primary. *)
let same_epoch_ambiguity () =
  let l1 = session 1 [ "a"; "b"; "c"; "d"; "e" ] in
  let s2 = session 2 [ "a"; "b"; "c"; "d"; "e" ] and l2 = session 2 [ "a"; "b"; "c" ] in
  let before = knows ~last:l1 ~ambiguous:[ s2 ] () in
  let learnt = P.learn before [ knows ~last:l2 () ] in
  Alcotest.(check int)
    "learns the later primary" 2
    (match learnt.P.last with Some s -> s.P.epoch | None -> 0);
  Alcotest.(check int) "keeps the attempt of the same epoch" 1 (List.length learnt.P.ambiguous);
  check_decision "a, b: bound by the attempt" (false, 3) [ "a"; "b" ] [ learnt; learnt ]

let () =
  Alcotest.run "primary"
    [
      ( "dynamic votes",
        [
          Alcotest.test_case "the first primary needs every vote" `Quick first_primary;
          Alcotest.test_case "a primary shrinks step by step" `Quick shrinks;
          Alcotest.test_case "exactly half with the least member" `Quick tie_break;
          Alcotest.test_case "an ambiguous attempt binds the next view" `Quick ambiguous_binds;
          Alcotest.test_case "older ambiguity is forgotten" `Quick stale_ambiguity;
          Alcotest.test_case "the same decision at every member" `Quick same_everywhere;
          Alcotest.test_case "unresolved attempts are bounded" `Quick bounded;
          Alcotest.test_case "a restarted least member, every vote here" `Quick restarted_least;
          Alcotest.test_case "an attempt of the last primary's epoch binds" `Quick
            same_epoch_ambiguity;
        ] );
    ]
