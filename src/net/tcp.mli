(** TCP (RFC 9293) as a functor over any lower layer that matches the
    generic protocol signature, after Fox's [Tcp (Lower) (compute_checksums)]
    (Biagioni et al., Fig. 2): over IPv4 with the pseudo-header checksum,
    or straight over Ethernet with checksums off.

    What it implements: the state machine with simultaneous open and close
    and TIME_WAIT; RST and SYN handling with RFC 5961 challenge ACKs and
    ACK acceptability checks; retransmission timeouts per RFC 6298 (Karn's
    rule, exponential backoff); the MSS option; NewReno congestion control
    (RFC 5681, RFC 6582) with limited transmit (RFC 3042); window scaling
    and timestamps with RTTM and PAWS (RFC 7323); SACK (RFC 2018) with
    RFC 6675 loss recovery; delayed ACKs; Nagle's algorithm with a no-delay
    switch; zero-window probing; keepalive; a bounded out-of-order queue;
    flow control from the space the application has not consumed.

    The layer is sans-IO: time comes from the {!Clock.t} of its parameters,
    randomness (initial sequence numbers, ports, timestamp offsets) from
    their seeded generator. Every upcall is made after the segment or timer
    that caused it has been fully processed, so handlers may call back into
    the layer. *)

include module type of struct
  include Tcp_types
end

module Make
    (Lower : LOWER)
    (P : PARAMS
           with type host = Lower.host
            and type lower_address = Lower.address
            and type lower_pattern = Lower.address_pattern) :
  S with type host = Lower.host and type lower = Lower.t
