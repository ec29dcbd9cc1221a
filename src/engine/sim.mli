(** A deterministic discrete-event network simulator.

    One value of {!t} is a whole simulated network: named endpoints (addresses are plain strings
    such as ["p0"]), a virtual clock that starts at zero, and links that delay, lose, duplicate and
    reorder datagrams. It matches {!Consort.Transport.S}, so a stack bound with {!Endpoint.Make}
    runs over it unchanged.

    Nothing happens until the simulator is driven with {!step} or {!run}: sends and timers only put
    events in a queue ordered by virtual time, ties broken by the order in which the events were
    scheduled. Every random choice is drawn from one generator seeded at {!create}, so the same seed
    and the same calls give the same run, and the same {!trace_hash}.

    {b Datagrams.} A send copies the message's bytes; each delivery hands the receiver's handler a
    fresh {!Consort.Iovec.t} from the simulator's pool, which the handler owns. Sending to an
    address where nothing is open is not an error: the datagram is dropped on arrival (reason
    {!Unbound}), as UDP would.

    {b Connections.} An address holds at most one open connection. {!close} frees the address and
    calls the handler's [closed], once.

    {b Partitions.} A datagram is dropped if its source and destination are in different components
    either when it is sent or when it arrives, so datagrams in flight when a partition starts are
    lost too.

    {b Crashes.} {!crash} closes an endpoint's connection at once and calls its handler's [closed].
    Datagrams that were in flight to it at that moment are dropped when they arrive, even if the
    endpoint has been restarted by then; datagrams sent later reach whatever connection is open at
    the address when they arrive. Timers are not tied to connections: the owner of a connection
    (such as {!Endpoint}) cancels its own timers when [closed] is called. *)

include Consort.Transport.S with type address = string

type link = {
  latency : Consort.Time.t;  (** base delay of every datagram *)
  jitter : Consort.Time.t;  (** extra delay, uniform in \[0, jitter\] *)
  loss : float;  (** probability that a datagram is lost *)
  duplicate : float;  (** probability that a second copy is delivered, with its own delay *)
  reorder : float;  (** probability that a datagram is held back *)
  reorder_delay : Consort.Time.t;
      (** extra delay of a held-back datagram, uniform in \[1, reorder_delay\], so that datagrams
          sent after it overtake it *)
}
(** Parameters of a directed link. *)

val default_link : link
(** [default_link] is a perfect link with a latency of 1ms and nothing else. *)

val pp_link : link Fmt.t

(** Why a datagram was dropped. *)
type drop_reason =
  | Loss  (** the link lost it *)
  | Partition  (** source and destination were in different components *)
  | Crashed  (** the destination crashed while it was in flight, or is down *)
  | Unbound  (** nothing was open at the destination *)
  | Filter  (** the receiver's [Drop_filter] rejected it *)
  | Mtu  (** larger than the MTU; the send failed with [`Too_big] *)

val pp_drop_reason : drop_reason Fmt.t

val create : ?seed:int -> ?mtu:int -> ?pool:Consort.Pool.t -> ?link:link -> unit -> t
(** [create ~seed ~mtu ~pool ~link ()] is an empty network at virtual time zero. [seed] (default 0)
    seeds every random choice; [mtu] (default 65507) is the largest datagram; received datagrams are
    allocated from [pool] (default {!Consort.Pool.default}); [link] (default {!default_link})
    applies to every link without an override.
    @raise Invalid_argument
      if [mtu] is not positive or [link] is invalid (a negative delay, a probability outside \[0,
      1\]). *)

(** {1 Links} *)

val set_default_link : t -> link -> unit
(** [set_default_link t l] makes [l] the parameters of every link without an override, for datagrams
    sent from now on.
    @raise Invalid_argument if [l] is invalid. *)

val set_link : t -> src:address -> dst:address -> link -> unit
(** [set_link t ~src ~dst l] overrides the parameters of the directed link [src -> dst], for
    datagrams sent from now on.
    @raise Invalid_argument if [l] is invalid. *)

val clear_link : t -> src:address -> dst:address -> unit
(** [clear_link t ~src ~dst] removes the override of [src -> dst]. *)

val link : t -> src:address -> dst:address -> link
(** [link t ~src ~dst] is the parameters in force on [src -> dst]. *)

(** {1 Faults} *)

val partition : t -> address list list -> unit
(** [partition t components] splits the network into [components], from now until {!heal} or the
    next [partition]. An address not listed is alone in its own component. An endpoint can always
    reach itself. Schedule a partition for later with {!at}.
    @raise Invalid_argument if an address is listed twice. *)

val heal : t -> unit
(** [heal t] ends the partition: every endpoint can reach every other. *)

val reachable : t -> src:address -> dst:address -> bool
(** [reachable t ~src ~dst] is [true] when the current partition lets datagrams through from [src]
    to [dst]. *)

val crash : t -> address -> unit
(** [crash t addr] closes the connection open at [addr] (its handler's [closed] is called, its
    further sends fail with [`Closed]) and drops every datagram in flight to [addr]. A later
    {!open_} at [addr] is a restart. Crashing an address with nothing open still drops what is in
    flight to it. *)

