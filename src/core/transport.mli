(** The generic transport signature, after Fox's PROTOCOL (Biagioni et al., "Signatures for a
    network protocol stack", Fig. 3).

    Everything that moves datagrams for a stack matches {!S}: the deterministic simulator, kernel
    UDP in the real engine, and later the user-space UDP/IP over TAP and the capability network. A
    transport instance also gives time and timers, so that the code that binds a stack to it
    ({!Consort_engine.Endpoint}) is the same for all of them. *)

type error =
  [ `Closed  (** the connection was closed *)
  | `Too_big of int * int  (** datagram of this size over this MTU *)
  | `Unreachable of string  (** no route to the address *)
  | `Address_in_use of string
  | `Bad_address of string
  | `Unsupported of string  (** the control or query is not available here *)
  | `System of string  (** an error from the operating system *) ]
(** The fixed set of errors every transport reports. *)

val pp_error : error Fmt.t

module type S = sig
  type t
  (** A transport instance: one simulated network, or one engine. *)

  type address

  val pp_address : address Fmt.t
  val equal_address : address -> address -> bool
  val address_to_string : address -> string
  val address_of_string : string -> (address, string) result

  type connection
  (** An open endpoint, bound to a local address. *)

  type handler = {
    recv : src:address -> Iovec.t -> unit;  (** a datagram arrived; the handler owns the iovec *)
    closed : unit -> unit;  (** the connection went away (crash, close) *)
  }

  val open_ : t -> address -> (connection -> handler) -> (connection, error) result
  (** [open_ t addr f] binds a connection at [addr]; [f] is called once with the connection to make
      its handler (Fox's upcall). *)

  val send : connection -> dst:address -> Msg.t -> (unit, error) result
  (** [send c ~dst msg] sends one datagram with [msg]'s bytes (headers and body, scatter-gather
      where the transport can). The caller keeps ownership of [msg]. *)

  val cast : connection -> dsts:address list -> Msg.t -> (unit, error) result
  (** [cast c ~dsts msg] sends one datagram to each of [dsts], by IP multicast where the transport
      has it, by unicast fan-out otherwise. *)

  val close : connection -> unit

  type control =
    | Drop_filter of (src:address -> Cstruct.t -> bool) option
        (** drop received datagrams for which the filter is [true]; for tests of loss over real
            sockets *)
    | Join_multicast of address

  val control : connection -> control -> (unit, error) result

  type info = {
    local : address;
    mtu : int;  (** largest datagram, headers included *)
    multicast : bool;  (** whether {!val-cast} uses IP multicast *)
    sent : int;  (** datagrams sent *)
    received : int;  (** datagrams received and handed up *)
    dropped : int;  (** datagrams dropped (filter, errors, full buffers) *)
  }

  val query : connection -> info
  val now : t -> Time.t

  type timer

  val at : t -> Time.t -> (unit -> unit) -> timer
  (** [at t time f] calls [f] once, at or after [time]. *)

  val cancel : timer -> unit
end
