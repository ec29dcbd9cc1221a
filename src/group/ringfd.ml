open Consort

let src = Logs.Src.create "consort.ringfd" ~doc:"Ringfd layer: ring failure detector"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let monitors = "ringfd.monitors"

  let () =
    Params.register monitors (Params.Int 3) ~min:(Params.Int 1) ~max:(Params.Int 16)
      ~doc:
        "how many ring successors watch each member (Scale's failure detector): each member sends \
         heartbeats to that many members, and a silence is adopted once two of them report it"
end

let pp_ranks = Fmt.(list ~sep:comma int)
let seconds d = Printf.sprintf "%.1f s" (Time.to_sec d)

(* The [k] nearest members after [r] (step 1) or before it (step -1) on the
   ring of ranks, skipping [gone] ones and [r] itself. *)
let walk ~n ~gone ~k ~step r =
  let rec go i acc left =
    if left = 0 || i = n then List.rev acc
    else
      let x = (((r + (step * i)) mod n) + n) mod n in
      if x = r || gone x then go (i + 1) acc left else go (i + 1) (x :: acc) (left - 1)
  in
  go 1 [] k

let successors ~n ~gone ~k r = walk ~n ~gone ~k ~step:1 r
let predecessors ~n ~gone ~k r = walk ~n ~gone ~k ~step:(-1) r

