(** The generic transport over kernel UDP/IPv4, driven by a {!Loop}.

    Addresses are ["IP:PORT"] strings of an IPv4 address in dotted decimal and a port; port [0] in
    {!open_} picks a free port, and {!query} gives the address really bound. Sockets are
    non-blocking with large kernel buffers (4 MiB asked for, past the system limit when privileged).

    Receiving: when a socket is readable, datagrams are taken in batches with [recvmmsg] until none
    is left or a budget per wake-up is spent (each batch as large as {!receive_calls} says), each
    into a 64 KiB slot of its own. A socket that is its loop's only descriptor is read once before
    the loop waits ({!Loop.watch}'s [try_read]). A datagram of more than 2 KiB is handed up as a
    slice of its slot, with no copy (the slot is replaced if the datagram is kept); a smaller one is
    copied out into its own {!Consort.Iovec.t} of exactly its size, so that a small datagram kept by
    a protocol never pins a large buffer. A handler that raises is logged and the batch goes on.
    [info.dropped] counts datagrams dropped by the [Drop_filter], truncated or not IPv4, refused for
    a full send buffer, and those the kernel dropped for a full receive buffer ([SO_RXQ_OVFL],
    learnt with the next datagram that arrives).

    Sending: one [sendmsg] gathers the message's header bytes and body pieces without copying them.
    {!cast} sends one datagram to the group after [Join_multicast], otherwise one per destination
    with [sendmmsg]. A full buffer ([EAGAIN], [ENOBUFS]) drops the datagram and counts it in
    [info.dropped], as UDP may; [ECONNREFUSED] (left by an earlier ICMP error) is ignored; other
    failures are [`System] errors.

    The unicast socket is bound without [SO_REUSEADDR], so that a port in use is reported instead of
    silently shared; the socket that receives a multicast group sets it, so that several members on
    one host share the group's port. A member's own multicast datagrams, looped back by the kernel,
    are not handed up. *)

include Consort.Transport.S with type t = Loop.t

val mtu : int
(** The largest UDP/IPv4 payload, 65507 bytes. *)

val open_with :
  ?pool:Consort.Pool.t ->
  t ->
  address ->
  (connection -> handler) ->
  (connection, Consort.Transport.error) result
(** [open_with ?pool t addr f] is {!open_} with received datagrams allocated from [pool] (default
    {!Consort.Pool.default}). *)

val local : connection -> address
(** [local c] is the address [c] is bound to (its real port). *)

val buffer_sizes : connection -> int * int
(** [buffer_sizes c] is the receive and send buffer sizes the kernel granted, in bytes. *)

val is_closed : connection -> bool

val receive_calls : unit -> int
(** The [recvmmsg] calls made in this process so far. Each asks for twice as many datagrams as the
    last one got (at least 4, at most 64), or twice as many as it asked for when it got them all: a
    lone datagram does not pay for preparing 64 slots, and a burst soon takes 64 a call. A call that
    got one datagram alone makes the next 4 ask for one ({!single_receive_calls}), and a call for
    one that got it is followed by none: in a round trip, the kernel does not look for a second
    datagram after each first. *)

val single_receive_calls : unit -> int
(** The [recvmmsg] calls made in this process so far that asked for one datagram. *)

val receive_pool_stats : unit -> Consort.Pool.stats
(** The pool the 64 KiB receive slots come from, in this process: a slot whose datagram is kept is
    replaced from it, and goes back to its free list (up to 512 slots) when released. *)

val copies : unit -> int * int
(** Received datagrams copied out of the slot the kernel wrote them to (those of 2 KiB or less), in
    this process, so far, and their bytes. *)
