module type S = sig
  type t

  val name : string
  val create : unit -> t
  val cwnd : t -> int
  val ssthresh : t -> int
  val set_cwnd : t -> int -> unit

  val on_ack :
    t -> now:Consort.Time.t -> srtt:Consort.Time.t option -> acked:int -> smss:int -> unit

  val on_dupack : t -> smss:int -> unit
  val on_partial_ack : t -> acked:int -> smss:int -> unit
  val on_recovered : t -> flight:int -> smss:int -> unit
  val on_loss : t -> now:Consort.Time.t -> flight:int -> smss:int -> sack:bool -> unit
  val on_rto : t -> flight:int -> smss:int -> first:bool -> unit
  val on_idle : t -> initial:int -> unit
  val undo : t -> cwnd:int -> ssthresh:int -> unit
end

let ceiling = 1 lsl 30

module New_reno = struct
  type t = { mutable cwnd : int; mutable ssthresh : int; mutable ca_acked : int }

  let name = "newreno"
  let create () = { cwnd = 0; ssthresh = ceiling; ca_acked = 0 }
  let cwnd t = t.cwnd
  let ssthresh t = t.ssthresh
  let set_cwnd t w = t.cwnd <- w

  let on_ack t ~now:_ ~srtt:_ ~acked ~smss =
    if t.cwnd < t.ssthresh then t.cwnd <- t.cwnd + min acked (2 * smss)
    else begin
      t.ca_acked <- t.ca_acked + acked;
      if t.ca_acked >= t.cwnd then begin
        t.ca_acked <- t.ca_acked - t.cwnd;
        t.cwnd <- t.cwnd + smss
      end
    end;
    t.cwnd <- min t.cwnd ceiling

  let on_dupack t ~smss = t.cwnd <- t.cwnd + smss

  let on_partial_ack t ~acked ~smss =
    t.cwnd <- max smss (t.cwnd - acked + if acked >= smss then smss else 0)

  let on_recovered t ~flight ~smss = t.cwnd <- min t.ssthresh (max flight smss + smss)

  let on_loss t ~now:_ ~flight ~smss ~sack =
    t.ssthresh <- max (flight / 2) (2 * smss);
    t.ca_acked <- 0;
    t.cwnd <- (if sack then t.ssthresh else t.ssthresh + (3 * smss))

  let on_rto t ~flight ~smss ~first =
    if first then t.ssthresh <- max (flight / 2) (2 * smss);
    t.cwnd <- smss;
    t.ca_acked <- 0

  let on_idle t ~initial = t.cwnd <- min t.cwnd initial

  let undo t ~cwnd ~ssthresh =
    t.cwnd <- max t.cwnd cwnd;
    t.ssthresh <- max t.ssthresh ssthresh
end

