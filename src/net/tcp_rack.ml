open Consort

(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

type seg = {
  mutable s : Tcp_seq.t;
  mutable e : Tcp_seq.t;
  mutable xmit : Time.t;
  mutable order : int;  (** transmissions before it: orders those at the same time *)
  mutable rexmit : bool;
  mutable lost : bool;
  mutable delivered : bool;
  mutable fin : bool;  (** the last sequence number is a FIN (never SACKed) *)
  mutable skip : int;
      (** how far on the next record that may be undelivered is: those between are delivered
          (records never become undelivered) *)
}

type st = {
  mutable segs : seg array;
      (** from [lo] up to, not including, [hi], in sequence order, disjoint *)
  mutable lo : int;
  mutable hi : int;
  mutable r_xmit : Time.t;  (** RACK.xmit_ts: the most recently sent delivered segment *)
  mutable r_end : Tcp_seq.t;  (** RACK.end_seq *)
  mutable r_order : int;
  mutable sends : int;
  mutable r_rtt : Time.t;  (** RACK.rtt *)
  mutable have_rack : bool;
  mutable fack : Tcp_seq.t;  (** the highest delivered end *)
  mutable have_fack : bool;
  mutable min_rtt : Time.t;
  mutable reord : bool;
  mutable mult : int;
  mutable dsack_round : Tcp_seq.t option;  (** RACK.dsack_round *)
  mutable persist : int;  (** RACK.reo_wnd_persist *)
  mutable inflight : int;  (** bytes of records neither delivered nor lost *)
  mutable nlost : int;  (** records marked lost and not delivered *)
  mutable lost_from : Tcp_seq.t;
      (** while [nlost > 0], no record marked lost and not delivered starts below it *)
  spare : seg array;  (** records acknowledged, for the next ones sent (no garbage per segment) *)
  mutable nspare : int;
}

let dummy =
  {
    s = Tcp_seq.zero;
    e = Tcp_seq.zero;
    xmit = 0;
    order = 0;
    rexmit = false;
    lost = false;
    delivered = false;
    fin = false;
    skip = 1;
  }

(* The state is made at the first transmission: a connection that never
   sends data (most of those a flood makes) pays one word for it. *)
type t = { mutable st : st option }

let make () =
  {
    segs = [||];
    lo = 0;
    hi = 0;
    r_xmit = 0;
    r_end = Tcp_seq.zero;
    r_order = 0;
    sends = 0;
    r_rtt = 0;
    have_rack = false;
    fack = Tcp_seq.zero;
    have_fack = false;
    min_rtt = max_int;
    reord = false;
    mult = 1;
    dsack_round = None;
    persist = 0;
    inflight = 0;
    nlost = 0;
    lost_from = Tcp_seq.zero;
    spare = Array.make 16 dummy;
    nspare = 0;
  }

let clear_st t =
  Array.fill t.segs 0 (Array.length t.segs) dummy;
  t.lo <- 0;
  t.hi <- 0;
  t.have_rack <- false;
  t.have_fack <- false;
  t.inflight <- 0;
  t.nlost <- 0

let segments_st t = t.hi - t.lo

(* Records looked at by ACKs and loss detection since the program
   started: what a test counts to bound the work per ACK. *)
let steps = ref 0
let work () = !steps
let size g = Tcp_seq.sub g.e g.s
let counted g = not (g.delivered || g.lost)

(* A record not delivered is marked lost, or no longer. *)
let mark_lost t g =
  if t.nlost = 0 || Tcp_seq.lt g.s t.lost_from then t.lost_from <- g.s;
  t.nlost <- t.nlost + 1;
  g.lost <- true

let unmark t g =
  t.nlost <- t.nlost - 1;
  g.lost <- false

(* The first record at or after [i] not delivered, jumping over delivered
   runs and remembering the jump. *)
let rec live t i =
  if i >= t.hi then t.hi
  else begin
    incr steps;
    let g = t.segs.(i) in
    if not g.delivered then i
    else begin
      let j = live t (min t.hi (i + g.skip)) in
      g.skip <- max 1 (j - i);
      j
    end
  end

(* Room for [k] more records at the top, sliding or growing the array. *)
let reserve t k =
  let n = t.hi - t.lo in
  if t.hi + k > Array.length t.segs then begin
    let a =
      if n + k > Array.length t.segs / 2 then Array.make (max 16 (2 * (n + k))) dummy else t.segs
    in
    Array.blit t.segs t.lo a 0 n;
    if a == t.segs then Array.fill a n (Array.length a - n) dummy;
    t.segs <- a;
    t.lo <- 0;
    t.hi <- n
  end

(* Insert [x] at index [i] (lo <= i <= hi), shifting the tail up; the
   caller reserved the room (so that indices stay valid). *)
let insert t i x =
  Array.blit t.segs i t.segs (i + 1) (t.hi - i);
  t.segs.(i) <- x;
  t.hi <- t.hi + 1

(* Split the record at [i] at [at] (strictly inside it): the upper part
   becomes record [i + 1]. *)
let split t i at =
  let g = t.segs.(i) in
  let upper = { g with s = at } in
  if g.lost && not g.delivered then t.nlost <- t.nlost + 1;
  g.e <- at;
  g.fin <- false;
  g.skip <- 1;
  insert t (i + 1) upper

(* The first record whose end is above [s]. *)
let find t s =
  let lo = ref t.lo and hi = ref t.hi in
  while !lo < !hi do
    let mid = (!lo + !hi) / 2 in
    if Tcp_seq.leq t.segs.(mid).e s then lo := mid + 1 else hi := mid
  done;
  !lo

(* A record for [s, e), reused if one is spare. *)
let record t ~s ~e ~now ~order ~fin =
  if t.nspare > 0 then begin
    t.nspare <- t.nspare - 1;
    let g = t.spare.(t.nspare) in
    t.spare.(t.nspare) <- dummy;
    g.s <- s;
    g.e <- e;
    g.xmit <- now;
    g.order <- order;
    g.rexmit <- false;
    g.lost <- false;
    g.delivered <- false;
    g.fin <- fin;
    g.skip <- 1;
    g
  end
  else { s; e; xmit = now; order; rexmit = false; lost = false; delivered = false; fin; skip = 1 }

let sent_st ~fin t ~seq ~end_ ~now =
  if Tcp_seq.lt seq end_ then begin
    t.sends <- t.sends + 1;
    let order = t.sends in
    let top = if t.hi > t.lo then Some t.segs.(t.hi - 1).e else None in
    match top with
    | Some top when Tcp_seq.lt seq top ->
        reserve t 3;
        let i = ref (find t seq) in
        if !i < t.hi && Tcp_seq.lt t.segs.(!i).s seq then begin
          split t !i seq;
          incr i
        end;
        while !i < t.hi && Tcp_seq.lt t.segs.(!i).s end_ do
          let g = t.segs.(!i) in
          if Tcp_seq.gt g.e end_ then split t !i end_;
          if g.lost && not g.delivered then begin
            t.inflight <- t.inflight + size g;
            unmark t g
          end;
          g.xmit <- now;
          g.order <- order;
          g.rexmit <- true;
          g.lost <- false;
          incr i
        done;
        if Tcp_seq.gt end_ top then begin
          t.segs.(t.hi) <- record t ~s:top ~e:end_ ~now ~order ~fin;
          t.hi <- t.hi + 1;
          t.inflight <- t.inflight + Tcp_seq.sub end_ top
        end
    | _ ->
        reserve t 1;
        t.segs.(t.hi) <- record t ~s:seq ~e:end_ ~now ~order ~fin;
        t.inflight <- t.inflight + Tcp_seq.sub end_ seq;
        t.hi <- t.hi + 1
  end

(* RFC 8985 section 6.2 steps 2 and 3 for one delivered segment. A
   retransmitted one is not believed when delivered sooner than the
   minimum RTT after its retransmission, or when a cumulative ACK echoes
   a timestamp taken before it ([echoed]: the millisecond it was taken;
   not for SACKs, which echo the last segment in order, RFC 7323): the
   original was acknowledged. *)
let delivered ?echoed t g ~now =
  if counted g then t.inflight <- t.inflight - size g;
  if g.lost then t.nlost <- t.nlost - 1;
  g.delivered <- true;
  let rtt = now - g.xmit in
  if
    g.rexmit
    && (rtt < t.min_rtt || match echoed with Some e -> g.xmit >= e + Time.of_ms 1 | None -> false)
  then ()
  else begin
    if not g.rexmit then t.min_rtt <- min t.min_rtt rtt;
    if (not t.have_rack) || g.xmit > t.r_xmit || (g.xmit = t.r_xmit && g.order > t.r_order) then begin
      t.have_rack <- true;
      t.r_xmit <- g.xmit;
      t.r_order <- g.order;
      t.r_end <- g.e;
      t.r_rtt <- rtt
    end
  end;
  if t.have_fack && (not g.rexmit) && Tcp_seq.lt g.e t.fack then t.reord <- true;
  if (not t.have_fack) || Tcp_seq.gt g.e t.fack then begin
    t.have_fack <- true;
    t.fack <- g.e
  end

let max_visits = 1024

let ack_st ?echoed t ~una ~newly ~sacked ~now =
  (* Cumulatively acknowledged: delivered, then forgotten. *)
  while t.lo < t.hi && Tcp_seq.leq t.segs.(t.lo).e una do
    let g = t.segs.(t.lo) in
    if not g.delivered then delivered ?echoed t g ~now;
    t.segs.(t.lo) <- dummy;
    if t.nspare < Array.length t.spare then begin
      t.spare.(t.nspare) <- g;
      t.nspare <- t.nspare + 1
    end;
    t.lo <- t.lo + 1
  done;
  if t.lo < t.hi && Tcp_seq.lt t.segs.(t.lo).s una then begin
    let g = t.segs.(t.lo) in
    if counted g then t.inflight <- t.inflight - Tcp_seq.sub una g.s;
    g.s <- una
  end;
  if t.lo = t.hi then begin
    t.lo <- 0;
    t.hi <- 0
  end;
  (* SACKed: the records touching a newly SACKed range, now covered
     whole; at most [max_visits] of them per ACK, whatever the peer
     reports. *)
  let visits = ref 0 in
  List.iter
    (fun (l, r) ->
      let i = ref (find t l) in
      while !i < t.hi && !visits < max_visits && Tcp_seq.lt t.segs.(!i).s r do
        incr visits;
        incr steps;
        let g = t.segs.(!i) in
        let data_end = if g.fin then Tcp_seq.add g.e (-1) else g.e in
        if (not g.delivered) && Tcp_seq.lt g.s data_end && sacked g.s data_end then
          delivered t g ~now;
        incr i
      done)
    newly

(* RFC 8985 section 6.2 step 4: the multiplier grows once a round trip
   (D-SACKs until SND.UNA passes what was SND.NXT at the first count as
   one), and sixteen recoveries without one bring it back to 1. *)
let dsack_st t ~una ~nxt =
  t.reord <- true;
  (match t.dsack_round with Some r when Tcp_seq.geq una r -> t.dsack_round <- None | _ -> ());
  if t.dsack_round = None then begin
    t.dsack_round <- Some nxt;
    t.mult <- min (t.mult + 1) 16;
    t.persist <- 16
  end

let recovered_st t =
  t.persist <- t.persist - 1;
  if t.persist <= 0 then t.mult <- 1

let reo_wnd_st t ~in_recovery ~dupacks ~srtt =
  if (not t.reord) && (in_recovery || dupacks >= 3) then 0
  else if t.min_rtt = max_int then 0
  else min (t.mult * t.min_rtt / 4) srtt

(* In sequence order, segments sent once were sent in that order, and a
   retransmission went after the original of every segment above it: so
   the first segment sent once and after RACK's ends the scan (which an
   ACK of in-order data makes the first one: constant work). And only
   records neither delivered nor lost can be found lost: the scan ends
   when it has seen all of them (their bytes are [inflight]), so that a
   flight marked lost by a timeout is not walked again at every ACK (a
   peer SACKing segments from the top down cost a walk of all the flight
   per ACK: 6,000 records with 8 MB in flight). *)
