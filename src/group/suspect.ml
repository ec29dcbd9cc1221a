open Consort

let src = Logs.Src.create "consort.suspect" ~doc:"Suspect layer: heartbeat failure detector"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let interval = "suspect.interval"
  let timeout = "suspect.timeout"
  let pause = "suspect.pause"
  let verify = "suspect.verify"
  let grace = "suspect.grace"

  let () =
    Params.register interval (Params.Time (Time.of_ms 250)) ~doc:"period of heartbeat casts";
    Params.register timeout
      (Params.Time (Time.of_sec 5.))
      ~doc:"silence after which a member is suspected of having failed";
    Params.register pause
      (Params.Time (Time.of_sec 1.))
      ~doc:
        "gap between two timer calls taken as a pause of this member (at least twice the \
         interval); silence during a pause is not held against others";
    Params.register grace
      (Params.Time (Time.of_sec 1.))
      ~doc:
        "how long another member's suspicion of a member this one still hears waits before it is \
         adopted (a member that stops hearing everyone is found out within it)";
    Params.register verify
      (Params.Time (Time.of_sec 1.))
      ~doc:
        "before the timeout, how long a silent member is probed directly (one probe per interval) \
         before it is suspected"
end

let contract =
  Contract.v "suspect"
    ~doc:"members silent for too long are reported up as Suspect events, once per rank per view"

let max_members = 4096
let pp_ranks = Fmt.(list ~sep:comma int)
let seconds d = Printf.sprintf "%.1f s" (Time.to_sec d)

type verdict = { adopt : int list; blame_accuser : bool }

(* An accusation from another member, judged against what this member
   hears. A requested suspicion is adopted as it is. Otherwise, one that
   (with all the accuser said before, [all]) accuses most of the view
   while this member can vouch for some of the accused ([vouches]: it
   heard from them all along, not only since a moment ago), or for
   itself ([self]: it kept running), marks the accuser as the faulty
   one: a member that hears nobody must not break up a group whose other
   members hear each other. Else a silent member is adopted only if this
   member does not hear it either; an unresponsive one (a coordinator's
   flush timeout) is adopted. *)
let judge ~n ~me ~hears ?(vouches = hears) ?(self = true) ~accuser ~kind ?(all = []) ranks =
  let clean l = List.sort_uniq compare (List.filter (fun r -> r >= 0 && r < n && r <> accuser) l) in
  let ranks = clean ranks in
  let all = clean (all @ ranks) in
  let others = List.filter (fun r -> r <> me) ranks in
  match (kind : Gevent.kind) with
  | Requested -> { adopt = others; blame_accuser = false }
  | Silent | Unresponsive ->
      let contradicted =
        (self && List.mem me all) || List.exists vouches (List.filter (fun r -> r <> me) all)
      in
      let most = 2 * List.length all > n - 1 in
      if contradicted && most && accuser <> me then { adopt = []; blame_accuser = true }
      else
        {
          adopt = (if kind = Silent then List.filter (fun r -> not (hears r)) others else others);
          blame_accuser = false;
        }

