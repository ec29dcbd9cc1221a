(** The current view of the group runtime ({!Group.Make}) as its membership kernel ({!Membership})
    and the driver share it: the view, its members' addresses and public keys by rank, who is
    suspected in it and why, the flush round this member last reported to, and the view as the
    application is told it ({!type-info}). The kernel holds the current one
    ({!Membership.Make.current}); the driver reads it through these accessors. *)

type info = {
  vid : string;
  ltime : int;
  members : string array;
  rank : int;
  coordinator : string;
  joined : string list;
  left : string list;
  why : (string * string) list;
}
(** {!Group.view_info}. *)

val pp_info : info Fmt.t

type round = int * int list * int list * string
(** A flush round this member reported to: its coordinator's rank, the ranks it excludes and those
    it lets go, and the coordinator it merges into (as {!Side.accept_install} reads it). *)

type 'a t
(** A view whose members' addresses are of type ['a]. *)

val create :
  group:string ->
  vid:string ->
  ltime:int ->
  members:Side.member list ->
  rank:int ->
  addrs:'a array ->
  previous:'a t option ->
  'a t
(** View [vid] of [members], this member at [rank], at [addrs] (by rank), coming after [previous]
    (if any): its {!type-info} says who joined and who left since [previous], and why
    (["excluded: "] and the suspicion, ["left"], or ["not in the next view"]). No one is suspected
    in it yet. *)

val view : _ t -> Consort.View.t
val info : _ t -> info
val id : _ t -> string
val members : _ t -> string array
val rank : _ t -> int
val size : _ t -> int
val addrs : 'a t -> 'a array
val addr : 'a t -> int -> 'a
val pubs : _ t -> string array

val rank_of : _ t -> string -> int option
(** The rank of a member, by id. *)

val coordinator_rank : _ t -> int
(** The least rank not suspected (this member's if all others are). *)

val is_coordinator : _ t -> bool

val suspect : _ t -> int -> string -> bool
(** [suspect c r why]: rank [r] is suspected, for [why]; false if it already was or is no rank. *)

val reported : _ t -> round option

val report : _ t -> round -> unit
(** This member reported to this flush round. *)

val gone : _ t -> int -> bool
(** The rank is suspected, or excluded or let go by the round this member reported to. *)
