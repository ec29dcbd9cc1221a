(* The extended virtual synchrony checker on small hand-made logs: a
   correct run holds, and each property is broken by the smallest run that
   breaks it. *)

module Log = Consort_spec.Log
module Evs = Consort_spec.Evs

let view me view members = Log.View { t = 0; me; view; members }
let cast me view seq = Log.Cast { t = 0; me; view; seq; len = 1; digest = "00" }

let del me view from seq =
  Log.Deliver { t = 0; me; view; from; kind = `Cast; seq; len = 1; digest = "00" }

let block me view = Log.Block { t = 0; me; view }
let trans me view next members = Log.Trans { t = 0; me; view; next = Some next; members }
let live me = Log.Live { t = 0; me; casts = 0 }
let abc = [ "a"; "b"; "c" ]

let holds name logs =
  match Evs.check logs with
  | Ok () -> ()
  | Error vs ->
      Alcotest.failf "%s: %s" name
        (String.concat "; " (List.map (Fmt.str "%a" Evs.pp_violation) vs))

let breaks name logs expect =
  match Evs.check logs with
  | Ok () -> Alcotest.failf "%s: not found" name
  | Error vs ->
      if not (List.exists expect vs) then
        Alcotest.failf "%s: other violations: %s" name
          (String.concat "; " (List.map (Fmt.str "%a" Evs.pp_violation) vs))

(* View 1:a of a, b, c splits: a and b go on into 2:a, c into 2:c. Member
   [me] delivers [regular] before its transitional view and [trans_part]
   after it. *)
let split me ?(regular = []) ?(trans_part = []) ?(t = None) () =
  let next, survivors = if me = "c" then ("2:c", [ "c" ]) else ("2:a", [ "a"; "b" ]) in
  let survivors = Option.value t ~default:survivors in
  let next_members = if me = "c" then [ "c" ] else [ "a"; "b" ] in
  ( me,
    [ view me "1:a" abc ]
    @ (if me = "a" then [ cast me "1:a" 1; cast me "1:a" 2 ] else [])
    @ List.map (fun (f, s) -> del me "1:a" f s) regular
    @ [ block me "1:a"; trans me "1:a" next survivors ]
    @ List.map (fun (f, s) -> del me "1:a" f s) trans_part
    @ [ view me next next_members; live me ] )

let correct () =
  (* a#1 was safe before the split: everyone delivered it, c included; a#2
     was not: a and b deliver it in their transitional view, c never. *)
  holds "a split"
    [
      split "a" ~regular:[ ("a", 1) ] ~trans_part:[ ("a", 2) ] ();
      split "b" ~trans_part:[ ("a", 1); ("a", 2) ] ();
      split "c" ~trans_part:[ ("a", 1) ] ();
    ];
  (* A member that crashed in the view need not deliver anything. *)
  holds "a crash"
    [
      split "a" ~regular:[ ("a", 1) ] ();
      split "b" ~regular:[ ("a", 1) ] ();
      ("c", [ view "c" "1:a" abc ]);
    ];
  (* The first view has no transitional view before it. *)
  holds "a first view" [ ("a", [ view "a" "1:a" [ "a" ]; live "a" ]) ]

let broken () =
  breaks "regular delivery that c never makes"
    [
      split "a" ~regular:[ ("a", 1); ("a", 2) ] ();
      split "b" ~trans_part:[ ("a", 1); ("a", 2) ] ();
      split "c" ~trans_part:[ ("a", 1) ] ();
    ]
    (function
      | Evs.Not_safe { absent = "c"; cast = { from = "a"; seq = 2 }; _ } -> true | _ -> false);
  breaks "transitional delivery that b never makes"
    [ split "a" ~trans_part:[ ("a", 2) ] (); split "b" (); split "c" () ]
    (function Evs.Not_safe_transitional { absent = "b"; _ } -> true | _ -> false);
  breaks "a transitional view that is the whole old view"
    [ split "a" ~t:(Some abc) (); split "b" (); split "c" () ]
    (function Evs.Wrong_members { member = "a"; expected = [ "a"; "b" ]; _ } -> true | _ -> false);
  breaks "no transitional view"
    [ ("a", [ view "a" "1:a" [ "a" ]; view "a" "2:a" [ "a"; "b" ]; live "a" ]) ]
    (function Evs.No_transitional { member = "a"; _ } -> true | _ -> false);
  breaks "a transitional view into another view"
    [
      ( "a",
        [
          view "a" "1:a" [ "a" ];
          trans "a" "1:a" "3:a" [ "a" ];
          view "a" "2:a" [ "a"; "b" ];
          live "a";
        ] );
    ]
    (function Evs.Misplaced { member = "a"; line = 2; _ } -> true | _ -> false);
  breaks "a cast after the transitional view"
    [
      ( "a",
        [
          view "a" "1:a" [ "a" ];
          trans "a" "1:a" "2:a" [ "a" ];
          cast "a" "1:a" 1;
          view "a" "2:a" [ "a"; "b" ];
          live "a";
        ] );
    ]
    (function Evs.Misplaced { member = "a"; line = 3; _ } -> true | _ -> false);
  breaks "a transitional view without its member"
    [
      ( "a",
        [
          view "a" "1:a" [ "a"; "b" ];
          trans "a" "1:a" "2:a" [ "b" ];
          view "a" "2:a" [ "a" ];
          live "a";
        ] );
    ]
    (function Evs.Misplaced { member = "a"; line = 2; _ } -> true | _ -> false)

(* A member that leaves: a transitional view of itself, its last
   deliveries (not known to the others), its exit. *)
let leave () =
  let leaver = Log.Trans { t = 0; me = "c"; view = "1:a"; next = None; members = [ "c" ] } in
  holds "a leave"
    [
      split "a" ~trans_part:[ ("a", 2) ] ();
      split "b" ~trans_part:[ ("a", 2) ] ();
      ( "c",
        [
          view "c" "1:a" abc;
          block "c" "1:a";
          leaver;
          del "c" "1:a" "a" 1;
          Log.Exit { t = 0; me = "c" };
        ] );
    ];
  breaks "a leave, then a view"
    [ ("c", [ view "c" "1:a" [ "c" ]; leaver; view "c" "2:c" [ "c" ]; live "c" ]) ]
    (function Evs.Misplaced { member = "c"; line = 2; _ } -> true | _ -> false)

(* The log line round-trips. *)
let line () =
  let e = trans "a" "1:a" "2:a" [ "a"; "b" ] in
  Alcotest.(check string)
    "line" {|{"ev":"trans","t":0,"me":"a","view":"1:a","next":"2:a","members":["a","b"]}|}
    (Log.to_line e);
  match Log.of_line (Log.to_line e) with
  | Ok e' when Log.equal e e' -> ()
  | _ -> Alcotest.fail "does not read back"

let () =
  Alcotest.run "evs"
    [
      ( "evs",
        [
          Alcotest.test_case "correct runs" `Quick correct;
          Alcotest.test_case "broken runs" `Quick broken;
          Alcotest.test_case "a leave" `Quick leave;
          Alcotest.test_case "log line" `Quick line;
        ] );
    ]
