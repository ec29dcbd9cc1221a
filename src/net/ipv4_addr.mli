(** IPv4 addresses, as immediate integers (no allocation), and prefixes. *)

type t = private int
(** An address in \[0, 2{^ 32}): the 32-bit number in host order. *)

val of_int : int -> t
(** [of_int n] is [n land 0xffff_ffff]. *)

val to_int : t -> int

val v : int -> int -> int -> int -> t
(** [v a b c d] is [a.b.c.d]. *)

val of_string : string -> (t, [ `Msg of string ]) result
(** [of_string "10.0.0.1"] parses dotted-quad notation. *)

val of_string_exn : string -> t
(** @raise Invalid_argument on a malformed address. *)

val to_string : t -> string
val pp : t Fmt.t
val equal : t -> t -> bool
val compare : t -> t -> int

val any : t
(** [0.0.0.0]. *)

val broadcast : t
(** [255.255.255.255]. *)

val is_multicast : t -> bool

val split_prefix :
  (string -> ('a, ([ `Msg of string ] as 'e)) result) ->
  bits:int ->
  expected:(string -> string, unit, string) format ->
  bad_length:(string -> string, unit, string) format ->
  string ->
  ('a * int, 'e) result
(** [split_prefix parse ~bits ~expected ~bad_length s]: the address (by [parse]) and length, 0 to
    [bits], of the prefix [s] ("ADDR/LEN", the length in decimal digits alone); the error [parse]
    gives, or [expected] (without a ['/']) or [bad_length] made with [s]. {!Prefix.of_string} and
    {!Ipv6_addr.Prefix.of_string}. *)

(** Prefixes: an address and a length, as in [10.0.0.1/24]. *)
module Prefix : sig
  type addr = t
  type t = { addr : addr; len : int }

  val of_string : string -> (t, [ `Msg of string ]) result
  (** [of_string "10.0.0.1/24"]; the address keeps its host bits. *)

  val to_string : t -> string
  val pp : t Fmt.t
  val netmask : t -> addr
  val network : t -> addr
  val broadcast : t -> addr

  val mem : addr -> t -> bool
  (** [mem a p] holds when [a] is in [p]'s subnet. *)
end

val get : Cstruct.t -> int -> t
(** [get cs off] reads a big-endian address. *)

val set : Cstruct.t -> int -> t -> unit
