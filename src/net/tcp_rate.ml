open Consort

(* Integer comparisons compiled as such. *)
let max (a : int) b = if a > b then a else b

type sample = {
  delivered : int;
  interval : Time.t;
  rtt : Time.t;
  app_limited : bool;
  prior_delivered : int;
  acked : int;
  total : int;
  inflight : int;
  now : Time.t;
}

let rate s =
  if s.interval <= 0 || s.delivered <= 0 then 0 else s.delivered * 1_000_000_000 / s.interval

(* Flags of a record. *)
let f_app = 1 (* sent while application-limited *)
let f_used = 2 (* a sample was taken of it, or it was delivered *)
let f_rexmit = 4 (* retransmitted *)

(* The records, a ring in sequence order: record [i] (0 <= i < n) is at
   index [(lo + i) land (capacity - 1)]; its segment ends at [ends] (and
   begins where the one before it ends). Arrays of integers, so that a
   segment sent costs no allocation. *)
type t = {
  mutable ends : Tcp_seq.t array;
  mutable dlv : int array;  (** the delivered count when it was sent *)
  mutable dlv_time : int array;  (** when the count last grew, then *)
  mutable first : int array;  (** when the sending burst it belongs to began *)
  mutable sent_at : int array;
  mutable flags : int array;
  mutable lo : int;
  mutable n : int;
  mutable delivered : int;
  mutable delivered_time : Time.t;
  mutable first_sent : Time.t;
  mutable app_mark : int;  (** 0, or the delivered count at which application-limited ends *)
  mutable min_rtt : Time.t;
}

let max_records = 65536
let max_visits = 1024

let create () =
  {
    ends = [||];
    dlv = [||];
    dlv_time = [||];
    first = [||];
    sent_at = [||];
    flags = [||];
    lo = 0;
    n = 0;
    delivered = 0;
    delivered_time = 0;
    first_sent = 0;
    app_mark = 0;
    min_rtt = max_int;
  }

let records t = t.n
let idx t i = (t.lo + i) land (Array.length t.ends - 1)

let grow t =
  let cap = Array.length t.ends in
  let ncap = if cap = 0 then 64 else 2 * cap in
  let copy a z =
    let b = Array.make ncap z in
    for i = 0 to t.n - 1 do
      b.(i) <- a.(idx t i)
    done;
    b
  in
  let ends = copy t.ends Tcp_seq.zero in
  let dlv = copy t.dlv 0 and dlv_time = copy t.dlv_time 0 and first = copy t.first 0 in
  let sent_at = copy t.sent_at 0 and flags = copy t.flags 0 in
  t.ends <- ends;
  t.dlv <- dlv;
  t.dlv_time <- dlv_time;
  t.first <- first;
  t.sent_at <- sent_at;
  t.flags <- flags;
  t.lo <- 0

(* Fill record at index [j] with the connection's state now. *)
let stamp t j ~now ~rexmit =
  t.dlv.(j) <- t.delivered;
  t.dlv_time.(j) <- t.delivered_time;
  t.first.(j) <- t.first_sent;
  t.sent_at.(j) <- now;
  t.flags.(j) <- ((if t.app_mark > 0 then f_app else 0) lor if rexmit then f_rexmit else 0)

(* The first record whose end is above [s] (0..n). *)
let find t s =
  let lo = ref 0 and hi = ref t.n in
  while !lo < !hi do
    let mid = (!lo + !hi) / 2 in
    if Tcp_seq.leq t.ends.(idx t mid) s then lo := mid + 1 else hi := mid
  done;
  !lo

let sent t ~seq ~end_ ~now ~idle =
  if Tcp_seq.lt seq end_ then begin
    if idle then begin
      t.first_sent <- now;
      t.delivered_time <- now
    end;
    let top = if t.n > 0 then Some t.ends.(idx t (t.n - 1)) else None in
    match top with
    | Some top when Tcp_seq.leq end_ top ->
        (* A retransmission: the record holding its last byte is refreshed. *)
        let i = find t (Tcp_seq.add end_ (-1)) in
        if i < t.n then stamp t (idx t i) ~now ~rexmit:true
    | _ ->
        if t.n < max_records then begin
          if t.n = Array.length t.ends then grow t;
          let j = idx t t.n in
          t.ends.(j) <- end_;
          stamp t j ~now ~rexmit:false;
          t.n <- t.n + 1
        end
  end

let ack t ~una ~newly ~total ~inflight ~now =
  let acked = max 0 (total - t.delivered) in
  t.delivered <- max t.delivered total;
  if acked > 0 then t.delivered_time <- now;
  if t.app_mark > 0 && t.delivered > t.app_mark then t.app_mark <- 0;
  (* The most recently sent record delivered by this ACK. *)
  let best = ref (-1) in
  let consider j =
    if t.flags.(j) land f_used = 0 then begin
      t.flags.(j) <- t.flags.(j) lor f_used;
      if
        !best < 0
        || t.sent_at.(j) > t.sent_at.(!best)
        || (t.sent_at.(j) = t.sent_at.(!best) && t.dlv.(j) > t.dlv.(!best))
      then best := j
    end
  in
  (* Cumulatively acknowledged: looked at, then forgotten. *)
  while t.n > 0 && Tcp_seq.leq t.ends.(t.lo) una do
    consider t.lo;
    t.n <- t.n - 1;
    t.lo <- (t.lo + 1) land (Array.length t.ends - 1)
  done;
  (* The records forgotten keep their values until [sent] reuses them,
     after this returns: the best of them is read below. *)
  let visits = ref 0 in
  List.iter
    (fun (l, r) ->
      let i = ref (find t l) in
      while !i < t.n && !visits < max_visits && Tcp_seq.leq t.ends.(idx t !i) r do
        incr visits;
        consider (idx t !i);
        incr i
      done)
    newly;
  if acked = 0 then None
  else
    let j = !best in
    if j < 0 then
      Some
        {
          delivered = 0;
          interval = 0;
          rtt = -1;
          app_limited = t.app_mark > 0;
          prior_delivered = t.delivered;
          acked;
          total = t.delivered;
          inflight;
          now;
        }
    else begin
      t.first_sent <- t.sent_at.(j);
      let send_elapsed = t.sent_at.(j) - t.first.(j) in
      let ack_elapsed = now - t.dlv_time.(j) in
      let interval = max send_elapsed ack_elapsed in
      let rtt = if t.flags.(j) land f_rexmit = 0 then now - t.sent_at.(j) else -1 in
      if rtt >= 0 && rtt < t.min_rtt then t.min_rtt <- rtt;
      (* Shorter than a round trip: ACKs compressed or an estimate from too
         little (the draft's check against the minimum RTT). *)
      let interval = if t.min_rtt <> max_int && interval < t.min_rtt then 0 else interval in
      Some
        {
          delivered = t.delivered - t.dlv.(j);
          interval;
          rtt;
          app_limited = t.flags.(j) land f_app <> 0;
          prior_delivered = t.dlv.(j);
          acked;
          total = t.delivered;
          inflight;
          now;
        }
    end

let app_limited t ~inflight = t.app_mark <- max 1 (t.delivered + inflight)
