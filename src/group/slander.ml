open Consort

let src = Logs.Src.create "consort.slander" ~doc:"Slander layer: suspicions shared reliably"

module Log = (val Logs.src_log src : Logs.LOG)

let contract =
  Contract.v "slander"
    ~doc:"a suspicion raised at one member is reported up at every member that stays"

module Param = struct
  let stagger = "slander.stagger"
  let wait = "slander.wait"

  let () =
    Params.register stagger
      (Params.Time (Time.of_ms 5))
      ~doc:
        "how much longer each member waits than the one before it (in the ring, from the suspected \
         rank on) before it casts a suspicion of silence it raised, unless two other members' \
         slanders of the same ranks arrive first";
    Params.register wait
      (Params.Time (Time.of_ms 250))
      ~doc:"the longest a member waits before it casts a suspicion it raised of silence"
end

let max_members = 4096

(* Slanders of a rank from this many members (not found faulty here) and a
   member's own cast of it is dropped: two, so that a failure detector
   that waits for two accusers (Ringfd, and Suspect for its own
   exclusion) has them. *)
let enough = 2
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
    now : unit -> Time.t;
    rank : int;
    n : int;
    stagger : Time.t;
    wait : Time.t;
    suspected : Rankset.t;
    mutable stopped : bool;
    mutable pending : (int list * string * Time.t) list;
        (* suspicions of silence raised here, not yet cast: ranks, reason, when due *)
    heard_of : int list array;
        (* for each rank, the first [enough] other members heard to slander it *)
    mutable judging : (int list * Gevent.kind) option;
        (* while the layer below judges another member's slander: what it
           adopts of it is passed on with the same kind *)
    mutable slanders_sent : int;
    mutable slanders_received : int;
    mutable suppressed : int;
    mutable malformed : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      now = ctx.now;
      rank = ctx.view.rank;
      n;
      stagger = max 0 (Params.time ctx.params Param.stagger);
      wait = max 0 (Params.time ctx.params Param.wait);
      suspected = Rankset.create ~n ~me:ctx.view.rank;
      stopped = false;
      pending = [];
      heard_of = Array.make n [];
      judging = None;
      slanders_sent = 0;
      slanders_received = 0;
      suppressed = 0;
      malformed = 0;
    }

  let fresh t ranks = Rankset.add t.suspected ranks
  let truncate s = if String.length s <= max_reason then s else String.sub s 0 max_reason

  let cast t ranks reason kind =
    t.slanders_sent <- t.slanders_sent + 1;
    Log.info (fun m -> m "rank %d tells the group it suspects %a: %s" t.rank pp_ranks ranks reason);
    t.out.dn Event.Cast (Slander { ranks; reason = truncate reason; kind }) (Msg.empty ())

  (* A suspicion raised here: tell the group, then the layers above (each
     rank once). *)
  let raise_here t ranks reason kind =
    let added = fresh t ranks in
    if added <> [] then begin
      cast t added reason kind;
      t.out.up_ctl (Gevent.Suspect { ranks = added; reason })
    end

  (* How long this member waits before it casts a suspicion of [ranks]
     found here: the member just after the first of them in the ring casts
     at once, each one after it [stagger] later, at most [wait]. When every
     member finds the same silence at once, the first two cast, and the
     others hear them before their turn and stay silent. *)
  let delay t ranks =
    match ranks with
    | [] -> 0
    | r :: _ ->
        let first = List.fold_left min r ranks in
        let after = (t.rank - first - 1 + t.n) mod t.n in
        min t.wait (after * t.stagger)

  (* A silence found here (or a member blamed here): reported up at once,
     cast after [delay] unless another member's slander of the same ranks
     comes first. *)
  let found_here t ranks reason =
    let added = fresh t ranks in
    if added <> [] then begin
      let d = delay t added in
      if d = 0 then cast t added reason Gevent.Silent
      else begin
        let due = t.now () + d in
        t.pending <- t.pending @ [ (added, reason, due) ];
        t.out.alarm due
      end;
      t.out.up_ctl (Gevent.Suspect { ranks = added; reason })
    end

  (* Another member's slander of [ranks], not found faulty here: once
     [enough] members have cast a rank, the group hears of it from them,
     and this member's cast of it is dropped. *)
  let suppress t o ranks =
    List.iter
      (fun r ->
        if r >= 0 && r < t.n then
          let l = t.heard_of.(r) in
          if List.length l < enough && not (List.mem o l) then t.heard_of.(r) <- o :: l)
      ranks;
    if t.pending <> [] then
      t.pending <-
        List.filter_map
          (fun (rs, reason, due) ->
            match List.filter (fun r -> List.length t.heard_of.(r) < enough) rs with
            | [] ->
                t.suppressed <- t.suppressed + 1;
                None
            | rest -> Some (rest, reason, due))
          t.pending

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
      (fun () -> t.out.dn_ctl (Gevent.Accusation { accuser = o; ranks; reason; kind }));
    if not (Rankset.mem t.suspected o) then suppress t o ranks

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
    | Gevent.Suspect { ranks; reason } when not t.stopped -> (
        (* A suspicion adopted from another member's slander: the group
           hears that slander itself, so one of silence, or a flush
           timeout (which the next coordinator finds again if this one
           fails), is not cast again. One asked for is passed on with its
           kind (it is not this member's finding of silence, and is not
           judged as one), in case its accuser fails before every member
           has it. *)
        match t.judging with
        | Some (accused, k) when List.for_all (fun r -> List.mem r accused) ranks ->
            if k <> Gevent.Requested then begin
              let added = fresh t ranks in
              if added <> [] then t.out.up_ctl (Gevent.Suspect { ranks = added; reason })
            end
            else raise_here t ranks reason k
        | _ -> found_here t ranks reason)
    | Gevent.Suspect _ -> ()
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

  let timer t now =
    if t.stopped then t.pending <- []
    else if t.pending <> [] then begin
      let due, rest = List.partition (fun (_, _, d) -> d <= now) t.pending in
      t.pending <- rest;
      List.iter (fun (ranks, reason, _) -> cast t ranks reason Gevent.Silent) due;
      List.iter (fun (_, _, d) -> t.out.alarm d) rest
    end

  let counters t =
    [
      ("slanders_sent", t.slanders_sent);
      ("slanders_received", t.slanders_received);
      ("slanders_suppressed", t.suppressed);
      ("slanders_pending", List.length t.pending);
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
    Fmt.str "stopped %b; pending %a; suspected %a; %a" t.stopped
      Fmt.(list ~sep:sp (pair ~sep:(any "@") (list ~sep:comma int) int))
      (List.map (fun (rs, _, d) -> (rs, d)) t.pending)
      Fmt.(list ~sep:sp int)
      (Rankset.elements t.suspected)
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
