open Consort

let src = Logs.Src.create "consort.sim" ~doc:"Deterministic network simulator"

module Log = (val Logs.src_log src : Logs.LOG)

type address = string

let pp_address = Fmt.string
let equal_address = String.equal
let address_to_string a = a
let address_of_string s = if s = "" then Error "empty address" else Ok s

type link = {
  latency : Time.t;
  jitter : Time.t;
  loss : float;
  duplicate : float;
  reorder : float;
  reorder_delay : Time.t;
}

let default_link =
  { latency = Time.of_ms 1; jitter = 0; loss = 0.; duplicate = 0.; reorder = 0.; reorder_delay = 0 }

let pp_link ppf l =
  Fmt.pf ppf "latency=%a jitter=%a loss=%g duplicate=%g reorder=%g reorder_delay=%a" Time.pp
    l.latency Time.pp l.jitter l.loss l.duplicate l.reorder Time.pp l.reorder_delay

let check_link l =
  let prob p = p >= 0. && p <= 1. in
  if l.latency < 0 || l.jitter < 0 || l.reorder_delay < 0 then
    invalid_arg "Sim: negative delay in link";
  if not (prob l.loss && prob l.duplicate && prob l.reorder) then
    invalid_arg "Sim: link probability outside [0, 1]"

type drop_reason = Loss | Partition | Crashed | Unbound | Filter | Mtu

let drop_reason_to_string = function
  | Loss -> "loss"
  | Partition -> "partition"
  | Crashed -> "crashed"
  | Unbound -> "unbound"
  | Filter -> "filter"
  | Mtu -> "mtu"

let pp_drop_reason ppf r = Fmt.string ppf (drop_reason_to_string r)

type handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

type control =
  | Drop_filter of (src:address -> Cstruct.t -> bool) option
  | Join_multicast of address

type info = {
  local : address;
  mtu : int;
  multicast : bool;
  sent : int;
  received : int;
  dropped : int;
}

(* A datagram on the wire. [epoch] is the destination's crash count when it
   was sent: a crash in between makes it stale. *)
type datagram = { id : int; from : address; dst : address; payload : string; epoch : int }
type kind = Fire of (unit -> unit) | Arrive of datagram

(* [idx] is the event's position in the heap, [-1] once it left it.
   [who] is the address whose process runs it ([""]: none): a datagram's
   destination, or the address whose code set the timer; an event of a
   paused address waits for the end of the pause. *)
type event = {
  mutable time : Time.t;
  mutable seq : int;
  mutable idx : int;
  kind : kind;
  who : string;
}

type t = {
  rng : Rng.t;
  net_mtu : int;
  pool : Pool.t;
  mutable now : Time.t;
  mutable seq : int;
  mutable heap : event array;
  mutable size : int;
  mutable default : link;
  links : (address * address, link) Hashtbl.t;
  slots : (address, slot) Hashtbl.t;
  mutable components : (address, int) Hashtbl.t option;
  mutable next_id : int;
  mutable hash : int;
  mutable trace_oc : out_channel option;
  mutable n_sent : int;
  mutable n_delivered : int;
  mutable n_duplicated : int;
  mutable n_loss : int;
  mutable n_partition : int;
  mutable n_crashed : int;
  mutable n_unbound : int;
  mutable n_filter : int;
  mutable n_mtu : int;
  mutable n_events : int;
  mutable current : string; (* the address whose code runs now, [""] if none *)
  paused : (string, Time.t) Hashtbl.t; (* address -> end of its pause *)
}

(* What is known of one address: the connection open there, if any, and
   its crashes. *)
and slot = { mutable conn : connection option; mutable epoch : int; mutable down : bool }

and connection = {
  sim : t;
  addr : address;
  slot : slot;
  mutable handler : handler;
  mutable live : bool;
  mutable filter : (src:address -> Cstruct.t -> bool) option;
  mutable c_sent : int;
  mutable c_received : int;
  mutable c_dropped : int;
}

type timer = { owner : t; ev : event }

