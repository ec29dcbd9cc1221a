(** The retransmission timeout estimator of RFC 6298: smoothed RTT and RTT variance from samples, a
    floor and a ceiling, exponential backoff.

    Karn's rule is the caller's part: it only feeds samples from segments that were not
    retransmitted (or from echoed timestamps, RFC 7323). *)

type t

val create : initial:Consort.Time.t -> min:Consort.Time.t -> max:Consort.Time.t -> t
(** [create ~initial ~min ~max] has no sample yet: its timeout is [initial] (RFC 6298 recommends 1
    s). *)

val sample : ?weight:int -> t -> Consort.Time.t -> unit
(** [sample t r] folds the measured round-trip time [r] in (SRTT and RTTVAR with gains 1/8 and 1/4,
    the first sample sets SRTT = r, RTTVAR = r/2) and clears the backoff. [weight] (default 1)
    divides the gains, for RFC 7323's several samples per window. *)

val backoff : t -> unit
(** [backoff t] doubles the timeout, up to the ceiling (after a timer expiry). *)

val backoffs : t -> int
(** How many times the timeout was doubled since the last sample. *)

val rto : t -> Consort.Time.t
(** [rto t] is the current timeout: max(min, SRTT + max(G, 4 RTTVAR)) with the backoff applied, at
    most the ceiling. *)

val srtt : t -> Consort.Time.t option
val rttvar : t -> Consort.Time.t option
val pp : t Fmt.t