let detect_st t ~now ~reo_wnd =
  let n = ref 0 and timeout = ref None in
  let i = ref (live t t.lo) in
  let left = ref t.inflight in
  if t.have_rack then
    while !i < t.hi do
      let g = t.segs.(!i) in
      let before = g.xmit < t.r_xmit || (g.xmit = t.r_xmit && g.order < t.r_order) in
      if ((not before) && not g.rexmit) || !left <= 0 then i := t.hi
      else begin
        if counted g then left := !left - size g;
        if before && (not g.delivered) && not g.lost then begin
          let remaining = g.xmit + t.r_rtt + reo_wnd - now in
          if remaining <= 0 then begin
            t.inflight <- t.inflight - size g;
            mark_lost t g;
            incr n
          end
          else timeout := Some (match !timeout with Some x -> max x remaining | None -> remaining)
        end;
        i := live t (!i + 1)
      end
    done;
  (!n, Option.map (fun r -> now + r) !timeout)

let mark_all_lost_st t =
  let i = ref (live t t.lo) in
  while !i < t.hi do
    let g = t.segs.(!i) in
    if not g.lost then mark_lost t g;
    i := live t (!i + 1)
  done;
  t.inflight <- 0

let unmark_lost_st t =
  let i = ref (live t t.lo) in
  while !i < t.hi do
    let g = t.segs.(!i) in
    if g.lost && not g.delivered then begin
      unmark t g;
      t.inflight <- t.inflight + size g
    end;
    i := live t (!i + 1)
  done

