type error =
  [ `Closed
  | `Refused of string
  | `Timeout
  | `Reset
  | `Unreachable of string
  | `Too_big of int
  | `Bad_address of string
  | `In_use of string
  | `Unsupported of string
  | `System of string ]

let pp_error ppf = function
  | `Closed -> Fmt.string ppf "closed"
  | `Refused w -> Fmt.pf ppf "refused: %s" w
  | `Timeout -> Fmt.string ppf "timed out"
  | `Reset -> Fmt.string ppf "reset by peer"
  | `Unreachable w -> Fmt.pf ppf "unreachable: %s" w
  | `Too_big n -> Fmt.pf ppf "packet of %d bytes too big" n
  | `Bad_address a -> Fmt.pf ppf "bad address: %s" a
  | `In_use a -> Fmt.pf ppf "in use: %s" a
  | `Unsupported w -> Fmt.pf ppf "unsupported: %s" w
  | `System w -> Fmt.pf ppf "system error: %s" w

let opened who = function Ok () -> () | Error e -> Fmt.invalid_arg "%s: %a" who pp_error e

module type S = sig
  type t
  type address
  type address_pattern
  type connection

  type handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }
  and status

  val active_open : t -> address -> (connection -> handler) -> (connection, error) result
  val passive_open : t -> address_pattern -> (connection -> handler) -> (unit, error) result
  val send : connection -> Packet.t -> (unit, error) result
  val close : connection -> unit
  val abort : connection -> unit
  val max_packet : connection -> int
  val headroom : t -> int

  type control
  type info

  val control : t -> control -> (unit, error) result
  val query : t -> info
end

module type TYPES = sig
  type address
  type address_pattern
  type status
  type control
  type info
end

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

module Lower (L : S) = struct
  let discard _ = { L.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }

  let listen who l pattern input =
    opened who
      (L.passive_open l pattern (fun _ ->
           { L.receive = (fun _ p -> input p); status = (fun _ _ -> ()) }))
end
