(** Bundling: several datagrams for one destination in one datagram.

    [Make (T)] is a transport over [T] that holds what is sent during one step of the engine and
    sends it when the step ends (a timer due now: in {!Consort_engine.Loop}, after the descriptors
    that were ready have been served; in the simulator, after the events of the same instant). A
    destination that was given one datagram in the step gets it exactly as it was given, with no
    extra byte and no extra delay but the end of the step; one that was given several gets them in
    as few bundles as fit in {!Param.size} bytes (and the path's MTU), in the order they were given.
    There is no timer that waits for more at low load: the only delay is the step, which is short
    when the link is idle and holds more datagrams the busier the engine is (a batch of [recvmmsg]
    makes many acknowledgements and casts in one step).

    Casts to the same destinations share one queue (sent with [T.cast], so one [sendmmsg] or one
    multicast datagram per bundle); sends have a queue per destination. Queues are flushed in the
    order they got their first datagram, and each keeps the order of its own. A datagram too large
    to share a bundle goes out alone, after what its queue held.

    Receiving, a datagram that starts with {!Wire.magic} is checked whole before any of it goes up
    ({!Wire.check}): a bundle with a bad count, a length of zero, a length past the end or bytes
    left over is dropped and counted in [malformed]; a good one is handed up as one
    {!Consort.Iovec.t} per datagram, each a slice of the received buffer (nothing is copied), and
    never looked into again (a datagram inside that starts with the magic byte is a datagram, not a
    bundle; sent alone, such a datagram goes in a bundle of one). Other datagrams go up as they
    came. So a receiver always understands bundles, whatever its own {!Param.size}. *)

(** The bundle's format: [magic (1 byte), format (1 byte, 1), count (2 bytes, big endian)], then
    [count] times [length (2 bytes, big endian, at least 1), bytes]. *)
module Wire : sig
  val magic : int
  (** [0xC4]: distinct from Bottom's ([0xC1]), the side channel's ([0xC2]) and the seal's ([0xC5]).
  *)

  val header : int
  (** Bytes before the first datagram (4). *)

  val per_datagram : int
  (** Bytes of length in front of each datagram (2). *)

  val max_count : int

  val check : Cstruct.t -> (int, string) result
  (** [check cs] is the number of datagrams in the bundle [cs], or why it is malformed. It reads
      every length and never reads past [cs]. *)

  val iter : Cstruct.t -> (int -> int -> unit) -> unit
  (** [iter cs f] calls [f off len] for each datagram of [cs], in order. [cs] must have passed
      {!check}. *)

  val encode : string list -> string
  (** [encode ds] is the bundle of [ds] (for tests and fuzzing).
      @raise Invalid_argument
        if a datagram is empty or longer than 65535 bytes, or there are more than {!max_count}. *)

  val decode : string -> (string list, string) result
  (** [decode s] is the datagrams of the bundle [s] ({!check}, then {!iter}). *)
end

module Param : sig
  val size : string
  (** ["group.bundle"], default 60000: the largest bundle in bytes; 0 turns bundling off (datagrams
      are sent one by one at once). *)
end

type stats = {
  bundles_sent : int;  (** bundles sent (a cast bundle counts once) *)
  bundled : int;  (** datagrams that went out inside a bundle *)
  alone : int;  (** datagrams that went out as they were given *)
  bundles_received : int;
  unbundled : int;  (** datagrams taken out of received bundles *)
  malformed : int;  (** received bundles dropped as malformed *)
}
(** What a connection bundled and unbundled. *)

val pp_stats : stats Fmt.t

val counters : stats -> (string * int) list
(** As counters ([bundles_sent], [bundled], [bundles_received], [unbundled], [malformed]; not
    [alone]). *)

module Make (T : Consort.Transport.S) : sig
  include
    Consort.Transport.S with type t = T.t and type address = T.address and type timer = T.timer

  val open_with :
    ?size:int ->
    ?pool:Consort.Pool.t ->
    t ->
    address ->
    (connection -> handler) ->
    (connection, Consort.Transport.error) result
  (** [open_with ~size ~pool t addr f] is {!open_} with bundles of at most [size] bytes (default
      60000; 0: no bundling) built in buffers from [pool] (default {!Consort.Pool.default}). *)

  val inner : connection -> T.connection
  (** The connection of [T] underneath (for its own controls and counters). *)

  val send_alone :
    connection -> dst:address -> Consort.Msg.t -> (unit, Consort.Transport.error) result
  (** [send_alone c ~dst msg] sends [msg] at once, in no bundle, ahead of what [c] holds (the group
      runtime's side channel: a transport underneath may treat it apart from the stacks' traffic, as
      the seal does with per-view keys). *)

  val flush : connection -> unit
  (** [flush c] sends what [c] holds now, without waiting for the end of the step. *)

  val stats : connection -> stats
end
