(** Slices of off-heap segments, each holding one reference.

    An iovec names [length] bytes of a {!Segment.t}. Every value of type [t] owns exactly one
    reference to its segment: {!sub} and {!retain} return new owners, {!release} gives one up. A
    segment goes back to its pool as soon as the last reference is released.

    Reading or writing a released iovec raises {!Use_after_release}. Releasing twice raises too. In
    checked mode (see {!set_checked}) freed segments are also poisoned with [0xDE] bytes and an
    iovec that the garbage collector finds unreleased is reported as a leak, with the place where it
    was made, and its reference recovered. *)

type t

exception Use_after_release of string
(** Raised with a description of the iovec on access after release. *)

val set_checked : bool -> unit
(** [set_checked b] turns checked mode on or off for iovecs made from now on. Off by default; the
    test suites turn it on. Also on when the environment variable [CONSORT_CHECKED] is set to [1].
*)

val checked : unit -> bool

val make : Segment.t -> off:int -> len:int -> t
(** [make seg ~off ~len] takes a new reference to the bytes from [off] up to, not including,
    [off + len] of [seg]. Used by {!Pool}; applications allocate with {!Pool.alloc}. *)

val length : t -> int
val is_live : t -> bool

val cstruct : t -> Cstruct.t
(** [cstruct t] is a view of [t]'s bytes, valid until [t] is released.
    @raise Use_after_release if [t] was released. *)

val sub : t -> off:int -> len:int -> t
(** [sub t ~off ~len] is a new reference to the bytes from [off] up to, not including, [off + len]
    of [t], without copying. [t] stays live.
    @raise Invalid_argument if the range is outside [t]. *)

val shift : t -> int -> t
(** [shift t n] is [sub t ~off:n ~len:(length t - n)]. *)

val retain : t -> t
(** [retain t] is a new reference to the same bytes as [t]. *)

val release : t -> unit
(** [release t] gives up [t]'s reference.
    @raise Use_after_release if [t] was already released. *)

val to_string : t -> string
val segment : t -> Segment.t
val pp : t Fmt.t
