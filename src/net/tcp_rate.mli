(** Delivery-rate estimation of a TCP sender (draft-cheng-iccrg-delivery-rate-estimation, as Linux's
    tcp_rate.c): what a model-based congestion control (BBR) measures the path with.

    The connection counts the bytes delivered (cumulatively acknowledged or SACKed) and when the
    count last grew. Each segment sent records the count, its time, and the time the current sending
    burst began; an ACK that delivers segments takes the most recently sent of them and makes a rate
    sample: the bytes delivered since that segment was sent over the longer of its send and ACK
    intervals (so that neither a compressed ACK train nor a sending burst inflates it). A sample
    taken while the application had nothing to send is marked application-limited. The records are
    kept in sequence order, at most one per segment in flight (and at most 65,536); an ACK looks at
    most at 1,024 records besides those it acknowledges cumulatively, whatever the peer reports. *)

type sample = {
  delivered : int;  (** bytes delivered over [interval] *)
  interval : Consort.Time.t;  (** zero or less: no valid sample (the ACK still counts) *)
  rtt : Consort.Time.t;
      (** of the most recently sent segment delivered, if it was not a retransmission; else -1 *)
  app_limited : bool;
  prior_delivered : int;  (** the delivered count when that segment was sent *)
  acked : int;  (** bytes newly delivered by this ACK *)
  total : int;  (** the connection's delivered count after this ACK *)
  inflight : int;  (** bytes in flight after this ACK *)
  now : Consort.Time.t;
}

val rate : sample -> int
(** Bytes per second of a valid sample; 0 for an invalid one. *)

type t

val create : unit -> t

val sent : t -> seq:Tcp_seq.t -> end_:Tcp_seq.t -> now:Consort.Time.t -> idle:bool -> unit
(** [sent t ~seq ~end_ ~now ~idle] records the transmission of \[seq, end_): new data above every
    record gets one; a retransmission refreshes the record holding its last byte. [idle]: nothing
    was in flight, so a new sending burst begins now. *)

val ack :
  t ->
  una:Tcp_seq.t ->
  newly:(Tcp_seq.t * Tcp_seq.t) list ->
  total:int ->
  inflight:int ->
  now:Consort.Time.t ->
  sample option
(** [ack t ~una ~newly ~total ~inflight ~now] takes an ACK in: [una] the new cumulative
    acknowledgement, [newly] the ranges it SACKed for the first time, [total] the bytes delivered so
    far (acknowledged cumulatively plus SACKed), [inflight] the bytes in flight after it. [None]
    when it delivered nothing new. *)

val app_limited : t -> inflight:int -> unit
(** The application has nothing more to send though the window allows: the samples of the data in
    flight and of what is sent until it is delivered are application-limited. *)

val records : t -> int
(** Records held (what a test counts to check the bound). *)
