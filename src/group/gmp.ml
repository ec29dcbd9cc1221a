open Consort

let src = Logs.Src.create "consort.gmp" ~doc:"Gmp layer: flush and view agreement"

module Log = (val Logs.src_log src : Logs.LOG)

type Event.up_ctl +=
  | Block
  | Flushed of { survivors : int list; leavers : int list }
  | Excluded
  | Reported of { coord : int; excluded : int list; leaving : int list; into : string }
  | Synced

type Event.dn_ctl += Start_flush of string | Leave | Merge_into of string

module Param = struct
  let flush_timeout = "gmp.flush_timeout"

  let () =
    Params.register flush_timeout
      (Params.Time (Time.of_sec 4.))
      ~doc:
        "how long the coordinator waits for a member's flush report or completion before it \
         suspects that member"
end

let () =
  Event.register_up_ctl_printer (function
    | Block -> Some (fun ppf -> Fmt.string ppf "block")
    | Flushed { survivors; leavers } ->
        Some
          (fun ppf ->
            Fmt.pf ppf "flushed(survivors [%a], leavers [%a])"
              Fmt.(list ~sep:comma int)
              survivors
              Fmt.(list ~sep:comma int)
              leavers)
    | Excluded -> Some (fun ppf -> Fmt.string ppf "excluded")
    | Synced -> Some (fun ppf -> Fmt.string ppf "synced")
    | Reported { coord; excluded; leaving; into = _ } ->
        Some
          (fun ppf ->
            Fmt.pf ppf "reported(to %d, excluded [%a], leaving [%a])" coord
              Fmt.(list ~sep:comma int)
              excluded
              Fmt.(list ~sep:comma int)
              leaving)
    | _ -> None);
  Event.register_dn_ctl_printer (function
    | Start_flush why -> Some (fun ppf -> Fmt.pf ppf "start-flush(%s)" why)
    | Leave -> Some (fun ppf -> Fmt.string ppf "leave")
    | _ -> None)

