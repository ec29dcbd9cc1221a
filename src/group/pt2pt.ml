open Consort

let src = Logs.Src.create "consort.pt2pt" ~doc:"Pt2pt layer: reliable FIFO point-to-point"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let rto = "pt2pt.rto"
  let max_rto = "pt2pt.max_rto"
  let window = "pt2pt.window"
  let ack_delay = "pt2pt.ack_delay"
  let ack_every = "pt2pt.ack_every"

  let () =
    Params.register rto (Params.Time (Time.of_ms 20)) ~doc:"initial retransmission timeout";
    Params.register max_rto
      (Params.Time (Time.of_ms 1000))
      ~doc:"largest retransmission timeout after exponential backoff";
    Params.register window (Params.Int 256)
      ~doc:"messages buffered ahead of the next expected one, and resent at each timeout";
    Params.register ack_delay
      (Params.Time (Time.of_ms 5))
      ~doc:"how long an acknowledgement waits for a data message to ride on";
    Params.register ack_every (Params.Int 32)
      ~doc:"messages received after which an acknowledgement is sent at once"
end

let max_sack = 16

(* What fills the empty slots of the rings: never released, never sent. *)
let no_msg = Msg.empty ()
let max_window = 1 lsl 20

module L = struct
  type header =
    | No_hdr
    | Data of { seq : int; ack : int }
    | Ack of { ack : int; sack : (int * int) list }

  let name = "pt2pt"

  let codec =
    Codec.(
      union "pt2pt"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "data" (pair varint varint)
            (function Data { seq; ack } -> Some (seq, ack) | _ -> None)
            (fun (seq, ack) -> Data { seq; ack });
          case 2 "ack"
            (pair varint (list ~max:max_sack (pair varint varint)))
            (function Ack { ack; sack } -> Some (ack, sack) | _ -> None)
            (fun (ack, sack) -> Ack { ack; sack });
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Data { seq; ack } -> Fmt.pf ppf "data(seq %d, ack %d)" seq ack
    | Ack { ack; sack = [] } -> Fmt.pf ppf "ack(%d)" ack
    | Ack { ack; sack } ->
        let range ppf (lo, hi) = Fmt.pf ppf "%d..%d" lo hi in
        Fmt.pf ppf "ack(%d, have %a)" ack Fmt.(list ~sep:comma range) sack

  let provides = [ Contract.reliable_send ]
  let requires = [ Contract.datagram ]

  (* What this member knows of one peer: the sending half ([una] is the
     oldest number not cumulatively acknowledged, [next] the next to use)
     and the receiving half ([expected] is the next number to deliver). *)
  type peer = {
    unacked : Msg.t Seqring.t; (* in [una, next), less those selectively acknowledged *)
    mutable una : int;
    mutable next : int;
    mutable rto : Time.t;
    mutable rtx_at : Time.t;
    early : Msg.t Seqring.t; (* received above [expected], within the window *)
    mutable early_top : int; (* above the highest number in [early] *)
    mutable expected : int;
    mutable unacked_in : int; (* delivered since our last acknowledgement *)
    mutable ack_at : Time.t;
  }

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    rank : int;
    peers : peer array;
    due : Deadlines.t; (* [2r]: [ack_at] of peer [r]; [2r + 1]: its [rtx_at] *)
    due_now : int array; (* the keys due in this call of [timer] *)
    rto0 : Time.t;
    max_rto : Time.t;
    window : int;
    ack_delay : Time.t;
    ack_every : int;
    mutable stopped : bool;
    mutable retransmissions : int;
    mutable duplicates : int;
    mutable out_of_order : int;
    mutable acks_sent : int;
    mutable beyond_window : int;
    mutable malformed : int;
    mutable impossible : int;
    mutable bad_dst : int;
  }

  let create (ctx : Layer.ctx) out =
    let rto0 = Params.time ctx.params Param.rto in
    let peer _ =
      {
        unacked = Seqring.create ~size:16 no_msg;
        una = 0;
        next = 0;
        rto = rto0;
        rtx_at = max_int;
        early = Seqring.create ~size:16 no_msg;
        early_top = 0;
        expected = 0;
        unacked_in = 0;
        ack_at = max_int;
      }
    in
    {
      out;
      now = ctx.now;
      rank = ctx.view.rank;
      peers = Array.init (View.nmembers ctx.view) peer;
      due = Deadlines.create (2 * View.nmembers ctx.view);
      due_now = Array.make (2 * View.nmembers ctx.view) 0;
      rto0;
      max_rto = Params.time ctx.params Param.max_rto;
      window = max 1 (min max_window (Params.int ctx.params Param.window));
      ack_delay = Params.time ctx.params Param.ack_delay;
      ack_every = max 1 (Params.int ctx.params Param.ack_every);
      stopped = false;
      retransmissions = 0;
      duplicates = 0;
      out_of_order = 0;
      acks_sent = 0;
      beyond_window = 0;
      malformed = 0;
      impossible = 0;
      bad_dst = 0;
    }

  (* The runs of early messages held, lowest first, at most [max_sack]. *)
  let sack p =
    let rec go s acc k =
      if s >= p.early_top || k = 0 then List.rev acc
      else if not (Seqring.mem p.early s) then go (s + 1) acc k
      else
        let rec run e = if Seqring.mem p.early (e + 1) then run (e + 1) else e in
        let e = run s in
        go (e + 1) ((s, e) :: acc) (k - 1)
    in
    if Seqring.length p.early = 0 then [] else go (p.expected + 1) [] max_sack

  (* Each deadline is kept in the peer and in [due], whence the timer takes
     only those due. *)
  let set_ack t r p at =
    p.ack_at <- at;
    Deadlines.set t.due (2 * r) at;
    if at <> max_int then t.out.alarm at

  let set_rtx t r p at =
    p.rtx_at <- at;
    Deadlines.set t.due ((2 * r) + 1) at;
    if at <> max_int then t.out.alarm at

  let send_ack t r p =
    set_ack t r p max_int;
    p.unacked_in <- 0;
    t.acks_sent <- t.acks_sent + 1;
    t.out.dn (Event.Send r) (Ack { ack = p.expected; sack = sack p }) (Msg.empty ())

  let transmit t r p seq =
    (* Any data message carries our acknowledgement of the peer. *)
    set_ack t r p max_int;
    p.unacked_in <- 0;
    let m = Seqring.find p.unacked seq in
    t.out.dn (Event.Send r) (Data { seq; ack = p.expected }) (Msg.retain m)

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Cast -> t.out.dn dst No_hdr msg
      | Event.Send r when r = t.rank -> t.out.up (Event.Send_from r) msg
      | Event.Send r when r >= 0 && r < Array.length t.peers ->
          let p = t.peers.(r) in
          let seq = p.next in
          p.next <- seq + 1;
          Seqring.replace p.unacked seq msg;
          if p.rtx_at = max_int then begin
            p.rto <- t.rto0;
            set_rtx t r p (t.now () + p.rto)
          end;
          transmit t r p seq
      | Event.Send r ->
          t.bad_dst <- t.bad_dst + 1;
          Log.err (fun m -> m "send to rank %d outside a view of %d" r (Array.length t.peers));
          Msg.release msg

  let forget p s =
    if Seqring.mem p.unacked s then begin
      let m = Seqring.find p.unacked s in
      Seqring.remove p.unacked s;
      Msg.release m
    end

  (* The peer has all our messages below [ack] and those in [sack]: they
     need no more sending. *)
  let acked t r p ack sack =
    if ack > p.next then
      Log.debug (fun m -> m "acknowledgement %d beyond the %d messages sent" ack p.next)
    else begin
      let before = Seqring.length p.unacked in
      if ack > p.una then begin
        for s = p.una to ack - 1 do
          forget p s
        done;
        p.una <- ack
      end;
      List.iter
        (fun (lo, hi) ->
          for s = max lo p.una to min hi (p.next - 1) do
            forget p s
          done)
        sack;
      if Seqring.length p.unacked < before then begin
        p.rto <- t.rto0;
        set_rtx t r p (if Seqring.length p.unacked = 0 then max_int else t.now () + p.rto)
      end
    end

  let schedule_ack t r p =
    p.unacked_in <- p.unacked_in + 1;
    if p.unacked_in >= t.ack_every then send_ack t r p
    else if p.ack_at = max_int then set_ack t r p (t.now () + t.ack_delay)

  let received t r p seq msg =
    if seq < p.expected || Seqring.mem p.early seq then begin
      t.duplicates <- t.duplicates + 1;
      Msg.release msg;
      send_ack t r p
    end
    else if seq - p.expected >= t.window then begin
      t.beyond_window <- t.beyond_window + 1;
      Log.debug (fun m -> m "from %d: dropped %d, beyond window at %d" r seq p.expected);
      Msg.release msg
    end
    else if seq > p.expected then begin
      t.out_of_order <- t.out_of_order + 1;
      Seqring.replace p.early seq msg;
      if seq >= p.early_top then p.early_top <- seq + 1;
      schedule_ack t r p
    end
    else begin
      p.expected <- seq + 1;
      schedule_ack t r p;
      t.out.up (Event.Send_from r) msg;
      let rec drain () =
        if (not t.stopped) && Seqring.mem p.early p.expected then begin
          let m = Seqring.find p.early p.expected in
          Seqring.remove p.early p.expected;
          p.expected <- p.expected + 1;
          schedule_ack t r p;
          t.out.up (Event.Send_from r) m;
          drain ()
        end
      in
      drain ()
    end

  let peer t r = r <> t.rank && r >= 0 && r < Array.length t.peers

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | Event.Cast_from _, No_hdr -> t.out.up src msg
      (* Numbers are checked before anything changes: an acknowledgement of
         messages never sent, or a message beyond the window, is dropped
         whole, acknowledgement included. *)
      | Event.Send_from r, (Data { ack; _ } | Ack { ack; _ })
        when peer t r && ack > t.peers.(r).next ->
          t.impossible <- t.impossible + 1;
          Log.debug (fun m ->
              m "from %d: acknowledgement %d beyond the %d messages sent, dropped" r ack
                t.peers.(r).next);
          Msg.release msg
      | Event.Send_from r, Data { seq; _ } when peer t r && seq - t.peers.(r).expected >= t.window
        ->
          t.beyond_window <- t.beyond_window + 1;
          Log.debug (fun m ->
              m "from %d: dropped %d, beyond window at %d" r seq t.peers.(r).expected);
          Msg.release msg
      | Event.Send_from r, Data { seq; ack } when peer t r ->
          let p = t.peers.(r) in
          acked t r p ack [];
          received t r p seq msg
      | Event.Send_from r, Ack { ack; sack } when peer t r ->
          acked t r t.peers.(r) ack sack;
          Msg.release msg
      | _ ->
          t.malformed <- t.malformed + 1;
          Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
          Msg.release msg

  let up_ctl t e = t.out.up_ctl e

  let release_all t =
    Array.iter
      (fun p ->
        Seqring.iter (fun _ m -> Msg.release m) p.unacked;
        Seqring.reset p.unacked;
        Seqring.iter (fun _ m -> Msg.release m) p.early;
        Seqring.reset p.early;
        p.una <- p.next;
        p.rtx_at <- max_int;
        p.ack_at <- max_int)
      t.peers;
    Deadlines.reset t.due

  let dn_ctl t e =
    (match e with
    | Event.Stop ->
        t.stopped <- true;
        release_all t
    | _ -> ());
    t.out.dn_ctl e

  (* Only the deadlines due are visited, earliest first; a handler may
     have moved a later one of the same peer (a retransmission carries the
     acknowledgement), so each is checked again. *)
  let timer t now =
    if not t.stopped then begin
      let k = Deadlines.take_due t.due now t.due_now in
      for j = 0 to k - 1 do
        let key = t.due_now.(j) in
        let r = key / 2 in
        let p = t.peers.(r) in
        if key land 1 = 0 then begin
          if p.ack_at <= now then send_ack t r p
        end
        else if p.rtx_at <= now && Seqring.length p.unacked > 0 then begin
          let last = min p.next (p.una + t.window) - 1 in
          Log.debug (fun m ->
              m "to %d: retransmitting in %d..%d after %a" r p.una last Time.pp p.rto);
          for s = p.una to last do
            if Seqring.mem p.unacked s then begin
              t.retransmissions <- t.retransmissions + 1;
              transmit t r p s
            end
          done;
          p.rto <- min t.max_rto (2 * p.rto);
          set_rtx t r p (now + p.rto)
        end
        else if p.rtx_at <= now then set_rtx t r p max_int
      done;
      let next = Deadlines.next t.due in
      if next <> max_int then t.out.alarm next
    end

  let counters t =
    let sum f = Array.fold_left (fun acc p -> acc + f p) 0 t.peers in
    [
      ("retransmissions", t.retransmissions);
      ("duplicates", t.duplicates);
      ("out_of_order", t.out_of_order);
      ("acks_sent", t.acks_sent);
      ("beyond_window", t.beyond_window);
      ("malformed", t.malformed);
      ("impossible", t.impossible);
      ("bad_dst", t.bad_dst);
      ("unacked", sum (fun p -> Seqring.length p.unacked));
      ("buffered", sum (fun p -> Seqring.length p.early));
    ]
