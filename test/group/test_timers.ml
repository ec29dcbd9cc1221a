(* Timers of the layers that keep a deadline per peer (Pt2pt, Pt2ptw), in a view of 32 members:
   the clock moves one millisecond at a time and every datagram a timer sends is recorded with its
   time. A timer missed, or one that fires before its time, changes the record. *)

open Consort
open Single
module G = Consort_group

let ms = Time.of_ms

(* Steps the clock by a millisecond up to [until] ms, running the alarm when due, and returns what
   was sent at each step, oldest first: (ms, destination rank, header). *)
let drive s codec ~from ~until =
  let log = ref [] in
  for k = from to until do
    let before = List.length !(s.sent) in
    advance s (ms k);
    let fresh = List.filteri (fun i _ -> i < List.length !(s.sent) - before) !(s.sent) in
    List.iter
      (fun (dst, bytes) ->
        let r = match dst with Event.Send r -> r | Event.Cast -> -1 in
        let _, h, _ = split codec bytes in
        log := (k, r, h) :: !log)
      (List.rev fresh)
  done;
  List.rev !log

let pt2pt_t = Alcotest.testable G.Pt2pt.pp_header ( = )
let entry = Alcotest.(triple int int pt2pt_t)

let pt2pt_deadlines () =
  let s = create ~n:32 [ G.Pt2pt.layer; G.Bottom.layer ] in
  (* rto 20 ms, doubling; acknowledgement delay 5 ms *)
  (* sent at 0: retransmitted at 20, 60, 140 *)
  Stack.send s.st 3 (Msg.of_string s.pool "to 3");
  ignore (drive s G.Pt2pt.codec ~from:1 ~until:6);
  Stack.send s.st 17 (Msg.of_string s.pool "to 17");
  (* sent at 6 ms: retransmitted at 26, 66, 146, 306 *)
  ignore (drive s G.Pt2pt.codec ~from:7 ~until:10);
  feed s
    (from_send s 9
    ^ Codec.encode_string G.Pt2pt.codec (G.Pt2pt.Data { seq = 0; ack = 0 })
    ^ "from 9");
  let log = drive s G.Pt2pt.codec ~from:11 ~until:150 in
  let data seq = G.Pt2pt.Data { seq; ack = 0 } in
  Alcotest.(check (list entry))
    "each timer at its time, no other"
    [
      (15, 9, G.Pt2pt.Ack { ack = 1; sack = [] });
      (20, 3, data 0);
      (26, 17, data 0);
      (60, 3, data 0);
      (66, 17, data 0);
      (140, 3, data 0);
      (146, 17, data 0);
    ]
    log;
  (* Acknowledged: that peer's timer stops, the other's goes on. *)
  feed s (from_send s 3 ^ Codec.encode_string G.Pt2pt.codec (G.Pt2pt.Ack { ack = 1; sack = [] }));
  let log = drive s G.Pt2pt.codec ~from:151 ~until:310 in
  Alcotest.(check (list entry)) "only the unacknowledged" [ (306, 17, data 0) ] log;
  stop s

let pt2ptw_deadlines () =
  let s = create ~n:32 [ G.Pt2ptw.layer; G.Pt2pt.layer; G.Bottom.layer ] in
  (* Pt2ptw acknowledges 2 ms after it consumed a message below its threshold. *)
  let data r =
    from_send s r
    ^ Codec.encode_string G.Pt2pt.codec (G.Pt2pt.Data { seq = 0; ack = 0 })
    ^ Codec.encode_string G.Pt2ptw.codec (G.Pt2ptw.Data { ask = false })
    ^ "x"
  in
  let acks () = counter s "pt2ptw" "acks_sent" in
  advance s (ms 1);
  feed s (data 4);
  let seen = ref [] in
  for k = 2 to 30 do
    let before = acks () in
    advance s (ms k);
    if acks () > before then seen := (k, acks () - before) :: !seen;
    if k = 4 then feed s (data 20)
  done;
  Alcotest.(check (list (pair int int)))
    "each acknowledgement at its time (fed at 1 and 4 ms)"
    [ (3, 1); (6, 1) ]
    (List.rev !seen);
  stop s

let () =
  Alcotest.run "timers"
    [
      ( "deadlines",
        [
          Alcotest.test_case "pt2pt: retransmissions and acknowledgements on time, 32 members"
            `Quick pt2pt_deadlines;
          Alcotest.test_case "pt2ptw: acknowledgements on time, 32 members" `Quick pt2ptw_deadlines;
        ] );
    ]
