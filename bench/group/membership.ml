type binary = { label : string; exe : string }

type row = {
  binary : string;
  measure : string;  (** key of the JSON rows *)
  what : string;  (** the table's words for it *)
  samples : float array;
}

type result = {
  rounds : int;
  size : int;
  sizes : int list;
  binaries : binary list;
  load_start : string;
  load_end : string;
  cpus : int;
  rows : row list;
}

let load_average () =
  match open_in "/proc/loadavg" with
  | exception Sys_error _ -> "?"
  | ic ->
      let l = try input_line ic with End_of_file -> "" in
      close_in ic;
      String.concat " " (List.filteri (fun i _ -> i < 3) (String.split_on_char ' ' l))

(* Every view line a member printed, with the time it was read. *)
let views m =
  List.filter_map
    (fun (at, l) -> Option.map (fun (v, ms) -> (at, v, ms)) (Members.parse_view l))
    (Proc.lines m.Members.proc)

let last_view m = match List.rev (views m) with x :: _ -> Some x | [] -> None

(* The members agree: the last view each printed is one view of [n], the same
   for all. Its id and members, and when the last of them printed it. *)
let agreed ms n =
  match List.map last_view ms with
  | Some (_, v, l) :: rest
    when List.length l = n
         && List.for_all (function Some (_, v', _) -> v' = v | None -> false) rest ->
      let at =
        List.fold_left
          (fun a m ->
            match List.find_opt (fun (_, v', _) -> v' = v) (views m) with
            | Some (t, _, _) -> Float.max a t
            | None -> a)
          neg_infinity ms
      in
      Some (v, l, at)
  | _ -> None

(* Views [m] printed from [since] up to and including view [v]. *)
let views_until m ~since v =
  let rec go n = function
    | [] -> n
    | (at, v', _) :: rest ->
        let n = if at >= since then n + 1 else n in
        if v' = v then n else go n rest
  in
  go 0 (views m)

(* Pumps the members' output until [f ()] holds or [timeout] seconds pass;
   with [cast], every [tick] seconds each member of [casting ()] is given a
   line to cast. *)
let tick = 0.02

let run_until ?(cast = false) ?(casting = fun () -> []) ms ~timeout f =
  let procs () = List.map (fun m -> m.Members.proc) (ms ()) in
  let deadline = Proc.now () +. timeout in
  let next = ref (Proc.now ()) and k = ref 0 in
  let rec go () =
    let t = Proc.now () in
    if cast && t >= !next then begin
      incr k;
      List.iter
        (fun m -> ignore (Proc.write_line m.Members.proc (Printf.sprintf "c%d" !k)))
        (casting ());
      next := !next +. tick
    end;
    if f () then true
    else if t >= deadline then false
    else begin
      Proc.pump (procs ()) ~timeout:(Float.max 0.001 (Float.min (deadline -. t) tick));
      go ()
    end
  in
  go ()

let pause ?cast ?casting ms s = ignore (run_until ?cast ?casting ms ~timeout:s (fun () -> false))

(* Members 0 to [k - 1] of a group whose addresses are [addrs], started at
   once and formed: every one's last view the same view of [k]. *)
let form ~exe ~params ~dir ~group ~seed0 ~addrs k =
  let ms =
    List.filteri (fun i _ -> i < k) addrs
    |> List.mapi (fun i a ->
           Members.start ~exe ~dir ~group ~params ~seed:(seed0 + i) ~peers:addrs i a)
  in
  if run_until (fun () -> ms) ~timeout:20. (fun () -> agreed ms k <> None) then Ok ms
  else begin
    Members.stop ms;
    Error (Printf.sprintf "a group of %d did not form within 20 s" k)
  end

let with_group ~exe ~params ~name ~round ~addrs k f =
  let dir = Proc.temp_dir ("consort-bench-" ^ name) in
  let group = Printf.sprintf "%s-%d-%d" name (Unix.getpid ()) round in
  let live = ref [] in
  let res =
    Fun.protect
      ~finally:(fun () -> Members.stop !live)
      (fun () ->
        match form ~exe ~params ~dir ~group ~seed0:((round * 100) + 1) ~addrs k with
        | Error e -> Error e
        | Ok ms ->
            live := ms;
            f ~dir ~group ~live)
  in
  Proc.remove_dir dir;
  res

(* A group of [n - 1] forms; the [n]th member starts; from its creation to the
   view of [n] at every member, and the views the others installed since. *)
let join_once ~exe ~params ~round n =
  let addrs = Proc.free_addresses n in
  with_group ~exe ~params ~name:"join" ~round ~addrs (n - 1) @@ fun ~dir ~group ~live ->
  let old = !live in
  pause (fun () -> !live) 0.3;
  let nm =
    Members.start ~exe ~dir ~group ~params
      ~seed:((round * 100) + n)
      ~peers:addrs (n - 1)
      (List.nth addrs (n - 1))
  in
  live := old @ [ nm ];
  let born = Proc.spawned_at nm.Members.proc in
  if run_until (fun () -> !live) ~timeout:30. (fun () -> agreed !live n <> None) then
    match agreed !live n with
    | Some (v, _, at) ->
        Ok ((at -. born) *. 1e3, List.map (fun m -> float (views_until m ~since:born v)) old)
    | None -> Error "unreachable"
  else Error (Printf.sprintf "a member did not join a group of %d within 30 s" (n - 1))

(* A group of [n] forms and casts (each member a line every 20 ms); a member
   other than the coordinator is killed, started again at its address
   [delay] seconds later, the casts going on; from the kill and from the new
   process to the view of [n] at every member, the views each survivor
   installed from the kill to it, and those the new member installed. *)
let restart_once ~exe ~params ~round ~delay n =
  let addrs = Proc.free_addresses n in
  with_group ~exe ~params ~name:"restart" ~round ~addrs n @@ fun ~dir ~group ~live ->
  let casting () = !live in
  pause ~cast:true ~casting (fun () -> !live) 0.5;
  match agreed !live n with
  | None -> Error "the group changed its view before the kill"
  | Some (_, view, _) -> (
      let coordinator = Members.eid_addr (List.hd view) in
      match List.find_opt (fun m -> m.Members.addr <> coordinator) (List.rev !live) with
      | None -> Error "no member but the coordinator"
      | Some victim ->
          let index =
            let rec find i = function
              | [] -> 0
              | m :: rest -> if m == victim then i else find (i + 1) rest
            in
            find 0 !live
          in
          let old_id = List.find (fun id -> Members.eid_addr id = victim.addr) view in
          let survivors = List.filter (fun m -> m != victim) !live in
          let killed_at = Proc.now () in
          Proc.kill victim.proc;
          live := survivors;
          pause ~cast:true ~casting (fun () -> !live) delay;
          let nm =
            Members.start ~exe ~dir ~group ~params
              ~seed:((round * 100) + 50 + index)
              ~peers:addrs (n + index) victim.addr
          in
          live := survivors @ [ nm ];
          let born = Proc.spawned_at nm.Members.proc in
          let back () =
            match agreed !live n with Some (_, l, _) -> List.mem old_id l = false | None -> false
          in
          if run_until ~cast:true ~casting (fun () -> !live) ~timeout:40. back then
            match agreed !live n with
            | Some (v, _, at) ->
                Ok
                  ( (at -. killed_at) *. 1e3,
                    (at -. born) *. 1e3,
                    List.map (fun m -> float (views_until m ~since:killed_at v)) survivors,
                    float (views_until nm ~since:neg_infinity v) )
            | None -> Error "unreachable"
          else
            Error
              (Printf.sprintf "a member restarted at its address was not back within 40 s (%s)"
                 (String.concat "; "
                    (List.map
                       (fun m ->
                         match last_view m with
                         | Some (_, v, l) -> v ^ ": " ^ String.concat " " l
                         | None -> "no view")
                       !live))))

let delays = [| 0.5; 1.5; 2.5 |]

let run ~binaries ?(rounds = 5) ?(size = 3) ?(sizes = [ 3; 5 ]) ?(params = "")
    ?(measures = [ `Join; `Failover; `Restart ]) () =
  let sizes = if List.mem `Join measures then sizes else [] in
  if size < 2 || List.exists (fun n -> n < 2) sizes then Error "groups of at least 2"
  else begin
    let old_pipe = Sys.signal Sys.sigpipe Sys.Signal_ignore in
    Fun.protect ~finally:(fun () -> Sys.set_signal Sys.sigpipe old_pipe) @@ fun () ->
    let load_start = load_average () in
    let table = ref [] in
    let add binary measure what xs =
      match List.find_opt (fun (b, m, _, _) -> b = binary && m = measure) !table with
      | Some (_, _, _, r) -> r := !r @ xs
      | None -> table := !table @ [ (binary, measure, what, ref xs) ]
    in
    let rec rounds_loop round =
      if round > rounds then Ok ()
      else
        let rec bins = function
          | [] -> rounds_loop (round + 1)
          | b :: rest -> (
              let exe = b.exe in
              let joins =
                List.fold_left
                  (fun acc n ->
                    Result.bind acc (fun () ->
                        Result.map
                          (fun (ms, vs) ->
                            add b.label (Printf.sprintf "join_%d_ms" n)
                              (Printf.sprintf
                                 "join, group of %d: the new member's creation to the view at all, \
                                  ms"
                                 n)
                              [ ms ];
                            add b.label
                              (Printf.sprintf "join_%d_views" n)
                              (Printf.sprintf "join, group of %d: views each other member installs"
                                 n)
                              vs)
                          (join_once ~exe ~params ~round n)))
                  (Ok ()) sizes
              in
              let res =
                Result.bind joins (fun () ->
                    Result.bind
                      (if not (List.mem `Failover measures) then Ok None
                       else
                         Result.map Option.some
                         @@ Failover.kill_once ~exe ~params ~size ~rep:round ~victim:`Coordinator
                              ~phase:(float (round - 1) /. float rounds)
                              ())
                      (fun r ->
                        Option.iter
                          (fun r ->
                            add b.label "failover_ms"
                              "coordinator SIGKILLed: kill to the last survivor's next view, ms"
                              [ Stats.max r.Failover.detect_ms ])
                          r;
                        if not (List.mem `Restart measures) then Ok ()
                        else
                          Result.map
                            (fun (from_kill, from_start, vs, jv) ->
                              add b.label "restart_kill_ms"
                                "member SIGKILLed and restarted: kill to the view of all, ms"
                                [ from_kill ];
                              add b.label "restart_back_ms"
                                "restart: the new process's creation to the view of all, ms"
                                [ from_start ];
                              add b.label "restart_views"
                                "restart: views each survivor installs, kill to the view of all" vs;
                              add b.label "restart_joiner_views"
                                "restart: views the restarted member installs until it is back"
                                [ jv ])
                            (restart_once ~exe ~params ~round
                               ~delay:delays.((round - 1) mod Array.length delays)
                               size)))
              in
              match res with Error e -> Error (b.label ^ ": " ^ e) | Ok () -> bins rest)
        in
        bins binaries
    in
    match rounds_loop 1 with
    | Error e -> Error e
    | Ok () ->
        Ok
          {
            rounds;
            size;
            sizes;
            binaries;
            load_start;
            load_end = load_average ();
            cpus = Proc.online_cpus ();
            rows =
              List.map
                (fun (binary, measure, what, r) ->
                  { binary; measure; what; samples = Array.of_list !r })
                !table;
          }
  end

let pp_table ppf r =
  let w = List.fold_left (fun a row -> Int.max a (String.length row.binary)) 6 r.rows in
  Fmt.pf ppf "%-70s %-*s %9s %9s %9s %4s@." "measure" w "binary" "median" "min" "max" "n";
  (* Each measure, its binaries one under the other. *)
  let measures =
    List.fold_left
      (fun acc row ->
        if List.mem_assoc row.measure acc then acc else acc @ [ (row.measure, row.what) ])
      [] r.rows
  in
  List.iter
    (fun (m, what) ->
      List.iter
        (fun row ->
          if row.measure = m then
            Fmt.pf ppf "%-70s %-*s %9.1f %9.1f %9.1f %4d@." what w row.binary
              (Stats.median row.samples) (Stats.min row.samples) (Stats.max row.samples)
              (Array.length row.samples))
        r.rows)
    measures;
  Fmt.pf ppf "load average at the start %s, at the end %s; %d CPUs online, processes unpinned@."
    r.load_start r.load_end r.cpus

let to_json r =
  let f = Stats.json_float in
  Printf.sprintf
    "{\"bench\":\"membership\",\"rounds\":%d,\"members\":%d,\"join_sizes\":[%s],\"load_start\":%S,\"load_end\":%S,\"cpus\":%d,\"placement\":\"unpinned\",\"restart_delays_s\":[%s],\"binaries\":[%s],\"rows\":[%s]}"
    r.rounds r.size
    (String.concat "," (List.map string_of_int r.sizes))
    r.load_start r.load_end r.cpus
    (String.concat "," (Array.to_list (Array.map (Printf.sprintf "%.1f") delays)))
    (String.concat ","
       (List.map (fun b -> Printf.sprintf "{\"label\":%S,\"exe\":%S}" b.label b.exe) r.binaries))
    (String.concat ","
       (List.map
          (fun row ->
            Printf.sprintf
              "{\"binary\":%S,\"measure\":%S,\"median\":%s,\"min\":%s,\"max\":%s,\"samples\":[%s]}"
              row.binary row.measure
              (f (Stats.median row.samples))
              (f (Stats.min row.samples))
              (f (Stats.max row.samples))
              (String.concat "," (Array.to_list (Array.map f row.samples))))
          r.rows))
