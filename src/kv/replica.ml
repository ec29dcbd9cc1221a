open Consort

let src = Logs.Src.create "consort.kv" ~doc:"Replicated key-value store"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  group : string;
  addr : string;
  peers : string list;
  request_timeout : Time.t;
  max_batch : int;
}

let default_config ~group ~addr ~peers =
  { group; addr; peers; request_timeout = Time.of_sec 10.; max_batch = 500 }

type phase = Minority | Syncing | Active

type observation =
  | Applied of { member : string; vid : string; count : int; chain : string }
  | Counted of { member : string; vid : string; origin : string; count : int }

let pp_phase ppf p =
  Fmt.string ppf (match p with Minority -> "minority" | Syncing -> "syncing" | Active -> "active")

(* A member id is ADDR#INCARNATION. *)
let max_in_flight = 10_000
let addr_of id = match String.index_opt id '#' with Some i -> String.sub id 0 i | None -> id
let stack () = Consort_group.Properties.(layers (vsync @ [ Total; Xfer ]))

type fsync_runner = fd:Unix.file_descr -> (unit -> unit) -> ((unit, exn) result -> unit) -> unit

let inline_fsync ~fd:_ run k = k (match run () with () -> Ok () | exception x -> Error x)

(* The age of a state, for state transfer: its epoch, then its write. *)
let age_of ~epoch ~seq = (epoch lsl 32) lor min seq 0xffff_ffff

module Generic
    (M : Rsm.MACHINE)
    (Store :
      Store.S
        with type op = M.op
         and type response = M.response
         and type limits = M.limits
         and type machine = M.t)
    (T : Transport.S) =
struct
  module W = Wire.Make (M)
  module G = Consort_group.Group.Make (T)

  type waiting = {
    k : W.outcome -> unit;
    req : W.request;
    mutable timer : T.timer option;
    mutable sent : bool; (* cast at least once: it may have taken effect *)
  }

  type t = {
    tr : T.t;
    cfg : config;
    store : Store.t;
    replicas : string list; (* configured group addresses *)
    mutable g : G.t option;
    mutable me : string;
    mutable view : Consort_group.Group.view_info option;
    mutable phase : phase;
    (* requests from this member's clients, by local number *)
    waiting : (int, waiting) Hashtbl.t;
    mutable next_rid : int;
    pending : int Queue.t; (* rids to cast in this view *)
    mutable next_batch : int;
    reads : int Queue.t; (* reads waiting for this member's next read marker *)
    mutable mark : (int * int Queue.t) option;
        (* this member's read marker cast and not yet applied here, and the reads it answers *)
    mutable mark_open : bool; (* no Order of this member was cast after [mark]: reads may join *)
    mutable next_mark : int;
    (* results of applied requests of this member, waiting for commit *)
    results : (int * int * W.outcome) Queue.t; (* order, rid, outcome *)
    acks : (string, int) Hashtbl.t; (* orders each member vouched for, checked against ours *)
    early : (string, int * string) Hashtbl.t; (* a member's acknowledgement beyond our orders *)
    acks_sent : (string, int) Hashtbl.t; (* the last acknowledgement sent to each member *)
    mutable delivered : int; (* orders applied here in this view *)
    mutable vchain : string; (* the orders of this view, chained order by order *)
    chains : (int, string) Hashtbl.t; (* the chain after each order not yet committed *)
    mutable acked : int;
    mutable committed : int;
    mutable sync_timer : T.timer option;
    mutable syncing : bool; (* an fsync of the log runs *)
    mutable dirty_from : int option;
        (* the first order applied since the last fsync started after which the log had
           something to write: the orders before it are on disk once that fsync returns (read
           markers write nothing) *)
    fsync : fsync_runner;
    mutable flush_timer : T.timer option;
    mutable dead : bool;
    mutable epoch_next : int option; (* the view's epoch, once its state transfer decided *)
    begins : (string, unit) Hashtbl.t; (* members whose Begin was delivered in this view *)
    mutable suffixes : int; (* states received as a suffix of the log *)
    mutable snapshots : int; (* ... as a whole snapshot *)
    mutable failure : Store_intf.failure option; (* the disk refused a step: stopped *)
    mutable cluster : string option; (* the cluster of the view's voters, once decided *)
    mutable no_vote : string option; (* why this primary view has too few voters *)
    on_failure : Store_intf.failure -> unit;
    quiet_failure : bool; (* the process reports a failure itself *)
    observe : observation -> unit;
  }

  let phase t = t.phase
  let me t = t.me
  let store t = t.store
  let in_flight t = Hashtbl.length t.waiting
  let transfers t = (t.suffixes, t.snapshots)
  let failure t = t.failure
  let pending_ack t ~origin = Option.map fst (Hashtbl.find_opt t.early origin)

  let view t =
    match t.view with
    | Some v -> v
    | None ->
        {
          Consort_group.Group.vid = "";
          ltime = 0;
          members = [||];
          rank = 0;
          coordinator = "";
          joined = [];
          left = [];
          why = [];
        }

  (* With Total's sequencer (the default), the view's first member orders. *)
  let is_sequencer t = t.phase = Active && (view t).rank = 0
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
        match G.cast g (W.encode ~vid:(view t).vid m) with
        | Ok () -> true
        | Error e ->
            Log.info (fun f -> f "%s: cast refused: %a" t.me Consort_group.Group.pp_error e);
            false)
    | _ -> false

  let soon t f = T.at t.tr (T.now t.tr) f

  (* A cast refused by flow control is made again a little later, if the
     view has not changed. *)
  let retry t f =
    let vid = (view t).vid in
    ignore
      (T.at t.tr
         (Time.add (T.now t.tr) (Time.of_ms 5))
         (fun () -> if (not t.dead) && (view t).vid = vid then f ()))

  (* This member casts its clients' requests, in batches, in the group's
     total order. *)
  let rec flush t =
    t.flush_timer <- None;
    if t.phase = Active && not (Queue.is_empty t.pending) then begin
      let rids = ref [] and n = ref 0 in
      while !n < t.cfg.max_batch && not (Queue.is_empty t.pending) do
        rids := Queue.pop t.pending :: !rids;
        incr n
      done;
      let rids = List.rev !rids in
      let items =
        List.filter_map
          (fun rid ->
            match Hashtbl.find_opt t.waiting rid with
            | Some w ->
                Some
                  {
                    Wire.origin = t.me;
                    rid;
                    cmd = { Rsm.client = w.req.client; req = w.req.req; op = w.req.op };
                  }
            | None -> None)
          rids
      in
      if items <> [] then
        if cast t (Wire.Order { batch = t.next_batch; items }) then begin
          t.next_batch <- t.next_batch + 1;
          t.mark_open <- false;
          List.iter
            (fun rid ->
              match Hashtbl.find_opt t.waiting rid with Some w -> w.sent <- true | None -> ())
            rids
        end
        else begin
          (* Flow control: put them back, in front, and try again shortly. *)
          let rest = Queue.create () in
          Queue.transfer t.pending rest;
          List.iter (fun rid -> Queue.push rid t.pending) rids;
          Queue.transfer rest t.pending
        end;
      if not (Queue.is_empty t.pending) then
        t.flush_timer <- Some (T.at t.tr (Time.add (T.now t.tr) (Time.of_ms 2)) (fun () -> flush t))
    end;
    flush_reads t

  (* Reads go through the order in batches, with a read marker (as etcd's
     read index): one marker of this member at a time, cast once every write
     read before the reads is cast (so a read follows the writes its
     connection sent before it); every read that comes while it is on its
     way joins it (see [forward]); when it is applied here, its reads are
     answered from the state at its place, once that place is committed. *)
  and flush_reads t =
    if t.phase = Active && t.mark = None && Queue.is_empty t.pending && not (Queue.is_empty t.reads)
    then begin
      let rids = Queue.create () in
      Queue.iter (fun rid -> if Hashtbl.mem t.waiting rid then Queue.push rid rids) t.reads;
      Queue.clear t.reads;
      if not (Queue.is_empty rids) then begin
        (* Taken before the cast, which may deliver it at once (a view of one). *)
        let mark = t.next_mark in
        t.next_mark <- mark + 1;
        t.mark <- Some (mark, rids);
        t.mark_open <- true;
        if cast t (Wire.Read { mark }) then
          Queue.iter
            (fun rid ->
              match Hashtbl.find_opt t.waiting rid with Some w -> w.sent <- true | None -> ())
            rids
        else begin
          t.mark <- None;
          Queue.transfer rids t.reads;
          if t.flush_timer = None then
            t.flush_timer <-
              Some (T.at t.tr (Time.add (T.now t.tr) (Time.of_ms 2)) (fun () -> flush t))
        end
      end
    end

  let is_read t rid =
    match Hashtbl.find_opt t.waiting rid with Some w -> M.is_read w.req.op | None -> false

  (* A read joins this member's marker on its way if no write was read
     after it was cast: every write acknowledged before the read came was
     applied here before (its commit waited for this member's
     acknowledgement), so before the marker, which is not yet applied here. *)
  let forward t rid =
    if is_read t rid then begin
      match t.mark with
      | Some (_, rids) when t.mark_open && Queue.is_empty t.pending ->
          Queue.push rid rids;
          Option.iter (fun w -> w.sent <- true) (Hashtbl.find_opt t.waiting rid)
      | _ ->
          Queue.push rid t.reads;
          if t.flush_timer = None then t.flush_timer <- Some (soon t (fun () -> flush t))
    end
    else begin
      Queue.push rid t.pending;
      if t.flush_timer = None then t.flush_timer <- Some (soon t (fun () -> flush t))
    end

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
    let c =
      List.fold_left
        (fun acc m -> min acc (Option.value (Hashtbl.find_opt t.acks m) ~default:0))
        max_int (members t)
    in
    if c <> max_int && c > t.committed then begin
      for b = t.committed to c - 1 do
        Hashtbl.remove t.chains b
      done;
      t.committed <- c;
      release t
    end

  (* The chain of this view's orders after the [b]th, if this member
     applied it and it is not committed yet ([Some ""] for none). *)
  let chain_after t b = if b = 0 then Some "" else Hashtbl.find_opt t.chains b

  (* An acknowledgement counts only for the orders it names: its chain must
     be ours after as many orders. One beyond our orders waits for them. *)
  let rec on_ack t ~origin b digest =
    if b > Option.value (Hashtbl.find_opt t.acks origin) ~default:0 && b > t.committed then
      if b > t.delivered then begin
        match Hashtbl.find_opt t.early origin with
        | Some (b', _) when b' >= b -> ()
        | _ -> Hashtbl.replace t.early origin (b, digest)
      end
      else
        match chain_after t b with
        | Some c when c = digest ->
            Hashtbl.replace t.acks origin b;
            t.observe (Counted { member = t.me; vid = (view t).vid; origin; count = b });
            update_commit t
        | _ ->
            Log.warn (fun m ->
                m "%s: %s acknowledged %d orders that are not ours: not counted" t.me origin b)

  (* After an order is applied: the acknowledgements that waited for it. *)
  and check_early t =
    let due =
      Hashtbl.fold
        (fun o (b, d) acc -> if b <= t.delivered then (o, b, d) :: acc else acc)
        t.early []
    in
    List.iter
      (fun (o, b, d) ->
        Hashtbl.remove t.early o;
        on_ack t ~origin:o b d)
      due

  (* An acknowledgement needs no order: it goes point-to-point to every
     other member of the view (sends are delivered in the view they were
     sent in, as casts are), and counts here at once. *)
  let send_ack t b =
    match t.g with
    | Some g when not t.dead ->
        let digest = Option.value (chain_after t b) ~default:"" in
        let msg = W.encode ~vid:(view t).vid (Wire.Ack { count = b; digest }) in
        let others = List.filter (( <> ) t.me) (members t) in
        let ok =
          List.for_all
            (fun m ->
              Option.value (Hashtbl.find_opt t.acks_sent m) ~default:0 >= b
              ||
              match G.send g m msg with
              | Ok () ->
                  Hashtbl.replace t.acks_sent m b;
                  true
              | Error e ->
                  Log.info (fun f ->
                      f "%s: ack to %s refused: %a" t.me m Consort_group.Group.pp_error e);
                  false)
            others
        in
        if ok then on_ack t ~origin:t.me b digest;
        ok
    | _ -> false

  let stop_timers t =
    Option.iter T.cancel t.flush_timer;
    Option.iter T.cancel t.sync_timer;
    Hashtbl.iter (fun _ w -> Option.iter T.cancel w.timer) t.waiting

  let failure_msg = function
    | Store_intf.Disk_full _ -> "disk full"
    | Store_intf.Io_error e -> "io-error: " ^ e
    | Store_intf.Wrong_dir e -> "wrong data directory: " ^ e

  (* The disk refused a step: this replica acknowledges nothing more,
     answers its clients (refused if their request was never cast, unknown
     otherwise: it may take effect at the others), and leaves the group;
     its process exits. *)
  let fail_stop t e =
    if t.failure = None then begin
      t.failure <- Some e;
      (* One line: here, unless the process says it (on_failure). *)
      (if t.quiet_failure then Log.info else Log.err) (fun m ->
          m "%s: %s; this replica stops acknowledging and leaves the group" t.me
            (match e with Store_intf.Disk_full w -> "disk full: " ^ w | e -> failure_msg e));
      let why = failure_msg e in
      let rids = Hashtbl.fold (fun rid w acc -> (rid, w.sent) :: acc) t.waiting [] in
      t.dead <- true;
      List.iter
        (fun (rid, sent) ->
          answer t rid
            (if sent then Wire.Unknown (why ^ " at this replica: the request may take effect")
             else Wire.Refused why))
        (List.sort compare rids);
      stop_timers t;
      Option.iter G.leave t.g;
      t.on_failure e
    end

  (* A step that makes data durable: false (and the replica stopped) if the
     disk refused it. *)
  let durably t f =
    match t.failure with
    | Some _ -> false
    | None -> (
        match f () with
        | () -> true
        | exception Store_intf.Failed e ->
            fail_stop t e;
            false)

  (* After applying: to disk, then acknowledge. *)
  let rec schedule_sync t =
    if t.sync_timer = None && not t.syncing then
      t.sync_timer <-
        Some
          (soon t (fun () ->
               t.sync_timer <- None;
               if not t.dead then start_sync t))

  (* Group commit: one fsync of the log at a time, run apart while this
     member goes on applying orders; it covers the orders written when it
     started, and only those are acknowledged when it returns successfully.
     The orders applied meanwhile go to disk together in the next one,
     started once the loop has served what is ready (orders that came
     meanwhile share it). An acknowledgement the group
     refuses (flow control) waits for the retry: syncing again at once
     would cover nothing new and be refused again, over and over at the
     same instant. Alone in its view, a member has nothing to do while its
     fsync runs but read requests, which wait in the kernel and come in
     together after it: its fsync runs here, without the hand-off to the
     [fsync] runner and back (a thread's wake-up each way in kv serve, the
     cost that made one replica slower with group commit than without).
     The read markers applied while it ran, up to the first order that
     wrote to the log, are on disk when it returns (they write nothing):
     they are acknowledged with it, so that a read waits for no fsync of a
     write ordered after its marker. *)
  and start_sync t =
    let v = view t in
    let vid = v.vid and covers = t.delivered in
    t.dirty_from <- None;
    match Store.sync_start t.store with
    | exception Store_intf.Failed e -> fail_stop t e
    | f ->
        let finish outcome =
          t.syncing <- false;
          if (not t.dead) && durably t (fun () -> Store.sync_finish t.store outcome) then begin
            let covers =
              if (view t).vid <> vid then covers
              else
                match t.dirty_from with
                | None -> max covers t.delivered
                | Some d -> max covers (min t.delivered (d - 1))
            in
            let acked =
              if (view t).vid <> vid || covers <= t.acked then true
              else if send_ack t covers then begin
                t.acked <- covers;
                true
              end
              else false
            in
            if not acked then retry t (fun () -> schedule_sync t)
            else if t.delivered > t.acked then schedule_sync t
          end
        in
        t.syncing <- true;
        let runner = if Array.length v.members <= 1 then inline_fsync else t.fsync in
        if f.needed then runner ~fd:f.fd (fun () -> if not t.dead then f.run ()) finish
        else finish (Ok ())

  let quorum t = (List.length t.replicas / 2) + 1

  let rec send_begin t =
    if t.phase = Syncing && not (cast t Wire.Begin) then retry t (fun () -> send_begin t)

  (* Every member's position is in (Xfer's decision): the view's epoch is
     greater than every member's epoch and promise, and than the view's
     logical time; this member promises it, durably, then says so. An
     epoch starts only once every member of the view has promised it, so a
     later primary view (which shares a member with this one) starts a
     greater one: two views never start the same epoch. *)
  (* The cluster of a view: the one a quorum of the replicas' data
     directories name, or the only one any names; none when several do and
     none has a quorum (then nobody votes: a replica on a wrong directory
     meets the others). A vote: a member of that cluster, a directory made
     before identities, or a fresh one (--new) when no member names a
     cluster; never a replica that is joining (an empty directory, --join)
     nor one of another cluster. *)
  let voters t (ps : (string * Wire.position) list) =
    let counts = Hashtbl.create 4 in
    List.iter
      (fun (_, (p : Wire.position)) ->
        match p.member with
        | Store_intf.Member c ->
            Hashtbl.replace counts c (1 + Option.value (Hashtbl.find_opt counts c) ~default:0)
        | _ -> ())
      ps;
    let named = Hashtbl.fold (fun c n acc -> (c, n) :: acc) counts [] in
    let ruling = List.find_opt (fun (_, n) -> n >= quorum t) named |> Option.map fst in
    let cluster = match (ruling, named) with Some c, _ | None, [ (c, _) ] -> Some c | _ -> None in
    let votes (p : Wire.position) =
      match p.member with
      | Store_intf.Member c -> Some c = cluster
      | Store_intf.Legacy -> List.length named <= 1
      | Store_intf.Fresh -> named = []
      | Store_intf.Joining -> false
    in
    let vs =
      List.filter_map
        (fun (m, p) ->
          if votes p && List.mem (addr_of m) t.replicas then Some (addr_of m) else None)
        ps
      |> List.sort_uniq compare
    in
    (cluster, ruling, vs)

  (* Too few voters: this view serves nothing (the requests in flight are
     answered: unknown if cast in an earlier view, refused otherwise). *)
  let no_vote t why =
    t.phase <- Minority;
    t.no_vote <- Some why;
    let rids = Hashtbl.fold (fun rid w acc -> (rid, w.sent) :: acc) t.waiting [] in
    List.iter
      (fun (rid, sent) ->
        answer t rid (if sent then Wire.Unknown "the replica lost its quorum" else Wire.Refused why))
      (List.sort compare rids)

  let on_decision t positions =
    if (not t.dead) && t.phase = Syncing then begin
      let ps =
        List.concat
          (List.mapi
             (fun i p ->
               match W.decode_position p with
               | Ok (p : Wire.position) when i < Array.length (view t).members ->
                   [ ((view t).members.(i), p) ]
               | Ok _ -> []
               | Error e ->
                   Log.warn (fun m -> m "%s: a member's position does not decode: %s" t.me e);
                   [])
             (Array.to_list positions))
      in
      let cluster, ruling, vs = voters t ps in
      t.cluster <- cluster;
      match (Store.membership t.store, ruling) with
      | Store_intf.Member mine, Some c when mine <> c ->
          fail_stop t
            (Store_intf.Wrong_dir
               (Printf.sprintf "%s is of cluster %s, the group's replicas of cluster %s"
                  (Store.dir t.store) mine c))
      | _ ->
          if List.length vs < quorum t then
            no_vote t
              (Printf.sprintf
                 "no quorum: %d of the %d replicas with a vote in this view (an empty data \
                  directory has none until it has caught up)"
                 (List.length vs) (List.length t.replicas))
          else
            let epoch =
              List.fold_left
                (fun acc (_, (p : Wire.position)) -> max acc (max p.epoch p.promise + 1))
                (max (view t).ltime (max (Store.epoch t.store) (Store.promise t.store) + 1))
                ps
            in
            if durably t (fun () -> Store.promise_to t.store epoch) then begin
              t.epoch_next <- Some epoch;
              send_begin t
            end
    end

  let on_view t (v : Consort_group.Group.view_info) =
    t.me <- v.members.(v.rank);
    t.view <- Some v;
    Hashtbl.reset t.acks;
    Hashtbl.reset t.early;
    Hashtbl.reset t.chains;
    t.vchain <- "";
    Hashtbl.reset t.acks_sent;
    Queue.clear t.pending;
    Queue.clear t.reads;
    t.mark <- None;
    t.mark_open <- false;
    Option.iter T.cancel t.flush_timer;
    t.flush_timer <- None;
    t.delivered <- 0;
    t.dirty_from <- None;
    t.acked <- 0;
    t.committed <- 0;
    t.epoch_next <- None;
    t.cluster <- None;
    t.no_vote <- None;
    Hashtbl.reset t.begins;
    (* What this member applied is on disk before it offers its state. *)
    if not t.dead then ignore (durably t (fun () -> Store.sync t.store));
    (* Results not committed in the last view: their requests go again
       (a write is applied once: the deduplication table answers the
       retry). *)
    Queue.clear t.results;
    let rids = Hashtbl.fold (fun rid _ acc -> rid :: acc) t.waiting [] |> List.sort compare in
    let present = List.sort_uniq compare (List.map addr_of (Array.to_list v.members)) in
    let ours = List.filter (fun a -> List.mem a t.replicas) present in
    if t.dead then t.phase <- Minority
    else if List.length ours >= quorum t then begin
      t.phase <- Syncing;
      List.iter (forward t) rids
    end
    else begin
      t.phase <- Minority;
      List.iter (fun rid -> answer t rid (Wire.Unknown "the replica lost its quorum")) rids
    end

  (* {2 State transfer, through the group's Xfer} *)

  let age t = age_of ~epoch:(Store.epoch t.store) ~seq:(Store.seq t.store)

  let position t =
    W.encode_position
      {
        Wire.epoch = Store.epoch t.store;
        seq = Store.seq t.store;
        chain = Store.chain t.store;
        history = Store.history t.store;
        promise = Store.promise t.store;
        member = Store.membership t.store;
      }

  (* Whether a log at position [p] is a prefix of ours: our chain after its
     last write is its chain. (Epochs alone do not tell: members that end a
     view apart, in a partition, each apply their part of it, then what
     had no place in the total order, in the same epoch.) *)
  let is_prefix t (p : Wire.position) =
    match Store.chain_at t.store p.seq with Some c -> c = p.chain | None -> false

  (* The state a member at position [pos] needs: the writes it misses when
     its log is a prefix of ours and we still hold them, else a snapshot. *)
  let take_for t pos =
    (* If the disk refuses, this replica stops (and leaves); what it gives
       was ordered by the group all the same. *)
    ignore (durably t (fun () -> Store.sync t.store));
    let transfer =
      match W.decode_position pos with
      | Ok p when is_prefix t p -> (
          match Store.entries_since t.store p.seq with
          | Some entries ->
              Wire.Suffix { epoch = Store.epoch t.store; history = Store.history t.store; entries }
          | None -> Wire.Snapshot (Store.snapshot t.store))
      | Ok _ -> Wire.Snapshot (Store.snapshot t.store)
      | Error e ->
          Log.warn (fun m ->
              m "%s: a member's position does not decode (%s): it gets a snapshot" t.me e);
          Wire.Snapshot (Store.snapshot t.store)
    in
    Log.info (fun m ->
        m "%s: gives %s" t.me
          (match transfer with
          | Wire.Suffix { entries; _ } ->
              Printf.sprintf "the %d writes after the receiver's last" (List.length entries)
          | Wire.Snapshot s -> Printf.sprintf "a snapshot of %d bytes" (String.length s)));
    (match Store.membership t.store with Store_intf.Member c -> c | _ -> "-")
    ^ "\n" ^ W.encode_transfer transfer

  (* A state from a member of another cluster (a replica started on a wrong
     data directory, which stops at the decision) is never installed: the
     view ends without an epoch, and this member offers its own state again. *)
  let install t s =
    let giver, s =
      match String.index_opt s '\n' with
      | Some i when i <= 256 -> (String.sub s 0 i, String.sub s (i + 1) (String.length s - i - 1))
      | _ -> ("-", s)
    in
    let mine =
      match (t.cluster, Store.membership t.store) with
      | Some c, _ | None, Store_intf.Member c -> Some c
      | None, _ -> None
    in
    if giver <> "-" && mine <> None && Some giver <> mine then
      Log.warn (fun m ->
          m "%s: a state from a replica of cluster %s, not %s: not installed" t.me giver
            (Option.get mine))
    else
      let installed =
        match W.decode_transfer s with
        | Error e -> Error (`Msg e)
        | Ok (Wire.Snapshot snap) -> (
            t.snapshots <- t.snapshots + 1;
            match Store.install t.store snap with
            | Ok () -> Ok ()
            | Error e -> Error (`Msg e)
            | exception Store_intf.Failed e -> Error (`Disk e))
        | Ok (Wire.Suffix { epoch; history; entries }) -> (
            t.suffixes <- t.suffixes + 1;
            match Store.apply_entries t.store entries with
            | () -> (
                Store.adopt t.store ~epoch ~history;
                match Store.sync t.store with
                | () -> Ok ()
                | exception Store_intf.Failed e -> Error (`Disk e))
            | exception Invalid_argument e -> Error (`Msg e))
      in
      match installed with
      | Error (`Disk e) -> fail_stop t e
      | Ok () ->
          Log.info (fun m ->
              m "%s: caught up: epoch %d, write %d" t.me (Store.epoch t.store) (Store.seq t.store))
      | Error (`Msg e) ->
          (* Nothing the others hold can be trusted here any more: this
           replica stops serving and leaves the group. *)
          Log.err (fun m ->
              m "%s: state from the group refused: %s; this replica leaves the group" t.me e);
          t.dead <- true;
          Option.iter G.leave t.g

  (* {2 Deliveries, in the group's total order} *)

  (* Every member's Begin is in: every member holds the same state (Xfer
     gave it to those behind) and promised the view's epoch, which starts. *)
  let begin_epoch t epoch =
    let v = view t in
    (* A replica new to the cluster (fresh, joining, or from before
       identities) is one of it from now on: it holds the state every member
       of this view holds, and votes. *)
    let joined =
      match Store.membership t.store with
      | Store_intf.Member _ -> true
      | _ ->
          let c =
            match t.cluster with
            | Some c -> c
            | None -> Digest.to_hex (Digest.string (t.cfg.group ^ "\n" ^ v.vid))
          in
          durably t (fun () -> Store.set_member t.store c)
    in
    Store.start_epoch t.store epoch;
    if joined && durably t (fun () -> Store.sync t.store) then begin
      t.phase <- Active;
      if ((not (Queue.is_empty t.pending)) || not (Queue.is_empty t.reads)) && t.flush_timer = None
      then t.flush_timer <- Some (soon t (fun () -> flush t));
      Log.info (fun m ->
          m "%s: active in %s, epoch %d, write %d" t.me v.vid (Store.epoch t.store)
            (Store.seq t.store))
    end

  (* An order or a read marker: the next order of the view. *)
  let on_order t ~origin s msg =
    let batch = t.delivered + 1 in
    t.vchain <- Digest.string (t.vchain ^ Digest.string s);
    Hashtbl.replace t.chains batch t.vchain;
    t.observe (Applied { member = t.me; vid = (view t).vid; count = batch; chain = t.vchain });
    (match msg with
    | Wire.Order { items; _ } ->
        List.iter
          (fun (i : W.item) ->
            let r = Store.execute t.store i.cmd in
            if i.origin = t.me then Queue.push (batch, i.rid, Wire.Done r) t.results)
          items
    | Wire.Read { mark } when origin = t.me -> (
        match t.mark with
        | Some (n, rids) when n = mark ->
            (* Its reads, from the state here, answered once it is committed. *)
            t.mark <- None;
            Queue.iter
              (fun rid ->
                match Hashtbl.find_opt t.waiting rid with
                | Some w ->
                    let r =
                      Store.execute t.store
                        { Rsm.client = w.req.client; req = w.req.req; op = w.req.op }
                    in
                    Queue.push (batch, rid, Wire.Done r) t.results
                | None -> ())
              rids;
            if (not (Queue.is_empty t.reads)) && t.flush_timer = None then
              t.flush_timer <- Some (soon t (fun () -> flush t))
        | _ -> ())
    | _ -> ());
    t.delivered <- batch;
    if t.dirty_from = None && Store.dirty t.store then t.dirty_from <- Some batch;
    check_early t;
    schedule_sync t

  let on_cast t ~origin s =
    if not t.dead then
      match W.decode s with
      | Error e -> Log.warn (fun m -> m "%s: bad message from %s: %s" t.me origin e)
      | Ok (vid, _) when vid <> (view t).vid -> ()
      | Ok (_, Wire.Begin) when t.phase = Syncing -> (
          Hashtbl.replace t.begins origin ();
          match t.epoch_next with
          | Some epoch when List.for_all (Hashtbl.mem t.begins) (members t) -> begin_epoch t epoch
          | _ -> ())
      | Ok (_, m) when t.phase = Active -> (
          match m with
          | (Wire.Order _ | Wire.Read _) as m -> on_order t ~origin s m
          | Wire.Ack { count; digest } -> on_ack t ~origin count digest
          | Wire.Begin -> ())
      | Ok _ -> ()

  let on_send t ~origin s =
    if not t.dead then
      match W.decode s with
      | Error e -> Log.warn (fun m -> m "%s: bad message from %s: %s" t.me origin e)
      | Ok (vid, Wire.Ack { count; digest }) when vid = (view t).vid && t.phase <> Minority ->
          on_ack t ~origin count digest
      | Ok _ -> ()

  let deliver_send = on_send

  let submit t (r : W.request) k =
    if t.dead then
      k
        (Wire.Refused
           (match t.failure with Some e -> failure_msg e | None -> "the replica is stopping"))
    else
      match M.check (M.limits (Store.machine t.store)) r.op with
      | Error e -> k (Wire.Refused e)
      | Ok () -> (
          match t.phase with
          | Minority ->
              k
                (Wire.Refused
                   (match t.no_vote with
                   | Some why -> why
                   | None ->
                       Printf.sprintf "no quorum: this replica sees %d of the %d replicas"
                         (List.length (members t))
                         (List.length t.replicas)))
          | (Syncing | Active) when Hashtbl.length t.waiting >= max_in_flight ->
              k (Wire.Refused (Printf.sprintf "replica busy: %d requests in flight" max_in_flight))
          | Syncing | Active ->
              let rid = t.next_rid in
              t.next_rid <- rid + 1;
              let w = { k; req = r; timer = None; sent = false } in
              Hashtbl.replace t.waiting rid w;
              w.timer <-
                Some
                  (T.at t.tr
                     (Time.add (T.now t.tr) t.cfg.request_timeout)
                     (fun () ->
                       w.timer <- None;
                       answer t rid (Wire.Unknown "timeout")));
              forward t rid)

  let create ?params ?seed ?layers ?on_failure ?(observe = ignore) ?(fsync = inline_fsync) tr cfg
      store =
    match
      match layers with
      | Some l -> Ok l
      | None -> Result.map_error (Fmt.str "%a" Consort_group.Properties.pp_error) (stack ())
    with
    | Error e -> Error e
    | Ok layers -> (
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
            waiting = Hashtbl.create 64;
            next_rid = 1;
            pending = Queue.create ();
            next_batch = 1;
            reads = Queue.create ();
            mark = None;
            mark_open = false;
            next_mark = 1;
            results = Queue.create ();
            acks = Hashtbl.create 8;
            early = Hashtbl.create 8;
            acks_sent = Hashtbl.create 8;
            delivered = 0;
            vchain = "";
            chains = Hashtbl.create 64;
            acked = 0;
            committed = 0;
            sync_timer = None;
            syncing = false;
            dirty_from = None;
            fsync;
            flush_timer = None;
            dead = false;
            epoch_next = None;
            begins = Hashtbl.create 8;
            suffixes = 0;
            snapshots = 0;
            failure = None;
            cluster = None;
            no_vote = None;
            on_failure = Option.value on_failure ~default:ignore;
            quiet_failure = on_failure <> None;
            observe;
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
        let durable_state =
          {
            Consort_group.Xfer.age = (fun () -> age t);
            position = (fun () -> position t);
            take_for = take_for t;
            on_decision = on_decision t;
          }
        in
        match
          G.join ?params ?seed ~peers:cfg.peers ~durable_state ~install_state:(install t) ~layers tr
            ~group:cfg.group ~addr:cfg.addr cb
        with
        | Ok g ->
            t.g <- Some g;
            (* The first view came from inside [join], before casting was
               possible; so may the state transfer's decision (a view of
               one, where this member's own casts may be delivered at
               once): the view is taken again only if it is another one,
               never reset under a decision already made. *)
            let v = G.view g in
            (match t.view with
            | Some v' when v'.vid = v.vid -> ()
            | _ -> if not t.dead then on_view t v);
            Ok t
        | Error e -> Error (Fmt.str "%a" Consort_group.Group.pp_join_error e))

  let halt t =
    t.dead <- true;
    stop_timers t

  let crash t =
    t.dead <- true;
    stop_timers t;
    Hashtbl.reset t.waiting;
    Option.iter G.crash t.g

  let leave t =
    if t.failure = None then begin
      let rids = Hashtbl.fold (fun rid _ acc -> rid :: acc) t.waiting [] in
      List.iter (fun rid -> answer t rid (Wire.Unknown "the replica is stopping")) rids;
      t.dead <- true;
      stop_timers t;
      Option.iter G.leave t.g
    end
end

module Make (T : Transport.S) = Generic (Machine.Rsm) (Store) (T)
