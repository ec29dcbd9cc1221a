(** Migration: a member moves to another address (a new port or host), keeping its identity (its
    member id) and its rank in the view ({!Group.Make.migrate}).

    The member opens a connection at the new address and tells every other member of its view with a
    [Move], sent from the new address, again every [group.install_retry] until that member answers
    [Moved]. A member that accepts a [Move] sends what its stack sends to the mover to the new
    address from then on; the reliable layers retransmit there what was lost on the way to the old
    one. Until every member has answered (or left the view), the mover keeps its old connection open
    and receives there too, and answers the side channel through it to those that have not answered,
    so that nothing in flight is lost and a view change made meanwhile reaches it. A [Moved] counts
    only from the member it names (the address the mover sends to it at) and for the mover's latest
    move; if no member answers within [group.migrate_timeout], the mover goes back to the address it
    left (kept open until then), as a new move.

    A [Move] is accepted only ({!judge}) from a member of the receiver's view, made in that view or
    the one before ([vids]: the mover's current view and the one before it), sent from the address
    it names, and not older than a move of the same member already accepted ([seq]: the mover's
    moves, counted from 1). With [Auth] the transport seals every datagram under the group's secret
    (with [Rekey], under the view's key), and refuses a replayed one: a stranger can neither make a
    [Move] nor replay one it captured. Without [Auth], as for every other datagram, nothing is
    authenticated. *)

type t =
  | Move of { group : string; vids : string list; eid : string; seq : int; addr : string }
      (** member [eid] is at [addr] from its move [seq] on, said in view [vids] (at most 2) *)
  | Moved of { group : string; mover : string; seq : int; eid : string }
      (** member [eid] sends to [mover] at the address of its move [seq] *)

val magic : int
(** [0xC6]: distinct from Bottom's ([0xC1]), the side channel's ([0xC2]), bundles' ([0xC4]) and the
    seal's ([0xC5]). *)

val codec : t Consort.Codec.t
val group : t -> string

type verdict = Accept | Refuse of string  (** one sentence: why *)

val judge :
  me:string ->
  vid:string ->
  prev_vid:string ->
  members:string array ->
  known:int ->
  src:string ->
  t ->
  verdict
(** Whether member [me], in view [vid] of [members] (after view [prev_vid], [""] if none), takes a
    [Move] received from address [src], where [known] is the latest move of that member it took (0
    if none). *)
