(** Ethernet II header layout: offsets and accessors. *)

val sizeof_ethernet : int
(** 14. *)

val ethertype_ipv4 : int
val ethertype_arp : int
val get_dst : Cstruct.t -> Mac_addr.t
val set_dst : Cstruct.t -> Mac_addr.t -> unit
val get_src : Cstruct.t -> Mac_addr.t
val set_src : Cstruct.t -> Mac_addr.t -> unit
val get_ethertype : Cstruct.t -> int
val set_ethertype : Cstruct.t -> int -> unit
