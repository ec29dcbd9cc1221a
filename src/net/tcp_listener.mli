(** Listeners: a SYN makes a half-open connection that holds no send buffer, or, when the backlog or
    the global limit is full, a SYN cookie (window scale and SACK in the timestamp, as Linux) that
    keeps nothing; the ACK that returns a valid cookie makes the connection. *)

module Make (B : Tcp_tcb.S) : sig
  val send_cookie : B.t -> B.listener -> B.lower_connection -> B.host -> Tcp_packet.t -> unit
  val cookie_ack : B.t -> B.listener -> B.lower_connection -> B.host -> Tcp_packet.t -> B.tcb option

  val listen_input :
    B.t -> B.listener -> B.lower_connection -> B.host -> Tcp_packet.t -> Packet.t -> B.tcb option
  (** [listen_input t l lconn remote h pkt] handles a segment for listener [l]; [Some tcb] when an
      ACK completed a cookie handshake: the caller passes it the segment. *)
end
