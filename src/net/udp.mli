(** UDP (RFC 768) over IPv4, or over any lower layer that matches {!LOWER} ({!Over}): IPv6, or IPv4
    on a link without ARP.

    A passive open on a port accepts datagrams from anyone: each datagram comes on its own
    connection, naming its sender, and [send] on that connection answers the sender (UDP keeps no
    state per peer). An active open binds a local port (an ephemeral one from 49152 when [src_port]
    is 0) to one remote address and port; datagrams from elsewhere to that port are dropped. A
    datagram for a port with neither is answered with ICMP port unreachable. Checksums are computed
    and checked as the {!Checksum.POLICY} parameter says (a zero checksum on receive means none was
    sent and is accepted over IPv4; over IPv6 it is refused, RFC 8200 8.1). The checksum is
    {!Transport_checksum}'s. *)

type 'host endpoint = { dst : 'host; dst_port : int; src_port : int }
(** A remote endpoint and the local port ([0]: an ephemeral one). *)

type address = Ipv4_addr.t endpoint
type address_pattern = Port of int

type status =
  | Unreachable of Icmp_packet.unreachable
      (** an ICMP destination unreachable for a datagram sent on this (actively opened) connection
      *)

type control = Unlisten of int  (** end the passive open of this port *)

type info = {
  datagrams_in : int;
  datagrams_out : int;
  bad : int;  (** short, bad length or bad checksum *)
  no_port : int;  (** answered with port unreachable *)
  wrong_peer : int;  (** for an actively opened port, from someone else *)
}

val pp_info : info Fmt.t

(** UDP over a lower layer whose hosts are [host]. *)
module type GENERIC = sig
  type host

  include
    Protocol.S
      with type address = host endpoint
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ip

  val create : ip -> t
  (** [create ip] runs UDP over [ip] (a passive open of all of UDP's datagrams, protocol 17). *)

  val remote : connection -> host * int
  (** The peer's address and port. *)

  val local_port : connection -> int

  val sender : t -> address -> (connection, Protocol.error) result
  (** [sender t a] is a connection that sends from local port [a.src_port] to [a.dst] and
      [a.dst_port] without taking the port: datagrams for that port still go to whoever opened it
      (typically a passive open), and none come up on this connection. It is how a service that
      receives on a passive open sends first to a peer it has not heard from. {!close} ends it. *)
end

module type S = GENERIC with type host = Ipv4_addr.t
(** UDP over IPv4. *)

(** What UDP needs of the layer below: the generic signature, its hosts, and how UDP is addressed,
    checksummed and told of errors there. *)
module type LOWER = sig
  type host

  include Protocol.S

  val remote : connection -> host
  val equal_host : host -> host -> bool

  val udp_address : host -> address
  (** The lower address of UDP at a host (for IP: the host, protocol 17). *)

  val udp_pattern : address_pattern
  (** The passive open that receives every UDP datagram. *)

  val pseudo_header : connection -> len:int -> int
  (** The pseudo-header sum of a [len]-byte datagram on a connection ({!Transport_checksum.ipv4} and
      friends; [0] for none). *)

  val zero_checksum_ok : bool
  (** Whether a zero checksum field means "none" (IPv4) rather than an error (IPv6); when not,
      checksums are always sent. *)

  val max_payload : int
  (** The largest datagram payload UDP accepts. *)

  val port_unreachable : t -> Packet.t -> unit
  (** [port_unreachable t p] answers the datagram just delivered, whose window [p] is (from its UDP
      header on), with the lower layer's "port unreachable"; it takes [p]. *)

  val unreachable : status -> (Icmp_packet.unreachable * string) option
  (** A lower status that reports a datagram undeliverable: the reason and the quoted start of the
      datagram (its UDP header first). *)
end

(** [Over (Ip) (C)] is UDP over [Ip]. *)
module Over (Ip : LOWER) (C : Checksum.POLICY) : GENERIC with type host = Ip.host and type ip = Ip.t

(** IPv4 as UDP's lower layer. *)
module Over_ipv4 (Ip : Ipv4.S) :
  LOWER
    with type host = Ipv4_addr.t
     and type t = Ip.t
     and type connection = Ip.connection
     and type address = Ipv4.address
     and type address_pattern = Ipv4.address_pattern
     and type status = Ipv4.status

(** IPv6 as UDP's lower layer: [Udp.Over (Udp.Over_ipv6 (Ip6)) (Checksum.On)]. ICMPv6 unreachable
    codes map to the nearest IPv4 ones (no route: [Net], address: [Host], port: [Port], packet too
    big: [Frag_needed]). *)
module Over_ipv6 (Ip : Ipv6.S) :
  LOWER
    with type host = Ipv6_addr.t
     and type t = Ip.t
     and type connection = Ip.connection
     and type address = Ipv6.address
     and type address_pattern = Ipv6.address_pattern
     and type status = Ipv6.status

(** [Make (Ip) (C)] is [Over (Over_ipv4 (Ip)) (C)]: UDP over IPv4, on Ethernet ({!Ipstack}) or on a
    point-to-point link ({!P2p}) alike. *)
module Make (Ip : Ipv4.S) (C : Checksum.POLICY) : S with type ip = Ip.t
