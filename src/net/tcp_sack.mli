(** The SACK scoreboard of a TCP sender (RFC 2018, RFC 6675): the ranges above the cumulative
    acknowledgement that the receiver reported holding, and the loss-recovery queries of RFC 6675
    section 4 over them (IsLost, SetPipe, NextSeg). *)

type t

val default_max_blocks : int
(** 64. *)

val create : ?max_blocks:int -> unit -> t
(** [create ~max_blocks ()] is an empty scoreboard that keeps at most [max_blocks] disjoint blocks
    (the lowest): a receiver reporting more (CVE-2019-11478's attack) costs bounded work per ACK, at
    the price of retransmitting what the forgotten blocks held. *)

val clear : t -> unit
val is_empty : t -> bool

val count : t -> int
(** Blocks held. *)

val work : unit -> int
(** Block visits by updates since the program started: what a test counts to bound the per-ACK cost.
*)

val update : t -> una:Tcp_seq.t -> high:Tcp_seq.t -> (Tcp_seq.t * Tcp_seq.t) list -> int
(** [update t ~una ~high blocks] adds the reported blocks (clipped to \[una, high), the rest
    ignored) and returns how many bytes they newly cover. *)

val newly :
  t ->
  una:Tcp_seq.t ->
  high:Tcp_seq.t ->
  (Tcp_seq.t * Tcp_seq.t) list ->
  (Tcp_seq.t * Tcp_seq.t) list
(** [newly t ~una ~high blocks], before {!update}: the parts of the reported blocks that the
    scoreboard does not cover yet, ascending (what RACK looks at, so that an ACK costs the newly
    SACKed, not all). *)

val advance : t -> Tcp_seq.t -> unit
(** [advance t una] forgets everything below the new cumulative ack. *)

val blocks : t -> (Tcp_seq.t * Tcp_seq.t) list
val sacked_bytes : t -> int

val high_sacked : t -> Tcp_seq.t option
(** [high_sacked t] is the end of the highest block (RFC 6675's HighACK plus one). *)

val is_sacked : t -> Tcp_seq.t -> bool

val hole : t -> Tcp_seq.t -> Tcp_seq.t * Tcp_seq.t option
(** [hole t s] is the first unsacked byte at or after [s] and the start of the next block after it
    ([None] if there is none). *)

val lost_below : t -> smss:int -> Tcp_seq.t option
(** [lost_below t ~smss] is the bound under which every unsacked byte is lost: three blocks, or more
    than 2 * [smss] bytes, are SACKed above it (IsLost with DupThresh 3). *)

val is_lost : t -> smss:int -> Tcp_seq.t -> bool

val unsacked_between : t -> Tcp_seq.t -> Tcp_seq.t -> int
(** [unsacked_between t a b] counts the bytes of \[a, b) not SACKed. *)

val pipe : t -> una:Tcp_seq.t -> high_rxt:Tcp_seq.t -> high_data:Tcp_seq.t -> smss:int -> int
(** [pipe] is RFC 6675's SetPipe: bytes thought in flight, those not lost counted once and those
    retransmitted (below [high_rxt]) once more. *)

val next_seg :
  t ->
  una:Tcp_seq.t ->
  high_rxt:Tcp_seq.t ->
  smss:int ->
  [ `Lost of Tcp_seq.t * int | `Unsacked of Tcp_seq.t * int | `None ]
(** [next_seg] is RFC 6675's NextSeg rules 1 and 3 (rule 2, new data, is the caller's): the first
    lost, unsacked byte at or after [high_rxt], or else the first unsacked byte below the highest
    SACKed one, each with the length up to the next block, at most [smss]. *)

val pp : t Fmt.t
