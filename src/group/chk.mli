(** Checking layers (property [Debug]): FIFO, total order and virtual synchrony checked inside a
    running stack, each violation reported with the events that led to it.

    - {!fifo} ([chk_fifo]) numbers each member's casts, and its sends to each peer, and checks that
      every member delivers each origin's numbers one after the other: a gap, a message delivered
      twice or out of order is a violation (a gap after a reliable layer said it gave up on that
      origin, [Event.Lost_message], is not).
    - {!total} ([chk_total], above [Total]) hashes the order in which casts are delivered in a view,
      and each cast carries its sender's claim: how many casts it had delivered and the hash of
      their order. Every member compares each claim with its own order at that position (the last
      4096 positions; claims about the end of the view, which only the members that go on together
      share, are not judged).
    - {!sync} ([chk_sync], needs [Gmp]) keeps a digest of the set of casts the member delivered in
      its view; in the next view each member casts the digest of the view it came from, and members
      that came from the same view compare: those that install the same two views must have
      delivered the same casts in the first.

    A violation goes to the handler ({!on_violation}; by default an error on the log source
    [consort.chk]), one report with the layer's last [chk.history] events (32), at most
    [chk.reports] (8) per layer and view, the rest counted (the layer's [violations] counter). *)

type violation = {
  layer : string;  (** [chk_fifo], [chk_total] or [chk_sync] *)
  member : string;  (** the member that saw it *)
  view : string;  (** its view *)
  what : string;  (** one sentence *)
  events : string list;  (** the layer's recent events at that member, oldest first *)
}

val pp_violation : violation Fmt.t
(** The sentence, then one line per event. *)

val on_violation : (violation -> unit) -> unit
(** Where reports go from now on (every stack of the process). *)

val reset_handler : unit -> unit
(** Back to the log. *)

val violations : unit -> int
(** Violations reported in this process so far. *)

val reset : unit -> unit
(** Forget what this process's members delivered in their last views (each run of a simulated
    scenario starts with it: member ids repeat across seeds). *)

module Param : sig
  val history : string
  val reports : string
end

val fifo_checked : Consort.Contract.t
val total_checked : Consort.Contract.t
val sync_checked : Consort.Contract.t

module Fifo : Consort.Layer.S
module Total_chk : Consort.Layer.S
module Sync_chk : Consort.Layer.S

val fifo : Consort.Layer.t
val total : Consort.Layer.t
val sync : Consort.Layer.t