val is_open : t -> address -> bool
(** [is_open t addr] is [true] when a connection is open at [addr]. *)

(** {1 Pauses}

    A paused process runs nothing: datagrams that arrive for it and timers its code set wait, in
    their order, until the pause ends, and then run (as a process that the scheduler did not run, or
    that a garbage collection stopped, finds its socket buffer and its late timers). A timer belongs
    to the address whose code set it: the destination of the datagram being delivered, the owner of
    the timer being run, or the address given to {!within}. *)

val within : t -> address -> (unit -> 'a) -> 'a
(** [within t addr f] runs [f] as code of the process at [addr]: the timers it sets belong to
    [addr]. *)

val pause : t -> address -> until:Consort.Time.t -> unit
(** [pause t addr ~until] stops the process at [addr] from now until [until] (a later pause extends
    it). Its datagrams in flight still arrive, and wait. *)

val is_paused : t -> address -> bool

(** {1 Running} *)

val step : t -> bool
(** [step t] advances the clock to the earliest pending event and runs it; [false] if there was
    none. *)

val run : ?until:Consort.Time.t -> ?max_events:int -> t -> unit
(** [run ~until ~max_events t] runs events in order until none is left, the next one is later than
    [until], or [max_events] have run. When [until] is given and no more events are due by then, the
    clock is left at [until]. *)

val pending : t -> int
(** [pending t] is the number of scheduled events: datagrams in flight and timers not yet fired or
    cancelled. *)

(** {1 Trace and counters} *)

val set_trace_channel : t -> out_channel option -> unit
(** [set_trace_channel t (Some oc)] writes each trace line to [oc] from now on; [None] stops. *)

val trace_hash : t -> string
(** [trace_hash t] is a hex hash of every trace event so far: the sends (with source, destination,
    size and a hash of the bytes), deliveries, drops with their reason, duplicates, opens, closes,
    crashes, restarts, pauses, partitions and heals, each with its virtual time. It is a fingerprint
    of the run (two runs that differ in any event differ in it, but for collisions of a 63-bit
    hash), not a cryptographic digest. The trace channel gets the same events as text lines. *)

type stats = {
  sent : int;  (** datagrams accepted, one per destination *)
  delivered : int;  (** datagrams handed to a handler *)
  duplicated : int;  (** extra copies made by the links *)
  dropped_loss : int;
  dropped_partition : int;
  dropped_crashed : int;
  dropped_unbound : int;
  dropped_filter : int;
  dropped_mtu : int;  (** refused at send, one per destination *)
  events : int;  (** events run (deliveries, drops on arrival, timers) *)
}

val stats : t -> stats

val dropped : stats -> int
(** [dropped s] is the number of datagrams dropped for any reason. *)

val pp_stats : stats Fmt.t
