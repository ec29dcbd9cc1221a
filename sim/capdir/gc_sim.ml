(* The dir-gc scenario: a directory server and a file server, a graph of
   directories and files that clients link and unlink, and rounds of
   garbage collection with crashes during them. The servers' lifetimes
   are checked against an exact model (what each touch and each ageing
   does), and the collector against reachability: a reachable object is
   never destroyed, an unreachable one is destroyed once its servers have
   aged it for a whole lifetime. *)

module Cap = Consort_cap.Cap
module Port = Consort_cap.Port
module Rights = Consort_cap.Rights
module Std = Consort_cap.Std
module Store = Consort_capfs.Store
module Fs = Consort_capfs_server.Fs_server

let name = "dir-gc"

let doc =
  "a directory server and a file server; clients make, link and unlink directories and files while \
   rounds of garbage collection run, with the collector, the file server or the directory server \
   crashing during a round; reachable objects are never destroyed, unreachable ones go after their \
   lifetime, lifetimes follow touches and ageing exactly"

type outcome = {
  violations : string list;
  rounds : int;
  completed : int;
  collected : int;
  steps : int;
  trace_hash : string;
}

type kind = File | Directory

type obj = {
  cap : Cap.t;
  kind : kind;
  mutable life : int; (* the model: rounds of ageing left *)
  mutable idle : int; (* agings of its server since it was last reachable *)
  mutable gone : bool;
}

