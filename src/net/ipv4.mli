(** IPv4 (RFC 791) over ARP and Ethernet: one interface with one address and prefix, routes to the
    local subnet and a default gateway, fragmentation on send and reassembly on receive.

    Connections are per (remote address, protocol) and shared: an active open of an address that
    already has a connection (opened actively or made by a passive open when the first datagram
    arrived) returns that connection, keeping its handler, and counts one more user; [close] removes
    it when its last user closes it. A layer above can therefore demultiplex on connection identity
    (or [remote]).

    The connections a passive open made (the first datagram from a new source) are a cache ({!Lru}):
    at most [max_connections], the least recently used evicted to make room, those idle for
    [connection_idle] dropped. An evicted connection is only forgotten: it can still send, and the
    next datagram from its peer makes a new one through the listener. Connections opened actively
    stay until their last user closes them. Datagrams whose source is 0.0.0.0, in 127/8, multicast,
    class E, a broadcast address or our own address are dropped.

    Reassembly keeps at most [max_datagrams] datagrams in progress, [max_bytes] bytes of fragments
    in all and [max_fragments] per datagram, each for at most [timeout]. A new datagram over
    [max_datagrams], or a fragment over [max_bytes], gives up the datagrams started longest ago (a
    flood of fragments that never complete cannot lock out new ones); a fragment over
    [max_fragments], or overlapping another (other than an exact duplicate, which is ignored), drops
    its datagram. Datagrams over the MTU are fragmented unless the caller asked for DF. Options are
    accepted and ignored on receive, never sent. *)

type address = { dst : Ipv4_addr.t; proto : int }

type address_pattern = { protocol : int; source : Ipv4_addr.t option }
(** Datagrams of [protocol], from [source] or (with [None]) anyone. *)

type status =
  | Icmp_error of { error : Icmp_packet.t; quoted : string }
      (** An ICMP error about a datagram sent on this connection; [quoted] is the start of that
          datagram's payload (its transport header, at least 8 bytes from a conforming sender). *)

type control = Set_address of Ipv4_addr.Prefix.t | Set_gateway of Ipv4_addr.t option

type reassembly = Ip_common.reassembly = {
  timeout : Consort.Time.t;  (** default 30 s *)
  max_bytes : int;  (** default 1 MiB *)
  max_fragments : int;  (** default 64 *)
  max_datagrams : int;  (** default 64 *)
}

val default_reassembly : reassembly

type v4 = {
  address : Ipv4_addr.Prefix.t;
  gateway : Ipv4_addr.t option;
  bad_source : int;  (** of [bad]: a source address we refuse *)
}
(** IPv4's own part of {!type-info}. *)

type info = v4 Ip_common.info
(** What {!Ip_common.type-info} counts for both versions ([sent]: datagrams sent, a fragmented one
    counted once; [received]: delivered up; [bad]: malformed headers, bad checksums, bad source
    addresses; [connections_evicted]: passively made connections evicted, for room or idle), and
    IPv4's own part in [version]. *)

val pp_info : info Fmt.t

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type host = Ipv4_addr.t
  (** The peer's address, as {!remote} gives it. *)

  type arp

  val create :
    ?reassembly:reassembly ->
    ?max_connections:int ->
    ?connection_idle:Consort.Time.t ->
    ?gateway:Ipv4_addr.t ->
    clock:Clock.t ->
    pool:Consort.Pool.t ->
    address:Ipv4_addr.Prefix.t ->
    arp ->
    t
  (** [create ~clock ~pool ~address arp] runs IPv4 with [address] (whose host bits are ours) over
      [arp]; fragments and ICMP errors are allocated from [pool]. At most [max_connections] (default
      4096) passively made connections are kept, and none idle longer than [connection_idle]
      (default 600 s).
      @raise Invalid_argument if [max_connections < 1]. *)

  val address : t -> Ipv4_addr.t
  val remote : connection -> host
  val local : connection -> Ipv4_addr.t
  val protocol : connection -> int

  val mtu : connection -> int
  (** The largest payload sent in one unfragmented datagram (also {!max_packet}); {!send} accepts up
      to 65515 bytes, fragmenting. *)

  val send_df : connection -> Packet.t -> (unit, Protocol.error) result
  (** [send_df c p] is {!send} with Don't Fragment set: [`Too_big] rather than fragmentation. *)

  module Pseudo_header : Pseudo_header.S with type connection = connection
  (** The IPv4 pseudo-header of a connection, for UDP and TCP checksums. *)

  val send_icmp_error : t -> Icmp_packet.t -> Packet.t -> unit
  (** [send_icmp_error t err p] sends [err] (destination unreachable, time exceeded) to the source
      of the datagram [p] was delivered in; [p]'s window must start where IPv4 delivered it (the
      transport header). It takes [p]. Nothing is sent about broadcasts or after the rate limit (100
      a second). *)

  val deliver_icmp_error : t -> Icmp_packet.t -> Cstruct.t -> unit
  (** [deliver_icmp_error t err quoted] passes an ICMP error received, with the datagram it quotes
      (IP header first), to the connection that sent that datagram, as [Icmp_error] (used by
      {!Icmp}). *)
end

(** What IPv4 runs over: a link that delivers packets to a next hop named by its IPv4 address.
    {!Arp.S} (ARP over Ethernet) is one; {!P2p.Make} (a point-to-point link or a tunnel, with no
    link addresses and no ARP) is another. [control] is how IPv4 tells the link its own address and
    its subnet's broadcast address (a link without neighbour resolution ignores both). *)
module type LINK = sig
  include
    Protocol.S
      with type address = Arp.address
       and type address_pattern = Arp.address_pattern
       and type control = Arp.control

  val mtu : t -> int
  (** The largest IP datagram the link carries whole. *)
end

(** [Make (A)] is IPv4 over [A]: [Make (Arp.Make (Ethernet.Make (Device)))] on Ethernet,
    [Make (P2p.Make (Device))] on a point-to-point link. *)
module Make (A : LINK) : S with type arp = A.t

(** [Df (I)] is [I] with Don't Fragment set on every datagram sent ([send] is {!S.send_df}): the
    lower layer for TCP, so that a path with a smaller MTU says so (ICMP fragmentation needed, RFC
    1191) instead of fragmenting, and a datagram over the local MTU is refused. *)
module Df (I : S) : S with type t = I.t and type connection = I.connection and type arp = I.arp
