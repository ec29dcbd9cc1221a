(* The fused path is the layered path: a member runs in two copies, one
   stack layered and one fused, side by side, fed the same random traces
   (its casts and sends, its peers' casts and sends delivered late,
   reordered, duplicated or lost, timers, view changes), and after every event both
   copies must have put the same datagrams on the wire (the fused one's
   compressed casts made layered again), delivered the same messages and
   control events to the application, asked for the same alarm, and hold
   the same state in every layer. The peers are fused stacks: their
   compressed casts go to the fused copy as they are and to the layered
   copy made layered. *)

open Consort
module G = Consort_group

let pass name =
  Layer.fast_send
    (module Layer.Pass_fast (struct
      let name = name
    end))

let pass1 = pass "pass1"
let pass2 = pass "pass2"

(* A layer whose common case is its liveness alone, which its timer
   changes: it closes and opens every 10 ms; closed, its layered path
   holds what goes down until it opens again (or the view flushes). The
   fused path, which skips such a layer while it is open, must see it
   close. *)
let gate_held = ref 0

module Gate = struct
  type t = {
    out : unit Layer.out;
    now : unit -> Time.t;
    mutable closed : bool;
    mutable at : Time.t;
    held : (Event.dst * Msg.t) Queue.t;
  }

  type header = unit

  let name = "gate"
  let codec = Codec.unit
  let pp_header = Fmt.nop
  let provides = []
  let requires = []
  let period = Time.of_ms 10

  let create (ctx : Layer.ctx) out =
    let at = Time.add (ctx.now ()) period in
    out.Layer.alarm at;
    { out; now = ctx.now; closed = false; at; held = Queue.create () }

  let up t src () msg = t.out.up src msg

  let dn t dst msg =
    if t.closed then begin
      incr gate_held;
      Queue.push (dst, msg) t.held
    end
    else t.out.dn dst () msg

  let release t =
    while not (Queue.is_empty t.held) do
      let dst, msg = Queue.pop t.held in
      t.out.dn dst () msg
    done

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Block_req _ -> release t
    | Event.Stop ->
        Queue.iter (fun (_, m) -> Msg.release m) t.held;
        Queue.clear t.held
    | _ -> ());
    t.out.dn_ctl e

  let timer t now =
    if now >= t.at then begin
      t.closed <- not t.closed;
      t.at <- Time.add now period;
      if not t.closed then release t
    end;
    t.out.alarm t.at

  let counters _ = []
  let cast = Layer.constant_cast codec () ~live:(fun t -> not t.closed) ()
  let send = Layer.constant_send codec () ~live:(fun t -> not t.closed) ()
  let state t = Fmt.str "closed %b at %d held %d" t.closed t.at (Queue.length t.held)
end

let gate = Layer.fast_send (module Gate)

(* A layer whose cast (and send) is its liveness alone going down (always
   live), not going up: it turns deaf and hears again every 7 ms, and
   deaf, its layered path drops what comes up. The fused path must still ask it
   going up. *)
let ear_dropped = ref 0

module Ear = struct
  type t = { out : unit Layer.out; mutable deaf : bool; mutable at : Time.t }
  type header = unit

  let name = "ear"
  let codec = Codec.unit
  let pp_header = Fmt.nop
  let provides = []
  let requires = []
  let period = Time.of_ms 7

  let create (ctx : Layer.ctx) out =
    let at = Time.add (ctx.now ()) period in
    out.Layer.alarm at;
    { out; deaf = false; at }

  let up t src () msg =
    if t.deaf then begin
      incr ear_dropped;
      Msg.release msg
    end
    else t.out.up src msg

  let dn t dst msg = t.out.dn dst () msg
  let up_ctl t e = t.out.up_ctl e
  let dn_ctl t e = t.out.dn_ctl e

  let timer t now =
    if now >= t.at then begin
      t.deaf <- not t.deaf;
      t.at <- Time.add now period
    end;
    t.out.alarm t.at

  let counters _ = []

  let cast =
    {
      (Layer.constant_cast codec () ~live:(fun _ -> true) ()) with
      up_live = false;
      up_ok =
        (fun t src _ _ _ -> (not t.deaf) && match src with Event.Cast_from _ -> true | _ -> false);
    }

  let send =
    {
      (Layer.constant_send codec () ~live:(fun _ -> true) ()) with
      up_live = false;
      up_ok =
        (fun t src _ _ _ -> (not t.deaf) && match src with Event.Send_from _ -> true | _ -> false);
    }

  let state t = Fmt.str "deaf %b at %d" t.deaf t.at
end

let ear = Layer.fast_send (module Ear)
let total = G.Properties.(vsync @ [ Total ])

let stacks =
  G.
    [|
      ("pt2pt:mnak:bottom", [ Pt2pt.layer; Mnak.layer; Bottom.layer ]);
      ("pt2pt:mnak:suspect:bottom", [ Pt2pt.layer; Mnak.layer; Suspect.layer; Bottom.layer ]);
      ( "pass1:pass2:pt2pt:mnak:suspect:bottom",
        [ pass1; pass2; Pt2pt.layer; Mnak.layer; Suspect.layer; Bottom.layer ] );
      ( "frag:pt2ptw:mflow:slander:pt2pt:mnak:suspect:bottom",
        [
          Frag.layer;
          Pt2ptw.layer;
          Mflow.layer;
          Slander.layer;
          Pt2pt.layer;
          Mnak.layer;
          Suspect.layer;
          Bottom.layer;
        ] );
      (Properties.describe Properties.vsync, Result.get_ok (Properties.layers Properties.vsync));
      (Properties.describe total, Result.get_ok (Properties.layers total));
      ( Properties.describe total ^ " (token)",
        Result.get_ok (Properties.layers Properties.(vsync @ [ Total ])) );
      ( "ear:gate:pt2pt:mnak:suspect:bottom",
        [ ear; gate; Pt2pt.layer; Mnak.layer; Suspect.layer; Bottom.layer ] );
    |]

let params =
  Params.(
    empty |> set "mnak.window" (Int 8) |> set "mflow.window" (Int 256) |> set "pt2pt.window" (Int 8)
    |> set "frag.size" (Int 600) |> set "pt2ptw.window" (Int 2000))

(* The stacks with Total: the sequencer protocol, then the token one. *)
let is_total i = i = 5 || i = 6
let token_stack = 6

let params_of i =
  (* With Total, a wider flow control window: more casts in flight, more
     orders that overtake the casts they order. *)
  let p = if is_total i then Params.set "mflow.window" (Int 2048) params else params in
  if i = token_stack then Params.set "total.protocol" (String "token") p else p

let n = 3

type copy = {
  st : Stack.t;
  wire : string Queue.t; (* what this copy put on the wire since the last check, layered *)
  app : string Queue.t; (* what reached its application since the last check *)
}

exception Differ of string

let failf fmt = Fmt.kstr (fun s -> raise (Differ s)) fmt
let dst_s = function Event.Cast -> "cast" | Event.Send r -> "send " ^ string_of_int r

let src_s = function
  | Event.Cast_from r -> "cast from " ^ string_of_int r
  | Event.Send_from r -> "send from " ^ string_of_int r
  | Event.Raw -> "raw"

(* Totals over the traces, to show that the traces exercise what they
   are meant to. *)
let fused_sent = ref 0
let fused_received = ref 0
let left_and_came_back = ref 0

(* Traces of a stack with Total where a cast left the bypass at Total (a
   cast out of its turn, a view change, a token) and a later cast went
   through it to the application again; casts delivered by the bypass
   with Total in the stack. *)
let total_traces = ref 0
let total_came_back = ref 0
let total_fused_delivered = ref 0
let total_sends_delivered = ref 0
let view_changes = ref 0

(* With Total, per protocol (0: sequencer, 1: token): received casts held
   on the bypass (waiting for their place) and orders taken in on it;
   casts released from there to the application; traces where two members
   or more cast, casts were held on the bypass, and the view changed
   midway with casts held on the bypass before the change. *)
