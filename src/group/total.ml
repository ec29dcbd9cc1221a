open Consort

let src = Logs.Src.create "consort.total" ~doc:"Total layer: totally ordered casts"

module Log = (val Logs.src_log src : Logs.LOG)

type protocol = Sequencer | Token

module Param = struct
  let protocol = "total.protocol"
  let burst = "total.token_burst"
  let queue = "total.queue"
  let held = "total.held"

  let () =
    Params.register protocol (Params.String "sequencer")
      ~doc:
        "how casts are ordered: sequencer (the view's coordinator orders, Ensemble's Seqbb) or \
         token (the holder of a token passed around the members orders, as Totem)";
    Params.register burst (Params.Int 64)
      ~doc:"token: casts a member orders each time it holds the token";
    Params.register queue
      (Params.Int (1 lsl 20))
      ~doc:
        "token: bytes of casts waiting for the token beyond which the application is asked to pause";
    Params.register held
      (Params.Int (4 lsl 20))
      ~min:(Params.Int 1024)
      ~doc:
        "bytes of casts received and waiting for their place beyond which this member stops \
         returning flow control credit (every sender slows down to it) until they are back to half"
end

let protocol_of_string s =
  match String.lowercase_ascii (String.trim s) with
  | "sequencer" | "seq" | "seqbb" -> Ok Sequencer
  | "token" -> Ok Token
  | _ -> Error (Printf.sprintf "total.protocol must be sequencer or token, not %S" s)

let protocol params = protocol_of_string (Params.string params Param.protocol)
let check_params params = Result.map ignore (protocol params)
let protocol_name = function Sequencer -> "sequencer" | Token -> "token"

let total_order =
  Contract.v "total-order" ~doc:"every member delivers the casts of a view in one order"

(* Bounds on what a header may claim. *)
let max_runs = 4096
let max_run = 1 lsl 20
let max_ahead = 1 lsl 22

(* Runs in one order the sequencer casts: an order of this many runs or
   fewer takes the fused path, its runs as fields. *)
let order_runs = 2

(* Casts held by origin, in FIFO order, kept taken apart in a
   {!Msgring} numbered from [head] to [tail]: holding one that is a
   slice of a received segment allocates nothing, and the collector
   has nothing of it to promote but the segment. *)
module Pend : sig
  type t = { ring : Msgring.t; mutable head : int; mutable tail : int }

  val create : unit -> t
  val is_empty : t -> bool
  val length : t -> int
  val add : Consort.Msg.t -> t -> unit
  val add_head : Bytes.t -> Consort.Msg.t -> t -> int
  val pop : t -> Consort.Msg.t
  val take_opt : t -> Consort.Msg.t option
  val clear : t -> unit
  val strings : t -> string list
