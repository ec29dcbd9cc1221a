(** A connection's timers: retransmission (RFC 6298, black-hole detection per RFC 8899), persist,
    keepalive, loss probe and RACK's reordering timer, delayed ACK, 2 MSL, all behind one alarm set
    for the earliest deadline. *)

module Make (B : Tcp_tcb.S) : sig
  val rto_expired : B.tcb -> unit
  val persist_expired : B.tcb -> unit
  val keepalive_expired : B.tcb -> unit
  val on_alarm : B.tcb -> unit

  val schedule : B.tcb -> unit
  (** Sets the connection's one alarm for its earliest deadline (after every event that may have
      moved one). *)

  val arm_keepalive : B.tcb -> unit
end
