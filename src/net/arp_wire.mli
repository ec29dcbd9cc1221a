(** ARP for IPv4 over Ethernet (RFC 826): offsets and accessors. *)

val sizeof_arp : int
(** 28. *)

val get_htype : Cstruct.t -> int
val set_htype : Cstruct.t -> int -> unit
val get_ptype : Cstruct.t -> int
val set_ptype : Cstruct.t -> int -> unit
val get_hlen : Cstruct.t -> int
val set_hlen : Cstruct.t -> int -> unit
val get_plen : Cstruct.t -> int
val set_plen : Cstruct.t -> int -> unit
val get_op : Cstruct.t -> int
val set_op : Cstruct.t -> int -> unit
val get_sha : Cstruct.t -> Mac_addr.t
val set_sha : Cstruct.t -> Mac_addr.t -> unit
val get_spa : Cstruct.t -> Ipv4_addr.t
val set_spa : Cstruct.t -> Ipv4_addr.t -> unit
val get_tha : Cstruct.t -> Mac_addr.t
val set_tha : Cstruct.t -> Mac_addr.t -> unit
val get_tpa : Cstruct.t -> Ipv4_addr.t
val set_tpa : Cstruct.t -> Ipv4_addr.t -> unit
