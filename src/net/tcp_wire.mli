(** The TCP header on the wire (RFC 9293, section 3.1): field offsets and unchecked accessors on a
    buffer that starts at the header.

    Callers check the length ({!min_header} bytes, then the data offset) before using the accessors;
    {!Tcp_packet} is the checked decoder. *)

val min_header : int
(** 20: a header without options. *)

val max_header : int
(** 60: a header with 40 bytes of options. *)

val get_src_port : Cstruct.t -> int
val set_src_port : Cstruct.t -> int -> unit
val get_dst_port : Cstruct.t -> int
val set_dst_port : Cstruct.t -> int -> unit
val get_seq : Cstruct.t -> int
val set_seq : Cstruct.t -> int -> unit
val get_ack : Cstruct.t -> int
val set_ack : Cstruct.t -> int -> unit

val get_data_offset : Cstruct.t -> int
(** [get_data_offset b] is the header length in bytes (the 4-bit field times 4). *)

val set_data_offset : Cstruct.t -> int -> unit
(** [set_data_offset b n] stores a header length of [n] bytes (a multiple of 4). *)

val get_flags : Cstruct.t -> int
(** [get_flags b] is the byte of flags: CWR ECE URG ACK PSH RST SYN FIN from the high bit down. *)

val set_flags : Cstruct.t -> int -> unit
val get_window : Cstruct.t -> int
val set_window : Cstruct.t -> int -> unit
val get_checksum : Cstruct.t -> int
val set_checksum : Cstruct.t -> int -> unit
val get_urgent : Cstruct.t -> int
val set_urgent : Cstruct.t -> int -> unit
val fin : int
val syn : int
val rst : int
val psh : int
val ack : int
val urg : int
val ece : int
val cwr : int

(** Option kinds (RFC 9293, 2018, 7323). *)

val opt_eol : int
val opt_nop : int
val opt_mss : int
val opt_window_scale : int
val opt_sack_permitted : int
val opt_sack : int
val opt_timestamp : int
