(** TCP (RFC 9293) as a functor over any lower layer that matches the generic protocol signature,
    after Fox's [Tcp (Lower) (compute_checksums)] (Biagioni et al., Fig. 2): over IPv4 with the
    pseudo-header checksum, or straight over Ethernet with checksums off.

    What it implements: the state machine with simultaneous open and close and TIME_WAIT; RST and
    SYN handling with RFC 5961 challenge ACKs and ACK acceptability checks; retransmission timeouts
    per RFC 6298 (Karn's rule, exponential backoff); the MSS option (at least [min_mss]); NewReno
    (RFC 5681, RFC 6582) or CUBIC (RFC 9438) congestion control with limited transmit (RFC 3042);
    window scaling and timestamps with RTTM and PAWS (RFC 7323); SACK (RFC 2018) with RFC 6675 loss
    recovery and D-SACK (RFC 2883); RACK-TLP time-based loss detection and tail loss probes (RFC
    8985); path MTU discovery from ICMP (RFC 1191) and, when ICMP is filtered, by
    packetization-layer probing (RFC 8899); delayed ACKs; Nagle's algorithm with a no-delay switch;
    zero-window probing; keepalive; flow control from the space the application has not consumed.

    What a stranger can make it allocate is bounded: SYN cookies when a listener's backlog is full
    (half-open connections hold no send buffer), a global limit on connections and on orphans,
    TIME-WAIT as a small record, a bounded out-of-order queue collapsed when it pins too much
    memory, a bounded SACK scoreboard, lower connections closed when no connection uses them.
    Initial sequence numbers (RFC 6528), ports (RFC 6056), timestamp offsets and cookies come from
    HMAC-SHA-256 keyed by a secret from the system ({!Tcp_secret}); challenge ACKs are limited per
    connection with a randomised budget.

    The layer is sans-IO: time comes from the [Clock.t] of its parameters. Every upcall is made
    after the segment or timer that caused it has been fully processed, so handlers may call back
    into the layer. *)

include module type of struct
  include Tcp_types
end

module Make
    (Lower : LOWER)
    (P :
      PARAMS
        with type host = Lower.host
         and type lower_address = Lower.address
         and type lower_pattern = Lower.address_pattern) :
  S with type host = Lower.host and type lower = Lower.t and type lower_status = Lower.status
