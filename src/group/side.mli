(** The side channel between views: discovery, merge requests, view
    installation (Ensemble's Heal, Inter and Merge messages).

    These messages travel between members that are not in one view, so no
    per-view stack can carry them; they start with their own magic byte
    ({!magic}), so a datagram is either for the current stack (Bottom's
    magic) or for this channel. *)

type member = { eid : string; addr : string }
(** A member incarnation and the address it listens on. *)

type t =
  | Gossip of { group : string; vid : string; ltime : int; coord : member; size : int }
      (** discovery: a view of the group exists, coordinated by [coord] *)
  | Merge_req of { group : string; vid : string; ltime : int; members : member list }
      (** the coordinator of view [vid] has flushed it and asks to be taken in *)
  | Install of {
      group : string;
      vid : string;
      ltime : int;
      members : member list;
      leavers : string list;
      preds : string list;  (** the views this one follows *)
    }  (** the next view, from the member that made it *)
  | Install_ack of { group : string; vid : string; eid : string }

val magic : int
val codec : t Consort.Codec.t
val group : t -> string

val installer : string -> string
(** [installer vid]: the member that named view [vid] (["LTIME:EID"]). *)

val accept_install :
  me:string ->
  view:Consort.View.t ->
  addr:(int -> string) ->
  reported:(int * int list * int list) option ->
  src:string ->
  vid:string ->
  members:member list ->
  preds:string list ->
  (unit, string) result
(** Whether a member in [view] (whose rank [r] listens at [addr r]) that
    last reported to the flush round [reported] (its coordinator's rank,
    the ranks it excludes and lets go) takes the view [vid] of [members],
    sent from [src]: only if it follows [view] ([preds]), keeps exactly
    the members of [view] that the round left, and comes from the round's
    coordinator or from the member that named it (the coordinator of the
    partition merged into). [Error] says why not, in one sentence. *)
