open Consort

let src = Logs.Src.create "consort.mflow" ~doc:"Mflow layer: credit-based flow control for casts"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let window = "mflow.window"
  let queue = "mflow.queue"
  let credit_delay = "mflow.credit_delay"

  let () =
    (* 1 MiB: with several member processes on few cores, a receiver
       that is not scheduled for a few milliseconds stops a sender whose
       window is full; 1 MiB of 1 KB casts covers 4 ms at 250,000 casts a
       second (bench/group/README.md: 256 KiB held the senders back by 10
       to 25%). *)
    Params.register window
      (Params.Int (1024 * 1024))
      ~doc:"bytes of casts not yet credited by every other member";
    Params.register queue
      (Params.Int (1024 * 1024))
      ~doc:"bytes of queued casts beyond which the application is told it is blocked";
    Params.register credit_delay
      (Params.Time (Time.of_ms 2))
      ~doc:"how long a receiver waits to batch credit"
end

let overhead = 64
let max_credits = 4096

(* Groups of at least this many members send credit point-to-point when
   few origins are owed (see [send_credit]). *)
let unicast_from = 16

let contract =
  Contract.v "cast-flow" ~doc:"cast credit flow control: bounded bytes not yet delivered everywhere"

type Event.dn_ctl += Hold_credit of { who : string; hold : bool; except : int list }

let () =
  Event.register_dn_ctl_printer (function
    | Hold_credit { who; hold; except } ->
        Some
          (fun ppf ->
            Fmt.pf ppf "hold-credit(%s, %b, except %a)" who hold Fmt.(list ~sep:comma int) except)
    | _ -> None)