let total_held = [| 0; 0 |]
let total_released = [| 0; 0 |]
let total_several = [| 0; 0 |]
let total_changed_held = [| 0; 0 |]

(* Total (sequencer): orders of two runs that this member's fused copy
   received compressed, those it took in on the bypass, and traces where
   it did so and the view changed. *)
let two_runs_received = ref 0
let two_runs_bypassed = ref 0
let two_runs_changed = ref 0

(* How many fields a compressed cast of the stack [layers] carries. *)
let cast_fields layers =
  List.fold_left
    (fun a l ->
      match Layer.find_fast l with Some (module F : Layer.FAST) -> a + F.cast.nfields | None -> a)
    0 layers

(* The fields of a compressed cast of the stack [layers], if [raw] is one. *)
let fields_of layers raw =
  let nf = cast_fields layers in
  if String.length raw < 2 || raw.[0] <> '\xc8' || raw.[1] <> '\000' then None
  else
    (* Varints: seven bits a byte, low first, the high bit set but in the last. *)
    let a = Array.make nf 0 and pos = ref 2 in
    try
      for k = 0 to nf - 1 do
        let v = ref 0 and shift = ref 0 and last = ref false in
        while not !last do
          let c = Char.code raw.[!pos] in
          incr pos;
          v := !v lor ((c land 0x7f) lsl !shift);
          shift := !shift + 7;
          last := c < 0x80
        done;
        a.(k) <- !v
      done;
      Some a
    with Invalid_argument _ -> None

let counter c name = Option.value ~default:0 (List.assoc_opt name c)

(* Sends: compressed ones sent and received by the fused copies, sends
   the bypass delivered, traces where a send left the bypass (loss, a gap,
   a full window, a view change) and a later one was delivered by it
   again, and sends that left it going down at Pt2ptw (its window full). *)
let sends_sent = ref 0
let sends_received = ref 0
let sends_delivered = ref 0
let sends_came_back = ref 0
let sends_window = ref 0

