(** The checksum of a transport segment (UDP, TCP) and its pseudo-header, over IPv4 (RFC 768, RFC
    9293 3.1) and IPv6 (RFC 8200 8.1): one path for every transport and every IP version.

    A lower layer gives the sum of the pseudo-header of a connection ({!Pseudo_header.S}, or {!ipv4}
    / {!ipv6} from the addresses); the transport fills in and checks its checksum field with {!fill}
    and {!valid}. *)

val ipv4 : src:Ipv4_addr.t -> dst:Ipv4_addr.t -> proto:int -> len:int -> int
(** [ipv4 ~src ~dst ~proto ~len] is the sum of the IPv4 pseudo-header of a [len]-byte segment of
    protocol [proto] (a folded one's-complement sum, as {!Checksum.sum}). *)

val ipv6 : src:Ipv6_addr.t -> dst:Ipv6_addr.t -> proto:int -> len:int -> int
(** [ipv6 ~src ~dst ~proto ~len] is the sum of the IPv6 pseudo-header (RFC 8200 8.1: source,
    destination, 32-bit length, next header). *)

val fill : ?zero:int -> pseudo:int -> field:int -> Cstruct.t -> unit
(** [fill ~pseudo ~field seg] writes into [seg] at offset [field] the checksum of segment [seg] (its
    whole window, header included) with pseudo-header sum [pseudo]. A checksum that comes out 0 is
    written as [zero] (default 0; UDP passes [0xffff], since 0 means "no checksum" for UDP over
    IPv4, RFC 768).
    @raise Invalid_argument if [field + 2 > Cstruct.length seg]. *)

val valid : pseudo:int -> Cstruct.t -> bool
(** [valid ~pseudo seg] holds when segment [seg], checksum field filled in, sums with [pseudo] to
    [0xffff]. *)

val valid_sub : pseudo:int -> Cstruct.t -> len:int -> bool
(** [valid_sub ~pseudo seg ~len] is [valid ~pseudo (Cstruct.sub seg 0 len)] without the view. *)