let dummy = { time = 0; seq = 0; idx = -1; kind = Fire ignore; who = "" }

(* Event queue: a binary min-heap on (time, seq) whose events know their
   index, so that a cancelled timer is removed at once. *)

let before a b = a.time < b.time || (a.time = b.time && a.seq < b.seq)

let place t i ev =
  t.heap.(i) <- ev;
  ev.idx <- i

let rec sift_up t i ev =
  if i = 0 then place t 0 ev
  else
    let p = (i - 1) / 2 in
    let pe = t.heap.(p) in
    if before ev pe then begin
      place t i pe;
      sift_up t p ev
    end
    else place t i ev

let rec sift_down t i ev =
  let l = (2 * i) + 1 in
  if l >= t.size then place t i ev
  else
    let r = l + 1 in
    let c = if r < t.size && before t.heap.(r) t.heap.(l) then r else l in
    let ce = t.heap.(c) in
    if before ce ev then begin
      place t i ce;
      sift_down t c ev
    end
    else place t i ev

let insert (t : t) (ev : event) =
  if t.size = Array.length t.heap then begin
    let h = Array.make (2 * t.size) dummy in
    Array.blit t.heap 0 h 0 t.size;
    t.heap <- h
  end;
  ev.seq <- t.seq;
  t.seq <- t.seq + 1;
  t.size <- t.size + 1;
  sift_up t (t.size - 1) ev

let push ?(who = "") t time kind =
  let ev = { time = max time t.now; seq = 0; idx = -1; kind; who } in
  insert t ev;
  ev

let remove t ev =
  let i = ev.idx in
  let last = t.size - 1 in
  let moved = t.heap.(last) in
  t.heap.(last) <- dummy;
  t.size <- last;
  ev.idx <- -1;
  if i < last then
    if i > 0 && before moved t.heap.((i - 1) / 2) then sift_up t i moved else sift_down t i moved

let create ?(seed = 0) ?(mtu = 65507) ?(pool = Pool.default) ?(link = default_link) () =
  if mtu <= 0 then invalid_arg "Sim.create: mtu must be positive";
  check_link link;
  {
    rng = Rng.create seed;
    net_mtu = mtu;
    pool;
    now = Time.zero;
    seq = 0;
    heap = Array.make 256 dummy;
    size = 0;
    default = link;
    links = Hashtbl.create 16;
    slots = Hashtbl.create 64;
    components = None;
    next_id = 0;
    hash = 0;
    trace_oc = None;
    n_sent = 0;
    n_delivered = 0;
    n_duplicated = 0;
    n_loss = 0;
    n_partition = 0;
    n_crashed = 0;
    n_unbound = 0;
    n_filter = 0;
    n_mtu = 0;
    n_events = 0;
    current = "";
    paused = Hashtbl.create 8;
  }