(* A step of a written trace. *)
type step =
  | Cast of string  (** this member casts *)
  | Peer_cast of int * string
  | Timers  (** every timer due now runs *)
  | Deliver of int * int  (** the datagrams in flight from one rank to another arrive, in order *)
  | Expect of string list  (** what this member's application got in the step before *)
  | Bypassed of int  (** casts the fused copy's bypass delivered so far *)

(* [script]: a written trace (the stack, this member's rank, the steps)
   instead of a random one. *)
let run_trace ?script ~seed () =
  let rs = Random.State.make [| seed |] in
  let si = match script with Some (si, _, _) -> si | None -> seed mod Array.length stacks in
  let name, layers = stacks.(si) in
  let params = params_of si in
  let pool = Pool.create () in
  let clock = ref 0 in
  (* datagrams in flight: (destination rank, from, raw bytes, layered bytes) *)
  let flight : (int * int * string * string) list ref = ref [] in
  (* This member's rank (with Total: the sequencer or not), and the view:
     a view change makes new stacks with another id, and maybe another
     rank for this member. *)
  let me =
    ref (match script with Some (_, me, _) -> me | None -> seed / Array.length stacks mod n)
  in
  let ltime = ref 1 in
  let ctx rank seed =
    let view =
      View.v ~group:"fused" ~ltime:!ltime ~members:(Array.init n (Printf.sprintf "m%d")) ~rank ()
    in
    { Layer.view; rng = Rng.create seed; params; pool; now = (fun () -> !clock) }
  in
  let expand st msg =
    match Stack.expand st msg with
    | Ok m ->
        let s = Msg.to_string m in
        Msg.release m;
        s
    | Error e -> failf "a compressed datagram does not expand: %a" Codec.pp_error e
  in
  let route from dst raw layered =
    let to_ r = flight := !flight @ [ (r, from, raw, layered) ] in
    match dst with
    | Event.Cast ->
        for r = 0 to n - 1 do
          if r <> from then to_ r
        done
    | Event.Send r -> if r >= 0 && r < n && r <> from then to_ r
  in
  (* An order of two runs, compressed (Total's fields are the last four:
     the top layer's). *)
  let two_run_order raw =
    is_total si && si <> token_stack
    && match fields_of layers raw with Some f -> f.(Array.length f - 1) > 0 | None -> false
  in
  let two_sent = ref 0 and two_runs = ref 0 in
  let make_copy ~fused =
    let self = ref None in
    let wire = Queue.create () and app = Queue.create () in
    let me = !me in
    let net dst msg =
      let raw = Msg.to_string msg in
      let layered = expand (Option.get !self) msg in
      Queue.push (dst_s dst ^ ": " ^ layered) wire;
      (* The fused copy's datagrams go to the peers; the layered copy's
         are only compared. *)
      if fused then begin
        if two_run_order raw then incr two_sent;
        route me dst raw layered
      end
    in
    let deliver src msg =
      Queue.push (src_s src ^ ": " ^ Msg.to_string msg) app;
      Msg.release msg
    in
    let ctl e = Queue.push (Fmt.str "ctl %a" Event.pp_up_ctl e) app in
    match
      Stack.create ~fused
        (ctx me (seed + (100 * !ltime) + 1))
        layers ~net ~app:{ Stack.deliver; ctl }
    with
    | Error e -> failwith e
    | Ok st ->
        self := Some st;
        { st; wire; app }
  in
  let make_peers () =
    Array.init n (fun r ->
        if r = !me then None
        else
          let self = ref None in
          let net dst msg =
            let raw = Msg.to_string msg in
            let layered = expand (Option.get !self) msg in
            route r dst raw layered
          in
          let app = { Stack.deliver = (fun _ m -> Msg.release m); ctl = ignore } in
          match
            Stack.create ~fused:true (ctx r (seed + (100 * !ltime) + 10 + r)) layers ~net ~app
          with
          | Error e -> failwith e
          | Ok st ->
              self := Some st;
              Some st)
  in
  let a = ref (make_copy ~fused:false) and b = ref (make_copy ~fused:true) in
  if not (Stack.fused !b.st) then failf "%s: the fused copy is not fused" name;
  let peers = ref (make_peers ()) in
  let peer r = Option.get !peers.(r) in
  let other () = (!me + 1 + Random.State.int rs (n - 1)) mod n in
  let body () =
    let len =
      match Random.State.int rs 10 with
      | 0 -> 0
      | 1 -> 700 + Random.State.int rs 800
      | _ -> 1 + Random.State.int rs 40
    in
    String.init len (fun _ -> Char.chr (97 + Random.State.int rs 26))
  in
  let got_last = ref [] in
  let compare_copies step what =
    let a = !a and b = !b in
    let drain q = List.of_seq (Queue.to_seq q) in
    let wa = drain a.wire and wb = drain b.wire in
    Queue.clear a.wire;
    Queue.clear b.wire;
    if wa <> wb then
      failf "%s, seed %d, step %d (%s): wire differs:@.layered %a@.fused   %a" name seed step what
        Fmt.(Dump.list string)
        wa
        Fmt.(Dump.list string)
        wb;
    let aa = drain a.app and ab = drain b.app in
    Queue.clear a.app;
    Queue.clear b.app;
    got_last := ab;
    if aa <> ab then
      failf "%s, seed %d, step %d (%s): application differs:@.layered %a@.fused   %a" name seed step
        what
        Fmt.(Dump.list string)
        aa
        Fmt.(Dump.list string)
        ab;
    List.iter2
      (fun (l, sa) (_, sb) ->
        if sa <> sb then
          failf "%s, seed %d, step %d (%s): layer %s differs:@.layered %s@.fused   %s" name seed
            step what l sa sb)
      (Stack.states a.st) (Stack.states b.st);
    if Stack.next_alarm a.st <> Stack.next_alarm b.st then
      failf "%s, seed %d, step %d (%s): alarm %d (layered) vs %d (fused)" name seed step what
        (Stack.next_alarm a.st) (Stack.next_alarm b.st)
  in
  (* What the fused copies of this trace did, over its views. *)
  let sent_before = ref 0 and received_before = ref 0 and delivered_before = ref 0 in
  let ssent_before = ref 0 and sreceived_before = ref 0 and sdelivered_before = ref 0 in
  let sleft_before = ref 0 and swindow_before = ref 0 in
  let held_before = ref 0 and released_before = ref 0 in
  let casters = Array.make n false and held_at_change = ref false in
  let fc () = Stack.fused_counters !b.st in
  let fused_in () = !received_before + counter (fc ()) "received" in
  let delivered () = !delivered_before + counter (fc ()) "delivered" in
  let ooo () = counter (List.assoc "mnak" (Stack.counters !b.st)) "out_of_order" in
  let left_total () =
    counter (fc ()) "layered from total up" + counter (fc ()) "layered from total down"
  in
  let sdelivered () = !sdelivered_before + counter (fc ()) "sends_delivered" in
  let sleft () =
    !sleft_before
    + List.fold_left
        (fun a (k, v) ->
          if Filename.check_suffix k " send down" || Filename.check_suffix k " send up" then a + v
          else a)
        0 (fc ())
  in
  let sleft_at = ref None and scame_back = ref false in
  let left_at = ref None and came_back = ref false in
  let total_left_at = ref None and total_back = ref false in
  let stop_all step =
    Stack.dn_ctl !a.st Event.Stop;
    Stack.dn_ctl !b.st Event.Stop;
    compare_copies step "stop";
    Array.iter (function Some st -> Stack.dn_ctl st Event.Stop | None -> ()) !peers;
    sent_before := !sent_before + counter (fc ()) "sent";
    ssent_before := !ssent_before + counter (fc ()) "sends_sent";
    sreceived_before := !sreceived_before + counter (fc ()) "sends_received";
    sdelivered_before := !sdelivered_before + counter (fc ()) "sends_delivered";
    swindow_before := !swindow_before + counter (fc ()) "layered from pt2ptw send down";
    sleft_before := sleft ();
    received_before := !received_before + counter (fc ()) "received";
    delivered_before := !delivered_before + counter (fc ()) "delivered";
    held_before := !held_before + counter (fc ()) "held";
    released_before := !released_before + counter (fc ()) "released"
  in
  let written = match script with Some (_, _, l) -> Array.of_list l | None -> [||] in
  let steps = if script <> None then Array.length written else 30 + Random.State.int rs 40 in
  let loss = if script <> None then 0 else Random.State.int rs 4 in
  (* A view change in about one trace in three: the stacks stop and new
     ones start for the next view (datagrams still in flight arrive with
     the old view's stamp). *)
  let change_at =
    if script = None && Random.State.int rs 3 = 0 then 10 + Random.State.int rs 20 else -1
  in
  (* Orders of two runs that come to the fused copy in [f ()] (received,
     or its own, as the sequencer), and whether they came by the bypass. *)
  let watch two f =
    let before = counter (fc ()) "layered from total up" and sent = !two_sent in
    f ();
    let two = two + !two_sent - sent in
    if two > 0 then begin
      two_runs_received := !two_runs_received + two;
      if counter (fc ()) "layered from total up" = before then begin
        two_runs_bypassed := !two_runs_bypassed + two;
        two_runs := !two_runs + two
      end
    end
  in
  let timers () =
    let t = !clock in
    if Stack.next_alarm !a.st <= t then Stack.timer !a.st t;
    if Stack.next_alarm !b.st <= t then watch 0 (fun () -> Stack.timer !b.st t);
    Array.iter
      (function Some st -> if Stack.next_alarm st <= t then Stack.timer st t | None -> ())
      !peers
  in
  assert (n = 3);
  let batching = is_total si && si <> token_stack && seed / Array.length stacks mod 2 = 0 in
  let arrive (r, from, raw, layered) =
    if r = !me then begin
      Stack.recv !a.st (Msg.of_string pool layered);
      let two = if two_run_order raw then 1 else 0 in
      watch two (fun () -> Stack.recv !b.st (Msg.of_string pool raw))
    end
    else Stack.recv (peer r) (Msg.of_string pool raw);
    Printf.sprintf "datagram %d -> %d" from r
  in
  let exec = function
    | Cast m ->
        Stack.cast !a.st (Msg.of_string pool m);
        Stack.cast !b.st (Msg.of_string pool m);
        "cast " ^ m
    | Peer_cast (r, m) ->
        Stack.cast (peer r) (Msg.of_string pool m);
        Printf.sprintf "peer %d casts %s" r m
    | Timers ->
        timers ();
        "timers"
    | Deliver (from, r) ->
        let these, others =
          List.partition (fun (r', from', _, _) -> r' = r && from' = from) !flight
        in
        if these = [] then failf "%s: no datagram from %d to %d in flight" name from r;
        flight := others;
        List.iter (fun d -> ignore (arrive d)) these;
        Printf.sprintf "datagrams %d -> %d" from r
    | Expect l ->
        let got = !got_last in
        if got <> l then
          failf "%s: this member's application got %a, not %a" name
            Fmt.(Dump.list string)
            got
            Fmt.(Dump.list string)
            l;
        "expect"
    | Bypassed k ->
        if delivered () <> k then
          failf "%s: the bypass delivered %d casts, not %d" name (delivered ()) k;
        "bypassed"
  in
  for step = 1 to steps do
    let what =
      if script <> None then exec written.(step - 1)
      else if step = change_at then begin
        if counter (fc ()) "held" > 0 then held_at_change := true;
        stop_all step;
        incr view_changes;
        incr ltime;
        me := Random.State.int rs n;
        a := make_copy ~fused:false;
        b := make_copy ~fused:true;
        peers := make_peers ();
        if is_total si && !total_left_at = None then total_left_at := Some (delivered ());
        "view change"
      end
      else
        (* With Total, timers run more often, at once (the sequencer's
           orders go out), so that an order may overtake the cast it
           orders. *)
        let k = Random.State.int rs (if is_total si then 20 else 14) in
        let k = if k >= 18 || ((not (is_total si)) && k >= 12) then 2 + (3 * (k land 1)) else k in
        (* With the sequencer, in half the traces, timers run less often
           and the peers cast more: casts of several members wait for one
           order, which has several runs. *)
        let k =
          if batching && (k = 12 || k = 13 || (k = 6 && Random.State.int rs 4 > 0)) then 3 else k
        in
        match k with
        | 0 | 1 ->
            let m = body () in
            casters.(!me) <- true;
            Stack.cast !a.st (Msg.of_string pool m);
            watch 0 (fun () -> Stack.cast !b.st (Msg.of_string pool m));
            "cast"
        | 2 ->
            let r = other () and m = body () in
            Stack.send !a.st r (Msg.of_string pool m);
            Stack.send !b.st r (Msg.of_string pool m);
            "send"
        | 3 | 4 | 14 | 15 ->
            (* Batching: the members but the sequencer cast. *)
            let r = other () in
            let r = if batching && r = 0 && !me <> 0 then 3 - !me else r in
            casters.(r) <- true;
            Stack.cast (peer r) (Msg.of_string pool (body ()));
            "peer cast"
        | 5 ->
            let r = other () in
            Stack.send (peer r) !me (Msg.of_string pool (body ()));
            "peer send"
        | (6 | 12 | 13) as k ->
            if k = 6 then clock := !clock + Random.State.int rs 30_000_000;
            timers ();
            "timers"
        | kind -> (
            match !flight with
            | [] -> "nothing in flight"
            | l ->
                (* Mostly in order; sometimes a later one first (with Total,
                   sometimes the latest: an order overtakes the cast it
                   orders), lost, or twice. *)
                let k =
                  if kind >= 16 then List.length l - 1
                  else if Random.State.int rs 4 = 0 then Random.State.int rs (List.length l)
                  else 0
                in
                let d = List.nth l k in
                let fate = Random.State.int rs 10 in
                flight := List.filteri (fun i _ -> i <> k) l;
                if fate < loss then "lost"
                else begin
                  if fate = 9 then flight := !flight @ [ d ];
                  arrive d
                end)
    in
    compare_copies step what;
    (match !sleft_at with
    | None -> if sleft () > 0 then sleft_at := Some (sdelivered ())
    | Some k -> if sdelivered () > k then scame_back := true);
    (match !left_at with
    | None -> if ooo () > 0 then left_at := Some (fused_in ())
    | Some k -> if fused_in () > k then came_back := true);
    if is_total si then
      match !total_left_at with
      | None -> if left_total () > 0 then total_left_at := Some (delivered ())
      | Some k -> if delivered () > k then total_back := true
  done;
  stop_all (steps + 1);
  fused_sent := !fused_sent + !sent_before;
  fused_received := !fused_received + !received_before;
  sends_sent := !sends_sent + !ssent_before;
  sends_received := !sends_received + !sreceived_before;
  sends_delivered := !sends_delivered + !sdelivered_before;
  sends_window := !sends_window + !swindow_before;
  if !scame_back then incr sends_came_back;
  if !came_back then incr left_and_came_back;
  if is_total si then begin
    incr total_traces;
    total_fused_delivered := !total_fused_delivered + !delivered_before;
    total_sends_delivered := !total_sends_delivered + !sdelivered_before;
    if !total_back then incr total_came_back;
    let p = if si = token_stack then 1 else 0 in
    total_held.(p) <- total_held.(p) + !held_before;
    total_released.(p) <- total_released.(p) + !released_before;
    let several = Array.fold_left (fun k c -> if c then k + 1 else k) 0 casters >= 2 in
    if several && !held_before > 0 then begin
      total_several.(p) <- total_several.(p) + 1;
      if !held_at_change then total_changed_held.(p) <- total_changed_held.(p) + 1
    end
  end;
  if !two_runs > 0 && change_at >= 0 then incr two_runs_changed;
  if Pool.leak_check pool <> 0 then
    failf "%s, seed %d: %d slices leaked" name seed (Pool.leak_check pool)

let traces = match Sys.getenv_opt "FUSED_TRACES" with Some s -> int_of_string s | None -> 10_000

let test_traces () =
  for seed = 1 to traces do
    try run_trace ~seed () with Differ s -> Alcotest.fail s
  done;
  Fmt.pr
    "%d traces (%d view changes): %d compressed casts sent, %d received; %d traces left the common \
     case and came back; with Total: %d traces, %d casts delivered by the bypass, %d traces left \
     it at Total and came back@."
    traces !view_changes !fused_sent !fused_received !left_and_came_back !total_traces
    !total_fused_delivered !total_came_back;
  Fmt.pr
    "sends: %d compressed sent, %d received, %d delivered by the bypass; %d left it at Pt2ptw's \
     full window; %d traces left the common case of a send and came back@."
    !sends_sent !sends_received !sends_delivered !sends_window !sends_came_back;
  Fmt.pr "with Total: %d sends delivered by the bypass@." !total_sends_delivered;
  Fmt.pr "a closed gate held %d casts and sends@." !gate_held;
  Alcotest.(check bool) "a closed gate held casts and sends" true (!gate_held > traces / 20);
  Fmt.pr "a deaf ear dropped %d casts and sends@." !ear_dropped;
  Alcotest.(check bool) "a deaf ear dropped casts and sends" true (!ear_dropped > traces / 20);
  Alcotest.(check bool) "compressed sends were sent" true (!sends_sent > traces);
  Alcotest.(check bool)
    "sends were delivered by the bypass in stacks with Total" true
    (!total_sends_delivered > traces / 10);
  Alcotest.(check bool) "compressed sends were received" true (!sends_received > traces / 2);
  Alcotest.(check bool) "sends were delivered by the bypass" true (!sends_delivered > traces / 2);
  Alcotest.(check bool) "sends left the bypass at a full window" true (!sends_window > traces / 100);
  Alcotest.(check bool)
    "traces left the common case of a send and came back" true
    (!sends_came_back > traces / 20);
  Array.iteri
    (fun p proto ->
      Fmt.pr
        "Total (%s): %d casts and orders held on the bypass, %d released from there; %d traces \
         where several members cast and casts were held on the bypass, %d of them with a view \
         change while casts were held@."
        proto total_held.(p) total_released.(p) total_several.(p) total_changed_held.(p))
    [| "sequencer"; "token" |];
  Fmt.pr
    "Total (sequencer): %d orders of two runs received compressed, %d taken in on the bypass; %d \
     traces did so and changed views@."
    !two_runs_received !two_runs_bypassed !two_runs_changed;
  Alcotest.(check bool)
    "orders of two runs were taken in on the bypass" true
    (!two_runs_bypassed > traces / 500 && !two_runs_bypassed * 2 > !two_runs_received);
  Alcotest.(check bool)
    "traces took in orders of two runs on the bypass and changed views" true
    (!two_runs_changed > traces / 5000);
  Alcotest.(check bool) "compressed casts were sent" true (!fused_sent > traces);
  Alcotest.(check bool) "compressed casts were received" true (!fused_received > traces);
  Alcotest.(check bool)
    "traces left the common case and came back" true
    (!left_and_came_back > traces / 20);
  Alcotest.(check bool)
    "casts with Total in the stack went through the bypass" true
    (!total_fused_delivered > !total_traces / 4);
  Alcotest.(check bool)
    "traces with Total left the bypass at Total and came back" true
    (!total_came_back > !total_traces / 20);
  (* The stacks with Total are 2 of the 8: about one trace in 8 each. The
     token moves less in these traces than the sequencer orders: stamped
     casts of two holders that arrive out of their order are rarer. *)
  let per = traces / Array.length stacks in
  Array.iteri
    (fun p proto ->
      let d = if p = 0 then 1 else 5 in
      Alcotest.(check bool)
        (Printf.sprintf "Total (%s): casts held on the bypass and released" proto)
        true
        (total_held.(p) > per / 4 / d && total_released.(p) > per / 10 / d);
      Alcotest.(check bool)
        (Printf.sprintf "Total (%s): traces where several members cast, held on the bypass" proto)
        true
        (total_several.(p) > per / 4 / d && total_changed_held.(p) > per / 40 / (d * d)))
    [| "sequencer"; "token" |]

(* Written traces with Total (sequencer), this member not the sequencer:
   an order overtakes the cast it orders, and a cast of the sequencer
   comes while that cast is still missing: it waits (the layered and the
   fused copy alike); the missing cast then comes in its turn, through the
   bypass, and the sequencer's follows. *)
let test_overtaken () =
  let total = 5 in
  assert (is_total total && total <> token_stack);
  let script =
    [
      Peer_cast (2, "x");
      Deliver (2, 0);
      Timers (* the sequencer casts its order: x *);
      Deliver (0, 1);
      Expect [];
      Peer_cast (0, "y") (* the sequencer's own cast, with its place *);
      Deliver (0, 1);
      Expect [];
      Bypassed 0;
      Deliver (2, 1);
      Expect [ "cast from 2: x"; "cast from 0: y" ];
      Bypassed 1;
      Peer_cast (0, "z");
      Deliver (0, 1);
      Expect [ "cast from 0: z" ];
      Bypassed 2;
    ]
  in
  try run_trace ~script:(total, 1, script) ~seed:1 () with Differ s -> Alcotest.fail s

(* A written trace with Total's token, this member of rank 1: its first
   cast waits for the token (it asks for it, layered), gets it, stamps the
   cast and passes it on (the stamped cast re-enters the fused path under
   Total, and its own copy comes up by the bypass); the token goes round
   idle and stops here; the next cast is stamped on the bypass and the
   token goes on. *)
let test_token () =
  let script =
    [
      Cast "a";
      Expect [];
      Deliver (1, 0) (* the request: rank 0, which holds the token, passes it here *);
      Deliver (0, 1);
      Expect [ "cast from 1: a" ];
      Bypassed 1;
      Deliver (1, 2);
      Deliver (2, 0);
      Deliver (0, 1) (* a round with nothing to order: the token stays here *);
      Cast "b";
      Expect [ "cast from 1: b" ];
      Bypassed 2;
      Deliver (1, 0);
      Deliver (1, 2);
      Cast "c" (* no token here any more: a request again *);
      Expect [];
      Bypassed 2;
    ]
  in
  try run_trace ~script:(token_stack, 1, script) ~seed:2 () with Differ s -> Alcotest.fail s

(* Compressed datagrams from a stranger: truncated, overlong, fields that
   no layered header can hold, numbers out of every window. None raises,
   none is delivered, nothing leaks, and each is counted somewhere. With
   Total, the last field is Total's (this member is the sequencer). *)
(* Stack [si], fused, as rank 0 of a view of [n] at time 0, with a pool of
   its own; what it sends is dropped, what it delivers goes to [deliver]
   and is counted in the returned reference. *)
let stranger_target ?(rank = 0) si ~deliver =
  let pool = Pool.create () in
  let view = View.v ~group:"fused" ~members:(Array.init n (Printf.sprintf "m%d")) ~rank () in
  let ctx = { Layer.view; rng = Rng.create 1; params = params_of si; pool; now = (fun () -> 0) } in
  let delivered = ref 0 in
  let app =
    {
      Stack.deliver =
        (fun src m ->
          deliver src;
          incr delivered;
          Msg.release m);
      ctl = ignore;
    }
  in
  let _, layers = stacks.(si) in
  let st =
    Result.get_ok (Stack.create ~fused:true ctx layers ~net:(fun _ m -> Msg.release m) ~app)
  in
  (pool, view, st, delivered)

let test_hostile si () =
  let pool, view, st, delivered = stranger_target si ~deliver:ignore in
  let rs = Random.State.make [| 5 |] in
  let stamp = View.stamp view in
  let varint v = Codec.encode_string Codec.varint v in
  let total () =
    List.fold_left
      (fun acc (_, cs) -> List.fold_left (fun acc (_, v) -> acc + v) acc cs)
      0 (Stack.counters st)
    + List.assoc "garbage" (Stack.fused_counters st)
  in
  for i = 1 to 2000 do
    let field () =
      match Random.State.int rs 5 with
      | 0 -> varint stamp
      | 1 -> varint (Random.State.int rs 4)
      | 2 -> varint (1 lsl 40)
      | 3 -> varint (Random.State.bits rs)
      | _ -> String.init (Random.State.int rs 4) (fun _ -> Char.chr (Random.State.int rs 256))
    in
    let kind = if Random.State.int rs 8 = 0 then "\001" else "\000" in
    (* Half from origin 0, this member: never delivered; half anything. *)
    let fields = String.concat "" [ varint stamp; varint 0; field (); field () ] in
    let fields =
      if i mod 2 = 0 then fields else String.concat "" [ field (); field (); field () ]
    in
    let d = "\xc8" ^ kind ^ fields ^ String.make (Random.State.int rs 3) 'x' in
    let before = total () and got = !delivered in
    Stack.recv st (Msg.of_string pool d);
    if i mod 2 = 0 && !delivered > got then
      Alcotest.failf "datagram %S from this member delivered" d;
    if total () = before && !delivered = got then
      Alcotest.failf "datagram %S left no trace in any counter" d
  done;
  (* A cast of another member, well formed but for its kind (neither a
     cast nor a send), and a datagram cut after the tag: compressed
     garbage, never delivered. *)
  let _, layers = stacks.(si) in
  let cast = List.map varint (stamp :: 1 :: List.init (cast_fields layers - 2) (fun _ -> 0)) in
  List.iter
    (fun d ->
      let garbage () = List.assoc "garbage" (Stack.fused_counters st) in
      let before = garbage () and got = !delivered in
      Stack.recv st (Msg.of_string pool d);
      if !delivered > got then Alcotest.failf "datagram %S delivered" d;
      Alcotest.(check int) (Printf.sprintf "%S: compressed garbage" d) (before + 1) (garbage ()))
    ("\xc8"
    :: List.map
         (fun k -> String.concat "" ("\xc8" :: String.make 1 (Char.chr k) :: cast))
         [ 2; 3; 0x80; 0xff ]);
  Stack.dn_ctl st Event.Stop;
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool)

(* Compressed orders from the sequencer (rank 0) to a member of rank 1
   under Total (sequencer), each the next cast of the sequencer for the
   layers below Total: hostile ones (a count of 0 or over [max_run], an
   origin outside the view, a second run without a first, numbers that
   overflow a layered header's) are refused at Total and counted there,
   none raises or is delivered; the well-formed ones of one and two runs
   are taken in on the bypass. Total's fields are the last four (the top
   layer's), after Bottom's stamp and origin and Mnak's number. *)
let test_hostile_orders () =
  let si = 5 in
  let pool, view, st, delivered = stranger_target ~rank:1 si ~deliver:ignore in
  let _, layers = stacks.(si) in
  let nf = cast_fields layers in
  Alcotest.(check int) "fields: Bottom's 2, Mnak's 1, Total's 4" 7 nf;
  let varint v = Codec.encode_string Codec.varint v in
  let nonsense () = counter (List.assoc "total" (Stack.counters st)) "nonsense" in
  let held () = counter (Stack.fused_counters st) "held" in
  let number = ref 0 in
  let order (f, k, f2, k2) =
    let d =
      String.concat "" ("\xc8\000" :: List.map varint [ View.stamp view; 0; !number; f; k; f2; k2 ])
    in
    incr number;
    let n0 = nonsense () and h0 = held () and got = !delivered in
    (match Stack.recv st (Msg.of_string pool d) with
    | () -> ()
    | exception e ->
        Alcotest.failf "order (%d, %d, %d, %d) raised %s" f k f2 k2 (Printexc.to_string e));
    if !delivered <> got then Alcotest.failf "order (%d, %d, %d, %d) delivered" f k f2 k2;
    (nonsense () - n0, held () - h0)
  in
  let max_run = 1 lsl 20 and big = 1 lsl 40 in
  let hostile =
    [
      (1, 0, 2, 1) (* a second run without a first *);
      (1, 1, 2, 0) (* a second origin without a count *);
      (1, max_run + 1, 0, 0);
      (1, 1, 2, max_run + 1);
      (n, 1, 0, 0) (* origins outside the view *);
      (1, 1, n, 1);
      (big, 1, 1, 1);
      (1, 1, big, big) (* counts and origins that overflow *);
      (1, big, 2, big);
      (0, 0, 0, 1);
    ]
  in
  List.iter
    (fun o ->
      let f, k, f2, k2 = o in
      let refused, taken = order o in
      if refused <> 1 || taken <> 0 then
        Alcotest.failf "order (%d, %d, %d, %d): %d refused, %d taken in" f k f2 k2 refused taken)
    hostile;
  List.iter
    (fun o ->
      let f, k, f2, k2 = o in
      let refused, taken = order o in
      if refused <> 0 || taken <> 1 then
        Alcotest.failf "order (%d, %d, %d, %d): %d refused, %d taken in on the bypass" f k f2 k2
          refused taken)
    [ (1, 3, 2, 2); (2, 1, 0, 0); (2, max_run, 1, max_run) ];
  Stack.dn_ctl st Event.Stop;
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool)

(* Compressed sends (kind 1) from a stranger to the default stack: the
   view's stamp or not, any origin (this member's, a member's, none),
   numbers in and out of every window, acknowledgements of what was never
   sent, truncated. None raises, none from this member or outside the view
   is delivered, nothing leaks, each is counted somewhere; and those of the
   common case (the next number from a member) are delivered by the
   bypass, those out of it taken up by the layered path and judged there. *)
let test_hostile_sends () =
  let pool, view, st, delivered =
    stranger_target 4 ~deliver:(function
      | Event.Send_from r when r = 1 || r = 2 -> ()
      | src -> Alcotest.failf "delivered a send %s" (src_s src))
  in
  let rs = Random.State.make [| 7 |] in
  let int k = Random.State.int rs k in
  let varint v = Codec.encode_string Codec.varint v in
  let total () =
    List.fold_left
      (fun acc (_, cs) -> List.fold_left (fun acc (_, v) -> acc + v) acc cs)
      0 (Stack.counters st)
    + List.assoc "garbage" (Stack.fused_counters st)
  in
  let next = Array.make n 0 in
  for _ = 1 to 3000 do
    let origin = match int 6 with 0 -> 0 | 1 -> n | 2 -> Random.State.bits rs | _ -> 1 + int 2 in
    let num k =
      match int 6 with
      | 0 -> 1 lsl 40
      | 1 -> Random.State.bits rs
      | 2 -> int 4
      | _ -> if origin > 0 && origin < n then k else 0
    in
    let seq = num next.(min origin (n - 1)) in
    (* The destination: this member (rank 0), mostly; else another rank or
       nonsense, which Bottom drops as misdirected. *)
    let dst = match int 8 with 0 -> 1 + int 3 | 1 -> Random.State.bits rs | _ -> 0 in
    let fields =
      [
        varint (if int 8 = 0 then Random.State.bits rs else View.stamp view);
        varint origin;
        varint dst;
        varint seq;
        varint (num 0);
      ]
    in
    let fields = List.filteri (fun i _ -> i < 5 - if int 8 = 0 then 1 + int 5 else 0) fields in
    let d = "\xc8\001" ^ String.concat "" fields ^ String.make (int 20) 'x' in
    let d = if int 10 = 0 then String.sub d 0 (int (String.length d)) else d in
    let before = total () and got = !delivered in
    Stack.recv st (Msg.of_string pool d);
    if !delivered > got && dst <> 0 then Alcotest.failf "a send to rank %d delivered at rank 0" dst;
    if !delivered > got && origin > 0 && origin < n && seq = next.(origin) then
      next.(origin) <- next.(origin) + 1;
    if total () = before && !delivered = got then
      Alcotest.failf "datagram %S left no trace in any counter" d
  done;
  let c = Stack.fused_counters st in
  let p = List.assoc "pt2pt" (Stack.counters st) in
  Fmt.pr "%d delivered (%d by the bypass); %d garbage; pt2pt: %d impossible, %d beyond its window@."
    !delivered (counter c "sends_delivered") (counter c "garbage") (counter p "impossible")
    (counter p "beyond_window");
  Alcotest.(check bool) "sends delivered by the bypass" true (counter c "sends_delivered" > 0);
  Alcotest.(check bool) "compressed garbage counted" true (counter c "garbage" > 0);
  Alcotest.(check bool)
    "sends out of the common case taken up layered" true
    (counter c "layered from pt2pt send up" > 0);
  Alcotest.(check bool) "acknowledgements of nothing sent counted" true (counter p "impossible" > 0);
  Stack.dn_ctl st Event.Stop;
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool)

(* The group runtime with the fused path on, over the simulator: casts
   arrive compressed and are delivered by the bypass (not dropped as
   another part's datagrams and repaired: Migrate's first byte once took
   the tag), every one once and in order. *)
module Sim = Consort_engine.Sim
module Gr = G.Group
module GS = Gr.Make (Sim)

(* Three members joined over a fresh simulator with the fused path on,
   each with the casts it delivered (newest first). *)
let fused_group ?(params = Params.empty) ?link ?(on_send = fun _ ~origin:_ _ -> ()) ~seed ~layers ()
    =
  let net = Sim.create ~seed ?link () in
  let params = Params.(params |> set "stack.fused" (Bool true)) in
  let addrs = List.init 3 (Printf.sprintf "m%d") in
  let members =
    List.mapi
      (fun i addr ->
        let got = ref [] in
        let cb =
          {
            Gr.view = ignore;
            cast = (fun ~origin s -> got := (origin, s) :: !got);
            send = (fun ~origin s -> on_send i ~origin s);
            block = ignore;
            flow = ignore;
            exit = ignore;
          }
        in
        match
          GS.join ~params ~peers:addrs ~seed:(Hashtbl.hash addr) ~layers net ~group:"fused" ~addr cb
        with
        | Ok g -> (g, got)
        | Error e -> Alcotest.failf "%a" Gr.pp_join_error e)
      addrs
  in
  (net, members)

(* Member [i] delivered exactly [sent] from [g0], in order. *)
let check_from g0 i sent got =
  let from0 =
    List.rev (List.filter_map (fun (o, s) -> if o = GS.me g0 then Some s else None) !got)
  in
  Alcotest.(check (list string))
    (Printf.sprintf "m%d delivered every cast once, in order" i)
    sent from0

(* [f i st] for each member [i] and its stack, once it is checked to have
   delivered [sent] from [g0]. *)
let each_member g0 sent members f =
  List.iteri
    (fun i (g, got) ->
      check_from g0 i sent got;
      match GS.stack g with None -> Alcotest.fail "no stack" | Some st -> f i st)
    members

let test_runtime () =
  let net, members = fused_group ~seed:11 ~layers:(Result.get_ok G.Properties.(layers vsync)) () in
  Sim.run ~until:(Time.of_sec 3.) net;
  let g0, _ = List.hd members in
  let sent = List.init 200 (Printf.sprintf "cast %d") in
  List.iter
    (fun s -> match GS.cast g0 s with Ok () -> () | Error e -> Alcotest.failf "%a" Gr.pp_error e)
    sent;
  Sim.run ~until:(Time.of_sec 6.) net;
  each_member g0 sent members (fun i st ->
      Alcotest.(check bool) "the stack is fused" true (Stack.fused st);
      let c = Stack.fused_counters st in
      if i = 0 then Alcotest.(check bool) "casts sent compressed" true (List.assoc "sent" c >= 200)
      else Alcotest.(check bool) "casts received compressed" true (List.assoc "received" c >= 200);
      Alcotest.(check int) "no compressed garbage" 0 (List.assoc "garbage" c))

(* A burst far over Mflow's window from the first member (with Total: the
   sequencer): the casts Mflow queues for want of credit go out by the
   layered path from its queue, and re-enter the fused path below it; with
   the token, a cast that waits for the token re-enters under Total once
   stamped (Total's place is read back into its field). They leave
   compressed and are delivered by the bypass at every member, in order. *)
let test_runtime_queued (layers, params) () =
  (* 1,500 casts of 1 KB: about six windows of 256 KiB. *)
  let window = Params.set "mflow.window" (Params.Int (256 * 1024)) Params.empty in
  let params = List.fold_left (fun p (k, v) -> Params.set k v p) window params in
  let net, members = fused_group ~params ~seed:13 ~layers:(Result.get_ok (layers ())) () in
  Sim.run ~until:(Time.of_sec 3.) net;
  let g0, _ = List.hd members in
  let n = 1500 in
  let sent = List.init n (fun k -> Printf.sprintf "%04d%s" k (String.make 1000 'q')) in
  (* Refused while flow control holds the sender back: the simulator
     runs on a little, and the cast is made again (bounded). *)
  let clock = ref (Time.of_sec 3.) in
  List.iter
    (fun s ->
      let rec go tries =
        match GS.cast g0 s with
        | Ok () -> ()
        | Error e when tries = 0 -> Alcotest.failf "%a" Gr.pp_error e
        | Error _ ->
            clock := Time.add !clock (Time.of_ms 1);
            Sim.run ~until:!clock net;
            go (tries - 1)
      in
      go 1000)
    sent;
  Sim.run ~until:(Time.add !clock (Time.of_sec 10.)) net;
  let counters g =
    match GS.stack g with Some st -> Stack.fused_counters st | None -> Alcotest.fail "no stack"
  in
  let c0 = counters g0 in
  (* Every cast that left the bypass going down, at any layer. *)
  let left =
    List.fold_left
      (fun a (k, v) ->
        if String.length k > 8 && String.sub k 0 8 = "layered " && Filename.check_suffix k " down"
        then a + v
        else a)
      0 c0
  in
  let re = List.assoc "reentered" c0 in
  Alcotest.(check bool) (Printf.sprintf "casts left the bypass (%d)" left) true (left > n / 2);
  (* All but those that ask for credit as they leave Mflow's queue (its
     header then differs from the constant): they stay layered. *)
  Alcotest.(check bool)
    (Printf.sprintf "casts that left the bypass re-entered it (%d of %d)" re left)
    true
    (re <= left && re >= left * 95 / 100);
  let layered = left - re in
  Alcotest.(check bool) "casts sent compressed" true (List.assoc "sent" c0 >= n - layered);
  List.iteri
    (fun i (g, got) ->
      let from0 =
        List.rev (List.filter_map (fun (o, s) -> if o = GS.me g0 then Some s else None) !got)
      in
      Alcotest.(check int) (Printf.sprintf "m%d delivered every cast" i) n (List.length from0);
      Alcotest.(check bool) (Printf.sprintf "m%d: in order, intact" i) true (from0 = sent);
      Alcotest.(check bool)
        (Printf.sprintf "m%d: casts delivered by the bypass" i)
        true
        (List.assoc "delivered" (counters g) >= n - layered);
      (* Every walk, re-entries included, left the frame it entered. *)
      match GS.stack g with
      | Some st ->
          Alcotest.(check int) (Printf.sprintf "m%d: no frame in use" i) 0 (Stack.frames_in_use st)
      | None -> Alcotest.fail "no stack")
    members

(* Under loss, a receiver holds the casts that follow a gap (Mnak), and
   passes them on once the gap is repaired: they carry the layered headers
   of the layers above, pushed back from their fields, and go on by the
   fused path above Mnak. Every cast is delivered once, in order. *)
let test_runtime_gaps () =
  let link = { Sim.default_link with loss = 0.05 } in
  let net, members =
    fused_group ~link ~seed:14 ~layers:(Result.get_ok G.Properties.(layers vsync)) ()
  in
  Sim.run ~until:(Time.of_sec 3.) net;
  let g0, _ = List.hd members in
  let sent = List.init 300 (Printf.sprintf "cast %d") in
  let clock = ref (Time.of_sec 3.) in
  List.iter
    (fun s ->
      clock := Time.add !clock (Time.of_ms 2);
      Sim.run ~until:!clock net;
      match GS.cast g0 s with Ok () -> () | Error e -> Alcotest.failf "%a" Gr.pp_error e)
    sent;
  Sim.run ~until:(Time.add !clock (Time.of_sec 20.)) net;
  let held = ref 0 and back = ref 0 in
  each_member g0 sent members (fun i st ->
      let c = Stack.fused_counters st in
      let h = Option.value ~default:0 (List.assoc_opt "layered from mnak up" c) in
      let b = List.assoc "reentered_up" c in
      Alcotest.(check bool)
        (Printf.sprintf "m%d: casts back on the bypass (%d) at most those held (%d)" i b h)
        true (b <= h);
      held := !held + h;
      back := !back + b);
  Alcotest.(check bool) (Printf.sprintf "casts held for a gap (%d)" !held) true (!held > 0);
  Alcotest.(check bool)
    (Printf.sprintf "most held casts went on by the bypass (%d of %d)" !back !held)
    true
    (2 * !back >= !held)

(* Sends both ways between two members, with casts among them, over the
   simulator (lossless, or with 5% loss): every send is delivered once, in
   order; they go compressed and come up by the bypass; under loss, sends
   after a gap leave it (held by Pt2pt, then retransmitted layered) and
   later ones come back to it. *)
let test_runtime_sends ?link ~seed () =
  let sends = Array.init 3 (fun _ -> ref []) in
  let on_send i ~origin s = sends.(i) := (origin, s) :: !(sends.(i)) in
  let net, members =
    fused_group ?link ~on_send ~seed ~layers:(Result.get_ok G.Properties.(layers vsync)) ()
  in
  Sim.run ~until:(Time.of_sec 3.) net;
  let g0, _ = List.nth members 0 and g1, _ = List.nth members 1 in
  let k = 300 in
  let clock = ref (Time.of_sec 3.) in
  let ok = function Ok () -> () | Error e -> Alcotest.failf "%a" Gr.pp_error e in
  for j = 0 to k - 1 do
    clock := Time.add !clock (Time.of_ms 2);
    Sim.run ~until:!clock net;
    ok (GS.send g0 (GS.me g1) (Printf.sprintf "0 to 1: %d" j));
    ok (GS.send g1 (GS.me g0) (Printf.sprintf "1 to 0: %d" j));
    if j mod 10 = 0 then ok (GS.cast g0 (Printf.sprintf "cast %d" j))
  done;
  Sim.run ~until:(Time.add !clock (Time.of_sec 20.)) net;
  let from g i =
    List.rev (List.filter_map (fun (o, s) -> if o = GS.me g then Some s else None) !(sends.(i)))
  in
  Alcotest.(check (list string))
    "m1 got every send of m0 once, in order"
    (List.init k (Printf.sprintf "0 to 1: %d"))
    (from g0 1);
  Alcotest.(check (list string))
    "m0 got every send of m1 once, in order"
    (List.init k (Printf.sprintf "1 to 0: %d"))
    (from g1 0);
  let fc g = match GS.stack g with Some st -> Stack.fused_counters st | None -> [] in
  let c0 = fc g0 and c1 = fc g1 in
  let left c =
    List.fold_left
      (fun a (name, v) -> if Filename.check_suffix name " send up" then a + v else a)
      0 c
  in
  List.iter
    (fun (i, c) ->
      Alcotest.(check int) "no compressed garbage" 0 (counter c "garbage");
      Alcotest.(check bool)
        (Printf.sprintf "m%d: sends sent compressed (%d)" i (counter c "sends_sent"))
        true
        (counter c "sends_sent" >= k);
      let d = counter c "sends_delivered" in
      if link = None then
        Alcotest.(check bool)
          (Printf.sprintf "m%d: sends delivered by the bypass (%d)" i d)
          true (d >= k)
      else begin
        Alcotest.(check bool)
          (Printf.sprintf "m%d: sends left the bypass going up (%d)" i (left c))
          true
          (left c > 0);
        Alcotest.(check bool)
          (Printf.sprintf "m%d: sends back on the bypass after the gaps (%d)" i d)
          true
          (3 * d >= k)
      end)
    [ (0, c0); (1, c1) ];
  (* The group's counters show them. *)
  let gc = List.assoc "fused" (GS.counters g1) in
  Alcotest.(check bool) "Group.counters count sends" true (counter gc "sends_delivered" > 0)

(* The same with Total (sequencer): every member casts, every member
   delivers the same sequence, the casts of the sequencer (the first
   member) go through the bypass down and up, and the others' casts wait
   for their order held on the bypass (here the order has several runs:
   it comes layered). *)
let test_runtime_total () =
  let net, members = fused_group ~seed:12 ~layers:(Result.get_ok G.Properties.(layers total)) () in
  Sim.run ~until:(Time.of_sec 3.) net;
  let per = 100 in
  List.iteri
    (fun i (g, _) ->
      for k = 1 to per do
        match GS.cast g (Printf.sprintf "m%d cast %d" i k) with
        | Ok () -> ()
        | Error e -> Alcotest.failf "%a" Gr.pp_error e
      done)
    members;
  Sim.run ~until:(Time.of_sec 6.) net;
  let seqs = List.map (fun (_, got) -> List.rev_map snd !got) members in
  List.iteri
    (fun i s ->
      Alcotest.(check int) (Printf.sprintf "m%d delivered every cast" i) (3 * per) (List.length s);
      Alcotest.(check (list string))
        (Printf.sprintf "m%d delivered in m0's order" i)
        (List.hd seqs) s)
    seqs;
  let fc g =
    match GS.stack g with
    | Some st ->
        Alcotest.(check bool) "the stack is fused" true (Stack.fused st);
        Stack.fused_counters st
    | None -> Alcotest.fail "no stack"
  in
  (* The sequencer is the view's first member. *)
  List.iteri
    (fun i (g, _) ->
      let c = fc g in
      Alcotest.(check int) "no compressed garbage" 0 (List.assoc "garbage" c);
      (* A cast whose headers above could not be read back into fields
         (an Order, a control cast) is tried once, not again at every
         layer below. *)
      let orders =
        match GS.stack g with
        | Some st -> List.assoc "orders_sent" (List.assoc "total" (Stack.counters st))
        | None -> 0
      in
      Alcotest.(check bool)
        (Printf.sprintf "m%d: casts not taken back tried once (%d, %d orders)" i
           (List.assoc "reentry_refused" c) orders)
        true
        (List.assoc "reentry_refused" c <= orders + 2);
      Fmt.pr "m%d (rank %d): %a@." i (GS.view g).rank
        Fmt.(list ~sep:comma (pair ~sep:(any "=") string int))
        c;
      (* The casts that wait for their order are held on the bypass, at
         every member: the other members' at the sequencer, and at the
         others their own and the third member's. *)
      Alcotest.(check int)
        (Printf.sprintf "m%d: no received cast left the bypass at Total" i)
        0
        (counter c "layered from total up");
      Alcotest.(check bool)
        (Printf.sprintf "m%d: casts held on the bypass (%d)" i (counter c "held"))
        true
        (counter c "held" >= 2 * per);
      if (GS.view g).rank = 0 then
        Alcotest.(check bool)
          (Printf.sprintf "m%d: the sequencer's casts sent compressed" i)
          true
          (List.assoc "sent" c >= per)
      else
        Alcotest.(check bool)
          (Printf.sprintf "m%d: the sequencer's casts delivered by the bypass" i)
          true
          (List.assoc "delivered" c >= per))
    members

(* Total (sequencer or token) with three senders whose casts interleave
   (each member casts in turn, a millisecond apart): the receivers take
   every other member's cast by the bypass, delivered at once or held on
   it until its place is known (the sequencer's orders, one run each, come
   compressed and are taken in on the bypass too), then released from
   there; none leaves the bypass at Total. *)
let test_runtime_senders params () =
  let token = params <> [] in
  let params = List.fold_left (fun p (k, v) -> Params.set k v p) Params.empty params in
  let net, members =
    fused_group ~params ~seed:15 ~layers:(Result.get_ok G.Properties.(layers total)) ()
  in
  Sim.run ~until:(Time.of_sec 3.) net;
  let per = 100 in
  let clock = ref (Time.of_sec 3.) in
  for k = 1 to per do
    List.iteri
      (fun i (g, _) ->
        clock := Time.add !clock (Time.of_ms 1);
        Sim.run ~until:!clock net;
        match GS.cast g (Printf.sprintf "m%d cast %d" i k) with
        | Ok () -> ()
        | Error e -> Alcotest.failf "%a" Gr.pp_error e)
      members
  done;
  Sim.run ~until:(Time.add !clock (Time.of_sec 3.)) net;
  let seqs = List.map (fun (_, got) -> List.rev_map snd !got) members in
  List.iteri
    (fun i s ->
      Alcotest.(check int) (Printf.sprintf "m%d delivered every cast" i) (3 * per) (List.length s);
      Alcotest.(check (list string))
        (Printf.sprintf "m%d delivered in m0's order" i)
        (List.hd seqs) s)
    seqs;
  List.iteri
    (fun i (g, _) ->
      let c = match GS.stack g with Some st -> Stack.fused_counters st | None -> [] in
      Fmt.pr "m%d (rank %d): %a@." i (GS.view g).rank
        Fmt.(list ~sep:comma (pair ~sep:(any "=") string int))
        c;
      let get k = counter c k in
      Alcotest.(check int) (Printf.sprintf "m%d: no compressed garbage" i) 0 (get "garbage");
      Alcotest.(check int)
        (Printf.sprintf "m%d: no received cast left the bypass at Total" i)
        0 (get "layered from total up");
      (* With the sequencer, every member holds casts for their order;
         with the token, stamped casts come in their order here. *)
      if not token then
        Alcotest.(check bool)
          (Printf.sprintf "m%d: casts held on the bypass (%d)" i (get "held"))
          true
          (get "held" >= 2 * per);
      (* Each member delivers its own casts by the bypass too (Mnak hands
         them up as they go down), or holds them there for their place. *)
      Alcotest.(check bool)
        (Printf.sprintf "m%d: every cast delivered from the bypass (%d + %d)" i (get "delivered")
           (get "released"))
        true
        (get "delivered" + get "released" >= 3 * per);
      (* A cast that cannot be taken back into the bypass going down (its
         headers above do not read back into fields) is tried once, not
         again at every layer below: with the sequencer, at most about one
         and a half refusals per own cast here (the orders and the layers'
         control casts), twice that when each is tried at two layers. *)
      if not token then
        Alcotest.(check bool)
          (Printf.sprintf "m%d: casts not taken back tried once (%d refused, %d casts)" i
             (get "reentry_refused") per)
          true
          (get "reentry_refused" <= 2 * per))
    members

let () =
  Alcotest.run "fused"
    [
      ( "runtime",
        [
          Alcotest.test_case "a group over the simulator" `Quick test_runtime;
          Alcotest.test_case "a group with Total over the simulator" `Quick test_runtime_total;
          Alcotest.test_case "Total (sequencer), three senders, by the bypass" `Quick
            (test_runtime_senders []);
          Alcotest.test_case "Total (token), three senders, by the bypass" `Quick
            (test_runtime_senders [ ("total.protocol", Params.String "token") ]);
          Alcotest.test_case "casts held for a gap go on by the fused path" `Quick test_runtime_gaps;
          Alcotest.test_case "sends both ways" `Quick (test_runtime_sends ~seed:15);
          Alcotest.test_case "sends both ways, 5% loss" `Quick
            (test_runtime_sends ~link:{ Sim.default_link with loss = 0.05 } ~seed:16);
          Alcotest.test_case "queued casts re-enter the fused path" `Quick
            (test_runtime_queued ((fun () -> G.Properties.(layers vsync)), []));
          Alcotest.test_case "queued casts re-enter the fused path under Total (sequencer)" `Quick
            (test_runtime_queued ((fun () -> G.Properties.(layers total)), []));
          Alcotest.test_case "queued casts re-enter the fused path under Total (token)" `Quick
            (test_runtime_queued
               ( (fun () -> G.Properties.(layers total)),
                 [ ("total.protocol", Params.String "token") ] ));
        ] );
      ( "differential",
        [
          Alcotest.test_case "layered = fused" `Quick test_traces;
          Alcotest.test_case "an order overtakes its cast" `Quick test_overtaken;
          Alcotest.test_case "the token comes and goes" `Quick test_token;
        ] );
      ( "hostile",
        [
          Alcotest.test_case "compressed garbage" `Quick (test_hostile 1);
          Alcotest.test_case "compressed garbage, Total (sequencer)" `Quick (test_hostile 5);
          Alcotest.test_case "compressed garbage, Total (token)" `Quick (test_hostile token_stack);
          Alcotest.test_case "compressed sends" `Quick test_hostile_sends;
          Alcotest.test_case "compressed orders, Total (sequencer)" `Quick test_hostile_orders;
        ] );
    ]
