(** IPv6 (RFC 8200) over Ethernet, with neighbour discovery (RFC 4861) and ICMPv6 (RFC 4443) built
    in.

    One interface with a link-local address (from the MAC, RFC 4291 appendix A) and optionally one
    configured address and prefix; routes to the link and, with a gateway, beyond. Connections are
    per (remote address, next header), shared and counted as {!Ipv4}'s are, and those a passive open
    made are a bounded cache ({!Lru}).

    Neighbour discovery ([config.neighbours], the same cache as ARP's): a packet for a neighbour not
    yet resolved waits (at most [queue_limit] per neighbour, [max_queued] in all) while neighbour
    solicitations go to its solicited-node group, at most once per [retry_interval], [retries]
    times; resolved entries last [ttl] (the reachable time) and, while in use, are refreshed by a
    unicast solicitation in their last [refresh]. At most [max_entries] resolved entries (least
    recently used evicted) and [max_pending] resolutions are kept. Solicitations for our addresses
    are answered and teach us their sender; advertisements update entries we have.

    ICMPv6: echo requests are answered; errors received are passed to the connection whose datagram
    they quote ({!Icmp_error}); we send destination unreachable (port, from UDP; unrecognised next
    header as a parameter problem), at most [icmp_rate] a second. Echo replies and ICMPv6 messages
    we do not handle go to a connection of next header 58 with their sender, if one is open (how
    ping is done): on such a connection [send] fills in the ICMPv6 checksum.

    Received datagrams pass through hop-by-hop, destination options, routing (with no segments left)
    and fragment headers; fragments are reassembled within the same limits, and the same eviction of
    the oldest, as {!Ipv4} (both are {!Ip_common.Reassembly}); overlapping fragments drop their
    datagram (RFC 5722). Datagrams over the link MTU are sent in fragments (RFC 8200 4.5; [`Too_big]
    for a payload over 65535 bytes). Datagrams from a multicast, loopback or our own address are
    dropped. *)

type address = { dst : Ipv6_addr.t; proto : int }
type address_pattern = { protocol : int; source : Ipv6_addr.t option }

type icmp_error =
  | Unreachable of int  (** code: 0 no route, 1 prohibited, 3 address, 4 port *)
  | Packet_too_big of int  (** the next hop's MTU *)
  | Time_exceeded of int
  | Parameter_problem of { code : int; pointer : int }

val pp_icmp_error : icmp_error Fmt.t

type status =
  | Icmp_error of { error : icmp_error; quoted : string }
      (** An ICMPv6 error about a datagram sent on this connection; [quoted] is the start of that
          datagram's payload after its IPv6 header. *)

type control =
  | Set_address of Ipv6_addr.Prefix.t
  | Set_gateway of Ipv6_addr.t option
  | Add_neighbour of Ipv6_addr.t * Mac_addr.t  (** a static entry *)

type config = {
  neighbours : Ip_common.neighbours;
      (** the neighbour cache, as ARP's ({!Ip_common.default_neighbours}) but for [ttl], the
          reachable time: 30 s *)
  max_connections : int;  (** passively made, default 4096 *)
  connection_idle : Consort.Time.t;  (** default 600 s *)
  reassembly : Ipv4.reassembly;  (** default {!Ipv4.default_reassembly}, 60 s *)
  icmp_rate : int;  (** ICMPv6 errors a second, default 100 *)
}

val default_config : config

type v6 = {
  addresses : Ipv6_addr.t list;
  neighbours : (Ipv6_addr.t * Mac_addr.t option) list;  (** [None]: being resolved *)
  solicitations_sent : int;
  solicitations_received : int;
  advertisements_sent : int;
  advertisements_received : int;
  resolution_failed : int;
  queue_dropped : int;
  echo_replies_sent : int;
  icmp_errors_received : int;
}
(** IPv6's own counters, beside those both versions keep ({!Ip_common.type-info}: [sent],
    [received], [bad] (malformed, bad source, bad ICMPv6 checksum), [fragments_sent] (fragments of
    datagrams over the link MTU, RFC 8200 section 4.5), reassembly and connections). *)

type info = v6 Ip_common.info
(** What {!Ip_common.type-info} counts for both versions, and IPv6's own part in [version]. *)

val pp_info : info Fmt.t

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type host = Ipv6_addr.t
  type ethernet

  val create :
    ?config:config ->
    ?address:Ipv6_addr.Prefix.t ->
    ?gateway:Ipv6_addr.t ->
    clock:Clock.t ->
    pool:Consort.Pool.t ->
    ethernet ->
    t
  (** [create ~clock ~pool eth] runs IPv6 on [eth] with its link-local address and, if given,
      [address]. *)

  val link_local : t -> Ipv6_addr.t
  val address : t -> Ipv6_addr.t option
  val remote : connection -> host

  val local : connection -> Ipv6_addr.t
  (** The source address of what a connection sends: the link-local one for a link-local peer, the
      configured one otherwise. *)

  val protocol : connection -> int

  val lookup : t -> Ipv6_addr.t -> Mac_addr.t option
  (** A neighbour's resolved, unexpired entry. *)

  module Pseudo_header : Pseudo_header.S with type connection = connection
  (** The IPv6 pseudo-header of a connection, for UDP and TCP checksums. *)

  val send_icmp_error : t -> icmp_error -> Packet.t -> unit
  (** [send_icmp_error t err p] sends [err] to the source of the datagram [p] was delivered in
      ([p]'s window where IPv6 delivered it); it takes [p]. Nothing is sent about multicast
      datagrams or over the rate limit. *)
end

module Make (E : Ethernet.S) : S with type ethernet = E.t
