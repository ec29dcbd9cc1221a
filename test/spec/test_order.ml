(* The ordering checkers on small hand-made logs: each property holds on a
   correct run and each is broken by the smallest run that breaks it. *)

module Log = Consort_spec.Log
module Order = Consort_spec.Order

let view me view members = Log.View { t = 0; me; view; members }
let cast me view seq = Log.Cast { t = 0; me; view; seq; len = 1; digest = "00" }

let del me view from seq =
  Log.Deliver { t = 0; me; view; from; kind = `Cast; seq; len = 1; digest = "00" }

let block me view = Log.Block { t = 0; me; view }
let live me = Log.Live { t = 0; me; casts = 0 }
let abc = [ "a"; "b"; "c" ]

let holds name check logs =
  match check logs with
  | Ok () -> ()
  | Error vs ->
      Alcotest.failf "%s: %s" name
        (String.concat "; " (List.map (Fmt.str "%a" Order.pp_violation) vs))

let breaks name check logs expect =
  match check logs with
  | Ok () -> Alcotest.failf "%s: not found" name
  | Error vs ->
      if not (List.exists expect vs) then
        Alcotest.failf "%s: other violations: %s" name
          (String.concat "; " (List.map (Fmt.str "%a" Order.pp_violation) vs))

(* a and b cast; every member delivers [order] in view 1:a. *)
let member me ?(own = []) ?(next = true) ?(blocked_after = max_int) order =
  let dels = List.mapi (fun i (f, s) -> (i, del me "1:a" f s)) order in
  let dels =
    List.concat_map (fun (i, d) -> if i = blocked_after then [ block me "1:a"; d ] else [ d ]) dels
  in
  ( me,
    (view me "1:a" abc :: List.map (cast me "1:a") own)
    @ dels
    @ if next then [ view me "2:a" abc; live me ] else [] )

let total_ok () =
  let o = [ ("a", 1); ("b", 1); ("a", 2) ] in
  holds "same sequence" Order.check_total
    [ member "a" ~own:[ 1; 2 ] o; member "b" ~own:[ 1 ] o; member "c" o ];
  (* A member that crashed after a prefix. *)
  holds "a prefix" Order.check_total
    [
      member "a" ~own:[ 1; 2 ] o;
      member "b" ~own:[ 1 ] o;
      member "c" ~next:false [ ("a", 1); ("b", 1) ];
    ]

let total_broken () =
  breaks "two members going on together, two sequences" Order.check_total
    [
      member "a" ~own:[ 1 ] [ ("a", 1); ("b", 1) ];
      member "b" ~own:[ 1 ] [ ("b", 1); ("a", 1) ];
      member "c" [ ("a", 1); ("b", 1) ];
    ]
    (function Order.Not_same_sequence { index = 0; _ } -> true | _ -> false);
  (* Apart at the end (different next views), but before the flush they
     disagreed: no one order. *)
  let apart me next order =
    ( me,
      [ view me "1:a" abc ]
      @ List.map (fun (f, s) -> del me "1:a" f s) order
      @ [ block me "1:a"; view me next [ me ] ] )
  in
  breaks "before the flush, two orders" Order.check_total
    [
      apart "a" "2:a" [ ("a", 1); ("b", 1) ];
      apart "b" "2:b" [ ("b", 1); ("a", 1) ];
      ("c", [ view "c" "1:a" abc ]);
    ]
    (function Order.No_total_order _ -> true | _ -> false);
  (* The same, but only after their blocks: allowed (a partition). *)
  let apart_late me next order =
    ( me,
      [ view me "1:a" abc; block me "1:a" ]
      @ List.map (fun (f, s) -> del me "1:a" f s) order
      @ [ view me next [ me ] ] )
  in
  holds "after the flush, apart" Order.check_total
    [
      apart_late "a" "2:a" [ ("a", 1); ("b", 1) ];
      apart_late "b" "2:b" [ ("b", 1); ("a", 1) ];
      ("c", [ view "c" "1:a" abc ]);
    ];
  (* A cycle through three members that never deliver the same pair. *)
  breaks "a cycle of three" Order.check_total
    [
      ("a", [ view "a" "1:a" abc; del "a" "1:a" "a" 1; del "a" "1:a" "b" 1 ]);
      ("b", [ view "b" "1:a" abc; del "b" "1:a" "b" 1; del "b" "1:a" "c" 1 ]);
      ("c", [ view "c" "1:a" abc; del "c" "1:a" "c" 1; del "c" "1:a" "a" 1 ]);
    ]
    (function Order.No_total_order { cycle; _ } -> List.length cycle = 4 | _ -> false)

let causal () =
  (* b delivers a#1, then casts b#1: c must deliver a#1 first. *)
  let b =
    ("b", [ view "b" "1:a" abc; del "b" "1:a" "a" 1; cast "b" "1:a" 1; del "b" "1:a" "b" 1 ])
  in
  let a =
    ("a", [ view "a" "1:a" abc; cast "a" "1:a" 1; del "a" "1:a" "a" 1; del "a" "1:a" "b" 1 ])
  in
  holds "causal" Order.check_causal
    [ a; b; ("c", [ view "c" "1:a" abc; del "c" "1:a" "a" 1; del "c" "1:a" "b" 1 ]) ];
  breaks "b#1 before a#1" Order.check_causal
    [ a; b; ("c", [ view "c" "1:a" abc; del "c" "1:a" "b" 1; del "c" "1:a" "a" 1 ]) ]
    (function
      | Order.Not_causal { member = "c"; before = { from = "a"; seq = 1 }; _ } -> true | _ -> false);
  (* Transitively: c#1 follows b#1, which follows a#1 (c itself skipped
     a#1, wrongly: the past of b#1 still counts). *)
  let c = ("c", [ view "c" "1:a" abc; del "c" "1:a" "b" 1; cast "c" "1:a" 1 ]) in
  let b' =
    ("b", [ view "b" "1:a" abc; del "b" "1:a" "a" 1; cast "b" "1:a" 1; del "b" "1:a" "b" 1 ])
  in
  let x =
    ( "x",
      [ view "x" "1:a" ("x" :: abc); del "x" "1:a" "b" 1; del "x" "1:a" "c" 1; del "x" "1:a" "a" 1 ]
    )
  in
  breaks "transitive" Order.check_causal
    [ ("a", [ view "a" "1:a" abc; cast "a" "1:a" 1 ]); b'; c; x ]
    (function
      | Order.Not_causal
          { member = "x"; cast = { from = "c"; _ }; before = { from = "a"; seq = 1 }; _ } ->
          true
      | _ -> false)

let safe () =
  let m me dels = (me, [ view me "1:a" abc ] @ dels @ [ view me "2:a" abc; live me ]) in
  holds "everyone delivers" Order.check_safe
    [
      m "a" [ cast "a" "1:a" 1; del "a" "1:a" "a" 1 ];
      m "b" [ del "b" "1:a" "a" 1 ];
      m "c" [ del "c" "1:a" "a" 1 ];
    ];
  breaks "c goes on without it" Order.check_safe
    [ m "a" [ cast "a" "1:a" 1; del "a" "1:a" "a" 1 ]; m "b" [ del "b" "1:a" "a" 1 ]; m "c" [] ]
    (function Order.Not_safe { absent = "c"; _ } -> true | _ -> false);
  (* c crashed (its log ends in the view): nothing owed to it. *)
  holds "c crashed" Order.check_safe
    [
      m "a" [ cast "a" "1:a" 1; del "a" "1:a" "a" 1 ];
      m "b" [ del "b" "1:a" "a" 1 ];
      ("c", [ view "c" "1:a" abc ]);
    ];
  (* Delivered after the block: the flush, not the regular view. *)
  holds "after the block" Order.check_safe
    [
      m "a" [ cast "a" "1:a" 1; block "a" "1:a"; del "a" "1:a" "a" 1 ];
      m "b" [ block "b" "1:a" ];
      m "c" [];
    ]

let () =
  Alcotest.run "order"
    [
      ( "total",
        [
          Alcotest.test_case "holds" `Quick total_ok;
          Alcotest.test_case "broken" `Quick total_broken;
        ] );
      ("causal", [ Alcotest.test_case "causal" `Quick causal ]);
      ("safe", [ Alcotest.test_case "safe" `Quick safe ]);
    ]
