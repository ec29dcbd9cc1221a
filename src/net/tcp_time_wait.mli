(** TIME-WAIT as a small record (the connection and its buffers gone): entering it, one alarm for
    all the records in order of deadline, answering a retransmitted FIN, and a segment's verdict in
    TIME-WAIT (RFC 9293 section 3.10.7.4, RFC 1337). *)

module Make (B : Tcp_tcb.S) : sig
  val enter_time_wait : B.tcb -> unit
  val tw_key : B.tw -> B.host * int * int
  val tw_remove : B.t -> B.tw -> unit
  val tw_arm : B.t -> unit
  val tw_expire : B.t -> unit

  val to_time_wait : B.tcb -> unit
  (** A connection in TIME-WAIT becomes a record, once the segment that took it there is answered.
  *)

  val tw_ack : B.t -> B.tw -> unit
  val seg_ctl_len : Tcp_packet.t -> int

  val tw_input : B.t -> B.tw -> Tcp_packet.t -> payload:int -> [ `Done | `Reopen ]
  (** [`Reopen]: a SYN above the old sequence space, for a listener: the caller removes the record
      and hands the SYN to it. *)
end
