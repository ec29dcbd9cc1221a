(** A table of values by sequence number for a sliding window: a ring of slots, indexed by the
    number modulo its size, that doubles when the numbers kept span more than it holds. It replaces
    a hash table where the keys are consecutive numbers that come and go in order (messages kept for
    retransmission or held until their turn): finding, adding and removing allocate nothing once the
    ring is large enough, and an absent value is no [option].

    The span of the numbers kept (from the least to the greatest) is what the ring holds, so a
    caller bounds it (a window) as it bounds the count of a hash table. *)

type 'a t

val create : ?size:int -> 'a -> 'a t
(** [create dummy]: empty; [dummy] fills the empty slots (never returned by {!find} for a number
    kept). [size] (default 16) is rounded up to a power of two. *)

val length : 'a t -> int
val mem : 'a t -> int -> bool

val find : 'a t -> int -> 'a
(** [find t seq]: the value kept for [seq], or the dummy. *)

val find_opt : 'a t -> int -> 'a option
val replace : 'a t -> int -> 'a -> unit

val remove : 'a t -> int -> unit
(** Nothing if [seq] is not kept. *)

val iter : (int -> 'a -> unit) -> 'a t -> unit
(** In increasing order of number. *)

val fold : (int -> 'a -> 'b -> 'b) -> 'a t -> 'b -> 'b
(** In increasing order of number. *)

val reset : 'a t -> unit
(** Empty; the ring keeps its size. *)