(* RFC 9438. Windows in the formulas are in segments, times in seconds. *)
module Cubic = struct
  type t = {
    mutable cwnd : int;
    mutable ssthresh : int;
    mutable w_max : float;  (** segments, before the last reduction *)
    mutable k : float;
    mutable epoch : Consort.Time.t option;  (** start of the current avoidance epoch *)
    mutable w_est : float;  (** the Reno-friendly estimate, segments *)
    mutable frac : float;  (** bytes of growth not yet added *)
  }

  let name = "cubic"
  let c = 0.4
  let beta = 0.7
  let alpha = 3. *. (1. -. beta) /. (1. +. beta)

  let create () =
    { cwnd = 0; ssthresh = ceiling; w_max = 0.; k = 0.; epoch = None; w_est = 0.; frac = 0. }

  let cwnd t = t.cwnd
  let ssthresh t = t.ssthresh
  let set_cwnd t w = t.cwnd <- w

  let on_ack t ~now ~srtt ~acked ~smss =
    if t.cwnd < t.ssthresh then t.cwnd <- min ceiling (t.cwnd + min acked (2 * smss))
    else begin
      let fs = float smss in
      let cw = float t.cwnd /. fs in
      (match t.epoch with
      | Some _ -> ()
      | None ->
          t.epoch <- Some now;
          if cw < t.w_max then t.k <- Float.cbrt ((t.w_max -. cw) /. c)
          else begin
            t.k <- 0.;
            t.w_max <- cw
          end;
          t.w_est <- cw);
      let epoch = Option.value t.epoch ~default:now in
      let rtt = match srtt with Some r -> Consort.Time.to_sec r | None -> 0.1 in
      let tt = Consort.Time.to_sec (now - epoch) +. rtt in
      let w_cubic = (c *. ((tt -. t.k) ** 3.)) +. t.w_max in
      let segs = float acked /. fs in
      let a = if t.w_est >= t.w_max then 1. else alpha in
      t.w_est <- t.w_est +. (a *. segs /. cw);
      let grow =
        if w_cubic < t.w_est then (t.w_est -. cw) *. fs
        else
          let target = Float.min (Float.max w_cubic cw) (1.5 *. cw) in
          (target -. cw) /. cw *. segs *. fs
      in
      t.frac <- t.frac +. Float.max 0. grow;
      if t.frac >= 1. then begin
        let n = int_of_float t.frac in
        t.frac <- t.frac -. float n;
        t.cwnd <- min ceiling (t.cwnd + n)
      end
    end

  let on_dupack t ~smss = t.cwnd <- t.cwnd + smss

  let on_partial_ack t ~acked ~smss =
    t.cwnd <- max smss (t.cwnd - acked + if acked >= smss then smss else 0)

  let on_recovered t ~flight ~smss = t.cwnd <- min t.ssthresh (max flight smss + smss)

  (* Section 4.6: W_max from the window, the new threshold from the data
     in flight. *)
  let reduce t ~flight ~smss =
    let cw = float t.cwnd /. float smss in
    (* Fast convergence (section 4.7). *)
    t.w_max <- (if cw < t.w_max then cw *. (1. +. beta) /. 2. else cw);
    t.epoch <- None;
    t.frac <- 0.;
    t.ssthresh <- max (int_of_float (float flight *. beta)) (2 * smss)

  let on_loss t ~now:_ ~flight ~smss ~sack =
    reduce t ~flight ~smss;
    t.cwnd <- (if sack then t.ssthresh else t.ssthresh + (3 * smss))

  let on_rto t ~flight ~smss ~first =
    if first then reduce t ~flight ~smss else t.epoch <- None;
    t.cwnd <- smss

  let on_idle t ~initial =
    t.cwnd <- min t.cwnd initial;
    t.epoch <- None

  let undo t ~cwnd ~ssthresh =
    t.cwnd <- max t.cwnd cwnd;
    t.ssthresh <- max t.ssthresh ssthresh;
    t.epoch <- None
end

type t = T : (module S with type t = 'a) * 'a -> t

let of_bbr b = T ((module Tcp_bbr), b)

let create = function
  | Tcp_types.New_reno -> T ((module New_reno), New_reno.create ())
  | Cubic -> T ((module Cubic), Cubic.create ())
  | Bbr -> of_bbr (Tcp_bbr.create ())

let name (T ((module M), _)) = M.name
let loss_based t = match name t with "newreno" | "cubic" -> true | _ -> false
let cwnd (T ((module M), s)) = M.cwnd s
let ssthresh (T ((module M), s)) = M.ssthresh s
let set_cwnd (T ((module M), s)) w = M.set_cwnd s w
let on_ack (T ((module M), s)) = M.on_ack s
let on_dupack (T ((module M), s)) = M.on_dupack s
let on_partial_ack (T ((module M), s)) = M.on_partial_ack s
let on_recovered (T ((module M), s)) = M.on_recovered s
let on_loss (T ((module M), s)) = M.on_loss s
let on_rto (T ((module M), s)) = M.on_rto s
let on_idle (T ((module M), s)) = M.on_idle s
let undo (T ((module M), s)) = M.undo s
