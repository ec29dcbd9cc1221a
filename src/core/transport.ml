type error =
  [ `Closed
  | `Too_big of int * int
  | `Unreachable of string
  | `Address_in_use of string
  | `Bad_address of string
  | `Unsupported of string
  | `System of string ]

let pp_error ppf = function
  | `Closed -> Fmt.string ppf "connection closed"
  | `Too_big (n, mtu) -> Fmt.pf ppf "datagram of %d bytes over MTU %d" n mtu
  | `Unreachable a -> Fmt.pf ppf "unreachable: %s" a
  | `Address_in_use a -> Fmt.pf ppf "address in use: %s" a
  | `Bad_address a -> Fmt.pf ppf "bad address: %s" a
  | `Unsupported w -> Fmt.pf ppf "unsupported: %s" w
  | `System w -> Fmt.pf ppf "system error: %s" w

module type S = sig
  type t
  type address

  val pp_address : address Fmt.t
  val equal_address : address -> address -> bool
  val address_to_string : address -> string
  val address_of_string : string -> (address, string) result

  type connection
  type handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

  val open_ : t -> address -> (connection -> handler) -> (connection, error) result
  val send : connection -> dst:address -> Msg.t -> (unit, error) result
  val cast : connection -> dsts:address list -> Msg.t -> (unit, error) result
  val close : connection -> unit

  type control =
    | Drop_filter of (src:address -> Cstruct.t -> bool) option
    | Join_multicast of address

  val control : connection -> control -> (unit, error) result

  type info = {
    local : address;
    mtu : int;
    multicast : bool;
    sent : int;
    received : int;
    dropped : int;
  }

  val query : connection -> info
  val now : t -> Time.t

  type timer

  val at : t -> Time.t -> (unit -> unit) -> timer
  val cancel : timer -> unit
end
