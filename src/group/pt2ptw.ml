open Consort

let src = Logs.Src.create "consort.pt2ptw" ~doc:"Pt2ptw layer: point-to-point window flow control"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let window = "pt2ptw.window"
  let queue = "pt2ptw.queue"
  let ack_delay = "pt2ptw.ack_delay"

  let () =
    Params.register window
      (Params.Int (256 * 1024))
      ~doc:"bytes sent to one peer and not yet acknowledged by its application";
    Params.register queue
      (Params.Int (1024 * 1024))
      ~doc:"bytes queued for one peer beyond which the application is told it is blocked";
    Params.register ack_delay
      (Params.Time (Time.of_ms 2))
      ~doc:"how long a receiver waits to batch an acknowledgement"
end

let overhead = 64

(* What fills the empty slots of the queues: never released, never sent. *)
let no_msg = Msg.empty ()

let contract =
  Contract.v "send-flow" ~doc:"point-to-point window flow control: bounded bytes in flight per peer"

module L = struct
  type header = No_hdr | Data of { ask : bool } | Ack of { consumed : int } | Ask

  let name = "pt2ptw"

  let codec =
    Codec.(
      union "pt2ptw"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "data" unit
            (function Data { ask = false } -> Some () | _ -> None)
            (fun () -> Data { ask = false });
          case 2 "data_ask" unit
            (function Data { ask = true } -> Some () | _ -> None)
            (fun () -> Data { ask = true });
          case 3 "ack" varint
            (function Ack { consumed } -> Some consumed | _ -> None)
            (fun consumed -> Ack { consumed });
          case 4 "ask" unit (function Ask -> Some () | _ -> None) (fun () -> Ask);
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Data { ask = false } -> Fmt.string ppf "data"
    | Data { ask = true } -> Fmt.string ppf "data(ask)"
    | Ack { consumed } -> Fmt.pf ppf "ack(%d)" consumed
    | Ask -> Fmt.string ppf "ask"

  let provides = [ contract ]
  let requires = [ Contract.reliable_send ]

  (* Totals count bytes since the stack began: [sent], [acked] and [asked]
     (covered by our last request for an acknowledgement) of our messages
     to the peer, [consumed] and [reported] of its messages to us. *)
  type peer = {
    queue : Msg.t Seqring.t; (* waiting to be sent, numbered from [head] to [tail - 1] *)
    mutable head : int;
    mutable tail : int;
    mutable queued : int;
    mutable sent : int;
    mutable acked : int;
    mutable asked : int;
    mutable consumed : int;
    mutable reported : int;
    mutable ack_at : Time.t;
  }

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    rank : int;
    peers : peer array;
    due : Deadlines.t; (* [ack_at] by peer *)
    due_now : int array; (* the peers due in this call of [timer] *)
    gone : bool array; (* suspected members: nothing more is sent to them *)
    window : int;
    limit : int;
    low : int;
    threshold : int;
    ack_delay : Time.t;
    mutable flushing : bool; (* a view change drains the queues *)
    mutable over : bool; (* some queue went past [limit] and not all are back to [low] *)
    mutable below : bool; (* the layers below said they are blocked *)
    mutable told : bool; (* what the layer above was last told *)
    mutable stopped : bool;
    mutable acks_sent : int;
    mutable blocked : int;
    mutable malformed : int;
    mutable bad_ack : int;
    mutable bad_dst : int;
    mutable to_gone : int;
  }

  let create (ctx : Layer.ctx) out =
    let window = max 1 (Params.int ctx.params Param.window) in
    let limit = max 0 (Params.int ctx.params Param.queue) in
    let peer _ =
      {
        queue = Seqring.create ~size:16 no_msg;
        head = 0;
        tail = 0;
        queued = 0;
        sent = 0;
        acked = 0;
        asked = 0;
        consumed = 0;
        reported = 0;
        ack_at = max_int;
      }
    in
    {
      out;
      now = ctx.now;
      rank = ctx.view.rank;
      peers = Array.init (View.nmembers ctx.view) peer;
      due = Deadlines.create (View.nmembers ctx.view);
      due_now = Array.make (View.nmembers ctx.view) 0;
      gone = Array.make (View.nmembers ctx.view) false;
      window;
      limit;
      low = limit / 2;
      threshold = max 1 (window / 4);
      ack_delay = Params.time ctx.params Param.ack_delay;
      flushing = false;
      over = false;
      below = false;
      told = false;
      stopped = false;
      acks_sent = 0;
      blocked = 0;
      malformed = 0;
      bad_ack = 0;
      bad_dst = 0;
      to_gone = 0;
    }

  let cost msg = Msg.length msg + overhead

  (* The queue emptied, its messages released or gone elsewhere. *)
  let clear p =
    Seqring.reset p.queue;
    p.head <- p.tail;
    p.queued <- 0

  (* Tells the layer above when the stack beneath changes between blocked
     and not. *)
  let report t =
    let b = t.over || t.below in
    if b <> t.told && not t.stopped then begin
      t.told <- b;
      if b then t.blocked <- t.blocked + 1;
      Log.debug (fun m -> m "blocked: %b" b);
      t.out.up_ctl (Event.Blocked b)
    end

  (* While the view flushes, nothing waits: the application is blocked
     and what was queued must be counted in this view. *)
  let fits t p c = t.flushing || p.sent = p.acked || p.sent - p.acked + c <= t.window

  (* [ask]: the window is full after this message and more wait, so the
     peer should acknowledge as soon as it has consumed it. *)
  let transmit t r p msg c ~ask =
    p.sent <- p.sent + c;
    if ask then p.asked <- p.sent;
    t.out.dn (Event.Send r) (Data { ask }) msg

  let drain t r p =
    let rec go () =
      if p.head < p.tail && not t.stopped then begin
        let msg = Seqring.find p.queue p.head in
        let c = cost msg in
        if fits t p c then begin
          Seqring.remove p.queue p.head;
          p.head <- p.head + 1;
          p.queued <- p.queued - c;
          let ask =
            p.head < p.tail && p.sent + c - p.acked + cost (Seqring.find p.queue p.head) > t.window
          in
          transmit t r p msg c ~ask;
          go ()
        end
      end
    in
    go ();
    if t.over && Array.for_all (fun p -> p.queued <= t.low) t.peers then t.over <- false;
    report t

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Cast -> t.out.dn dst No_hdr msg
      | Event.Send r when r = t.rank -> t.out.dn dst No_hdr msg
      | Event.Send r when r >= 0 && r < Array.length t.peers && t.gone.(r) ->
          t.to_gone <- t.to_gone + 1;
          Msg.release msg
      | Event.Send r when r >= 0 && r < Array.length t.peers ->
          let p = t.peers.(r) in
          let c = cost msg in
          if p.head = p.tail && fits t p c then transmit t r p msg c ~ask:false
          else begin
            Seqring.replace p.queue p.tail msg;
            p.tail <- p.tail + 1;
            p.queued <- p.queued + c;
            if p.asked < p.sent then begin
              (* Stalled behind messages sent before anything waited. *)
              p.asked <- p.sent;
              t.out.dn (Event.Send r) Ask (Msg.empty ())
            end;
            if p.queued > t.limit && not t.over then begin
              t.over <- true;
              report t
            end
          end
      | Event.Send r ->
          t.bad_dst <- t.bad_dst + 1;
          Log.err (fun m -> m "send to rank %d outside a view of %d" r (Array.length t.peers));
          Msg.release msg

  (* The deadline is kept in the peer and in [due], whence the timer takes
     only those due. *)
  let set_ack t r p at =
    p.ack_at <- at;
    Deadlines.set t.due r at;
    if at <> max_int then t.out.alarm at

  let send_ack t r p =
    p.reported <- p.consumed;
    set_ack t r p max_int;
    t.acks_sent <- t.acks_sent + 1;
    t.out.dn (Event.Send r) (Ack { consumed = p.consumed }) (Msg.empty ())

  let consumed t r p c ~ask =
    p.consumed <- p.consumed + c;
    if ask || p.consumed - p.reported >= t.threshold then send_ack t r p
    else if p.ack_at = max_int then set_ack t r p (t.now () + t.ack_delay)

  let acked t r p total =
    if total > p.sent then begin
      t.bad_ack <- t.bad_ack + 1;
      Log.debug (fun m -> m "from %d: acknowledgement of %d bytes, %d sent" r total p.sent)
    end
    else if total > p.acked then begin
      p.acked <- total;
      drain t r p
    end

  let peer t r = r <> t.rank && r >= 0 && r < Array.length t.peers

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | Event.Cast_from _, No_hdr -> t.out.up src msg
      | Event.Send_from r, No_hdr when r = t.rank -> t.out.up src msg
      | Event.Send_from r, Data { ask } when peer t r ->
          let c = cost msg in
          t.out.up src msg;
          if not t.stopped then consumed t r t.peers.(r) c ~ask
      | Event.Send_from r, Ask when peer t r ->
          Msg.release msg;
          let p = t.peers.(r) in
          if p.consumed > p.reported then send_ack t r p
      | Event.Send_from r, Ack { consumed } when peer t r ->
          Msg.release msg;
          acked t r t.peers.(r) consumed
      | _ ->
          t.malformed <- t.malformed + 1;
          Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
          Msg.release msg

  (* A suspected member will not acknowledge anything: what waits for it is
     dropped, so that it keeps no one blocked until the next view. *)
  let forget t ranks =
    List.iter
      (fun r ->
        if r >= 0 && r < Array.length t.peers && r <> t.rank && not t.gone.(r) then begin
          t.gone.(r) <- true;
          let p = t.peers.(r) in
          Seqring.iter
            (fun _ m ->
              t.to_gone <- t.to_gone + 1;
              Msg.release m)
            p.queue;
          clear p
        end)
      ranks;
    if t.over && Array.for_all (fun p -> p.queued <= t.low) t.peers then begin
      t.over <- false;
      report t
    end

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
        Array.iteri (fun r p -> if r <> t.rank && not t.gone.(r) then drain t r p) t.peers
    | Event.Stop ->
        t.stopped <- true;
        Array.iter
          (fun p ->
            Seqring.iter (fun _ m -> Msg.release m) p.queue;
            clear p;
            p.ack_at <- max_int)
          t.peers;
        Deadlines.reset t.due
    | _ -> ());
    t.out.dn_ctl e

  let timer t now =
    if not t.stopped then begin
      let k = Deadlines.take_due t.due now t.due_now in
      for j = 0 to k - 1 do
        let r = t.due_now.(j) in
        let p = t.peers.(r) in
        if p.ack_at <= now then
          if p.consumed > p.reported then send_ack t r p else set_ack t r p max_int
      done;
      let next = Deadlines.next t.due in
      if next <> max_int then t.out.alarm next
    end

  let counters t =
    let sum f = Array.fold_left (fun acc p -> acc + f p) 0 t.peers in
    [
      ("acks_sent", t.acks_sent);
      ("blocked", t.blocked);
      ("malformed", t.malformed);
      ("bad_ack", t.bad_ack);
      ("bad_dst", t.bad_dst);
      ("to_gone", t.to_gone);
      ("outstanding", sum (fun p -> p.sent - p.acked));
      ("queued", sum (fun p -> p.queued));
      ("queued_messages", sum (fun p -> Seqring.length p.queue));
    ]
