(** IPv4 headers as values. *)

type t = {
  tos : int;
  id : int;
  df : bool;  (** don't fragment *)
  mf : bool;  (** more fragments *)
  frag_offset : int;  (** in bytes, a multiple of 8 *)
  ttl : int;
  proto : int;
  src : Ipv4_addr.t;
  dst : Ipv4_addr.t;
  options : string;  (** raw, a multiple of 4 bytes, at most 40 *)
}

val v :
  ?tos:int ->
  ?id:int ->
  ?df:bool ->
  ?ttl:int ->
  proto:int ->
  src:Ipv4_addr.t ->
  dst:Ipv4_addr.t ->
  unit ->
  t
(** An unfragmented header without options. *)

val pp : t Fmt.t
val equal : t -> t -> bool

val header_length : t -> int
(** 20 plus the options. *)

val decode : ?verify:bool -> Cstruct.t -> (t * Cstruct.t, [> `Msg of string ]) result
(** [decode buf] is the header at the start of [buf] and the payload (trimmed to the header's total
    length; trailing padding dropped). It checks the version, lengths and (if [verify], the default)
    the header checksum; it never raises. *)

val decode_quoted : Cstruct.t -> (t * Cstruct.t, [> `Msg of string ]) result
(** [decode_quoted q] is the header quoted by an ICMP error and the part of its payload quoted: as
    RFC 792 and RFC 1812 allow, the quote may be shorter than the header's total length, but holds
    at least the header and 8 bytes of payload. The checksum is not checked (a router may quote the
    header as it forwarded it); it never raises. *)

val encode : t -> payload_len:int -> Cstruct.t -> unit
(** [encode t ~payload_len buf] writes the header, checksum included, at the start of [buf].
    @raise Invalid_argument if [buf] is too short or a field is out of range. *)

val to_string : t -> string -> string
(** [to_string t payload] is a whole datagram. *)
