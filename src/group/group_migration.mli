(** The migration feature of the group runtime ({!Group.Make.migrate}; the protocol's messages and
    the rule that judges a [Move] are {!Migrate}'s): this member's moves, the connections it left
    (open while a member may still know it there, closed after [group.migrate_drain]), the members
    not yet told of its latest move (told again every [group.install_retry]), the move undone when
    nobody acknowledges it within [group.migrate_timeout]; and the moves of other members this
    member accepted, which the addresses of its next views follow.

    The runtime keeps the member's connection and address and the view's stack: a function here that
    changes where this member is, or where another member is, says so to the runtime (its
    arguments), in the order the runtime did it before this module existed, so that traces are the
    same. A view is given as the runtime's {!Consort.View.t} and its members' addresses by rank. *)

open Consort

module Make (T : Transport.S) : sig
  type conn = Bundle.Make(T).connection
  type t

  val create : group:string -> me:string -> drain:Time.t -> timeout:Time.t -> retry:Time.t -> t
  (** [me]: this member's id; [drain], [timeout], [retry]: [group.migrate_drain],
      [group.migrate_timeout], [group.install_retry]. *)

  val unmoved : t -> string list
  (** The members not yet known to have heard of this member's latest move. *)

  val garbage : t -> unit
  (** Counts a migration message that did not decode. *)

  val counters : t -> (string * int) list
  (** [moves], [move_refused], [moves_back], [move_garbage]. *)

  val conn_for : t -> view:(View.t * T.address array) option -> conn:conn -> T.address -> conn
  (** The connection to answer [dst] from: the old one a member of the view that has not heard of
      the move knows this member at, while it is open; else [conn], the current one. *)

  val send_moves :
    t ->
    now:Time.t ->
    view:View.t * T.address array ->
    addr:string ->
    send:(T.address -> Migrate.t -> unit) ->
    unit
  (** Tells the latest move (to [addr]) to each member of the view not known to have heard of it. *)

  val close_old : t -> now:Time.t -> changing:bool -> unit
  (** Closes the old connections past their time or that no member needs ([changing]: a view change
      is under way, every old connection is kept until its time). *)

  val close_all : t -> unit
  (** The member leaves: every old connection is closed. *)

  val moved : t -> now:Time.t -> old:conn -> local:T.address -> members:string array option -> unit
  (** This member moved from [old] to a connection at [local] (the runtime made it the member's
      connection already); [members]: those of its view, if it has one. *)

  val go_back :
    t ->
    bad:conn ->
    switch:(conn -> T.address -> unit) ->
    members:string array option ->
    conn ->
    unit
  (** [go_back t ~bad ~switch ~members oc]: nobody acknowledged the move to [bad]: [switch oc local]
      makes [oc] (at [local]) the member's connection again, then [bad] is closed, and the members
      of the view are to be told, as of a new move. *)

  val addresses : t -> rank:int -> members:string list -> T.address array -> unit
  (** A view of [members] is installed: the address of each other member whose move this member
      accepted becomes the one the move named. *)

  val install :
    t ->
    prev_vid:string ->
    eids:string array ->
    stale:bool ->
    at_old_addr:string ->
    conn:conn ->
    unit
  (** View [eids] is installed after [prev_vid]: forget the moves of members not in it, and, if this
      member has moved, who is still to hear of its move ([stale]: the view was made with its
      address [at_old_addr] from before the move, so every member is). *)

  val tick :
    t ->
    now:Time.t ->
    go_back:(conn -> unit) ->
    send_moves:(unit -> unit) ->
    close_old:(unit -> unit) ->
    unit
  (** Periodic work: undo a move nobody acknowledged in time ([go_back oc]), tell it again, close
      old connections. *)

  val on_msg :
    t ->
    view:(View.t * T.address array) option ->
    src:T.address ->
    send:(T.address -> Migrate.t -> unit) ->
    close_old:(unit -> unit) ->
    moved:(int -> string -> unit) ->
    Migrate.t ->
    unit
  (** A migration message from [src]: a [Moved] from the member it names acknowledges this member's
      latest move; a [Move] that {!Migrate.judge} accepts is acknowledged ([send]), and
      [moved rank eid] tells the runtime that member [eid] is now at [src]. *)
end
