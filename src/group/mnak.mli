(** Mnak: reliable FIFO multicast with negative acknowledgements, for the fixed membership of the
    view it is created with (Ensemble's [Mnak]).

    Each member numbers its casts and delivers them to itself at once ([Cast_from] its own rank).
    Receivers deliver each origin's casts in order and exactly once, dropping duplicates and
    buffering casts that arrive early, up to {!effective_window} ahead of the next expected one.

    A gap in an origin's numbers is repaired by asking: {!Param.nak_delay} after it appears (time
    for reordered casts to arrive), the receiver sends a NAK listing the missing ranges,
    point-to-point, to the origin or to another member known to have them, chosen at random, and
    asks again every {!Param.nak_retry} while the gap lasts. Whoever gets a NAK sends the casts it
    holds in those ranges back, point-to-point.

    While a member holds casts not yet known to be stable, or has gaps, it casts a status every
    {!Param.status_interval}: for each origin, how many of its casts it has received contiguously
    (for itself: how many it has sent). Statuses reveal a lost tail of a burst, with no later cast
    to show the gap, and make casts stable: a cast that every member has received is released from
    every buffer. A member that gets a status from a busy member answers with its own at its next
    tick, so the group converges, then falls silent when everything is stable.

    {b Wire numbers} are checked before any state changes. A cast numbered beyond the window is
    dropped and leaves no trace (no gap, no NAK); so is a cast above a gap when the casts of its
    origin kept early already take 1 MiB, or four times [mflow.window] if that is more. A status
    claiming more of this member's casts than it has made is dropped whole; its claims about other
    origins count only up to the window; an origin's own count in its status is the truth about how
    many casts it made, and closes gaps that others' claims opened. A NAK is answered with at most a
    window's worth of numbers looked at, and at most once per half {!Param.nak_retry} for one asker
    and origin.

    {b Suspicions} ({!Gevent.Suspect} going up, final within the view): stability no longer waits
    for a suspected member, gaps are asked only of members not suspected (the origin, or others
    whose statuses show they have the casts), so asking stops when nobody trusted can answer, and
    NAKs of suspected members are not answered.

    Mnak sits under Pt2pt ([pt2pt:mnak]), as in Ensemble: NAKs and retransmissions are plain
    datagrams, repeated by Mnak itself. Point-to-point messages pass through with {!No_hdr}. On
    [Stop] every buffered message is released.

    Requires {!Consort.Contract.datagram}; provides {!Consort.Contract.reliable_cast}. *)

type t

(** {b Stability events.} Once a layer above sends [Track_stability] down (Agree does), Mnak tells
    it, whenever the casts every member of the view holds grow, [Stable { stable; received }]:
    [stable.(o)], how many casts of origin [o] every member holds, the suspected ones included (as
    their statuses tell); [received.(o)], how many this member has (its own: has sent). A cast that
    reached a layer above before the event is among [received]: so a layer that notes, for each cast
    it keeps, [received] at the first event after the cast came, knows that cast is held everywhere
    once [stable] reaches that mark.

    A cast held at Mnak is not yet one the member will deliver: the flush (Gmp) drops what comes
    after the member's report beyond the agreed cut. So, once tracking, a member's statuses claim of
    the others' casts only what it had when the flush's [Block_ok] passed up through it (before its
    report); what came later is not claimed, and waits for the end of the view. *)
type Consort.Event.up_ctl += Stable of { stable : int array; received : int array }

type Consort.Event.dn_ctl += Track_stability