let run ?trace ~seed () =
  Consort_local.with_scratch "dirgc" ~seed @@ fun scratch ->
  let rng = Random.State.make [| seed; 0x6763 |] in
  let g = Consort_crypto.Crypto.deterministic (Printf.sprintf "dir-gc %d" seed) in
  (* Every event of the run goes into its trace, whose hash is the outcome's; with [trace], it is
     also written there. *)
  let events = Buffer.create 4096 in
  let note fmt =
    Fmt.kstr
      (fun s ->
        Buffer.add_string events s;
        Buffer.add_char events '\n';
        match trace with
        | Some oc ->
            output_string oc s;
            output_char oc '\n'
        | None -> ())
      fmt
  in
  let violations = ref [] in
  let violation fmt = Fmt.kstr (fun s -> violations := s :: !violations) fmt in
  let lifetime = 2 + Random.State.int rng 3 in
  (* The directory server: its state is on its disk (replicated) before any answer. *)
  let dport = Port.Key.port (Port.Key.generate ~g ()) in
  let limits =
    {
      (Dir.default_limits ~port:dport ~server_secret:(Cap.Secret.generate ~g ())
         ~root_secret:(Cap.Secret.generate ~g ()))
      with
      lifetime;
    }
  in
  let dir = ref (Dir.create limits) in
  let disk = ref (Consort.Codec.encode_string (Dir.codec limits) !dir) in
  let dexec op =
    let r = Dir.execute !dir op in
    if not (Dir.is_read op) then disk := Consort.Codec.encode_string (Dir.codec limits) !dir;
    r
  in
  let dir_restart () =
    note "directory server restarts from its disk";
    match Consort.Codec.decode_string (Dir.codec limits) !disk with
    | Ok d -> dir := d
    | Error e -> violation "directory state does not decode: %a" Consort.Codec.pp_error e
  in
  let root = Dir.root !dir and dserver = Dir.server_cap !dir in
  (* The file server. *)
  let fkey = Port.Key.generate ~g () in
  let fport = Port.Key.port fkey in
  let config = { Store.default_config with lifetime } in
  let random n = Consort_crypto.Crypto.random ~g n in
  let fsdir = Filename.concat scratch "fs" in
  let open_fs () =
    match Store.open_ ~config ~random ~clock:(fun () -> Consort.Time.zero) fsdir with
    | Ok (s, _) -> Fs.create s fport
    | Error (`Io e) -> failwith e
    | Error `Locked -> failwith "locked"
  in
  let fs = ref (open_fs ()) in
  let objs : obj list ref = ref [] in
  let fs_restart () =
    note "file server restarts";
    Store.close (Fs.store !fs);
    fs := open_fs ();
    (* Lifetimes are in memory: every file starts whole again. *)
    List.iter
      (fun o ->
        if o.kind = File && not o.gone then (
          o.life <- lifetime;
          o.idle <- 0))
      !objs
  in
  (* The model's edges: a directory object number to its rows. *)
  let rows : (int, (string * Cap.t) list) Hashtbl.t = Hashtbl.create 16 in
  Hashtbl.replace rows Dir.root_obj [];
  let find_obj (c : Cap.t) =
    List.find_opt (fun o -> Port.equal o.cap.port c.port && o.cap.obj = c.obj) !objs
  in
  let reachable () =
    let seen = Hashtbl.create 16 in
    let rec go (c : Cap.t) =
      if not (Hashtbl.mem seen (Port.to_raw c.port, c.obj)) then begin
        Hashtbl.replace seen (Port.to_raw c.port, c.obj) ();
        if Port.equal c.port dport then
          match Hashtbl.find_opt rows c.obj with
          | Some l -> List.iter (fun (_, c) -> go c) l
          | None -> ()
      end
    in
    go root;
    fun (o : obj) -> Hashtbl.mem seen (Port.to_raw o.cap.port, o.cap.obj)
  in
  let dirs_reachable () =
    let r = reachable () in
    root
    :: List.filter_map
         (fun o -> if o.kind = Directory && (not o.gone) && r o then Some o.cap else None)
         !objs
  in
  let pick l = List.nth l (Random.State.int rng (List.length l)) in
  let names = ref 0 in
  let link (parent : Cap.t) (c : Cap.t) =
    incr names;
    let name = Printf.sprintf "n%d" !names in
    match
      dexec
        (Dir.Install
           {
             dir = parent;
             expect = None;
             rows = [ { Dir.name; masks = [ Rights.all ]; caps = [ c ] } ];
           })
    with
    | Dir.Done _ ->
        Hashtbl.replace rows parent.obj
          ((name, c) :: Option.value ~default:[] (Hashtbl.find_opt rows parent.obj));
        note "link %s in %d -> %a" name parent.obj Cap.pp c
    | r -> violation "link in directory %d: %a" parent.obj Dir.pp_response r
  in
  let new_obj cap kind = objs := { cap; kind; life = lifetime; idle = 0; gone = false } :: !objs in
  let make_file () =
    match
      Store.create (Fs.store !fs) ~commit:true ~safe:false
        (Printf.sprintf "file %d" (Random.State.bits rng))
    with
    | Ok n -> (
        match Fs.file_cap !fs n with
        | Some c ->
            new_obj c File;
            Some c
        | None ->
            violation "file %d has no capability" n;
            None)
    | Error e ->
        violation "file not made: %a" Store.pp_error e;
        None
  in
  let make_dir () =
    match
      dexec
        (Dir.Create
           {
             via = root;
             secret = Cap.Secret.to_raw (Cap.Secret.generate ~g ());
             columns = [ "owner" ];
             link = None;
           })
    with
    | Dir.Created { cap; _ } ->
        new_obj cap Directory;
        Hashtbl.replace rows cap.obj [];
        Some cap
    | r ->
        violation "directory not made: %a" Dir.pp_response r;
        None
  in
  (* A round of collection, with a crash at a chosen touch or at ageing. *)
  let rounds = ref 0 and completed = ref 0 and collected = ref 0 in
  let gc_round ?(faults = true) () =
    incr rounds;
    let touches = ref 0 in
    let crash_at = 1 + Random.State.int rng 12 in
    let mode = if faults then Random.State.int rng 7 else 0 in
    (* 0, 1: none; 2: the collector dies; 3: the file server crashes; 4:
       the directory server crashes; 5: the file server crashes at ageing;
       6: the directory server is down at ageing *)
    let fs_down = ref false and dir_down = ref false and collector_dead = ref false in
    let step () =
      incr touches;
      if !touches = crash_at then
        match mode with
        | 2 -> collector_dead := true
        | 3 ->
            fs_restart ();
            fs_down := true
        | 4 ->
            dir_restart ();
            dir_down := true
        | _ -> ()
    in
    let touch_fs (c : Cap.t) =
      step ();
      if !collector_dead then Error (`Failed "the collector died")
      else if !fs_down then Error (`Failed "the file server is down")
      else
        let h, _ = Fs.handle !fs (Std.touch_request c) "" in
        match h.status with
        | `Ok ->
            Option.iter (fun o -> o.life <- lifetime) (find_obj c);
            Ok ()
        | `Notfound | `Capbad -> Error (`Dangling "gone")
        | s -> Error (`Failed (Printf.sprintf "status %d" (Consort_cap.Status.to_int s)))
    in
    let touch_dir (c : Cap.t) =
      step ();
      if !collector_dead then Error (`Failed "the collector died")
      else if !dir_down then Error (`Failed "the directory server is down")
      else
        match dexec (Dir.Touch c) with
        | Dir.Done _ ->
            Option.iter (fun o -> o.life <- lifetime) (find_obj c);
            Ok ()
        | Dir.Error (Dir.Not_found _ | Dir.Capbad) -> Error (`Dangling "gone")
        | r -> Error (`Failed (Fmt.str "%a" Dir.pp_response r))
    in
    let refs (c : Cap.t) =
      if not (Port.equal c.port dport) then None
      else if !dir_down || !collector_dead then Some (Error "the directory server is down")
      else
        match dexec (Dir.Refs { server = dserver; dir = c.obj }) with
        | Dir.Objects l -> Some (Ok l)
        | r -> Some (Error (Fmt.str "%a" Dir.pp_response r))
    in
    let aged_files () =
      List.iter
        (fun o ->
          if o.kind = File && not o.gone then (
            o.life <- o.life - 1;
            o.idle <- o.idle + 1))
        !objs
    in
    let aged_dirs () =
      List.iter
        (fun o ->
          if o.kind = Directory && not o.gone then (
            o.life <- o.life - 1;
            o.idle <- o.idle + 1))
        !objs
    in
    let age_fs () =
      if mode = 5 then (
        fs_restart ();
        Error "the file server crashed")
      else
        let h, _ = Fs.handle !fs (Std.age_request (Fs.server_cap !fs)) "" in
        match h.status with
        | `Ok ->
            aged_files ();
            Ok ()
        | s -> Error (Printf.sprintf "status %d" (Consort_cap.Status.to_int s))
    in
    let age_dir () =
      if mode = 6 then Error "the directory server is down"
      else
        match dexec (Dir.Age dserver) with
        | Dir.Aged _ ->
            aged_dirs ();
            Ok ()
        | r -> Error (Fmt.str "%a" Dir.pp_response r)
    in
    let servers =
      [
        { Gc.port = dport; touch = touch_dir; age = age_dir };
        { Gc.port = fport; touch = touch_fs; age = age_fs };
      ]
    in
    match Gc.round ~refs ~servers root with
    | Ok r ->
        incr completed;
        note "round %d (mode %d): %a" !rounds mode Gc.pp_report r
    | Error e -> note "round %d (mode %d) abandoned: %s" !rounds mode e
  in
  let check where =
    let r = reachable () in
    List.iter
      (fun o ->
        let exists =
          match o.kind with
          | File -> Store.mem (Fs.store !fs) o.cap.obj
          | Directory -> Dir.mem !dir o.cap.obj
        in
        if r o then o.idle <- 0;
        if (not exists) && not o.gone then begin
          o.gone <- true;
          incr collected;
          if o.kind = Directory then Hashtbl.remove rows o.cap.obj;
          if r o then violation "%s: reachable %a destroyed" where Cap.pp o.cap;
          if o.life > 0 then
            violation "%s: %a destroyed with %d rounds of life left" where Cap.pp o.cap o.life
        end
        else if exists && o.gone then
          violation "%s: %a back after it was destroyed" where Cap.pp o.cap
        else if exists then begin
          if o.life <= 0 then violation "%s: %a still there with no life left" where Cap.pp o.cap;
          if o.idle >= lifetime then
            violation "%s: %a unreachable through %d agings of its server, still there" where Cap.pp
              o.cap o.idle
        end)
      !objs
  in
  let steps = 50 + Random.State.int rng 50 in
  for i = 1 to steps do
    let where = Printf.sprintf "step %d" i in
    (match Random.State.int rng 12 with
    | 0 | 1 ->
        Option.iter
          (fun c -> if Random.State.int rng 4 > 0 then link (pick (dirs_reachable ())) c)
          (make_file ())
    | 2 | 3 ->
        Option.iter
          (fun c -> if Random.State.int rng 4 > 0 then link (pick (dirs_reachable ())) c)
          (make_dir ())
    | 4 | 5 -> (
        (* unlink a row of a reachable directory *)
        let candidates =
          List.concat_map
            (fun (d : Cap.t) ->
              List.map
                (fun (n, _) -> (d, n))
                (Option.value ~default:[] (Hashtbl.find_opt rows d.obj)))
            (dirs_reachable ())
        in
        match candidates with
        | [] -> ()
        | l -> (
            let d, name = pick l in
            match dexec (Dir.Delete { dir = d; name }) with
            | Dir.Done _ ->
                Hashtbl.replace rows d.obj (List.remove_assoc name (Hashtbl.find rows d.obj));
                note "unlink %s in %d" name d.obj
            | r -> violation "unlink %s: %a" name Dir.pp_response r))
    | 6 -> (
        (* link again an object that still exists *)
        match List.filter (fun o -> not o.gone) !objs with
        | [] -> ()
        | l -> link (pick (dirs_reachable ())) (pick l).cap)
    | 7 -> if Random.State.int rng 3 = 0 then fs_restart () else dir_restart ()
    | _ -> gc_round ());
    check where
  done;
  (* Then rounds without faults: everything unreachable goes. *)
  for i = 1 to lifetime + 1 do
    gc_round ~faults:false ();
    check (Printf.sprintf "final round %d" i)
  done;
  if List.exists (fun o -> (not o.gone) && not (reachable () o)) !objs then
    violation "unreachable objects left after %d rounds without faults" (lifetime + 1);
  Store.close (Fs.store !fs);
  {
    violations = List.rev !violations;
    rounds = !rounds;
    completed = !completed;
    collected = !collected;
    steps;
    trace_hash = Digest.to_hex (Digest.string (Buffer.contents events));
  }

let scenarios =
  [
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
            sent = o.rounds;
            delivered = o.completed;
            datagrams = o.collected;
            end_time = Consort.Time.zero;
          });
    };
  ]
