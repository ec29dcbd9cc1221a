(** The C sources of the TCP benchmark's helpers, as text, so the benchmark can compile them
    wherever it runs. *)

val tap_bridge : string
(** [tap_bridge] is [tap_bridge.c]: the minimal C TAP bridge (one read and one write per frame) and
    an ethtool-ioctl helper that turns offloads off. *)

val tcp_peer : string
(** [tcp_peer] is [tcp_peer.c]: kernel TCP endpoints (sink, source, pong, ping) that report their
    figures and CPU time. *)
