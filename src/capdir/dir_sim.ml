open Consort
module Sim = Consort_engine.Sim
module Store = Consort_kv.Store.Make (Dir.Rsm)
module Replica = Consort_kv.Replica
module R = Replica.Generic (Dir.Rsm) (Store) (Sim)
module Wire = Consort_kv.Wire
module L = Consort_spec.Linearizable
module Cap = Consort_cap.Cap

let name = "dir-replicated"

let doc =
  "3 replicas of the directory server; clients look up, install (one row or two at once) and \
   delete rows while replicas crash (some mid-write), restart from disk, are partitioned and \
   healed, then all restart from disk; the history of each row is linearizable and the replicas \
   agree"

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

let rec rm_rf p =
  match (Unix.lstat p).Unix.st_kind with
  | Unix.S_DIR ->
      Array.iter (fun n -> rm_rf (Filename.concat p n)) (Sys.readdir p);
      Unix.rmdir p
  | _ -> Unix.unlink p
  | exception Unix.Unix_error (Unix.ENOENT, _, _) -> ()

let scratch_dir seed =
  let base =
    if Sys.file_exists "/dev/shm" && Sys.is_directory "/dev/shm" then "/dev/shm"
    else Filename.get_temp_dir_name ()
  in
  Filename.concat base (Printf.sprintf "consort-dir-sim.%d.%d" (Unix.getpid ()) seed)

type replica = {
  addr : string;
  dir : string;
  mutable r : (R.t * Store.t) option;
  mutable dies_at : int; (* disk step at which this incarnation dies; 0: never *)
  mutable dying : bool; (* it died at a disk step: nothing more reaches its disk *)
  mutable torn : bool; (* it died in the middle of a write: its log may end torn *)
}

let s = Time.of_sec
let ms = Time.of_ms