(* Trace: every event is folded into a running hash as it happens, from its
   fields; its text line is made only while a trace channel is set. Formatting
   and digesting a line per datagram cost a third of a simulation's time. *)

let mix h x =
  let h = h lxor x * 0x2127599bf4325c37 in
  h lxor (h lsr 29)

let mix_string h s = mix (mix h (String.length s)) (Hashtbl.hash s)

(* A rare event (a partition, a crash, an open): its line is hashed whole. *)
let emit t line =
  t.hash <- mix_string (mix t.hash 0) line;
  match t.trace_oc with
  | None -> ()
  | Some oc ->
      output_string oc line;
      output_char oc '\n'

let tracef t fmt = Printf.ksprintf (emit t) ("%d " ^^ fmt) t.now

(* A frequent event: a tag, then its fields. *)
let tracing t = t.trace_oc <> None

let trace_line t fmt =
  match t.trace_oc with
  | None -> Printf.ifprintf stdout fmt
  | Some oc -> Printf.kfprintf (fun oc -> output_char oc '\n') oc ("%d " ^^ fmt) t.now

let trace_event t tag id from dst x =
  t.hash <- mix (mix_string (mix_string (mix (mix (mix t.hash tag) t.now) id) from) dst) x

let trace_hash t = Printf.sprintf "%016x" (mix t.hash 1 land max_int)
let set_trace_channel t oc = t.trace_oc <- oc

(* Links *)

let set_default_link t l =
  check_link l;
  t.default <- l

let set_link t ~src ~dst l =
  check_link l;
  Hashtbl.replace t.links (src, dst) l

let clear_link t ~src ~dst = Hashtbl.remove t.links (src, dst)

let link t ~src ~dst =
  if Hashtbl.length t.links = 0 then t.default
  else match Hashtbl.find_opt t.links (src, dst) with Some l -> l | None -> t.default

(* Partitions *)

let reachable t ~src ~dst =
  match t.components with
  | None -> true
  | Some comp -> (
      String.equal src dst
      ||
      match (Hashtbl.find_opt comp src, Hashtbl.find_opt comp dst) with
      | Some a, Some b -> a = b
      | _ -> false)

let partition t components =
  let comp = Hashtbl.create 64 in
  List.iteri
    (fun i c ->
      List.iter
        (fun a ->
          if Hashtbl.mem comp a then invalid_arg ("Sim.partition: " ^ a ^ " listed twice");
          Hashtbl.replace comp a i)
        c)
    components;
  t.components <- Some comp;
  let desc = String.concat "|" (List.map (String.concat ",") components) in
  Log.info (fun m -> m "%a: partition %s" Time.pp t.now desc);
  tracef t "partition %s" desc

let heal t =
  t.components <- None;
  Log.info (fun m -> m "%a: heal" Time.pp t.now);
  tracef t "heal"

(* Endpoints *)

let slot t addr =
  match Hashtbl.find_opt t.slots addr with
  | Some s -> s
  | None ->
      let s = { conn = None; epoch = 0; down = false } in
      Hashtbl.replace t.slots addr s;
      s

let epoch t addr = match Hashtbl.find_opt t.slots addr with Some s -> s.epoch | None -> 0

let is_open t addr =
  match Hashtbl.find_opt t.slots addr with Some { conn = Some _; _ } -> true | _ -> false

let no_handler = { recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }

let open_ t addr f =
  match address_of_string addr with
  | Error _ -> Error (`Bad_address addr)
  | Ok _ -> (
      let s = slot t addr in
      match s.conn with
      | Some _ -> Error (`Address_in_use addr)
      | None -> (
          let c =
            {
              sim = t;
              addr;
              slot = s;
              handler = no_handler;
              live = true;
              filter = None;
              c_sent = 0;
              c_received = 0;
              c_dropped = 0;
            }
          in
          s.conn <- Some c;
          let restart = s.down in
          s.down <- false;
          tracef t "%s %s" (if restart then "restart" else "open") addr;
          match f c with
          | h ->
              c.handler <- h;
              Ok c
          | exception e ->
              c.live <- false;
              s.conn <- None;
              raise e))

let detach c =
  c.live <- false;
  match c.slot.conn with Some c' when c' == c -> c.slot.conn <- None | _ -> ()

let close c =
  if c.live then begin
    detach c;
    tracef c.sim "close %s" c.addr;
    c.handler.closed ()
  end

let crash t addr =
  let s = slot t addr in
  s.epoch <- s.epoch + 1;
  s.down <- true;
  Log.info (fun m -> m "%a: crash %s" Time.pp t.now addr);
  tracef t "crash %s" addr;
  match s.conn with
  | None -> ()
  | Some c ->
      detach c;
      c.handler.closed ()

(* Sending *)

let uniform t n =
  if n < 0x3FFFFFFF then Rng.int t.rng n
  else Int64.to_int (Int64.rem (Rng.bits64 t.rng) (Int64.of_int n))

let delay t l =
  let d = if l.jitter > 0 then l.latency + uniform t (l.jitter + 1) else l.latency in
  if l.reorder_delay > 0 && Rng.chance t.rng l.reorder then d + 1 + uniform t l.reorder_delay else d

