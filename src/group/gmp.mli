(** Gmp: agreement on the next view, with virtual synchrony (Ensemble's [Elect], [Intra], [Sync] and
    [Leave], in one layer).

    The coordinator is the lowest-ranked member not suspected. When a member is suspected, leaves,
    or the group runtime asks for it (a merge), the coordinator runs a flush round, named by its
    rank and an attempt number:

    + it casts [Flush] with the members excluded (suspected) and leaving;
    + each member blocks its application ({!Block}) and drains the stack below it
      ({!Consort.Event.Block_req}: casts waiting for flow control go out and come back from the
      reliable layer, so they are counted); once {!Consort.Event.Block_ok} is back, with the parts
      that layers add to the report, it sends the coordinator how many application casts it has
      delivered from each origin, how many sends it sent to each member, and those parts; deliveries
      past what it reported are held back from now on;
    + the coordinator sends each member its target: for casts, the most any remaining member
      delivered from each origin; for sends, what each remaining origin sent to it;
    + each member hands every member's parts down ({!Consort.Event.Flush_parts}), delivers what it
      holds up to the target (the reliable layers below recover what it lacks from whoever has it),
      drops the rest, and reports [Done];
    + with every [Done] in, the coordinator emits {!Flushed}; the group runtime then installs the
      next view.

    So two members that install the same two consecutive views deliver the same messages in the
    first. A suspicion during a round starts a new one; a member named in a round's exclusions emits
    {!Excluded}. A round from a coordinator this member suspects is ignored. A coordinator that
    waits longer than [gmp.flush_timeout] for a member's report or completion suspects that member,
    so no message and no member can keep the group blocked.

    Requires {!Consort.Contract.reliable_cast} and {!Consort.Contract.reliable_send}; provides
    {!membership}. *)

type Consort.Event.up_ctl +=
  | Block  (** the application must stop sending until the next view *)
  | Flushed of { survivors : int list; leavers : int list }
        (** at the coordinator: the round is complete; these ranks go on, these leave *)
  | Excluded  (** the group decided to go on without this member *)
  | Reported of { coord : int; excluded : int list; leaving : int list; into : string }
        (** this member reported to the round of [coord], which excludes and lets go these ranks:
            the next view must be exactly the others (and whoever merges in), made by [coord] or by
            the member [into] whose view this one merges into (["" ]: none) *)
  | Synced
        (** this member has delivered everything up to a round's target: it holds the same messages
            of the view as every member that completes that round (layers above that order at the
            end of the view wait for this) *)

type Consort.Event.dn_ctl +=
  | Start_flush of string  (** at the coordinator: run a round (the reason, for logs) *)
  | Leave  (** this member wants to leave *)
  | Merge_into of string
        (** at the coordinator: the next rounds are for a merge into the view of this member (its
            id), which will make the next view *)

module Param : sig
  val flush_timeout : string
  (** ["gmp.flush_timeout"], default 4 s: how long the coordinator waits for a member's report or
      completion before suspecting it *)
end

type t

type header =
  | App  (** an application message *)
  | Leave_req
  | Flush of { coord : int; attempt : int; excluded : int list; leaving : int list; into : string }
  | Flush_ok of {
      coord : int;
      attempt : int;
      casts : int array;
      sent : int array;
      parts : Consort.Event.part list;
    }
  | Target of {
      coord : int;
      attempt : int;
      casts : int array;
      sends : int array;
      parts : (int * Consort.Event.part list) list;  (** every member's parts, by rank *)
    }
  | Done of { coord : int; attempt : int }

val membership : Consort.Contract.t
val name : string

val codec : header Consort.Codec.t
(** A tag byte, then varints and varint-counted lists. *)

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
val layer : Consort.Layer.t
