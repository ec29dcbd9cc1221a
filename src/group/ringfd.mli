(** Ringfd: a failure detector for large groups (the [Scale] property), in place of {!Suspect}.

    {!Suspect} has every member cast a heartbeat to every other: each member receives [n - 1]
    heartbeats per interval and keeps an [n] by [n] table of who accused whom. Ringfd puts the
    members not suspected on a ring by rank: each member sends a heartbeat, point-to-point, to its
    {!Param.monitors} successors ([k], default 3) every [suspect.interval], and watches its [k]
    predecessors. So each member sends and receives [k] heartbeats per interval, whatever the size
    of the group, and keeps state linear in it.

    {b Silence.} A watched rank not heard from for [suspect.timeout] (after being probed directly
    for the last [suspect.verify] of it, as {!Suspect} does) is suspected here and reported up
    ({!Gevent.Suspect}); {!Slander} above tells the group. When the suspected set changes, the ring
    closes over the gap: the members that now watch a rank give it a full timeout from then.

    {b Corroboration.} Another member's report that a rank is silent ({!Gevent.Accusation} of kind
    [Silent]) is adopted once two members not suspected have reported it, or when this member
    watches the rank and does not hear it either, or when fewer than two members watch the rank (one
    word is then all there is). A member whose reports are contradicted twice, by ranks this member
    watches and has heard all along for a timeout while running itself, or by this member itself, is
    the one that does not hear: it is suspected instead (a deaf member is excluded alone). Requested
    and unresponsive suspicions are adopted as given, as {!Suspect} does; so are a coordinator's
    flush exclusions that this member can confirm ({!Gevent.Judge_flush}).

    {b One-way faults.} A member that reports one rank silent, and only that one, for two timeouts,
    neither corroborated nor found deaf, cannot hear it while others can: its layers below hold
    nothing more for that rank, so the view cannot keep both, and the rank is suspected here too (a
    view change comes, as {!Suspect} adopts such a suspicion after [suspect.grace]). A coordinator's
    exclusion of a rank above it, claimed for [suspect.grace], is confirmed for the same reason;
    this member's own exclusion by a coordinator that ranks above it (one only because it suspects
    this member) needs two accusers. A member whose flush this member refused and which then calls
    the members unresponsive is suspected instead of them: a member deaf to the coordinator, which
    took itself for one, is excluded alone rather than collapse the group.

    {b Pauses} of this member are recognised as {!Suspect} does, and not counted as anyone's
    silence.

    Bounded: at most [8 n] reports are kept (one per accuser and accused); more are counted
    (["claims_dropped"]) and ignored. Nonsense never raises. Tunables: those of {!Suspect}
    ([suspect.interval], [timeout], [verify], [pause], [grace]) and {!Param.monitors}. *)

type t

(** The header. *)
type header =
  | No_hdr  (** a message of the layers above, passed through *)
  | Heartbeat  (** the sender is alive (point-to-point, to a ring successor) *)
  | Probe of { ack : bool }  (** a direct check of a silent rank ([ack = false]), and its answer *)

module Param : sig
  val monitors : string
  (** ["ringfd.monitors"]: how many ring successors watch each member (default 3, 1 to 16). *)
end

val successors : n:int -> gone:(int -> bool) -> k:int -> int -> int list
(** [successors ~n ~gone ~k r]: the [k] nearest ranks after [r] on the ring of [n] ranks, skipping
    [r] and the [gone] ones (fewer if there are not enough), nearest first. *)

val predecessors : n:int -> gone:(int -> bool) -> k:int -> int -> int list
(** The same, before [r]. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: one tag byte (0 no header, 1 heartbeat, 2 probe, 3 probe answer). *)

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
(** ["heartbeats_sent"], ["heartbeats_received"], ranks suspected ["by_silence"], ["gossiped"]
    (adopted from others' reports), ["requested"], ["unresponsive"], ["pauses"], ["probes"],
    ["accusations_waiting"] (reports not corroborated when they came), ["accusers_blamed"],
    ["claims_dropped"], ["bad_rank"], ["self_suspicions"], ["malformed"], and the gauges ["watched"]
    and ["suspected"]. *)

val layer : Consort.Layer.t
