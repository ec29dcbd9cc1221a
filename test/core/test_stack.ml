(* Layers and stacks: contracts, message and control paths, alarms,
   garbage. *)

open Consort
open Util

let layer name ~provides:p ~requires:r : Layer.t =
  (module struct
    include Layer.Pass (struct
      let name = name
    end)

    let provides = p
    let requires = r
  end)

let bottom = layer "bottom" ~provides:[ Contract.datagram ] ~requires:[ Contract.net ]
let pt2pt = layer "pt2pt" ~provides:[ Contract.reliable_send ] ~requires:[ Contract.datagram ]
let mnak = layer "mnak" ~provides:[ Contract.reliable_cast ] ~requires:[ Contract.datagram ]
let top = layer "top" ~provides:[] ~requires:[ Contract.reliable_send; Contract.reliable_cast ]
let err = function Ok () -> Alcotest.fail "stack accepted" | Error s -> s

let contracts () =
  Alcotest.(check (result unit string)) "fits" (Ok ()) (Stack.check [ top; mnak; pt2pt; bottom ]);
  Alcotest.(check (result unit string))
    "application requires, provided" (Ok ())
    (Stack.check ~requires:[ Contract.reliable_cast ] [ mnak; pt2pt; bottom ]);
  let e = err (Stack.check [ top; pt2pt; bottom ]) in
  check_contains "names the layer" ~sub:"layer top requires reliable-cast" e;
  check_contains "lists what was there" ~sub:"reliable-send" e;
  let e = err (Stack.check [ top; mnak; pt2pt ]) in
  check_contains "missing bottom" ~sub:"layer pt2pt requires datagram" e;
  check_contains "only the transport" ~sub:"the transport provides only: net" e;
  let e = err (Stack.check [ bottom; pt2pt ]) in
  check_contains "wrong order" ~sub:"layer pt2pt requires datagram" e;
  let e = err (Stack.check ~requires:[ Contract.reliable_cast ] [ pt2pt; bottom ]) in
  check_contains "application" ~sub:"does not provide reliable-cast" e;
  check_contains "application" ~sub:"which the application requires" e;
  check_contains "stack named" ~sub:"pt2pt:bottom" e;
  Alcotest.(check (result unit string)) "empty" (Error "empty stack") (Stack.check []);
  Alcotest.(check string)
    "describe" "top:mnak:pt2pt:bottom"
    (Stack.describe [ top; mnak; pt2pt; bottom ]);
  Alcotest.(check string) "Layer.name" "pt2pt" (Layer.name pt2pt);
  Alcotest.(check (list string))
    "Layer.requires" [ "datagram" ]
    (List.map Contract.name (Layer.requires pt2pt));
  Alcotest.(check (list string))
    "Layer.provides" [ "reliable-send" ]
    (List.map Contract.name (Layer.provides pt2pt))

(* A bottom-like layer with a real header: the kind of destination and the
   sender's rank. It turns Raw into Cast_from / Send_from, asks for an
   alarm 10ms after each send, and reports Stop upwards. *)
type hdr = { cast : bool; from : int }
type Event.up_ctl += Stopped of int

module Hdr = struct
  type t = {
    ctx : Layer.ctx;
    out : header Layer.out;
    mutable ups : int;
    mutable dns : int;
    mutable ticks : Time.t list;
    mutable due : Time.t;
  }

  and header = hdr

  let name = "hdr"

  let codec =
    Codec.(
      union "hdr"
        [
          case 1 "cast" uint16
            (fun h -> if h.cast then Some h.from else None)
            (fun from -> { cast = true; from });
          case 2 "send" uint16
            (fun h -> if h.cast then None else Some h.from)
            (fun from -> { cast = false; from });
        ])

  let pp_header ppf h = Fmt.pf ppf "%s from %d" (if h.cast then "cast" else "send") h.from
  let provides = [ Contract.datagram ]
  let requires = [ Contract.net ]
  let create ctx out = { ctx; out; ups = 0; dns = 0; ticks = []; due = max_int }

  let up t _src h msg =
    t.ups <- t.ups + 1;
    t.out.up (if h.cast then Event.Cast_from h.from else Event.Send_from h.from) msg

  let up_ctl t e = t.out.up_ctl e

  let dn t dst msg =
    t.dns <- t.dns + 1;
    let now = t.ctx.now () in
    t.due <- min t.due (now + Time.of_ms 10);
    t.out.alarm t.due;
    t.out.dn dst { cast = dst = Event.Cast; from = t.ctx.view.View.rank } msg

  let dn_ctl t = function Event.Stop -> t.out.up_ctl (Stopped t.dns) | e -> t.out.dn_ctl e

  let timer t now =
    if now >= t.due then (
      t.ticks <- now :: t.ticks;
      t.due <- max_int)
    else if t.due < max_int then t.out.alarm t.due

  let counters t = [ ("up", t.ups); ("dn", t.dns); ("ticks", List.length t.ticks) ]
