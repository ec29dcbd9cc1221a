type rep = { victim : [ `Coordinator | `Member ]; detect_ms : float array }
type result = { size : int; timeout_ms : float; interval_ms : float; reps : rep list }

let once ~exe ~params ~size ~rep ~victim ~timeout_s ~interval_s ~phase =
  let dir = Proc.temp_dir "consort-bench-failover" in
  let addrs = Proc.free_addresses size in
  let group = Printf.sprintf "failover-%d-%d" (Unix.getpid ()) rep in
  let ms =
    List.mapi
      (fun i a ->
        Members.start ~exe ~dir ~group ~params ~seed:((rep * 100) + i + 1) ~peers:addrs i a)
      addrs
  in
  let procs = List.map (fun m -> m.Members.proc) ms in
  let full m = Members.first_view m ~after:0. (fun l -> List.length l = size) in
  let res =
    Fun.protect
      ~finally:(fun () -> Members.stop ms)
      (fun () ->
        if
          not
            (Proc.wait_until procs ~timeout:20. (fun () ->
                 List.for_all (fun m -> full m <> None) ms))
        then Error (Printf.sprintf "a group of %d did not form within 20 s" size)
        else begin
          (* Let heartbeats flow in the full view for a while; the kill
             falls at a different point of the heartbeat period each run. *)
          ignore (Proc.wait_until procs ~timeout:(0.5 +. (interval_s *. phase)) (fun () -> false));
          let view = match full (List.hd ms) with Some (_, l) -> l | None -> [] in
          let coordinator = Members.eid_addr (List.hd view) in
          let target =
            match victim with
            | `Coordinator -> List.find (fun m -> m.Members.addr = coordinator) ms
            | `Member -> List.find (fun m -> m.Members.addr <> coordinator) (List.rev ms)
          in
          let survivors = List.filter (fun m -> m != target) ms in
          let victim_id = List.find (fun id -> Members.eid_addr id = target.addr) view in
          let killed_at = Proc.now () in
          Proc.kill target.proc;
          (* The first view without the victim that follows the full view in
             the member's output and was read after the kill: a view of the
             same size from before the group formed, read late under load,
             must not count. *)
          let without m =
            let rec after_full seen_full = function
              | [] -> None
              | (at, line) :: rest -> (
                  match Members.parse_view line with
                  | Some (_, l) when List.length l = size -> after_full true rest
                  | Some (_, l)
                    when seen_full && at >= killed_at
                         && List.length l = size - 1
                         && not (List.mem victim_id l) ->
                      Some (at, l)
                  | _ -> after_full seen_full rest)
            in
            after_full false (Proc.lines m.Members.proc)
          in
          let sprocs = List.map (fun m -> m.Members.proc) survivors in
          if
            not
              (Proc.wait_until sprocs ~timeout:(timeout_s +. 15.) (fun () ->
                   List.for_all (fun m -> without m <> None) survivors))
          then
            Error
              (Printf.sprintf "the survivors did not exclude the killed member within %.0f s"
                 (timeout_s +. 15.))
          else
            Ok
              {
                victim;
                detect_ms =
                  Array.of_list
                    (List.map
                       (fun m ->
                         match without m with
                         | Some (at, _) -> (at -. killed_at) *. 1e3
                         | None -> nan)
                       survivors);
              }
        end)
  in
  Proc.remove_dir dir;
  res

let run ~exe ?(size = 3) ?(reps = 3) ?(params = "") () =
  if size < 2 then Error "a group of at least 2"
  else
    match Consort.Params.of_string params with
    | Error e -> Error (Fmt.str "%a" Consort.Params.pp_error e)
    | Ok p ->
        let timeout = Consort.Params.time p Consort_group.Suspect.Param.timeout in
        let interval = Consort.Params.time p Consort_group.Suspect.Param.interval in
        let timeout_s = Consort.Time.to_sec timeout in
        Consort_cli.with_progress "consort bench failover" ~total:reps @@ fun progress ->
        let rec go acc rep =
          if rep > reps then
            Ok
              {
                size;
                timeout_ms = Consort.Time.to_ms timeout;
                interval_ms = Consort.Time.to_ms interval;
                reps = List.rev acc;
              }
          else
            let victim = if rep mod 2 = 0 then `Coordinator else `Member in
            let phase = float (rep - 1) /. float reps in
            Consort_cli.step progress rep;
            match
              once ~exe ~params ~size ~rep ~victim ~timeout_s
                ~interval_s:(Consort.Time.to_sec interval) ~phase
            with
            | Error e -> Error e
            | Ok r -> go (r :: acc) (rep + 1)
        in
        go [] 1

let kill_once ~exe ?(params = "") ~size ~rep ~victim ~phase () =
  if size < 2 then Error "a group of at least 2"
  else
    match Consort.Params.of_string params with
    | Error e -> Error (Fmt.str "%a" Consort.Params.pp_error e)
    | Ok p ->
        let timeout = Consort.Params.time p Consort_group.Suspect.Param.timeout in
        let interval = Consort.Params.time p Consort_group.Suspect.Param.interval in
        once ~exe ~params ~size ~rep ~victim ~timeout_s:(Consort.Time.to_sec timeout)
          ~interval_s:(Consort.Time.to_sec interval) ~phase

let victim_name = function `Coordinator -> "coordinator" | `Member -> "member"

let pp_table ppf r =
  Fmt.pf ppf "%-4s %-12s | %28s | %s@." "run" "killed" "kill to new view: min / max"
    "over suspect.timeout";
  List.iteri
    (fun i rep ->
      Fmt.pf ppf "%-4d %-12s | %11.1f / %11.1f ms | %+.1f ms@." (i + 1) (victim_name rep.victim)
        (Stats.min rep.detect_ms) (Stats.max rep.detect_ms)
        (Stats.max rep.detect_ms -. r.timeout_ms))
    r.reps;
  let all = Array.concat (List.map (fun rep -> rep.detect_ms) r.reps) in
  Fmt.pf ppf
    "median over all survivors: %.1f ms; baseline: suspect.timeout %.0f ms (heartbeats every %.0f \
     ms)@."
    (Stats.median all) r.timeout_ms r.interval_ms;
  Fmt.pf ppf
    "(silence is counted from the last heartbeat, up to one interval before the kill, and checked \
     every interval:@. detection falls between timeout - interval and timeout + interval, plus the \
     view change)@."

let to_json r =
  let f = Stats.json_float in
  let all = Array.concat (List.map (fun rep -> rep.detect_ms) r.reps) in
  Printf.sprintf
    "{\"bench\":\"failover\",\"members\":%d,\"suspect_timeout_ms\":%s,\"suspect_interval_ms\":%s,\"median_ms\":%s,\"runs\":[%s]}"
    r.size (f r.timeout_ms) (f r.interval_ms)
    (f (Stats.median all))
    (String.concat ","
       (List.map
          (fun rep ->
            Printf.sprintf "{\"killed\":%S,\"min_ms\":%s,\"max_ms\":%s}" (victim_name rep.victim)
              (f (Stats.min rep.detect_ms))
              (f (Stats.max rep.detect_ms)))
          r.reps))