let count_drop t = function
  | Loss -> t.n_loss <- t.n_loss + 1
  | Partition -> t.n_partition <- t.n_partition + 1
  | Crashed -> t.n_crashed <- t.n_crashed + 1
  | Unbound -> t.n_unbound <- t.n_unbound + 1
  | Filter -> t.n_filter <- t.n_filter + 1
  | Mtu -> t.n_mtu <- t.n_mtu + 1

let drop t ~id ~from ~dst reason =
  count_drop t reason;
  Log.debug (fun m -> m "%a: drop #%d %s>%s (%a)" Time.pp t.now id from dst pp_drop_reason reason);
  trace_event t 2 id from dst (Hashtbl.hash reason);
  if tracing t then trace_line t "drop #%d %s>%s %s" id from dst (drop_reason_to_string reason)

let transmit t c payload sum dst =
  let id = t.next_id in
  t.next_id <- id + 1;
  t.n_sent <- t.n_sent + 1;
  c.c_sent <- c.c_sent + 1;
  let from = c.addr in
  let size = String.length payload in
  let sent at =
    trace_event t 1 id from dst (mix (mix sum size) at);
    if not (tracing t) then ()
    else if at < 0 then trace_line t "send #%d %s>%s %d %08x at=-" id from dst size sum
    else trace_line t "send #%d %s>%s %d %08x at=%d" id from dst size sum at
  in
  if not (reachable t ~src:from ~dst) then begin
    sent (-1);
    drop t ~id ~from ~dst Partition
  end
  else
    let l = link t ~src:from ~dst in
    if Rng.chance t.rng l.loss then begin
      sent (-1);
      drop t ~id ~from ~dst Loss
    end
    else begin
      let d = { id; from; dst; payload; epoch = epoch t dst } in
      let ev = push ~who:dst t (t.now + delay t l) (Arrive d) in
      sent ev.time;
      if Rng.chance t.rng l.duplicate then begin
        let ev = push ~who:dst t (t.now + delay t l) (Arrive d) in
        t.n_duplicated <- t.n_duplicated + 1;
        trace_event t 3 id from dst ev.time;
        if tracing t then trace_line t "dup #%d %s>%s at=%d" id from dst ev.time
      end
    end