module L = struct
  type header = No_hdr | Heartbeat | Probe of { ack : bool }

  let name = "ringfd"

  let codec =
    Codec.(
      union "ringfd"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "heartbeat" unit
            (function Heartbeat -> Some () | _ -> None)
            (fun () -> Heartbeat);
          case 2 "probe" unit
            (function Probe { ack = false } -> Some () | _ -> None)
            (fun () -> Probe { ack = false });
          case 3 "probe_ack" unit
            (function Probe { ack = true } -> Some () | _ -> None)
            (fun () -> Probe { ack = true });
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Heartbeat -> Fmt.string ppf "heartbeat"
    | Probe { ack = false } -> Fmt.string ppf "probe"
    | Probe { ack = true } -> Fmt.string ppf "probe-ack"

  let provides = [ Contract.datagram; Suspect.contract ]
  let requires = [ Contract.datagram ]

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    rng : Rng.t;
    rank : int;
    n : int;
    k : int;
    interval : Time.t;
    timeout : Time.t;
    pause : Time.t;
    verify : Time.t;
    grace : Time.t;
    heard : Time.t array;
        (* when the last datagram of each rank arrived, or this member began
           to watch it if later *)
    seen : Time.t array; (* when the last datagram of each rank arrived *)
    back : Time.t array; (* when each rank was last heard again after a long silence *)
    watch_since : Time.t array; (* when this member began to watch each rank *)
    probed : Time.t array;
    asked_at : Time.t array;
        (* when this member first probed a rank it does not watch, to judge a
           coordinator's exclusion of it *)
    mutable watched : int list; (* the ranks whose heartbeats come here *)
    mutable targets : int list; (* the ranks this member sends heartbeats to *)
    accusers : (int * Time.t) list array;
        (* for each rank, the members that said it is silent, and since when *)
    mutable claims : int; (* entries in [accusers], at most [max_claims] *)
    max_claims : int;
    asked : bool array;
    told : bool array;
    refused : bool array;
        (* this member could not confirm the exclusions of the last flush
           round of that coordinator *)
    suspected : Rankset.t;
    mutable woke : Time.t;
    mutable alone : (Time.t * int list) option;
        (* every watched rank fell silent at once: these ranks, drawn at
           random, were probed then to tell a cut-off member from crashed
           neighbours *)
    mutable isolated : int;
    mutable beat_at : Time.t;
    mutable last_tick : Time.t;
    mutable stopped : bool;
    mutable heartbeats_sent : int;
    mutable heartbeats_received : int;
    mutable by_silence : int;
    mutable gossiped : int;
    mutable requested : int;
    mutable unresponsive : int;
    mutable pauses : int;
    mutable probes : int;
    mutable waiting : int; (* accusations not (yet) corroborated *)
    mutable blamed : int;
    mutable claims_dropped : int;
    mutable malformed : int;
  }

  let gone t r = Rankset.mem t.suspected r

  (* This member's place on the ring of members not suspected: whom it
     watches and whom it sends heartbeats to. A rank it starts watching gets
     a full timeout from now. *)
  let rering t =
    let now = t.now () in
    let watched = predecessors ~n:t.n ~gone:(gone t) ~k:t.k t.rank in
    List.iter
      (fun r ->
        if not (List.mem r t.watched) then begin
          t.watch_since.(r) <- now;
          t.heard.(r) <- max t.heard.(r) now
        end)
      watched;
    t.watched <- watched;
    t.targets <- successors ~n:t.n ~gone:(gone t) ~k:t.k t.rank

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    let now = ctx.now () in
    let interval = max 1 (Params.time ctx.params Suspect.Param.interval) in
    let t =
      {
        out;
        now = ctx.now;
        rng = ctx.rng;
        rank = ctx.view.rank;
        n;
        k = max 1 (Params.int ctx.params Param.monitors);
        interval;
        timeout = max 1 (Params.time ctx.params Suspect.Param.timeout);
        pause = max (2 * interval) (Params.time ctx.params Suspect.Param.pause);
        verify = max 0 (Params.time ctx.params Suspect.Param.verify);
        grace = max 0 (Params.time ctx.params "suspect.grace");
        heard = Array.make n now;
        seen = Array.make n min_int;
        back = Array.make n (min_int / 2);
        watch_since = Array.make n now;
        probed = Array.make n (min_int / 2);
        asked_at = Array.make n max_int;
        watched = [];
        targets = [];
        accusers = Array.make n [];
        claims = 0;
        max_claims = 8 * n;
        asked = Array.make n false;
        told = Array.make n false;
        refused = Array.make n false;
        suspected = Rankset.create ~n ~me:ctx.view.rank;
        woke = min_int / 2;
        alone = None;
        isolated = 0;
        beat_at = (if n > 1 then now else max_int);
        last_tick = now;
        stopped = false;
        heartbeats_sent = 0;
        heartbeats_received = 0;
        by_silence = 0;
        gossiped = 0;
        requested = 0;
        unresponsive = 0;
        pauses = 0;
        probes = 0;
        waiting = 0;
        blamed = 0;
        claims_dropped = 0;
        malformed = 0;
      }
    in
    rering t;
    if t.beat_at <> max_int then out.alarm t.beat_at;
    t

  let peer t r = r >= 0 && r < t.n && r <> t.rank

  let report t ranks reason =
    if ranks <> [] then begin
      Log.info (fun m -> m "rank %d suspects %a: %s" t.rank pp_ranks ranks reason);
      t.out.up_ctl (Gevent.Suspect { ranks; reason })
    end

  let alive t r =
    if peer t r then begin
      let now = t.now () in
      if now - t.heard.(r) >= t.timeout / 2 then t.back.(r) <- now;
      t.heard.(r) <- now;
      t.seen.(r) <- now
    end

  let hears t r = peer t r && t.now () - t.heard.(r) < t.timeout / 2
  let watches t r = List.mem r t.watched

  (* This member can vouch that [r] was not silent: it watches [r], hears
     it, and has watched it without a long gap for a whole timeout, while
     running itself. *)
  let vouches t r =
    let now = t.now () in
    watches t r && hears t r
    && (not (gone t r))
    && now - t.watch_since.(r) >= t.timeout
    && now - t.back.(r) >= t.timeout
    && now - t.woke >= t.timeout

  let kept_running t = t.now () - t.woke >= t.timeout

  (* The members that watch [r] now: its ring successors. *)
  let monitors t r = successors ~n:t.n ~gone:(gone t) ~k:t.k r
  let live_accusers t r = List.filter (fun (a, _) -> not (gone t a)) t.accusers.(r)

  (* A silence reported by one member is adopted when a second member that
     watches the rank, or this member, confirms it; or when fewer than two
     members watch it (one word is then all there is). *)
  let corroborated t r =
    let accusers = live_accusers t r in
    accusers <> []
    && (List.length accusers >= 2
       || (watches t r && not (hears t r))
       || List.length (List.filter (fun m -> m <> r) (monitors t r)) < 2)

  let adopt t ranks reason =
    let added = Rankset.add t.suspected ranks in
    if added <> [] then begin
      rering t;
      report t added reason
    end;
    added

  (* Pending accusations are looked at again whenever the suspected set
     changes: fewer members may watch a rank now. *)
  let rec settle t =
    let due = ref [] in
    for r = t.n - 1 downto 0 do
      if peer t r && (not (gone t r)) && t.accusers.(r) <> [] && corroborated t r then
        due := r :: !due
    done;
    if !due <> [] then begin
      let by =
        List.sort_uniq compare (List.concat_map (fun r -> List.map fst (live_accusers t r)) !due)
      in
      let added = adopt t !due (Fmt.str "silence reported by %a and corroborated" pp_ranks by) in
      t.gossiped <- t.gossiped + List.length added;
      if added <> [] then settle t
    end

  let record t accuser r =
    if not (List.mem_assoc accuser t.accusers.(r)) then
      if t.claims >= t.max_claims then t.claims_dropped <- t.claims_dropped + 1
      else begin
        t.claims <- t.claims + 1;
        t.accusers.(r) <- (accuser, t.now ()) :: t.accusers.(r)
      end

  let accusation t accuser ranks reason (kind : Gevent.kind) =
    if peer t accuser && not t.stopped then
      match kind with
      | Requested ->
          let ranks = List.filter (fun r -> peer t r) ranks in
          List.iter (fun r -> t.asked.(r) <- true) ranks;
          let added = adopt t ranks (Printf.sprintf "asked at rank %d: %s" accuser reason) in
          List.iter (fun r -> t.told.(r) <- true) added;
          t.gossiped <- t.gossiped + List.length added
      | Unresponsive when (not (gone t accuser)) && t.refused.(accuser) ->
          (* A member calls others unresponsive to its flush, which this
             member refused: its exclusions were of ranks this member hears,
             or of this member on its word alone (it took the silence of a
             rank only it cannot hear for a failure). It is the one cut
             off, not the members that did not follow it: a deaf member is
             excluded alone. *)
          t.blamed <- t.blamed + 1;
          ignore
            (adopt t [ accuser ]
               (Printf.sprintf
                  "its flush excluded ranks this member hears, and it calls unresponsive the \
                   members that refused it (%s)"
                  reason))
      | Unresponsive when not (gone t accuser) ->
          let added =
            adopt t (List.filter (peer t) ranks) (Printf.sprintf "rank %d: %s" accuser reason)
          in
          List.iter (fun r -> t.told.(r) <- true) added;
          t.gossiped <- t.gossiped + List.length added
      | Unresponsive -> ()
      | Silent when gone t accuser -> ()
      | Silent ->
          let ranks =
            List.sort_uniq compare (List.filter (fun r -> r >= 0 && r < t.n && r <> accuser) ranks)
          in
          List.iter (record t accuser) ranks;
          (* An accuser contradicted twice, by ranks this member watches and
             hears all along or by this member itself while it kept running,
             is the one that does not hear: a deaf member is excluded alone. *)
          let contradicted =
            List.filter
              (fun r ->
                List.mem_assoc accuser t.accusers.(r)
                && if r = t.rank then kept_running t else vouches t r)
              (List.init t.n Fun.id)
          in
          if List.length contradicted >= 2 then begin
            t.blamed <- t.blamed + 1;
            ignore
              (adopt t [ accuser ]
                 (Fmt.str "reports %a silent, whom this member hears" pp_ranks contradicted))
          end
          else begin
            let before = t.gossiped in
            settle t;
            if t.gossiped = before && List.exists (fun r -> peer t r && not (gone t r)) ranks then
              t.waiting <- t.waiting + 1
          end

  let forgive t now gap =
    t.pauses <- t.pauses + 1;
    t.woke <- now;
    Log.warn (fun m ->
        m "rank %d was not scheduled for %s; not counting that time against the others" t.rank
          (seconds gap));
    let excess = gap - t.interval in
    let floor = now - t.timeout + t.interval in
    List.iter (fun r -> t.heard.(r) <- max floor (min now (t.heard.(r) + excess))) t.watched

  let running t now =
    let gap = now - t.last_tick in
    t.last_tick <- now;
    if gap > t.pause then forgive t now gap

  let dn t dst msg = if t.stopped then Msg.release msg else t.out.dn dst No_hdr msg

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else begin
      if t.n > 1 then running t (t.now ());
      match (src, h) with
      | (Event.Cast_from r | Event.Send_from r), No_hdr ->
          alive t r;
          t.out.up src msg
      | Event.Send_from r, Heartbeat when peer t r ->
          Msg.release msg;
          alive t r;
          t.heartbeats_received <- t.heartbeats_received + 1
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

  (* A coordinator's exclusions are confirmed when this member suspects the
     ranks, was asked to, does not hear them where it watches them, or the
     reports it has are corroborated (the coordinator's exclusion counts as
     one); a rank it does not watch and cannot judge yet is probed directly,
     and confirmed if it stays silent for [suspect.verify] (the round is
     judged again later). Its own exclusion only when asked, claimed by the
     coordinator for the grace period, or reported by two members. *)
  let rec judge_flush t coord excluded =
    let accept =
      if not (peer t coord) then coord = t.rank
      else if gone t coord then false
      else begin
        List.iter
          (fun r -> if r >= 0 && r < t.n && r <> coord then record t coord r)
          (List.filter (fun r -> r <> t.rank) excluded);
        if List.mem t.rank excluded then record t coord t.rank;
        let now = t.now () in
        List.for_all
          (fun r ->
            if r = t.rank then
              t.asked.(r)
              (* A coordinator that ranks above this member is one only
                 because it suspects it: its word alone is not enough (a
                 member deaf to the coordinator must not make it leave). *)
              || coord < t.rank
                 && List.exists (fun (a, at) -> a = coord && now >= at + t.grace) t.accusers.(r)
              || List.length (live_accusers t r) >= 2
            else
              r < 0 || r >= t.n || gone t r || t.asked.(r)
              || (watches t r && not (hears t r))
              (* A coordinator that ranks below [r] (its place does not rest
                 on [r]'s exclusion) and has claimed it for the grace
                 period: one of the two cannot reach the other (a one-way
                 fault), and the group cannot keep both, as {!Suspect}
                 judges it. *)
              || r > coord
                 && List.exists (fun (a, at) -> a = coord && now >= at + t.grace) t.accusers.(r)
              || ((not (watches t r)) && (corroborated t r || unanswered t r now)))
          excluded
      end
    in
    if peer t coord then t.refused.(coord) <- not accept;
    t.out.up_ctl (Gevent.Flush_verdict { coord; accept })

  and unanswered t r now =
    if t.asked_at.(r) = max_int then begin
      t.asked_at.(r) <- now;
      t.probes <- t.probes + 1;
      t.out.dn (Event.Send r) (Probe { ack = false }) (Msg.empty ());
      false
    end
    else now >= t.asked_at.(r) + max t.verify t.interval && t.seen.(r) < t.asked_at.(r)

  let dn_ctl t e =
    (match e with
    | Event.Stop -> t.stopped <- true
    | Gevent.Suspect_request { ranks; reason } when not t.stopped ->
        let added = adopt t (List.filter (peer t) ranks) reason in
        List.iter (fun r -> t.told.(r) <- true) added;
        t.requested <- t.requested + List.length added
    | Gevent.Suspect_unresponsive { ranks; reason } when not t.stopped ->
        let added = adopt t (List.filter (peer t) ranks) reason in
        List.iter (fun r -> t.told.(r) <- true) added;
        t.unresponsive <- t.unresponsive + List.length added
    | Gevent.Accusation { accuser; ranks; reason; kind } -> accusation t accuser ranks reason kind
    | Gevent.Judge_flush { coord; excluded } -> judge_flush t coord excluded
    | _ -> ());
    t.out.dn_ctl e

  let probe t now =
    List.iter
      (fun r ->
        if
          (not (gone t r))
          && now - t.heard.(r) >= t.timeout - t.verify
          && now - t.probed.(r) >= t.interval
        then begin
          t.probed.(r) <- now;
          t.probes <- t.probes + 1;
          t.out.dn (Event.Send r) (Probe { ack = false }) (Msg.empty ())
        end)
      t.watched

  (* When every watched rank falls silent at once, either they all failed
     or this member is cut off: [k] other members drawn at random are
     probed, and if none answers within [suspect.verify], this member
     suspects every other one (and forms a view of its own, to merge back
     when the network heals) instead of walking the ring [k] ranks per
     timeout. *)
  let test_alone t now silent =
    if t.alone = None then begin
      let others =
        List.filter
          (fun r -> peer t r && (not (gone t r)) && not (List.mem r silent))
          (List.init t.n Fun.id)
      in
      let pool = Array.of_list others in
      let m = Array.length pool in
      let drawn = ref [] in
      for _ = 1 to min t.k m do
        let i = Rng.int t.rng m in
        if not (List.mem pool.(i) !drawn) then drawn := pool.(i) :: !drawn
      done;
      if !drawn <> [] then begin
        List.iter
          (fun r ->
            t.probes <- t.probes + 1;
            t.out.dn (Event.Send r) (Probe { ack = false }) (Msg.empty ()))
          !drawn;
        t.alone <- Some (now, !drawn)
      end
    end

  let check_alone t now =
    match t.alone with
    | Some (at, drawn) when now >= at + max t.verify t.interval ->
        t.alone <- None;
        if not (List.exists (fun r -> t.seen.(r) >= at) drawn) then begin
          let others = List.filter (fun r -> peer t r && not (gone t r)) (List.init t.n Fun.id) in
          t.isolated <- t.isolated + 1;
          let added = Rankset.add t.suspected others in
          t.by_silence <- t.by_silence + List.length added;
          if added <> [] then begin
            rering t;
            report t added
              (Fmt.str "this member is cut off: its ring neighbours and %a, probed, are silent"
                 pp_ranks drawn)
          end
        end
    | _ -> ()

  let check t now =
    let silent = List.filter (fun r -> now - t.heard.(r) >= t.timeout) t.watched in
    if silent <> [] && List.for_all (fun r -> not (hears t r)) t.watched then
      test_alone t now t.watched;
    if silent <> [] then begin
      let lo = List.fold_left (fun a r -> min a (now - t.heard.(r))) max_int silent in
      let added = Rankset.add t.suspected silent in
      t.by_silence <- t.by_silence + List.length added;
      if added <> [] then begin
        rering t;
        report t added ("silent for " ^ seconds lo ^ " or more")
      end
    end

  (* The ranks [a] reports silent (this member included), as far as they
     are not suspected here. *)
  let accused_by t a =
    List.filter
      (fun r -> (r = t.rank || not (gone t r)) && List.mem_assoc a t.accusers.(r))
      (List.init t.n Fun.id)

  (* A member that has reported one rank silent, and that one alone, for
     two timeouts (longer than a flush round, so that a deaf member that
     took itself for the coordinator is found out first), neither corroborated nor found deaf: one of the two
     cannot hear the other (a one-way fault), and lower layers of the
     accuser hold nothing more for the accused, so the view cannot keep
     both; the accused is suspected here too, as {!Suspect} does after its
     grace period, and a view change comes. (A member deaf to everyone
     reports every rank it watches, and is found out as before.) *)
  let lone_accusations t now =
    let due = ref [] in
    for r = t.n - 1 downto 0 do
      if peer t r && not (gone t r) then
        List.iter
          (fun (a, at) ->
            if now >= at + (2 * t.timeout) && accused_by t a = [ r ] && not (List.mem r !due) then
              due := r :: !due)
          (live_accusers t r)
    done;
    if !due <> [] then begin
      let added =
        adopt t !due
          (Fmt.str "reported silent by one member alone for %s (a one-way fault)"
             (seconds (2 * t.timeout)))
      in
      t.gossiped <- t.gossiped + List.length added
    end

  let timer t now =
    if (not t.stopped) && t.n > 1 then begin
      running t now;
      check_alone t now;
      check t now;
      lone_accusations t now;
      probe t now;
      if t.beat_at <= now then begin
        t.beat_at <- now + t.interval;
        List.iter
          (fun r ->
            t.heartbeats_sent <- t.heartbeats_sent + 1;
            t.out.dn (Event.Send r) Heartbeat (Msg.empty ()))
          t.targets
      end;
      t.out.alarm t.beat_at;
      Option.iter (fun (at, _) -> t.out.alarm (at + max t.verify t.interval)) t.alone;
      List.iter
        (fun r ->
          let probe_at = t.heard.(r) + t.timeout - t.verify in
          t.out.alarm (t.heard.(r) + t.timeout);
          t.out.alarm (if probe_at > now then probe_at else t.probed.(r) + t.interval))
        t.watched
    end

  let counters t =
    [
      ("heartbeats_sent", t.heartbeats_sent);
      ("heartbeats_received", t.heartbeats_received);
      ("by_silence", t.by_silence);
      ("gossiped", t.gossiped);
      ("requested", t.requested);
      ("unresponsive", t.unresponsive);
      ("pauses", t.pauses);
      ("probes", t.probes);
      ("accusations_waiting", t.waiting);
      ("accusers_blamed", t.blamed);
      ("isolated", t.isolated);
      ("claims_dropped", t.claims_dropped);
      ("bad_rank", Rankset.bad_rank t.suspected);
      ("self_suspicions", Rankset.self t.suspected);
      ("malformed", t.malformed);
      ("watched", List.length t.watched);
      ("suspected", Rankset.cardinal t.suspected);
    ]
end

(* Casts carry no header of Ringfd; a received one is a proof of life. *)
module F = struct
  include L

  let cast =
    Layer.constant_cast codec No_hdr
      ~live:(fun t -> not t.stopped)
      ~up_fast:(fun t src _ _ ~layered:_ _ _ ->
        if t.n > 1 then running t (t.now ());
        (match src with Event.Cast_from r -> alive t r | _ -> ());
        src)
      ()

  let state t =
    Fmt.str "stopped %b; heard %a; watched %a; targets %a; beat %d tick %d; suspected %a; %a"
      t.stopped
      Fmt.(array ~sep:sp int)
      t.heard
      Fmt.(list ~sep:sp int)
      t.watched
      Fmt.(list ~sep:sp int)
      t.targets t.beat_at t.last_tick
      Fmt.(list ~sep:sp int)
      (Rankset.elements t.suspected)
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast (module F)
