(** What a transport protocol (UDP, TCP) needs from the layer below for its checksum: the sum of the
    pseudo-header of a segment (seed 003: "in the case of TCP we pass a function which computes the
    checksum of the required elements of the IP header").

    A transport functor takes its lower layer as any {!Protocol.S}, a module
    [P : S with type connection = Lower.connection] and a {!Checksum.POLICY}:
    {[
      module Tcp_ip = Tcp.Make (Ip) (Ip.Pseudo_header) (Checksum.On)
      module Tcp_eth = Tcp.Make (Eth) (Pseudo_header.None (Eth)) (Checksum.Off)
    ]}
    The checksum of a segment [seg] (checksum field zeroed) sent on [c] is
    [Checksum.digest ~init:(P.sum c ~len:(Cstruct.length seg)) seg]; a received one is good when
    [Checksum.valid ~init:(P.sum c ~len) seg]. *)

module type S = sig
  type connection

  val sum : connection -> len:int -> int
  (** [sum c ~len] is the one's-complement sum (see {!Checksum}) of the pseudo-header of a
      [len]-byte segment exchanged on [c]: for IPv4, source, destination, zero, protocol and [len]
      (RFC 793 3.1, RFC 768). It is the same for both directions. *)
end

(** No pseudo-header (a transport straight over Ethernet): the sum is 0. *)
module None (L : sig
  type connection
end) : S with type connection = L.connection
