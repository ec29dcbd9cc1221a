(** The out-of-order queue of a TCP receiver: segments that arrived beyond the next expected byte,
    kept as packets (no copy), sorted, without overlap, bounded in number. It also yields the SACK
    blocks the receiver reports (RFC 2018).

    Every operation costs a constant number of operations on ordered maps (O(log n) each, n at most
    [max_segments]) plus one for each segment it releases (which each segment pays once), whatever
    the order and shape of the segments a peer sends; {!work} counts them. *)

type t

val create : max_segments:int -> t

val insert : t -> Tcp_seq.t -> Packet.t -> [ `Stored | `Duplicate | `Full ]
(** [insert t seq p] stores the payload [p] (its window is the data) that starts at [seq], trimming
    what other segments already hold. The queue owns [p] in every case (a duplicate or a segment
    over the bound is released). *)

val pop : t -> Tcp_seq.t -> Packet.t option
(** [pop t next] removes and returns the first segment if it holds byte [next], trimmed to start
    there; segments wholly before [next] are released on the way. *)

val is_empty : t -> bool
val segments : t -> int

val block_count : t -> int
(** [block_count t] is [List.length (blocks t)], in O(1). *)

val work : t -> int
(** [work t] is how many map operations (each O(log n)) the queue has taken since [create]: the
    measure of its cost that tests bound. *)

val bytes : t -> int

val pinned : t -> int
(** [pinned t] is the memory the queue keeps alive: the size of every pool segment its packets hold,
    each counted once (kept up to date, O(1)). *)

val collapse : t -> Consort.Pool.t -> unit
(** [collapse t pool] copies the queued data compactly into fresh packets from [pool], contiguous
    segments into one (up to 64 KiB), and releases the packets it held: what a receive queue pins
    then follows the bytes it holds, not the frames they came in. *)

val blocks : t -> (Tcp_seq.t * Tcp_seq.t) list
(** [blocks t] are the contiguous ranges held, \[left, right), ascending. *)

val sack_blocks : t -> max:int -> (Tcp_seq.t * Tcp_seq.t) list
(** [sack_blocks t ~max] are at most [max] blocks, the one holding the most recently received
    segment first, then the others by recency, then by position. *)

val clear : t -> unit
(** [clear t] releases every segment. *)
