(** BBR v1, a model-based congestion control (draft-cardwell-iccrg-bbr-congestion-control-00, as
    Linux's tcp_bbr.c): the bottleneck bandwidth is the windowed maximum of the delivery-rate
    samples ({!Tcp_rate}) over the last 10 round trips, the propagation delay the windowed minimum
    of the RTT samples over 10 s; the sender paces at a gain times the bandwidth and keeps at most a
    gain times the bandwidth-delay product in flight. Startup doubles the rate each round (gain 2/ln
    2) until three rounds without 25% growth; Drain empties the queue Startup built; ProbeBW cycles
    the pacing gain through 1.25, 0.75 and six rounds of 1; ProbeRTT (after 10 s without a new
    minimum RTT) keeps 4 segments in flight for 200 ms and a round trip. Loss does not cut the
    window: in the first round of a recovery the window is what is in flight plus what the ACK
    delivered (packet conservation), and at its end it is back to what it was before.

    It has the signature of {!Tcp_cc.S} (windows in bytes), plus what the rate samples drive. *)

type t

val name : string
val create : unit -> t
val cwnd : t -> int
val ssthresh : t -> int
val set_cwnd : t -> int -> unit
val on_ack : t -> now:Consort.Time.t -> srtt:Consort.Time.t option -> acked:int -> smss:int -> unit
val on_dupack : t -> smss:int -> unit
val on_partial_ack : t -> acked:int -> smss:int -> unit
val on_recovered : t -> flight:int -> smss:int -> unit
val on_loss : t -> now:Consort.Time.t -> flight:int -> smss:int -> sack:bool -> unit
val on_rto : t -> flight:int -> smss:int -> first:bool -> unit
val on_idle : t -> initial:int -> unit
val undo : t -> cwnd:int -> ssthresh:int -> unit

val on_rate : t -> Tcp_rate.sample -> smss:int -> unit
(** An ACK's rate sample: the model, the state machine, the pacing rate and the window. *)

val pacing_rate : t -> int
(** Bytes per second; 0 until the first bandwidth sample (the initial window goes unpaced). *)

(** {1 The model, for tests and statistics} *)

type mode = Startup | Drain | Probe_bw | Probe_rtt

val mode : t -> mode
val pp_mode : mode Fmt.t

val btl_bw : t -> int
(** The bottleneck bandwidth estimate, bytes per second (0: none yet). *)

val min_rtt : t -> Consort.Time.t option
val full_bw_reached : t -> bool
val rounds : t -> int
val pacing_gain : t -> float
val cwnd_gain : t -> float

val high_gain : float
(** 2/ln 2, Startup's gain. *)

val cycle : float array
(** ProbeBW's pacing gains. *)

val min_rtt_window : Consort.Time.t
(** 10 s. *)

val probe_rtt_time : Consort.Time.t
(** 200 ms. *)
