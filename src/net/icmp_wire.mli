(** ICMP header layout (RFC 792): offsets and accessors. *)

val sizeof_icmp : int
(** 8: type, code, checksum and four bytes that depend on the type. *)

val echo_reply : int
val dest_unreachable : int
val echo_request : int
val time_exceeded : int
val get_ty : Cstruct.t -> int
val set_ty : Cstruct.t -> int -> unit
val get_code : Cstruct.t -> int
val set_code : Cstruct.t -> int -> unit
val get_checksum : Cstruct.t -> int
val set_checksum : Cstruct.t -> int -> unit
val get_id : Cstruct.t -> int
val set_id : Cstruct.t -> int -> unit
val get_seq : Cstruct.t -> int
val set_seq : Cstruct.t -> int -> unit

val get_rest : Cstruct.t -> int
(** The four bytes after the checksum, as one 32-bit number. *)

val set_rest : Cstruct.t -> int -> unit
