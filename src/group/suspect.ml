open Consort

let src = Logs.Src.create "consort.suspect" ~doc:"Suspect layer: heartbeat failure detector"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let interval = "suspect.interval"
  let timeout = "suspect.timeout"
  let pause = "suspect.pause"

  let () =
    Params.register interval (Params.Time (Time.of_ms 250)) ~doc:"period of heartbeat casts";
    Params.register timeout (Params.Time (Time.of_sec 5.))
      ~doc:"silence after which a member is suspected of having failed";
    Params.register pause (Params.Time (Time.of_sec 1.))
      ~doc:
        "gap between two timer calls taken as a pause of this member (at least twice the \
         interval); silence during a pause is not held against others"
end

let contract =
  Contract.v "suspect"
    ~doc:"members silent for too long are reported up as Suspect events, once per rank per view"

let max_members = 4096

let pp_ranks = Fmt.(list ~sep:comma int)

let seconds d = Printf.sprintf "%.1f s" (Time.to_sec d)

module L = struct
  type header = No_hdr | Heartbeat of { suspects : int list }

  let name = "suspect"

  let codec =
    Codec.(
      union "suspect"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "heartbeat" (list ~max:max_members varint)
            (function Heartbeat { suspects } -> Some suspects | _ -> None)
            (fun suspects -> Heartbeat { suspects });
        ])

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Heartbeat { suspects = [] } -> Fmt.string ppf "heartbeat"
    | Heartbeat { suspects } -> Fmt.pf ppf "heartbeat(suspects %a)" pp_ranks suspects

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
    heard : Time.t array;  (* when the last datagram of each rank arrived *)
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
        heard = Array.make n now;
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
      }
    in
    if t.beat_at <> max_int then out.alarm t.beat_at;
    t

  let peer t r = r >= 0 && r < t.n && r <> t.rank

  let fresh t ranks = Rankset.add t.suspected ranks

  let report t ranks reason =
    Log.info (fun m -> m "rank %d suspects %a: %s" t.rank pp_ranks ranks reason);
    t.out.up_ctl (Gevent.Suspect { ranks; reason })

  let alive t r =
    if peer t r then begin
      if Rankset.mem t.suspected r then t.heard_after <- t.heard_after + 1;
      t.heard.(r) <- t.now ()
    end

  let dn t dst msg = if t.stopped then Msg.release msg else t.out.dn dst No_hdr msg

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
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
          let added = fresh t suspects in
          if added <> [] then begin
            t.gossiped <- t.gossiped + List.length added;
            report t added (Printf.sprintf "suspected by %d" r)
          end
      | _ ->
          t.malformed <- t.malformed + 1;
          Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
          Msg.release msg

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Stop -> t.stopped <- true
    | Gevent.Suspect_request { ranks; reason } when not t.stopped ->
        let added = fresh t ranks in
        if added <> [] then begin
          t.requested <- t.requested + List.length added;
          report t added reason
        end
    | _ -> ());
    t.out.dn_ctl e

  (* After a pause of this member, the silence of others is counted as if
     the pause had not happened, and each gets at least one more interval. *)
  let forgive t now gap =
    t.pauses <- t.pauses + 1;
    Log.warn (fun m ->
        m "rank %d was not scheduled for %s; not counting that time against the others" t.rank
          (seconds gap));
    let excess = gap - t.interval in
    let floor = now - t.timeout + t.interval in
    for r = 0 to t.n - 1 do
      if peer t r && not (Rankset.mem t.suspected r) then
        t.heard.(r) <- max floor (min now (t.heard.(r) + excess))
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
      let gap = now - t.last_tick in
      t.last_tick <- now;
      if gap > t.pause then forgive t now gap;
      check t now;
      if t.beat_at <= now then begin
        t.heartbeats_sent <- t.heartbeats_sent + 1;
        t.beat_at <- now + t.interval;
        t.out.dn Event.Cast (Heartbeat { suspects = Rankset.elements t.suspected }) (Msg.empty ())
      end;
      t.out.alarm t.beat_at;
      let next = ref max_int in
      for r = 0 to t.n - 1 do
        if peer t r && not (Rankset.mem t.suspected r) then next := min !next (t.heard.(r) + t.timeout)
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
      ("suspected", Rankset.cardinal t.suspected);
    ]
end

include L

let layer : Layer.t = (module L)