end

(* Casts carry no header of Pt2ptw. *)
module F = struct
  include L

  let cast = Layer.constant_cast codec No_hdr ~live:(fun t -> not t.stopped) ()

  (* The common case of a send: to a peer not suspected, nothing queued
     for it and the window open (the cost counts the layered length).
     Compressed, it is always [Data { ask = false }]: a send that asks for
     an acknowledgement (the window full, more queued) takes the layered
     path. *)
  let send =
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
          (not t.stopped)
          &&
          match dst with
          | Event.Send r when peer t r && not t.gone.(r) ->
              let p = t.peers.(r) in
              p.head = p.tail && fits t p (len + overhead)
          | _ -> false);
      dn_fast =
        (fun t dst _ len ~layered:_ _ _ ->
          match dst with
          | Event.Send r ->
              let p = t.peers.(r) in
              p.sent <- p.sent + len + overhead
          | Event.Cast -> ());
      dn_after = Layer.nothing_dn_after;
      up_ok =
        (fun t src _ _ _ ->
          (not t.stopped) && match src with Event.Send_from r -> peer t r | _ -> false);
      up_fast = Layer.nothing_up_fast;
      up_after =
        (fun t src len _ _ ->
          match src with
          | Event.Send_from r when not t.stopped ->
              consumed t r t.peers.(r) (len + overhead) ~ask:false
          | _ -> ());
      expand = (fun _ _ -> Data { ask = false });
    }

  let state t =
    let peer ppf p =
      Fmt.pf ppf "[queue %d/%d sent %d acked %d asked %d consumed %d reported %d ack %d]"
        (Seqring.length p.queue) p.queued p.sent p.acked p.asked p.consumed p.reported p.ack_at
    in
    Fmt.str "stopped %b flushing %b over %b below %b told %b; gone %a; %a; %a" t.stopped t.flushing
      t.over t.below t.told
      Fmt.(array ~sep:sp bool)
      t.gone
      Fmt.(array ~sep:sp peer)
      t.peers
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
