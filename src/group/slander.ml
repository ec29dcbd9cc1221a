open Consort

let src = Logs.Src.create "consort.slander" ~doc:"Slander layer: suspicions shared reliably"

module Log = (val Logs.src_log src : Logs.LOG)

let contract =
  Contract.v "slander"
    ~doc:"a suspicion raised at one member is reported up at every member that stays"

let max_members = 4096
let max_reason = 1024
let pp_ranks = Fmt.(list ~sep:comma int)

module L = struct
  type header = No_hdr | Slander of { ranks : int list; reason : string; kind : Gevent.kind }

  let name = "slander"

  let codec =
    Codec.(
      union "slander"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "slander"
            (pair (list ~max:max_members varint) (string ~max:max_reason ()))
            (function
              | Slander { ranks; reason; kind = Gevent.Silent } -> Some (ranks, reason) | _ -> None)
            (fun (ranks, reason) -> Slander { ranks; reason; kind = Gevent.Silent });
          case 2 "slander_requested"
            (pair (list ~max:max_members varint) (string ~max:max_reason ()))
            (function
              | Slander { ranks; reason; kind = Gevent.Requested } -> Some (ranks, reason)
              | _ -> None)
            (fun (ranks, reason) -> Slander { ranks; reason; kind = Gevent.Requested });
          case 3 "slander_unresponsive"
            (pair (list ~max:max_members varint) (string ~max:max_reason ()))
            (function
              | Slander { ranks; reason; kind = Gevent.Unresponsive } -> Some (ranks, reason)
              | _ -> None)
            (fun (ranks, reason) -> Slander { ranks; reason; kind = Gevent.Unresponsive });
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Slander { ranks; reason; kind } ->
        Fmt.pf ppf "slander(%a, %a: %s)" pp_ranks ranks Gevent.pp_kind kind reason

  let provides = [ contract ]
  let requires = [ Contract.reliable_cast; Suspect.contract ]

  type t = {
    out : header Layer.out;
    rank : int;
    n : int;
    suspected : Rankset.t;
    mutable stopped : bool;
    mutable judging : (int list * Gevent.kind) option;
        (* while the layer below judges another member's slander: what it
           adopts of it is passed on with the same kind *)
    mutable slanders_sent : int;
    mutable slanders_received : int;
    mutable malformed : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      rank = ctx.view.rank;
      n;
      suspected = Rankset.create ~n ~me:ctx.view.rank;
      stopped = false;
      judging = None;
      slanders_sent = 0;
      slanders_received = 0;
      malformed = 0;
    }

  let fresh t ranks = Rankset.add t.suspected ranks
  let truncate s = if String.length s <= max_reason then s else String.sub s 0 max_reason

  (* A suspicion raised here: tell the group, then the layers above (each
     rank once). *)
  let raise_here t ranks reason kind =
    let added = fresh t ranks in
    if added <> [] then begin
      t.slanders_sent <- t.slanders_sent + 1;
      Log.info (fun m ->
          m "rank %d tells the group it suspects %a: %s" t.rank pp_ranks added reason);
      t.out.dn Event.Cast (Slander { ranks = added; reason = truncate reason; kind }) (Msg.empty ());
      t.out.up_ctl (Gevent.Suspect { ranks = added; reason })
    end

  (* Another member's suspicion is not taken on trust: the failure
     detector below judges it against what this member hears, and reports
     up what it adopts (or that the accuser is the faulty one). *)
  let heard t o ranks reason kind =
    t.slanders_received <- t.slanders_received + 1;
    if List.mem t.rank ranks then
      Log.info (fun m -> m "rank %d suspects this member, rank %d: %s" o t.rank reason);
    t.judging <- Some (ranks, kind);
    Fun.protect
      ~finally:(fun () -> t.judging <- None)
      (fun () -> t.out.dn_ctl (Gevent.Accusation { accuser = o; ranks; reason; kind }))

  let dn t dst msg = if t.stopped then Msg.release msg else t.out.dn dst No_hdr msg

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | (Event.Cast_from _ | Event.Send_from _), No_hdr -> t.out.up src msg
      | Event.Cast_from o, Slander { ranks; reason; kind } when o >= 0 && o < t.n ->
          Msg.release msg;
          (* Our own slanders come back from the reliable cast below. *)
          if o <> t.rank then heard t o ranks reason kind
      | _ ->
          t.malformed <- t.malformed + 1;
          Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
          Msg.release msg

  let up_ctl t e =
    match e with
    | Gevent.Suspect { ranks; reason } ->
        (* A suspicion adopted from another member's keeps its kind: one
           asked for, or a flush timeout, is not this member's finding of
           silence, and is not judged as one. *)
        let kind =
          match t.judging with
          | Some (accused, k) when List.for_all (fun r -> List.mem r accused) ranks -> k
          | _ -> Gevent.Silent
        in
        if not t.stopped then raise_here t ranks reason kind
    | e -> t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Stop -> t.stopped <- true
    | Gevent.Suspect_request { ranks; reason } when not t.stopped ->
        raise_here t ranks reason Gevent.Requested
    | Gevent.Suspect_unresponsive { ranks; reason } when not t.stopped ->
        raise_here t ranks reason Gevent.Unresponsive
    | _ -> ());
    t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("slanders_sent", t.slanders_sent);
      ("slanders_received", t.slanders_received);
      ("bad_rank", Rankset.bad_rank t.suspected);
      ("self_suspicions", Rankset.self t.suspected);
      ("malformed", t.malformed);
      ("suspected", Rankset.cardinal t.suspected);
    ]
end

(* Casts carry no header of Slander. *)
module F = struct
  include L

  let cast = Layer.constant_cast codec No_hdr ~live:(fun t -> not t.stopped) ()
  let send = Layer.constant_send codec No_hdr ~live:(fun t -> not t.stopped) ()

  let state t =
    Fmt.str "stopped %b; suspected %a; %a" t.stopped
      Fmt.(list ~sep:sp int)
      (Rankset.elements t.suspected)
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
