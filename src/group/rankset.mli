(** The members of a view suspected so far, as a failure detector keeps them: adding ranks returns
    those that are new, and counts the nonsense (ranks outside the view, this member itself) instead
    of raising. *)

type t

val create : n:int -> me:int -> t
(** [create ~n ~me] is empty, for a view of [n] members seen from rank [me]. *)

val add : t -> int list -> int list
(** [add t ranks] marks [ranks] and returns those not marked before, in the order given. *)

val mem : t -> int -> bool

val elements : t -> int list
(** The marked ranks, in increasing order. *)

val cardinal : t -> int

val bad_rank : t -> int
(** Ranks outside the view given to {!add}, ever. *)

val self : t -> int
(** Times this member's own rank was given to {!add}. *)
