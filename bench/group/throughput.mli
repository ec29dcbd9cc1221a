(** Multicast throughput of 1 KB messages among 3 processes on 127.0.0.1: casts in a group with the
    [vsync] stack (its default flow control), every delivery checked at every member (origin, order,
    content, count); beside one process sending the same datagrams to the 2 others over blocking
    kernel UDP sockets with no flow control, counting what they actually receive. Every run is
    bounded in messages and time. *)

type member = {
  index : int;
  role : string;  (** ["sender"], ["receiver"], or ["sender+receiver"] *)
  received : int;  (** messages delivered (group) or received (UDP) *)
  expected : int;
  errors : int;  (** deliveries out of order, duplicated, corrupt or unexpected *)
  seconds : float;  (** first to last message *)
  detail : (string * string) list;  (** the process's other counters *)
}

type row = {
  kind : string;  (** ["raw UDP"], or the group configuration's label (["group cast"]) *)
  senders : int;
  size : int;
  count : int;  (** messages per sender *)
  members : member list;
  ok : bool;  (** every member got every message, in order (and with [ordered], in one order) *)
  ordered : bool;  (** a total-order run: the members' orders of delivery compared *)
  not_sequencer : bool;
      (** the members that cast were chosen by rank, the highest: rank 0 (Total's sequencer) cast
          only if every member did *)
  runs : float list;
      (** the slowest receiving process's messages/s in each run; [members] is the median run *)
}

val rate : row -> member -> float
(** [rate r m] is [m]'s messages per second. *)

val same_order : member list -> bool
(** [same_order ms]: every member reported the same hash of its deliveries in order (["order_hash"]
    in its [detail]); a member without one fails. *)

val sequencer : row -> int option
(** [sequencer r] is the index of the process that was rank 0 of the view (Total's sequencer) in
    [r]'s median run, if it said. *)

val casters : row -> member list
(** [casters r]: the processes that cast in [r]'s median run. *)

val sequencer_cast : row -> bool
(** [sequencer_cast r]: rank 0 was among the processes that cast. *)

val slowest : row -> float
(** [slowest r] is the least messages/s of [r]'s receiving processes. *)

val run :
  exe:string ->
  ?count:int ->
  ?size:int ->
  ?senders:int list ->
  ?params:string ->
  ?stacks:(string * string * string) list ->
  ?members:int ->
  ?not_sequencer:bool ->
  ?deadline:float ->
  ?reps:int ->
  unit ->
  (row list, string) result
(** [run ~exe ()] runs raw UDP, then the group with 1 and with 3 senders (default [senders]),
    [count] messages (default 20000) of [size] bytes (default 1024) per sender, each configuration
    [reps] times (default 3; the row is the median run), each run given up after [deadline] seconds
    (default 30). [stacks] lists the group configurations, each (label, property set, more
    tunables): by default [("group cast", "vsync", "")]. [members]: processes (default 3).
    [not_sequencer] (default false): the members that cast are those of the highest ranks of the
    view, so that rank 0 (Total's sequencer) casts only when every member does; otherwise the first
    processes cast, whatever their ranks. *)

val pp_table : row list Fmt.t
val to_json : row list -> string
