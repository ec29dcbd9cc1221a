(** Messages by sequence number, owned: a ring like {!Seqring} whose messages are kept taken apart
    (header storage, segment, offset, length) in flat arrays indexed by the number. Keeping a
    message that is one slice of a segment leaves nothing on the heap: a retransmission buffer of
    many messages gives the collector nothing to promote. Other messages are kept whole. Every value
    returned is a new owner. *)

open Consort

type t

val create : ?size:int -> unit -> t
val length : t -> int
val mem : t -> int -> bool

val replace : t -> int -> Msg.t -> unit
(** [replace t seq m] keeps [m] (ownership moves in) for [seq], releasing what was kept for it. *)

val replace_head : t -> int -> Bytes.t -> Msg.t -> unit
(** [replace_head t seq head m] keeps, for [seq], what
    [replace t seq (Msg.push_bytes head (Msg.retain m))] would, without making that message when [m]
    has no pushed header and its body is one slice: a reference to the slice is taken and nothing is
    allocated. [m] stays the caller's; [head] is kept as it is and must not change afterwards. *)

val copy : t -> int -> Msg.t
(** A new owner of the message kept for [seq].
    @raise Not_found if none. *)

val msg_length : t -> int -> int
(** [Msg.length] of the message kept for [seq]; 0 if none. *)

val release : t -> int -> unit
(** Releases and forgets the message kept for [seq], if any. *)

val release_below : t -> int -> int
(** [release_below t s] releases and forgets every message kept for a number below [s], and says how
    many there were; it visits only the numbers kept, not every number below [s]. *)

val reset : t -> unit
(** Releases everything kept; the arrays keep their size. *)

val fold : (int -> string -> 'a -> 'a) -> t -> 'a -> 'a
(** Over the bytes of each message kept, in increasing order of number: for tests and states. *)