let send_all c dsts msg =
  let t = c.sim in
  if not c.live then Error `Closed
  else
    match dsts with
    | [] -> Ok ()
    | _ when List.exists (String.equal "") dsts -> Error (`Bad_address "")
    | _ ->
        let size = Msg.length msg in
        if size > t.net_mtu then begin
          List.iter
            (fun dst ->
              c.c_dropped <- c.c_dropped + 1;
              count_drop t Mtu;
              tracef t "drop - %s>%s mtu %d" c.addr dst size)
            dsts;
          Error (`Too_big (size, t.net_mtu))
        end
        else
          let payload = Msg.to_string msg in
          let sum = Hashtbl.hash payload in
          List.iter (transmit t c payload sum) dsts;
          Ok ()

let send c ~dst msg = send_all c [ dst ] msg
let cast c ~dsts msg = send_all c dsts msg

let arrive t d =
  let { id; from; dst; _ } = d in
  if not (reachable t ~src:from ~dst) then drop t ~id ~from ~dst Partition
  else
    match Hashtbl.find_opt t.slots dst with
    | Some s when s.epoch <> d.epoch -> drop t ~id ~from ~dst Crashed
    | Some { conn = Some c; _ } -> (
        let v = Pool.of_string t.pool d.payload in
        match c.filter with
        | Some f when f ~src:from (Iovec.cstruct v) ->
            Iovec.release v;
            c.c_dropped <- c.c_dropped + 1;
            drop t ~id ~from ~dst Filter
        | _ ->
            c.c_received <- c.c_received + 1;
            t.n_delivered <- t.n_delivered + 1;
            trace_event t 4 id from dst 0;
            if tracing t then trace_line t "deliver #%d %s>%s" id from dst;
            c.handler.recv ~src:from v)
    | Some { down = true; _ } -> drop t ~id ~from ~dst Crashed
    | _ -> drop t ~id ~from ~dst Unbound

let control c = function
  | _ when not c.live -> Error `Closed
  | Drop_filter f ->
      c.filter <- f;
      Ok ()
  | Join_multicast _ -> Error (`Unsupported "multicast in the simulator")

let query c : info =
  {
    local = c.addr;
    mtu = c.sim.net_mtu;
    multicast = false;
    sent = c.c_sent;
    received = c.c_received;
    dropped = c.c_dropped;
  }

(* Time *)

let now t = t.now
let at t time f = { owner = t; ev = push ~who:t.current t time (Fire f) }
let cancel tm = if tm.ev.idx >= 0 then remove tm.owner tm.ev

(* Pauses *)

let within t addr f =
  let saved = t.current in
  t.current <- addr;
  match f () with
  | x ->
      t.current <- saved;
      x
  | exception e ->
      t.current <- saved;
      raise e

let pause t addr ~until =
  if until > t.now then begin
    let u = match Hashtbl.find_opt t.paused addr with Some u -> max u until | None -> until in
    Hashtbl.replace t.paused addr u;
    Log.info (fun m -> m "%a: pause %s until %a" Time.pp t.now addr Time.pp u);
    tracef t "pause %s until %d" addr u
  end

let is_paused t addr =
  match Hashtbl.find_opt t.paused addr with Some u -> u > t.now | None -> false

(* The end of [ev]'s pause, if its address is paused when it is due. *)
let held t ev =
  if ev.who = "" || Hashtbl.length t.paused = 0 then None
  else
    match Hashtbl.find_opt t.paused ev.who with
    | Some u when u > ev.time -> Some u
    | Some _ ->
        Hashtbl.remove t.paused ev.who;
        None
    | None -> None

let step t =
  if t.size = 0 then false
  else begin
    let ev = t.heap.(0) in
    remove t ev;
    (match held t ev with
    | Some u ->
        (* The process is not running: what it would do waits, in order,
           for the end of its pause (a timer keeps its handle). *)
        ev.time <- u;
        insert t ev
    | None -> (
        t.now <- ev.time;
        t.n_events <- t.n_events + 1;
        let saved = t.current in
        t.current <- ev.who;
        match match ev.kind with Fire f -> f () | Arrive d -> arrive t d with
        | () -> t.current <- saved
        | exception e ->
            t.current <- saved;
            raise e));
    true
  end

let run ?until ?(max_events = max_int) t =
  let rec loop n =
    if n < max_events then
      if t.size = 0 then Option.iter (fun u -> if u > t.now then t.now <- u) until
      else
        match until with
        | Some u when t.heap.(0).time > u -> if u > t.now then t.now <- u
        | _ ->
            ignore (step t);
            loop (n + 1)
  in
  loop 0

let pending t = t.size

(* Counters *)

type stats = {
  sent : int;
  delivered : int;
  duplicated : int;
  dropped_loss : int;
  dropped_partition : int;
  dropped_crashed : int;
  dropped_unbound : int;
  dropped_filter : int;
  dropped_mtu : int;
  events : int;
}

let stats t =
  {
    sent = t.n_sent;
    delivered = t.n_delivered;
    duplicated = t.n_duplicated;
    dropped_loss = t.n_loss;
    dropped_partition = t.n_partition;
    dropped_crashed = t.n_crashed;
    dropped_unbound = t.n_unbound;
    dropped_filter = t.n_filter;
    dropped_mtu = t.n_mtu;
    events = t.n_events;
  }

let dropped s =
  s.dropped_loss + s.dropped_partition + s.dropped_crashed + s.dropped_unbound + s.dropped_filter
  + s.dropped_mtu

let pp_stats ppf s =
  Fmt.pf ppf
    "sent=%d delivered=%d duplicated=%d dropped: loss=%d partition=%d crashed=%d unbound=%d \
     filter=%d mtu=%d; events=%d"
    s.sent s.delivered s.duplicated s.dropped_loss s.dropped_partition s.dropped_crashed
    s.dropped_unbound s.dropped_filter s.dropped_mtu s.events