module L = struct
  type header = No_hdr | Data of { ask : bool } | Credit of { credits : (int * int) list } | Ask

  let name = "mflow"

  let codec =
    Codec.(
      union "mflow"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "data" unit
            (function Data { ask = false } -> Some () | _ -> None)
            (fun () -> Data { ask = false });
          case 2 "data_ask" unit
            (function Data { ask = true } -> Some () | _ -> None)
            (fun () -> Data { ask = true });
          case 3 "credit"
            (list ~max:max_credits (pair varint varint))
            (function Credit { credits } -> Some credits | _ -> None)
            (fun credits -> Credit { credits });
          case 4 "ask" unit (function Ask -> Some () | _ -> None) (fun () -> Ask);
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Data { ask = false } -> Fmt.string ppf "data"
    | Data { ask = true } -> Fmt.string ppf "data(ask)"
    | Ask -> Fmt.string ppf "ask"
    | Credit { credits } ->
        let one ppf (o, total) = Fmt.pf ppf "%d:%d" o total in
        Fmt.pf ppf "credit(%a)" Fmt.(list ~sep:comma one) credits

  let provides = [ contract ]
  let requires = [ Contract.reliable_cast ]

  (* Totals count bytes since the stack began. *)
  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    rank : int;
    n : int;
    window : int;
    limit : int;
    low : int;
    threshold : int;
    credit_delay : Time.t;
    queue : (Msg.t * int) Queue.t;
    mutable queued : int;
    mutable sent : int; (* of our casts *)
    mutable asked : int; (* of those, covered by our last request for credit *)
    credited : int array; (* [credited.(m)]: of our casts, delivered by [m] *)
    gone : bool array; (* suspected members: their credit is not waited for *)
    mutable floor : int; (* the least of [credited] over the other members *)
    consumed : int array; (* [consumed.(o)]: of [o]'s casts, delivered here *)
    reported : int array; (* [reported.(o)]: of those, credited to [o] *)
    mutable credit_at : Time.t;
    mutable flushing : bool; (* a view change drains the queue *)
    mutable over : bool;
    mutable below : bool;
    mutable told : bool;
    mutable stopped : bool;
    mutable credits_sent : int;
    mutable blocked : int;
    mutable malformed : int;
    mutable bad_credit : int;
    mutable holders : (string * int list) list;
        (* layers above that asked to hold credit back, and the origins whose credit they let go *)
    mutable holds : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    let window = max 1 (Params.int ctx.params Param.window) in
    let limit = max 0 (Params.int ctx.params Param.queue) in
    {
      out;
      now = ctx.now;
      rank = ctx.view.rank;
      n;
      window;
      limit;
      low = limit / 2;
      threshold = max 1 (window / 4);
      credit_delay = Params.time ctx.params Param.credit_delay;
      queue = Queue.create ();
      queued = 0;
      sent = 0;
      asked = 0;
      credited = Array.make n 0;
      gone = Array.make n false;
      floor = 0;
      consumed = Array.make n 0;
      reported = Array.make n 0;
      credit_at = max_int;
      flushing = false;
      over = false;
      below = false;
      told = false;
      stopped = false;
      credits_sent = 0;
      blocked = 0;
      malformed = 0;
      bad_credit = 0;
      holders = [];
      holds = 0;
    }

  let cost msg = Msg.length msg + overhead

  let report t =
    let b = t.over || t.below in
    if b <> t.told && not t.stopped then begin
      t.told <- b;
      if b then t.blocked <- t.blocked + 1;
      Log.debug (fun m -> m "blocked: %b" b);
      t.out.up_ctl (Event.Blocked b)
    end

  (* Alone in the view, everything cast is delivered everywhere at once. *)
  let outstanding t = if t.n <= 1 then 0 else t.sent - t.floor

  (* While the view flushes, nothing waits: the application is blocked
     and what was queued must be counted in this view. *)
  let fits t c = t.flushing || outstanding t = 0 || outstanding t + c <= t.window

  (* [ask]: the window is full after this cast and more wait, so the
     others should return credit as soon as they have delivered it. One
     request at a time: asking on every cast that refills the window makes
     each member answer with credit for a cast or two, which with several
     senders costs a credit cast per two data casts. Between requests,
     credit comes at a quarter of the window and after the credit delay. *)
  let transmit t msg c ~ask =
    t.sent <- t.sent + c;
    if ask then t.asked <- t.sent;
    t.out.dn Event.Cast (Data { ask }) msg

  (* [Queue.peek], not [peek_opt]: no option per cast let go. *)
  let drain t =
    let rec go () =
      if (not (Queue.is_empty t.queue)) && not t.stopped then begin
        let msg, c = Queue.peek t.queue in
        if fits t c then begin
          ignore (Queue.pop t.queue);
          t.queued <- t.queued - c;
          let ask =
            (not (Queue.is_empty t.queue))
            &&
            let _, next = Queue.peek t.queue in
            outstanding t + c + next > t.window && t.asked <= t.floor
          in
          transmit t msg c ~ask;
          go ()
        end
      end
    in
    go ();
    if t.over && t.queued <= t.low then t.over <- false;
    report t

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Send _ -> t.out.dn dst No_hdr msg
      | Event.Cast ->
          let c = cost msg in
          if Queue.is_empty t.queue && fits t c then transmit t msg c ~ask:false
          else begin
            Queue.push (msg, c) t.queue;
            t.queued <- t.queued + c;
            if t.asked < t.sent && t.asked <= t.floor then begin
              (* Stalled behind casts made before anything waited. *)
              t.asked <- t.sent;
              t.out.dn Event.Cast Ask (Msg.empty ())
            end;
            if t.queued > t.limit && not t.over then begin
              t.over <- true;
              report t
            end
          end

  let send_credit t =
    t.credit_at <- max_int;
    let held o = List.exists (fun (_, except) -> not (List.mem o except)) t.holders in
    begin
      let owed = ref [] in
      for o = t.n - 1 downto 0 do
        if t.consumed.(o) > t.reported.(o) && not (held o) then begin
          t.reported.(o) <- t.consumed.(o);
          owed := (o, t.consumed.(o)) :: !owed
        end
      done;
      (* In a large group a cast of credit costs a datagram per member,
         though only the origins owed read it: when few are owed, each gets
         its credit point-to-point (reliable, so twice a datagram with its
         acknowledgement). *)
      let owed_count = List.length !owed in
      if t.n >= unicast_from && 2 * owed_count < t.n - 1 then
        List.iter
          (fun ((o, _) as c) ->
            if o = t.rank then ()
            else begin
              t.credits_sent <- t.credits_sent + 1;
              t.out.dn (Event.Send o) (Credit { credits = [ c ] }) (Msg.empty ())
            end)
          !owed
      else
        let rec send l =
          if l <> [] then begin
            let rec split k acc = function
              | x :: rest when k > 0 -> split (k - 1) (x :: acc) rest
              | rest -> (List.rev acc, rest)
            in
            let credits, rest = split max_credits [] l in
            t.credits_sent <- t.credits_sent + 1;
            t.out.dn Event.Cast (Credit { credits }) (Msg.empty ());
            send rest
          end
        in
        send !owed
    end

  let consumed t o c ~ask =
    t.consumed.(o) <- t.consumed.(o) + c;
    if ask || t.consumed.(o) - t.reported.(o) >= t.threshold then send_credit t
    else if t.credit_at = max_int then begin
      t.credit_at <- t.now () + t.credit_delay;
      t.out.alarm t.credit_at
    end

  let recompute_floor t =
    let least = ref max_int in
    for k = 0 to t.n - 1 do
      if k <> t.rank && (not t.gone.(k)) && t.credited.(k) < !least then least := t.credited.(k)
    done;
    t.floor <- !least

  let on_credit t m credits =
    let valid (o, _) = o >= 0 && o < t.n in
    if not (List.for_all valid credits) then begin
      t.bad_credit <- t.bad_credit + 1;
      Log.debug (fun f -> f "from %d: credit for ranks outside a view of %d" m t.n)
    end
    else
      let mine =
        List.fold_left (fun acc (o, v) -> if o = t.rank then max acc v else acc) (-1) credits
      in
      if mine > t.sent then begin
        t.bad_credit <- t.bad_credit + 1;
        Log.debug (fun f -> f "from %d: credit for %d bytes, %d cast" m mine t.sent)
      end
      else if mine > t.credited.(m) then begin
        let was = t.credited.(m) in
        t.credited.(m) <- mine;
        if was = t.floor then recompute_floor t;
        drain t
      end

  (* A suspected member will not credit anything: casts go on without it
     (the view change that excludes it needs casts to flow). *)
  let forget t ranks =
    let fresh = List.filter (fun r -> r >= 0 && r < t.n && r <> t.rank && not t.gone.(r)) ranks in
    if fresh <> [] then begin
      List.iter (fun r -> t.gone.(r) <- true) fresh;
      recompute_floor t;
      if not t.stopped then drain t
    end

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      let valid r = r >= 0 && r < t.n in
      match (src, h) with
      | Event.Send_from _, No_hdr -> t.out.up src msg
      | Event.Cast_from o, Data _ when o = t.rank -> t.out.up src msg
      | Event.Cast_from o, Data { ask } when valid o ->
          let c = cost msg in
          t.out.up src msg;
          if not t.stopped then consumed t o c ~ask
      | Event.Cast_from o, Ask when o = t.rank -> Msg.release msg
      | Event.Cast_from o, Ask when valid o ->
          Msg.release msg;
          if t.consumed.(o) > t.reported.(o) then send_credit t
      | Event.Cast_from m, Credit _ when m = t.rank -> Msg.release msg
      | Event.Cast_from m, Credit { credits } when valid m ->
          Msg.release msg;
          on_credit t m credits
      (* Credit by send comes only in groups where it is sent so. *)
      | Event.Send_from m, Credit { credits } when valid m && t.n >= unicast_from ->
          Msg.release msg;
          on_credit t m credits
      | _ ->
          t.malformed <- t.malformed + 1;
          Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
          Msg.release msg

  let up_ctl t = function
    | Event.Blocked b ->
        t.below <- b;
        report t
    | Gevent.Suspect { ranks; _ } as e ->
        t.out.up_ctl e;
        forget t ranks
    | e -> t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Gevent.Suspect_request { ranks; _ } -> forget t ranks
    | Event.Block_req _ when not t.stopped ->
        t.flushing <- true;
        drain t
    | Hold_credit { who; hold; except } ->
        let was = List.mem_assoc who t.holders in
        t.holders <- List.remove_assoc who t.holders;
        if hold then t.holders <- (who, except) :: t.holders;
        if hold && not was then t.holds <- t.holds + 1;
        if (not hold) && was && not t.stopped then send_credit t
    | Event.Stop ->
        t.stopped <- true;
        Queue.iter (fun (m, _) -> Msg.release m) t.queue;
        Queue.clear t.queue;
        t.queued <- 0;
        t.credit_at <- max_int
    | _ -> ());
    match e with Hold_credit _ -> () | e -> t.out.dn_ctl e

  let timer t now =
    if not t.stopped then begin
      if t.credit_at <= now then send_credit t;
      if t.credit_at <> max_int then t.out.alarm t.credit_at
    end

  let counters t =
    [
      ("credits_sent", t.credits_sent);
      ("credit_held", t.holds);
      ("blocked", t.blocked);
      ("malformed", t.malformed);
      ("bad_credit", t.bad_credit);
      ("outstanding", outstanding t);
      ("queued", t.queued);
      ("queued_messages", Queue.length t.queue);
    ]
end

(* The common case of a cast: nothing queued and the window open (the
   cost counts the layered length); received, a cast of the view's. The
   compressed form is always [Data { ask = false }]: a cast that asks for
   credit takes the layered path. *)
module F = struct
  include L

  let cast =
    {
      Layer.nfields = 0;
      live = None;
      up_live = false;
      length = true;
      framed = false;
      size =
        (let n = Codec.size codec (Data { ask = false }) in
         fun _ _ -> n);
      dn_ok =
        (fun t dst len ->
          (not t.stopped) && dst == Event.Cast && Queue.is_empty t.queue && fits t (len + overhead));
      dn_fast = (fun t _ _ len ~layered:_ _ _ -> t.sent <- t.sent + len + overhead);
      dn_after = Layer.nothing_dn_after;
      up_ok =
        (fun t src _ _ _ ->
          (not t.stopped) && match src with Event.Cast_from o -> o >= 0 && o < t.n | _ -> false);
      up_fast = Layer.nothing_up_fast;
      up_after =
        (fun t src len _ _ ->
          match src with
          | Event.Cast_from o when o <> t.rank && not t.stopped ->
              consumed t o (len + overhead) ~ask:false
          | _ -> ());
      expand = (fun _ _ -> Data { ask = false });
    }

  (* Sends pass: their flow is Pt2ptw's. *)
  let send = Layer.constant_send codec No_hdr ~live:(fun t -> not t.stopped) ()

  let state t =
    let ints = Fmt.(array ~sep:sp int) in
    Fmt.str
      "stopped %b flushing %b over %b below %b told %b; queue %d/%d sent %d asked %d floor %d \
       credit_at %d; credited %a; gone %a; consumed %a; reported %a; holders %d; %a"
      t.stopped t.flushing t.over t.below t.told (Queue.length t.queue) t.queued t.sent t.asked
      t.floor t.credit_at ints t.credited
      Fmt.(array ~sep:sp bool)
      t.gone ints t.consumed ints t.reported (List.length t.holders)
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