let run ?trace ?(params = Params.empty) ~seed () =
  let scratch = scratch_dir seed in
  rm_rf scratch;
  Unix.mkdir scratch 0o755;
  Fun.protect ~finally:(fun () -> rm_rf scratch) @@ fun () ->
  let rng = Random.State.make [| seed; 0x6469 |] in
  let g = Consort_cap.Crypto.deterministic (Printf.sprintf "dir-replicated %d" seed) in
  let port = Consort_cap.Port.Key.port (Consort_cap.Port.Key.generate ~g ()) in
  let limits =
    Dir.default_limits ~port ~server_secret:(Cap.Secret.generate ~g ())
      ~root_secret:(Cap.Secret.generate ~g ())
  in
  let root = Cap.owner port ~obj:Dir.root_obj limits.root_secret in
  let fport = Consort_cap.Port.Key.port (Consort_cap.Port.Key.generate ~g ()) in
  let fsecret = Cap.Secret.generate ~g () in
  let value_cap v = Cap.owner fport ~obj:v fsecret in
  let link =
    {
      Sim.latency = ms 1;
      jitter = ms (Random.State.int rng 3);
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
    | Some oc -> Printf.ksprintf (fun l -> Printf.fprintf oc "%d dir %s\n" (now ()) l) fmt
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
        })
  in
  let restarts = ref 0 and repaired = ref 0 in
  let disk_steps = ref 0 in
  let rec start i =
    let p = reps.(i) in
    if p.r = None then begin
      p.dying <- false;
      let module Io = Consort_capfs.Io in
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
      let real = Io.real in
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
      match
        Store.open_ ~io ~limits
          ~snapshot_bytes:(4096 + Random.State.int rng 8192)
          ~retain:(Random.State.int rng 100) p.dir
      with
      | Error e -> violation "%s: store does not open: %s" p.addr e
      | Ok (store, found) -> (
          List.iter
            (fun f ->
              match f with
              | Consort_kv.Store.Torn_tail _ when p.torn ->
                  incr repaired;
                  note "%s: %s" p.addr (Fmt.str "%a" Consort_kv.Store.pp_finding f)
              | f ->
                  if Consort_kv.Store.is_damage f then
                    violation "%s: recovery: %a" p.addr Consort_kv.Store.pp_finding f)
            found;
          p.torn <- false;
          let cfg =
            {
              (Replica.default_config ~group:"dir" ~addr:p.addr
                 ~peers:(List.filter (( <> ) p.addr) addrs))
              with
              request_timeout = s 4.;
              max_batch = 1 + Random.State.int rng 8;
            }
          in
          match R.create ~params ~seed:(Random.State.int rng 0x3fffffff) net cfg store with
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
        Store.close store;
        p.r <- None;
        p.dies_at <- 0
    | None -> ()
  and died i =
    (* The process died in the middle of a disk step: it is gone, and is
       started again a little later. *)
    let p = reps.(i) in
    note "%s died at disk step %d" p.addr !disk_steps;
    (match p.r with
    | None when p.dying ->
        (* It died while opening its store: that store is closed now. *)
        ()
    | _ -> ());
    (match p.r with
    | Some (r, store) ->
        R.crash r;
        Sim.crash net p.addr;
        Store.close store
    | None -> ());
    p.r <- None;
    p.dies_at <- 0;
    incr restarts;
    at (Time.add (now ()) (ms 300)) (fun () -> start i)
  in
  Array.iteri (fun i _ -> at (ms (Random.State.int rng 300)) (fun () -> start i)) reps;
  (* Clients: each runs one operation at a time, on a few keys. *)
  let history = ref [] and unknown = ref 0 and acked = ref 0 in
  let keys = [| "a"; "b"; "c" |] in
  let made = ref 0 in
  let clients = 2 + Random.State.int rng 3 in
  let stop_at = s 8. in
  let rec client c ~id ~req ~(final : string option) =
    (* Each operation, and what the checker sees of it: one event per row. *)
    let op, spec =
      match final with
      | Some k -> (Dir.Lookup { dir = root; name = k }, [ (k, L.Get) ])
      | None -> (
          incr made;
          let k = keys.(Random.State.int rng (Array.length keys)) in
          let v = (c * 100_000) + !made in
          let row name = { Dir.name; masks = [ Consort_cap.Rights.all ]; caps = [ value_cap v ] } in
          match Random.State.int rng 10 with
          | 0 | 1 | 2 | 3 -> (Dir.Lookup { dir = root; name = k }, [ (k, L.Get) ])
          | 4 | 5 | 6 ->
              ( Dir.Install { dir = root; expect = None; rows = [ row k ] },
                [ (k, L.Put (string_of_int v)) ] )
          | 7 ->
              let k2 =
                keys.(Array.length keys - 1 - Random.State.int rng (Array.length keys - 1))
              in
              let k2 = if k2 = k then keys.(0) else k2 in
              let ks = if k2 = k then [ k ] else [ k; k2 ] in
              ( Dir.Install { dir = root; expect = None; rows = List.map row ks },
                List.map (fun k -> (k, L.Put (string_of_int v))) ks )
          | 8 when Random.State.bool rng ->
              (* No effect on what a lookup through the root's owner
                 capability names: not in the checked history, but the
                 replicas must still agree on the masks and sequence numbers. *)
              ( Dir.Chmod
                  {
                    dir = root;
                    name = k;
                    masks = [ Consort_cap.Rights.of_int_exn (Random.State.int rng 256) ];
                  },
                [] )
          | _ -> (Dir.Delete { dir = root; name = k }, [ (k, L.Del) ]))
    in
    let call = now () in
    let request = { Wire.client = id; req; op } in
    let maybe = ref false in
    let to_spec (sop : L.op) (r : Dir.response) : L.response option =
      match (sop, r) with
      | L.Get, Dir.Caps [ Dir.Narrowed c ] -> Some (L.Value (string_of_int c.obj))
      | (L.Get | L.Del), Dir.Error (Dir.Not_found _) -> Some L.Not_found
      | (L.Put _ | L.Del), Dir.Done _ -> Some L.Ok
      | _ -> None
    in
    let finish response =
      (match response with
      | Some r ->
          incr acked;
          List.iter
            (fun (key, sop) ->
              match to_spec sop r with
              | Some resp ->
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
              | None ->
                  violation "client %d: %a on %s answered %a" c L.pp_op sop key Dir.pp_response r)
            spec
      | None ->
          if !maybe then (
            incr unknown;
            List.iter
              (fun (key, sop) ->
                history :=
                  { L.client = c; key; op = sop; call; return = None; response = None } :: !history)
              spec));
      note "client %d: %s -> %s" c
        (String.concat "," (List.map (fun (k, o) -> Fmt.str "%s %a" k L.pp_op o) spec))
        (match response with
        | Some r -> Fmt.str "%a" Dir.pp_response r
        | None -> if !maybe then "unknown" else "not done");
      if final = None && now () < stop_at then
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
  (* Faults during the workload. *)
  let faults = 1 + Random.State.int rng 3 in
  (* Half of the faults strike the sequencer. *)
  let victim () =
    let seq = ref None in
    Array.iteri
      (fun i p -> match p.r with Some (r, _) when R.is_sequencer r -> seq := Some i | _ -> ())
      reps;
    match !seq with Some i when Random.State.bool rng -> i | _ -> Random.State.int rng n
  in
  for _ = 1 to faults do
    let t = Time.add (s 2.) (ms (Random.State.int rng 5_500)) in
    let i = ref 0 in
    let pick f () =
      i := victim ();
      f ()
    in
    match Random.State.int rng 3 with
    | 0 ->
        let down = ms (500 + Random.State.int rng 3000) in
        at t (pick (fun () -> crash !i));
        at (Time.add t down) (fun () ->
            incr restarts;
            start !i)
    | 1 ->
        (* Dies at one of its next disk steps. *)
        let after = 1 + Random.State.int rng 20 in
        at t (pick (fun () -> if reps.(!i).r <> None then reps.(!i).dies_at <- !disk_steps + after))
    | _ ->
        let heal = ms (500 + Random.State.int rng 4000) in
        at t
          (pick (fun () ->
               note "partition %s away" reps.(!i).addr;
               Sim.partition net [ [ reps.(!i).addr ]; List.filter (( <> ) reps.(!i).addr) addrs ]));
        at (Time.add t heal) (fun () ->
            note "heal";
            Sim.heal net)
  done;
  (* The end of the workload: heal, start what is down, read every key. *)
  let phase_reads ~from ~cid =
    at from (fun () ->
        Sim.heal net;
        Array.iteri
          (fun i p ->
            p.dies_at <- 0;
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
  phase_reads ~from:(s 11.) ~cid:0;
  (* Every replica stops at once and starts again from its disk. *)
  at (s 20.) (fun () ->
      note "all stop";
      Array.iteri (fun i _ -> crash i) reps);
  at (s 21.) (fun () -> incr restarts);
  phase_reads ~from:(s 21.) ~cid:10;
  Sim.run ~until:(s 33.) ~max_events:3_000_000 net;
  (* The replicas agree. *)
  let live =
    List.filter_map (fun p -> Option.map (fun (r, st) -> (p.addr, r, st)) p.r) (Array.to_list reps)
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
          if Dir.digest (Store.machine st) <> Dir.digest (Store.machine st0) then
            violation "%s and %s end with different states (writes %d and %d)" a0 a (Store.seq st0)
              (Store.seq st))
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