end

(* A layer numbering its messages with a varint header. *)
module Seq = struct
  type t = { out : header Layer.out; mutable next : int; mutable seen : int list }
  and header = int

  let name = "seq"
  let codec = Codec.varint
  let pp_header = Fmt.int
  let provides = []
  let requires = [ Contract.datagram ]
  let create _ out = { out; next = 0; seen = [] }

  let up t src h msg =
    t.seen <- h :: t.seen;
    t.out.up src msg

  let up_ctl t e = t.out.up_ctl e

  let dn t dst msg =
    let n = t.next in
    t.next <- n + 1;
    t.out.dn dst n msg

  let dn_ctl t e = t.out.dn_ctl e
  let timer _ _ = ()
  let counters t = [ ("next", t.next); ("seen", List.length t.seen) ]
end

module Pass1 = Layer.Pass (struct
  let name = "pass1"
end)

module Pass2 = Layer.Pass (struct
  let name = "pass2"
end)

module Pass3 = Layer.Pass (struct
  let name = "pass3"
end)

let layers : Layer.t list =
  [ (module Pass1); (module Seq); (module Pass2); (module Pass3); (module Hdr) ]

type node = {
  stack : Stack.t;
  out : (Event.dst * Msg.t) Queue.t;
  got : (Event.src * string) Queue.t;
  ctl : Event.up_ctl Queue.t;
}

let clock = ref 0

let make ?(layers = layers) pool rank =
  let view = View.v ~group:"g" ~members:[| "a"; "b"; "c" |] ~rank () in
  let ctx =
    { Layer.view; rng = Rng.create rank; params = Params.empty; pool; now = (fun () -> !clock) }
  in
  let out = Queue.create () and got = Queue.create () and ctl = Queue.create () in
  let app =
    {
      Stack.deliver =
        (fun src m ->
          Queue.push (src, Msg.to_string m) got;
          Msg.release m);
      ctl = (fun e -> Queue.push e ctl);
    }
  in
  match Stack.create ctx layers ~net:(fun dst m -> Queue.push (dst, m) out) ~app with
  | Ok stack -> { stack; out; got; ctl }
  | Error e -> Alcotest.fail e

let deliver pool ~from ~to_ =
  let dst, m = Queue.pop from.out in
  let v = Msg.to_iovec pool m in
  Msg.release m;
  Stack.recv to_.stack (Msg.of_iovec v);
  dst

let counter st layer name = List.assoc name (List.assoc layer (Stack.counters st))
let pp_src = Alcotest.testable Event.pp_src ( = )
let pp_dst = Alcotest.testable Event.pp_dst ( = )

