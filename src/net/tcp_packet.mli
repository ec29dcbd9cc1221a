(** TCP segment headers as values: a record, a printer, a total decoder and an encoder (RFC 9293
    section 3.1; options from RFC 2018 and 7323).

    [decode] never raises: every byte string either decodes or yields an {!error}. Options that are
    well formed but have a length their kind does not allow decode as [Unknown], as receivers must
    ignore them. *)

type flags = {
  fin : bool;
  syn : bool;
  rst : bool;
  psh : bool;
  ack : bool;
  urg : bool;
  ece : bool;
  cwr : bool;
}

val no_flags : flags
val flags_of_int : int -> flags
val int_of_flags : flags -> int

val pp_flags : flags Fmt.t
(** [pp_flags] prints flags as tcpdump does ([S.] for SYN and ACK). *)

type option_ =
  | Mss of int
  | Window_scale of int
  | Sack_permitted
  | Sack of (Tcp_seq.t * Tcp_seq.t) list  (** blocks \[left, right) *)
  | Timestamp of { value : int; echo : int }  (** 32-bit unsigned values *)
  | Unknown of { kind : int; data : string }

val pp_option : option_ Fmt.t
val option_length : option_ -> int

type t = {
  src_port : int;
  dst_port : int;
  seq : Tcp_seq.t;
  ack : Tcp_seq.t;
  flags : flags;
  window : int;
  urgent : int;
  options : option_ list;
}

val v :
  ?flags:flags ->
  ?window:int ->
  ?urgent:int ->
  ?options:option_ list ->
  src_port:int ->
  dst_port:int ->
  seq:Tcp_seq.t ->
  ack:Tcp_seq.t ->
  unit ->
  t
(** [v ~src_port ~dst_port ~seq ~ack ()] is a header with no flags, a zero window and no options
    unless given. *)

val pp : t Fmt.t
val equal : t -> t -> bool

type error = [ `Too_short of int | `Bad_offset of int | `Bad_options of string ]

val pp_error : error Fmt.t

val decode : Cstruct.t -> (t * int, error) result
(** [decode b] is the header at the start of [b] and its length in bytes (where the payload starts).
    It does not verify the checksum. *)

val header_length : t -> int
(** [header_length t] is 20 plus the options, padded to a multiple of 4.
    @raise Invalid_argument if the options take more than 40 bytes. *)

val encode_into : t -> Cstruct.t -> unit
(** [encode_into t b] writes [t]'s header in the first [header_length t] bytes of [b], with a zero
    checksum field.
    @raise Invalid_argument if [b] is too short. *)

val to_cstruct : ?pseudo:int -> t -> payload:string -> Cstruct.t
(** [to_cstruct ~pseudo t ~payload] is a whole segment with its checksum computed from the unfolded
    pseudo-header sum [pseudo] (no checksum, a zero field, when [pseudo] is absent). *)