module L = struct
  type header =
    | App
    | Leave_req
    | Flush of {
        coord : int;
        attempt : int;
        excluded : int list;
        leaving : int list;
        into : string;
      }
    | Flush_ok of {
        coord : int;
        attempt : int;
        casts : int array;
        sent : int array;
        parts : Event.part list;
      }
    | Target of {
        coord : int;
        attempt : int;
        casts : int array;
        sends : int array;
        parts : (int * Event.part list) list;
      }
    | Done of { coord : int; attempt : int }

  let name = "gmp"
  let ints = Codec.list ~max:4096 Codec.varint
  let vec = Codec.array ~max:4096 Codec.varint
  let part_bytes = Codec.string ~max:(1 lsl 20) ()
  let parts = Codec.list ~max:64 (Codec.pair part_bytes part_bytes)
  let all_parts = Codec.list ~max:4096 (Codec.pair Codec.varint parts)

  let codec =
    Codec.union "gmp"
      [
        Codec.case 0 "app" Codec.unit (function App -> Some () | _ -> None) (fun () -> App);
        Codec.case 1 "leave" Codec.unit
          (function Leave_req -> Some () | _ -> None)
          (fun () -> Leave_req);
        Codec.case 2 "flush"
          Codec.(tup4 (pair varint varint) ints ints (string ~max:1024 ()))
          (function
            | Flush { coord; attempt; excluded; leaving; into } ->
                Some ((coord, attempt), excluded, leaving, into)
            | _ -> None)
          (fun ((coord, attempt), excluded, leaving, into) ->
            Flush { coord; attempt; excluded; leaving; into });
        Codec.case 3 "flush_ok"
          Codec.(tup4 (pair varint varint) vec vec parts)
          (function
            | Flush_ok { coord; attempt; casts; sent; parts } ->
                Some ((coord, attempt), casts, sent, parts)
            | _ -> None)
          (fun ((coord, attempt), casts, sent, parts) ->
            Flush_ok { coord; attempt; casts; sent; parts });
        Codec.case 4 "target"
          Codec.(tup4 (pair varint varint) vec vec all_parts)
          (function
            | Target { coord; attempt; casts; sends; parts } ->
                Some ((coord, attempt), casts, sends, parts)
            | _ -> None)
          (fun ((coord, attempt), casts, sends, parts) ->
            Target { coord; attempt; casts; sends; parts });
        Codec.case 5 "done"
          Codec.(pair varint varint)
          (function Done { coord; attempt } -> Some (coord, attempt) | _ -> None)
          (fun (coord, attempt) -> Done { coord; attempt });
      ]

  let pp_ints = Fmt.(list ~sep:comma int)
  let pp_vec = Fmt.(array ~sep:comma int)

  let pp_header ppf = function
    | App -> Fmt.string ppf "app"
    | Leave_req -> Fmt.string ppf "leave"
    | Flush { coord; attempt; excluded; leaving; into } ->
        Fmt.pf ppf "flush(%d.%d, excluded [%a], leaving [%a]%s)" coord attempt pp_ints excluded
          pp_ints leaving
          (if into = "" then "" else ", into " ^ into)
    | Flush_ok { coord; attempt; casts; sent; parts } ->
        Fmt.pf ppf "flush-ok(%d.%d, casts [%a], sent [%a], %d parts)" coord attempt pp_vec casts
          pp_vec sent (List.length parts)
    | Target { coord; attempt; casts; sends; parts = _ } ->
        Fmt.pf ppf "target(%d.%d, casts [%a], sends [%a])" coord attempt pp_vec casts pp_vec sends
    | Done { coord; attempt } -> Fmt.pf ppf "done(%d.%d)" coord attempt

  let membership = Contract.v "membership" ~doc:"views agreed by flush; virtual synchrony"
  let provides = [ membership ]
  let requires = [ Contract.reliable_cast; Contract.reliable_send ]

  (* A flush round as seen by this member: the round is named by its
     coordinator's rank and attempt number, newer rounds replace older. *)
  type round = {
    coord : int;
    attempt : int;
    excluded : int list;
    leaving : int list;
    r_into : string;
    stamp : int; (* of the Block_req sent down for this round *)
    mutable reported : (int array * int array) option;
        (* what this member reported, once the stack below has drained:
           deliveries past it are held *)
    mutable target : (int array * int array) option;
    mutable done_sent : bool;
    (* at the coordinator only *)
    oks : (int array * int array * Event.part list) option array;
        (* per rank: casts delivered, sends sent to each, the layers' parts *)
    dones : bool array;
    deadline : Time.t; (* when members that have not answered are suspected *)
    mutable expired : bool;
  }

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    flush_timeout : Time.t;
    mutable stamps : int; (* Block_req sent so far *)
    mutable attempts : int; (* rounds started by this member as coordinator *)
    mutable pending : (int * int * int list * int list * string) list;
    mutable into : string;
    (* as coordinator: the member whose view this one merges into, or "" *)
    (* rounds whose exclusions this member could not confirm yet *)
    mutable verdict : (int * bool) option; (* the failure detector's answer *)
    mutable unconfirmed : int;
    retry : Time.t;
    mutable timed_out : int;
    mutable stale : int;
    n : int;
    me : int;
    suspected : bool array;
    leavers : bool array;
    casts : int array; (* application casts delivered from each origin *)
    sends : int array; (* application sends delivered from each origin *)
    sent : int array; (* application sends this member sent to each rank *)
    held : (Event.src * Msg.t) Queue.t; (* deliveries past what this member reported *)
    mutable round : round option;
    mutable blocked : bool;
    mutable flushed : bool; (* the coordinator has reported Flushed for the current round *)
    mutable stopped : bool;
    mutable held_dropped : int;
    mutable nonsense : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      now = ctx.now;
      flush_timeout = max 1 (Params.time ctx.params Param.flush_timeout);
      stamps = 0;
      attempts = 0;
      pending = [];
      into = "";
      verdict = None;
      unconfirmed = 0;
      retry = Time.of_ms 250;
      timed_out = 0;
      stale = 0;
      n;
      me = ctx.view.rank;
      suspected = Array.make n false;
      leavers = Array.make n false;
      casts = Array.make n 0;
      sends = Array.make n 0;
      sent = Array.make n 0;
      held = Queue.create ();
      round = None;
      blocked = false;
      flushed = false;
      stopped = false;
      held_dropped = 0;
      nonsense = 0;
    }

  let valid t r = r >= 0 && r < t.n

  (* The coordinator is the lowest-ranked member not suspected. *)
  let coordinator t =
    let rec go r = if r >= t.n then t.me else if t.suspected.(r) then go (r + 1) else r in
    go 0

  let is_coord t = coordinator t = t.me
  let excluded_list t = List.filter (fun r -> t.suspected.(r)) (List.init t.n Fun.id)

  let leaving_list t =
    List.filter (fun r -> t.leavers.(r) && not t.suspected.(r)) (List.init t.n Fun.id)

  let cast_ctl t h = t.out.dn Event.Cast h (Msg.empty ())
  let send_ctl t r h = if r = t.me then () else t.out.dn (Event.Send r) h (Msg.empty ())

  let block t =
    if not t.blocked then begin
      t.blocked <- true;
      t.out.up_ctl Block
    end

  (* The coordinator starts (or restarts) a round. *)
  let start_round t why =
    if (not t.stopped) && is_coord t then begin
      (* Attempt numbers are never reused, even for a round whose Flush has
         not come back yet: two rounds never share a name. *)
      t.attempts <- t.attempts + 1;
      let attempt = t.attempts in
      Log.debug (fun m -> m "rank %d: flush %d.%d (%s)" t.me t.me attempt why);
      t.flushed <- false;
      (* Drain the flow control below first, so that the Flush itself does
         not wait for credit behind application casts. *)
      t.out.dn_ctl (Event.Block_req { round = 0 });
      cast_ctl t
        (Flush
           {
             coord = t.me;
             attempt;
             excluded = excluded_list t;
             leaving = leaving_list t;
             into = t.into;
           })
    end

  let request_flush t why =
    if is_coord t then start_round t why
    else Log.debug (fun m -> m "rank %d: not coordinator, flush request ignored (%s)" t.me why)

  let newer (c, a) round =
    match round with None -> true | Some r -> c > r.coord || (c = r.coord && a > r.attempt)

  let current t coord attempt =
    match t.round with Some r when r.coord = coord && r.attempt = attempt -> Some r | _ -> None

  (* Deliver what is held, up to the target; drop the rest. *)
  let release_held t (tc, ts) =
    let keep = Queue.create () in
    Queue.iter
      (fun ((src : Event.src), msg) ->
        match src with
        | Event.Cast_from o when t.casts.(o) < tc.(o) ->
            t.casts.(o) <- t.casts.(o) + 1;
            t.out.up src msg
        | Event.Send_from o when t.sends.(o) < ts.(o) ->
            t.sends.(o) <- t.sends.(o) + 1;
            t.out.up src msg
        | _ -> Queue.add (src, msg) keep)
      t.held;
    Queue.clear t.held;
    Queue.iter
      (fun (_, msg) ->
        t.held_dropped <- t.held_dropped + 1;
        Msg.release msg)
      keep

  let fix_sends r ts =
    match r.reported with
    | Some (_, rs) -> Array.mapi (fun o v -> if List.mem o r.excluded then rs.(o) else v) ts
    | None -> ts

  let rec check_done t =
    match t.round with
    | Some ({ target = Some (tc, ts); done_sent = false; _ } as r) ->
        let all a b = Array.for_all2 (fun x y -> x >= y) a b in
        if all t.casts tc && all t.sends ts then begin
          r.done_sent <- true;
          t.out.up_ctl Synced;
          if r.coord = t.me then begin
            r.dones.(t.me) <- true;
            coord_progress t
          end
          else send_ctl t r.coord (Done { coord = r.coord; attempt = r.attempt })
        end
    | _ -> ()

  and set_target t r (tc, ts) parts =
    if r.target = None && r.reported <> None then begin
      let ts = fix_sends r ts in
      (* Every member gets the same reports, before any delivery past
         its own: layers that add to the flush decide from them. *)
      t.out.dn_ctl (Event.Flush_parts { parts });
      r.target <- Some (tc, ts);
      release_held t (tc, ts);
      check_done t
    end

  and coord_progress t =
    match t.round with
    | Some r when r.coord = t.me ->
        let members = List.filter (fun x -> not (List.mem x r.excluded)) (List.init t.n Fun.id) in
        (* All reports in: compute and send the targets. *)
        if r.target = None && List.for_all (fun x -> r.oks.(x) <> None) members then begin
          let tc = Array.make t.n 0 in
          let sends_to = Array.make_matrix t.n t.n 0 in
          let parts = ref [] in
          List.iter
            (fun x ->
              match r.oks.(x) with
              | Some (c, s, p) ->
                  Array.iteri (fun o k -> if k > tc.(o) then tc.(o) <- k) c;
                  Array.iteri (fun d k -> sends_to.(x).(d) <- k) s;
                  if p <> [] then parts := (x, p) :: !parts
              | None -> ())
            members;
          let parts = List.rev !parts in
          List.iter
            (fun x ->
              (* Sends to [x] from each origin that stays: all it sent.
                 From an origin that is gone, [x] keeps what it reported
                 (see [fix_sends]); 0 stands for that here. *)
              let ts =
                Array.init t.n (fun o -> if List.mem o r.excluded then 0 else sends_to.(o).(x))
              in
              if x = t.me then set_target t r (tc, ts) parts
              else
                send_ctl t x
                  (Target { coord = t.me; attempt = r.attempt; casts = tc; sends = ts; parts }))
            members;
          check_done t
        end;
        if r.target <> None && (not t.flushed) && List.for_all (fun x -> r.dones.(x)) members then begin
          t.flushed <- true;
          let leavers = List.filter (fun x -> List.mem x r.leaving) members in
          let survivors = List.filter (fun x -> not (List.mem x r.leaving)) members in
          t.out.up_ctl (Flushed { survivors; leavers })
        end
    | _ -> ()

  (* The stack below has drained for round [r]: report. *)
  let report t r parts =
    if r.reported = None then begin
      let casts = Array.copy t.casts and sends = Array.copy t.sends in
      r.reported <- Some (casts, sends);
      (* The runtime accepts the next view only from this round's
         coordinator (or the partition it merges into), with exactly these
         members gone. *)
      t.out.up_ctl
        (Reported { coord = r.coord; excluded = r.excluded; leaving = r.leaving; into = r.r_into });
      if r.coord = t.me then begin
        r.oks.(t.me) <- Some (casts, Array.copy t.sent, parts);
        coord_progress t
      end
      else
        send_ctl t r.coord
          (Flush_ok { coord = r.coord; attempt = r.attempt; casts; sent = Array.copy t.sent; parts })
    end

  (* Whether the failure detector below confirms every exclusion of this
     round (no failure detector: yes). *)
  let confirmed t coord excluded =
    if
      coord = t.me || excluded = [] || List.for_all (fun r -> r <> t.me && t.suspected.(r)) excluded
    then true
    else begin
      t.verdict <- None;
      t.out.dn_ctl (Gevent.Judge_flush { coord; excluded });
      match t.verdict with
      | Some (c, accept) when c = coord -> accept && not t.suspected.(coord)
      | _ -> not t.suspected.(coord)
    end

  let rec on_flush t ~coord ~attempt ~excluded ~leaving ~into =
    if not (List.for_all (valid t) excluded && List.for_all (valid t) leaving && valid t coord) then
      t.nonsense <- t.nonsense + 1
    else if coord <> t.me && t.suspected.(coord) then
      (* A member this one has found faulty does not decide for it. *)
      t.stale <- t.stale + 1
    else if newer (coord, attempt) t.round && not (confirmed t coord excluded) then begin
      (* Exclusions this member cannot confirm yet (it still hears those
         members, or it is excluded by a member that alone accuses it): the
         round waits until it can, or until its coordinator is found
         faulty. *)
      if not (List.exists (fun (c, a, _, _, _) -> c = coord && a >= attempt) t.pending) then begin
        t.unconfirmed <- t.unconfirmed + 1;
        t.pending <-
          (coord, attempt, excluded, leaving, into)
          :: List.filter (fun (c, _, _, _, _) -> c <> coord) t.pending;
        t.out.alarm (t.now () + t.retry)
      end
    end
    else if List.mem t.me excluded then begin
      (* The group goes on without this member: a view change starts
         here too. *)
      block t;
      t.out.up_ctl Excluded
    end
    else if newer (coord, attempt) t.round then begin
      (* Adopt the round's view of who failed and who leaves; the layers
         above (the runtime) hear of exclusions they did not know of. *)
      let fresh = List.filter (fun r -> not t.suspected.(r)) excluded in
      List.iter (fun r -> t.suspected.(r) <- true) excluded;
      List.iter (fun r -> t.leavers.(r) <- true) leaving;
      if fresh <> [] then
        t.out.up_ctl
          (Gevent.Suspect
             { ranks = fresh; reason = Printf.sprintf "excluded by the flush of rank %d" coord });
      block t;
      t.stamps <- t.stamps + 1;
      let r =
        {
          coord;
          attempt;
          excluded;
          leaving;
          r_into = into;
          stamp = t.stamps;
          reported = None;
          target = None;
          done_sent = false;
          oks = Array.make t.n None;
          dones = Array.make t.n false;
          deadline = t.now () + t.flush_timeout;
          expired = false;
        }
      in
      t.round <- Some r;
      if coord = t.me then t.out.alarm r.deadline;
      (* Drain the stack first: what it holds is part of what this member
         reports (a cast waiting for flow control is counted when it comes
         back from the reliable layer below). *)
      t.out.dn_ctl (Event.Block_req { round = r.stamp })
    end

  (* Rounds that waited for confirmation: try them again. *)
  and retry_pending t =
    let p = t.pending in
    t.pending <- [];
    List.iter
      (fun (coord, attempt, excluded, leaving, into) ->
        if not t.suspected.(coord) then on_flush t ~coord ~attempt ~excluded ~leaving ~into)
      (List.rev p)

  let deliver_app t (src : Event.src) msg =
    let held o counts which =
      match t.round with
      | Some { reported = Some rep; _ } -> counts.(o) >= (which rep).(o)
      | _ -> false
    in
    match (src, t.round) with
    | Event.Cast_from o, Some r when valid t o && held o t.casts fst -> (
        match r.target with
        | Some (tc, _) when t.casts.(o) < tc.(o) ->
            t.casts.(o) <- t.casts.(o) + 1;
            t.out.up src msg;
            check_done t
        | Some _ ->
            t.held_dropped <- t.held_dropped + 1;
            Msg.release msg
        | None -> Queue.add (src, msg) t.held)
    | Event.Send_from o, Some r when valid t o && held o t.sends snd -> (
        match r.target with
        | Some (_, ts) when t.sends.(o) < ts.(o) ->
            t.sends.(o) <- t.sends.(o) + 1;
            t.out.up src msg;
            check_done t
        | Some _ ->
            t.held_dropped <- t.held_dropped + 1;
            Msg.release msg
        | None -> Queue.add (src, msg) t.held)
    | Event.Cast_from o, _ when valid t o ->
        t.casts.(o) <- t.casts.(o) + 1;
        t.out.up src msg;
        check_done t
    | Event.Send_from o, _ when valid t o ->
        t.sends.(o) <- t.sends.(o) + 1;
        t.out.up src msg;
        check_done t
    | _ ->
        t.nonsense <- t.nonsense + 1;
        Msg.release msg

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match h with
      | App -> deliver_app t src msg
      | _ -> (
          Msg.release msg;
          let from =
            match src with Event.Cast_from o | Event.Send_from o -> o | Event.Raw -> -1
          in
          if not (valid t from) then t.nonsense <- t.nonsense + 1
          else
            match h with
            | App -> ()
            | Leave_req ->
                t.leavers.(from) <- true;
                request_flush t (Printf.sprintf "rank %d leaves" from)
            | Flush { coord; attempt; excluded; leaving; into } ->
                if coord <> from then t.nonsense <- t.nonsense + 1
                else on_flush t ~coord ~attempt ~excluded ~leaving ~into
            | Flush_ok { coord; attempt; casts; sent; parts } -> (
                match current t coord attempt with
                | Some r when coord = t.me && Array.length casts = t.n && Array.length sent = t.n ->
                    r.oks.(from) <- Some (casts, sent, parts);
                    coord_progress t
                | Some _ -> t.nonsense <- t.nonsense + 1
                | None -> ())
            | Target { coord; attempt; casts; sends; parts } -> (
                match current t coord attempt with
                | Some r
                  when from = coord
                       && Array.length casts = t.n
                       && Array.length sends = t.n
                       && List.for_all (fun (x, _) -> valid t x) parts ->
                    set_target t r (casts, sends) parts
                | Some _ -> t.nonsense <- t.nonsense + 1
                | None -> ())
            | Done { coord; attempt } -> (
                match current t coord attempt with
                | Some r when coord = t.me ->
                    r.dones.(from) <- true;
                    coord_progress t
                | _ -> ()))

  let suspect t ranks =
    let fresh = List.filter (fun r -> valid t r && r <> t.me && not t.suspected.(r)) ranks in
    if fresh <> [] then begin
      List.iter (fun r -> t.suspected.(r) <- true) fresh;
      (* A round waiting on a member now suspected cannot finish: whoever
         coordinates now starts a new one. *)
      if is_coord t then start_round t "suspicion"
    end

  let up_ctl t e =
    match e with
    | Gevent.Suspect { ranks; _ } ->
        t.out.up_ctl e;
        suspect t ranks;
        if t.pending <> [] then retry_pending t
    | Gevent.Flush_verdict { coord; accept } -> t.verdict <- Some (coord, accept)
    | Event.Block_ok { round; parts } -> (
        match t.round with
        | Some r when r.stamp = round && not t.stopped -> report t r parts
        | _ -> ())
    | e -> t.out.up_ctl e

  let dn t dst msg =
    if t.stopped then Msg.release msg
    else begin
      (match dst with Event.Send r when valid t r -> t.sent.(r) <- t.sent.(r) + 1 | _ -> ());
      t.out.dn dst App msg
    end

  let dn_ctl t e =
    match e with
    | Start_flush why -> request_flush t why
    | Merge_into eid -> t.into <- eid
    | Leave ->
        t.leavers.(t.me) <- true;
        if is_coord t then start_round t "leave" else cast_ctl t Leave_req
    | Gevent.Suspect_request { ranks; _ } ->
        t.out.dn_ctl e;
        suspect t ranks
    | Event.Stop ->
        t.stopped <- true;
        Queue.iter (fun (_, m) -> Msg.release m) t.held;
        Queue.clear t.held;
        t.out.dn_ctl e
    | e -> t.out.dn_ctl e

  (* The coordinator suspects the members that hold a round up: no
     message, member or bug below can keep the group blocked for good. *)
  let timer t now =
    if t.pending <> [] && not t.stopped then begin
      retry_pending t;
      if t.pending <> [] then t.out.alarm (now + t.retry)
    end;
    match t.round with
    | Some r when r.coord = t.me && (not t.stopped) && (not t.flushed) && not r.expired ->
        if now >= r.deadline then begin
          r.expired <- true;
          let waiting x =
            x <> t.me
            && (not (List.mem x r.excluded))
            && match r.target with None -> r.oks.(x) = None | Some _ -> not r.dones.(x)
          in
          let laggards = List.filter waiting (List.init t.n Fun.id) in
          if laggards <> [] then begin
            t.timed_out <- t.timed_out + List.length laggards;
            let reason =
              Printf.sprintf "did not answer flush %d.%d within %.1f s" r.coord r.attempt
                (Time.to_sec t.flush_timeout)
            in
            Log.info (fun m -> m "rank %d: %a %s" t.me Fmt.(list ~sep:comma int) laggards reason);
            let fresh = List.filter (fun x -> not t.suspected.(x)) laggards in
            if fresh <> [] then begin
              t.out.dn_ctl (Gevent.Suspect_unresponsive { ranks = fresh; reason });
              t.out.up_ctl (Gevent.Suspect { ranks = fresh; reason })
            end;
            List.iter (fun x -> t.suspected.(x) <- true) laggards;
            start_round t reason
          end
        end
        else t.out.alarm r.deadline
    | _ -> ()

  let counters t =
    [
      ("held", Queue.length t.held);
      ("held_dropped", t.held_dropped);
      ("flush_timeouts", t.timed_out);
      ("stale_flush", t.stale);
      ("unconfirmed_flush", t.unconfirmed);
      ("nonsense", t.nonsense);
      ("round", match t.round with Some r -> r.attempt | None -> 0);
      ("round_coord", match t.round with Some r -> r.coord | None -> -1);
      ( "oks",
        match t.round with
        | Some r -> Array.fold_left (fun n o -> if o <> None then n + 1 else n) 0 r.oks
        | None -> 0 );
      ( "dones",
        match t.round with
        | Some r -> Array.fold_left (fun n d -> if d then n + 1 else n) 0 r.dones
        | None -> 0 );
      ("target", match t.round with Some { target = Some _; _ } -> 1 | _ -> 0);
      ("done_sent", match t.round with Some { done_sent = true; _ } -> 1 | _ -> 0);
      ("flushed", if t.flushed then 1 else 0);
    ]
end

(* The common case of a cast: no flush round under way. *)
module F = struct
  include L

  let cast =
    {
      Layer.nfields = 0;
      live = Some (fun t -> not t.stopped);
      up_live = false;
      length = false;
      framed = false;
      size =
        (let n = Codec.size codec App in
         fun _ _ -> n);
      dn_ok = (fun t dst _ -> (not t.stopped) && dst == Event.Cast);
      dn_fast = Layer.nothing_dn_fast;
      dn_after = Layer.nothing_dn_after;
      up_ok =
        (fun t src _ _ _ ->
          (not t.stopped) && t.round = None
          && match src with Event.Cast_from o -> valid t o | _ -> false);
      up_fast =
        (fun t src _ _ ~layered:_ _ _ ->
          (match src with Event.Cast_from o -> t.casts.(o) <- t.casts.(o) + 1 | _ -> ());
          src);
      up_after = (fun t _ _ _ _ -> check_done t);
      expand = (fun _ _ -> App);
    }

  (* A send: the same, counted per destination going down and per origin
     coming up. *)
  let send =
    {
      cast with
      live = None;
      dn_ok =
        (fun t dst _ ->
          (not t.stopped) && match dst with Event.Send r -> valid t r | Event.Cast -> false);
      dn_fast =
        (fun t dst _ _ ~layered:_ _ _ ->
          match dst with Event.Send r -> t.sent.(r) <- t.sent.(r) + 1 | Event.Cast -> ());
      up_ok =
        (fun t src _ _ _ ->
          (not t.stopped) && t.round = None
          && match src with Event.Send_from o -> valid t o | _ -> false);
      up_fast =
        (fun t src _ _ ~layered:_ _ _ ->
          (match src with Event.Send_from o -> t.sends.(o) <- t.sends.(o) + 1 | _ -> ());
          src);
    }

  let state t =
    let ints = Fmt.(array ~sep:sp int) in
    Fmt.str
      "stopped %b blocked %b flushed %b round %b; casts %a; sends %a; sent %a; held %d; suspected \
       %a; leavers %a; %a"
      t.stopped t.blocked t.flushed (t.round <> None) ints t.casts ints t.sends ints t.sent
      (Queue.length t.held)
      Fmt.(array ~sep:sp bool)
      t.suspected
      Fmt.(array ~sep:sp bool)
      t.leavers
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