end

(* Casts pass through: no field, nothing to do. A send's common case: to
   a peer, down (its number and the acknowledgement it carries are the
   fields; the copy kept for retransmission gets the layered headers of
   the layers above); up, the next number expected from that peer, with
   nothing held early and an acknowledgement of what was sent. *)
module F = struct
  include L

  let cast = Layer.constant_cast codec No_hdr ~live:(fun t -> not t.stopped) ()

  let send =
    {
      Layer.nfields = 2;
      live = None;
      up_live = false;
      length = false;
      framed = false;
      size = (fun a off -> 1 + Codec.varint_size a.(off) + Codec.varint_size a.(off + 1));
      dn_ok =
        (fun t dst _ ->
          (not t.stopped) && match dst with Event.Send r -> peer t r | Event.Cast -> false);
      dn_fast =
        (fun t dst msg _ ~layered a off ->
          match dst with
          | Event.Send r ->
              let p = t.peers.(r) in
              let seq = p.next in
              p.next <- seq + 1;
              Seqring.replace p.unacked seq (layered.push (Msg.retain msg));
              if p.rtx_at = max_int then begin
                p.rto <- t.rto0;
                set_rtx t r p (t.now () + p.rto)
              end;
              set_ack t r p max_int;
              p.unacked_in <- 0;
              a.(off) <- seq;
              a.(off + 1) <- p.expected
          | Event.Cast -> ());
      dn_after = Layer.nothing_dn_after;
      up_ok =
        (fun t src _ a off ->
          (not t.stopped)
          &&
          match src with
          | Event.Send_from r when peer t r ->
              let p = t.peers.(r) in
              a.(off) = p.expected && a.(off + 1) <= p.next && Seqring.length p.early = 0
          | _ -> false);
      up_fast =
        (fun t src _ _ ~layered:_ a off ->
          match src with
          | Event.Send_from r ->
              let p = t.peers.(r) in
              acked t r p a.(off + 1) [];
              p.expected <- a.(off) + 1;
              schedule_ack t r p;
              src
          | _ -> src);
      up_after = Layer.nothing_up_after;
      expand = (fun a off -> Data { seq = a.(off); ack = a.(off + 1) });
    }

  let keys h = List.rev (Seqring.fold (fun k m acc -> (k, Msg.to_string m) :: acc) h [])

  let state t =
    let peer ppf p =
      Fmt.pf ppf
        "[una %d next %d rto %d rtx %d expected %d in %d ack %d top %d unacked %a early %a]" p.una
        p.next p.rto p.rtx_at p.expected p.unacked_in p.ack_at p.early_top
        Fmt.(Dump.list (pair int Dump.string))
        (keys p.unacked)
        Fmt.(Dump.list (pair int Dump.string))
        (keys p.early)
    in
    Fmt.str "stopped %b; %a; %a" t.stopped
      Fmt.(array ~sep:sp peer)
      t.peers
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
