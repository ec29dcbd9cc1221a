(** A whole IPv4 stack on one device: the functors applied in order (Ethernet over the device, ARP
    over Ethernet, IPv4 over ARP, ICMP and UDP over IPv4, UDP with checksums on), as Fox builds its
    standard stack. This module is that stack on {!Device.t}; {!Make} builds it on any {!Device.S}.
    TCP is one more functor application, over [Ip] with Don't Fragment set ({!Ipv4.Df}), and its
    parameters (the local host, the pseudo-header checksum, a clock, a generator and a pool: see
    {!Tcp_types.PARAMS}):
    {[
      module Tcp = Tcp.Make (Ipv4.Df (Ipstack.Ip)) (Params)
    ]} *)

type arp_config = Arp.config

module type S = sig
  type device

  module Eth : Ethernet.S with type device = device
  module Arp : Arp.S with type ethernet = Eth.t
  module Ip : Ipv4.S with type arp = Arp.t
  module Icmp : Icmp.S with type ip = Ip.t

  module Ip6 : Ipv6.S with type ethernet = Eth.t
  (** IPv6 on the same Ethernet, for [Ipv6.Make]'s [create] (not made by {!create}). *)

  (** UDP over that IPv6, checksums on. *)
  module Udp6 : Udp.GENERIC with type host = Ipv6_addr.t and type ip = Ip6.t

  module Udp : Udp.S with type ip = Ip.t

  type t = {
    device : device;
    clock : Clock.t;
    pool : Consort.Pool.t;
    eth : Eth.t;
    arp : Arp.t;
    ip : Ip.t;
    icmp : Icmp.t;
    udp : Udp.t;
  }

  val create :
    ?arp:arp_config ->
    ?reassembly:Ipv4.reassembly ->
    ?gateway:Ipv4_addr.t ->
    clock:Clock.t ->
    pool:Consort.Pool.t ->
    address:Ipv4_addr.Prefix.t ->
    device ->
    t
  (** [create ~clock ~pool ~address dev] is a stack on [dev] with [address]; packets it makes come
      from [pool]. It answers ARP and ping and sends port unreachable for UDP ports nobody opened.
  *)

  val pp : t Fmt.t
  (** Every layer's counters. *)
end

module Make (D : Device.S) : S with type device = D.t
include S with type device = Device.t
