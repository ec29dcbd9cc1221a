(** Consort's generic transport ({!Consort.Transport.S}) over this stack's UDP, so that group
    communication runs over our own UDP/IPv4/Ethernet: [Consort_group.Group.Make (Udp_transport)].

    A transport instance is one {!Ipstack} with its clock. Addresses are ["IP:PORT"] as for kernel
    UDP ({!Consort_engine.Udp}), and the wire format is the same plain UDP datagram, so members over
    this transport and members over kernel sockets can be in one group.

    {!open_} takes a port with a passive UDP open ([0.0.0.0] or the stack's own address; port [0]
    picks a free one from 49152): every datagram to it comes up, naming its sender. Sending goes
    through a [Udp.S.sender] per destination, kept while the connection is open, from the
    connection's port. Datagrams up to 65507 bytes are accepted (IPv4 fragments those over the link,
    see {!link_mtu}); each is copied once from the message into a packet with room for the headers,
    and once on receipt into an iovec of its own size, so that a datagram kept by a protocol never
    pins a frame buffer. Until ARP has resolved a peer, what is sent to it waits in ARP's short
    queue: of a large first datagram, only the last fragments survive (the group's reliable layers
    retransmit). A datagram to the stack's own address goes to the connection on that port in the
    same instance (or nowhere, if none is open), as a host's loopback would take it, from a timer
    due at once: never from inside {!send}. {!cast} is unicast fan-out: this stack has no IP
    multicast, and [Join_multicast] is [`Unsupported]. Time and timers are the stack's [Clock.t]. *)

type address = { ip : Ipv4_addr.t; port : int }
(** A UDP endpoint: an IPv4 address and a port. *)

module type S = sig
  type stack

  include Consort.Transport.S with type address = address and type timer = Clock.cancel

  val create : ?pool:Consort.Pool.t -> stack -> t
  (** [create stack] is a transport over [stack]'s UDP and clock; received datagrams are copied into
      iovecs from [pool] (default: the stack's pool). *)

  val stack : t -> stack
  (** [stack t] is the stack [t] runs over. *)

  val local : connection -> address
  (** [local c] is the address [c] is bound to: the stack's address and the port really taken. *)

  val mtu : int
  (** The largest datagram {!send} takes, 65507 bytes (what IPv4 can carry in fragments); also
      [info.mtu]. *)

  val link_mtu : t -> int
  (** [link_mtu t] is the largest datagram sent in one unfragmented frame (1472 bytes on an Ethernet
      MTU of 1500). *)

  val connections : t -> int
  (** [connections t] is the number of connections open now. *)
end

module Make (S : Ipstack.S) : S with type stack = S.t
include S with type stack = Ipstack.t with type address := address
