(** IPv4 header layout (RFC 791): offsets and accessors. *)

val sizeof_ipv4 : int
(** 20, the header without options. *)

val proto_icmp : int
val proto_tcp : int
val proto_udp : int
val get_version : Cstruct.t -> int

val get_ihl : Cstruct.t -> int
(** Header length in 32-bit words. *)

val set_version_ihl : Cstruct.t -> ihl:int -> unit
val get_tos : Cstruct.t -> int
val set_tos : Cstruct.t -> int -> unit
val get_len : Cstruct.t -> int
val set_len : Cstruct.t -> int -> unit
val get_id : Cstruct.t -> int
val set_id : Cstruct.t -> int -> unit

val get_flags_off : Cstruct.t -> int
(** Flags (3 high bits) and fragment offset (in 8-byte units). *)

val set_flags_off : Cstruct.t -> int -> unit
val flag_df : int
val flag_mf : int
val get_ttl : Cstruct.t -> int
val set_ttl : Cstruct.t -> int -> unit
val get_proto : Cstruct.t -> int
val set_proto : Cstruct.t -> int -> unit
val get_checksum : Cstruct.t -> int
val set_checksum : Cstruct.t -> int -> unit
val get_src : Cstruct.t -> Ipv4_addr.t
val set_src : Cstruct.t -> Ipv4_addr.t -> unit
val get_dst : Cstruct.t -> Ipv4_addr.t
val set_dst : Cstruct.t -> Ipv4_addr.t -> unit
