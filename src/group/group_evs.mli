(** The extended virtual synchrony feature of the group runtime ({!Group.Make}, property [Evs]): the
    transitional view told, at each view change, to an application that joined with [~transitional],
    before the old view's last deliveries (see {!Group.transitional}). *)

type transitional = { ending : string; next : string; survivors : string array }
(** {!Group.transitional}. *)

val pp_transitional : transitional Fmt.t

type t

val create : (transitional -> unit) option -> t
(** Without a function, nothing is told. *)

val view_change : t -> ending:Consort.View.t option -> next:string -> members:string array -> unit
(** This member goes from view [ending] (if it had one) into view [next] of [members]: the members
    of [ending] that go on into [next] are told, before the stack of [ending] is stopped (what it
    still delivers at its end comes after). *)

val leave : t -> ending:Consort.View.t option -> me:string -> unit
(** This member leaves the group (or stops) in view [ending]: a transitional view of itself alone,
    with [next = ""]. *)