(** The header. *)
type header =
  | No_hdr  (** a point-to-point message, passed through *)
  | Data of { seq : int }  (** the origin's cast number [seq] *)
  | Retrans of { origin : int; seq : int }
      (** a point-to-point copy of cast [seq] of [origin], answering a NAK *)
  | Nak of { origin : int; ranges : (int * int) list }
      (** a request for the casts of [origin] numbered in these inclusive ranges *)
  | Status of { busy : bool; vector : int array }
      (** [vector.(o)]: how many casts of [o] the sender has received contiguously (its own: sent);
          [busy]: the sender still holds unstable casts or has gaps, and wants the others' statuses
      *)
  | Report of { busy : bool; cover : string; low : int array; high : int array; who : int array }
      (** Scale ({!tree_layer}): to the sender's parent in the stability tree, for the sender's
          subtree: which members it covers (a bitset by rank), the fewest casts of each origin any
          of them has received contiguously ([low]), the most ([high]) and who has them ([who]);
          [busy] as in [Status] *)
  | Stability of { busy : bool; stable : int array; high : int array; who : int array }
      (** Scale: cast by the root of the tree: [stable.(o)] casts of [o] are held by every member
          not suspected; [high] and [who] as in [Report], over the whole group; [busy]: send reports
      *)

(** Names of the registered tunables. *)
module Param : sig
  val window : string
  (** ["mnak.window"]: casts buffered ahead of the next expected one, per origin, and most casts
      asked for or resent per NAK (default 1024, raised to what Mflow's window allows: see
      {!effective_window}). *)

  val status_interval : string
  (** ["mnak.status_interval"]: period of status casts while busy (default 20 ms). *)

  val nak_delay : string
  (** ["mnak.nak_delay"]: wait between noticing a gap and the first NAK (default 2 ms). *)

  val nak_retry : string
  (** ["mnak.nak_retry"]: wait before asking again for a gap (default 20 ms). *)

  val fanout : string
  (** ["mnak.fanout"]: children per node of the stability tree of {!tree_layer} (default 8, 2 to
      256). *)
end

val effective_window : Consort.Params.t -> int
(** [effective_window params] is the acceptance window in force: the larger of {!Param.window} and
    the number of empty casts Mflow's window ([mflow.window] divided by {!Mflow.overhead}) lets one
    origin have in flight, at most 2{^ 20}. So a burst that flow control lets through is buffered by
    every receiver, never dropped as beyond the window. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 no header, 1 data, 2 retransmission, 3 NAK, 4 status), then varints:
    [seq]; [origin], [seq]; [origin], a count and [(lo, hi)] pairs (at most 256); a busy byte, a
    count and the vector (at most 4096 entries). *)

val pp_header : header Fmt.t
val provides : Consort.Contract.t list
val requires : Consort.Contract.t list
val create : Consort.Layer.ctx -> header Consort.Layer.out -> t
val up : t -> Consort.Event.src -> header -> Consort.Msg.t -> unit
val up_ctl : t -> Consort.Event.up_ctl -> unit
val dn : t -> Consort.Event.dst -> Consort.Msg.t -> unit
val dn_ctl : t -> Consort.Event.dn_ctl -> unit
val timer : t -> Consort.Time.t -> unit

val counters : t -> (string * int) list
(** ["naks_sent"], ["retransmissions"], ["duplicates"], ["out_of_order"], ["beyond_window"],
    ["stable_released"], ["status_sent"], ["malformed"] (headers that do not fit their source or the
    view), ["impossible"] (statuses claiming casts this member never made), ["naks_ignored"]
    (repeated too soon, or from a suspected member), and the gauge ["buffered"]: casts held now,
    delivered but unstable or early. *)

val layer : Consort.Layer.t
(** [layer] is Mnak as a first-class layer. *)

val tree_layer : Consort.Layer.t
(** [tree_layer] is Mnak for large groups (the [Scale] property; named ["mnak_tree"]): the same
    casts, NAKs and retransmissions, but no member casts its status to all. The members not
    suspected, in rank order, form a tree with {!Param.fanout} children per node (default 8): while
    a member is busy, or was asked, it sends a {!Report} for its subtree to its parent once per
    [mnak.status_interval], and the root casts a {!Stability} once the reports cover every member
    not suspected. So each member sends one message and receives about [fanout + 1] per interval,
    and keeps no [n] by [n] table: what every member holds, and who holds the most of each origin's
    casts (whom a gap is asked of when the origin cannot answer), come from the root. A report from
    a member that is not a child of this one in its tree is dropped. It does not support
    {!Track_stability} for a stack that needs stability of suspected members too: [Agree] and [Evs]
    are refused with [Scale]. *)
