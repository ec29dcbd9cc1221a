(** Scatter-gather lists of {!Iovec.t}: a message body in pieces.

    Concatenation and sub-ranges copy no bytes. Like an iovec, a value of [t] owns one reference to
    each of its pieces. *)

type t = Iovec.t list

val empty : t
val length : t -> int
val of_string : Pool.t -> string -> t
val to_string : t -> string

val append : t -> t -> t
(** [append a b] owns the references of both [a] and [b] (which must no longer be used on their
    own). *)

val sub : t -> off:int -> len:int -> t
(** [sub t ~off ~len] is a new owner of the bytes from [off] up to, not including, [off + len] of
    [t].
    @raise Invalid_argument if the range is outside [t]. *)

val retain : t -> t
val release : t -> unit

val flatten : Pool.t -> t -> Iovec.t
(** [flatten pool t] is one iovec with [t]'s bytes: [t]'s own piece, retained, when it has one
    piece, a copy otherwise. [t] stays live. *)

val blit_to : t -> Cstruct.t -> int -> unit
(** [blit_to t dst off] copies [t]'s bytes to [dst] at [off]. *)

val equal_string : t -> string -> bool
