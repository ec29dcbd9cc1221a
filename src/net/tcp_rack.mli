(** RACK (RFC 8985): time-based loss detection for a TCP sender with SACK.

    The sender records when it sent each segment (a retransmission
    refreshes the time). An ACK or SACK that delivers a segment sent at time
    T makes every undelivered segment sent before T lost once it has been
    out for the latest round trip plus a reordering window (a quarter of the
    minimum RTT, widened by D-SACKs). What is not yet overdue gets a timer.

    The records are kept in sequence order in an array: at most one per
    segment in flight, so that an ACK costs time linear in the segments in
    flight, whatever the peer reports. *)

type t

val create : unit -> t
val clear : t -> unit

val segments : t -> int
(** Segments recorded (sent, not yet cumulatively acknowledged). *)

val sent : ?fin:bool -> t -> seq:Tcp_seq.t -> end_:Tcp_seq.t -> now:Consort.Time.t -> unit
(** [sent t ~seq ~end_ ~now] records the transmission of \[seq, end_): new
    data at the top, or a retransmission of recorded segments (split at its
    edges), which clears their lost mark and refreshes their time. [fin]:
    the segment ends with a FIN, which SACK blocks never cover. *)

val ack :
  t -> una:Tcp_seq.t -> sacked:(Tcp_seq.t * Tcp_seq.t) list -> now:Consort.Time.t -> unit
(** [ack t ~una ~sacked ~now] takes an ACK in: segments below [una] are
    forgotten, those inside the (ascending) SACK blocks are delivered, and
    each delivery updates the most recently sent delivered segment, the
    RTT of RACK, the minimum RTT, and whether reordering was seen. A
    retransmitted segment delivered sooner than the minimum RTT after its
    retransmission is not believed (the original was acknowledged). *)

val dsack : t -> unit
(** A D-SACK arrived: a retransmission was spurious, so reordering is
    seen, and the reordering window grows by a quarter of the minimum RTT
    (up to the smoothed RTT). *)

val reo_wnd : t -> in_recovery:bool -> dupacks:int -> srtt:Consort.Time.t -> Consort.Time.t
(** RFC 8985 section 6.2 step 4: zero in recovery or after three duplicate
    ACKs unless reordering was seen, else a quarter of the minimum RTT (times
    the D-SACK multiplier), at most [srtt]. *)

val detect : t -> now:Consort.Time.t -> reo_wnd:Consort.Time.t -> int * Consort.Time.t option
(** [detect t ~now ~reo_wnd] marks lost every undelivered segment sent
    before the most recently sent delivered one and out for longer than
    RACK's RTT plus [reo_wnd]; it returns how many it newly marked, and
    when the next such segment becomes overdue ([None]: none waits). *)

val mark_all_lost : t -> unit
(** After a retransmission timeout (RFC 8985 section 6.3). *)

val next_lost : t -> (Tcp_seq.t * int) option
(** The lowest segment marked lost and not retransmitted since. *)

val is_lost : t -> Tcp_seq.t -> bool
(** [is_lost t s] holds when the segment holding [s] is marked lost. *)

val pipe : t -> int
(** Bytes thought in flight: recorded, not delivered, not lost (or
    retransmitted since marked lost). *)

val last : t -> (Tcp_seq.t * Tcp_seq.t) option
(** The highest recorded segment (what a tail loss probe sends again). *)

val min_rtt : t -> Consort.Time.t option
val reordering_seen : t -> bool
val pp : t Fmt.t
