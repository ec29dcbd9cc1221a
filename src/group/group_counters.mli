(** What the group runtime ({!Group.Make}) counts, and the counters of the stacks of the views
    before the current one, summed. *)

type t = {
  mutable views : int;  (** views installed *)
  mutable sent : int;  (** messages handed to a view's stack *)
  mutable delivered : int;  (** messages delivered to the application *)
  mutable copies : int;  (** deliveries whose bytes were copied on the way to the application *)
  mutable copied_bytes : int;
  mutable dropped_sends : int;  (** sends whose destination was not in the next view *)
  mutable send_errors : int;
  mutable garbage : int;  (** side messages refused *)
  mutable side_misdirected : int;  (** side messages for another member *)
  mutable past : (string * (string * int) list) list;
      (** Bottom's counters in the stacks of earlier views, summed *)
}

val create : unit -> t

val add :
  (string * (string * int) list) list ->
  (string * (string * int) list) list ->
  (string * (string * int) list) list
(** Counters summed layer by layer, name by name, in first-seen order. *)

val stack_stopped : t -> (string * (string * int) list) list -> unit
(** A view's stack stopped with these counters: Bottom's (drops by reason) are added to [past];
    other layers' include gauges of the view (a window, a round), which do not add up. *)

val with_past : t -> (string * (string * int) list) list -> (string * (string * int) list) list
(** The current stack's counters with [past]: Bottom's summed with it, or, without a current stack,
    [past] after the rest. *)

val of_stack : Consort.Stack.t -> (string * (string * int) list) list
(** A stack's counters, then its fused path's ([fused]: [on] and each counter, spaces in names as
    underscores). *)

val report :
  t ->
  garbage:int ->
  refused:int ->
  no_view_key:int ->
  migration:(string * int) list ->
  bundle:(string * int) list ->
  (string * (string * int) list) list ->
  (string * (string * int) list) list
(** The runtime's counters as [Group.counters] reports them: ["group"] (views, side messages refused
    ([garbage], the kernel's included) and misdirected, [refused] by admission, dropped sends, send
    errors, Installs without a key, [migration]'s, sent, delivered), ["bundle"], then the current
    stack's [cur] with the earlier views' ({!with_past}). *)
