(** RACK (RFC 8985): time-based loss detection for a TCP sender with SACK.

    The sender records when it sent each segment (a retransmission refreshes the time). An ACK or
    SACK that delivers a segment sent at time T makes every undelivered segment sent before T lost
    once it has been out for the latest round trip plus a reordering window (a quarter of the
    minimum RTT, widened by D-SACKs). What is not yet overdue gets a timer.

    The records are kept in sequence order in an array, at most one per segment in flight. An ACK
    looks at the records it newly delivers (at most 1024, whatever the peer reports) and, for loss
    detection, at the undelivered records sent before the latest delivered one (delivered runs are
    jumped over, the jump remembered); the bytes in flight are counted as records change. *)

type t

val create : unit -> t
val clear : t -> unit

val segments : t -> int
(** Segments recorded (sent, not yet cumulatively acknowledged). *)

val sent : ?fin:bool -> t -> seq:Tcp_seq.t -> end_:Tcp_seq.t -> now:Consort.Time.t -> unit
(** [sent t ~seq ~end_ ~now] records the transmission of \[seq, end_): new data at the top, or a
    retransmission of recorded segments (split at its edges), which clears their lost mark and
    refreshes their time. [fin]: the segment ends with a FIN, which SACK blocks never cover. *)

val ack :
  ?echoed:Consort.Time.t ->
  t ->
  una:Tcp_seq.t ->
  newly:(Tcp_seq.t * Tcp_seq.t) list ->
  sacked:(Tcp_seq.t -> Tcp_seq.t -> bool) ->
  now:Consort.Time.t ->
  unit
(** [ack t ~una ~newly ~sacked ~now] takes an ACK in: segments below [una] are forgotten; those
    touching the (ascending) ranges [newly] SACKed and now wholly SACKed ([sacked s e]) are
    delivered (at most 1024 per ACK: a peer's reports cannot make an ACK cost more); and each
    delivery updates the most recently sent delivered segment, the RTT of RACK, the minimum RTT, and
    whether reordering was seen. A retransmitted segment delivered sooner than the minimum RTT after
    its retransmission is not believed (the original was acknowledged), nor one cumulatively
    acknowledged and sent again after [echoed], the millisecond the timestamp the ACK echoes was
    taken (RFC 8985 section 6.2 step 2; SACKs echo the last segment in order, RFC 7323). *)

val dsack : t -> una:Tcp_seq.t -> nxt:Tcp_seq.t -> unit
(** [dsack t ~una ~nxt] takes a D-SACK in (SND.UNA and SND.NXT now): a retransmission was spurious,
    so reordering is seen, and the reordering window grows by a quarter of the minimum RTT (up to
    the smoothed RTT), once a round trip (RFC 8985 section 6.2 step 4: further D-SACKs before
    SND.UNA passes [nxt] do not count). *)

val recovered : t -> unit
(** A loss recovery ended: after 16 without a D-SACK, the reordering window is back to a quarter of
    the minimum RTT (RFC 8985's reo_wnd_persist). *)

val reo_wnd : t -> in_recovery:bool -> dupacks:int -> srtt:Consort.Time.t -> Consort.Time.t
(** RFC 8985 section 6.2 step 4: zero in recovery or after three duplicate ACKs unless reordering
    was seen, else a quarter of the minimum RTT (times the D-SACK multiplier), at most [srtt]. *)

val detect : t -> now:Consort.Time.t -> reo_wnd:Consort.Time.t -> int * Consort.Time.t option
(** [detect t ~now ~reo_wnd] marks lost every undelivered segment sent before the most recently sent
    delivered one and out for longer than RACK's RTT plus [reo_wnd]; it returns how many it newly
    marked, and when the next such segment becomes overdue ([None]: none waits). *)

val mark_all_lost : t -> unit
(** After a retransmission timeout (RFC 8985 section 6.3). *)

val unmark_lost : t -> unit
(** A spurious timeout undone: every segment marked lost and not delivered is in flight again, to be
    found lost by time if it is. *)

val next_lost : t -> (Tcp_seq.t * int) option
(** The lowest segment marked lost and not retransmitted since. Asked at every ACK of a recovery: no
    walk when none is marked (they are counted), else a walk from where the last answer was (or from
    a lower segment marked since). *)

val is_lost : t -> Tcp_seq.t -> bool
(** [is_lost t s] holds when the segment holding [s] is marked lost. *)

val pipe : t -> int
(** Bytes thought in flight: recorded, not delivered, not lost (or retransmitted since marked lost).
*)

val last : t -> (Tcp_seq.t * Tcp_seq.t) option
(** The highest recorded segment (what a tail loss probe sends again). *)

val min_rtt : t -> Consort.Time.t option
val reordering_seen : t -> bool

val work : unit -> int
(** Records looked at by ACKs and loss detection since the program started: what a test counts to
    bound the work per ACK. *)

val pp : t Fmt.t
