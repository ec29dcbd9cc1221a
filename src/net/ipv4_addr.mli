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
