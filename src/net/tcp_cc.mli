(** Congestion control behind one signature, driven by the connection's loss recovery: NewReno (RFC
    5681, RFC 6582) and CUBIC (RFC 9438); and BBR ({!Tcp_bbr}), which the connection also gives rate
    samples and paces by. Windows are in bytes. Fast recovery itself (which segments go when) is the
    connection's; an algorithm only sets the windows. *)

module type S = sig
  type t

  val name : string
  val create : unit -> t
  val cwnd : t -> int
  val ssthresh : t -> int

  val set_cwnd : t -> int -> unit
  (** The initial window, once the handshake has set the MSS. *)

  val on_ack :
    t -> now:Consort.Time.t -> srtt:Consort.Time.t option -> acked:int -> smss:int -> unit
  (** New data acknowledged outside recovery: slow start or congestion avoidance. *)

  val on_dupack : t -> smss:int -> unit
  (** A duplicate ACK during recovery without SACK: inflate by one segment. *)

  val on_partial_ack : t -> acked:int -> smss:int -> unit
  (** A partial ACK during recovery without SACK (RFC 6582): deflate. *)

  val on_recovered : t -> flight:int -> smss:int -> unit
  (** Recovery ended (RFC 6582 step 3, the "conservative" choice). *)

  val on_loss : t -> now:Consort.Time.t -> flight:int -> smss:int -> sack:bool -> unit
  (** Fast retransmit: a multiplicative decrease, entering recovery. *)

  val on_rto : t -> flight:int -> smss:int -> first:bool -> unit
  (** The retransmission timer expired ([first]: not already backed off). *)

  val on_idle : t -> initial:int -> unit
  (** Sending again after an idle period longer than the RTO (RFC 5681 section 4.1). *)

  val undo : t -> cwnd:int -> ssthresh:int -> unit
  (** The reduction of a recovery whose retransmissions were all needless (RFC 3708, RFC 4015)
      undone: the windows back to at least [cwnd] and [ssthresh], as before it. *)
end

module New_reno : S
module Cubic : S

type t
(** An instance of one of the algorithms. *)

val create : Tcp_types.congestion -> t

val of_bbr : Tcp_bbr.t -> t
(** The algorithm of a BBR state the connection also keeps, to give it rate samples and take its
    pacing rate. *)

val name : t -> string

val loss_based : t -> bool
(** NewReno and CUBIC: their fast recovery follows proportional rate reduction (RFC 6937), the
    connection setting the window on each ACK ({!set_cwnd}) and ending it at the threshold. *)

val cwnd : t -> int
val ssthresh : t -> int
val set_cwnd : t -> int -> unit
val on_ack : t -> now:Consort.Time.t -> srtt:Consort.Time.t option -> acked:int -> smss:int -> unit
val on_dupack : t -> smss:int -> unit
val on_partial_ack : t -> acked:int -> smss:int -> unit
val on_recovered : t -> flight:int -> smss:int -> unit
val on_loss : t -> now:Consort.Time.t -> flight:int -> smss:int -> sack:bool -> unit
val on_rto : t -> flight:int -> smss:int -> first:bool -> unit
val on_idle : t -> initial:int -> unit
val undo : t -> cwnd:int -> ssthresh:int -> unit
