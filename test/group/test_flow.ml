open Codec_props
open Consort
module G = Consort_group
module H = Harness

(* Every buffer handed out by [pool] has been released: none leaked to the
   collector, none still held. *)
let check_no_leaks pool =
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool);
  Alcotest.(check int) "segments still in use" 0 (Pool.in_use pool)

let kib n = n * 1024
let mib n = n * 1024 * 1024

(* {1 Codecs} *)

let nat = QCheck.Gen.(oneof [ small_nat; map (fun x -> x land max_int) int ])

let frag_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Frag.Whole;
        map (fun length -> G.Frag.First { length }) nat;
        map (fun index -> G.Frag.More { index }) nat;
      ])

let pt2ptw_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Pt2ptw.No_hdr;
        map (fun ask -> G.Pt2ptw.Data { ask }) bool;
        map (fun consumed -> G.Pt2ptw.Ack { consumed }) nat;
        return G.Pt2ptw.Ask;
      ])

let mflow_gen =
  QCheck.Gen.(
    oneof
      [
        return G.Mflow.No_hdr;
        map (fun ask -> G.Mflow.Data { ask }) bool;
        map (fun credits -> G.Mflow.Credit { credits }) (list_size (int_bound 20) (pair nat nat));
        return G.Mflow.Ask;
      ])

