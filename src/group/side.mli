(** The side channel between views: discovery, merge requests, view installation (Ensemble's Heal,
    Inter and Merge messages).

    These messages travel between members that are not in one view, so no per-view stack can carry
    them; they start with their own magic byte ({!magic}), so a datagram is either for the current
    stack (Bottom's magic) or for this channel. *)

type member = { eid : string; addr : string; pub : string }
(** A member incarnation, the address it listens on, and its X25519 public key for per-view keys
    (property [Rekey]; [""] without). *)

type stack = { epoch : int; id : string }
(** The stack a view runs ({!Stack_id.to_string}), and how many switches made it ([epoch]). *)

type t =
  | Gossip of {
      group : string;
      vid : string;
      ltime : int;
      coord : member;
      size : int;
      stack : stack;
    }  (** discovery: a view of the group exists, coordinated by [coord] *)
  | Merge_req of {
      group : string;
      vid : string;
      ltime : int;
      members : member list;
      stack : stack;
      dst : string;  (** the coordinator asked *)
    }  (** the coordinator of view [vid] has flushed it and asks to be taken in *)
  | Install of {
      group : string;
      vid : string;
      ltime : int;
      members : member list;
      leavers : string list;
      preds : string list;  (** the views this one follows *)
      stack : stack;  (** the stack the view runs *)
      keys : (string * string) list;
          (** with [Rekey]: the view's key, wrapped for each member of the view but its maker
              (member id, wrapped key); [[]] without *)
    }  (** the next view, from the member that made it *)
  | Install_ack of { group : string; vid : string; eid : string; dst : string }
      (** member [eid] installed view [vid]; to [dst], the view's maker *)
  | Switch_req of { group : string; vid : string; stack : stack; dst : string }
      (** a member of view [vid] asks its coordinator [dst] to switch to [stack] *)
  | Probe of { group : string; vid : string; nonce : string; eid : string; dst : string }
      (** [eid] asks member [dst] whether it is in view [vid] now: the direct evidence a merge waits
          for (a discovery message or a merge request names a partition; only its answer shows that
          it exists) *)
  | Probe_ack of { group : string; vid : string; nonce : string; eid : string; dst : string }
      (** [eid] is in view [vid]: the answer to [dst]'s probe [nonce] *)
  | Status_req of { group : string; vid : string; nonce : string; eid : string; dst : string }
      (** member [eid] of view [vid] asks member [dst] of that view for its status (what its
          application reports: [consort status --group NAME --all]) *)
  | Status_ans of {
      group : string;
      vid : string;
      nonce : string;
      eid : string;
      dst : string;
      status : string;  (** JSON, at most {!max_status} bytes *)
    }  (** [eid]'s status: the answer to [dst]'s request [nonce] *)

val max_status : int
(** The most bytes of a status a [Status_ans] carries (32 KiB). *)

val magic : int
val codec : t Consort.Codec.t
val group : t -> string

val dst : t -> string
(** The member a message is sent to, which a receiver checks is itself (a message captured on its
    way to one member and replayed to another is dropped there); [""] for discovery messages and
    Installs, which go to every member alike. *)

val context : t -> string
(** What a view key is bound to: the message's bytes, for an [Install] those less its [keys] (a
    wrapped key opens only in the Install its maker sent it in). *)

val installer : string -> string
(** [installer vid]: the member that named view [vid] (["LTIME:EID"]). *)

val accept_install :
  maker:string option ->
  me:string ->
  view:Consort.View.t ->
  addr:(int -> string) ->
  reported:(int * int list * int list * string) option ->
  src:string ->
  vid:string ->
  members:member list ->
  preds:string list ->
  (unit, string) result
(** Whether a member in [view] (whose rank [r] listens at [addr r]) that last reported to the flush
    round [reported] (its coordinator's rank, the ranks it excludes and lets go, and the id of the
    member whose view it merges into, or [""]) takes the view [vid] of [members], sent from [src]:
    only if it follows [view] ([preds]), keeps exactly the members of [view] that the round left,
    and comes from the round's coordinator, or, in a round for a merge, from the member that named
    the view and is in it (the coordinator merged into, or the one it passed the request on to), or
    from [maker], the address of the coordinator merged into that this member asked, if that
    coordinator named the view (leaving, it is not in it). [Error] says why not, in one sentence. *)

(** What a member does with a discovery message from another partition. *)
type gossip_action =
  | Merge_into  (** flush this view and ask that coordinator to take it in *)
  | Merge_later  (** the same, once the view change under way is over *)
  | Answer  (** tell the other partition who coordinates here, at once *)
  | Nothing

val on_gossip :
  me:string ->
  my_coord:string ->
  same_view:bool ->
  in_my_view:bool ->
  coordinator:bool ->
  busy:bool ->
  leaving:bool ->
  their_coord:string ->
  gossip_action
(** [on_gossip ~me ~my_coord ~same_view ~in_my_view ~coordinator ~busy ~leaving ~their_coord]: the
    decision of member [me] (whose view is coordinated by [my_coord]; [coordinator] if that is [me];
    [busy] while it changes views) on hearing of a view coordinated by [their_coord]. Partitions
    merge into the one whose coordinator has the least id, so there is one answer whoever hears of
    whom first. *)