end = struct
  type t = { ring : Msgring.t; mutable head : int; mutable tail : int }

  let create () = { ring = Msgring.create (); head = 0; tail = 0 }
  let is_empty q = q.head = q.tail
  let length q = q.tail - q.head

  let add m q =
    Msgring.replace q.ring q.tail m;
    q.tail <- q.tail + 1

  (* [add (Msg.push_bytes head (Msg.retain m))], not made: [m] stays the
     caller's. Returns the length of what is kept. *)
  let add_head head m q =
    Msgring.replace_head q.ring q.tail head m;
    q.tail <- q.tail + 1;
    Msgring.msg_length q.ring (q.tail - 1)

  let pop q =
    let m = Msgring.copy q.ring q.head in
    Msgring.release q.ring q.head;
    q.head <- q.head + 1;
    m

  let take_opt q = if is_empty q then None else Some (pop q)

  let clear q =
    Msgring.reset q.ring;
    q.head <- 0;
    q.tail <- 0

  let strings q = List.rev (Msgring.fold (fun _ s acc -> s :: acc) q.ring [])
end

(* The layer: its state and what the fused path (F) uses; the ordering protocols' helpers stay
   inside. *)
module L : sig
  type header =
    | Pass
    | Data
    | Order of (int * int) list
    | Stamped of int
    | Token of { next : int; idle : int }
    | Want
    | Placed of int

  val name : string
  val codec : header Consort.Codec.t
  val pp_header : Format.formatter -> header -> unit
  val provides : Consort.Contract.t list
  val requires : Consort.Contract.t list

  type run = { origin : int; mutable left : int }

  type t = {
    out : header Consort.Layer.out;
    now : unit -> Consort.Time.t;
    proto : protocol;
    n : int;
    me : int;
    srcs : Consort.Event.src array;
    pending : Pend.t array;
    runs : run Queue.t;
    unsent : int array;
    unsent_order : int array;
    mutable unsent_n : int;
    mutable armed : bool;
    mutable places : int;
    mutable known : int;
    stamped : (int, int * Consort.Msg.t) Hashtbl.t;
    mutable next_deliver : int;
    mutable holding : (int * int) option;
    outq : Consort.Msg.t Queue.t;
    mutable outq_bytes : int;
    queue_limit : int;
    burst : int;
    wants : bool array;
    mutable want_sent : bool;
    mutable blocked : bool;
    mutable synced : bool;
    mutable flow_below : bool;
    mutable flow_told : bool;
    mutable stopped : bool;
    mutable ordered : int;
    mutable at_flush : int;
    mutable skipped : int;
    mutable orders_sent : int;
    mutable tokens_passed : int;
    mutable nonsense : int;
    held_limit : int;
    mutable held_bytes : int;
    mutable held_peak : int;
    mutable holding_credit : bool;
    mutable credit_held : int;
  }

  val create : Consort.Layer.ctx -> header Consort.Layer.out -> t
  val valid : t -> int -> bool
  val sequencer : int
  val check_held : t -> unit
  val seq_deliver : t -> unit
  val note_unsent : t -> int -> unit
  val in_turn : t -> int -> bool
  val take_turn : t -> unit
  val tok_deliver : t -> unit
  val stamp_queue : t -> int -> int -> int * int
  val pass_on : t -> int -> int -> int -> unit
  val up : t -> Consort.Event.src -> header -> Consort.Msg.t -> unit
  val dn : t -> Consort.Event.dst -> Consort.Msg.t -> unit
  val up_ctl : t -> Consort.Event.up_ctl -> unit
  val dn_ctl : t -> Consort.Event.dn_ctl -> unit
  val timer : t -> 'a -> unit
  val counters : t -> (string * int) list
end = struct
  type header =
    | Pass  (** a send: not ordered *)
    | Data  (** a cast without its place: ordered by the sequencer, or at the end of the view *)
    | Order of (int * int) list  (** sequencer: the next casts, as runs (origin, how many) *)
    | Stamped of int  (** token: a cast and its place in the view's order *)
    | Token of { next : int; idle : int }
        (** token: the next place, and holders in a row with nothing to order *)
    | Want  (** token: this member has casts waiting for the token *)
    | Placed of int
        (** sequencer: a cast of the sequencer, ordered as it goes, and its place in the view's
            order *)

  let name = "total"

  let codec =
    Codec.(
      union "total"
        [
          case 0 "pass" unit (function Pass -> Some () | _ -> None) (fun () -> Pass);
          case 1 "data" unit (function Data -> Some () | _ -> None) (fun () -> Data);
          case 2 "order"
            (list ~max:max_runs (pair varint varint))
            (function Order l -> Some l | _ -> None)
            (fun l -> Order l);
          case 3 "stamped" varint (function Stamped s -> Some s | _ -> None) (fun s -> Stamped s);
          case 4 "token" (pair varint varint)
            (function Token { next; idle } -> Some (next, idle) | _ -> None)
            (fun (next, idle) -> Token { next; idle });
          case 5 "want" unit (function Want -> Some () | _ -> None) (fun () -> Want);
          case 6 "placed" varint (function Placed p -> Some p | _ -> None) (fun p -> Placed p);
        ])

  let pp_header ppf = function
    | Pass -> Fmt.string ppf "pass"
    | Data -> Fmt.string ppf "data"
    | Order l -> Fmt.pf ppf "order(%a)" Fmt.(list ~sep:comma (pair ~sep:(any "x") int int)) l
    | Stamped s -> Fmt.pf ppf "stamped(%d)" s
    | Token { next; idle } -> Fmt.pf ppf "token(next %d, idle %d)" next idle
    | Want -> Fmt.string ppf "want"
    | Placed p -> Fmt.pf ppf "placed(%d)" p

  let provides = [ total_order ]
  let requires = [ Gmp.membership ]

  type run = { origin : int; mutable left : int }

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    proto : protocol;
    n : int;
    me : int;
    srcs : Event.src array; (* [Cast_from o] by origin: a delivery allocates none *)
    pending : Pend.t array;
    (* per origin, in FIFO order: casts received without a place
           (sequencer: not yet delivered; token: cast at a flush) *)
    (* sequencer *)
    runs : run Queue.t; (* the order known and not yet delivered *)
    unsent : int array;
    (* at the sequencer: per origin, casts not yet ordered (ordered
           together, by origin, in the order of [unsent_order]) *)
    unsent_order : int array; (* origins with casts not yet ordered, first come first *)
    mutable unsent_n : int;
    mutable armed : bool;
    mutable places : int; (* at the sequencer: places given, by its orders and its own casts *)
    mutable known : int; (* places known here: runs received and the sequencer's casts *)
    (* token *)
    stamped : (int, int * Msg.t) Hashtbl.t; (* place -> origin, cast *)
    mutable next_deliver : int;
    mutable holding : (int * int) option; (* the token: next place, idle count *)
    outq : Msg.t Queue.t; (* own casts waiting for the token *)
    mutable outq_bytes : int;
    queue_limit : int;
    burst : int;
    wants : bool array;
    mutable want_sent : bool;
    (* both *)
    mutable blocked : bool;
    mutable synced : bool; (* a flush round has completed here *)
    mutable flow_below : bool;
    mutable flow_told : bool;
    mutable stopped : bool;
    mutable ordered : int;
    mutable at_flush : int;
    mutable skipped : int;
    mutable orders_sent : int;
    mutable tokens_passed : int;
    mutable nonsense : int;
    (* bounds on what waits for its place *)
    held_limit : int;
    mutable held_bytes : int;
    mutable held_peak : int;
    mutable holding_credit : bool;
    mutable credit_held : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    let me = ctx.view.rank in
    let proto =
      match protocol ctx.params with
      | Ok p -> p
      | Error e ->
          Log.err (fun m -> m "%s: using the sequencer" e);
          Sequencer
    in
    {
      out;
      now = ctx.now;
      proto;
      n;
      me;
      srcs = Array.init n (fun o -> Event.Cast_from o);
      pending = Array.init n (fun _ -> Pend.create ());
      runs = Queue.create ();
      unsent = Array.make n 0;
      unsent_order = Array.make n 0;
      unsent_n = 0;
      armed = false;
      places = 0;
      known = 0;
      stamped = Hashtbl.create 64;
      next_deliver = 0;
      (* The token starts parked at the view's first member. *)
      holding = (if me = 0 && proto = Token then Some (0, n) else None);
      outq = Queue.create ();
      outq_bytes = 0;
      queue_limit = Params.int ctx.params Param.queue;
      burst = max 1 (Params.int ctx.params Param.burst);
      wants = Array.make n false;
      want_sent = false;
      blocked = false;
      synced = false;
      flow_below = false;
      flow_told = false;
      stopped = false;
      ordered = 0;
      at_flush = 0;
      skipped = 0;
      orders_sent = 0;
      tokens_passed = 0;
      nonsense = 0;
      held_limit = max 1024 (Params.int ctx.params Param.held);
      held_bytes = 0;
      held_peak = 0;
      holding_credit = false;
      credit_held = 0;
    }

  let valid t r = r >= 0 && r < t.n
  let sequencer = 0
  let deliver t o msg = t.out.up t.srcs.(o) msg

  (* What waits here for its place is bounded: over [total.held] bytes,
     this member stops returning flow control credit (Mflow) for the
     casts of every origin but the sequencer (whose orders it waits for),
     so every sender slows down to what it can order; at half, it returns
     the credit again. Nothing is dropped. *)
  let check_held t =
    if t.held_bytes > t.held_peak then t.held_peak <- t.held_bytes;
    if (not t.holding_credit) && t.held_bytes > t.held_limit && not t.stopped then begin
      t.holding_credit <- true;
      t.credit_held <- t.credit_held + 1;
      Log.warn (fun m ->
          m "rank %d: %d bytes of casts wait for their place (total.held %d): credit held back" t.me
            t.held_bytes t.held_limit);
      t.out.dn_ctl
        (Mflow.Hold_credit
           {
             who = "total";
             hold = true;
             except = (match t.proto with Sequencer -> [ 0 ] | Token -> []);
           })
    end
    else if t.holding_credit && t.held_bytes <= t.held_limit / 2 then begin
      t.holding_credit <- false;
      if not t.stopped then
        t.out.dn_ctl (Mflow.Hold_credit { who = "total"; hold = false; except = [] })
    end

  let held t d =
    t.held_bytes <- t.held_bytes + d;
    check_held t

  let flow t =
    let b = t.flow_below || t.outq_bytes > t.queue_limit in
    if b <> t.flow_told then begin
      t.flow_told <- b;
      t.out.up_ctl (Event.Blocked b)
    end

  (* {1 Sequencer} *)

  (* Deliver what the order says, as far as the casts are there. State is
     updated before each delivery: the application may cast from inside
     it, which re-enters here. *)
  let rec seq_deliver t =
    if (not t.stopped) && not (Queue.is_empty t.runs) then begin
      let r = Queue.peek t.runs in
      let q = t.pending.(r.origin) in
      if not (Pend.is_empty q) then begin
        let m = Pend.pop q in
        held t (-Msg.length m);
        r.left <- r.left - 1;
        if r.left = 0 then ignore (Queue.pop t.runs);
        t.ordered <- t.ordered + 1;
        deliver t r.origin m;
        seq_deliver t
      end
    end

  (* A cast from [o] to order: noted under its origin. The casts of one
     origin waiting together are ordered together, in their FIFO order:
     any order that keeps each origin's is the same to the members, and
     an order has then at most one run per origin. *)
  let note_unsent t o =
    if t.unsent.(o) = 0 then begin
      t.unsent_order.(t.unsent_n) <- o;
      t.unsent_n <- t.unsent_n + 1
    end;
    t.unsent.(o) <- t.unsent.(o) + 1

  (* The runs not yet ordered, in orders of at most [order_runs] runs
     (each run at most [max_run] casts). *)
  let send_order t =
    t.armed <- false;
    if t.unsent_n > 0 && not t.stopped then begin
      let runs = ref [] in
      for i = t.unsent_n - 1 downto 0 do
        let o = t.unsent_order.(i) in
        let k = t.unsent.(o) in
        t.unsent.(o) <- 0;
        let rec split k acc =
          if k <= max_run then (o, k) :: acc else split (k - max_run) ((o, max_run) :: acc)
        in
        runs := List.rev_append (split k []) !runs
      done;
      t.unsent_n <- 0;
      let rec chunks l =
        match l with
        | [] -> ()
        | _ ->
            let c = List.filteri (fun i _ -> i < order_runs) l in
            let rest = List.filteri (fun i _ -> i >= order_runs) l in
            t.orders_sent <- t.orders_sent + 1;
            t.places <- List.fold_left (fun a (_, k) -> a + k) t.places c;
            t.out.dn Event.Cast (Order c) (Msg.empty ());
            chunks rest
      in
      chunks !runs
    end

  (* A cast whose place is known and that comes in its turn (the next run
     is its origin's and nothing of that origin waits) is delivered at once,
     without being held; then what the order says next, as far as it can. *)
  let in_turn t o =
    Pend.is_empty t.pending.(o) && (not (Queue.is_empty t.runs)) && (Queue.peek t.runs).origin = o

  let take_turn t =
    let r = Queue.peek t.runs in
    r.left <- r.left - 1;
    if r.left = 0 then ignore (Queue.pop t.runs);
    t.ordered <- t.ordered + 1

  let rec seq_data t o msg =
    if t.me <> sequencer && in_turn t o then begin
      take_turn t;
      deliver t o msg;
      seq_deliver t
    end
    else seq_hold t o msg

  and seq_hold t o msg =
    Pend.add msg t.pending.(o);
    held t (Msg.length msg);
    if t.me = sequencer then begin
      note_unsent t o;
      if not t.armed then begin
        t.armed <- true;
        t.out.alarm (t.now ())
      end
    end;
    seq_deliver t

  let seq_order t from runs =
    if
      from <> sequencer
      || not (List.for_all (fun (o, k) -> valid t o && k >= 1 && k <= max_run) runs)
    then t.nonsense <- t.nonsense + 1
    else begin
      List.iter
        (fun (origin, left) ->
          t.known <- t.known + left;
          Queue.add { origin; left } t.runs)
        runs;
      seq_deliver t
    end

  (* A cast of the sequencer, with its place: the next after its orders
     (which came before it: they are its casts too). Delivered at once when
     nothing ordered before it waits. *)
  let seq_placed t o place msg =
    if o <> sequencer || place <> t.known then begin
      t.nonsense <- t.nonsense + 1;
      Msg.release msg
    end
    else begin
      t.known <- t.known + 1;
      if Queue.is_empty t.runs && Pend.is_empty t.pending.(o) then begin
        t.ordered <- t.ordered + 1;
        deliver t o msg
      end
      else begin
        Queue.add { origin = o; left = 1 } t.runs;
        Pend.add msg t.pending.(o);
        held t (Msg.length msg);
        seq_deliver t
      end
    end

  (* The end of the view: every member that goes on with this one holds
     the same casts and the same orders (the flush below saw to it), so
     each delivers the same sequence: what the order says (skipping casts
     that no member going on received: their origin and the sequencer
     failed), then the casts without a place, by origin rank, each
     origin's in FIFO order. *)
  let seq_tail t =
    Queue.iter
      (fun r ->
        for _ = 1 to r.left do
          match Pend.take_opt t.pending.(r.origin) with
          | Some m ->
              t.ordered <- t.ordered + 1;
              deliver t r.origin m
          | None -> t.skipped <- t.skipped + 1
        done)
      t.runs;
    Queue.clear t.runs

  (* {1 Token} *)

  let rec tok_deliver t =
    if not t.stopped then
      match Hashtbl.find_opt t.stamped t.next_deliver with
      | Some (o, m) ->
          Hashtbl.remove t.stamped t.next_deliver;
          held t (-Msg.length m);
          t.next_deliver <- t.next_deliver + 1;
          t.ordered <- t.ordered + 1;
          deliver t o m;
          tok_deliver t
      | None -> ()

  (* Stamp what waits, [k] casts stamped so far (a cast made while one
     goes down, from a delivery, is stamped in the same holding). *)
  let rec stamp_queue t next k =
    if k < t.burst && not (Queue.is_empty t.outq) then begin
      let m = Queue.pop t.outq in
      t.outq_bytes <- t.outq_bytes - Msg.length m;
      t.out.dn Event.Cast (Stamped next) m;
      stamp_queue t (next + 1) (k + 1)
    end
    else begin
      if Queue.is_empty t.outq then t.want_sent <- false;
      flow t;
      (next, k)
    end

  (* The token after [k] casts were stamped: kept, or passed on. *)
  let pass_on t next k idle =
    let idle = if k > 0 then 0 else idle + 1 in
    let wanted = Array.exists Fun.id t.wants || not (Queue.is_empty t.outq) in
    if t.n = 1 || (idle >= t.n && not wanted) then t.holding <- Some (next, idle)
    else begin
      t.tokens_passed <- t.tokens_passed + 1;
      t.out.dn (Event.Send ((t.me + 1) mod t.n)) (Token { next; idle }) (Msg.empty ())
    end

  (* This member holds the token: order what waits, then pass it on,
     unless a whole round of holders had nothing to order and no member
     asked for it: then it stays here until one does. After the block the
     token stays where it is: the flush decides the rest. *)
  let use_token t next idle =
    if t.blocked || t.stopped then t.holding <- Some (next, idle)
    else begin
      t.holding <- None;
      let next, k = stamp_queue t next 0 in
      pass_on t next k idle
    end

  let tok_cast t msg =
    Queue.add msg t.outq;
    t.outq_bytes <- t.outq_bytes + Msg.length msg;
    match t.holding with
    | Some (next, _) -> use_token t next 0
    | None ->
        if not t.want_sent then begin
          t.want_sent <- true;
          t.out.dn Event.Cast Want (Msg.empty ())
        end;
        flow t

  let tok_stamped t o place msg =
    t.wants.(o) <- false;
    if place < t.next_deliver || place >= t.next_deliver + max_ahead || Hashtbl.mem t.stamped place
    then begin
      t.nonsense <- t.nonsense + 1;
      Msg.release msg
    end
    else if place = t.next_deliver && Hashtbl.length t.stamped = 0 then begin
      (* Its turn: delivered at once. *)
      t.next_deliver <- place + 1;
      t.ordered <- t.ordered + 1;
      deliver t o msg;
      tok_deliver t
    end
    else begin
      Hashtbl.replace t.stamped place (o, msg);
      held t (Msg.length msg);
      tok_deliver t
    end

  let tok_tail t =
    let rest = Hashtbl.fold (fun place om acc -> (place, om) :: acc) t.stamped [] in
    Hashtbl.reset t.stamped;
    List.iter
      (fun (place, (o, m)) ->
        if place > t.next_deliver then t.skipped <- t.skipped + (place - t.next_deliver);
        t.next_deliver <- place + 1;
        t.ordered <- t.ordered + 1;
        deliver t o m)
      (List.sort (fun (a, _) (b, _) -> compare a b) rest)

  (* {1 Events} *)

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | Event.Send_from _, Pass -> t.out.up src msg
      | Event.Cast_from o, Data when valid t o -> (
          match t.proto with
          | Sequencer -> seq_data t o msg
          | Token ->
              t.wants.(o) <- false;
              Pend.add msg t.pending.(o))
      | Event.Cast_from o, Order runs when valid t o && t.proto = Sequencer ->
          Msg.release msg;
          seq_order t o runs
      | Event.Cast_from o, Placed place when valid t o && t.proto = Sequencer ->
          seq_placed t o place msg
      | Event.Cast_from o, Stamped place when valid t o && t.proto = Token ->
          tok_stamped t o place msg
      | Event.Send_from _, Token { next; idle } when t.proto = Token -> (
          Msg.release msg;
          match t.holding with
          | Some _ -> t.nonsense <- t.nonsense + 1
          | None when next < t.next_deliver -> t.nonsense <- t.nonsense + 1
          | None -> use_token t next idle)
      | Event.Cast_from o, Want when valid t o && t.proto = Token -> (
          Msg.release msg;
          if o <> t.me then t.wants.(o) <- true;
          match t.holding with Some (next, _) when o <> t.me -> use_token t next 0 | _ -> ())
      | _ ->
          t.nonsense <- t.nonsense + 1;
          Msg.release msg

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Send _ -> t.out.dn dst Pass msg
      | Event.Cast -> (
          match t.proto with
          | Sequencer when t.me <> sequencer -> t.out.dn dst Data msg
          | Sequencer ->
              (* The sequencer orders its own cast as it goes, after what it
                 ordered before: the order it has not cast yet goes first. *)
              if t.unsent_n > 0 then send_order t;
              let place = t.places in
              t.places <- place + 1;
              t.out.dn dst (Placed place) msg
          | Token when t.blocked -> t.out.dn dst Data msg
          | Token -> tok_cast t msg)

  let up_ctl t e =
    match e with
    | Gmp.Block ->
        (* Casts still waiting for the token go out now, without a place:
           the flush counts them, and they are ordered at its end. *)
        if not t.blocked then begin
          t.blocked <- true;
          while not (Queue.is_empty t.outq) do
            let m = Queue.pop t.outq in
            t.outq_bytes <- t.outq_bytes - Msg.length m;
            t.out.dn Event.Cast Data m
          done;
          t.want_sent <- false
        end;
        t.out.up_ctl e;
        flow t
    | Event.Blocked b ->
        t.flow_below <- b;
        flow t
    | Gmp.Synced | Gmp.Excluded ->
        t.synced <- true;
        t.out.up_ctl e
    | e -> t.out.up_ctl e

  let tail t =
    (* Own casts that never went out (the view ended without a block):
       this member delivers them itself, last. *)
    while not (Queue.is_empty t.outq) do
      Pend.add (Queue.pop t.outq) t.pending.(t.me)
    done;
    t.outq_bytes <- 0;
    (match t.proto with Sequencer -> seq_tail t | Token -> tok_tail t);
    Array.iteri
      (fun o q ->
        while not (Pend.is_empty q) do
          let m = Pend.pop q in
          t.at_flush <- t.at_flush + 1;
          deliver t o m
        done)
      t.pending

  (* What is still held once stopped (nothing after a tail). *)
  let release_all t =
    Array.iter Pend.clear t.pending;
    Hashtbl.iter (fun _ (_, m) -> Msg.release m) t.stamped;
    Hashtbl.reset t.stamped;
    Queue.iter Msg.release t.outq;
    Queue.clear t.outq;
    t.outq_bytes <- 0;
    Queue.clear t.runs

  let dn_ctl t e =
    match e with
    | Event.Stop when not t.stopped ->
        (* The layers below deliver what they still have first. The
           rest of the view is delivered only after a flush: a member
           that stops otherwise (its transport closed) has agreed on
           nothing with anyone. *)
        t.out.dn_ctl e;
        if t.synced || t.n = 1 then tail t;
        t.stopped <- true;
        release_all t
    | e -> t.out.dn_ctl e

  let timer t _now = if t.armed then send_order t

  let counters t =
    [
      ("ordered", t.ordered);
      ("at_flush", t.at_flush);
      ("skipped", t.skipped);
      ("orders_sent", t.orders_sent);
      ("tokens_passed", t.tokens_passed);
      ("nonsense", t.nonsense);
      ( "unordered",
        Array.fold_left (fun a q -> a + Pend.length q) 0 t.pending + Hashtbl.length t.stamped );
      ("waiting_token", Queue.length t.outq);
      ("holding", match t.holding with Some _ -> 1 | None -> 0);
      ("held_bytes", t.held_bytes);
      ("held_peak", t.held_peak);
      ("credit_held", t.credit_held);
    ]
end

(* The common case of a cast. Sequencer protocol: down, a member's cast
   (the sequencer's when it has no order left to cast: its place is the
   field); up, another member's cast ([Data]: delivered at once when it
   comes in its turn, its order came first; otherwise held in [pending]
   until its order comes, and at the sequencer noted in [unsent]), a cast
   of the sequencer with the next place (delivered at once when nothing
   ordered before it waits, held otherwise), and an order of one run,
   taken in (what it orders follows, after the cast). Token protocol:
   down, a cast of the holder of the token with nothing waiting for it
   (stamped with the next place; what the token does then follows the
   cast); up, a stamped cast within the window (delivered at once when
   its place is the next and nothing stamped waits, held otherwise), and
   a cast without a place (the flush's, held). Four fields: [f], [k], [f2],
   [k2]; all but [f] 0: [f] is 0 for [Data], [2p + 1] for [Placed p],
   [2p + 2] for [Stamped p]; [k > 0]: [Order [(f, k)]], or with [k2 > 0]
   [Order [(f, k); (f2, k2)]] (an order of [order_runs] runs). Other
   fields are not the case: the layered header they make is refused
   there ([nonsense]). *)
module F = struct
  include L

  let () = assert (order_runs = 2)

  (* The fields hold an order. *)
  let is_order a off = a.(off + 1) <> 0 || a.(off + 2) <> 0 || a.(off + 3) <> 0
  let run_ok t o k = valid t o && k >= 1 && k <= max_run

  (* The runs of an order that the case takes: from the sequencer, valid;
     the second, if any, too. *)
  let order_ok t o a off =
    t.proto = Sequencer && o = sequencer
    && run_ok t a.(off) a.(off + 1)
    && ((a.(off + 2) = 0 && a.(off + 3) = 0) || run_ok t a.(off + 2) a.(off + 3))

  (* Sequencer, [f = 0] ([Data]) or the sequencer's [Placed]: delivered
     at once (not held). *)
  let seq_at_once t o f =
    if f = 0 then t.me <> sequencer && in_turn t o
    else Queue.is_empty t.runs && Pend.is_empty t.pending.(o)

  let cast =
    {
      Layer.nfields = 4;
      live = None;
      up_live = false;
      length = false;
      framed = false;
      size =
        (fun a off ->
          (* [is_order] inline: the stack sums the sizes above a layer for
             each cast. *)
          if a.(off + 1) = 0 && a.(off + 2) = 0 && a.(off + 3) = 0 then
            if a.(off) = 0 then 1 else 1 + Codec.varint_size ((a.(off) - 1) / 2)
          else
            2
            + Codec.varint_size a.(off)
            + Codec.varint_size a.(off + 1)
            +
            if a.(off + 2) = 0 && a.(off + 3) = 0 then 0
            else Codec.varint_size a.(off + 2) + Codec.varint_size a.(off + 3));
      dn_ok =
        (fun t dst _ ->
          (not t.stopped) && dst == Event.Cast
          &&
          match t.proto with
          | Sequencer -> t.me <> sequencer || t.unsent_n = 0
          | Token -> (not t.blocked) && t.holding <> None && Queue.is_empty t.outq);
      dn_fast =
        (fun t _ _ _ ~layered:_ a off ->
          a.(off + 1) <- 0;
          a.(off + 2) <- 0;
          a.(off + 3) <- 0;
          match t.proto with
          | Sequencer ->
              if t.me = sequencer then begin
                let place = t.places in
                t.places <- place + 1;
                a.(off) <- (2 * place) + 1
              end
              else a.(off) <- 0
          | Token -> (
              match t.holding with
              | Some (next, _) ->
                  t.holding <- None;
                  a.(off) <- (2 * next) + 2
              | None -> ()));
      dn_after =
        (fun t _ _ ~up:_ a off ->
          match t.proto with
          | Sequencer -> ()
          | Token ->
              let next, k = stamp_queue t (((a.(off) - 2) / 2) + 1) 1 in
              pass_on t next k 0);
      up_ok =
        (fun t src _ a off ->
          (not t.stopped)
          &&
          match src with
          | Event.Cast_from o -> (
              valid t o
              &&
              let f = a.(off) in
              if is_order a off then order_ok t o a off
              else
                match t.proto with
                | Sequencer -> f = 0 || (f land 1 = 1 && o = sequencer && f / 2 = t.known)
                | Token ->
                    f = 0
                    || f land 1 = 0
                       &&
                       let p = (f - 2) / 2 in
                       p >= t.next_deliver
                       && p < t.next_deliver + max_ahead
                       && not (Hashtbl.mem t.stamped p))
          | _ -> false);
      up_fast =
        (fun t src msg _ ~layered a off ->
          match src with
          | Event.Cast_from o -> (
              let f = a.(off) in
              if a.(off + 1) > 0 then begin
                (* An order: its runs taken in; what it orders goes up
                   after. *)
                Msg.release msg;
                t.known <- t.known + a.(off + 1);
                Queue.add { origin = f; left = a.(off + 1) } t.runs;
                let k2 = a.(off + 3) in
                if k2 > 0 then begin
                  t.known <- t.known + k2;
                  Queue.add { origin = a.(off + 2); left = k2 } t.runs
                end;
                Layer.held
              end
              else
                match t.proto with
                | Sequencer ->
                    if seq_at_once t o f then begin
                      if f = 0 then take_turn t
                      else begin
                        t.known <- t.known + 1;
                        t.ordered <- t.ordered + 1
                      end;
                      src
                    end
                    else begin
                      (* Held until its order comes (the sequencer's own
                         cast: its place is known, it waits for those
                         ordered before it). The bytes are counted here,
                         checked against the bound after. *)
                      if f <> 0 then begin
                        t.known <- t.known + 1;
                        Queue.add { origin = o; left = 1 } t.runs
                      end;
                      let len = Pend.add_head (layered.head ()) msg t.pending.(o) in
                      Msg.release msg;
                      t.held_bytes <- t.held_bytes + len;
                      if f = 0 && t.me = sequencer then begin
                        note_unsent t o;
                        if not t.armed then begin
                          t.armed <- true;
                          t.out.alarm (t.now ())
                        end
                      end;
                      Layer.held
                    end
                | Token ->
                    t.wants.(o) <- false;
                    if f = 0 then begin
                      ignore (Pend.add_head (layered.head ()) msg t.pending.(o) : int);
                      Msg.release msg;
                      Layer.held
                    end
                    else
                      let p = (f - 2) / 2 in
                      if p = t.next_deliver && Hashtbl.length t.stamped = 0 then begin
                        t.next_deliver <- p + 1;
                        t.ordered <- t.ordered + 1;
                        src
                      end
                      else begin
                        let m = layered.push msg in
                        Hashtbl.replace t.stamped p (o, m);
                        t.held_bytes <- t.held_bytes + Msg.length m;
                        Layer.held
                      end)
          | _ -> src);
      up_after =
        (fun t _ _ _ _ ->
          check_held t;
          match t.proto with Sequencer -> seq_deliver t | Token -> tok_deliver t);
      expand =
        (fun a off ->
          let f = a.(off) and k = a.(off + 1) in
          if is_order a off then
            if a.(off + 2) = 0 && a.(off + 3) = 0 then Order [ (f, k) ]
            else Order [ (f, k); (a.(off + 2), a.(off + 3)) ]
          else if f = 0 then Data
          else if f land 1 = 1 then Placed (f / 2)
          else Stamped ((f - 2) / 2));
    }

  let state t =
    let msgs ppf q =
      Fmt.(Dump.list Dump.string) ppf (List.map Msg.to_string (List.of_seq (Queue.to_seq q)))
    in
    let pairs = Fmt.(Dump.list (pair ~sep:(any "x") int int)) in
    Fmt.str
      "%s stopped %b blocked %b synced %b flow %b/%b; pending %a; runs %a; unsent %a armed %b; \
       places %d known %d; stamped %a; next %d; holding %a; outq %a (%d); wants %a want_sent %b; \
       held %d peak %d holding_credit %b; %a"
      (protocol_name t.proto) t.stopped t.blocked t.synced t.flow_below t.flow_told
      Fmt.(array ~sep:semi (using Pend.strings (Dump.list Dump.string)))
      t.pending pairs
      (List.map (fun r -> (r.origin, r.left)) (List.of_seq (Queue.to_seq t.runs)))
      pairs
      (List.init t.unsent_n (fun i ->
           let o = t.unsent_order.(i) in
           (o, t.unsent.(o))))
      t.armed t.places t.known
      Fmt.(Dump.list (pair ~sep:(any "=") int (pair ~sep:(any ":") int Dump.string)))
      (List.sort compare
         (Hashtbl.fold (fun k (o, m) acc -> (k, (o, Msg.to_string m)) :: acc) t.stamped []))
      t.next_deliver
      Fmt.(option ~none:(any "-") (pair ~sep:(any "/") int int))
      t.holding msgs t.outq t.outq_bytes
      Fmt.(array ~sep:sp bool)
      t.wants t.want_sent t.held_bytes t.held_peak t.holding_credit
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t =
  Layer.fast_compress_send
    (module struct
      include F

      (* A send is not ordered: it goes down and up with the constant
         [Pass], as on the layered path. *)
      let send = Layer.constant_send codec Pass ~live:(fun t -> not t.stopped) ()

      let one a off f =
        a.(off) <- f;
        a.(off + 1) <- 0;
        a.(off + 2) <- 0;
        a.(off + 3) <- 0;
        true

      (* The inverse of [cast.expand]. *)
      let compress h a off =
        match h with
        | Data -> one a off 0
        | Placed p when p >= 0 -> one a off ((2 * p) + 1)
        | Stamped p when p >= 0 -> one a off ((2 * p) + 2)
        | Order [ (o, k) ] when o >= 0 && k >= 1 ->
            a.(off) <- o;
            a.(off + 1) <- k;
            a.(off + 2) <- 0;
            a.(off + 3) <- 0;
            true
        | Order [ (o, k); (o2, k2) ] when o >= 0 && k >= 1 && o2 >= 0 && k2 >= 1 ->
            a.(off) <- o;
            a.(off + 1) <- k;
            a.(off + 2) <- o2;
            a.(off + 3) <- k2;
            true
        | _ -> false
    end)
