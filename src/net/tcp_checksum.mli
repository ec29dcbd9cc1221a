(** The Internet checksum (RFC 1071) for TCP segments: the stack's C routine ({!Checksum.sum}), and
    a plain OCaml definition kept as its reference and fallback.

    A sum may be carried unfolded in a native integer (room for 2{^ 47} 16-bit words) and folded
    once at the end. *)

val sum : ?init:int -> Cstruct.t -> int
(** [sum ~init b] is [init] plus the 16-bit big-endian words of [b] (an odd last byte padded with
    zero), folded (by {!Checksum.sum}, in C). *)

val reference_sum : ?init:int -> Cstruct.t -> int
(** [reference_sum] is {!sum} in plain OCaml, unfolded. *)

val fold : int -> int
(** [fold s] is [s] folded to 16 bits with end-around carry. *)

val finish : int -> int
(** [finish s] is the checksum field for the unfolded sum [s]: the ones' complement of [fold s]. *)

val valid : int -> bool
(** [valid s] holds when the unfolded sum [s] over a segment that includes its checksum field folds
    to [0xFFFF] (or to zero). *)