let down_and_up () =
  let pool = fresh_pool () in
  clock := 0;
  let a = make pool 0 and b = make pool 1 in
  Alcotest.(check (list string))
    "layers top first"
    [ "pass1"; "seq"; "pass2"; "pass3"; "hdr" ]
    (Stack.layers a.stack);
  Alcotest.(check int) "view" 1 (Stack.view b.stack).View.rank;
  Stack.cast a.stack (Msg.of_string pool "hello");
  Stack.send a.stack 1 (Msg.of_string pool "direct");
  Alcotest.(check int) "two datagrams" 2 (Queue.length a.out);
  let _, first = Queue.peek a.out in
  Alcotest.(check string)
    "wire bytes: hdr, then seq, then body" "\x01\x00\x00\x00hello" (Msg.to_string first);
  Alcotest.(check pp_dst) "cast" Event.Cast (deliver pool ~from:a ~to_:b);
  Alcotest.(check pp_dst) "send" (Event.Send 1) (deliver pool ~from:a ~to_:b);
  Alcotest.(check (list (pair pp_src string)))
    "delivered"
    [ (Event.Cast_from 0, "hello"); (Event.Send_from 0, "direct") ]
    (List.of_seq (Queue.to_seq b.got));
  Alcotest.(check int) "seq numbers seen" 2 (counter b.stack "seq" "seen");
  Alcotest.(check int) "hdr up" 2 (counter b.stack "hdr" "up");
  Alcotest.(check int) "hdr dn" 2 (counter a.stack "hdr" "dn");
  Alcotest.(check int) "no garbage" 0 (counter b.stack "hdr" "garbage");
  Alcotest.(check (list string))
    "counters top first, each with garbage"
    [ "pass1"; "seq"; "pass2"; "pass3"; "hdr" ]
    (List.map fst (Stack.counters b.stack));
  Alcotest.(check bool)
    "garbage listed for pass layers" true
    (List.mem_assoc "garbage" (List.assoc "pass2" (Stack.counters b.stack)));
  no_leaks pool

let pass_only () =
  let pool = fresh_pool () in
  let a = make ~layers:[ (module Pass1); (module Pass2); (module Pass3) ] pool 0 in
  Stack.cast a.stack (Msg.of_string pool "plain");
  Stack.send a.stack 2 (Msg.of_string pool "to two");
  Alcotest.(check pp_dst) "cast reached net" Event.Cast (deliver pool ~from:a ~to_:a);
  Alcotest.(check pp_dst) "send reached net" (Event.Send 2) (deliver pool ~from:a ~to_:a);
  Alcotest.(check (list (pair pp_src string)))
    "back up, empty headers"
    [ (Event.Raw, "plain"); (Event.Raw, "to two") ]
    (List.of_seq (Queue.to_seq a.got));
  no_leaks pool

let control_events () =
  let pool = fresh_pool () in
  let a = make pool 0 in
  Stack.send a.stack 2 (Msg.empty ());
  Msg.release (snd (Queue.pop a.out));
  Stack.dn_ctl a.stack Event.Stop;
  (match List.of_seq (Queue.to_seq a.ctl) with
  | [ Stopped 1 ] -> ()
  | l -> Alcotest.failf "control events: %a" Fmt.(Dump.list Event.pp_up_ctl) l);
  no_leaks pool

let garbage () =
  let pool = fresh_pool () in
  let b = make pool 1 in
  let recv s = Stack.recv b.stack (Msg.of_iovec (Pool.of_string pool s)) in
  recv "\x01\x00";
  (* too short for hdr *)
  recv "\x09\x00\x00";
  (* unknown tag *)
  recv "\x01\x00\x02";
  (* hdr fine, seq missing *)
  recv "\x02\x00\x02\x80\x00";
  (* seq overlong *)
  Alcotest.(check int) "hdr garbage" 2 (counter b.stack "hdr" "garbage");
  Alcotest.(check int) "seq garbage" 2 (counter b.stack "seq" "garbage");
  Alcotest.(check int) "nothing delivered" 0 (Queue.length b.got);
  recv "\x02\x00\x02\x05ok";
  Alcotest.(check (list (pair pp_src string)))
    "good one delivered"
    [ (Event.Send_from 2, "ok") ]
    (List.of_seq (Queue.to_seq b.got));
  no_leaks pool

let alarms () =
  let pool = fresh_pool () in
  clock := Time.of_ms 100;
  let a = make pool 0 in
  Alcotest.(check int) "no alarm" max_int (Stack.next_alarm a.stack);
  Stack.cast a.stack (Msg.of_string pool "x");
  Alcotest.(check int) "alarm requested" (Time.of_ms 110) (Stack.next_alarm a.stack);
  clock := Time.of_ms 105;
  Stack.cast a.stack (Msg.of_string pool "y");
  Alcotest.(check int) "earliest kept" (Time.of_ms 110) (Stack.next_alarm a.stack);
  (* Called early: the layer re-arms its deadline. *)
  Stack.timer a.stack (Time.of_ms 106);
  Alcotest.(check int) "re-armed" (Time.of_ms 110) (Stack.next_alarm a.stack);
  Alcotest.(check int) "no tick yet" 0 (counter a.stack "hdr" "ticks");
  Stack.timer a.stack (Time.of_ms 110);
  Alcotest.(check int) "ticked" 1 (counter a.stack "hdr" "ticks");
  Alcotest.(check int) "nothing pending" max_int (Stack.next_alarm a.stack);
  Queue.iter (fun (_, m) -> Msg.release m) a.out;
  no_leaks pool

