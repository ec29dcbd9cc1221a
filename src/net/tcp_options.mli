(** TCP options as the connection uses them: what a SYN offers, the options of a data segment, and
    their room in the header (RFC 9293, RFC 7323, RFC 2018). Pure functions over
    {!Tcp_packet.option_} lists. *)

type syn = {
  mss : int option;
  wscale : int option;  (** clamped to 14 (RFC 7323 section 2.3) *)
  sack_permitted : bool;
  ts_val : int option;
}
(** What a SYN or SYN-ACK offered. *)

val of_syn : Tcp_packet.option_ list -> syn

val timestamp : Tcp_packet.option_ list -> (int * int) option
(** [timestamp opts] is the first timestamp option's value and echo. *)

val sack : Tcp_packet.option_ list -> (Tcp_seq.t * Tcp_seq.t) list option

val syn :
  mss:int -> wscale:int option -> sack:bool -> ts:(int * int) option -> Tcp_packet.option_ list
(** The options of a SYN or SYN-ACK, in the order Linux sends them. *)

val data : ts:(int * int) option -> sack:(Tcp_seq.t * Tcp_seq.t) list -> Tcp_packet.option_ list
(** The options of a segment after the handshake: the timestamp, then SACK blocks when there are
    any. *)

val sack_max : ts:bool -> int
(** How many SACK blocks fit beside the options every segment carries. *)

val length : ts:bool -> sack_blocks:int -> int
(** Bytes of options, padded to 4, for a segment with a timestamp when [ts] and [sack_blocks] SACK
    blocks. *)
