open Consort
module Sim = Consort_engine.Sim
module L = Consort_spec.Linearizable

type outcome = {
  violations : string list;
  ops : int;
  acked : int;
  unknown : int;
  restarts : int;
  datagrams : int;
  end_time : Time.t;
  trace_hash : string;
}

type config = {
  tag : string;
  salt : int;
  stop_at : Time.t;
  faults_ms : int;
  down_ms : int;
  heal_ms : int;
  reads_at : Time.t;
  all_stop : Time.t;
  until : Time.t;
  disk_faults : bool;
  lost_dir : bool;
}

let keys = [| "a"; "b"; "c" |]
let s = Time.of_sec
let ms = Time.of_ms

module Make
    (M : Rsm.MACHINE)
    (S :
      Store.S
        with type op = M.op
         and type response = M.response
         and type limits = M.limits
         and type machine = M.t) =
struct
  module R = Replica.Generic (M) (S) (Sim)

  type workload = {
    limits : M.limits option;
    next : int -> M.op * (string * L.op) list;
    label : M.op -> (string * L.op) list -> string;
    answer : M.op -> string * L.op -> M.response -> (L.response, string) result;
    read : string -> M.op * (string * L.op) list;
  }

  type replica = {
    addr : string;
    dir : string;
    mutable r : (R.t * S.t) option;
    mutable dies_at : int; (* disk step at which this incarnation dies; 0: never *)
    mutable dying : bool; (* it died at a disk step: nothing more reaches its disk *)
    mutable torn : bool; (* it died in the middle of a write: its log may end torn *)
    disk : Consort_util.Sim_disk.t; (* the same for every incarnation *)
    mutable faulty : bool; (* its disk injects faults now *)
    mutable init : Store.init; (* how its next start opens its directory (with lost_dir) *)
  }

  let digest m = Digest.string (Codec.encode_string (M.codec (M.limits m)) m)

  let run ?(ack_race = false) cfg workload ?trace ?(params = Params.empty) ~seed () =
    Consort_local.with_scratch cfg.tag ~seed @@ fun scratch ->
    let rng = Random.State.make [| seed; cfg.salt |] in
    let w = workload ~seed rng in
    let link =
      {
        Sim.latency = ms 1;
        jitter = ms (if ack_race then 3 else Random.State.int rng 3);
        loss = [| 0.; 0.01; 0.05 |].(Random.State.int rng 3);
        duplicate = [| 0.; 0.02 |].(Random.State.int rng 2);
        reorder = [| 0.; 0.05 |].(Random.State.int rng 2);
        reorder_delay = ms 5;
      }
    in
    let net = Sim.create ~seed ~link () in
    Sim.set_trace_channel net trace;
    let now () = Sim.now net in
    let at t f = ignore (Sim.at net t f) in
    let note fmt =
      match trace with
      | Some oc -> Printf.ksprintf (fun l -> Printf.fprintf oc "%d %s %s\n" (now ()) cfg.tag l) fmt
      | None -> Printf.ifprintf () fmt
    in
    let params =
      match
        Params.of_string
          "suspect.timeout=2s,suspect.verify=500ms,suspect.grace=500ms,gmp.flush_timeout=2s"
      with
      | Ok p -> Params.override p ~by:params
      | Error _ -> params
    in
    let violations = ref [] in
    let violation fmt = Fmt.kstr (fun s -> violations := s :: !violations) fmt in
    let n = 3 in
    let addrs = List.init n (Printf.sprintf "r%d") in
    let reps =
      Array.init n (fun i ->
          {
            addr = List.nth addrs i;
            dir = Filename.concat scratch (Printf.sprintf "r%d" i);
            r = None;
            dies_at = 0;
            dying = false;
            torn = false;
            disk =
              Consort_util.Sim_disk.create
                (Random.State.make [| seed; cfg.salt; i |])
                Consort_util.Sim_disk.no_faults;
            faulty = false;
            init = Store.New;
          })
    in
    (* Every acknowledgement a replica counts names the orders it applied itself: the chain
       after the orders it vouches for is the counting replica's, as its origin applied them. *)
    let applied = Hashtbl.create 1024 in
    let observe = function
      | Replica.Applied { member; vid; count; chain } ->
          Hashtbl.replace applied (member, vid, count) chain
      | Replica.Counted { member; vid; origin; count } -> (
          match
            ( Hashtbl.find_opt applied (member, vid, count),
              Hashtbl.find_opt applied (origin, vid, count) )
          with
          | Some a, Some b when a = b -> ()
          | Some _, Some _ ->
              violation
                "%s counted %s's acknowledgement of %d orders of view %s, which applied other \
                 orders"
                member origin count vid
          | None, _ ->
              violation "%s counted an acknowledgement of %d orders of view %s it has not applied"
                member count vid
          | _, None ->
              violation "%s counted %s's acknowledgement of %d orders of view %s it never applied"
                member origin count vid)
    in
    (* Group commit: the fsync after applying takes 0 (inline), 1 or 4 ms
       of the simulator's clock, by seed (a stream of its own, so that the
       schedule's other draws stay what they were); orders applied
       meanwhile wait for the next one. *)
    let fsync =
      match Random.State.int (Random.State.make [| seed; cfg.salt; 0x5c |]) 3 with
      | 0 -> None
      | k ->
          let latency = ms (if k = 1 then 1 else 4) in
          Some
            (fun ~fd:_ run k ->
              at
                (Time.add (now ()) latency)
                (fun () -> k (match run () with () -> Ok () | exception x -> Error x)))
    in
    let restarts = ref 0 and repaired = ref 0 in
    let disk_steps = ref 0 in
    let rec start i =
      let p = reps.(i) in
      if p.r = None then begin
        p.dying <- false;
        let module Io = Consort_util.Io in
        let step () =
          if not p.dying then begin
            incr disk_steps;
            if p.dies_at > 0 && !disk_steps >= p.dies_at then begin
              (* The process dies here: this step and all later ones never
                 happen, the application stops at once, and the member is
                 crashed from the simulator's next event. *)
              p.dying <- true;
              (match p.r with Some (r, _) -> R.halt r | None -> ());
              at (now ()) (fun () -> died i)
            end
          end;
          not p.dying
        in
        let real = Consort_util.Sim_disk.io p.disk in
        let io =
          {
            Io.write =
              (fun path fd b off len ->
                let was = p.dying in
                if step () then real.write path fd b off len
                else begin
                  (* It dies in the middle of this write: a prefix of it reaches the file. *)
                  if (not was) && len > 1 then begin
                    let part = Random.State.int rng (min len Io.chunk) in
                    if part > 0 then (
                      ignore (real.write path fd b off part);
                      p.torn <- true)
                  end;
                  min len Io.chunk
                end);
            fsync = (fun path fd -> if step () then real.fsync path fd);
            fsync_dir = (fun path -> if step () then real.fsync_dir path);
            rename = (fun a b -> if step () then real.rename a b);
            unlink = (fun path -> if step () then real.unlink path);
          }
        in
        let identity = if cfg.lost_dir then Some (cfg.tag, p.init) else None in
        match
          S.open_ ~io ?limits:w.limits
            ~snapshot_bytes:(4096 + Random.State.int rng 8192)
            ~retain:(Random.State.int rng 100) ?identity p.dir
        with
        | Error e when p.faulty ->
            (* The disk is failing: the process exits, and is started again later. *)
            note "%s: store does not open: %s" p.addr e;
            power_loss p;
            at (Time.add (now ()) (ms 1000)) (fun () -> start i)
        | Error e -> violation "%s: store does not open: %s" p.addr e
        | Ok (store, found) -> (
            p.init <- Store.Existing;
            List.iter
              (fun f ->
                match f with
                | Store.Torn_tail _ when p.torn ->
                    incr repaired;
                    note "%s: %s" p.addr (Fmt.str "%a" Store.pp_finding f)
                | f ->
                    if Store.is_damage f then violation "%s: recovery: %a" p.addr Store.pp_finding f)
              found;
            p.torn <- false;
            let rcfg =
              {
                (Replica.default_config ~group:cfg.tag ~addr:p.addr
                   ~peers:(List.filter (( <> ) p.addr) addrs))
                with
                request_timeout = s 4.;
                max_batch = 1 + Random.State.int rng 8;
              }
            in
            let rec on_failure e =
              (* The replica stopped on an I/O error: its process exits
                 (after its leave went out), and is started again later. *)
              note "%s: %s" p.addr (Fmt.str "%a" Store.pp_failure e);
              (match e with
              | Store.Wrong_dir _ ->
                  (* The operator moves the wrong directory away and
                     starts the replica again empty, to catch up. *)
                  p.init <- Store.Join;
                  at (Time.add (now ()) (ms 300)) (fun () -> Consort_local.rm_rf p.dir)
              | _ -> ());
              at
                (Time.add (now ()) (ms 300))
                (fun () ->
                  match p.r with Some (r, _) when R.failure r <> None -> stopped i | _ -> ())
            and stopped i =
              let p = reps.(i) in
              note "%s exits" p.addr;
              (match p.r with
              | Some (r, store) ->
                  R.crash r;
                  Sim.crash net p.addr;
                  S.close store
              | None -> ());
              p.r <- None;
              p.dies_at <- 0;
              power_loss p;
              incr restarts;
              at (Time.add (now ()) (ms (700 + Random.State.int rng 1000))) (fun () -> start i)
            in
            match
              R.create ~params ~on_failure ~observe ?fsync ~seed:(Random.State.int rng 0x3fffffff)
                net rcfg store
            with
            | Ok r ->
                p.r <- Some (r, store);
                note "start %s as %s" p.addr (R.me r)
            | Error e -> violation "%s: replica does not start: %s" p.addr e)
      end
    and crash i =
      let p = reps.(i) in
      match p.r with
      | Some (r, store) ->
          note "crash %s" p.addr;
          R.crash r;
          Sim.crash net p.addr;
          S.close store;
          p.r <- None;
          p.dies_at <- 0;
          power_loss p
      | None -> ()
    and died i =
      (* The process died in the middle of a disk step: it is gone, and is
         started again a little later. *)
      let p = reps.(i) in
      note "%s died at disk step %d" p.addr !disk_steps;
      (match p.r with
      | Some (r, store) ->
          R.crash r;
          Sim.crash net p.addr;
          S.close store
      | None -> ());
      p.r <- None;
      p.dies_at <- 0;
      power_loss p;
      incr restarts;
      at (Time.add (now ()) (ms 300)) (fun () -> start i)
    and power_loss p =
      (* Every stop is a power loss: what was not fsynced is lost, or torn. *)
      if Consort_util.Sim_disk.crash p.disk > 0 then p.torn <- true
    in
    Array.iteri (fun i _ -> at (ms (Random.State.int rng 300)) (fun () -> start i)) reps;
    (* Clients: each runs one operation at a time, on a few keys. *)
    let history = ref [] and unknown = ref 0 and acked = ref 0 in
    let clients = 2 + Random.State.int rng 3 in
    let rec client c ~id ~req ~(final : string option) =
      (* Each operation, and what the checker sees of it: one event per key. *)
      let op, spec = match final with Some k -> w.read k | None -> w.next c in
      let call = now () in
      let request = { Wire.client = id; req; op } in
      let maybe = ref false in
      let finish response =
        (match response with
        | Some r ->
            incr acked;
            List.iter
              (fun ((key, sop) as e) ->
                match w.answer op e r with
                | Ok resp ->
                    history :=
                      {
                        L.client = c;
                        key;
                        op = sop;
                        call;
                        return = Some (now ());
                        response = Some resp;
                      }
                      :: !history
                | Error why -> violation "client %d: %s" c why)
              spec
        | None ->
            if !maybe then (
              incr unknown;
              List.iter
                (fun (key, sop) ->
                  history :=
                    { L.client = c; key; op = sop; call; return = None; response = None }
                    :: !history)
                spec));
        note "client %d: %s -> %s" c (w.label op spec)
          (match response with
          | Some r -> Fmt.str "%a" M.pp_response r
          | None -> if !maybe then "unknown" else "not done");
        if final = None && now () < cfg.stop_at then
          at
            (Time.add (now ()) (ms (Random.State.int rng 100)))
            (fun () -> client c ~id ~req:(req + 1) ~final:None)
      in
      (* Attempts at live replicas in turn, until a definite answer or the
         client's deadline. *)
      let deadline = Time.add call (s 20.) in
      let rec attempt k =
        if now () > deadline then finish None
        else
          let live = List.filter_map (fun p -> Option.map fst p.r) (Array.to_list reps) in
          match live with
          | [] -> at (Time.add (now ()) (ms 200)) (fun () -> attempt (k + 1))
          | _ ->
              let r = List.nth live ((c + k) mod List.length live) in
              let answered = ref false in
              let next delay =
                if not !answered then (
                  answered := true;
                  at (Time.add (now ()) delay) (fun () -> attempt (k + 1)))
              in
              (* A replica that crashes never answers: the client gives up on it. *)
              at
                (Time.add (now ()) (s 5.))
                (fun () ->
                  if not !answered then (
                    maybe := true;
                    next Time.zero));
              R.submit r request (function
                | Wire.Done resp ->
                    if not !answered then (
                      answered := true;
                      finish (Some resp))
                | Wire.Unknown _ ->
                    maybe := true;
                    next (ms 50)
                | Wire.Refused _ -> next (ms 100))
      in
      attempt c
    in
    for c = 0 to clients - 1 do
      at
        (Time.add (s 1.) (ms (Random.State.int rng 500)))
        (fun () -> client c ~id:(Int64.of_int (1000 + c)) ~req:1 ~final:None)
    done;
    (* Faults during the workload (none in the acknowledgement race, which is its own fault). *)
    let faults = if ack_race then 0 else 1 + Random.State.int rng 3 in
    (* Half of the faults strike the sequencer. *)
    let victim () =
      let seq = ref None in
      Array.iteri
        (fun i p -> match p.r with Some (r, _) when R.is_sequencer r -> seq := Some i | _ -> ())
        reps;
      match !seq with Some i when Random.State.bool rng -> i | _ -> Random.State.int rng n
    in
    for _ = 1 to faults do
      let t = Time.add (s 2.) (ms (Random.State.int rng cfg.faults_ms)) in
      let i = ref 0 in
      let pick f () =
        i := victim ();
        f ()
      in
      match Random.State.int rng 3 with
      | 0 ->
          let down = ms (500 + Random.State.int rng cfg.down_ms) in
          at t (pick (fun () -> crash !i));
          at (Time.add t down) (fun () ->
              incr restarts;
              start !i)
      | 1 ->
          (* Dies at one of its next disk steps. *)
          let after = 1 + Random.State.int rng 20 in
          at t
            (pick (fun () -> if reps.(!i).r <> None then reps.(!i).dies_at <- !disk_steps + after))
      | _ ->
          let heal = ms (500 + Random.State.int rng cfg.heal_ms) in
          at t
            (pick (fun () ->
                 note "partition %s away" reps.(!i).addr;
                 Sim.partition net [ [ reps.(!i).addr ]; List.filter (( <> ) reps.(!i).addr) addrs ]));
          at (Time.add t heal) (fun () ->
              note "heal";
              Sim.heal net)
    done;
    (* The acknowledgement race: the sequencer applied its own cast and acknowledged it, its
       acknowledgement reached every other member of the view (the jitter lets it overtake the
       cast), the cast reached none of them yet. Then the sequencer crashes, cut off at once so
       that its cast never arrives: the survivors apply other orders in its place at the end of
       the view (their own casts, which it had not ordered), and must not count its
       acknowledgement for them. *)
    if ack_race then begin
      let raced = ref false in
      let rec poll () =
        if (not !raced) && now () < cfg.stop_at then begin
          let live =
            List.filter_map
              (fun (i, p) -> Option.map (fun (r, _) -> (i, r)) p.r)
              (List.mapi (fun i p -> (i, p)) (Array.to_list reps))
          in
          (match List.find_opt (fun (_, r) -> R.is_sequencer r) live with
          | Some (i, sq) ->
              let others = List.filter (( <> ) (R.me sq)) (Array.to_list (R.view sq).members) in
              let waiting m =
                List.exists
                  (fun (_, r) -> R.me r = m && R.pending_ack r ~origin:(R.me sq) <> None)
                  live
              in
              if others <> [] && List.for_all waiting others then begin
                raced := true;
                let p = reps.(i) in
                note "ack race: %s acknowledged orders no other member has: crash it" p.addr;
                Sim.partition net [ [ p.addr ]; List.filter (( <> ) p.addr) addrs ];
                crash i;
                at (Time.add (now ()) (ms 1000)) (fun () -> Sim.heal net);
                at
                  (Time.add (now ()) (ms (4000 + Random.State.int rng 2000)))
                  (fun () ->
                    incr restarts;
                    start i)
              end
          | None -> ());
          at (Time.add (now ()) (Time.of_us 200)) poll
        end
      in
      at (s 2.) poll
    end;
    (* Storage faults: a disk that fills, fails writes or fsyncs, for a
       while (its replica stops at the first; restarted, it stops again
       until the disk is repaired). *)
    if cfg.disk_faults then begin
      let module D = Consort_util.Sim_disk in
      for _ = 1 to 1 + Random.State.int rng 3 do
        let i = Random.State.int rng n in
        let p = reps.(i) in
        let t = Time.add (s 2.) (ms (Random.State.int rng cfg.faults_ms)) in
        let repair = ms (1000 + Random.State.int rng cfg.down_ms) in
        let kind = Random.State.int rng 3 in
        let room = Random.State.int rng 20_000 in
        at t (fun () ->
            p.faulty <- true;
            let c =
              match kind with
              | 0 -> { D.no_faults with budget = Some (D.written p.disk + room) }
              | 1 -> { D.no_faults with eio_rate = 0.2 }
              | _ -> { D.no_faults with fsync_fail_rate = 0.2 }
            in
            note "%s: disk faults (%s)" p.addr
              (match kind with 0 -> "full" | 1 -> "write errors" | _ -> "fsync failures");
            D.set_config p.disk c);
        at (Time.add t repair) (fun () ->
            note "%s: disk repaired" p.addr;
            p.faulty <- false;
            D.set_config p.disk D.no_faults)
      done
    end;
    (* A lost data directory: r_j goes down; then r_k too, and r_i is
       restarted on an empty directory (--join) or on one of another
       cluster of the same group, beside the stale r_j; r_k comes back
       later. *)
    if cfg.lost_dir then begin
      let foreign = Filename.concat scratch "foreign" in
      (match S.open_ ?limits:w.limits ~identity:(cfg.tag, Store.New) foreign with
      | Error e -> violation "the foreign directory: %s" e
      | Ok (st, _) ->
          for r = 1 to 5 do
            ignore (S.execute st { Rsm.client = 99L; req = r; op = fst (w.next 99) })
          done;
          S.start_epoch st 1000;
          S.sync st;
          S.set_member st "another-cluster";
          S.close st);
      let copy_dir a b =
        (* Copied as [cp -a] would: the store's files are private (0600 in 0700). *)
        Unix.mkdir b 0o700;
        Array.iter
          (fun f ->
            if f <> "lock" then begin
              let ic = open_in_bin (Filename.concat a f) in
              let s = really_input_string ic (in_channel_length ic) in
              close_in ic;
              let oc =
                open_out_gen
                  [ Open_wronly; Open_creat; Open_trunc; Open_binary ]
                  0o600 (Filename.concat b f)
              in
              output_string oc s;
              close_out oc
            end)
          (Sys.readdir a)
      in
      let perm = [| 0; 1; 2 |] in
      for x = 2 downto 1 do
        let y = Random.State.int rng (x + 1) in
        let v = perm.(x) in
        perm.(x) <- perm.(y);
        perm.(y) <- v
      done;
      let i = perm.(0) and j = perm.(1) and k = perm.(2) in
      let wrong = Random.State.bool rng in
      let t0 = Time.add (s 2.) (ms (Random.State.int rng (cfg.faults_ms / 2))) in
      let t1 = Time.add t0 (ms (1000 + Random.State.int rng 2000)) in
      let t2 = Time.add t1 (ms (1000 + Random.State.int rng 3000)) in
      at t0 (fun () -> crash j);
      at t1 (fun () ->
          crash k;
          crash i;
          let p = reps.(i) in
          Consort_local.rm_rf p.dir;
          if wrong then begin
            note "%s: restarted on another cluster's directory" p.addr;
            copy_dir foreign p.dir;
            p.init <- Store.Existing
          end
          else begin
            note "%s: restarted on an empty directory (--join)" p.addr;
            p.init <- Store.Join
          end);
      at
        (Time.add t1 (ms 300))
        (fun () ->
          incr restarts;
          start i;
          start j);
      at t2 (fun () ->
          incr restarts;
          start k)
    end;
    (* The end of the workload: heal, start what is down, read every key. *)
    let phase_reads ~from ~cid =
      at from (fun () ->
          Sim.heal net;
          Array.iteri
            (fun i p ->
              p.dies_at <- 0;
              p.faulty <- false;
              Consort_util.Sim_disk.set_config p.disk Consort_util.Sim_disk.no_faults;
              if p.r = None then start i)
            reps);
      Array.iteri
        (fun j k ->
          at
            (Time.add from (s 7.))
            (fun () ->
              client (100 + cid + j) ~id:(Int64.of_int (5000 + cid + j)) ~req:1 ~final:(Some k)))
        keys
    in
    phase_reads ~from:cfg.reads_at ~cid:0;
    (* Every replica stops at once and starts again from its disk. *)
    let restart_at = Time.add cfg.all_stop (s 1.) in
    at cfg.all_stop (fun () ->
        note "all stop";
        Array.iteri (fun i _ -> crash i) reps);
    at restart_at (fun () -> incr restarts);
    phase_reads ~from:restart_at ~cid:10;
    Sim.run ~until:cfg.until ~max_events:3_000_000 net;
    (* The replicas agree. *)
    let live =
      List.filter_map
        (fun p -> Option.map (fun (r, st) -> (p.addr, r, st)) p.r)
        (Array.to_list reps)
    in
    if List.length live <> n then violation "%d replicas up at the end, of %d" (List.length live) n;
    List.iter
      (fun (a, r, _) ->
        if R.phase r <> Replica.Active then violation "%s ends %a" a Replica.pp_phase (R.phase r))
      live;
    (match live with
    | (a0, _, st0) :: rest ->
        List.iter
          (fun (a, _, st) ->
            if digest (S.machine st) <> digest (S.machine st0) then
              violation "%s and %s end with different states (writes %d and %d)" a0 a (S.seq st0)
                (S.seq st))
          rest
    | [] -> ());
    let h = List.rev !history in
    (match L.check ~max_steps:5_000_000 h with
    | L.Linearizable -> ()
    | r -> violation "history of %d operations: %a" (List.length h) L.pp_result r);
    (* The final reads of each round must have answered. *)
    let finals = List.filter (fun e -> e.L.client >= 100) h in
    if List.length (List.filter (fun e -> e.L.return <> None) finals) < 2 * Array.length keys then
      violation "final reads unanswered (%d of %d)"
        (List.length (List.filter (fun e -> e.L.return <> None) finals))
        (2 * Array.length keys);
    Array.iteri (fun i _ -> crash i) reps;
    let st = Sim.stats net in
    {
      violations = List.rev !violations;
      ops = List.length h;
      acked = !acked;
      unknown = !unknown;
      restarts = !restarts;
      datagrams = st.Sim.delivered;
      end_time = Sim.now net;
      trace_hash = Sim.trace_hash net;
    }
end

let scenario ~name ~doc run =
  {
    Consort_sim.Scenario.name;
    doc;
    run =
      (fun ?trace ~params ~seed () ->
        let o =
          (run : ?trace:out_channel -> ?params:Params.t -> seed:int -> unit -> outcome)
            ?trace ~params ~seed ()
        in
        {
          Consort_sim.Scenario.seed;
          violations = o.violations;
          trace_hash = o.trace_hash;
          sent = o.ops;
          delivered = o.acked;
          datagrams = o.datagrams;
          end_time = o.end_time;
        });
  }
