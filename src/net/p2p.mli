(** A point-to-point link, or a tunnel: IP datagrams straight on a device, with no link header, no
    link addresses and no neighbour resolution (what a TUN device, a serial line or a tunnel
    carries). It matches {!Ipv4.LINK}, so IPv4 over it is one functor application:
    {[
      module Link = P2p.Make (Device)
      module Ip = Ipv4.Make (Link)
    ]}

    Every datagram sent goes to the one peer at the other end, whatever next hop IP names. A
    received frame is an IP datagram: its version (4 or 6) chooses the passive open it goes to (the
    one for ethertype 0x0800 or 0x86dd); other frames are counted and dropped. [control] is accepted
    and ignored (there is nothing to resolve). *)

type info = {
  frames_in : int;
  frames_out : int;
  unknown : int;  (** frames neither IPv4 nor IPv6, or with no receiver *)
}

val pp_info : info Fmt.t

module type S = sig
  include Ipv4.LINK with type status = unit and type info = info

  type device

  val create : device -> t
  (** [create dev] runs the link on [dev] (taking over its receive upcall). *)

  val remote : connection -> Ipv4_addr.t
  (** The next hop a connection was opened for ([Ipv4_addr.any] for a passive open's). *)
end

module Make (D : Device.S) : S with type device = D.t
