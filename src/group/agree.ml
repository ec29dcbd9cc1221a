open Consort

let src = Logs.Src.create "consort.agree" ~doc:"Agree layer: safe delivery"

module Log = (val Logs.src_log src : Logs.LOG)

let safe_delivery =
  Contract.v "safe-delivery" ~doc:"casts delivered once every member of the view holds them"

module L = struct
  type header = Pass  (** a send *) | Data  (** a cast *)

  let name = "agree"

  let codec =
    Codec.(
      union "agree"
        [
          case 0 "pass" unit (function Pass -> Some () | _ -> None) (fun () -> Pass);
          case 1 "data" unit (function Data -> Some () | _ -> None) (fun () -> Data);
        ])

  let pp_header ppf = function Pass -> Fmt.string ppf "pass" | Data -> Fmt.string ppf "data"
  let provides = [ safe_delivery ]
  let requires = [ Gmp.membership ]

  (* A cast kept until it is safe: its origin, and the mark it is safe at
     (Mnak's count of the origin's casts received here at the first
     stability event after it came; -1 until then). *)
  type held = { origin : int; msg : Msg.t; mutable mark : int }

  type t = {
    out : header Layer.out;
    n : int;
    stable : int array; (* Mnak: casts of each origin every member holds *)
    held : held Queue.t; (* in the order they came *)
    mutable tracking : bool;
    mutable synced : bool;
    mutable flushing : bool; (* a view change started: the regular part of the view is over *)
    mutable stopped : bool;
    mutable safe : int;
    mutable at_flush : int;
    mutable events : int;
    mutable nonsense : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      n;
      stable = Array.make n 0;
      held = Queue.create ();
      tracking = false;
      synced = false;
      flushing = false;
      stopped = false;
      safe = 0;
      at_flush = 0;
      events = 0;
      nonsense = 0;
    }

  (* Mnak tells what every member holds only once asked. *)
  let track t =
    if not t.tracking then begin
      t.tracking <- true;
      t.out.dn_ctl Mnak.Track_stability
    end

  (* Every member of the view holds the cast: the members suspected of
     failure included, so that no member that goes on misses a cast
     delivered here before the flush. *)
  let is_safe t h = t.n = 1 || (h.mark >= 0 && t.stable.(h.origin) >= h.mark)

  (* In the order the casts came: above an ordering layer, its order. *)
  let rec deliver_stable t =
    if not (t.stopped || t.flushing) then
      match Queue.peek_opt t.held with
      | Some h when is_safe t h ->
          ignore (Queue.pop t.held);
          t.safe <- t.safe + 1;
          t.out.up (Event.Cast_from h.origin) h.msg;
          deliver_stable t
      | _ -> ()

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | Event.Send_from _, Pass -> t.out.up src msg
      | Event.Cast_from o, Data when o >= 0 && o < t.n ->
          Queue.add { origin = o; msg; mark = -1 } t.held;
          track t;
          deliver_stable t
      | _ ->
          t.nonsense <- t.nonsense + 1;
          Msg.release msg

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else (
      track t;
      match dst with Event.Send _ -> t.out.dn dst Pass msg | Event.Cast -> t.out.dn dst Data msg)

  let up_ctl t e =
    match e with
    | Mnak.Stable { stable; received } ->
        t.events <- t.events + 1;
        if Array.length stable = t.n && Array.length received = t.n then begin
          (* Every cast kept here came through Mnak before this event. *)
          Queue.iter (fun h -> if h.mark < 0 then h.mark <- received.(h.origin)) t.held;
          Array.blit stable 0 t.stable 0 t.n;
          deliver_stable t
        end
    | e ->
        (* Once a view change starts, a cast stable now may be missing at
           a member the flush excludes (its Mnak held it, its Gmp had
           stopped delivering): what is held waits for the end of the view,
           after the transitional view, where it is safe among the members
           that go on together. *)
        (match e with
        | Gmp.Synced | Gmp.Excluded -> t.synced <- true
        | Gmp.Block -> t.flushing <- true
        | _ -> ());
        t.out.up_ctl e

  let dn_ctl t e =
    match e with
    | Event.Stop when not t.stopped ->
        (* After a flush, every member that goes on with this one holds
           the same casts: what is not yet known to be everywhere is
           delivered now, in the order it came (the flush, not the regular
           part of the view). A member that stops without a flush (its
           transport closed) delivers nothing more. *)
        t.out.dn_ctl e;
        if t.synced || t.n = 1 then
          Queue.iter
            (fun h ->
              t.at_flush <- t.at_flush + 1;
              t.out.up (Event.Cast_from h.origin) h.msg)
            t.held
        else Queue.iter (fun h -> Msg.release h.msg) t.held;
        Queue.clear t.held;
        t.stopped <- true
    | e -> t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("safe", t.safe);
      ("at_flush", t.at_flush);
      ("held", Queue.length t.held);
      ("stability_events", t.events);
      ("nonsense", t.nonsense);
    ]
end

include L

let layer : Layer.t = (module L)
