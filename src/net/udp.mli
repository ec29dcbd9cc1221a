(** UDP (RFC 768) over IPv4.

    A passive open on a port accepts datagrams from anyone: each datagram
    comes on its own connection, naming its sender, and {!send} on that
    connection answers the sender (UDP keeps no state per peer). An active
    open binds a local port (an ephemeral one from 49152 when [src_port] is
    0) to one remote address and port; datagrams from elsewhere to that
    port are dropped. A datagram for a port with neither is answered with
    ICMP port unreachable. Checksums are computed and checked as the
    {!Checksum.POLICY} parameter says (a zero checksum on receive means
    none was sent and is accepted). *)

type address = { dst : Ipv4_addr.t; dst_port : int; src_port : int }

type address_pattern = Port of int

type status =
  | Unreachable of Icmp_packet.unreachable
      (** an ICMP destination unreachable for a datagram sent on this
          (actively opened) connection *)

type control = Unlisten of int  (** end the passive open of this port *)

type info = {
  datagrams_in : int;
  datagrams_out : int;
  bad : int;  (** short, bad length or bad checksum *)
  no_port : int;  (** answered with port unreachable *)
  wrong_peer : int;  (** for an actively opened port, from someone else *)
}

val pp_info : info Fmt.t

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ip

  val create : ip -> t
  (** [create ip] runs UDP over [ip] (a passive open of protocol 17). *)

  val remote : connection -> Ipv4_addr.t * int
  (** The peer's address and port. *)

  val local_port : connection -> int

  val sender : t -> address -> (connection, Protocol.error) result
  (** [sender t a] is a connection that sends from local port
      [a.src_port] to [a.dst] and [a.dst_port] without taking the port:
      datagrams for that port still go to whoever opened it (typically a
      passive open), and none come up on this connection. It is how a
      service that receives on a passive open sends first to a peer it
      has not heard from. {!close} ends it. *)
end

module Make (Ip : Ipv4.S) (C : Checksum.POLICY) : S with type ip = Ip.t