let codec_tests =
  [
    qtest (round_trip "frag" G.Frag.codec G.Frag.pp_header frag_gen);
    qtest (round_trip "pt2ptw" G.Pt2ptw.codec G.Pt2ptw.pp_header pt2ptw_gen);
    qtest (round_trip "mflow" G.Mflow.codec G.Mflow.pp_header mflow_gen);
    qtest (random_bytes "frag" G.Frag.codec [ 0; 1; 2; 3 ]);
    qtest (random_bytes "pt2ptw" G.Pt2ptw.codec [ 0; 1; 2; 3; 4; 5 ]);
    qtest (random_bytes "mflow" G.Mflow.codec [ 0; 1; 2; 3; 4; 5 ]);
    Alcotest.test_case "small headers" `Quick (fun () ->
        Alcotest.(check int) "whole" 1 (Codec.size G.Frag.codec G.Frag.Whole);
        Alcotest.(check int)
          "pt2ptw data" 1
          (Codec.size G.Pt2ptw.codec (G.Pt2ptw.Data { ask = true }));
        Alcotest.(check int) "mflow data" 1 (Codec.size G.Mflow.codec (G.Mflow.Data { ask = true }));
        Alcotest.(check int)
          "first of 16 MiB" 5
          (Codec.size G.Frag.codec (G.Frag.First { length = mib 16 })));
  ]

(* {1 Test layers} *)

(* A stand-in for the reliable layers under a layer tested by hand: it
   keeps what goes down for the test to inspect, and hands up what the test
   feeds in as coming from [from]. *)
module Wire = struct
  type t = unit Layer.out
  type header = unit

  let sent : (Event.dst * Msg.t) Queue.t = Queue.create ()
  let from = ref (Event.Cast_from 1)
  let on_dn = ref ignore
  let out = ref None
  let name = "wire"
  let codec = Codec.unit
  let pp_header = Fmt.any "()"
  let provides = [ Contract.reliable_cast; Contract.reliable_send ]
  let requires = []

  let create _ o =
    out := Some o;
    o

  let up o _ () msg = o.Layer.up !from msg
  let up_ctl o e = o.Layer.up_ctl e

  let dn _ dst msg =
    Queue.push (dst, msg) sent;
    let f = !on_dn in
    on_dn := ignore;
    f ()

  let dn_ctl o e = o.Layer.dn_ctl e
  let timer _ _ = ()
  let counters _ = []

  let take () =
    let l = List.of_seq (Queue.to_seq sent) in
    Queue.clear sent;
    l

  (* [blocked b] raises [Blocked b] from beneath the layer under test. *)
  let blocked b = match !out with Some o -> o.Layer.up_ctl (Event.Blocked b) | None -> ()

  let reset () =
    List.iter (fun (_, m) -> Msg.release m) (take ());
    from := Event.Cast_from 1;
    on_dn := ignore;
    out := None
end

(* The top of a stack: records the [Blocked] events that reach each rank's
   application, newest first. *)
module Probe = struct
  type t = { rank : int; out : unit Layer.out }
  type header = unit

  let events = ref [||]
  let reset n = events := Array.make n []
  let blocked r = match !events.(r) with b :: _ -> b | [] -> false
  let name = "probe"
  let codec = Codec.unit
  let pp_header = Fmt.any "()"
  let provides = []
  let requires = []
  let create (ctx : Layer.ctx) out = { rank = ctx.view.rank; out }
  let up t src () msg = t.out.up src msg

  let up_ctl t e =
    (match e with Event.Blocked b -> !events.(t.rank) <- b :: !events.(t.rank) | _ -> ());
    t.out.up_ctl e

  let dn t dst msg = t.out.dn dst () msg
  let dn_ctl t e = t.out.dn_ctl e
  let timer _ _ = ()
  let counters _ = []
end

(* A slow consumer: at rank [!rank], messages from [!from] going up wait in
   a queue and leave it one every [!period]; others pass at once. *)
module Slow = struct
  type t = {
    me : bool;
    out : unit Layer.out;
    now : unit -> Time.t;
    held : (Event.src * Msg.t) Queue.t;
    mutable bytes : int;
    mutable at : Time.t;
  }

  type header = unit

  let rank = ref 1
  let from = ref 0
  let period = ref (Time.of_ms 1)
  let name = "slow"
  let codec = Codec.unit
  let pp_header = Fmt.any "()"
  let provides = []
  let requires = []

  let create (ctx : Layer.ctx) out =
    {
      me = ctx.view.rank = !rank;
      out;
      now = ctx.now;
      held = Queue.create ();
      bytes = 0;
      at = max_int;
    }

  let up t src () msg =
    let origin = match src with Event.Cast_from o | Event.Send_from o -> o | Event.Raw -> -1 in
    if (not t.me) || origin <> !from then t.out.up src msg
    else begin
      Queue.push (src, msg) t.held;
      t.bytes <- t.bytes + Msg.length msg;
      if t.at = max_int then begin
        t.at <- t.now () + !period;
        t.out.alarm t.at
      end
    end

  let up_ctl t e = t.out.up_ctl e
  let dn t dst msg = t.out.dn dst () msg

  let dn_ctl t e =
    (match e with
    | Event.Stop ->
        Queue.iter (fun (_, m) -> Msg.release m) t.held;
        Queue.clear t.held;
        t.bytes <- 0;
        t.at <- max_int
    | _ -> ());
    t.out.dn_ctl e

  let timer t now =
    if t.at <= now then begin
      t.at <- max_int;
      (match Queue.take_opt t.held with
      | Some (src, m) ->
          t.bytes <- t.bytes - Msg.length m;
          t.out.up src m
      | None -> ());
      if not (Queue.is_empty t.held) then t.at <- now + !period
    end;
    if t.at <> max_int then t.out.alarm t.at

  let counters t = [ ("held", t.bytes) ]
end

let wire : Layer.t = (module Wire)
let probe : Layer.t = (module Probe)
let slow : Layer.t = (module Slow)

(* A header of two bytes, to show that Frag carries headers pushed above it. *)
module Tagged = struct
  type header = int
  type t = header Layer.out

  let name = "tagged"
  let codec = Codec.uint16
  let pp_header = Fmt.int
  let provides = []
  let requires = []
  let create _ (out : t) = out
  let last = ref (-1)

  let up out src h msg =
    last := h;
    out.Layer.up src msg

  let up_ctl out e = out.Layer.up_ctl e
  let dn out dst msg = out.Layer.dn dst 0xBEEF msg
  let dn_ctl out e = out.Layer.dn_ctl e
  let timer _ _ = ()
  let counters _ = []
end

(* {1 A single stack driven by hand} *)

type single = {
  st : Stack.t;
  clock : Time.t ref;
  got : (Event.src * Msg.t) Queue.t; (* delivered, owned by the test *)
  ctl : Event.up_ctl list ref; (* newest first *)
  pool : Pool.t;
}

let single ?(params = Params.empty) ?(n = 2) ?(rank = 0) layers =
  Wire.reset ();
  let pool = Pool.create () in
  let clock = ref 0 in
  let got = Queue.create () and ctl = ref [] in
  let view = View.v ~group:"test" ~members:(Array.init n (Printf.sprintf "m%d")) ~rank () in
  let ctx = { Layer.view; rng = Rng.create 7; params; pool; now = (fun () -> !clock) } in
  let net _ msg = Msg.release msg in
  let app =
    {
      Stack.deliver = (fun src msg -> Queue.push (src, msg) got);
      ctl = (fun e -> ctl := e :: !ctl);
    }
  in
  match Stack.create ctx layers ~net ~app with
  | Error e -> Alcotest.fail e
  | Ok st -> { st; clock; got; ctl; pool }

let counter s layer name = List.assoc name (List.assoc layer (Stack.counters s.st))

let advance s time =
  s.clock := time;
  if Stack.next_alarm s.st <= time then Stack.timer s.st time

(* [feed s src codec h body] hands up a received message with header [h]. *)
let feed s src codec h body =
  Wire.from := src;
  Stack.recv s.st (Msg.of_string s.pool (Codec.encode_string codec h ^ body))

let delivered s =
  let l = List.of_seq (Queue.to_seq s.got) in
  Queue.clear s.got;
  List.map
    (fun (src, m) ->
      let b = Msg.to_string m in
      Msg.release m;
      (src, b))
    l

(* Pulls [codec]'s header off a copy of a message that went down. *)
let header codec m =
  match Msg.pull codec (Msg.retain m) with
  | Ok (h, rest) ->
      let body = Msg.to_string rest in
      Msg.release rest;
      (h, body)
  | Error e -> Alcotest.failf "header: %a" Codec.pp_error e

(* What went down since the last call: destinations and [codec]'s headers. *)
let sent_headers codec =
  List.map
    (fun (d, m) ->
      let h, _ = header codec m in
      Msg.release m;
      (d, h))
    (Wire.take ())

let stop s =
  Stack.dn_ctl s.st Event.Stop;
  Wire.reset ();
  Queue.iter (fun (_, m) -> Msg.release m) s.got;
  Queue.clear s.got;
  check_no_leaks s.pool

let src_t = Alcotest.testable Event.pp_src ( = )
let dst_t = Alcotest.testable Event.pp_dst ( = )
let frag_t = Alcotest.testable G.Frag.pp_header ( = )
let pt2ptw_t = Alcotest.testable G.Pt2ptw.pp_header ( = )
let mflow_t = Alcotest.testable G.Mflow.pp_header ( = )

let pattern seed len =
  let rng = Rng.create seed in
  String.init len (fun _ -> Char.chr (Rng.int rng 256))

(* {1 Frag, by hand} *)

let frag_small () =
  let s = single [ G.Frag.layer; wire ] in
  Stack.cast s.st (Msg.of_string s.pool "hello");
  Stack.send s.st 1 (Msg.of_string s.pool "");
  let big = pattern 1 60_000 in
  Stack.send s.st 1 (Msg.of_string s.pool big);
  (match Wire.take () with
  | [ (d1, m1); (d2, m2); (d3, m3) ] ->
      Alcotest.check dst_t "cast" Event.Cast d1;
      Alcotest.check dst_t "send" (Event.Send 1) d2;
      Alcotest.check dst_t "send" (Event.Send 1) d3;
      Alcotest.(check string) "one byte in front" "\000hello" (Msg.to_string m1);
      Alcotest.(check string) "empty message" "\000" (Msg.to_string m2);
      Alcotest.(check int) "exactly one fragment's worth is whole" 60_001 (Msg.length m3);
      List.iter Msg.release [ m1; m2; m3 ]
  | l -> Alcotest.failf "expected three messages, got %d" (List.length l));
  Alcotest.(check int) "nothing fragmented" 0 (counter s "frag" "fragmented");
  stop s

let fill_pattern v seed =
  let cs = Iovec.cstruct v in
  let rng = Rng.create seed in
  for i = 0 to Cstruct.length cs - 1 do
    Cstruct.set_uint8 cs i (Rng.int rng 256)
  done

(* Fragments going down and the message reassembled from them are slices
   of the original buffer: no payload byte is copied, nothing allocated. *)
let frag_zero_copy () =
  let s = single [ G.Frag.layer; wire ] in
  let len = 200_000 in
  let v = Pool.alloc s.pool len in
  fill_pattern v 2;
  let expected = Iovec.to_string v in
  let seg = Iovec.segment v in
  let on_seg what body =
    List.iter
      (fun p ->
        Alcotest.(check bool) (what ^ " shares the original segment") true (Iovec.segment p == seg))
      body
  in
  let allocs = (Pool.stats s.pool).allocs in
  Stack.cast s.st (Msg.create [ v ]);
  Alcotest.(check int) "no allocation to fragment" allocs (Pool.stats s.pool).allocs;
  let frags = Wire.take () in
  Alcotest.(check int) "four fragments" 4 (List.length frags);
  List.iteri
    (fun i (d, m) ->
      Alcotest.check dst_t "cast" Event.Cast d;
      (match Msg.pull G.Frag.codec (Msg.retain m) with
      | Ok (h, rest) ->
          let want = if i = 0 then G.Frag.First { length = len } else G.Frag.More { index = i } in
          Alcotest.check frag_t "header" want h;
          Alcotest.(check int) "payload" (if i < 3 then 60_000 else 20_000) (Msg.length rest);
          let body = Msg.body rest in
          on_seg "fragment" body;
          Iovecs.release body;
          Msg.release rest
      | Error e -> Alcotest.failf "header: %a" Codec.pp_error e);
      Stack.recv s.st m)
    frags;
  Alcotest.(check int) "no allocation to reassemble" allocs (Pool.stats s.pool).allocs;
  (match List.of_seq (Queue.to_seq s.got) with
  | [ (src, m) ] ->
      Queue.clear s.got;
      Alcotest.check src_t "from 1" (Event.Cast_from 1) src;
      let body = Msg.body m in
      Alcotest.(check int) "four pieces" 4 (List.length body);
      on_seg "reassembled piece" body;
      Iovecs.release body;
      Alcotest.(check bool) "same bytes" true (Msg.to_string m = expected);
      Msg.release m
  | l -> Alcotest.failf "expected one message, got %d" (List.length l));
  Alcotest.(check int) "reassembled" 1 (counter s "frag" "reassembled");
  Alcotest.(check int) "nothing held" 0 (counter s "frag" "reassembling");
  stop s

(* Headers pushed by layers above Frag travel inside the fragments. *)
let frag_headers_above () =
  let params = Params.(empty |> set G.Frag.Param.size (Int 1000)) in
  let s = single ~params [ (module Tagged); G.Frag.layer; wire ] in
  let body = pattern 3 2500 in
  Stack.send s.st 1 (Msg.of_string s.pool body);
  Tagged.last := -1;
  Wire.from := Event.Send_from 1;
  let frags = Wire.take () in
  Alcotest.(check int) "three fragments" 3 (List.length frags);
  List.iter (fun (_, m) -> Stack.recv s.st m) frags;
  Alcotest.(check (list (pair src_t string))) "body" [ (Event.Send_from 1, body) ] (delivered s);
  Alcotest.(check int) "header of the layer above" 0xBEEF !Tagged.last;
  stop s

let frag_refuses () =
  let params =
    Params.(empty |> set G.Frag.Param.size (Int 1000) |> set G.Frag.Param.max_message (Int 10_000))
  in
  let s = single ~params [ G.Frag.layer; wire ] in
  Stack.cast s.st (Msg.of_string s.pool (String.make 10_001 'x'));
  Alcotest.(check int) "refused" 1 (counter s "frag" "refused");
  Alcotest.(check int) "nothing sent" 0 (List.length (sent_headers G.Frag.codec));
  Stack.cast s.st (Msg.of_string s.pool (String.make 10_000 'x'));
  let frags = Wire.take () in
  Alcotest.(check int) "the limit itself passes" 10 (List.length frags);
  List.iter (fun (_, m) -> Msg.release m) frags;
  (* Receiving: a first fragment claiming more than the limit is garbage,
     and so are the fragments that follow it. *)
  let first length = G.Frag.First { length } and more index = G.Frag.More { index } in
  feed s (Event.Cast_from 1) G.Frag.codec (first 10_001) (String.make 1000 'a');
  Alcotest.(check int) "oversize" 1 (counter s "frag" "oversize");
  feed s (Event.Cast_from 1) G.Frag.codec (more 1) (String.make 1000 'a');
  Alcotest.(check int) "orphan fragment" 1 (counter s "frag" "out_of_order");
  Alcotest.(check int) "nothing delivered" 0 (Queue.length s.got);
  stop s

let frag_garbage () =
  let params = Params.(empty |> set G.Frag.Param.size (Int 4)) in
  let s = single ~n:3 ~params [ G.Frag.layer; wire ] in
  let first length = G.Frag.First { length } and more index = G.Frag.More { index } in
  let c1 = Event.Cast_from 1 and s1 = Event.Send_from 1 and c2 = Event.Cast_from 2 in
  let f src h body = feed s src G.Frag.codec h body in
  (* A cast and a send of the same origin, and a cast of another, at once. *)
  f c1 (first 10) "aaaa";
  f s1 (first 6) "SSSS";
  f c2 (first 5) "xxxx";
  f c1 (more 1) "bbbb";
  Alcotest.(check int) "partial bytes held" 16 (counter s "frag" "reassembling");
  f s1 (more 1) "TT";
  f c1 (more 2) "cc";
  f c2 (more 1) "y";
  Alcotest.(check (list (pair src_t string)))
    "reassembled per origin and kind"
    [ (s1, "SSSSTT"); (c1, "aaaabbbbcc"); (c2, "xxxxy") ]
    (delivered s);
  (* Nonsense, each counted and dropped. *)
  f c1 (first 4) "abcd";
  f c1 (first 3) "abcd";
  Alcotest.(check int) "first fragment as long as the message" 2 (counter s "frag" "malformed");
  f c1 (first 12) "abcd";
  f c1 (more 1) "efgh";
  f c1 (more 1) "efgh";
  Alcotest.(check int) "a repeated index is dropped" 1 (counter s "frag" "out_of_order");
  f c1 (more 3) "ijkl";
  Alcotest.(check int) "a gap ruins the message" 2 (counter s "frag" "out_of_order");
  Alcotest.(check int) "nothing held after a gap" 0 (counter s "frag" "reassembling");
  f c1 (first 6) "abcd";
  f c1 (more 1) "efg";
  Alcotest.(check int) "overrun" 3 (counter s "frag" "malformed");
  f c1 (first 6) "abcd";
  f c1 (more 1) "";
  Alcotest.(check int) "empty fragment" 4 (counter s "frag" "malformed");
  f c1 (first 6) "abcd";
  f c1 G.Frag.Whole "w";
  Alcotest.(check int)
    "a whole message cuts a partial one short" 3 (counter s "frag" "out_of_order");
  Alcotest.(check (list (pair src_t string))) "only the whole one" [ (c1, "w") ] (delivered s);
  Wire.from := Event.Raw;
  Stack.recv s.st (Msg.of_string s.pool "\000raw");
  Alcotest.(check int) "invalid source" 5 (counter s "frag" "malformed");
  f c2 (first 6) "abcd";
  Alcotest.(check int) "held before stop" 4 (counter s "frag" "reassembling");
  Stack.dn_ctl s.st Event.Stop;
  Alcotest.(check int) "released on stop" 0 (counter s "frag" "reassembling");
  stop s

(* A message sent while fragments are being emitted goes after them. *)
let frag_reentrant () =
  let params = Params.(empty |> set G.Frag.Param.size (Int 4)) in
  let s = single ~params [ G.Frag.layer; wire ] in
  (Wire.on_dn := fun () -> Stack.send s.st 1 (Msg.of_string s.pool "late"));
  Stack.send s.st 1 (Msg.of_string s.pool "0123456789");
  let got =
    List.map
      (fun (_, m) ->
        let hb = header G.Frag.codec m in
        Msg.release m;
        hb)
      (Wire.take ())
  in
  Alcotest.(check (list (pair frag_t string)))
    "fragments, then the late message"
    [
      (G.Frag.First { length = 10 }, "0123");
      (G.Frag.More { index = 1 }, "4567");
      (G.Frag.More { index = 2 }, "89");
      (G.Frag.Whole, "late");
    ]
    got;
  stop s

(* {1 Pt2ptw, by hand} *)

let blocked_ctl s = List.filter_map (function Event.Blocked b -> Some b | _ -> None) !(s.ctl)

let pt2ptw_window () =
  let params =
    Params.(empty |> set G.Pt2ptw.Param.window (Int 3000) |> set G.Pt2ptw.Param.queue (Int 2200))
  in
  let s = single ~n:3 ~params [ G.Pt2ptw.layer; wire ] in
  let c = 1000 + G.Pt2ptw.overhead in
  let data ask = G.Pt2ptw.Data { ask } in
  let sent () = sent_headers G.Pt2ptw.codec in
  let check what want = Alcotest.(check (list (pair dst_t pt2ptw_t))) what want (sent ()) in
  for _ = 1 to 5 do
    Stack.send s.st 1 (Msg.of_string s.pool (String.make 1000 'x'))
  done;
  Stack.send s.st 2 (Msg.of_string s.pool "other peer");
  Stack.send s.st 0 (Msg.of_string s.pool "self");
  Stack.cast s.st (Msg.of_string s.pool "cast");
  check "two fit the window of peer 1, then it is asked; others pass"
    [
      (Event.Send 1, data false);
      (Event.Send 1, data false);
      (Event.Send 1, G.Pt2ptw.Ask);
      (Event.Send 2, data false);
      (Event.Send 0, G.Pt2ptw.No_hdr);
      (Event.Cast, G.Pt2ptw.No_hdr);
    ];
  Alcotest.(check int) "queued" (3 * c) (counter s "pt2ptw" "queued");
  Alcotest.(check int)
    "outstanding"
    ((2 * c) + 10 + G.Pt2ptw.overhead)
    (counter s "pt2ptw" "outstanding");
  Alcotest.(check (list bool)) "blocked once, past the queue limit" [ true ] (blocked_ctl s);
  let ack consumed = feed s (Event.Send_from 1) G.Pt2ptw.codec (G.Pt2ptw.Ack { consumed }) "" in
  ack (10 * c);
  Alcotest.(check int) "acknowledging unsent bytes" 1 (counter s "pt2ptw" "bad_ack");
  check "nothing for a bad acknowledgement" [];
  ack c;
  check "one more goes, asking: the window is full again" [ (Event.Send 1, data true) ];
  Alcotest.(check (list bool)) "still over half the limit" [ true ] (blocked_ctl s);
  ack (2 * c);
  check "and another" [ (Event.Send 1, data true) ];
  Alcotest.(check (list bool)) "unblocked at half the limit" [ false; true ] (blocked_ctl s);
  ack c;
  check "a stale acknowledgement changes nothing" [];
  ack (4 * c);
  check "the last one, nothing behind it" [ (Event.Send 1, data false) ];
  ack (5 * c);
  Alcotest.(check int)
    "nothing outstanding but to peer 2" (10 + G.Pt2ptw.overhead)
    (counter s "pt2ptw" "outstanding");
  Stack.send s.st 1 (Msg.of_string s.pool (String.make 5000 'y'));
  check "a message over the window goes alone" [ (Event.Send 1, data false) ];
  Stack.send s.st 1 (Msg.of_string s.pool "z");
  check "then the next waits" [ (Event.Send 1, G.Pt2ptw.Ask) ];
  Stack.send s.st 1 (Msg.of_string s.pool "z");
  check "asked once" [];
  feed s (Event.Cast_from 1) G.Pt2ptw.codec (G.Pt2ptw.Ack { consumed = 0 }) "";
  feed s (Event.Send_from 1) G.Pt2ptw.codec G.Pt2ptw.No_hdr "";
  feed s (Event.Send_from 0) G.Pt2ptw.codec (G.Pt2ptw.Data { ask = false }) "";
  Alcotest.(check int) "malformed" 3 (counter s "pt2ptw" "malformed");
  Stack.send s.st 3 (Msg.of_string s.pool "nobody");
  Alcotest.(check int) "bad destination" 1 (counter s "pt2ptw" "bad_dst");
  Stack.dn_ctl s.st Event.Stop;
  Alcotest.(check int) "queue released on stop" 0 (counter s "pt2ptw" "queued");
  stop s

let pt2ptw_acks () =
  let params = Params.(empty |> set G.Pt2ptw.Param.window (Int 4000)) in
  let s = single ~params [ G.Pt2ptw.layer; wire ] in
  let o = G.Pt2ptw.overhead in
  let data ?(ask = false) body =
    feed s (Event.Send_from 1) G.Pt2ptw.codec (G.Pt2ptw.Data { ask }) body
  in
  let acks () =
    List.map
      (function
        | Event.Send 1, G.Pt2ptw.Ack { consumed } -> consumed
        | d, h ->
            Alcotest.failf "expected an acknowledgement to 1, got %a to %a" G.Pt2ptw.pp_header h
              Event.pp_dst d)
      (sent_headers G.Pt2ptw.codec)
  in
  data "a";
  Alcotest.(check (list (pair src_t string))) "delivered" [ (Event.Send_from 1, "a") ] (delivered s);
  Alcotest.(check (list int)) "not yet acknowledged" [] (acks ());
  Alcotest.(check int) "acknowledgement delayed" (Time.of_ms 2) (Stack.next_alarm s.st);
  advance s (Time.of_ms 2);
  Alcotest.(check (list int)) "after the delay" [ 1 + o ] (acks ());
  data (String.make 1000 'b');
  Alcotest.(check (list int)) "a quarter of the window: at once" [ 1 + 1000 + (2 * o) ] (acks ());
  advance s (Time.of_ms 10);
  Alcotest.(check (list int)) "nothing more to acknowledge" [] (acks ());
  Alcotest.(check int) "timer off" max_int (Stack.next_alarm s.st);
  data ~ask:true "c";
  Alcotest.(check (list int)) "asked: at once" [ 1 + 1000 + 1 + (3 * o) ] (acks ());
  feed s (Event.Send_from 1) G.Pt2ptw.codec G.Pt2ptw.Ask "";
  Alcotest.(check (list int)) "asked with nothing owed" [] (acks ());
  data "d";
  feed s (Event.Send_from 1) G.Pt2ptw.codec G.Pt2ptw.Ask "";
  Alcotest.(check (list int)) "asked alone" [ 1 + 1000 + 1 + 1 + (4 * o) ] (acks ());
  Alcotest.(check int) "four acknowledgements" 4 (counter s "pt2ptw" "acks_sent");
  (* Blocked from below reaches the application merged with our own state. *)
  Wire.blocked true;
  Wire.blocked true;
  Wire.blocked false;
  Alcotest.(check (list bool)) "one alternation" [ false; true ] (blocked_ctl s);
  ignore (delivered s);
  stop s

(* {1 Mflow, by hand} *)

let mflow_credit () =
  let params =
    Params.(empty |> set G.Mflow.Param.window (Int 3000) |> set G.Mflow.Param.queue (Int 1000))
  in
  let s = single ~n:3 ~rank:0 ~params [ G.Mflow.layer; wire ] in
  let c = 1000 + G.Mflow.overhead and o = G.Mflow.overhead in
  let data_h ask = G.Mflow.Data { ask } in
  let check what want =
    Alcotest.(check (list (pair dst_t mflow_t))) what want (sent_headers G.Mflow.codec)
  in
  for _ = 1 to 4 do
    Stack.cast s.st (Msg.of_string s.pool (String.make 1000 'x'))
  done;
  Stack.send s.st 1 (Msg.of_string s.pool "send");
  check "two casts fit, then credit is asked for; sends pass"
    [
      (Event.Cast, data_h false);
      (Event.Cast, data_h false);
      (Event.Cast, G.Mflow.Ask);
      (Event.Send 1, G.Mflow.No_hdr);
    ];
  Alcotest.(check int) "queued" (2 * c) (counter s "mflow" "queued");
  Alcotest.(check (list bool)) "blocked" [ true ] (blocked_ctl s);
  let credit m credits = feed s (Event.Cast_from m) G.Mflow.codec (G.Mflow.Credit { credits }) "" in
  credit 1 [ (0, 2 * c) ];
  check "one member's credit is not enough" [];
  credit 2 [ (1, 5); (0, c) ];
  check "every member's is; the window is full again, and the ask is still unanswered"
    [ (Event.Cast, data_h false) ];
  Alcotest.(check int)
    "outstanding: cast less the least credit" (2 * c) (counter s "mflow" "outstanding");
  credit 2 [ (0, 3 * c); (7, 1) ];
  credit 2 [ (0, 10 * c) ];
  Alcotest.(check int) "credit for unknown ranks or unsent bytes" 2 (counter s "mflow" "bad_credit");
  check "ignored" [];
  credit 0 [ (0, 3 * c) ];
  Alcotest.(check int) "our own credit comes back, ignored" 0 (counter s "mflow" "malformed");
  feed s (Event.Send_from 1) G.Mflow.codec (G.Mflow.Credit { credits = [ (0, 3 * c) ] }) "";
  Alcotest.(check int) "credit by send is malformed" 1 (counter s "mflow" "malformed");
  credit 2 [ (0, 3 * c) ];
  check "the last one goes" [ (Event.Cast, data_h false) ];
  Alcotest.(check (list bool)) "blocked, then unblocked" [ false; true ] (blocked_ctl s);
  (* Receiving: credit cast back per origin, batched. *)
  let data ?(ask = false) m body =
    feed s (Event.Cast_from m) G.Mflow.codec (G.Mflow.Data { ask }) body
  in
  data 1 "a";
  data 2 "bb";
  data 0 "own";
  Alcotest.(check int) "delivered" 3 (List.length (delivered s));
  Alcotest.(check int) "credit delayed" (Time.of_ms 2) (Stack.next_alarm s.st);
  advance s (Time.of_ms 2);
  let credit_h credits = (Event.Cast, G.Mflow.Credit { credits }) in
  check "one cast for both origins, none for ourselves" [ credit_h [ (1, 1 + o); (2, 2 + o) ] ];
  data 2 (String.make 800 'c');
  check "a quarter of the window owed: at once" [ credit_h [ (2, 802 + (2 * o)) ] ];
  data ~ask:true 1 "d";
  check "asked: at once" [ credit_h [ (1, 2 + (2 * o)) ] ];
  feed s (Event.Cast_from 2) G.Mflow.codec G.Mflow.Ask "";
  check "asked with nothing owed" [];
  ignore (delivered s);
  credit 1 [ (0, 4 * c) ];
  credit 2 [ (0, 4 * c) ];
  Stack.cast s.st (Msg.of_string s.pool (String.make 5000 'y'));
  check "a cast over the window goes alone" [ (Event.Cast, data_h false) ];
  Stack.cast s.st (Msg.of_string s.pool "z");
  check "then the next waits" [ (Event.Cast, G.Mflow.Ask) ];
  Stack.dn_ctl s.st Event.Stop;
  Alcotest.(check int) "queue released on stop" 0 (counter s "mflow" "queued");
  stop s

let mflow_alone () =
  let params = Params.(empty |> set G.Mflow.Param.window (Int 100)) in
  let s = single ~n:1 ~params [ G.Mflow.layer; wire ] in
  for _ = 1 to 10 do
    Stack.cast s.st (Msg.of_string s.pool (String.make 100 'x'))
  done;
  Alcotest.(check int) "a group of one never waits" 10 (List.length (sent_headers G.Mflow.codec));
  stop s

(* {1 End to end, over the in-memory network} *)

(* Checks that each member delivers exactly the messages expected from
   each origin, per kind, in order, byte for byte. *)
module Expect = struct
  type t = {
    queues : (int * int * bool, string Queue.t) Hashtbl.t; (* (member, origin, cast) *)
    mutable errors : string list;
    mutable delivered : int;
    mutable last : Time.t; (* of the last delivery *)
  }

  let create () = { queues = Hashtbl.create 16; errors = []; delivered = 0; last = 0 }

  let queue t key =
    match Hashtbl.find_opt t.queues key with
    | Some q -> q
    | None ->
        let q = Queue.create () in
        Hashtbl.replace t.queues key q;
        q

  let error t fmt =
    Fmt.kstr (fun s -> if List.length t.errors < 10 then t.errors <- s :: t.errors) fmt

  let expect t ~n ~origin dst body =
    match dst with
    | Event.Cast ->
        for i = 0 to n - 1 do
          Queue.push body (queue t (i, origin, true))
        done
    | Event.Send d -> Queue.push body (queue t (d, origin, false))

  let deliver t h i src msg =
    let body = Msg.to_string msg in
    Msg.release msg;
    t.delivered <- t.delivered + 1;
    t.last <- H.now h;
    let key =
      match src with
      | Event.Cast_from o -> Some (i, o, true)
      | Event.Send_from o -> Some (i, o, false)
      | Event.Raw -> None
    in
    match key with
    | None -> error t "member %d: raw delivery" i
    | Some ((_, o, cast) as key) -> (
        match Queue.take_opt (queue t key) with
        | Some want when String.equal want body -> ()
        | Some want ->
            error t "member %d: %s from %d of %d bytes (digest %s), expected %d bytes (%s)" i
              (if cast then "cast" else "send")
              o (String.length body)
              (Digest.to_hex (Digest.string body))
              (String.length want)
              (Digest.to_hex (Digest.string want))
        | None -> error t "member %d: unexpected %s from %d" i (if cast then "cast" else "send") o)

  let complete t =
    Alcotest.(check (list string)) "delivery errors" [] (List.rev t.errors);
    Hashtbl.iter
      (fun (i, o, cast) q ->
        if not (Queue.is_empty q) then
          Alcotest.failf "member %d is missing %d %s from %d" i (Queue.length q)
            (if cast then "casts" else "sends")
            o)
      t.queues
end

let group ?params ?(net = H.faulty) ~seed ~pool ~n layers =
  let ex = Expect.create () in
  let hr = ref None in
  let deliver i src msg =
    match !hr with Some h -> Expect.deliver ex h i src msg | None -> Msg.release msg
  in
  let h = H.create ?params ~net ~seed ~pool ~n ~layers ~deliver () in
  hr := Some h;
  Probe.reset n;
  (h, ex)

let submit ex h ~n ~origin dst body msg =
  Expect.expect ex ~n ~origin dst body;
  match dst with
  | Event.Cast -> Stack.cast (H.stack h origin) msg
  | Event.Send d -> Stack.send (H.stack h origin) d msg

let quiesce ?(until = Time.of_sec 600.) h =
  match H.run ~until ~max_steps:20_000_000 h with
  | `Quiescent -> ()
  | `Timeout -> Alcotest.failf "no quiescence by %a" Time.pp (H.now h)

let sum h n layer name = List.fold_left ( + ) 0 (List.init n (fun i -> H.counter h i layer name))

let idle h n layers =
  List.iter
    (fun (layer, names) ->
      List.iter (fun name -> Alcotest.(check int) (layer ^ " " ^ name) 0 (sum h n layer name)) names)
    (List.filter
       (fun (l, _) -> List.mem l layers)
       [
         ("frag", [ "reassembling" ]);
         ("pt2ptw", [ "queued"; "outstanding" ]);
         ("mflow", [ "queued"; "outstanding" ]);
         ("pt2pt", [ "unacked"; "buffered" ]);
         ("mnak", [ "buffered" ]);
       ])

let names layers = List.map Layer.name layers
let blocked_events r = List.rev !Probe.events.(r)

(* [true; false; true; false; ...], at least one of each. *)
let alternates what l =
  let rec ok expect = function [] -> true | b :: rest -> b = expect && ok (not expect) rest in
  Alcotest.(check bool)
    (Printf.sprintf "%s: %s alternates, from true to false" what
       (String.concat "," (List.map string_of_bool l)))
    true
    (l <> [] && ok true l && not (List.nth l (List.length l - 1)))

let big_message pool seed len =
  let v = Pool.alloc pool len in
  let cs = Iovec.cstruct v in
  let rng = Rng.create seed in
  let i = ref 0 in
  while !i + 8 <= len do
    Cstruct.LE.set_uint64 cs !i (Rng.bits64 rng);
    i := !i + 8
  done;
  while !i < len do
    Cstruct.set_uint8 cs !i (Rng.int rng 256);
    incr i
  done;
  (Iovec.to_string v, Msg.create [ v ])

(* A 16 MiB cast and a 16 MiB send through a lossy network, verified byte
   for byte at every receiver. *)
let sixteen layers () =
  let pool = Pool.create () in
  let n = 3 in
  let h, ex = group ~seed:5 ~pool ~n (probe :: layers) in
  let len = mib 16 in
  H.at h (Time.of_ms 1) (fun () ->
      let body, msg = big_message pool 1 len in
      submit ex h ~n ~origin:0 Event.Cast body msg;
      let body, msg = big_message pool 2 len in
      submit ex h ~n ~origin:0 (Event.Send 1) body msg;
      let body, msg = big_message pool 3 (len - 1) in
      submit ex h ~n ~origin:2 (Event.Send 0) body msg);
  quiesce h;
  Expect.complete ex;
  Alcotest.(check int) "five large deliveries" 5 ex.delivered;
  Alcotest.(check int) "fragmented" 3 (sum h n "frag" "fragmented");
  Alcotest.(check int) "reassembled" 5 (sum h n "frag" "reassembled");
  Alcotest.(check bool)
    "losses were repaired" true
    (sum h n "pt2pt" "retransmissions" > 0 && sum h n "mnak" "naks_sent" > 0);
  Fmt.pr "done at %a after %d datagrams; %d retransmitted by pt2pt, %d NAKs@." Time.pp (H.now h)
    (H.datagrams h)
    (sum h n "pt2pt" "retransmissions")
    (sum h n "mnak" "naks_sent");
  idle h n (names layers);
  if List.mem "pt2ptw" (names layers) then alternates "member 0" (blocked_events 0);
  H.stop h;
  check_no_leaks pool

(* Many messages from empty to three fragments, casts and sends from
   every member, over a lossy network: each delivered once, in order. *)
let mixed () =
  let pool = Pool.create () in
  let n = 4 in
  let size = 1000 in
  let params =
    Params.(
      empty |> set G.Frag.Param.size (Int size)
      |> set G.Pt2ptw.Param.window (Int (kib 16))
      |> set G.Mflow.Param.window (Int (kib 16)))
  in
  let layers =
    [ G.Frag.layer; G.Pt2ptw.layer; G.Mflow.layer; G.Mnak.layer; G.Pt2pt.layer; G.Bottom.layer ]
  in
  let h, ex = group ~params ~seed:7 ~pool ~n layers in
  let rng = Rng.create 9 in
  let count = ref 0 in
  for origin = 0 to n - 1 do
    for k = 0 to 149 do
      let len =
        match Rng.int rng 6 with
        | 0 -> 0
        | 1 -> size
        | 2 -> (3 * size) - Rng.int rng 3
        | _ -> Rng.int rng (3 * size)
      in
      let body = pattern ((origin * 1000) + k) len in
      let dst = if Rng.bool rng then Event.Cast else Event.Send (Rng.int rng n) in
      incr count;
      H.at h
        ((k / 10 * Time.of_ms 10) + Rng.int rng (Time.of_ms 10))
        (fun () -> submit ex h ~n ~origin dst body (Msg.of_string pool body))
    done
  done;
  quiesce h;
  Expect.complete ex;
  Alcotest.(check bool) "some were fragmented" true (sum h n "frag" "fragmented" > 50);
  Alcotest.(check bool) "losses were repaired" true (sum h n "pt2pt" "retransmissions" > 0);
  idle h n (names layers);
  H.stop h;
  check_no_leaks pool

let slow_receiver ~layer ~n ~dst () =
  let pool = Pool.create () in
  let window = kib 64 and limit = kib 128 and len = 4000 in
  let params =
    Params.(
      empty
      |> set G.Pt2ptw.Param.window (Int window)
      |> set G.Pt2ptw.Param.queue (Int limit)
      |> set G.Mflow.Param.window (Int window)
      |> set G.Mflow.Param.queue (Int limit))
  in
  let reliable = if layer = "pt2ptw" then G.Pt2pt.layer else G.Mnak.layer in
  let flow = if layer = "pt2ptw" then G.Pt2ptw.layer else G.Mflow.layer in
  Slow.rank := n - 1;
  Slow.period := Time.of_ms 1;
  let h, ex =
    group ~params ~net:H.perfect ~seed:11 ~pool ~n [ probe; flow; slow; reliable; G.Bottom.layer ]
  in
  let count = 300 in
  let made = ref 0 in
  let rec tick time =
    H.at h time (fun () ->
        let budget = ref 100 in
        while !made < count && (not (Probe.blocked 0)) && !budget > 0 do
          decr budget;
          let body = pattern !made len in
          incr made;
          submit ex h ~n ~origin:0 dst body (Msg.of_string pool body)
        done;
        if !made < count then tick (time + Time.of_us 200))
  in
  tick (Time.of_ms 1);
  let cost = len + G.Pt2ptw.overhead in
  let peak_out = ref 0 and peak_queued = ref 0 and peak_held = ref 0 in
  let every () =
    peak_out := max !peak_out (H.counter h 0 layer "outstanding");
    peak_queued := max !peak_queued (H.counter h 0 layer "queued");
    peak_held := max !peak_held (H.counter h (n - 1) "slow" "held")
  in
  (match H.run ~until:(Time.of_sec 60.) ~max_steps:5_000_000 ~every h with
  | `Quiescent -> ()
  | `Timeout -> Alcotest.failf "no quiescence by %a" Time.pp (H.now h));
  Expect.complete ex;
  Alcotest.(check int) "all made" count !made;
  Alcotest.(check bool)
    (Printf.sprintf "bytes in flight (peak %d) bounded by the window (%d)" !peak_out window)
    true
    (!peak_out <= window && !peak_out > window / 2);
  Alcotest.(check bool)
    (Printf.sprintf "bytes held by the slow receiver (peak %d) fill the window (%d)" !peak_held
       window)
    true
    (!peak_held <= window && !peak_held > window - (2 * cost));
  Alcotest.(check bool)
    (Printf.sprintf "queue (peak %d) bounded by its limit (%d) and one message" !peak_queued limit)
    true
    (!peak_queued > limit && !peak_queued <= limit + cost);
  alternates "sender" (blocked_events 0);
  Alcotest.(check bool) "blocked more than once" true (List.length (blocked_events 0) >= 4);
  Alcotest.(check bool)
    (Fmt.str "paced by the receiver (done at %a)" Time.pp ex.last)
    true
    (ex.last >= Time.of_ms count && ex.last <= Time.of_ms (count + 20));
  idle h n [ layer ];
  H.stop h;
  check_no_leaks pool

(* With no loss, a sender with everything queued at once goes at the
   window's pace: one window per round trip, not slower. *)
let throughput ~layer ~n ~dst () =
  let pool = Pool.create () in
  let window = kib 64 and len = 1000 and count = 2000 in
  let params =
    Params.(
      empty |> set G.Pt2ptw.Param.window (Int window) |> set G.Mflow.Param.window (Int window))
  in
  let layers =
    if layer = "pt2ptw" then [ G.Pt2ptw.layer; G.Pt2pt.layer; G.Bottom.layer ]
    else [ G.Mflow.layer; G.Mnak.layer; G.Bottom.layer ]
  in
  let h, ex = group ~params ~net:H.perfect ~seed:13 ~pool ~n (probe :: layers) in
  H.at h 0 (fun () ->
      for k = 0 to count - 1 do
        let body = pattern k len in
        submit ex h ~n ~origin:0 dst body (Msg.of_string pool body)
      done);
  quiesce h;
  Expect.complete ex;
  let rtt = 2 * H.perfect.min_delay in
  let rounds = float_of_int (count * (len + G.Pt2ptw.overhead)) /. float_of_int window in
  let fastest = int_of_float ((rounds -. 1.) *. float_of_int rtt) in
  let slowest = int_of_float ((Float.ceil rounds +. 2.) *. float_of_int rtt) in
  Alcotest.(check bool)
    (Fmt.str "done at %a, between %a (window-bound) and %a" Time.pp ex.last Time.pp fastest Time.pp
       slowest)
    true
    (ex.last >= fastest && ex.last <= slowest);
  idle h n [ layer ];
  H.stop h;
  check_no_leaks pool

let () =
  Iovec.set_checked true;
  Alcotest.run "flow"
    [
      ("codecs", codec_tests);
      ( "frag",
        [
          Alcotest.test_case "small messages pass whole, with one byte" `Quick frag_small;
          Alcotest.test_case "fragments and reassembles without copying" `Quick frag_zero_copy;
          Alcotest.test_case "carries headers pushed above it" `Quick frag_headers_above;
          Alcotest.test_case "refuses messages over the limit, both ways" `Quick frag_refuses;
          Alcotest.test_case "reassembles per origin and kind, drops nonsense" `Quick frag_garbage;
          Alcotest.test_case "never interleaves messages" `Quick frag_reentrant;
        ] );
      ( "pt2ptw",
        [
          Alcotest.test_case "window, queue, blocked" `Quick pt2ptw_window;
          Alcotest.test_case "batched acknowledgements, merged blocked events" `Quick pt2ptw_acks;
          Alcotest.test_case "a slow receiver paces the sender" `Quick
            (slow_receiver ~layer:"pt2ptw" ~n:2 ~dst:(Event.Send 1));
          Alcotest.test_case "no loss: one window per round trip" `Quick
            (throughput ~layer:"pt2ptw" ~n:2 ~dst:(Event.Send 1));
        ] );
      ( "mflow",
        [
          Alcotest.test_case "credit from every member, queue, blocked" `Quick mflow_credit;
          Alcotest.test_case "a group of one" `Quick mflow_alone;
          Alcotest.test_case "the slowest member paces the caster" `Quick
            (slow_receiver ~layer:"mflow" ~n:3 ~dst:Event.Cast);
          Alcotest.test_case "no loss: one window per round trip" `Quick
            (throughput ~layer:"mflow" ~n:3 ~dst:Event.Cast);
        ] );
      ( "stacks",
        [
          Alcotest.test_case "16 MiB cast and sends: frag:mnak:pt2pt:bottom, lossy" `Quick
            (sixteen [ G.Frag.layer; G.Mnak.layer; G.Pt2pt.layer; G.Bottom.layer ]);
          Alcotest.test_case "16 MiB cast and sends: the whole flow-controlled stack, lossy" `Quick
            (sixteen
               [
                 G.Frag.layer;
                 G.Pt2ptw.layer;
                 G.Mflow.layer;
                 G.Mnak.layer;
                 G.Pt2pt.layer;
                 G.Bottom.layer;
               ]);
          Alcotest.test_case "mixed sizes, casts and sends, FIFO, lossy" `Quick mixed;
        ] );
    ]