(* Asked at every ACK of a recovery: with none marked lost, no walk; else
   from [lost_from] (where the last answer was, or lower if a record below
   was marked since), so that a recovery walks from hole to hole once, not
   over the whole flight at every ACK. *)
let next_lost_st t =
  let rec go i =
    if i >= t.hi then None
    else
      let g = t.segs.(i) in
      if g.lost then begin
        t.lost_from <- g.s;
        Some (g.s, Tcp_seq.sub g.e g.s)
      end
      else go (live t (i + 1))
  in
  if t.nlost <= 0 || t.lo >= t.hi then None
  else if Tcp_seq.leq t.lost_from t.segs.(t.lo).s then go (live t t.lo)
  else go (live t (find t t.lost_from))

let is_lost_st t s =
  let i = find t s in
  i < t.hi && Tcp_seq.leq t.segs.(i).s s && t.segs.(i).lost && not t.segs.(i).delivered

let pipe_st t = t.inflight
let last_st t = if t.hi > t.lo then Some (t.segs.(t.hi - 1).s, t.segs.(t.hi - 1).e) else None
let min_rtt_st t = if t.min_rtt = max_int then None else Some t.min_rtt
let reordering_seen_st t = t.reord
let create () = { st = None }
let work () = work ()
let clear t = Option.iter clear_st t.st
let segments t = match t.st with Some s -> segments_st s | None -> 0

