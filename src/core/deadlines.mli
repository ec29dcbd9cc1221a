(** Deadlines by key: an indexed binary min-heap of times for the keys [0 .. n-1], each key holding
    at most one time. A layer keeps one deadline per peer and per kind of timer here, so that its
    timer visits only what is due: setting, moving and clearing a key, and taking the next one due,
    cost O(log n) and allocate nothing; the earliest is read in O(1). Ties go to the smaller key. *)

type t

val create : int -> t
(** [create n]: keys [0 .. n-1], none set. *)

val set : t -> int -> Time.t -> unit
(** [set t k at]: [k]'s deadline is [at] from now on (replacing any other); [max_int] clears it. *)

val get : t -> int -> Time.t
(** [k]'s deadline, [max_int] if none. *)

val clear : t -> int -> unit
val reset : t -> unit

val next : t -> Time.t
(** The earliest deadline, [max_int] if none. *)

val length : t -> int
(** Keys set. *)

val take_due : t -> Time.t -> int array -> int
(** [take_due t now buf]: clears every key whose deadline is at or before [now] and writes them to
    [buf] (at least [n] long), earliest first; returns how many. Deadlines set while the caller
    handles them wait for the next call, even if already due. *)
