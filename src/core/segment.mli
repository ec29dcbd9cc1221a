(** Reference-counted off-heap memory segments.

    A segment is one [Bigarray] block. Slices of it ({!Iovec.t}) each hold one reference; when the
    count drops to zero the segment calls its owner back at once (a {!Pool} puts it on its free
    list), without waiting for the garbage collector. This module is the mechanism under {!Pool} and
    {!Iovec}; applications use those. *)

type t

val create :
  size:int ->
  on_free:(t -> unit) ->
  on_leak:(t -> unit) ->
  on_handle_leak:(t -> string -> unit) ->
  t
(** [create ~size ~on_free ~on_leak ~on_handle_leak] is a fresh segment of [size] bytes with a count
    of zero. [on_free] runs each time the count returns to zero; [on_leak] runs if the garbage
    collector finds the segment unreachable while its count is positive (some slice was dropped
    without release). [on_handle_leak] is what {!handle_leaked} calls. *)

val handle_leaked : t -> string -> unit
(** [handle_leaked t where] reports that a slice of [t], allocated at [where], was collected without
    being released. Called from finalisers in checked mode; the owner must not touch its own state
    from there. *)

val buffer : t -> Cstruct.buffer
val size : t -> int
val count : t -> int

val generation : t -> int
(** [generation t] increases each time [t] is freed; handles remember it to detect use after
    release. *)

val incr : t -> unit

val decr : t -> unit
(** [decr t] drops one reference; at zero it calls [on_free].
    @raise Invalid_argument if the count is already zero. *)

val id : t -> int
(** A number unique to the segment in this process, for diagnostics. *)
