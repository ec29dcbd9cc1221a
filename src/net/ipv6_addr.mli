(** IPv6 addresses (RFC 4291) and prefixes.

    An address is its 16 bytes in network order, in a string (immutable, compared and hashed as a
    string). Text is parsed in every RFC 4291 2.2 form (with [::] and a trailing dotted quad) and
    printed in the RFC 5952 canonical form. *)

type t = private string

val of_octets : string -> (t, [ `Msg of string ]) result
(** [of_octets s] is the address whose 16 bytes are [s]. *)

val of_octets_exn : string -> t
(** @raise Invalid_argument unless [s] is 16 bytes. *)

val to_octets : t -> string

val of_string : string -> (t, [ `Msg of string ]) result
(** [of_string "fe80::1"]. *)

val of_string_exn : string -> t
(** @raise Invalid_argument on a malformed address. *)

val to_string : t -> string
(** The canonical text form (RFC 5952): lower case, longest run of two or more zero groups as [::]
    (the first if tied). *)

val pp : t Fmt.t
val equal : t -> t -> bool
val compare : t -> t -> int
val hash : t -> int

val unspecified : t
(** [::]. *)

val loopback : t
(** [::1]. *)

val all_nodes : t
(** [ff02::1]. *)

val all_routers : t
(** [ff02::2]. *)

val is_multicast : t -> bool

val is_link_local : t -> bool
(** In [fe80::/10]. *)

val is_ipv4_mapped : t -> bool
(** In [::ffff:0:0/96]. *)

val solicited_node : t -> t
(** [solicited_node a] is [ff02::1:ffXX:XXXX] with [a]'s last 24 bits (RFC 4291 2.7.1). *)

val multicast_mac : t -> Mac_addr.t
(** The Ethernet address of a multicast group: [33:33] and the group's last 32 bits (RFC 2464 7). *)

val link_local_of_mac : Mac_addr.t -> t
(** [fe80::] and the modified EUI-64 interface identifier of a MAC (RFC 4291 appendix A). *)

val get : Cstruct.t -> int -> t
(** [get cs off] reads 16 bytes. *)

val set : Cstruct.t -> int -> t -> unit

(** Prefixes: an address and a length, as in [2001:db8::1/64]. *)
module Prefix : sig
  type addr = t
  type t = { addr : addr; len : int }

  val of_string : string -> (t, [ `Msg of string ]) result
  (** [of_string "2001:db8::1/64"]; the address keeps its host bits. *)

  val to_string : t -> string
  val pp : t Fmt.t

  val mem : addr -> t -> bool
  (** [mem a p] holds when [a]'s first [p.len] bits are [p.addr]'s. *)
end
