(** The C sources of the TCP benchmark's helpers, as text, so the benchmark can compile them
    wherever it runs. *)

val tap_bridge : string
(** [tap_bridge] is [tap_bridge.c]: the minimal C TAP bridge (one read and one write per frame) and
    an ethtool-ioctl helper that turns offloads off. *)

val tcp_peer : string
(** [tcp_peer] is [tcp_peer.c]: kernel TCP endpoints (sink, source, pong, ping) that report their
    figures and CPU time. *)

val impair_relay : string
(** [impair_relay] is [impair_relay.c]: the impairment relay (loss, reordering, delay, duplication,
    rate limit, MTU black hole, seeded) between two TAP devices or interfaces, and its simulation on
    virtual time. *)

val hash_peer : string
(** [hash_peer] is [hash_peer.c]: kernel TCP sink and source over IPv4 or IPv6 that report the
    SHA-256 of what they moved. *)

val peer_common : string
(** [peer_common] is [peer_common.h]: what [tcp_peer.c] and [hash_peer.c] share (the clock, the
    error exit, CPU time, time bounds on sockets); they include it from their own directory. *)
