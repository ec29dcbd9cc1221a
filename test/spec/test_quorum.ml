(* The primary component checker on small hand-made logs: a correct run
   holds, and each property is broken by the smallest run that breaks it.
   Members a, b, c, d, e have one vote each; 3 are needed. *)

module Log = Consort_spec.Log
module Quorum = Consort_spec.Quorum

let view me view members = Log.View { t = 0; me; view; members }
let q me view primary votes = Log.Quorum { t = 0; me; view; primary; votes; needed = 3 }
let cast me view seq = Log.Cast { t = 0; me; view; seq; len = 1; digest = "00" }

let del me view from seq =
  Log.Deliver { t = 0; me; view; from; kind = `Cast; seq; len = 1; digest = "00" }

let block me view = Log.Block { t = 0; me; view }
let live me = Log.Live { t = 0; me; casts = 0 }
let all5 = [ "a"; "b"; "c"; "d"; "e" ]
let check logs = Quorum.check ~live_quorum:true ~votes:(fun _ -> 1) ~needed:3 logs

let holds name logs =
  match check logs with
  | Ok () -> ()
  | Error vs ->
      Alcotest.failf "%s: %s" name
        (String.concat "; " (List.map (Fmt.str "%a" Quorum.pp_violation) vs))

let breaks name logs expect =
  match check logs with
  | Ok () -> Alcotest.failf "%s: not found" name
  | Error vs ->
      if not (List.exists expect vs) then
        Alcotest.failf "%s: other violations: %s" name
          (String.concat "; " (List.map (Fmt.str "%a" Quorum.pp_violation) vs))

(* View 1:a of all five (primary), then a split: a, b, c in 2:a
   (primary), d, e in 2:d (not); then all five again in 3:a. *)
let run ?(side = fun _ -> []) ?(second = "2:a") ?(d_primary = false) () =
  List.map
    (fun m ->
      let big = List.mem m [ "a"; "b"; "c" ] in
      let v2, m2 = if big then (second, [ "a"; "b"; "c" ]) else ("2:d", [ "d"; "e" ]) in
      ( m,
        [ view m "1:a" all5; q m "1:a" true 5 ]
        @ (if m = "a" then [ cast m "1:a" 1 ] else [])
        @ [
            del m "1:a" "a" 1;
            block m "1:a";
            view m v2 m2;
            q m v2 (big || d_primary) (List.length m2);
          ]
        @ side m
        @ [ block m v2; view m "3:a" all5; q m "3:a" true 5; live m ] ))
    all5

let correct () =
  holds "a split, the majority primary" (run ());
  holds "casts only on the primary side"
    (run ~side:(fun m -> if m = "b" then [ cast m "2:a" 1 ] else []) ())

let broken () =
  breaks "a cast on the minority side"
    (run ~side:(fun m -> if m = "d" then [ cast m "2:d" 1 ] else []) ())
    (function Quorum.Cast_outside { member = "d"; view = "2:d"; _ } -> true | _ -> false);
  breaks "a minority that says it is primary" (run ~d_primary:true ()) (function
    | Quorum.Wrong_decision { view = "2:d"; expected_votes = 2; _ } -> true
    | _ -> false);
  breaks "a decision missing"
    [ ("a", [ view "a" "1:a" [ "a" ]; live "a" ]) ]
    (function Quorum.No_decision { member = "a"; line = 1; _ } -> true | _ -> false);
  breaks "a decision on another view"
    [ ("a", [ view "a" "1:a" [ "a" ]; q "a" "0:a" false 1; live "a" ]) ]
    (function Quorum.Misplaced { member = "a"; line = 2; _ } -> true | _ -> false);
  (* Two primaries with no member in common: a, b, c in 2:a and c, d, e
     in 2:c, where c's log is missing (the checker sees no carrier). *)
  let lone m v members = (m, [ view m v members; q m v true 3; live m ]) in
  breaks "two primaries at once"
    [
      lone "a" "2:a" [ "a"; "b"; "c" ];
      lone "b" "2:a" [ "a"; "b"; "c" ];
      lone "d" "3:c" [ "c"; "d"; "e" ];
      lone "e" "3:c" [ "c"; "d"; "e" ];
    ]
    (function Quorum.Concurrent _ -> true | _ -> false);
  breaks "two primaries at the same logical time"
    [ lone "a" "2:a" [ "a"; "b"; "c" ]; lone "b" "2:b" [ "a"; "b"; "c" ] ]
    (function Quorum.Same_time _ -> true | _ -> false);
  (* a delivered a#1 before the flush of 1:a; the next primary 2:a has
     members of 1:a, none of which delivered it. *)
  let m x dels =
    ( x,
      [ view x "1:a" [ "a"; "b"; "c" ]; q x "1:a" true 3 ]
      @ (if x = "a" then [ cast x "1:a" 1 ] else [])
      @ dels
      @ [ block x "1:a"; view x "2:a" [ "b"; "c"; "d" ]; q x "2:a" true 3; live x ] )
  in
  breaks "what the primary served not carried"
    [
      ( "a",
        [
          view "a" "1:a" [ "a"; "b"; "c" ];
          q "a" "1:a" true 3;
          cast "a" "1:a" 1;
          del "a" "1:a" "a" 1;
        ] );
      m "b" [];
      m "c" [];
      ("d", [ view "d" "2:a" [ "b"; "c"; "d" ]; q "d" "2:a" true 3; live "d" ]);
    ]
    (function
      | Quorum.Not_carried { view = "1:a"; next = "2:a"; from = "a"; seq = 1 } -> true | _ -> false);
  (* a names b in its primary view 2:a, but b went on elsewhere. *)
  breaks "a primary view one of whose members never installed it"
    [
      ("a", [ view "a" "2:a" [ "a"; "b"; "c" ]; q "a" "2:a" true 3; live "a" ]);
      ("b", [ view "b" "2:b" [ "b" ]; q "b" "2:b" false 1; live "b" ]);
      ("c", [ view "c" "2:a" [ "a"; "b"; "c" ]; q "c" "2:a" true 3; live "c" ]);
    ]
    (function Quorum.Unconfirmed { member = "a"; absent = "b"; _ } -> true | _ -> false);
  breaks "a cast before the decision"
    [ ("a", [ view "a" "1:a" [ "a"; "b"; "c" ]; cast "a" "1:a" 1; q "a" "1:a" true 3; live "a" ]) ]
    (function Quorum.Cast_outside { member = "a"; line = 2; _ } -> true | _ -> false);
  breaks "alive at the end outside the primary"
    [ ("a", [ view "a" "1:a" [ "a" ]; q "a" "1:a" false 1; live "a" ]) ]
    (function Quorum.Not_rejoined { member = "a"; _ } -> true | _ -> false)

let line () =
  let e = q "a" "1:a" true 5 in
  Alcotest.(check string)
    "line" {|{"ev":"quorum","t":0,"me":"a","view":"1:a","primary":true,"votes":5,"needed":3}|}
    (Log.to_line e);
  match Log.of_line (Log.to_line e) with
  | Ok e' when Log.equal e e' -> ()
  | _ -> Alcotest.fail "does not read back"

let () =
  Alcotest.run "quorum"
    [
      ( "quorum",
        [
          Alcotest.test_case "correct runs" `Quick correct;
          Alcotest.test_case "broken runs" `Quick broken;
          Alcotest.test_case "log line" `Quick line;
        ] );
    ]
