(** The Internet checksum (RFC 1071) in plain OCaml, for TCP segments.

    Sums are carried unfolded in a native integer (room for 2{^47} 16-bit
    words) and folded once at the end. *)

val sum : ?init:int -> Cstruct.t -> int
(** [sum ~init b] is [init] plus the 16-bit big-endian words of [b] (an odd
    last byte padded with zero), unfolded. *)

val fold : int -> int
(** [fold s] is [s] folded to 16 bits with end-around carry. *)

val finish : int -> int
(** [finish s] is the checksum field for the unfolded sum [s]: the ones'
    complement of [fold s]. *)

val valid : int -> bool
(** [valid s] holds when the unfolded sum [s] over a segment that includes
    its checksum field folds to [0xFFFF] (or to zero). *)
