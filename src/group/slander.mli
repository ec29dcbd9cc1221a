(** Slander: members share their suspicions reliably (Ensemble's [Slander]).

    It sits above the reliable layers and a failure detector such as {!Suspect}. When a
    {!Gevent.Suspect_request} or {!Gevent.Suspect_unresponsive} comes down from the application or a
    membership layer, it casts the ranks not yet suspected here, with the reason, reliably to the
    group, and reports them up at once as a {!Gevent.Suspect} with the same reason. A request then
    goes on down, so that the failure detector also stops watching those ranks.

    A silence the failure detector finds here (or an accuser it blames) is reported up at once, but
    cast only after a wait: none for the member just after the first suspected rank in the ring,
    [slander.stagger] (5 ms) more for each member after it, at most [slander.wait] (250 ms). A rank
    two other members (not found faulty here) have slandered by then is dropped from the cast. When
    a member crashes, every member finds the silence at about the same time; the first in the ring
    casts it and the others hear it before their turn (or the view changes first): about one cast of
    n - 1 deliveries per crash, not n - 1 casts of n - 1 each. Two, because a failure detector that
    adopts a silence only from two of its accusers (Ringfd) must hear two, and so that a crash is
    still cast when the first member to cast it fails too.

    A member that receives a slander does not take it on trust: it hands it down to the failure
    detector as a {!Gevent.Accusation}, which judges it against what this member hears and reports
    up what it adopts (see {!Suspect.judge}). A slander says why: {!Gevent.Silent} (from the failure
    detector), {!Gevent.Requested} (asked by an application: adopted everywhere) or
    {!Gevent.Unresponsive} (a coordinator's flush timeout). A suspicion adopted from another
    member's slander is not cast again, unless it was asked for (so that the request reaches every
    member that stays even if the one that cast it fails); a silence or a flush timeout is found
    again by the members, or the next coordinator, if its accuser fails.

    Messages of the layers above pass through with the {!No_hdr} header; other control events pass
    on untouched. Nonsense never raises: suspicions of ranks outside the view and of this member
    itself are counted and ignored, and a slander that did not come as a cast is counted as
    malformed. Reasons longer than 1024 bytes are cut on the wire. On [Stop] the layer falls silent.

    Requires {!Consort.Contract.reliable_cast} and {!Suspect.contract}; provides {!contract}. *)

type t

(** The header. *)
type header =
  | No_hdr  (** a message of the layers above, passed through *)
  | Slander of { ranks : int list; reason : string; kind : Gevent.kind }
      (** the sender suspects these ranks, for this reason (tag 1 silent, 2 requested, 3
          unresponsive) *)

val contract : Consort.Contract.t
(** [contract] is the property ["slander"]: a suspicion raised at one member is reported up at every
    member that stays. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 no header, 1 slander); for a slander, a varint count (at most 4096) and
    the ranks as varints, then the reason as a varint length (at most 1024) and its bytes. *)

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
(** ["slanders_sent"], ["slanders_received"] (from other members), ["slanders_suppressed"] (casts
    dropped because two other members cast the same ranks first), ["bad_rank"] and
    ["self_suspicions"] (nonsense in slanders, events and requests), ["malformed"], and the gauges
    ["slanders_pending"] (casts waiting their turn) and ["suspected"]. *)

module Param : sig
  val stagger : string
  (** ["slander.stagger"]: how much longer each member waits than the one before it (in the ring,
      from the suspected rank on) before it casts a silence it found (default 5 ms). *)

  val wait : string
  (** ["slander.wait"]: the longest a member waits before it casts a silence it found (default 250
      ms). *)
end

val layer : Consort.Layer.t
(** [layer] is Slander as a first-class layer. *)
