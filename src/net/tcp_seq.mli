(** TCP sequence numbers: 32-bit unsigned integers compared modulo 2{^ 32} (RFC 9293, section 3.4).

    The type is abstract so that sequence numbers are never compared with the ordinary integer
    order, which is wrong across wrap-around: [lt a b] holds when [b] is less than 2{^ 31} ahead of
    [a]. *)

type t

val of_int : int -> t
(** [of_int n] is [n] modulo 2{^ 32}. *)

val to_int : t -> int
(** [to_int s] is [s] as an integer in \[0, 2{^ 32}). *)

val zero : t

val add : t -> int -> t
(** [add s n] is [s + n] modulo 2{^ 32} ([n] may be negative). *)

val sub : t -> t -> int
(** [sub a b] is the signed distance from [b] to [a], in \[-2{^ 31}, 2{^ 31}):
    [add b (sub a b) = a]. *)

val succ : t -> t

val lt : t -> t -> bool
(** [lt a b] is [sub a b < 0]. *)

val leq : t -> t -> bool
val gt : t -> t -> bool
val geq : t -> t -> bool
val equal : t -> t -> bool

val max : t -> t -> t
(** [max a b] is the later of [a] and [b] in sequence order. *)

val min : t -> t -> t

val between : t -> low:t -> high:t -> bool
(** [between s ~low ~high] is [low <= s < high] in sequence order. *)

val pp : t Fmt.t
