open Consort

(* Integer comparisons compiled as such. *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

type mode = Startup | Drain | Probe_bw | Probe_rtt

let pp_mode ppf m =
  Fmt.string ppf
    (match m with
    | Startup -> "startup"
    | Drain -> "drain"
    | Probe_bw -> "probe_bw"
    | Probe_rtt -> "probe_rtt")

let name = "bbr"
let ceiling = 1 lsl 30
let high_gain = 2. /. log 2.
let cycle = [| 1.25; 0.75; 1.; 1.; 1.; 1.; 1.; 1. |]
let bw_rounds = 10 (* the bandwidth filter's window, round trips *)
let min_rtt_window = Time.of_sec 10.
let probe_rtt_time = Time.of_ms 200
let min_segments = 4 (* the smallest window, and ProbeRTT's *)
let full_bw_growth = 1.25
let full_bw_rounds = 3

type t = {
  mutable cwnd : int;
  mutable mode : mode;
  (* Windowed maximum of the bandwidth: the largest sample of each of the
     last [bw_rounds] rounds, at [round mod bw_rounds]. *)
  bw_round : int array;
  bw_max : int array;
  mutable round : int;
  mutable next_round_delivered : int;
  mutable round_start : bool;
  mutable min_rtt : Time.t;  (** max_int: none *)
  mutable min_rtt_stamp : Time.t;
  mutable probe_rtt_done : Time.t;  (** 0: not yet low enough *)
  mutable probe_rtt_round_done : bool;
  mutable full_bw : int;
  mutable full_bw_count : int;
  mutable full_bw_reached : bool;
  mutable pacing_gain : float;
  mutable cwnd_gain : float;
  mutable cycle_idx : int;
  mutable cycle_stamp : Time.t;
  mutable prior_cwnd : int;
  mutable in_recovery : bool;
  mutable entering_recovery : bool;
  mutable conservation : bool;
  mutable pacing : int;
}

let create () =
  {
    cwnd = 0;
    mode = Startup;
    bw_round = Array.make bw_rounds (-1);
    bw_max = Array.make bw_rounds 0;
    round = 0;
    next_round_delivered = 0;
    round_start = false;
    min_rtt = max_int;
    min_rtt_stamp = 0;
    probe_rtt_done = 0;
    probe_rtt_round_done = false;
    full_bw = 0;
    full_bw_count = 0;
    full_bw_reached = false;
    pacing_gain = high_gain;
    cwnd_gain = high_gain;
    cycle_idx = 0;
    cycle_stamp = 0;
    prior_cwnd = 0;
    in_recovery = false;
    entering_recovery = false;
    conservation = false;
    pacing = 0;
  }

let cwnd t = t.cwnd
let ssthresh _ = ceiling
let set_cwnd t w = t.cwnd <- w
let mode t = t.mode
let rounds t = t.round
let full_bw_reached t = t.full_bw_reached
let pacing_gain t = t.pacing_gain
let cwnd_gain t = t.cwnd_gain
let pacing_rate t = t.pacing
let min_rtt t = if t.min_rtt = max_int then None else Some t.min_rtt

let btl_bw t =
  let m = ref 0 in
  for i = 0 to bw_rounds - 1 do
    if t.bw_round.(i) > t.round - bw_rounds then m := max !m t.bw_max.(i)
  done;
  !m

let update_bw_filter t bw =
  let i = t.round mod bw_rounds in
  if t.bw_round.(i) <> t.round then begin
    t.bw_round.(i) <- t.round;
    t.bw_max.(i) <- bw
  end
  else t.bw_max.(i) <- max t.bw_max.(i) bw

(* Bytes in flight that [gain] times the bandwidth-delay product allows,
   with room for three segments of ACK and sending quantization. *)
let inflight t ~gain ~smss =
  if t.min_rtt = max_int then 10 * smss
  else
    let bdp = float (btl_bw t) *. Time.to_sec t.min_rtt in
    int_of_float (gain *. bdp) + (3 * smss)

let save_cwnd t =
  t.prior_cwnd <- (if t.in_recovery || t.mode = Probe_rtt then max t.prior_cwnd t.cwnd else t.cwnd)

let reset_probe_bw t ~now ~(rs : Tcp_rate.sample) =
  t.mode <- Probe_bw;
  (* A phase drawn from the delivered count (deterministic), never the
     one that drains: 2 to 7 or 0. *)
  t.cycle_idx <- (Array.length cycle - (Hashtbl.hash rs.total mod 7)) land 7;
  t.cycle_stamp <- now

let reset_mode t ~now ~rs =
  if t.full_bw_reached then reset_probe_bw t ~now ~rs else t.mode <- Startup

let update_model t (rs : Tcp_rate.sample) ~smss =
  let now = rs.now in
  (* Round trips: one ends when a segment sent after it began is
     delivered. *)
  t.round_start <- false;
  let bw = Tcp_rate.rate rs in
  if bw > 0 then begin
    if rs.prior_delivered >= t.next_round_delivered then begin
      t.next_round_delivered <- rs.total;
      t.round <- t.round + 1;
      t.round_start <- true;
      t.conservation <- false
    end;
    if (not rs.app_limited) || bw >= btl_bw t then update_bw_filter t bw
  end;
  (* ProbeBW's gain cycle. *)
  (if t.mode = Probe_bw then
     let gain = cycle.(t.cycle_idx) in
     let full = now - t.cycle_stamp > t.min_rtt in
     let next =
       if gain > 1. then full && (t.conservation || rs.inflight >= inflight t ~gain ~smss)
       else if gain < 1. then full || rs.inflight <= inflight t ~gain:1. ~smss
       else full
     in
     if next then begin
       t.cycle_idx <- (t.cycle_idx + 1) land 7;
       t.cycle_stamp <- now
     end);
  (* Startup ends after [full_bw_rounds] rounds without 25% growth. *)
  if (not t.full_bw_reached) && t.round_start && not rs.app_limited then begin
    let b = btl_bw t in
    if float b >= float t.full_bw *. full_bw_growth then begin
      t.full_bw <- b;
      t.full_bw_count <- 0
    end
    else begin
      t.full_bw_count <- t.full_bw_count + 1;
      if t.full_bw_count >= full_bw_rounds then t.full_bw_reached <- true
    end
  end;
  if t.mode = Startup && t.full_bw_reached then t.mode <- Drain;
  if t.mode = Drain && rs.inflight <= inflight t ~gain:1. ~smss then reset_probe_bw t ~now ~rs;
  (* The minimum RTT, and ProbeRTT when it is 10 s old. *)
  let expired = t.min_rtt <> max_int && now > t.min_rtt_stamp + min_rtt_window in
  if rs.rtt >= 0 && (rs.rtt < t.min_rtt || expired) then begin
    t.min_rtt <- rs.rtt;
    t.min_rtt_stamp <- now
  end;
  if expired && t.mode <> Probe_rtt then begin
    t.mode <- Probe_rtt;
    save_cwnd t;
    t.probe_rtt_done <- 0
  end;
  if t.mode = Probe_rtt then begin
    if t.probe_rtt_done = 0 && rs.inflight <= min_segments * smss then begin
      t.probe_rtt_done <- now + probe_rtt_time;
      t.probe_rtt_round_done <- false;
      t.next_round_delivered <- rs.total
    end
    else if t.probe_rtt_done <> 0 then begin
      if t.round_start then t.probe_rtt_round_done <- true;
      if t.probe_rtt_round_done && now >= t.probe_rtt_done then begin
        t.min_rtt_stamp <- now;
        t.cwnd <- max t.cwnd t.prior_cwnd;
        reset_mode t ~now ~rs
      end
    end
  end;
  (* The gains of the mode. *)
  match t.mode with
  | Startup ->
      t.pacing_gain <- high_gain;
      t.cwnd_gain <- high_gain
  | Drain ->
      t.pacing_gain <- 1. /. high_gain;
      t.cwnd_gain <- high_gain
  | Probe_bw ->
      t.pacing_gain <- cycle.(t.cycle_idx);
      t.cwnd_gain <- 2.
  | Probe_rtt ->
      t.pacing_gain <- 1.;
      t.cwnd_gain <- 1.

(* The pacing rate: the gain times the bandwidth, less 1% (to stay under
   the bottleneck); in Startup it only grows, from Startup's gain times the
   window over the first RTT measured (so that a first sample of a few
   bytes, from a connection that had little to send, does not hold later
   data back). *)
let set_pacing t =
  if t.pacing = 0 && t.min_rtt <> max_int && t.min_rtt > 0 then
    t.pacing <- int_of_float (high_gain *. float t.cwnd /. Time.to_sec t.min_rtt);
  let bw = btl_bw t in
  if bw > 0 then begin
    let rate = int_of_float (t.pacing_gain *. float bw *. 0.99) in
    if t.full_bw_reached || rate > t.pacing then t.pacing <- rate
  end

let set_window t (rs : Tcp_rate.sample) ~smss =
  let acked = rs.acked in
  if t.entering_recovery then begin
    (* Packet conservation for a round trip from now. *)
    t.entering_recovery <- false;
    t.conservation <- true;
    t.next_round_delivered <- rs.total;
    t.cwnd <- rs.inflight + acked
  end;
  let target =
    let base = inflight t ~gain:t.cwnd_gain ~smss in
    if t.mode = Probe_bw && t.cycle_idx = 0 then base + (2 * smss) else base
  in
  if t.conservation then t.cwnd <- max t.cwnd (rs.inflight + acked)
  else if t.full_bw_reached then t.cwnd <- min (t.cwnd + acked) target
  else if t.cwnd < target || rs.total < 10 * smss then t.cwnd <- t.cwnd + acked;
  t.cwnd <- min ceiling (max t.cwnd (min_segments * smss));
  if t.mode = Probe_rtt then t.cwnd <- min t.cwnd (min_segments * smss)

let on_rate t rs ~smss =
  update_model t rs ~smss;
  set_pacing t;
  set_window t rs ~smss

let on_ack _ ~now:_ ~srtt:_ ~acked:_ ~smss:_ = ()
let on_dupack _ ~smss:_ = ()
let on_partial_ack _ ~acked:_ ~smss:_ = ()

let on_loss t ~now:_ ~flight:_ ~smss:_ ~sack:_ =
  save_cwnd t;
  t.in_recovery <- true;
  t.entering_recovery <- true

let on_recovered t ~flight:_ ~smss:_ =
  t.in_recovery <- false;
  t.entering_recovery <- false;
  t.conservation <- false;
  t.cwnd <- max t.cwnd t.prior_cwnd

let on_rto t ~flight:_ ~smss ~first:_ =
  save_cwnd t;
  t.in_recovery <- false;
  t.entering_recovery <- false;
  t.conservation <- false;
  t.cwnd <- smss

let on_idle _ ~initial:_ = ()
let undo t ~cwnd ~ssthresh:_ = t.cwnd <- max t.cwnd cwnd