let create_refused () =
  let pool = fresh_pool () in
  let view = View.v ~group:"g" ~members:[| "a" |] ~rank:0 () in
  let ctx = { Layer.view; rng = Rng.create 1; params = Params.empty; pool; now = (fun () -> 0) } in
  let app = { Stack.deliver = (fun _ m -> Msg.release m); ctl = ignore } in
  (match Stack.create ctx [ top; bottom ] ~net:(fun _ m -> Msg.release m) ~app with
  | Ok _ -> Alcotest.fail "accepted"
  | Error e -> check_contains "create refuses" ~sub:"layer top requires reliable-send" e);
  match
    Stack.create ~requires:[ Contract.reliable_send ] ctx
      [ (module Seq); (module Hdr) ]
      ~net:(fun _ m -> Msg.release m)
      ~app
  with
  | Ok _ -> Alcotest.fail "accepted without reliable-send"
  | Error e -> check_contains "application requires" ~sub:"reliable-send" e

(* Re-entry's flags are the stack's own. A stack whose queued cast cannot
   go back on the fused path (the header above it is a control cast's,
   not the constant) sends it down layered, and while it goes down its
   layers below do not try again; a second stack in the same process,
   called from the first one's transport, still takes its own queued cast
   back on the fused path. Three layers, all with a fused declaration:
   [ctltop], whose casts carry 0 and whose control casts carry 1; [queue],
   which holds casts while told to and sends them down when told to
   flush; [framed], a bottom whose header is 0xC1. *)
type Event.dn_ctl += Hold | Flush | Control_cast

(* A layer whose casts carry the one header [h] (a control cast [h + 1]);
   [bottom]: the lowest, framed, which turns [Raw] into a cast from 0. *)
module Const (P : sig
  val name : string
  val h : int
  val bottom : bool
end) =
struct
  type t = { out : header Layer.out }
  and header = int

  let name = P.name
  let codec = Codec.uint8
  let pp_header = Fmt.int
  let provides = if P.bottom then [ Contract.datagram ] else []
  let requires = if P.bottom then [ Contract.net ] else [ Contract.datagram ]
  let create _ out = { out }
  let up t src _ msg = t.out.up (if P.bottom then Event.Cast_from 0 else src) msg
  let up_ctl t e = t.out.up_ctl e
  let dn t dst msg = t.out.dn dst P.h msg

  let dn_ctl t = function
    | Control_cast -> t.out.dn Event.Cast (P.h + 1) (Msg.empty ())
    | e -> t.out.dn_ctl e

  let timer _ _ = ()
  let counters _ = []

  let cast : (t, header) Layer.case =
    { (Layer.constant_cast codec P.h ~live:(fun _ -> true) ()) with framed = P.bottom }

  let state _ = ""
end

module Ctltop = Const (struct
  let name = "ctltop"
  let h = 0
  let bottom = false
end)

module Framed = Const (struct
  let name = "framed"
  let h = 0xC1
  let bottom = true
end)

module Holding = struct
  type t = { out : header Layer.out; mutable hold : bool; held : Msg.t Queue.t }
  and header = unit

  let name = "queue"
  let codec = Codec.unit
  let pp_header = Fmt.any "()"
  let provides = [ Contract.datagram ]
  let requires = [ Contract.datagram ]
  let create _ out = { out; hold = false; held = Queue.create () }
  let up t src () msg = t.out.up src msg
  let up_ctl t e = t.out.up_ctl e
  let dn t dst msg = if t.hold then Queue.push msg t.held else t.out.dn dst () msg

  let dn_ctl t = function
    | Hold -> t.hold <- true
    | Flush ->
        t.hold <- false;
        while not (Queue.is_empty t.held) do
          t.out.dn Event.Cast () (Queue.pop t.held)
        done
    | e -> t.out.dn_ctl e

  let timer _ _ = ()
  let counters t = [ ("held", Queue.length t.held) ]
  let cast : (t, header) Layer.case = Layer.constant_cast codec () ~live:(fun t -> not t.hold) ()
  let state t = if t.hold then "holding" else "open"
