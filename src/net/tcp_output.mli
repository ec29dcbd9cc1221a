(** What a TCP connection sends, and when: segments and their options, the windows (Nagle, receiver,
    congestion), loss recovery (RFC 6675 with NewReno, RACK-TLP per RFC 8985), path MTU probes (RFC
    8899), resets and segments sent without a connection, and the resets that make room under the
    global limits. *)

module Make (B : Tcp_tcb.S) : sig
  val arm_tlp : B.tcb -> unit
  val advertise : B.tcb -> syn:bool -> int
  val checksum_into : dst:B.host -> Packet.t -> unit
  val transmit : B.t -> B.lower_connection -> dst:B.host -> Packet.t -> unit
  val syn_options : B.tcb -> reply:bool -> Tcp_packet.option_ list

  val emit :
    ?syn:bool -> ?fin:bool -> ?rst:bool -> ?ack:bool -> B.tcb -> seq:Tcp_seq.t -> len:int -> unit

  val initial_cwnd : B.tcb -> int

  val send_data : ?probe:bool -> B.tcb -> seq:Tcp_seq.t -> len:int -> Tcp_seq.t
  (** One data segment from [seq] (new or again); the end of what it covers. *)

  val send_syn : B.tcb -> unit
  val skip_sacked : B.tcb -> unit
  val next_new : B.tcb -> budget:int -> force:bool -> int option
  val probe_margin : int
  val pmtu_floor : B.tcb -> int
  val send_mtu_probe : B.tcb -> [ `Sent | `Wait | `No ]
  val max_probes : int
  val mtu_probe_failed : B.tcb -> unit
  val mtu_probe_check : B.tcb -> unit
  val limited_transmit : B.tcb -> int
  val recovery_pipe : B.tcb -> int

  val prr_ack : ?entered:bool -> B.tcb -> delivered:int -> advanced:bool -> unit
  (** Proportional rate reduction (RFC 6937) on an ACK during a SACK recovery: sets the window from
      the bytes the ACK newly delivered ([advanced]: SND.UNA moved). *)

  val output : ?force:bool -> B.tcb -> unit
  (** Sends what the windows allow: new data, retransmissions in recovery, a path MTU probe, a
      pending ACK. *)

  val send_ctl : B.t -> B.lower_connection -> dst:B.host -> Tcp_packet.t -> unit

  val send_raw :
    B.t ->
    B.lower_connection ->
    dst:B.host ->
    src_port:int ->
    dst_port:int ->
    seq:Tcp_seq.t ->
    ack:Tcp_seq.t ->
    ack_flag:bool ->
    unit

  val send_rst : B.tcb -> unit
  val oldest : B.tcb Queue.t -> (B.tcb -> bool) -> B.tcb option
  val evict : B.tcb -> string -> unit
  val make_room : B.t -> bool
  val orphaned : B.tcb -> unit
  val enter_recovery : ?rack:bool -> ?cc:bool -> ?on_ack:bool -> B.tcb -> unit
  val rack_detect : ?on_ack:bool -> B.tcb -> unit
  val tlp_expired : B.tcb -> unit
  val tlp_episode : B.tcb -> Tcp_packet.t -> dsack:bool -> unit
end
