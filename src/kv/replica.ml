open Consort

let src = Logs.Src.create "consort.kv" ~doc:"Replicated key-value store"

module Log = (val Logs.src_log src : Logs.LOG)

type config = { group : string; addr : string; peers : string list; request_timeout : Time.t; max_batch : int }

let default_config ~group ~addr ~peers = { group; addr; peers; request_timeout = Time.of_sec 10.; max_batch = 500 }

type phase = Minority | Syncing | Active

let pp_phase ppf p = Fmt.string ppf (match p with Minority -> "minority" | Syncing -> "syncing" | Active -> "active")

(* A member id is ADDR#INCARNATION. *)
let max_in_flight = 10_000

let addr_of id = match String.index_opt id '#' with Some i -> String.sub id 0 i | None -> id

module Make (T : Transport.S) = struct
  module G = Consort_group.Group.Make (T)

  type waiting = {
    k : Wire.outcome -> unit;
    req : Wire.request;
    mutable timer : T.timer option;
    mutable sent : bool;  (* forwarded at least once: it may have taken effect *)
  }

  type t = {
    tr : T.t;
    cfg : config;
    store : Store.t;
    replicas : string list;  (* configured group addresses *)
    mutable g : G.t option;
    mutable me : string;
    mutable view : Consort_group.Group.view_info option;
    mutable phase : phase;
    mutable sequencer : string;
    summaries : (string, int * int * (int * int) list) Hashtbl.t;
    (* requests from this member's clients, by local number *)
    waiting : (int, waiting) Hashtbl.t;
    mutable next_rid : int;
    mutable resubmit : int list;  (* rids to send once active *)
    (* results of applied requests of this member, waiting for commit *)
    results : (int * int * Wire.outcome) Queue.t;  (* batch, rid, outcome *)
    acks : (string, int) Hashtbl.t;
    mutable delivered : int;  (* last batch applied here in this view *)
    mutable acked : int;
    mutable committed : int;
    mutable sync_timer : T.timer option;
    (* the sequencer's *)
    queue : Wire.item Queue.t;
    mutable next_batch : int;
    mutable flush_timer : T.timer option;
    mutable dead : bool;
  }

  let phase t = t.phase
  let me t = t.me
  let store t = t.store
  let in_flight t = Hashtbl.length t.waiting
  let is_sequencer t = t.phase = Active && t.sequencer = t.me

  let view t =
    match t.view with
    | Some v -> v
    | None -> { Consort_group.Group.vid = ""; ltime = 0; members = [||]; rank = 0; coordinator = ""; joined = []; left = []; why = [] }

  let members t = match t.view with Some v -> Array.to_list v.members | None -> []

  let answer t rid o =
    match Hashtbl.find_opt t.waiting rid with
    | Some w ->
        Hashtbl.remove t.waiting rid;
        Option.iter T.cancel w.timer;
        w.k o
    | None -> ()

  let cast t m =
    match t.g with
    | Some g when not t.dead -> (
        match G.cast g (Wire.encode ~vid:(view t).vid m) with
        | Ok () -> true
        | Error e ->
            Log.info (fun f -> f "%s: cast refused: %a" t.me Consort_group.Group.pp_error e);
            false)
    | _ -> false

  let soon t f = T.at t.tr (T.now t.tr) f

  (* The sequencer casts what it has queued, in batches. *)
  let rec flush t =
    t.flush_timer <- None;
    if is_sequencer t && not (Queue.is_empty t.queue) then begin
      let items = ref [] and n = ref 0 in
      while !n < t.cfg.max_batch && not (Queue.is_empty t.queue) do
        items := Queue.pop t.queue :: !items;
        incr n
      done;
      let items = List.rev !items in
      if cast t (Wire.Order { batch = t.next_batch; items }) then t.next_batch <- t.next_batch + 1
      else
        (* Flow control: put them back, try again shortly. *)
        List.iter (fun i -> Queue.push i t.queue) items;
      if not (Queue.is_empty t.queue) then
        t.flush_timer <- Some (T.at t.tr (Time.add (T.now t.tr) (Time.of_ms 2)) (fun () -> flush t))
    end

  let order t item =
    Queue.push item t.queue;
    if t.flush_timer = None then t.flush_timer <- Some (soon t (fun () -> flush t))

  let forward t rid =
    match Hashtbl.find_opt t.waiting rid with
    | None -> ()
    | Some w -> (
        let item = { Wire.origin = t.me; rid; cmd = { Store.client = w.req.client; req = w.req.req; op = w.req.op } } in
        let was_sent = w.sent in
        w.sent <- true;
        if t.sequencer = t.me then order t item
        else
          match t.g with
          | Some g -> (
              match G.send g t.sequencer (Wire.encode ~vid:(view t).vid (Wire.Request item)) with
              | Ok () -> ()
              | Error e ->
                  let why = Fmt.str "replica busy: %a" Consort_group.Group.pp_error e in
                  answer t rid (if was_sent then Wire.Unknown why else Wire.Refused why))
          | None -> ())

  let release t =
    let rec go () =
      match Queue.peek_opt t.results with
      | Some (b, rid, o) when b <= t.committed ->
          ignore (Queue.pop t.results);
          answer t rid o;
          go ()
      | _ -> ()
    in
    go ()

  let update_commit t =
    let c = List.fold_left (fun acc m -> min acc (Option.value (Hashtbl.find_opt t.acks m) ~default:0)) max_int (members t) in
    if c <> max_int && c > t.committed then (
      t.committed <- c;
      release t)

  (* A cast refused by flow control is made again a little later, if the
     view has not changed. *)
  let retry t f =
    let vid = (view t).vid in
    ignore (T.at t.tr (Time.add (T.now t.tr) (Time.of_ms 5)) (fun () -> if (not t.dead) && (view t).vid = vid then f ()))

  (* After applying: to disk, then acknowledge. *)
  let rec schedule_sync t =
    if t.sync_timer = None then
      t.sync_timer <-
        Some
          (soon t (fun () ->
               t.sync_timer <- None;
               if not t.dead then begin
                 Store.sync t.store;
                 if t.delivered > t.acked then
                   if cast t (Wire.Ack t.delivered) then t.acked <- t.delivered else retry t (fun () -> schedule_sync t)
               end))

  let become_active t =
    t.phase <- Active;
    Log.info (fun m ->
        m "%s: active in %s, sequencer %s, epoch %d, write %d" t.me (view t).vid t.sequencer (Store.epoch t.store) (Store.seq t.store));
    let l = List.rev t.resubmit in
    t.resubmit <- [];
    List.iter (forward t) l;
    if t.sequencer = t.me && (not (Queue.is_empty t.queue)) && t.flush_timer = None then
      t.flush_timer <- Some (soon t (fun () -> flush t))

  let quorum t = (List.length t.replicas / 2) + 1

  let rec send_summary t =
    if t.phase = Syncing then
      if not (cast t (Wire.Summary { epoch = Store.epoch t.store; seq = Store.seq t.store; history = Store.history t.store })) then
        retry t (fun () -> send_summary t)

  let on_view t (v : Consort_group.Group.view_info) =
    t.me <- v.members.(v.rank);
    t.view <- Some v;
    Hashtbl.reset t.summaries;
    Hashtbl.reset t.acks;
    Queue.clear t.queue;
    Option.iter T.cancel t.flush_timer;
    t.flush_timer <- None;
    t.next_batch <- 1;
    t.delivered <- 0;
    t.acked <- 0;
    t.committed <- 0;
    t.sequencer <- "";
    (* Results not committed in the last view: their requests go again
       (a write is applied once: the deduplication table answers the
       retry). *)
    Queue.clear t.results;
    let rids = Hashtbl.fold (fun rid _ acc -> rid :: acc) t.waiting [] |> List.sort compare in
    let present = List.sort_uniq compare (List.map addr_of (Array.to_list v.members)) in
    let ours = List.filter (fun a -> List.mem a t.replicas) present in
    if List.length ours >= quorum t then begin
      t.phase <- Syncing;
      t.resubmit <- rids;
      send_summary t
    end
    else begin
      t.phase <- Minority;
      t.resubmit <- [];
      List.iter (fun rid -> answer t rid (Wire.Unknown "the replica lost its quorum")) rids
    end

  (* Whether [m]'s log (epoch [e], write [s]) is a prefix of ours. *)
  let is_prefix t e s =
    if e = Store.epoch t.store then s <= Store.seq t.store
    else
      (* Our history, newest first: epoch e ended where the next one began. *)
      let rec find next = function
        | (e', start) :: rest -> if e' = e then (match next with Some n -> s <= n | None -> false) else find (Some start) rest
        | [] -> false
      in
      find None (Store.history t.store)

  let rec start_sync t =
    let ms = members t in
    if t.phase = Syncing && List.for_all (Hashtbl.mem t.summaries) ms then begin
      let best =
        List.fold_left
          (fun acc m ->
            let e, s, _ = Hashtbl.find t.summaries m in
            match acc with Some (e', s', m') when compare (e', s', m') (e, s, m) >= 0 -> acc | _ -> Some (e, s, m))
          None ms
      in
      match best with
      | Some (e_max, _, leader) when leader = t.me ->
          let epoch = max (view t).ltime (e_max + 1) in
          let behind = List.filter_map (fun m -> if m = t.me then None else Some (Hashtbl.find t.summaries m)) ms in
          let from = List.fold_left (fun acc (_, s, _) -> min acc s) (Store.seq t.store) behind in
          let transfer =
            match
              if List.for_all (fun (e, s, _) -> is_prefix t e s) behind then Store.entries_since t.store from else None
            with
            | Some l -> Wire.Suffix l
            | None -> Wire.Snapshot (Store.snapshot t.store)
          in
          Log.info (fun m ->
              m "%s: sequencer of %s, epoch %d, sending %s" t.me (view t).vid epoch
                (match transfer with Wire.Suffix l -> Printf.sprintf "%d writes" (List.length l) | Wire.Snapshot s -> Printf.sprintf "a snapshot of %d bytes" (String.length s)));
          if cast t (Wire.State { epoch; transfer }) then begin
            Store.start_epoch t.store epoch;
            Store.sync t.store;
            t.sequencer <- t.me;
            become_active t
          end
          else retry t (fun () -> start_sync t)
      | _ -> ()
    end

  let on_state t ~origin epoch transfer =
    if t.phase = Syncing && origin <> t.me then begin
      let installed =
        match transfer with
        | Wire.Snapshot s -> Store.install t.store s
        | Wire.Suffix l -> ( try Ok (Store.apply_entries t.store l) with Invalid_argument e -> Error e)
      in
      match installed with
      | Ok () ->
          Store.start_epoch t.store epoch;
          Store.sync t.store;
          t.sequencer <- origin;
          become_active t
      | Error e -> Log.err (fun m -> m "%s: state from %s refused: %s; this replica stays out of service" t.me origin e)
    end

  let on_order t ~origin batch items =
    if t.phase = Active && origin = t.sequencer && batch = t.delivered + 1 then begin
      List.iter
        (fun (i : Wire.item) ->
          let r = Store.execute t.store i.cmd in
          if i.origin = t.me then Queue.push (batch, i.rid, Wire.Done r) t.results)
        items;
      t.delivered <- batch;
      schedule_sync t
    end
    else Log.warn (fun m -> m "%s: order %d from %s ignored (%a, sequencer %s, at %d)" t.me batch origin pp_phase t.phase t.sequencer t.delivered)

  let on_cast t ~origin s =
    if not t.dead then
      match Wire.decode s with
      | Error e -> Log.warn (fun m -> m "%s: bad message from %s: %s" t.me origin e)
      | Ok (vid, _) when vid <> (view t).vid -> ()
      | Ok (_, Wire.Summary { epoch; seq; history }) ->
          Hashtbl.replace t.summaries origin (epoch, seq, history);
          start_sync t
      | Ok (_, Wire.State { epoch; transfer }) -> on_state t ~origin epoch transfer
      | Ok (_, Wire.Order { batch; items }) -> on_order t ~origin batch items
      | Ok (_, Wire.Ack b) ->
          if b > Option.value (Hashtbl.find_opt t.acks origin) ~default:0 then Hashtbl.replace t.acks origin b;
          update_commit t
      | Ok (_, Wire.Request _) -> ()

  let on_send t ~origin s =
    if not t.dead then
      match Wire.decode s with
      | Ok (vid, _) when vid <> (view t).vid -> ()
      | Ok (_, Wire.Request item) ->
          if t.phase = Syncing || is_sequencer t then order t item
          else Log.info (fun m -> m "%s: request from %s, not the sequencer: dropped" t.me origin)
      | Ok _ -> ()
      | Error e -> Log.warn (fun m -> m "%s: bad message from %s: %s" t.me origin e)

  let submit t (r : Wire.request) k =
    if t.dead then k (Wire.Refused "the replica is stopping")
    else
      match Op.check (Machine.limits (Store.machine t.store)) r.op with
      | Error e -> k (Wire.Refused e)
      | Ok () -> (
          match t.phase with
          | Minority ->
              k (Wire.Refused (Printf.sprintf "no quorum: this replica sees %d of the %d replicas" (List.length (members t)) (List.length t.replicas)))
          | (Syncing | Active) when Hashtbl.length t.waiting >= max_in_flight ->
              k (Wire.Refused (Printf.sprintf "replica busy: %d requests in flight" max_in_flight))
          | Syncing | Active ->
              let rid = t.next_rid in
              t.next_rid <- rid + 1;
              let w = { k; req = r; timer = None; sent = false } in
              Hashtbl.replace t.waiting rid w;
              w.timer <-
                Some
                  (T.at t.tr (Time.add (T.now t.tr) t.cfg.request_timeout) (fun () ->
                       w.timer <- None;
                       answer t rid (Wire.Unknown "timeout")));
              if t.phase = Active then forward t rid else t.resubmit <- rid :: t.resubmit)

  let create ?params ?seed ?layers tr cfg store =
    let layers =
      match layers with Some l -> l | None -> Result.get_ok Consort_group.Properties.(layers vsync)
    in
    let t =
      {
        tr;
        cfg;
        store;
        replicas = List.sort_uniq compare (cfg.addr :: cfg.peers);
        g = None;
        me = "";
        view = None;
        phase = Minority;
        sequencer = "";
        summaries = Hashtbl.create 8;
        waiting = Hashtbl.create 64;
        next_rid = 1;
        resubmit = [];
        results = Queue.create ();
        acks = Hashtbl.create 8;
        delivered = 0;
        acked = 0;
        committed = 0;
        sync_timer = None;
        queue = Queue.create ();
        next_batch = 1;
        flush_timer = None;
        dead = false;
      }
    in
    let cb =
      {
        Consort_group.Group.view = (fun v -> if not t.dead then on_view t v);
        cast = (fun ~origin s -> on_cast t ~origin s);
        send = (fun ~origin s -> on_send t ~origin s);
        block = ignore;
        flow = ignore;
        exit = ignore;
      }
    in
    match G.join ?params ?seed ~peers:cfg.peers ~layers tr ~group:cfg.group ~addr:cfg.addr cb with
    | Ok g ->
        t.g <- Some g;
        (* The first view came from inside [join], before casting was possible. *)
        on_view t (G.view g);
        Ok t
    | Error e -> Error (Fmt.str "%a" Consort_group.Group.pp_join_error e)

  let stop_timers t =
    Option.iter T.cancel t.flush_timer;
    Option.iter T.cancel t.sync_timer;
    Hashtbl.iter (fun _ w -> Option.iter T.cancel w.timer) t.waiting

  let halt t =
    t.dead <- true;
    stop_timers t

  let crash t =
    t.dead <- true;
    stop_timers t;
    Hashtbl.reset t.waiting;
    Option.iter G.crash t.g

  let leave t =
    let rids = Hashtbl.fold (fun rid _ acc -> rid :: acc) t.waiting [] in
    List.iter (fun rid -> answer t rid (Wire.Unknown "the replica is stopping")) rids;
    t.dead <- true;
    stop_timers t;
    Option.iter G.leave t.g
end
