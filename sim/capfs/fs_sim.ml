open Consort_cap
open Consort_crypto
module Store = Consort_capfs.Store
module Sim = Consort_engine.Sim
module R = Rpc.Make (Sim)

module B = R.Blocking (struct
  let run_until sim cond =
    let rec go () = if (not (cond ())) && Sim.step sim then go () in
    go ()
end)

let src = Logs.Src.create "consort.capfs.sim" ~doc:"The fs-crash scenario"

module Log = (val Logs.src_log src : Logs.LOG)

let name = "fs-crash"

let doc =
  "a client puts, reads and destroys files on a file server over a lossy, duplicating, reordering \
   network while the server crashes and restarts; every acknowledged file is intact, no request is \
   carried out twice, nothing half-written is served"

type outcome = {
  violations : string list;
  puts : int;
  acked : int;
  unknown : int;
  restarts : int;
  datagrams : int;
  end_time : Consort.Time.t;
  trace_hash : string;
}

let run_with ~disk_faults ?trace ~seed () =
  Consort_local.with_scratch (if disk_faults then "fsdisk" else "fs") ~seed @@ fun dir ->
  let rng = Random.State.make [| seed; 0xf5 |] in
  let ms = Consort.Time.of_ms in
  let link =
    {
      Sim.latency = ms 1;
      jitter = ms (Random.State.int rng 3);
      loss = [| 0.; 0.02; 0.1 |].(Random.State.int rng 3);
      duplicate = [| 0.; 0.05; 0.1 |].(Random.State.int rng 3);
      reorder = [| 0.; 0.05; 0.1 |].(Random.State.int rng 3);
      reorder_delay = ms 5;
    }
  in
  let sim = Sim.create ~seed ~link () in
  Sim.set_trace_channel sim trace;
  let g = Crypto.deterministic (Printf.sprintf "fs-crash-%d" seed) in
  let key = Port.Key.generate ~g () in
  let violations = ref [] in
  let violation fmt = Fmt.kstr (fun s -> violations := s :: !violations) fmt in
  let config = { Store.default_config with idle_timeout = Consort.Time.of_sec 30. } in
  let random n = Crypto.random ~g n in
  let server = ref None and restarts = ref 0 in
  (* Some crashes happen in the middle of a disk write: the process dies
     before its [n]th disk step (counted from the first start). *)
  let disk_steps = ref 0 and dies_at = ref 0 in
  (* A simulated disk: every crash is a power loss, where what was not
     fsynced is lost or torn. *)
  let disk =
    Consort_util.Sim_disk.create
      (Random.State.make [| seed; 0xd15c |])
      Consort_util.Sim_disk.no_faults
  in
  let died = ref false in
  let io =
    Consort_util.Io.hooked
      (fun _ ->
        incr disk_steps;
        if !disk_steps = !dies_at then (
          died := true;
          failwith "the server process died"))
      (Consort_util.Sim_disk.io disk)
  in
  let crash_server_ref = ref (fun () -> ()) in
  let crash_server () = !crash_server_ref () in
  let rec start_server () =
    if !server <> None then ()
    else
      match Store.open_ ~config ~io ~random ~clock:(fun () -> Sim.now sim) dir with
      | exception Failure _ when !died ->
          (* It died while recovering: it starts again. *)
          died := false;
          dies_at := 0;
          incr restarts;
          ignore (Sim.at sim (Consort.Time.add (Sim.now sim) (ms 50)) start_server)
      | Error _ -> violation "the store did not open"
      | Ok (store, found) -> (
          List.iter
            (fun f -> if Store.is_damage f then violation "recovery: %a" Store.pp_finding f)
            found;
          match R.create ~g sim "srv" with
          | Error m -> violation "server node: %s" m
          | Ok node ->
              let fs = Fs_server.create store (Port.Key.port key) in
              let srv = R.serve node key in
              R.listen srv (fun r ->
                  let h, d = Fs_server.handle fs (R.header r) (R.data r) in
                  if !died then (
                    (* It never replies; it restarts a little later. *)
                    Log.debug (fun m ->
                        m "%a server died at disk step %d" Consort.Time.pp (Sim.now sim) !disk_steps);
                    died := false;
                    dies_at := 0;
                    crash_server ();
                    incr restarts;
                    ignore (Sim.at sim (Consort.Time.add (Sim.now sim) (ms 50)) start_server))
                  else begin
                    Log.debug (fun m ->
                        m "%a server: %s offset %d, %d bytes -> %a, object %d" Consort.Time.pp
                          (Sim.now sim)
                          (Fs_proto.command_name (R.header r).command)
                          (R.header r).offset
                          (String.length (R.data r))
                          Status.pp h.status h.priv.obj);
                    R.putrep r h d
                  end);
              server := Some (node, store, fs))
  in
  (crash_server_ref :=
     fun () ->
       match !server with
       | None -> ()
       | Some (node, store, _) ->
           Sim.crash sim "srv";
           if not (R.is_closed node) then R.close node;
           Store.close store;
           ignore (Consort_util.Sim_disk.crash disk);
           server := None);
  start_server ();
  if Random.State.bool rng then dies_at := !disk_steps + 1 + Random.State.int rng 150;
  let server_cap =
    match !server with Some (_, _, fs) -> Fs_server.server_cap fs | None -> assert false
  in
  (* Crashes at random times during the workload, each followed by a restart. *)
  let n_crashes = Random.State.int rng 4 in
  let t = ref (ms 0) in
  for _ = 1 to n_crashes do
    t := Consort.Time.add !t (ms (20 + Random.State.int rng 400));
    let down = ms (10 + Random.State.int rng 300) in
    ignore
      (Sim.at sim !t (fun () ->
           if !server <> None then (
             crash_server ();
             Log.debug (fun m -> m "%a server crashed" Consort.Time.pp (Sim.now sim));
             incr restarts;
             ignore (Sim.at sim (Consort.Time.add (Sim.now sim) down) start_server))));
    t := Consort.Time.add !t down
  done;
  (* Storage faults: for a while, the disk fills, fails writes or fsyncs. *)
  if disk_faults then begin
    let module D = Consort_util.Sim_disk in
    let at = ms (Random.State.int rng 300) and lasts = ms (200 + Random.State.int rng 800) in
    let kind = Random.State.int rng 3 in
    let room = Random.State.int rng 40_000 in
    ignore
      (Sim.at sim at (fun () ->
           D.set_config disk
             (match kind with
             | 0 -> { D.no_faults with budget = Some (D.written disk + room) }
             | 1 -> { D.no_faults with eio_rate = 0.2 }
             | _ -> { D.no_faults with fsync_fail_rate = 0.2 })));
    ignore (Sim.at sim (Consort.Time.add at lasts) (fun () -> D.set_config disk D.no_faults))
  end;
  let client =
    match R.create ~g ~locate:[ "srv" ] sim "cli" with Ok n -> n | Error m -> failwith m
  in
  let trans ~idempotent h d = B.trans client ~idempotent h d in
  let contents = Hashtbl.create 16 in
  let acked = ref [] and unknown = ref 0 and destroyed = ref [] and maybe_destroyed = ref [] in
  let n_puts = 4 + Random.State.int rng 5 in
  for i = 0 to n_puts - 1 do
    let size = [| 0; 100; 3000; 9000; 20000 |].(Random.State.int rng 5) + i in
    let data =
      Printf.sprintf "%d/%d:" seed i
      ^ String.init size (fun _ -> Char.chr (Random.State.int rng 256))
    in
    Hashtbl.replace contents data i;
    let pos = ref 0 in
    let input b off len =
      let n = min len (String.length data - !pos) in
      Bytes.blit_string data !pos b off n;
      pos := !pos + n;
      n
    in
    match Fs_client.put trans ~server:server_cap ~chunk:4096 ~size:(String.length data) input with
    | Ok cap -> (
        Log.debug (fun m -> m "%a put %d -> file %d" Consort.Time.pp (Sim.now sim) i cap.Cap.obj);
        acked := (cap, data) :: !acked;
        (* Read it back at once, then perhaps destroy it. *)
        let b = Buffer.create 16 in
        (match Fs_client.get trans cap (Buffer.add_string b) with
        | Ok _ -> if Buffer.contents b <> data then violation "file %d read back with other bytes" i
        | Error (`Refused st) -> violation "file %d refused right after its put: %a" i Status.pp st
        | Error _ -> ());
        if Random.State.int rng 4 = 0 then
          match Fs_client.destroy trans cap with
          | Ok () ->
              Log.debug (fun m ->
                  m "%a destroyed file %d" Consort.Time.pp (Sim.now sim) cap.Cap.obj);
              destroyed := cap :: !destroyed
          | Error (`Refused (`Nospace | `Syserr)) when disk_faults ->
              maybe_destroyed := cap :: !maybe_destroyed
          | Error (`Refused st) -> violation "destroy of file %d refused: %a" i Status.pp st
          | Error _ -> maybe_destroyed := cap :: !maybe_destroyed)
    | Error e -> (
        match Fs_client.outcome e with
        | `Unknown -> incr unknown
        | `Refused -> (
            match e with
            | `Refused (`Notfound | `Notnow) | `Rpc _ ->
                incr unknown (* the server restarted mid-upload *)
            | `Refused (`Nospace | `Syserr) when disk_faults ->
                incr unknown (* the disk refused it *)
            | _ -> violation "put %d refused: %a" i Fs_client.pp_error e))
  done;
  (* Let the network and the server settle, then look at the store itself. *)
  if !server = None then start_server ();
  Sim.run ~until:(Consort.Time.add (Sim.now sim) (Consort.Time.of_sec 60.)) sim;
  if !server = None then start_server ();
  (match !server with
  | None -> violation "no server at the end"
  | Some (_, store, _) ->
      List.iter
        (fun ((cap : Cap.t), data) ->
          if List.exists (Cap.equal cap) !destroyed then (
            if Store.mem store cap.obj then violation "destroyed file %d still there" cap.obj)
          else if not (List.exists (Cap.equal cap) !maybe_destroyed) then
            match Store.read store cap.obj ~off:0 ~len:max_int with
            | Ok d when d = data -> ()
            | Ok _ -> violation "acknowledged file %d has other bytes" cap.obj
            | Error e -> violation "acknowledged file %d lost: %a" cap.obj Store.pp_error e)
        !acked;
      let seen = Hashtbl.create 16 in
      List.iter
        (fun obj ->
          match Store.read store obj ~off:0 ~len:max_int with
          | Error e -> violation "listed file %d unreadable: %a" obj Store.pp_error e
          | Ok d -> (
              match Hashtbl.find_opt contents d with
              | None -> violation "file %d holds bytes no put sent whole" obj
              | Some i ->
                  if Hashtbl.mem seen i then violation "put %d stored twice" i;
                  Hashtbl.replace seen i ()))
        (Store.files store));
  crash_server ();
  R.close client;
  let st = Sim.stats sim in
  {
    violations = List.rev !violations;
    puts = n_puts;
    acked = List.length !acked;
    unknown = !unknown;
    restarts = !restarts;
    datagrams = st.Sim.delivered;
    end_time = Sim.now sim;
    trace_hash = Sim.trace_hash sim;
  }

let run ?trace ~seed () = run_with ~disk_faults:false ?trace ~seed ()

module Disk_faults = struct
  let name = "fs-disk-faults"

  let doc =
    "fs-crash with storage faults: for a while the server's disk fills, fails writes or fsyncs; \
     every acknowledged file is intact, nothing half-written is served, no put is stored twice"

  let run ?trace ~seed () = run_with ~disk_faults:true ?trace ~seed ()
end

let scenario ~name ~doc run =
  {
    Consort_sim.Scenario.name;
    doc;
    run =
      (fun ?trace ~params:_ ~seed () ->
        let o = run ?trace ~seed () in
        {
          Consort_sim.Scenario.seed;
          violations = o.violations;
          trace_hash = o.trace_hash;
          sent = o.puts;
          delivered = o.acked;
          datagrams = o.datagrams;
          end_time = o.end_time;
        });
  }

let scenarios =
  [ scenario ~name ~doc run; scenario ~name:Disk_faults.name ~doc:Disk_faults.doc Disk_faults.run ]
