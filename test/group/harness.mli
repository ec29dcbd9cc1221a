(** A deterministic in-memory group: [n] stacks in one process, a virtual clock and a faulty network
    (seeded loss, duplication and delay, hence reordering). Datagrams cross it as copied bytes, as
    on a real network. *)

type net = {
  loss : float;  (** probability that a datagram to one destination is lost *)
  dup : float;  (** probability that a datagram is delivered twice *)
  min_delay : Consort.Time.t;
  max_delay : Consort.Time.t;  (** delays are uniform in \[min_delay, max_delay) *)
}

val perfect : net
(** No loss, no duplication, a fixed 1 ms delay. *)

val faulty : net
(** 30% loss, 10% duplication, delays from 0.1 to 5 ms. *)

type t

val create :
  ?params:Consort.Params.t ->
  ?fused:bool ->
  ?net:net ->
  ?drop:(src:int -> dst:int -> string -> bool) ->
  seed:int ->
  pool:Consort.Pool.t ->
  n:int ->
  layers:Consort.Layer.t list ->
  deliver:(int -> Consort.Event.src -> Consort.Msg.t -> unit) ->
  unit ->
  t
(** [create ~seed ~pool ~n ~layers ~deliver ()] is a group of [n] members, each running [layers] in
    its own view; [deliver i src msg] receives what reaches the application of member [i] (it owns
    [msg]). [drop] decides, before the random faults, to lose a datagram from [src] to [dst] given
    its bytes. [fused] is {!Consort.Stack.create}'s: a [drop] that reads layered headers needs
    [~fused:false]. *)

val now : t -> Consort.Time.t
val stack : t -> int -> Consort.Stack.t

val at : t -> Consort.Time.t -> (unit -> unit) -> unit
(** [at t time f] runs [f] when the clock reaches [time]. *)

val run :
  ?until:Consort.Time.t -> ?max_steps:int -> ?every:(unit -> unit) -> t -> [ `Quiescent | `Timeout ]
(** [run t] processes datagrams, actions and alarms in time order until nothing is in flight and no
    alarm is set ([`Quiescent]), or until the clock would pass [until] or [max_steps] events were
    handled ([`Timeout]). [every] is called after each event. *)

val datagrams : t -> int
(** Datagrams handed to the network so far (one per destination). *)

val stop : t -> unit
(** [stop t] stops every stack and releases what is still in flight. *)

val counter : t -> int -> string -> string -> int
(** [counter t i layer name] is counter [name] of [layer] in member [i]. *)