end

let queueing : Layer.t list =
  [ Layer.fast (module Ctltop); Layer.fast (module Holding); Layer.fast (module Framed) ]

(* A stack of these layers whose transport records the first byte of each
   datagram and then calls [on_send]. *)
let queueing_stack pool rank ~on_send =
  let view = View.v ~group:"g" ~members:[| "a"; "b" |] ~rank () in
  let ctx =
    { Layer.view; rng = Rng.create rank; params = Params.empty; pool; now = (fun () -> 0) }
  in
  let firsts = ref [] in
  let net _ m =
    firsts := Msg.first_byte m :: !firsts;
    Msg.release m;
    on_send ()
  in
  let app = { Stack.deliver = (fun _ m -> Msg.release m); ctl = ignore } in
  match Stack.create ~fused:true ctx queueing ~net ~app with
  | Ok st -> (st, firsts)
  | Error e -> Alcotest.fail e

let fused_counter st name = List.assoc name (Stack.fused_counters st)

let reentry_flags_per_stack () =
  let pool = fresh_pool () in
  let b, b_sent = queueing_stack pool 1 ~on_send:ignore in
  let flushed = ref false in
  let a, a_sent =
    queueing_stack pool 0 ~on_send:(fun () ->
        if not !flushed then begin
          flushed := true;
          Stack.dn_ctl b Flush
        end)
  in
  Alcotest.(check bool) "fused" true (Stack.fused a && Stack.fused b);
  (* b holds a cast of its own: the header above its queue is the constant. *)
  Stack.dn_ctl b Hold;
  Stack.cast b (Msg.of_string pool "b's cast");
  (* a holds a control cast: the header above its queue is not. *)
  Stack.dn_ctl a Hold;
  Stack.dn_ctl a Control_cast;
  Alcotest.(check (list int)) "nothing sent yet" [] (!a_sent @ !b_sent);
  (* a flushes; its transport, taking the control cast, makes b flush. *)
  Stack.dn_ctl a Flush;
  Alcotest.(check bool) "b flushed from a's transport" true !flushed;
  Alcotest.(check (list int)) "a's control cast left layered" [ 0xC1 ] !a_sent;
  Alcotest.(check int) "a refused it re-entry" 1 (fused_counter a "reentry_refused");
  Alcotest.(check int) "a re-entered nothing" 0 (fused_counter a "reentered");
  Alcotest.(check (list int)) "b's cast left compressed" [ 0xC8 ] !b_sent;
  Alcotest.(check int) "b's cast re-entered" 1 (fused_counter b "reentered");
  Alcotest.(check int) "b refused nothing" 0 (fused_counter b "reentry_refused");
  (* Each stack again, alone: b holds a cast again and flushes it. *)
  Stack.dn_ctl b Hold;
  Stack.cast b (Msg.of_string pool "again");
  Stack.dn_ctl b Flush;
  Alcotest.(check (list int)) "b's second cast compressed" [ 0xC8; 0xC8 ] !b_sent;
  Alcotest.(check int) "b's second re-entered" 2 (fused_counter b "reentered");
  no_leaks pool

let tests =
  [
    Alcotest.test_case "contract checking" `Quick contracts;
    Alcotest.test_case "create refuses a stack that does not fit" `Quick create_refused;
    Alcotest.test_case "Pass layers: down to net and back up" `Quick pass_only;
    Alcotest.test_case "down to net and back up, headers round-trip" `Quick down_and_up;
    Alcotest.test_case "control events down and up" `Quick control_events;
    Alcotest.test_case "garbage headers counted and dropped" `Quick garbage;
    Alcotest.test_case "alarms and timer" `Quick alarms;
    Alcotest.test_case "two stacks do not share re-entry's flags" `Quick reentry_flags_per_stack;
  ]
