(* The member log format and the virtual synchrony specification:
   hand-written logs for each rule, random correct histories from a
   simulated group, and mutations of them. *)

open Consort_spec
module V = Vsync

let seed = 0x5eed

let qtest ?(count = 200) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let viol = Alcotest.testable V.pp_violation ( = )
let event = Alcotest.testable Log.pp Log.equal

let parse text =
  String.split_on_char '\n' text
  |> List.filter (fun l -> String.trim l <> "")
  |> List.map (fun l ->
         match Log.of_line l with Ok e -> e | Error e -> Alcotest.failf "%s: %a" l Log.pp_error e)

let check_ok ?require_merge ?quiescent name logs =
  match V.check ?require_merge ?quiescent logs with
  | Ok () -> ()
  | Error l -> Alcotest.failf "%s: %a" name Fmt.(list ~sep:cut V.pp_violation) l

let check_err ?require_merge ?quiescent name logs expected =
  match V.check ?require_merge ?quiescent logs with
  | Ok () -> Alcotest.failf "%s: accepted" name
  | Error l -> Alcotest.(check (list viol)) name expected l

(* Events, with payloads of length 1 unless told. *)
(* Events at time 0; a message's digest is its number in hex unless told. *)
let dg seq = Printf.sprintf "%016x" seq
let view me view members = Log.View { t = 0; me; view; members }

let cast ?(len = 1) ?digest me view seq =
  Log.Cast { t = 0; me; view; seq; len; digest = Option.value digest ~default:(dg seq) }

let send ?(len = 1) ?digest me view dst seq =
  Log.Send { t = 0; me; view; dst; seq; len; digest = Option.value digest ~default:(dg seq) }

let dc ?(len = 1) ?digest me view from seq =
  Log.Deliver
    {
      t = 0;
      me;
      view;
      from;
      kind = `Cast;
      seq;
      len;
      digest = Option.value digest ~default:(dg seq);
    }

let ds ?(len = 1) ?digest me view from seq =
  Log.Deliver
    {
      t = 0;
      me;
      view;
      from;
      kind = `Send;
      seq;
      len;
      digest = Option.value digest ~default:(dg seq);
    }

let block me view = Log.Block { t = 0; me; view }
let exit me = Log.Exit { t = 0; me }
let live me casts = Log.Live { t = 0; me; casts }

let refused ?(kind = `Cast) ?dst me view seq =
  Log.Refused
    { t = 0; me; view; kind; dst; seq; len = 1; digest = dg seq; reason = "flow control full" }

let lost ?(kind = `Cast) me seq = Log.Lost { t = 0; me; kind; seq; reason = "sender crashed" }
let m1 = 1
let m2 = 2
let m3 = 3

(* A run of four members. In view 1:a = {a, b, c}, a casts a1 and sends
   5e to c, b casts b1, c casts c1; c crashes having delivered a1, c1 and
   5e only. d joins: view 2:a = {a, b, d}; a, b and d cast; b leaves after
   delivering them all; view 3:a = {a, d}, where a casts a3. *)
let good_text =
  [
    ( "a",
      {|
{"ev":"view","t":0,"me":"a","view":"1:a","members":["a","b","c"]}
{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":5,"digest":"a1a1a1a1a1a1a1a1"}
{"ev":"deliver","t":0,"me":"a","view":"1:a","from":"a","kind":"cast","seq":1,"len":5,"digest":"a1a1a1a1a1a1a1a1"}
{"ev":"send","t":0,"me":"a","view":"1:a","to":"c","seq":2,"len":3,"digest":"5e5e5e5e5e5e5e5e"}
{"ev":"deliver","t":0,"me":"a","view":"1:a","from":"b","kind":"cast","seq":1,"len":7,"digest":"b1b1b1b1b1b1b1b1"}
{"ev":"view","t":0,"me":"a","view":"2:a","members":["a","b","d"]}
{"ev":"cast","t":0,"me":"a","view":"2:a","seq":3,"len":5,"digest":"a2a2a2a2a2a2a2a2"}
{"ev":"deliver","t":0,"me":"a","view":"2:a","from":"d","kind":"cast","seq":1,"len":4,"digest":"d1d1d1d1d1d1d1d1"}
{"ev":"deliver","t":0,"me":"a","view":"2:a","from":"a","kind":"cast","seq":3,"len":5,"digest":"a2a2a2a2a2a2a2a2"}
{"ev":"deliver","t":0,"me":"a","view":"2:a","from":"b","kind":"cast","seq":2,"len":7,"digest":"b2b2b2b2b2b2b2b2"}
{"ev":"view","t":0,"me":"a","view":"3:a","members":["a","d"]}
{"ev":"cast","t":0,"me":"a","view":"3:a","seq":4,"len":5,"digest":"a3a3a3a3a3a3a3a3"}
{"ev":"deliver","t":0,"me":"a","view":"3:a","from":"a","kind":"cast","seq":4,"len":5,"digest":"a3a3a3a3a3a3a3a3"}
|}
    );
    ( "b",
      {|
{"ev":"view","t":0,"me":"b","view":"1:a","members":["a","b","c"]}
{"ev":"deliver","t":0,"me":"b","view":"1:a","from":"a","kind":"cast","seq":1,"len":5,"digest":"a1a1a1a1a1a1a1a1"}
{"ev":"cast","t":0,"me":"b","view":"1:a","seq":1,"len":7,"digest":"b1b1b1b1b1b1b1b1"}
{"ev":"deliver","t":0,"me":"b","view":"1:a","from":"b","kind":"cast","seq":1,"len":7,"digest":"b1b1b1b1b1b1b1b1"}
{"ev":"view","t":0,"me":"b","view":"2:a","members":["a","b","d"]}
{"ev":"cast","t":0,"me":"b","view":"2:a","seq":2,"len":7,"digest":"b2b2b2b2b2b2b2b2"}
{"ev":"deliver","t":0,"me":"b","view":"2:a","from":"b","kind":"cast","seq":2,"len":7,"digest":"b2b2b2b2b2b2b2b2"}
{"ev":"deliver","t":0,"me":"b","view":"2:a","from":"a","kind":"cast","seq":3,"len":5,"digest":"a2a2a2a2a2a2a2a2"}
{"ev":"deliver","t":0,"me":"b","view":"2:a","from":"d","kind":"cast","seq":1,"len":4,"digest":"d1d1d1d1d1d1d1d1"}
{"ev":"exit","t":0,"me":"b"}
|}
    );
    ( "c",
      {|
{"ev":"view","t":0,"me":"c","view":"1:a","members":["a","b","c"]}
{"ev":"cast","t":0,"me":"c","view":"1:a","seq":1,"len":2,"digest":"c1c1c1c1c1c1c1c1"}
{"ev":"deliver","t":0,"me":"c","view":"1:a","from":"a","kind":"cast","seq":1,"len":5,"digest":"a1a1a1a1a1a1a1a1"}
{"ev":"deliver","t":0,"me":"c","view":"1:a","from":"c","kind":"cast","seq":1,"len":2,"digest":"c1c1c1c1c1c1c1c1"}
{"ev":"deliver","t":0,"me":"c","view":"1:a","from":"a","kind":"send","seq":2,"len":3,"digest":"5e5e5e5e5e5e5e5e"}
|}
    );
    ( "d",
      {|
{"ev":"view","t":0,"me":"d","view":"2:a","members":["a","b","d"]}
{"ev":"cast","t":0,"me":"d","view":"2:a","seq":1,"len":4,"digest":"d1d1d1d1d1d1d1d1"}
{"ev":"deliver","t":0,"me":"d","view":"2:a","from":"d","kind":"cast","seq":1,"len":4,"digest":"d1d1d1d1d1d1d1d1"}
{"ev":"deliver","t":0,"me":"d","view":"2:a","from":"a","kind":"cast","seq":3,"len":5,"digest":"a2a2a2a2a2a2a2a2"}
{"ev":"deliver","t":0,"me":"d","view":"2:a","from":"b","kind":"cast","seq":2,"len":7,"digest":"b2b2b2b2b2b2b2b2"}
{"ev":"view","t":0,"me":"d","view":"3:a","members":["a","d"]}
{"ev":"deliver","t":0,"me":"d","view":"3:a","from":"a","kind":"cast","seq":4,"len":5,"digest":"a3a3a3a3a3a3a3a3"}
|}
    );
  ]

let good () = List.map (fun (id, text) -> (id, parse text)) good_text

(* [edit id f logs] applies [f] to the events of [id]. *)
let edit id f logs = List.map (fun (i, es) -> if i = id then (i, f es) else (i, es)) logs
let remove_nth n l = List.filteri (fun i _ -> i <> n) l

let correct_runs () =
  check_ok "good run" (good ());
  check_ok ~quiescent:true ~require_merge:true "good run, quiescent and merged" (good ());
  check_ok "no logs" [];
  check_ok "empty log" [ ("a", []) ];
  check_ok "one member alone" ~quiescent:true
    [ ("a", [ view "a" "0:a" [ "a" ]; cast "a" "0:a" m1; dc "a" "0:a" "a" m1; exit "a" ]) ];
  check_ok "casts and sends are not ordered with each other"
    [
      ( "a",
        [
          view "a" "1:a" [ "a"; "b" ]; send "a" "1:a" "b" m1; cast "a" "1:a" m2; dc "a" "1:a" "a" m2;
        ] );
      ("b", [ view "b" "1:a" [ "a"; "b" ]; dc "b" "1:a" "a" m2; ds "b" "1:a" "a" m1 ]);
    ];
  check_ok "view ids: LTIME may have leading zeros and COORD any characters"
    [ ("a", [ view "a" "01:x:y" [ "a" ]; view "a" "2:\"q\"" [ "a" ] ]) ]

let views () =
  check_err "membership disagrees"
    [ ("a", [ view "a" "1:a" [ "a"; "b" ] ]); ("b", [ view "b" "1:a" [ "b"; "a" ] ]) ]
    [
      V.Membership_disagrees
        {
          member = "b";
          line = 1;
          view = "1:a";
          members = [ "b"; "a" ];
          other = "a";
          other_members = [ "a"; "b" ];
        };
    ];
  check_err "not in its own view"
    [ ("a", [ view "a" "1:b" [ "b" ] ]) ]
    [ V.Not_in_own_view { member = "a"; line = 1; view = "1:b"; members = [ "b" ] } ];
  check_err "installed twice"
    [ ("a", [ view "a" "1:a" [ "a" ]; view "a" "2:a" [ "a" ]; view "a" "1:a" [ "a" ] ]) ]
    [ V.Reinstalled { member = "a"; line = 3; view = "1:a"; first = 1 } ];
  check_err "twice in a row"
    [ ("a", [ view "a" "1:a" [ "a" ]; view "a" "1:a" [ "a" ] ]) ]
    [ V.Reinstalled { member = "a"; line = 2; view = "1:a"; first = 1 } ];
  check_err "LTIME decreasing, then equal"
    [
      ( "a",
        [
          view "a" "5:a" [ "a" ];
          view "a" "4:b" [ "a" ];
          view "a" "5:b" [ "a" ];
          view "a" "6:a" [ "a" ];
        ] );
    ]
    [
      V.Not_increasing { member = "a"; line = 2; view = "4:b"; previous = "5:a" };
      V.Not_increasing { member = "a"; line = 3; view = "5:b"; previous = "5:a" };
    ];
  List.iter
    (fun vid ->
      check_err ("bad view id " ^ vid)
        [ ("a", [ view "a" vid [ "a" ] ]) ]
        [ V.Bad_view_id { member = "a"; line = 1; view = vid } ])
    [ "view1"; ":a"; "1:"; "x:a"; "-1:a"; " 1:a"; "1234567890123456789:a" ];
  check_err "member listed twice"
    [ ("a", [ view "a" "1:a" [ "a"; "b"; "a" ] ]) ]
    [ V.Repeated_member { member = "a"; line = 1; view = "1:a"; id = "a" } ]

let structure () =
  check_err "event in another view than the current one"
    [
      ( "a",
        [ view "a" "1:a" [ "a" ]; view "a" "2:a" [ "a" ]; cast "a" "1:a" m1; dc "a" "2:a" "a" m1 ]
      );
    ]
    [ V.Not_current_view { member = "a"; line = 3; view = "1:a"; current = "2:a" } ];
  check_err "message before any view"
    [ ("a", [ cast "a" "1:a" m1; view "a" "1:a" [ "a" ] ]) ]
    [ V.No_view { member = "a"; line = 1 } ];
  check_err "event after exit"
    [ ("a", [ view "a" "1:a" [ "a" ]; exit "a"; cast "a" "1:a" m1; exit "a" ]) ]
    [ V.After_exit { member = "a"; line = 3 }; V.After_exit { member = "a"; line = 4 } ];
  check_err "event of another member"
    [ ("a", [ view "a" "1:a" [ "a" ]; exit "b" ]) ]
    [ V.Foreign_event { member = "a"; line = 2; me = "b" } ];
  check_err "two logs of one member"
    [ ("a", [ view "a" "1:a" [ "a" ] ]); ("a", [ view "a" "1:b" [ "b" ] ]) ]
    [ V.Duplicate_log { member = "a" } ]

(* Three members in 1:x; c crashes, a and b go on in 2:x. *)
let three ?(a = []) ?(b = []) ?(c = []) ?(a2 = []) ?(b2 = []) () =
  let v1 = [ "a"; "b"; "c" ] and v2 = [ "a"; "b" ] in
  [
    ("a", (view "a" "1:x" v1 :: a) @ (view "a" "2:x" v2 :: a2));
    ("b", (view "b" "1:x" v1 :: b) @ (view "b" "2:x" v2 :: b2));
    ("c", view "c" "1:x" v1 :: c);
  ]

let synchrony () =
  check_ok "crashed sender, cast delivered by all survivors or by none"
    (three
       ~c:[ cast "c" "1:x" m1; cast "c" "1:x" m2 ]
       ~a:[ dc "a" "1:x" "c" m1 ]
       ~b:[ dc "b" "1:x" "c" m1 ]
       ());
  check_err "crashed sender, cast delivered by one survivor only"
    (three ~c:[ cast "c" "1:x" m1 ] ~a:[ dc "a" "1:x" "c" m1 ] ())
    [
      V.Not_synchronous
        { view = "1:x"; next = "2:x"; from = "c"; seq = m1; delivered = [ "a" ]; missing = [ "b" ] };
    ];
  check_err "survivor's cast delivered by itself only"
    (three ~a:[ cast "a" "1:x" m1; dc "a" "1:x" "a" m1 ] ())
    [
      V.Not_synchronous
        { view = "1:x"; next = "2:x"; from = "a"; seq = m1; delivered = [ "a" ]; missing = [ "b" ] };
    ];
  check_err "survivor's cast delivered by nobody staying"
    (three ~a:[ cast "a" "1:x" m1 ] ~c:[ dc "c" "1:x" "a" m1 ] ())
    [
      V.Not_delivered
        { view = "1:x"; next = Some "2:x"; from = "a"; seq = m1; missing = [ "a"; "b" ] };
    ];
  check_err "send to a member staying with the sender, not delivered"
    (three ~a:[ send "a" "1:x" "b" m1; send "a" "1:x" "c" m2 ] ())
    [ V.Not_delivered { view = "1:x"; next = Some "2:x"; from = "a"; seq = m1; missing = [ "b" ] } ];
  check_ok "members going to different views need not agree"
    [
      ( "a",
        [
          view "a" "1:x" [ "a"; "b" ];
          cast "a" "1:x" m1;
          dc "a" "1:x" "a" m1;
          view "a" "2:a" [ "a" ];
        ] );
      ("b", [ view "b" "1:x" [ "a"; "b" ]; view "b" "2:b" [ "b" ] ]);
    ];
  (* Only the last view is open: without quiescence nothing is required. *)
  let open_end =
    [
      ( "a",
        [
          view "a" "1:x" [ "a"; "b" ]; cast "a" "1:x" m1; dc "a" "1:x" "a" m1; send "a" "1:x" "b" m2;
        ] );
      ("b", [ view "b" "1:x" [ "a"; "b" ] ]);
    ]
  in
  check_ok "last view, not quiescent" open_end;
  check_err ~quiescent:true "last view, quiescent" open_end
    [
      V.Not_delivered { view = "1:x"; next = None; from = "a"; seq = m1; missing = [ "b" ] };
      V.Not_delivered { view = "1:x"; next = None; from = "a"; seq = m2; missing = [ "b" ] };
    ];
  check_ok ~quiescent:true "crashed and left members are exempt in the last view"
    (three
       ~c:[ cast "c" "1:x" m1 ]
       ~a:[ cast "a" "1:x" m2; dc "a" "1:x" "a" m2 ]
       ~b:[ dc "b" "1:x" "a" m2 ]
       ~b2:[ cast "b" "2:x" m3; exit "b" ]
       ())

let same_view () =
  check_err "delivered in the next view"
    (three ~a:[ cast "a" "1:x" m1; dc "a" "1:x" "a" m1 ] ~b2:[ dc "b" "2:x" "a" m1 ] ())
    [
      V.Wrong_view { member = "b"; line = 3; view = "2:x"; from = "a"; seq = m1; sent = "1:x" };
      V.Not_synchronous
        { view = "1:x"; next = "2:x"; from = "a"; seq = m1; delivered = [ "a" ]; missing = [ "b" ] };
    ];
  check_err "from outside the view, sent in another"
    [
      ("a", [ view "a" "1:a" [ "a" ]; cast "a" "1:a" m1 ]);
      ("b", [ view "b" "1:b" [ "b" ]; dc "b" "1:b" "a" m1 ]);
    ]
    [
      V.Outsider { member = "b"; line = 2; view = "1:b"; from = "a"; seq = m1 };
      V.Wrong_view { member = "b"; line = 2; view = "1:b"; from = "a"; seq = m1; sent = "1:a" };
    ]

let two ?(a = []) ?(b = []) () =
  [ ("a", view "a" "1:x" [ "a"; "b" ] :: a); ("b", view "b" "1:x" [ "a"; "b" ] :: b) ]

let fifo () =
  check_err "casts reordered"
    (two
       ~a:[ cast "a" "1:x" m1; cast "a" "1:x" m2 ]
       ~b:[ dc "b" "1:x" "a" m2; dc "b" "1:x" "a" m1 ]
       ())
    [ V.Out_of_order { member = "b"; line = 3; view = "1:x"; from = "a"; seq = m1; after = m2 } ];
  check_err "sends reordered"
    (two
       ~a:[ send "a" "1:x" "b" m1; send "a" "1:x" "b" m2 ]
       ~b:[ ds "b" "1:x" "a" m2; ds "b" "1:x" "a" m1 ]
       ())
    [ V.Out_of_order { member = "b"; line = 3; view = "1:x"; from = "a"; seq = m1; after = m2 } ];
  check_err "duplicate"
    (two ~a:[ cast "a" "1:x" m1 ] ~b:[ dc "b" "1:x" "a" m1; dc "b" "1:x" "a" m1 ] ())
    [ V.Duplicate { member = "b"; line = 3; from = "a"; seq = m1; first = 2 } ];
  check_err "sender used a message number twice"
    (two ~a:[ cast "a" "1:x" m1; send "a" "1:x" "b" m1 ] ~b:[ dc "b" "1:x" "a" m1 ] ())
    [ V.Duplicate_id { member = "a"; line = 3; seq = m1; first = 2 } ]

let creation () =
  check_err "never sent"
    (two ~b:[ dc "b" "1:x" "a" m3 ] ())
    [ V.Not_sent { member = "b"; line = 2; view = "1:x"; from = "a"; seq = m3 } ];
  check_err "sender's log missing"
    [
      ("b", [ view "b" "1:x" [ "a"; "b" ]; dc "b" "1:x" "a" m1; dc "b" "1:x" "a" m2 ]);
      ("c", [ view "c" "1:c" [ "c" ]; dc "c" "1:c" "z" m1 ]);
    ]
    [
      V.Outsider { member = "c"; line = 2; view = "1:c"; from = "z"; seq = m1 };
      V.Sender_log_missing { from = "a"; member = "b"; line = 2; seq = m1; count = 2 };
      V.Sender_log_missing { from = "z"; member = "c"; line = 2; seq = m1; count = 1 };
    ];
  check_err "own message delivered before it was cast"
    [ ("a", [ view "a" "1:a" [ "a" ]; dc "a" "1:a" "a" m1; cast "a" "1:a" m1 ]) ]
    [ V.Delivered_before_sent { member = "a"; line = 2; seq = m1; sent = 3 } ];
  check_err "cast delivered as a send, send as a cast"
    (two
       ~a:[ cast "a" "1:x" m1; send "a" "1:x" "b" m2; dc "a" "1:x" "a" m1 ]
       ~b:[ ds "b" "1:x" "a" m1; dc "b" "1:x" "a" m2 ]
       ())
    [
      V.Wrong_kind { member = "b"; line = 2; from = "a"; seq = m1; kind = `Send };
      V.Wrong_kind { member = "b"; line = 3; from = "a"; seq = m2; kind = `Cast };
    ];
  check_err "send delivered by another member"
    (two ~a:[ send "a" "1:x" "a" m1; ds "a" "1:x" "a" m1 ] ~b:[ ds "b" "1:x" "a" m1 ] ())
    [ V.Misaddressed { member = "b"; line = 2; from = "a"; seq = m1; dst = "a" } ];
  check_err "length differs"
    (two
       ~a:[ cast ~len:10 "a" "1:x" m1; dc ~len:10 "a" "1:x" "a" m1 ]
       ~b:[ dc ~len:9 "b" "1:x" "a" m1 ]
       ())
    [ V.Wrong_length { member = "b"; line = 2; from = "a"; seq = m1; len = 9; sent = 10 } ]

(* Identity by number, not payload. *)
let identity () =
  let same = "00000000000000aa" in
  check_ok ~quiescent:true "two casts with equal payloads, both delivered by all"
    (two
       ~a:
         [
           cast ~digest:same "a" "1:x" m1;
           cast ~digest:same "a" "1:x" m2;
           dc ~digest:same "a" "1:x" "a" m1;
           dc ~digest:same "a" "1:x" "a" m2;
         ]
       ~b:[ dc ~digest:same "b" "1:x" "a" m1; dc ~digest:same "b" "1:x" "a" m2 ]
       ());
  check_err ~quiescent:true
    "two casts with equal payloads, one delivered twice: a duplicate and a loss"
    (two
       ~a:
         [
           cast ~digest:same "a" "1:x" m1;
           cast ~digest:same "a" "1:x" m2;
           dc ~digest:same "a" "1:x" "a" m1;
           dc ~digest:same "a" "1:x" "a" m2;
         ]
       ~b:[ dc ~digest:same "b" "1:x" "a" m1; dc ~digest:same "b" "1:x" "a" m1 ]
       ())
    [
      V.Duplicate { member = "b"; line = 3; from = "a"; seq = m1; first = 2 };
      V.Not_delivered { view = "1:x"; next = None; from = "a"; seq = m2; missing = [ "b" ] };
    ];
  check_err "a number used twice, even for equal payloads"
    [
      ( "a",
        [ view "a" "1:a" [ "a" ]; cast ~digest:same "a" "1:a" m1; cast ~digest:same "a" "1:a" m1 ]
      );
    ]
    [ V.Duplicate_id { member = "a"; line = 3; seq = m1; first = 2 } ];
  check_err "a number refused, then used again"
    [
      ("a", [ view "a" "1:a" [ "a" ]; refused "a" "1:a" m1; cast "a" "1:a" m1; dc "a" "1:a" "a" m1 ]);
    ]
    [
      V.Duplicate_id { member = "a"; line = 3; seq = m1; first = 2 };
      V.Delivered_refused { member = "a"; line = 4; from = "a"; seq = m1; refused = 2 };
    ];
  check_err "delivered with another payload than sent"
    (two
       ~a:[ cast "a" "1:x" m1; dc "a" "1:x" "a" m1 ]
       ~b:[ dc ~digest:"00000000000000bb" "b" "1:x" "a" m1 ]
       ())
    [
      V.Wrong_digest
        { member = "b"; line = 2; from = "a"; seq = m1; digest = "00000000000000bb"; sent = dg m1 };
    ];
  check_err "a refused message delivered"
    (two ~a:[ refused "a" "1:x" m1 ] ~b:[ dc "b" "1:x" "a" m1 ] ())
    [ V.Delivered_refused { member = "b"; line = 2; from = "a"; seq = m1; refused = 2 } ];
  check_ok ~quiescent:true "refused messages need not be delivered"
    (two ~a:[ refused "a" "1:x" m1; refused ~kind:`Send ~dst:"b" "a" "1:x" m2 ] ())

let gaps () =
  check_err "a cast skipped, the next delivered (the receiver then crashes)"
    (three
       ~a:[ cast "a" "1:x" m1; cast "a" "1:x" m2; dc "a" "1:x" "a" m1; dc "a" "1:x" "a" m2 ]
       ~b:[ dc "b" "1:x" "a" m1; dc "b" "1:x" "a" m2 ]
       ~c:[ dc "c" "1:x" "a" m2 ]
       ())
    [
      V.Gap
        { member = "c"; line = 2; view = "1:x"; from = "a"; kind = `Cast; seq = m2; missing = m1 };
    ];
  check_err "a send skipped"
    (three ~a:[ send "a" "1:x" "c" m1; send "a" "1:x" "c" m2 ] ~c:[ ds "c" "1:x" "a" m2 ] ())
    [
      V.Gap
        { member = "c"; line = 2; view = "1:x"; from = "a"; kind = `Send; seq = m2; missing = m1 };
    ];
  let v = [ "a"; "b"; "c" ] in
  check_ok
    "a prefix is no gap; casts and sends are not ordered with each other; sends to others are not \
     expected"
    [
      ( "a",
        [
          view "a" "1:x" v;
          cast "a" "1:x" m1;
          send "a" "1:x" "b" m2;
          send "a" "1:x" "c" m3;
          cast "a" "1:x" 4;
        ] );
      ("b", [ view "b" "1:x" v ]);
      ("c", [ view "c" "1:x" v; dc "c" "1:x" "a" m1; ds "c" "1:x" "a" m3 ]);
    ];
  check_err "gaps are per view: a message of the previous view does not count"
    [
      ( "a",
        [
          view "a" "1:x" [ "a"; "b" ];
          cast "a" "1:x" m1;
          dc "a" "1:x" "a" m1;
          view "a" "2:x" [ "a"; "b" ];
          cast "a" "2:x" m2;
          cast "a" "2:x" m3;
          dc "a" "2:x" "a" m2;
          dc "a" "2:x" "a" m3;
        ] );
      ( "b",
        [
          view "b" "1:x" [ "a"; "b" ];
          dc "b" "1:x" "a" m1;
          view "b" "2:x" [ "a"; "b" ];
          dc "b" "2:x" "a" m3;
        ] );
    ]
    [
      V.Gap
        { member = "b"; line = 4; view = "2:x"; from = "a"; kind = `Cast; seq = m3; missing = m2 };
    ];
  check_err "every missing message is named"
    (two
       ~a:[ cast "a" "1:x" m1; cast "a" "1:x" m2; cast "a" "1:x" m3 ]
       ~b:[ dc "b" "1:x" "a" m3 ]
       ())
    [
      V.Gap
        { member = "b"; line = 2; view = "1:x"; from = "a"; kind = `Cast; seq = m3; missing = m1 };
      V.Gap
        { member = "b"; line = 2; view = "1:x"; from = "a"; kind = `Cast; seq = m3; missing = m2 };
    ]

let blocks () =
  check_ok "nothing sent between block and the next view"
    (two
       ~a:
         [
           cast "a" "1:x" m1;
           dc "a" "1:x" "a" m1;
           block "a" "1:x";
           view "a" "2:x" [ "a"; "b" ];
           cast "a" "2:x" m2;
         ]
       ~b:[ dc "b" "1:x" "a" m1; block "b" "1:x"; view "b" "2:x" [ "a"; "b" ] ]
       ());
  check_err "a cast after the block"
    (two
       ~a:[ block "a" "1:x"; cast "a" "1:x" m1; dc "a" "1:x" "a" m1 ]
       ~b:[ dc "b" "1:x" "a" m1 ]
       ())
    [ V.Sent_while_blocked { member = "a"; line = 3; view = "1:x"; seq = m1; block = 2 } ];
  check_err "a send after the block, the first block counts"
    (two
       ~a:[ block "a" "1:x"; block "a" "1:x"; send "a" "1:x" "b" m1 ]
       ~b:[ ds "b" "1:x" "a" m1 ]
       ())
    [ V.Sent_while_blocked { member = "a"; line = 4; view = "1:x"; seq = m1; block = 2 } ];
  check_ok "deliveries after the block are fine"
    (two
       ~a:[ cast "a" "1:x" m1; block "a" "1:x"; dc "a" "1:x" "a" m1 ]
       ~b:[ block "b" "1:x"; dc "b" "1:x" "a" m1 ]
       ());
  check_err "a block in another view than the current one"
    [ ("a", [ view "a" "1:a" [ "a" ]; block "a" "0:a" ]) ]
    [ V.Not_current_view { member = "a"; line = 2; view = "0:a"; current = "1:a" } ]

let wedges () =
  let ab ?(a = []) ?(b = []) () =
    [ ("a", view "a" "1:x" [ "a"; "b" ] :: a); ("b", view "b" "1:x" [ "a"; "b" ] :: b) ]
  in
  check_ok "live members, every accepted cast delivered"
    (ab
       ~a:[ cast "a" "1:x" m1; dc "a" "1:x" "a" m1; refused "a" "1:x" m2; live "a" 1 ]
       ~b:[ dc "b" "1:x" "a" m1; live "b" 0 ]
       ());
  check_err "a live member ends blocked"
    (ab ~a:[ block "a" "1:x"; live "a" 0 ] ~b:[ live "b" 0 ] ())
    [ V.Ended_blocked { member = "a"; view = "1:x"; block = 2 } ];
  check_ok "a blocked member that crashed is no wedge"
    (ab ~a:[ block "a" "1:x" ] ~b:[ live "b" 0 ] ());
  check_err "accepted casts never sent (held in a queue)"
    (ab
       ~a:[ cast "a" "1:x" m1; dc "a" "1:x" "a" m1; live "a" 3 ]
       ~b:[ dc "b" "1:x" "a" m1; live "b" 0 ]
       ())
    [ V.Casts_unaccounted { member = "a"; accepted = 3; accounted = 1 } ];
  check_ok "accepted casts reported lost"
    (ab ~a:[ cast "a" "1:x" m1; lost "a" m1; lost "a" m2; live "a" 2 ] ~b:[ live "b" 0 ] ());
  check_err "more casts sent than accepted"
    (ab
       ~a:[ cast "a" "1:x" m1; dc "a" "1:x" "a" m1; live "a" 0 ]
       ~b:[ dc "b" "1:x" "a" m1; live "b" 0 ]
       ())
    [ V.Casts_unaccounted { member = "a"; accepted = 0; accounted = 1 } ];
  check_err "a cast sent but never delivered, not even by its sender"
    (ab ~a:[ cast "a" "1:x" m1; live "a" 1 ] ~b:[ live "b" 0 ] ())
    [ V.Wedged { member = "a"; line = 2; view = "1:x"; seq = m1 } ];
  check_err "live members in two views"
    [ ("a", [ view "a" "1:a" [ "a" ]; live "a" 0 ]); ("b", [ view "b" "1:b" [ "b" ]; live "b" 0 ]) ]
    [ V.Live_apart { finals = [ ("1:a", [ "a" ]); ("1:b", [ "b" ]) ] } ];
  check_err "events after the live line"
    [ ("a", [ view "a" "1:a" [ "a" ]; live "a" 0; cast "a" "1:a" m1 ]) ]
    [ V.After_live { member = "a"; line = 3 } ];
  check_ok ~quiescent:true "messages reported lost are not expected"
    (ab ~a:[ cast "a" "1:x" m1; send "a" "1:x" "b" m2; lost "a" m1; lost ~kind:`Send "a" m2 ] ())

let merge () =
  let split =
    [
      ("a", [ view "a" "1:a" [ "a"; "b"; "c" ]; view "a" "2:a" [ "a" ] ]);
      ("b", [ view "b" "1:a" [ "a"; "b"; "c" ]; view "b" "2:b" [ "b"; "c" ] ]);
      ("c", [ view "c" "1:a" [ "a"; "b"; "c" ]; view "c" "2:b" [ "b"; "c" ] ]);
    ]
  in
  check_ok "partitions may stay apart" split;
  check_err ~require_merge:true "partitions that did not merge" split
    [ V.Not_merged { finals = [ ("2:a", [ "a" ]); ("2:b", [ "b"; "c" ]) ] } ];
  let merged = List.map (fun (id, es) -> (id, es @ [ view id "3:a" [ "a"; "b"; "c" ] ])) split in
  check_ok ~require_merge:true "partitions merged" merged;
  check_ok ~require_merge:true "a killed member does not block the merge"
    (edit "c" (fun es -> [ List.hd es ]) split |> edit "b" (fun es -> es @ [ exit "b" ]));
  check_err ~require_merge:true "a stale member nobody excluded blocks it"
    [ ("a", [ view "a" "1:a" [ "a" ] ]); ("b", [ view "b" "1:b" [ "b" ] ]) ]
    [ V.Not_merged { finals = [ ("1:a", [ "a" ]); ("1:b", [ "b" ]) ] } ]

let good_mutated () =
  let g = good () in
  check_err "good run, d misses a3 (quiescent)" ~quiescent:true
    (edit "d" (fun es -> remove_nth 6 es) g)
    [ V.Not_delivered { view = "3:a"; next = None; from = "a"; seq = 4; missing = [ "d" ] } ];
  check_err "good run, b misses a1"
    (edit "b" (fun es -> remove_nth 1 es) g)
    [
      V.Not_synchronous
        { view = "1:a"; next = "2:a"; from = "a"; seq = 1; delivered = [ "a" ]; missing = [ "b" ] };
    ];
  check_ok "good run without c's log: nobody delivered from c, nothing to report"
    (List.filter (fun (id, _) -> id <> "c") g);
  check_err "good run without a's log"
    (List.filter (fun (id, _) -> id <> "a") g)
    [ V.Sender_log_missing { from = "a"; member = "b"; line = 2; seq = 1; count = 6 } ]

let printers () =
  let s v = Fmt.str "%a" V.pp_violation v in
  Alcotest.(check string)
    "not synchronous"
    "views 1:x then 2:x: message 1 of c delivered in 1:x by [a] but not by [b], which stay with \
     them"
    (s
       (V.Not_synchronous
          {
            view = "1:x";
            next = "2:x";
            from = "c";
            seq = m1;
            delivered = [ "a" ];
            missing = [ "b" ];
          }));
  Alcotest.(check string)
    "wrong view" "[b] line 3: delivers message 1 of a in view 2:x, but it was sent in view 1:x"
    (s (V.Wrong_view { member = "b"; line = 3; view = "2:x"; from = "a"; seq = m1; sent = "1:x" }));
  Alcotest.(check string)
    "not delivered, final"
    "final view 1:x: message 2 of a not delivered by [b], though all are alive at the end"
    (s (V.Not_delivered { view = "1:x"; next = None; from = "a"; seq = m2; missing = [ "b" ] }));
  Alcotest.(check string)
    "membership" "[b] line 1: view 1:a is [b; a] here, but [a; b] at a"
    (s
       (V.Membership_disagrees
          {
            member = "b";
            line = 1;
            view = "1:a";
            members = [ "b"; "a" ];
            other = "a";
            other_members = [ "a"; "b" ];
          }));
  Alcotest.(check string)
    "merge" "members alive at the end are in 2 views: 2:a has [a]; 2:b has [b; c]"
    (s (V.Not_merged { finals = [ ("2:a", [ "a" ]); ("2:b", [ "b"; "c" ]) ] }));
  Alcotest.(check string)
    "missing log"
    "no log of a, whose messages were delivered 2 time(s) (first: message 1 at [b] line 2)"
    (s (V.Sender_log_missing { from = "a"; member = "b"; line = 2; seq = m1; count = 2 }));
  Alcotest.(check string)
    "gap"
    "[b] line 4: delivers cast 3 of a in view 1:x but never delivers its earlier cast 2 of that \
     view (a gap)"
    (s
       (V.Gap
          { member = "b"; line = 4; view = "1:x"; from = "a"; kind = `Cast; seq = 3; missing = 2 }));
  Alcotest.(check string)
    "sent while blocked"
    "[a] line 3: sends message 2 in view 1:x after its block at line 2, before the next view"
    (s (V.Sent_while_blocked { member = "a"; line = 3; view = "1:x"; seq = 2; block = 2 }));
  Alcotest.(check string)
    "duplicate id" "[a] line 3: uses message id a#1 again (first at line 2)"
    (s (V.Duplicate_id { member = "a"; line = 3; seq = 1; first = 2 }));
  Alcotest.(check string)
    "ended blocked"
    "[a] is live at the end but still blocked in view 1:x (block at line 4, no view after it)"
    (s (V.Ended_blocked { member = "a"; view = "1:x"; block = 4 }));
  Alcotest.(check string)
    "casts unaccounted"
    "[a] the API accepted 3 casts, but only 1 were sent or reported lost: 2 wedged"
    (s (V.Casts_unaccounted { member = "a"; accepted = 3; accounted = 1 }));
  Alcotest.(check string)
    "wedged"
    "[a] line 2: cast 1 in view 1:x is neither delivered by its live sender nor reported lost (a \
     wedge)"
    (s (V.Wedged { member = "a"; line = 2; view = "1:x"; seq = 1 }))

(* The log format. *)

let lines () =
  let chk name expected e = Alcotest.(check string) name expected (Log.to_line e) in
  chk "view" {|{"ev":"view","t":0,"me":"a","view":"3:a","members":["a","b"]}|}
    (view "a" "3:a" [ "a"; "b" ]);
  chk "empty members" {|{"ev":"view","t":0,"me":"a","view":"3:a","members":[]}|} (view "a" "3:a" []);
  chk "cast"
    {|{"ev":"cast","t":0,"me":"a","view":"3:a","seq":7,"len":12,"digest":"0123456789abcdef"}|}
    (cast ~len:12 ~digest:"0123456789abcdef" "a" "3:a" 7);
  chk "send"
    {|{"ev":"send","t":0,"me":"a","view":"3:a","to":"b","seq":1,"len":0,"digest":"0000000000000001"}|}
    (send ~len:0 "a" "3:a" "b" m1);
  chk "deliver"
    {|{"ev":"deliver","t":0,"me":"b","view":"3:a","from":"a","kind":"cast","seq":1,"len":1,"digest":"0000000000000001"}|}
    (dc "b" "3:a" "a" m1);
  chk "deliver send"
    {|{"ev":"deliver","t":0,"me":"b","view":"3:a","from":"a","kind":"send","seq":1,"len":1,"digest":"0000000000000001"}|}
    (ds "b" "3:a" "a" m1);
  chk "block" {|{"ev":"block","t":0,"me":"a","view":"3:a"}|} (block "a" "3:a");
  chk "refused cast"
    {|{"ev":"refused","t":0,"me":"a","view":"3:a","kind":"cast","seq":2,"len":1,"digest":"0000000000000002","reason":"flow control full"}|}
    (refused "a" "3:a" 2);
  chk "refused send"
    {|{"ev":"refused","t":0,"me":"a","view":"3:a","kind":"send","to":"b","seq":2,"len":1,"digest":"0000000000000002","reason":"flow control full"}|}
    (refused ~kind:`Send ~dst:"b" "a" "3:a" 2);
  chk "lost" {|{"ev":"lost","t":0,"me":"a","kind":"cast","seq":3,"reason":"sender crashed"}|}
    (lost "a" 3);
  chk "exit" {|{"ev":"exit","t":0,"me":"a"}|} (exit "a");
  chk "live" {|{"ev":"live","t":0,"me":"a","casts":12}|} (live "a" 12);
  chk "time" {|{"ev":"exit","t":1700000000123456789,"me":"a"}|}
    (Log.Exit { t = 1700000000123456789; me = "a" });
  chk "escapes" {|{"ev":"exit","t":0,"me":"q\"\\\n\r\t\b\f\u0001\u001f/é"}|}
    (exit "q\"\\\n\r\t\b\012\001\031/é");
  let ok name expected s =
    match Log.of_line s with
    | Ok e -> Alcotest.check event name expected e
    | Error e -> Alcotest.failf "%s: %a" name Log.pp_error e
  in
  ok "keys in any order, whitespace" (dc "b" "3:a" "a" m1)
    " {\t\"digest\" : \"0000000000000001\", \"seq\":1, \
     \"len\":1,\"kind\":\"cast\",\"from\":\"a\",\"view\":\"3:a\",\"me\":\"b\",\"t\":0,\"ev\":\"deliver\"}\r";
  ok "unknown keys are ignored" (exit "a")
    {|{"ev":"exit","t":0,"me":"a","view":"1:a","extra":{"x":[1,2.5,null]}}|};
  ok "escapes"
    (exit "\"\\/\b\012\n\r\t\000é€😀")
    {|{"ev":"exit","t":0,"me":"\"\\\/\b\f\n\r\t\u0000\u00e9\u20AC\ud83d\ude00"}|};
  ok "raw UTF-8" (exit "é€😀") "{\"ev\":\"exit\",\"t\":0,\"me\":\"é€😀\"}";
  ok "members with spaces"
    (view "a" "1:a" [ "a"; "b" ])
    {|{"ev":"view","t":0,"me":"a","view":"1:a","members":[ "a" , "b" ]}|};
  let bad name s =
    match Log.of_line s with
    | Ok e -> Alcotest.failf "%s: accepted as %a" name Log.pp e
    | Error _ -> ()
  in
  List.iter
    (fun (name, s) -> bad name s)
    [
      ("empty", "");
      ("not an object", "[1]");
      ("unknown event", {|{"ev":"join","t":0,"me":"a"}|});
      ("missing ev", {|{"t":0,"me":"a"}|});
      ("missing t", {|{"ev":"exit","me":"a"}|});
      ( "missing seq",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","len":1,"digest":"0000000000000001"}|} );
      ("missing key", {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1}|});
      ( "refused send without to",
        {|{"ev":"refused","t":0,"me":"a","view":"1:a","kind":"send","seq":1,"len":1,"digest":"0000000000000001","reason":"x"}|}
      );
      ("empty reason", {|{"ev":"lost","t":0,"me":"a","kind":"cast","seq":1,"reason":""}|});
      ("repeated key", {|{"ev":"exit","t":0,"me":"a","me":"a"}|});
      ("number for string", {|{"ev":"exit","t":0,"me":1}|});
      ("null", {|{"ev":"exit","t":0,"me":null}|});
      ("nested object", {|{"ev":"exit","t":0,"me":{}}|});
      ("empty id", {|{"ev":"exit","t":0,"me":""}|});
      ("empty member", {|{"ev":"view","t":0,"me":"a","view":"1:a","members":["a",""]}|});
      ("numbers in members", {|{"ev":"view","t":0,"me":"a","view":"1:a","members":[1]}|});
      ("trailing comma", {|{"ev":"view","t":0,"me":"a","view":"1:a","members":["a",]}|});
      ( "negative len",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":-1,"digest":"0000000000000001"}|}
      );
      ("negative t", {|{"ev":"exit","t":-1,"me":"a"}|});
      ("fraction t", {|{"ev":"exit","t":1.5,"me":"a"}|});
      ( "fraction len",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1.0,"digest":"0000000000000001"}|}
      );
      ( "exponent len",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1e3,"digest":"0000000000000001"}|}
      );
      ( "leading zero",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":01,"digest":"0000000000000001"}|}
      );
      ( "huge len",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1234567890123456789012,"digest":"0000000000000001"}|}
      );
      ( "seq beyond 2^62",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":4611686018427387904,"len":1,"digest":"0000000000000001"}|}
      );
      ( "string len",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":"1","digest":"0000000000000001"}|}
      );
      ( "short digest",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1,"digest":"000000000000001"}|} );
      ( "upper-case digest",
        {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1,"digest":"000000000000000A"}|} );
      ( "bad kind",
        {|{"ev":"deliver","t":0,"me":"b","view":"1:a","from":"a","kind":"multicast","seq":1,"len":1,"digest":"0000000000000001"}|}
      );
      ("trailing garbage", {|{"ev":"exit","t":0,"me":"a"} x|});
      ("two objects", {|{"ev":"exit","t":0,"me":"a"}{"ev":"exit","t":0,"me":"a"}|});
      ("unterminated", {|{"ev":"exit","t":0,"me":"a|});
      ("truncated", {|{"ev":"exit","t":0,"me":"a"|});
      ("bad escape", {|{"ev":"exit","t":0,"me":"\x41"}|});
      ("short \\u", {|{"ev":"exit","t":0,"me":"\u41"}|});
      ("lone high surrogate", {|{"ev":"exit","t":0,"me":"\ud83d"}|});
    ];
  let err s =
    match Log.of_line s with Error e -> Fmt.str "%a" Log.pp_error e | Ok _ -> "accepted"
  in
  Alcotest.(check string)
    "error names the missing key" {|missing key "t"|} (err {|{"ev":"exit","me":"a"}|});
  Alcotest.(check string)
    "error names the repeated key" {|repeated key "me"|}
    (err {|{"ev":"exit","t":0,"me":"a","me":"b"}|});
  Alcotest.(check string)
    "syntax error, one line" "not JSON: Line 1, bytes 26-27: Unexpected end of input"
    (err {|{"ev":"exit","t":0,"me":"a"|});
  Alcotest.(check string)
    "digest error" {|"digest": expected 16 lower-case hex digits|}
    (err {|{"ev":"cast","t":0,"me":"a","view":"1:a","seq":1,"len":1,"digest":"00"}|});
  Alcotest.(check string)
    "unknown event" {|unknown event "join"|}
    (err {|{"ev":"join","t":0,"me":"a"}|})

(* Random events with strings of random code points. *)
let gen_string =
  QCheck.Gen.(
    let cp =
      frequency
        [
          (6, int_range 0x61 0x7a);
          (2, int_range 0 0x7f);
          (1, int_range 0x80 0xd7ff);
          (1, int_range 0xe000 0x10ffff);
        ]
    in
    list_size (int_range 1 8) cp >|= fun cps ->
    let b = Buffer.create 16 in
    List.iter (fun u -> Buffer.add_utf_8_uchar b (Uchar.of_int u)) cps;
    Buffer.contents b)

let gen_event =
  QCheck.Gen.(
    let chars s = oneofl (List.of_seq (String.to_seq s)) in
    let digest = string_size ~gen:(chars "0123456789abcdef") (return 16) in
    let num = oneof [ int_range 0 100; int_range 0 ((1 lsl 62) - 1) ] in
    let kind = oneofl [ `Cast; `Send ] in
    num >>= fun t ->
    oneof
      [
        map3
          (fun me v members -> Log.View { t; me; view = v; members })
          gen_string gen_string
          (list_size (int_range 0 5) gen_string);
        map3
          (fun (me, view) seq (len, digest) -> Log.Cast { t; me; view; seq; len; digest })
          (pair gen_string gen_string) num (pair num digest);
        map3
          (fun (me, view, dst) seq (len, digest) -> Log.Send { t; me; view; dst; seq; len; digest })
          (triple gen_string gen_string gen_string)
          num (pair num digest);
        map3
          (fun (me, view, from) (kind, seq) (len, digest) ->
            Log.Deliver { t; me; view; from; kind; seq; len; digest })
          (triple gen_string gen_string gen_string)
          (pair kind num) (pair num digest);
        map2 (fun me view -> Log.Block { t; me; view }) gen_string gen_string;
        map3
          (fun (me, view, dst) (kind, seq) (len, digest, reason) ->
            let dst = match kind with `Send -> Some dst | `Cast -> None in
            Log.Refused { t; me; view; kind; dst; seq; len; digest; reason })
          (triple gen_string gen_string gen_string)
          (pair kind num) (triple num digest gen_string);
        map3
          (fun me (kind, seq) reason -> Log.Lost { t; me; kind; seq; reason })
          gen_string (pair kind num) gen_string;
        map (fun me -> Log.Exit { t; me }) gen_string;
        map2 (fun me casts -> Log.Live { t; me; casts }) gen_string num;
      ])

let prop_round_trip =
  qtest ~count:1000 "to_line then of_line is the identity"
    (QCheck.make ~print:Log.to_line gen_event) (fun e -> Log.of_line (Log.to_line e) = Ok e)

(* Garbage: random bytes, and valid lines with bytes changed, inserted or
   cut. Whatever [of_line] accepts must print back to an equal event. *)
let gen_garbage =
  QCheck.Gen.(
    oneof
      [
        string_size ~gen:char (int_range 0 80);
        string_size
          ~gen:(oneofl (List.of_seq (String.to_seq "{}[]\":,\\ u0123456789abcdefevmlnwidstk-.e")))
          (int_range 0 80);
        ( gen_event >>= fun e ->
          let l = Log.to_line e in
          let n = String.length l in
          int_range 0 (n - 1) >>= fun i ->
          char >>= fun c ->
          oneofl
            [
              String.sub l 0 i;
              String.mapi (fun j x -> if j = i then c else x) l;
              String.sub l 0 i ^ String.make 1 c ^ String.sub l i (n - i);
              String.sub l 0 i ^ String.sub l (i + 1) (n - i - 1);
            ] );
      ])

let prop_garbage =
  qtest ~count:3000 "garbage lines are errors, never exceptions"
    (QCheck.make ~print:(Printf.sprintf "%S") gen_garbage)
    (fun s ->
      match Log.of_line s with Error _ -> true | Ok e -> Log.of_line (Log.to_line e) = Ok e)

let with_file contents f =
  let path = Filename.temp_file "consort-vsync" ".log" in
  Fun.protect
    ~finally:(fun () -> Sys.remove path)
    (fun () ->
      let oc = open_out_bin path in
      output_string oc contents;
      close_out oc;
      f path)

let with_files logs f =
  let paths =
    List.map
      (fun events ->
        let path = Filename.temp_file "consort-vsync" ".log" in
        let oc = open_out_bin path in
        List.iter (Log.output oc) events;
        close_out oc;
        path)
      logs
  in
  Fun.protect ~finally:(fun () -> List.iter Sys.remove paths) (fun () -> f paths)

let read_file p = Result.map_error (Fmt.str "%a" Log.pp_file_error) (Log.read_file p)
let problems l = List.map (Fmt.str "%a" V.pp_file_problem) l

let files () =
  let a = List.assoc "a" (good ()) in
  let text = String.concat "\n" (List.map Log.to_line a) in
  with_file (text ^ "\n") (fun p ->
      Alcotest.(check (result (list event) string)) "with final newline" (Ok a) (read_file p));
  with_file text (fun p ->
      Alcotest.(check (result (list event) string)) "without final newline" (Ok a) (read_file p));
  with_file
    (String.concat "\r\n" (List.map Log.to_line a) ^ "\r\n")
    (fun p -> Alcotest.(check (result (list event) string)) "CRLF" (Ok a) (read_file p));
  with_file "" (fun p ->
      Alcotest.(check (result (list event) string)) "empty file" (Ok []) (read_file p));
  with_file
    ({|{"ev":"exit","t":0,"me":"a"}|} ^ "\n\n" ^ {|{"ev":"exit","t":0,"me":"a"}|})
    (fun p ->
      Alcotest.(check (result (list event) string))
        "blank line"
        (Error (p ^ ":2: not JSON: Blank input data"))
        (read_file p));
  with_file
    ({|{"ev":"exit","t":0,"me":"a"}|} ^ "\n" ^ {|{"ev":"exit","t":0,"me":"a"|})
    (fun p ->
      Alcotest.(check (result (list event) string))
        "truncated last line"
        (Error (p ^ ":2: not JSON: Line 1, bytes 26-27: Unexpected end of input"))
        (read_file p));
  (match Log.read_file "/nonexistent/consort.log" with
  | Error (Log.Io e) -> Alcotest.(check bool) "missing file names it" true (String.length e > 0)
  | Error _ -> Alcotest.fail "missing file: wrong error"
  | Ok _ -> Alcotest.fail "missing file read");
  let g = good () in
  with_files
    (List.map snd g @ [ [] ])
    (fun paths ->
      match V.check_files ~quiescent:true ~require_merge:true paths with
      | Error l -> Alcotest.failf "good run: %a" Fmt.(list ~sep:cut string) (problems l)
      | Ok s ->
          Alcotest.(check string)
            "summary"
            "5 logs, 4 members, 3 views (8 installs), 7 casts, 1 sends, 18 deliveries, 0 blocks, 0 \
             refused, 0 lost, 1 exits"
            (Fmt.str "%a" V.pp_summary s);
          Alcotest.(check int) "casts" 7 s.casts);
  with_files
    (List.map snd (edit "b" (fun es -> remove_nth 1 es) g))
    (fun paths ->
      match V.check_files paths with
      | Ok _ -> Alcotest.fail "b misses a1: accepted"
      | Error l ->
          Alcotest.(check (list string))
            "violations as strings"
            [
              "views 1:a then 2:a: message 1 of a delivered in 1:a by [a] but not by [b], which \
               stay with them";
            ]
            (problems l));
  with_file {|{"ev":"exit","t":0,"me":"a"}|} (fun good_path ->
      with_file "{\"ev\":\"exit\",\"t\":0}\n" (fun bad_path ->
          Alcotest.(check (result reject (list string)))
            "read errors, all of them"
            (Error
               [ bad_path ^ ":1: missing key \"me\""; "/nonexistent/x: No such file or directory" ])
            (Result.map_error problems (V.check_files [ good_path; bad_path; "/nonexistent/x" ]))))

(* Random correct histories: a simulated group whose members cast, send
   and deliver; views change when a member joins, leaves or crashes, when a
   view splits in two and when two views merge. Messages travel on FIFO
   queues per (sender, receiver). At a view change every survivor delivers
   all remaining messages of the members going into the same next view, and
   of every other sender the same prefix (virtual synchrony's flush). *)
module Sim = struct
  type item = { idx : int; seq : int; digest : string; kind : Log.kind; len : int }

  type group = {
    vid : string;
    members : string list;
    q : (string * string, item Queue.t) Hashtbl.t;
    upto : (string * string, int) Hashtbl.t; (* 1 + idx of the last delivery *)
    nsent : (string, int) Hashtbl.t;
  }

  type t = {
    rand : Random.State.t;
    logs : (string, Log.event list ref) Hashtbl.t;
    mutable pids : string list; (* latest first *)
    mutable groups : group list;
    mutable ltime : int;
    mutable ndigests : int;
  }

  type ending = Open | Quiescent | Merged

  let rint t n = Random.State.int t.rand n
  let pick t l = List.nth l (rint t (List.length l))

  let emit t pid e =
    let l = Hashtbl.find t.logs pid in
    l := e :: !l

  let fresh_pid t =
    let p = Printf.sprintf "p%d" (List.length t.pids + 1) in
    t.pids <- p :: t.pids;
    Hashtbl.add t.logs p (ref []);
    p

  let install t members =
    t.ltime <- t.ltime + 1 + rint t 2;
    let vid = Printf.sprintf "%d:%s" t.ltime (List.hd members) in
    List.iter (fun m -> emit t m (Log.View { t = 0; me = m; view = vid; members })) members;
    { vid; members; q = Hashtbl.create 16; upto = Hashtbl.create 16; nsent = Hashtbl.create 8 }

  let queue g s r =
    match Hashtbl.find_opt g.q (s, r) with
    | Some q -> q
    | None ->
        let q = Queue.create () in
        Hashtbl.add g.q (s, r) q;
        q

  let message t g s kind =
    t.ndigests <- t.ndigests + 1;
    (* unique, in no particular order *)
    let d = t.ndigests * 0x1E3779B97F4A7C15 land 0xfff_ffff_ffff_ffff in
    let digest = Printf.sprintf "%016x" d in
    let idx = Option.value ~default:0 (Hashtbl.find_opt g.nsent s) in
    Hashtbl.replace g.nsent s (idx + 1);
    (* numbers unique per sender, digests that repeat: payloads are not
       identities *)
    let digest = if rint t 4 = 0 then "00000000000000aa" else digest in
    { idx; seq = t.ndigests; digest; kind; len = rint t 2000 }

  let cast t g s =
    let m = message t g s `Cast in
    emit t s (Log.Cast { t = 0; me = s; view = g.vid; seq = m.seq; len = m.len; digest = m.digest });
    List.iter (fun r -> Queue.push m (queue g s r)) g.members

  let send t g s d =
    let m = message t g s `Send in
    emit t s
      (Log.Send
         { t = 0; me = s; view = g.vid; dst = d; seq = m.seq; len = m.len; digest = m.digest });
    Queue.push m (queue g s d)

  let deliver t g r s m =
    Hashtbl.replace g.upto (s, r) (m.idx + 1);
    let { kind; len; digest; seq; _ } = m in
    emit t r (Log.Deliver { t = 0; me = r; view = g.vid; from = s; kind; seq; len; digest })

  let nonempty g =
    Hashtbl.fold (fun k q acc -> if Queue.is_empty q then acc else k :: acc) g.q []
    |> List.sort compare

  let deliver_one t g =
    match nonempty g with
    | [] -> false
    | l ->
        let s, r = pick t l in
        deliver t g r s (Queue.pop (Hashtbl.find g.q (s, r)));
        true

  (* Flush [g] for the members of [stay], who go on together: each of them
     delivers the rest of the messages of senders in [stay], and of other
     senders those before a common cut, in a random interleaving. *)
  let find_list h k = Option.value ~default:[] (Hashtbl.find_opt h k)

  let flush t g stay =
    let pending = Hashtbl.create 8 in
    List.iter
      (fun s ->
        let total = Option.value ~default:0 (Hashtbl.find_opt g.nsent s) in
        let cut =
          if List.mem s stay then total
          else
            let lo =
              List.fold_left
                (fun lo r -> max lo (Option.value ~default:0 (Hashtbl.find_opt g.upto (s, r))))
                0 stay
            in
            lo + rint t (total - lo + 1)
        in
        List.iter
          (fun r ->
            let l = List.filter (fun m -> m.idx < cut) (List.of_seq (Queue.to_seq (queue g s r))) in
            Queue.clear (queue g s r);
            if l <> [] then Hashtbl.replace pending r ((s, ref l) :: find_list pending r))
          stay)
      g.members;
    List.iter
      (fun r ->
        let rec go () =
          let srcs = List.filter (fun (_, l) -> !l <> []) (find_list pending r) in
          if srcs <> [] then begin
            let s, l = pick t srcs in
            (match !l with
            | m :: rest ->
                deliver t g r s m;
                l := rest
            | [] -> ());
            go ()
          end
        in
        go ())
      stay

  let replace t g gs = t.groups <- gs @ List.filter (fun g' -> g' != g) t.groups
  let alive t = List.concat_map (fun g -> g.members) t.groups

  let view_change t =
    let g = pick t t.groups in
    let n = List.length g.members in
    let without q = List.filter (( <> ) q) g.members in
    match rint t 5 with
    | 0 when List.length (alive t) < 6 ->
        let p = fresh_pid t in
        flush t g g.members;
        replace t g [ install t (g.members @ [ p ]) ]
    | 1 when n >= 2 ->
        let q = pick t g.members in
        emit t q (Log.Exit { t = 0; me = q });
        flush t g (without q);
        replace t g [ install t (without q) ]
    | 2 when n >= 2 ->
        let q = pick t g.members in
        flush t g (without q);
        replace t g [ install t (without q) ]
    | 3 when n >= 2 ->
        let first = List.hd g.members in
        let other = pick t (List.tl g.members) in
        let one m = m = first || (m <> other && rint t 2 = 0) in
        let g1, g2 = List.partition one g.members in
        flush t g g1;
        flush t g g2;
        replace t g [ install t g1; install t g2 ]
    | _ -> (
        match List.filter (fun g' -> g' != g) t.groups with
        | [] -> ()
        | others ->
            let g' = pick t others in
            flush t g g.members;
            flush t g' g'.members;
            t.groups <- List.filter (fun x -> x != g') t.groups;
            replace t g [ install t (g.members @ g'.members) ])

  let step t =
    let g = pick t t.groups in
    match rint t 20 with
    | 0 -> view_change t
    | 1 | 2 -> ( match g.members with [] -> () | ms -> send t g (pick t ms) (pick t ms))
    | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 -> cast t g (pick t g.members)
    | _ -> if not (deliver_one t g) then cast t g (pick t g.members)

  let run ?(steps = 200) ~ending rand =
    let t = { rand; logs = Hashtbl.create 16; pids = []; groups = []; ltime = 0; ndigests = 0 } in
    let first = List.init (1 + rint t 4) (fun _ -> fresh_pid t) in
    t.groups <- [ install t first ];
    for _ = 1 to steps do
      step t
    done;
    (match ending with
    | Open -> ()
    | Quiescent -> List.iter (fun g -> flush t g g.members) t.groups
    | Merged ->
        while List.length t.groups > 1 do
          match t.groups with
          | g :: g' :: rest ->
              flush t g g.members;
              flush t g' g'.members;
              t.groups <- rest;
              t.groups <- install t (g.members @ g'.members) :: t.groups
          | _ -> ()
        done;
        List.iter (fun g -> flush t g g.members) t.groups);
    let logs = List.rev_map (fun p -> (p, List.rev !(Hashtbl.find t.logs p))) t.pids in
    (logs, alive t)
end

let ending_flags = function
  | Sim.Open -> (false, false)
  | Sim.Quiescent -> (true, false)
  | Sim.Merged -> (true, true)

let pp_ending ppf e =
  Fmt.string ppf
    (match e with Sim.Open -> "open" | Sim.Quiescent -> "quiescent" | Sim.Merged -> "merged")

let gen_history =
  QCheck.Gen.(
    pair (oneofl [ Sim.Open; Sim.Quiescent; Sim.Merged ]) (pair (int_range 20 300) int)
    >|= fun (ending, (steps, s)) ->
    let logs, alive = Sim.run ~steps ~ending (Random.State.make [| s |]) in
    (ending, logs, alive))

let pp_logs =
  let pp_log ppf (id, es) = Fmt.pf ppf "@[<v 2>%s:@,%a@]" id Fmt.(list ~sep:cut Log.pp) es in
  Fmt.(list ~sep:cut pp_log)

let print_history (ending, logs, _) = Fmt.str "@[<v>%a@,%a@]" pp_ending ending pp_logs logs

let check_history ending logs =
  let quiescent, require_merge = ending_flags ending in
  V.check ~quiescent ~require_merge logs

let prop_correct =
  qtest "random correct histories pass" (QCheck.make ~print:print_history gen_history)
    (fun (ending, logs, _) ->
      match check_history ending logs with
      | Ok () -> true
      | Error l -> QCheck.Test.fail_reportf "%a" Fmt.(list ~sep:cut V.pp_violation) l)

(* Mutations. Positions are indices in a member's event list. *)
type mutation =
  | Drop of string * int
  | Swap of string * int * int
  | Dup of string * int * int (* copy event i before event j *)
  | Move of string * int * int * string (* move event i before event j, now in view v *)
  | Disagree of string * int * string list

let pp_mutation ppf = function
  | Drop (m, i) -> Fmt.pf ppf "%s: drop event %d" m i
  | Swap (m, i, j) -> Fmt.pf ppf "%s: swap events %d and %d" m i j
  | Dup (m, i, j) -> Fmt.pf ppf "%s: copy event %d before %d" m i j
  | Move (m, i, j, v) -> Fmt.pf ppf "%s: move event %d before %d, in view %s" m i j v
  | Disagree (m, i, ms) -> Fmt.pf ppf "%s: event %d gets members %a" m i Fmt.(Dump.list string) ms

(* What one member's log says: per event its span (index of the view), and
   per span its view id and the index of the event ending it. *)
type shape = { span_of : int array; vids : string array; ends : int array }

let shape events =
  let a = Array.of_list events in
  let span_of = Array.make (Array.length a) (-1) in
  let vids = ref [] and ends = ref [] and cur = ref (-1) in
  Array.iteri
    (fun i e ->
      (match e with
      | Log.View { view; _ } ->
          if !cur >= 0 then ends := i :: !ends;
          vids := view :: !vids;
          incr cur
      | Log.Exit _ -> if !cur >= 0 then ends := i :: !ends
      | _ -> ());
      span_of.(i) <- !cur)
    a;
  let vids = Array.of_list (List.rev !vids) in
  let ends = Array.of_list (List.rev !ends) in
  let ends =
    Array.init (Array.length vids) (fun k ->
        if k < Array.length ends then ends.(k) else Array.length a)
  in
  { span_of; vids; ends }

let candidates ending logs alive =
  let quiescent, _ = ending_flags ending in
  let shapes = List.map (fun (id, es) -> (id, (Array.of_list es, shape es))) logs in
  let next id v =
    let _, sh = List.assoc id shapes in
    let rec find k =
      if k >= Array.length sh.vids then None else if sh.vids.(k) = v then Some k else find (k + 1)
    in
    match find 0 with
    | Some k when k + 1 < Array.length sh.vids -> `Next sh.vids.(k + 1)
    | Some k when k + 1 = Array.length sh.vids -> `Last
    | _ -> `Not_in
  in
  let delivered_in id v key =
    let a, sh = List.assoc id shapes in
    let r = ref false in
    Array.iteri
      (fun i e ->
        match e with
        | Log.Deliver { from; seq; _ }
          when sh.span_of.(i) >= 0 && sh.vids.(sh.span_of.(i)) = v && (from, seq) = key ->
            r := true
        | _ -> ())
      a;
    !r
  in
  let drops = ref [] and swaps = ref [] and dups = ref [] in
  let moves = ref [] and disagree = ref [] in
  List.iter
    (fun (id, (a, sh)) ->
      Array.iteri
        (fun i e ->
          match e with
          | Log.Deliver { from; seq; kind; _ } ->
              let k = sh.span_of.(i) in
              let v = sh.vids.(k) in
              let must =
                match next id v with
                | `Next w ->
                    let stays r = next r v = `Next w in
                    stays from
                    || kind = `Cast
                       && List.exists
                            (fun (r, _) -> r <> id && stays r && delivered_in r v (from, seq))
                            logs
                | `Last ->
                    quiescent && List.mem id alive && List.mem from alive && next from v = `Last
                | `Not_in -> false
              in
              if must then drops := Drop (id, i) :: !drops;
              for j = i + 1 to sh.ends.(k) do
                dups := Dup (id, i, j) :: !dups
              done;
              for j = i + 1 to sh.ends.(k) - 1 do
                match a.(j) with
                | Log.Deliver d when d.from = from && d.kind = kind ->
                    swaps := Swap (id, i, j) :: !swaps
                | _ -> ()
              done;
              Array.iteri
                (fun k' v' ->
                  if k' <> k then
                    let start = if k' = 0 then 0 else sh.ends.(k' - 1) in
                    for j = start + 1 to sh.ends.(k') do
                      moves := Move (id, i, j, v') :: !moves
                    done)
                sh.vids
          | Log.View { view; members; _ } ->
              let installers = List.filter (fun (r, _) -> r <> id && next r view <> `Not_in) logs in
              if installers <> [] && List.length members >= 2 then
                disagree := Disagree (id, i, List.tl members @ [ List.hd members ]) :: !disagree
          | _ -> ())
        a)
    shapes;
  List.filter (fun l -> l <> []) [ !drops; !swaps; !dups; !moves; !disagree ]

let apply logs m =
  let on id f =
    List.map (fun (i, es) -> if i = id then (i, f (Array.of_list es)) else (i, es)) logs
  in
  (* [e] inserted before index [j] of [a], or at its end *)
  let insert a j e =
    List.concat (List.mapi (fun k x -> if k = j then [ e; x ] else [ x ]) (Array.to_list a))
    @ if j = Array.length a then [ e ] else []
  in
  match m with
  | Drop (id, i) -> on id (fun a -> List.filteri (fun k _ -> k <> i) (Array.to_list a))
  | Swap (id, i, j) ->
      on id (fun a ->
          let x = a.(i) in
          a.(i) <- a.(j);
          a.(j) <- x;
          Array.to_list a)
  | Dup (id, i, j) -> on id (fun a -> insert a j a.(i))
  | Move (id, i, j, v) ->
      on id (fun a ->
          let e = match a.(i) with Log.Deliver d -> Log.Deliver { d with view = v } | e -> e in
          let l = insert a j e in
          (* drop the original, shifted by one if inserted before it *)
          let i = if j <= i then i + 1 else i in
          List.filteri (fun k _ -> k <> i) l)
  | Disagree (id, i, ms) ->
      on id (fun a ->
          (match a.(i) with Log.View v -> a.(i) <- Log.View { v with members = ms } | _ -> ());
          Array.to_list a)

let gen_mutated =
  QCheck.Gen.(
    gen_history >>= fun (ending, logs, alive) ->
    int >|= fun s ->
    let rand = Random.State.make [| s |] in
    let pick l = List.nth l (Random.State.int rand (List.length l)) in
    let m = match candidates ending logs alive with [] -> None | ls -> Some (pick (pick ls)) in
    (ending, logs, alive, m))

let caught (ending, logs, _, m) =
  match m with
  | None -> true
  | Some m -> (
      let event_at id i = List.nth (List.assoc id logs) i in
      let msg id i =
        match event_at id i with Log.Deliver { from; seq; _ } -> (from, seq) | _ -> ("", 0)
      in
      let expected v =
        match (m, v) with
        | Drop (id, i), V.Not_synchronous { from; seq; missing; _ }
        | Drop (id, i), V.Not_delivered { from; seq; missing; _ } ->
            msg id i = (from, seq) && List.mem id missing
        | Swap (id, _, _), V.Out_of_order { member; _ } -> member = id
        | Dup (id, i, _), V.Duplicate { member; from; seq; _ }
        | Move (id, i, _, _), V.Wrong_view { member; from; seq; _ } ->
            member = id && msg id i = (from, seq)
        | Disagree (id, i, _), V.Membership_disagrees { view; _ } -> (
            match event_at id i with Log.View v -> v.view = view | _ -> false)
        | _ -> false
      in
      match check_history ending (apply logs m) with
      | Ok () -> QCheck.Test.fail_reportf "%a: not caught" pp_mutation m
      | Error l ->
          List.exists expected l
          || QCheck.Test.fail_reportf "%a: wrong report:@ %a" pp_mutation m
               Fmt.(list ~sep:cut V.pp_violation)
               l)

let print_mutated (ending, logs, alive, m) =
  print_history (ending, logs, alive)
  ^ "\n"
  ^ match m with None -> "no mutation" | Some m -> Fmt.str "%a" pp_mutation m

let prop_mutation =
  qtest ~count:1000 "drop, duplicate, reorder, move to another view, membership change: caught"
    (QCheck.make ~print:print_mutated gen_mutated)
    caught

(* The generators above must produce every mutation often enough to mean
   something. *)
let coverage () =
  let rand = Random.State.make [| seed |] in
  let counts = Hashtbl.create 8 in
  let get k = Option.value ~default:0 (Hashtbl.find_opt counts k) in
  let count k = Hashtbl.replace counts k (1 + get k) in
  let has p es = List.exists p es in
  let is_exit = function Log.Exit _ -> true | _ -> false in
  let is_send = function Log.Send _ -> true | _ -> false in
  for _ = 1 to 300 do
    let ending, logs, alive = QCheck.Gen.generate1 ~rand gen_history in
    List.iter
      (function
        | Drop _ :: _ -> count "drop"
        | Swap _ :: _ -> count "swap"
        | Dup _ :: _ -> count "dup"
        | Move _ :: _ -> count "move"
        | Disagree _ :: _ -> count "disagree"
        | [] -> ())
      (candidates ending logs alive);
    if List.length logs > 5 then count "more than 5 members";
    if List.exists (fun (_, es) -> has is_exit es) logs then count "exit";
    if List.exists (fun (id, es) -> not (List.mem id alive || has is_exit es)) logs then
      count "crash";
    if List.exists (fun (_, es) -> has is_send es) logs then count "send";
    (* Members alive at the end in different views: partitioned. *)
    let finals = Hashtbl.create 8 in
    List.iter
      (fun (id, es) ->
        if List.mem id alive then
          match
            List.rev (List.filter_map (function Log.View v -> Some v.view | _ -> None) es)
          with
          | v :: _ -> Hashtbl.replace finals v ()
          | [] -> ())
      logs;
    if Hashtbl.length finals > 1 then count "partitioned at the end"
  done;
  List.iter
    (fun k ->
      let n = get k in
      if n < 20 then Alcotest.failf "%s: only %d histories in 300" k n)
    [
      "drop";
      "swap";
      "dup";
      "move";
      "disagree";
      "exit";
      "crash";
      "send";
      "partitioned at the end";
      "more than 5 members";
    ]

let large () =
  let logs, _ = Sim.run ~steps:150_000 ~ending:Sim.Merged (Random.State.make [| seed |]) in
  let s = V.summarize logs in
  if s.deliveries < 100_000 then Alcotest.failf "only %d deliveries" s.deliveries;
  let t0 = Sys.time () in
  (match V.check ~quiescent:true ~require_merge:true logs with
  | Ok () -> ()
  | Error l -> Alcotest.failf "%d violations" (List.length l));
  let dt = Sys.time () -. t0 in
  if dt > 5. then Alcotest.failf "checking %d deliveries took %.1fs" s.deliveries dt

let () =
  Alcotest.run "consort-vsync"
    [
      ( "log",
        [
          Alcotest.test_case "lines: exact format, accepted and rejected forms" `Quick lines;
          prop_round_trip;
          prop_garbage;
          Alcotest.test_case "files" `Quick files;
        ] );
      ( "vsync",
        [
          Alcotest.test_case "correct runs pass" `Quick correct_runs;
          Alcotest.test_case "views" `Quick views;
          Alcotest.test_case "log structure" `Quick structure;
          Alcotest.test_case "virtual synchrony and liveness" `Quick synchrony;
          Alcotest.test_case "same-view delivery" `Quick same_view;
          Alcotest.test_case "FIFO, duplication" `Quick fifo;
          Alcotest.test_case "creation, kind, address, length" `Quick creation;
          Alcotest.test_case "partitions and merge" `Quick merge;
          Alcotest.test_case "messages are identified by number, not payload" `Quick identity;
          Alcotest.test_case "gaps" `Quick gaps;
          Alcotest.test_case "nothing sent between block and view" `Quick blocks;
          Alcotest.test_case "wedges: blocked, unsent, undelivered" `Quick wedges;
          Alcotest.test_case "the good run, altered" `Quick good_mutated;
          Alcotest.test_case "printers" `Quick printers;
          prop_correct;
          prop_mutation;
          Alcotest.test_case "mutation coverage" `Quick coverage;
          Alcotest.test_case "large history, linear time" `Quick large;
        ] );
    ]
