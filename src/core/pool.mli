(** Pools of off-heap segments.

    A pool hands out {!Iovec.t} slices carved from large segments (256 KiB by default) with a bump
    pointer. A segment whose last slice is released goes back on the pool's free list at once.
    Requests larger than a segment get a segment of their own, returned to the system when released.

    Leaks: a segment that the garbage collector finds unreachable while slices of it were never
    released is counted in {!val-stats}. In checked mode ({!Iovec.set_checked}) each slice is
    watched on its own, so the leak is found even while other slices keep the segment alive, and its
    memory is recovered. {!leak_check} forces a collection and returns the count. *)

type t

val create : ?segment_size:int -> ?max_free:int -> ?name:string -> unit -> t
(** [create ?segment_size ?max_free ?name ()] is an empty pool. Segments are [segment_size] bytes
    (default 262144); at most [max_free] free segments (default 64) are kept for reuse, the rest go
    back to the system. *)

val default : t
(** A process-wide pool for code that does not manage its own. *)

val alloc : t -> int -> Iovec.t
(** [alloc t n] is a fresh slice of [n] bytes (contents unspecified) with one reference. *)

val of_string : t -> string -> Iovec.t
(** [of_string t s] is a fresh slice holding a copy of [s]. *)

val copy : t -> Cstruct.t -> Iovec.t
(** [copy t cs] is a fresh slice holding a copy of [cs]. *)

type stats = {
  segment_size : int;
  segments_created : int;  (** segments taken from the system, ever *)
  segments_free : int;  (** segments on the free list now *)
  segments_in_use : int;  (** segments with at least one live slice *)
  oversize_in_use : int;  (** dedicated segments for large requests *)
  allocs : int;  (** slices handed out by {!alloc}, ever *)
  bytes_in_use : int;  (** bytes of segments in use or current *)
  leaks : int;  (** slices or segments found leaked, ever *)
}

val stats : t -> stats
val pp_stats : stats Fmt.t

val in_use : t -> int
(** [in_use t] is the number of segments (oversize ones included) that still have a live slice,
    without running the garbage collector: zero once everything allocated from [t] was released. *)

val leak_check : t -> int
(** [leak_check t] retires the current segment, runs full major collections so that finalisers
    report unreleased slices, and returns the number of leaks found since [t] was created. *)

val leaks_where : t -> string list
(** In checked mode, where each leaked slice was made (most recent first, at most 32). *)
