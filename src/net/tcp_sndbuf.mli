(** The send buffer: a ring of bytes the application has written and the peer has not yet
    acknowledged. Segments are copied out of it at each (re)transmission, so retransmissions can be
    cut at any boundary. *)

type t

val create : int -> t
(** [create n] is an empty buffer of capacity [n] bytes. No memory is taken until the first {!write}
    (a connection that never sends holds none), and {!release} gives it back. *)

val allocated : t -> int
(** Bytes of memory the buffer holds now. *)

val release : t -> unit
(** [release t] discards every byte held and the memory. *)

val capacity : t -> int

val resize : t -> int -> unit
(** [resize t n] makes [n] the capacity of [t] when it holds no memory; otherwise nothing. *)

val length : t -> int
(** Bytes held: written and not yet acknowledged. *)

val space : t -> int
(** [space t] is [capacity t - length t]. *)

val write : t -> Cstruct.t -> off:int -> len:int -> int
(** [write t b ~off ~len] appends as many of those bytes as fit and returns how many. *)

val blit_out : t -> src_off:int -> Cstruct.t -> dst_off:int -> len:int -> unit
(** [blit_out t ~src_off dst ~dst_off ~len] copies [len] bytes starting [src_off] bytes after the
    oldest one.
    @raise Invalid_argument if the range is not held. *)

val drop : t -> int -> unit
(** [drop t n] discards the [n] oldest bytes (acknowledged). *)

val take : t -> Cstruct.t
(** [take t] is the memory [t] holds (empty if none), taken from it as {!release} would: for another
    buffer of the same capacity. *)

val adopt : t -> Cstruct.t -> unit
(** [adopt t b] makes [b] the memory of [t] when [t] holds none and [b] is its capacity's size;
    otherwise nothing. *)
