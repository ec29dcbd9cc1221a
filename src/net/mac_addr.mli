(** Ethernet (MAC-48) addresses, as immediate integers (no allocation). *)

type t = private int
(** The 48-bit address, first octet most significant. *)

val of_int : int -> t
val to_int : t -> int

val of_string : string -> (t, [ `Msg of string ]) result
(** [of_string "02:00:00:00:00:01"]. *)

val of_string_exn : string -> t
val to_string : t -> string
val pp : t Fmt.t
val equal : t -> t -> bool
val compare : t -> t -> int
val broadcast : t
val zero : t

val is_group : t -> bool
(** [is_group a] holds for broadcast and multicast addresses. *)

val local : int -> t
(** [local n] is a locally administered unicast address ending in [n]'s low 40 bits ([02:..]). *)

val get : Cstruct.t -> int -> t
val set : Cstruct.t -> int -> t -> unit