let get t =
  match t.st with
  | Some s -> s
  | None ->
      let s = make () in
      t.st <- Some s;
      s

let sent ?(fin = false) t ~seq ~end_ ~now = sent_st ~fin (get t) ~seq ~end_ ~now

let ack ?echoed t ~una ~newly ~sacked ~now =
  Option.iter (fun s -> ack_st ?echoed s ~una ~newly ~sacked ~now) t.st

let dsack t ~una ~nxt = dsack_st (get t) ~una ~nxt
let recovered t = Option.iter recovered_st t.st

let reo_wnd t ~in_recovery ~dupacks ~srtt =
  match t.st with Some s -> reo_wnd_st s ~in_recovery ~dupacks ~srtt | None -> 0

let detect t ~now ~reo_wnd =
  match t.st with Some s -> detect_st s ~now ~reo_wnd | None -> (0, None)

let mark_all_lost t = Option.iter mark_all_lost_st t.st
let unmark_lost t = Option.iter unmark_lost_st t.st
let next_lost t = Option.bind t.st next_lost_st
let is_lost t q = match t.st with Some s -> is_lost_st s q | None -> false
let pipe t = match t.st with Some s -> pipe_st s | None -> 0
let last t = Option.bind t.st last_st
let min_rtt t = Option.bind t.st min_rtt_st
let reordering_seen t = match t.st with Some s -> reordering_seen_st s | None -> false

let pp ppf t =
  match t.st with
  | None -> Fmt.string ppf "rack: nothing sent"
  | Some t ->
      Fmt.pf ppf "rack %d segs, rtt %a, min %a, reord %b x%d" (segments_st t) Time.pp t.r_rtt
        Fmt.(option ~none:(any "-") Time.pp)
        (min_rtt_st t) t.reord t.mult
