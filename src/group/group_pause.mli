(** Pauses of this process, for the group runtime ({!Group.Make}): when its periodic work runs later
    than [group.merge_timeout] after its last run, the process was paused (stopped, swapped out, a
    debugger), and for two merge timeouts after it ran again what it learns may be that its view
    went on without it (a flush that excluded it, another member's word); then casts are refused (as
    not primary) until it is in a view with others again, for two merge timeouts at most. *)

type t

val create : merge_timeout:Consort.Time.t -> t

val tick : t -> now:Consort.Time.t -> unit
(** The periodic work runs now: a pause if its last run is more than a merge timeout ago. *)

val recently_resumed : t -> now:Consort.Time.t -> bool
(** Within two merge timeouts of running again after a pause. *)

val dead_view : t -> now:Consort.Time.t -> string -> unit
(** This member learnt now that its view went on without it, as the sentence says. *)

val installed : t -> size:int -> unit
(** A view of [size] members is installed: with others, casts are taken again. *)

val refusal : t -> now:Consort.Time.t -> string option
(** Why casts are refused now: a view that went on without this member, learnt at most two merge
    timeouts ago. *)
