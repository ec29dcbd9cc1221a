(** Suspect: a heartbeat failure detector (Ensemble's [Suspect]).

    It sits just above {!Bottom}, under the reliable layers, so that its heartbeats are plain
    datagrams, never buffered or sent again. Every member casts a heartbeat every {!Param.interval},
    the first one at its first timer call. Any datagram from a rank, a heartbeat or a message of the
    layers above, is proof that the rank is alive; messages of the layers above pass through with
    the {!No_hdr} header, and only the time they arrive is noted.

    A rank not heard from for {!Param.timeout} is suspected: the layer emits {!Gevent.Suspect} up,
    with a reason such as ["silent for 5.1 s"]. Ranks found silent on the same timer call are
    reported in one event. A rank is suspected at most once in the view the stack was made for;
    after that it is no longer watched.

    {b Verification.} For the last {!Param.verify} of the timeout, a silent rank is sent a direct
    probe once per interval, which it answers at once (as JGroups' VERIFY_SUSPECT); any datagram
    counts as the answer.

    {b Accusations.} Heartbeats carry the sender's suspicion set, and {!Slander} hands down the
    suspicions other members cast ({!Gevent.Accusation}). Neither is taken on trust: see {!judge}. A
    suspicion this member can confirm (it does not hear the accused either) is adopted (reason
    ["suspected by 2 (...) and silent here too"]); one that accuses most of the view while this
    member hears some of the accused, or this member itself, makes the accuser the suspect. So a
    member that stops hearing (a deaf member) is excluded alone, instead of breaking the group into
    views of one. A member vouches only for members it has heard all along for the last timeout,
    while running itself: members starved together (a pause, a loaded machine) that run again hear
    each other at once, but do not take the members that went on, and rightly suspected them, for
    slanderers. Heartbeats carry only the ranks this member suspects for silence, not those it was
    asked to suspect or that a coordinator found unresponsive (those travel with their kind through
    {!Slander}). A {!Gevent.Suspect_request} going down is adopted as given and passed on down.

    {b Pauses.} This member's timer runs at least every interval. When two consecutive timer calls
    are further apart than {!Param.pause}, this member itself was not running (a garbage collection,
    a stopped or migrated virtual machine) and could not hear anyone either. That time is then not
    counted as anyone's silence: each rank's last proof of life is moved forward by the length of
    the pause less one interval, and no later than now, and each rank gets at least one more
    interval before it can be suspected. So a member waking up from a long pause does not suspect
    everyone on its first timer call, while a rank that was already silent before the pause is still
    suspected soon after.

    Defaults: heartbeats every 250 ms, suspicion after 5 s of silence, so a rank is falsely
    suspected only if some 19 heartbeats in a row are lost (about 10{^ -10} per heartbeat at 30%
    loss), and pauses of this member are recognised above 1 s. Heartbeat traffic grows with the
    square of the group size: for large groups, raise the interval.

    Nonsense never raises: suspicions of ranks outside the view and of this member itself are
    counted and ignored. On [Stop] the layer falls silent.

    Requires {!Consort.Contract.datagram}; provides {!Consort.Contract.datagram} and {!contract}. *)

type t

(** The header. *)
type header =
  | No_hdr  (** a message of the layers above, passed through *)
  | Heartbeat of { suspects : int list }
      (** the sender is alive and suspects these ranks, in increasing order *)
  | Probe of { ack : bool }  (** a direct check of a silent rank ([ack = false]), and its answer *)

type verdict = { adopt : int list; blame_accuser : bool }

val judge :
  n:int ->
  me:int ->
  hears:(int -> bool) ->
  ?vouches:(int -> bool) ->
  ?self:bool ->
  accuser:int ->
  kind:Gevent.kind ->
  ?all:int list ->
  int list ->
  verdict
(** [judge ~n ~me ~hears ~vouches ~self ~accuser ~kind ~all ranks]: what member [me] of a view of
    [n] makes of [accuser]'s suspicion of [ranks], [all] being what [accuser] said it suspects
    before, [hears r] whether [me] has heard from [r] lately, [vouches r] (default [hears]) whether
    [me] can vouch that [r] was not silent (it heard [r] all along for the last timeout, while
    running, and does not suspect it itself), and [self] (default [true]) whether [me] kept running
    for the last timeout. A {!Gevent.Requested} suspicion is adopted as it is. Otherwise, if
    [accuser] suspects (with [all]) more than half of the other members while [me] vouches for some
    of them, or suspects [me] while [self], the accuser is the one to suspect and nothing is
    adopted; else a {!Gevent.Silent} rank is adopted if [me] does not hear it either, an
    {!Gevent.Unresponsive} one is adopted. [me] itself, ranks outside the view and the accuser are
    never adopted. So members that were starved together and run again do not take the members that
    went on, and rightly suspected them, for slanderers. *)

(** Names of the registered tunables. *)
module Param : sig
  val interval : string
  (** ["suspect.interval"]: period of heartbeat casts (default 250 ms). *)

  val timeout : string
  (** ["suspect.timeout"]: silence after which a rank is suspected (default 5 s). *)

  val verify : string
  (** ["suspect.verify"]: for this long before the timeout, a silent rank is probed directly, once
      per interval (default 1 s). *)

  val pause : string
  (** ["suspect.pause"]: a gap between two timer calls longer than this, or than twice the interval
      if that is longer, is a pause of this member (default 1 s). *)
end

val contract : Consort.Contract.t
(** [contract] is the property ["suspect"]: members silent for too long are reported up as
    {!Gevent.Suspect} events, once per rank per view. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 no header, 1 heartbeat); for a heartbeat, a varint count (at most 4096)
    and the suspected ranks as varints. *)

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
    (adopted from heartbeats) and ["requested"], ["pauses"] of this member, ["probes"] sent,
    ["accusations_rejected"], ["accusers_blamed"], ["heard_after_suspicion"] (datagrams from
    suspected ranks), ["bad_rank"] and ["self_suspicions"] (nonsense in heartbeats and requests),
    ["malformed"], and the gauge ["suspected"]. *)

val layer : Consort.Layer.t
(** [layer] is Suspect as a first-class layer. *)
