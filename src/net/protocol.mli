(** The generic protocol signature of the TCP/IP stack, after Fox's PROTOCOL (Biagioni, Harper, Lee,
    Milnes, "Signatures for a network protocol stack", Fig. 3).

    Every layer of the stack (Ethernet, ARP, IPv4, ICMP, UDP, TCP) matches {!S}. Protocol-specific
    signatures include it and make its types concrete with type equalities, as Fig. 4 does for IP; a
    functor that takes any [S] as its lower layer can then be stacked on any of them (TCP straight
    over Ethernet is one functor application).

    Receiving is by upcall: opening a connection installs a handler that the layer below calls with
    each packet, its own header already pulled. Sending passes a {!Packet.t} down; each layer pushes
    its header into the packet's headroom. Errors are a fixed polymorphic variant. *)

type error =
  [ `Closed  (** the connection is closed *)
  | `Refused of string  (** the peer refused (RST, ICMP port unreachable) *)
  | `Timeout  (** the peer stopped answering *)
  | `Reset  (** the peer reset the connection *)
  | `Unreachable of string  (** no route, no ARP answer *)
  | `Too_big of int  (** a packet over the layer's maximum of this size *)
  | `Bad_address of string
  | `In_use of string  (** the address or port is taken *)
  | `Unsupported of string
  | `System of string  (** an error from the device or the OS *) ]

val pp_error : error Fmt.t

val opened : string -> (unit, error) result -> unit
(** [opened who r] takes the result of the passive open by which a layer's [create] ([who], as
    ["Ipv4.create"]) listens on the layer below: that open can only fail on a programming error.
    @raise Invalid_argument naming [who] and the error. *)

module type S = sig
  type t
  (** One instance of the protocol: its state and its lower layer. *)

  type address
  (** A peer, as the layer above names it (for IP: destination address and protocol number; for TCP:
      remote address and port, local port). *)

  type address_pattern
  (** The peers a passive open accepts. *)

  type connection

  type handler = {
    receive : connection -> Packet.t -> unit;
        (** a packet for this connection, this layer's header pulled; the handler owns it *)
    status : connection -> status -> unit;  (** a change the upper layer must know of *)
  }

  and status
  (** Protocol-specific notifications (TCP: connected, peer closed, reset). *)

  val active_open : t -> address -> (connection -> handler) -> (connection, error) result
  (** [active_open t a f] opens a connection to [a]; [f] makes its handler once the connection
      exists (an upcall). *)

  val passive_open : t -> address_pattern -> (connection -> handler) -> (unit, error) result
  (** [passive_open t p f] accepts connections from peers matching [p]; [f] makes the handler of
      each new connection. *)

  val send : connection -> Packet.t -> (unit, error) result
  (** [send c p] sends [p]'s window; the layer takes ownership of [p]. *)

  val close : connection -> unit
  (** [close c] ends the connection gracefully. *)

  val abort : connection -> unit
  (** [abort c] ends it at once, even if the peer is unreachable. *)

  val max_packet : connection -> int
  (** The largest window [send] accepts on [c] (the MTU seen from above). *)

  val headroom : t -> int
  (** Bytes of header this layer and those below it push: what a packet given to [send] must have
      free in front. *)

  type control
  type info

  val control : t -> control -> (unit, error) result
  val query : t -> info
end

(** The types a protocol defines beside its functor (in its [Types] module, as {!Ipv4} does). *)
module type TYPES = sig
  type address
  type address_pattern
  type status
  type control
  type info
end

(** {!S} with the types of [T]: [include Protocol.S_WITH with module T := Types] says what
    [include Protocol.S with type address = address and type address_pattern = address_pattern ...]
    does, once. *)
module type S_WITH = sig
  module T : TYPES

  include
    S
      with type address = T.address
       and type address_pattern = T.address_pattern
       and type status = T.status
       and type control = T.control
       and type info = T.info
end

(** What a layer needs of the one below it, whatever that is. *)
module Lower (L : S) : sig
  val discard : L.connection -> L.handler
  (** The handler of a connection used only to send: what arrives on it is released, statuses
      ignored. *)

  val listen : string -> L.t -> L.address_pattern -> (Packet.t -> unit) -> unit
  (** [listen who l pattern input]: the passive open by which a layer's [create] ([who]) takes every
      packet of [pattern] from [l], each to [input] (statuses ignored), as {!opened}.
      @raise Invalid_argument naming [who] if the open fails. *)
end