module L = struct
  type header = No_hdr | Heartbeat of { suspects : int list } | Probe of { ack : bool }

  let name = "suspect"

  let codec =
    Codec.(
      union "suspect"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "heartbeat" (list ~max:max_members varint)
            (function Heartbeat { suspects } -> Some suspects | _ -> None)
            (fun suspects -> Heartbeat { suspects });
          case 2 "probe" unit
            (function Probe { ack = false } -> Some () | _ -> None)
            (fun () -> Probe { ack = false });
          case 3 "probe_ack" unit
            (function Probe { ack = true } -> Some () | _ -> None)
            (fun () -> Probe { ack = true });
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Heartbeat { suspects = [] } -> Fmt.string ppf "heartbeat"
    | Heartbeat { suspects } -> Fmt.pf ppf "heartbeat(suspects %a)" pp_ranks suspects
    | Probe { ack = false } -> Fmt.string ppf "probe"
    | Probe { ack = true } -> Fmt.string ppf "probe-ack"

  let provides = [ Contract.datagram; contract ]
  let requires = [ Contract.datagram ]

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    rank : int;
    n : int;
    interval : Time.t;
    timeout : Time.t;
    pause : Time.t;
    verify : Time.t;
    heard : Time.t array; (* when the last datagram of each rank arrived *)
    back : Time.t array;
        (* when each rank was last heard again after a silence of half the
           timeout or more (as seen here) *)
    mutable woke : Time.t; (* when this member last ran again after a pause *)
    probed : Time.t array; (* when each rank was last probed *)
    claims : bool array array; (* [claims.(a).(r)]: [a] has said it suspects [r] *)
    since : Time.t array array; (* when [a] first said so *)
    grace : Time.t;
    mutable waiting : (int * int * string) list;
        (* suspicions of members heard here, adopted after the grace period
           unless their accuser is found faulty first *)
    asked : bool array; (* an application asked for these ranks to be suspected *)
    told : bool array;
        (* suspected on request or for a flush timeout, not for silence: left
           out of heartbeats, whose suspicions are judged as silences *)
    suspected : Rankset.t;
    mutable beat_at : Time.t;
    mutable last_tick : Time.t;
    mutable stopped : bool;
    mutable heartbeats_sent : int;
    mutable heartbeats_received : int;
    mutable by_silence : int;
    mutable gossiped : int;
    mutable requested : int;
    mutable pauses : int;
    mutable heard_after : int;
    mutable malformed : int;
    mutable probes : int;
    mutable requested_unresponsive : int;
    mutable rejected : int;
    mutable blamed : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    let now = ctx.now () in
    let interval = max 1 (Params.time ctx.params Param.interval) in
    let t =
      {
        out;
        now = ctx.now;
        rank = ctx.view.rank;
        n;
        interval;
        timeout = max 1 (Params.time ctx.params Param.timeout);
        pause = max (2 * interval) (Params.time ctx.params Param.pause);
        verify = max 0 (Params.time ctx.params Param.verify);
        heard = Array.make n now;
        back = Array.make n (min_int / 2);
        woke = min_int / 2;
        probed = Array.make n (min_int / 2);
        (* [min_int / 2]: "never", and [now - probed] cannot overflow. *)
        claims = Array.make_matrix n n false;
        since = Array.make_matrix n n max_int;
        grace = max 0 (Params.time ctx.params Param.grace);
        waiting = [];
        asked = Array.make n false;
        told = Array.make n false;
        suspected = Rankset.create ~n ~me:ctx.view.rank;
        beat_at = (if n > 1 then now else max_int);
        last_tick = now;
        stopped = false;
        heartbeats_sent = 0;
        heartbeats_received = 0;
        by_silence = 0;
        gossiped = 0;
        requested = 0;
        pauses = 0;
        heard_after = 0;
        malformed = 0;
        probes = 0;
        requested_unresponsive = 0;
        rejected = 0;
        blamed = 0;
      }
    in
    if t.beat_at <> max_int then out.alarm t.beat_at;
    t

  let peer t r = r >= 0 && r < t.n && r <> t.rank
  let fresh t ranks = Rankset.add t.suspected ranks

  let report t ranks reason =
    Log.info (fun m -> m "rank %d suspects %a: %s" t.rank pp_ranks ranks reason);
    t.out.up_ctl (Gevent.Suspect { ranks; reason })

  let alive_at t r now =
    if peer t r then begin
      if Rankset.mem t.suspected r then t.heard_after <- t.heard_after + 1;
      if now - t.heard.(r) >= t.timeout / 2 then t.back.(r) <- now;
      t.heard.(r) <- now
    end

  let alive t r = if peer t r then alive_at t r (t.now ())
  let dn t dst msg = if t.stopped then Msg.release msg else t.out.dn dst No_hdr msg

  (* This member hears [r]: a datagram came from it within half the
     timeout. *)
  let hears t r = peer t r && t.now () - t.heard.(r) < t.timeout / 2

  (* This member can vouch that [r] was not silent for a timeout: it hears
     [r], does not suspect it, and has heard it without a long gap for the
     last timeout, while running itself. Hearing a member again after its
     (or this member's) pause says nothing of the silence before. *)
  let vouches t r =
    let now = t.now () in
    hears t r
    && (not (Rankset.mem t.suspected r))
    && now - t.back.(r) >= t.timeout
    && now - t.woke >= t.timeout

  (* This member has run without a pause for the last timeout: an
     accusation of it is then a contradiction. *)
  let kept_running t = t.now () - t.woke >= t.timeout

  let accusation t accuser ranks reason kind =
    if
      peer t accuser && (not t.stopped)
      && not (Rankset.mem t.suspected accuser && kind <> Gevent.Requested)
    then begin
      (* An accuser's suspicions add up: one that names the members one by
         one is judged on all it has named. *)
      let all = List.filter (fun r -> t.claims.(accuser).(r)) (List.init t.n Fun.id) in
      let v =
        judge ~n:t.n ~me:t.rank ~hears:(hears t) ~vouches:(vouches t) ~self:(kept_running t)
          ~accuser ~kind ~all ranks
      in
      List.iter
        (fun r ->
          if r >= 0 && r < t.n then
            if kind = Gevent.Requested then t.asked.(r) <- true
            else if not t.claims.(accuser).(r) then begin
              t.claims.(accuser).(r) <- true;
              t.since.(accuser).(r) <- t.now ()
            end)
        ranks;
      let all = List.filter (fun r -> t.claims.(accuser).(r)) (List.init t.n Fun.id) in
      let rejected =
        List.filter
          (fun r ->
            peer t r && r <> accuser
            && (not (Rankset.mem t.suspected r))
            && not (List.mem r v.adopt))
          ranks
      in
      if rejected <> [] || List.mem t.rank ranks then begin
        t.rejected <- t.rejected + 1;
        Log.info (fun m ->
            m "rank %d: not adopting %d's suspicion of %a yet: heard from them recently" t.rank
              accuser pp_ranks
              (List.filter (fun r -> r <> accuser) ranks))
      end;
      if not v.blame_accuser then
        List.iter
          (fun r ->
            if peer t r && not (List.exists (fun (a, r', _) -> a = accuser && r' = r) t.waiting)
            then begin
              t.waiting <- (accuser, r, reason) :: t.waiting;
              t.out.alarm (t.since.(accuser).(r) + t.grace)
            end)
          rejected;
      if v.blame_accuser && not (Rankset.mem t.suspected accuser) then begin
        t.blamed <- t.blamed + 1;
        let added = fresh t [ accuser ] in
        if added <> [] then
          report t added
            (Printf.sprintf "suspects %d of the %d other members, some of which this member hears"
               (List.length (List.filter (fun r -> r <> accuser) all))
               (t.n - 1))
      end;
      let added = fresh t v.adopt in
      if added <> [] then begin
        if kind <> Gevent.Silent then List.iter (fun r -> t.told.(r) <- true) added;
        t.gossiped <- t.gossiped + List.length added;
        report t added
          (match kind with
          | Gevent.Requested -> Printf.sprintf "asked at rank %d: %s" accuser reason
          | Gevent.Unresponsive -> Printf.sprintf "rank %d: %s" accuser reason
          | Gevent.Silent ->
              Printf.sprintf "suspected by %d (%s) and silent here too" accuser reason)
      end
    end

  (* Suspicions of members heard here, once their grace period is over and
     their accuser has not been found faulty: one of the two cannot reach
     the other, and the group cannot keep both. *)
  let adopt_waiting t now =
    if t.waiting <> [] then begin
      let due, rest =
        List.partition (fun (a, r, _) -> now >= t.since.(a).(r) + t.grace) t.waiting
      in
      t.waiting <- rest;
      List.iter
        (fun (a, r, reason) ->
          if (not (Rankset.mem t.suspected a)) && not (Rankset.mem t.suspected r) then begin
            t.gossiped <- t.gossiped + 1;
            report t (fresh t [ r ])
              (Printf.sprintf "suspected by %d (%s) for %s, though heard here" a reason
                 (seconds t.grace))
          end)
        (List.rev due);
      List.iter (fun (a, r, _) -> t.out.alarm (t.since.(a).(r) + t.grace)) t.waiting
    end

  (* After a pause of this member, the silence of others is counted as if
     the pause had not happened, and each gets at least one more interval. *)
  let forgive t now gap =
    t.pauses <- t.pauses + 1;
    t.woke <- now;
    Log.warn (fun m ->
        m "rank %d was not scheduled for %s; not counting that time against the others" t.rank
          (seconds gap));
    let excess = gap - t.interval in
    let floor = now - t.timeout + t.interval in
    for r = 0 to t.n - 1 do
      if peer t r && not (Rankset.mem t.suspected r) then
        t.heard.(r) <- max floor (min now (t.heard.(r) + excess))
    done

  (* This member runs now: if it had not run for longer than a pause (no
     timer call, no datagram), it was paused. A datagram may be the first
     thing a member handles when it runs again. *)
  let running t now =
    let gap = now - t.last_tick in
    t.last_tick <- now;
    if gap > t.pause then forgive t now gap

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else begin
      if t.n > 1 then running t (t.now ());
      match (src, h) with
      | (Event.Cast_from r | Event.Send_from r), No_hdr ->
          alive t r;
          t.out.up src msg
      | (Event.Cast_from r | Event.Send_from r), Heartbeat { suspects } when peer t r ->
          Msg.release msg;
          alive t r;
          t.heartbeats_received <- t.heartbeats_received + 1;
          if List.mem t.rank suspects then
            Log.info (fun m -> m "rank %d suspects this member, rank %d" r t.rank);
          if
            List.exists (fun x -> (not (Rankset.mem t.suspected x)) && x <> t.rank) suspects
            || List.mem t.rank suspects
          then accusation t r suspects "heartbeat" Gevent.Silent
      | Event.Send_from r, Probe { ack } when peer t r ->
          Msg.release msg;
          alive t r;
          if not ack then t.out.dn (Event.Send r) (Probe { ack = true }) (Msg.empty ())
      | _ ->
          t.malformed <- t.malformed + 1;
          Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
          Msg.release msg
    end

  let up_ctl t e = t.out.up_ctl e

  (* Whether this member can confirm every exclusion of [coord]'s flush
     round: ranks it suspects, was asked to suspect, or does not hear; and
     itself only if an application asked for it or two members accuse it
     (one member that stopped hearing cannot exclude the others). *)
  let judge_flush t coord excluded =
    let accept =
      if not (peer t coord) then coord = t.rank
      else if Rankset.mem t.suspected coord then false
      else begin
        let others = List.filter (fun r -> r <> t.rank) excluded in
        if others <> [] then accusation t coord others "its flush" Gevent.Silent;
        if List.mem t.rank excluded && not t.claims.(coord).(t.rank) then begin
          t.claims.(coord).(t.rank) <- true;
          t.since.(coord).(t.rank) <- t.now ()
        end;
        (not (Rankset.mem t.suspected coord))
        && List.for_all
             (fun r ->
               if r = t.rank then
                 t.asked.(r)
                 || (t.claims.(coord).(r) && t.now () >= t.since.(coord).(r) + t.grace)
                 || List.length
                      (List.filter
                         (fun a ->
                           a <> t.rank && t.claims.(a).(r) && not (Rankset.mem t.suspected a))
                         (List.init t.n Fun.id))
                    >= 2
               else r < 0 || r >= t.n || Rankset.mem t.suspected r || t.asked.(r) || not (hears t r))
             excluded
      end
    in
    t.out.up_ctl (Gevent.Flush_verdict { coord; accept })

  let dn_ctl t e =
    (match e with
    | Event.Stop -> t.stopped <- true
    | Gevent.Suspect_request { ranks; reason } when not t.stopped ->
        let added = fresh t ranks in
        if added <> [] then begin
          List.iter (fun r -> t.told.(r) <- true) added;
          t.requested <- t.requested + List.length added;
          report t added reason
        end
    | Gevent.Suspect_unresponsive { ranks; reason } when not t.stopped ->
        let added = fresh t ranks in
        if added <> [] then begin
          List.iter (fun r -> t.told.(r) <- true) added;
          t.requested_unresponsive <- t.requested_unresponsive + List.length added;
          report t added reason
        end
    | Gevent.Accusation { accuser; ranks; reason; kind } -> accusation t accuser ranks reason kind
    | Gevent.Judge_flush { coord; excluded } -> judge_flush t coord excluded
    | _ -> ());
    t.out.dn_ctl e

  (* Before suspecting a silent rank, ask it directly, once an interval:
     any answer (any datagram) is proof of life. *)
  let probe t now =
    for r = 0 to t.n - 1 do
      if
        peer t r
        && (not (Rankset.mem t.suspected r))
        && now - t.heard.(r) >= t.timeout - t.verify
        && now - t.probed.(r) >= t.interval
      then begin
        t.probed.(r) <- now;
        t.probes <- t.probes + 1;
        t.out.dn (Event.Send r) (Probe { ack = false }) (Msg.empty ())
      end
    done

  let check t now =
    let silent = ref [] and lo = ref max_int and hi = ref 0 in
    for r = t.n - 1 downto 0 do
      if peer t r && (not (Rankset.mem t.suspected r)) && now - t.heard.(r) >= t.timeout then begin
        let d = now - t.heard.(r) in
        silent := r :: !silent;
        lo := min !lo d;
        hi := max !hi d
      end
    done;
    if !silent <> [] then begin
      let added = fresh t !silent in
      t.by_silence <- t.by_silence + List.length added;
      let reason =
        if seconds !lo = seconds !hi then "silent for " ^ seconds !lo
        else Printf.sprintf "silent for %s to %s" (seconds !lo) (seconds !hi)
      in
      report t added reason
    end

  let timer t now =
    if (not t.stopped) && t.n > 1 then begin
      running t now;
      check t now;
      probe t now;
      adopt_waiting t now;
      if t.beat_at <= now then begin
        t.heartbeats_sent <- t.heartbeats_sent + 1;
        t.beat_at <- now + t.interval;
        t.out.dn Event.Cast
          (Heartbeat
             { suspects = List.filter (fun r -> not t.told.(r)) (Rankset.elements t.suspected) })
          (Msg.empty ())
      end;
      t.out.alarm t.beat_at;
      let next = ref max_int in
      for r = 0 to t.n - 1 do
        if peer t r && not (Rankset.mem t.suspected r) then
          next := min !next (t.heard.(r) + t.timeout)
      done;
      if !next <> max_int then t.out.alarm !next
    end

  let counters t =
    [
      ("heartbeats_sent", t.heartbeats_sent);
      ("heartbeats_received", t.heartbeats_received);
      ("by_silence", t.by_silence);
      ("gossiped", t.gossiped);
      ("requested", t.requested);
      ("pauses", t.pauses);
      ("heard_after_suspicion", t.heard_after);
      ("bad_rank", Rankset.bad_rank t.suspected);
      ("self_suspicions", Rankset.self t.suspected);
      ("malformed", t.malformed);
      ("probes", t.probes);
      ("unresponsive", t.requested_unresponsive);
      ("accusations_rejected", t.rejected);
      ("accusers_blamed", t.blamed);
      ("suspected", Rankset.cardinal t.suspected);
    ]
end

(* Casts carry no header of Suspect; a received one is a proof of life, and
   tells, as any datagram does, whether this member was paused. *)
module F = struct
  include L

  let cast =
    Layer.constant_cast codec No_hdr
      ~live:(fun t -> not t.stopped)
      ~up_fast:(fun t src _ _ ~layered:_ _ _ ->
        (* The clock read once for both. *)
        let now = t.now () in
        if t.n > 1 then running t now;
        (match src with Event.Cast_from r | Event.Send_from r -> alive_at t r now | _ -> ());
        src)
      ()

  let send =
    Layer.constant_send codec No_hdr ~live:(fun t -> not t.stopped) ~up_fast:cast.up_fast ()

  let state t =
    Fmt.str "stopped %b; heard %a; probed %a; beat %d tick %d; waiting %d; suspected %a; %a"
      t.stopped
      Fmt.(array ~sep:sp int)
      t.heard
      Fmt.(array ~sep:sp int)
      t.probed t.beat_at t.last_tick (List.length t.waiting)
      Fmt.(list ~sep:sp int)
      (Rankset.elements t.suspected)
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
