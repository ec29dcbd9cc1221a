(** Ordering properties over member logs ({!Log}): total order, causal order and safe delivery,
    checked beside virtual synchrony ({!Vsync}), which they assume (run both). Input as for
    {!Vsync.check}: one log per member incarnation, in the order of its events. Only casts count
    here; a cast is named by its sender and sequence number ([FROM#SEQ]).

    A member's deliveries in a view are those its log places in it; those before its [block] line in
    the view are its deliveries {e before the flush}. A member {e goes on} after a view if its log
    has a later view, or a live line in it (otherwise it crashed there, or left).

    - {b Total order}, [check_total]: members that go on from a view into the same next view deliver
      the same sequence of casts in it; one order of the view's casts fits what every member of the
      view delivered before its flush; and for each group of members that go on together, one order
      fits their sequence and what the members that crashed in the view delivered before their
      flush. (Members that end a view apart, in a partition, may each order the casts that had no
      place at the flush their own way, as Ensemble's sequencer does: no protocol that delivers, in
      the view, the casts of the members that go on can avoid that.)
    - {b Causal order}, [check_causal]: a member delivers a cast in a view only after every cast of
      that view that the cast's sender had delivered or cast before casting it, transitively.
    - {b Safe delivery}, [check_safe]: a cast a member delivers in a view before its flush is
      delivered in that view by every member of the view that goes on (no member delivers, in the
      regular part of the view, a cast that some member of the view never gets, unless that member
      crashed or left). *)

type cast = { from : string; seq : int }

type violation =
  | Not_same_sequence of {
      view : string;
      next : string;
      a : string;
      b : string;
      index : int;  (** from 0: where the sequences first differ *)
      at_a : cast option;
      at_b : cast option;
    }
  | No_total_order of { view : string; cycle : cast list; members : string list }
      (** the deliveries order these casts in a cycle *)
  | Not_causal of { member : string; line : int; view : string; cast : cast; before : cast }
      (** [cast] delivered at [line] before [before], which precedes it causally *)
  | Not_safe of { member : string; line : int; view : string; cast : cast; absent : string }
      (** [cast] delivered before the flush, never delivered by [absent], which went on *)

val pp_violation : violation Fmt.t
(** One line. *)

val check_total : (string * Log.event list) list -> (unit, violation list) result
val check_causal : (string * Log.event list) list -> (unit, violation list) result
val check_safe : (string * Log.event list) list -> (unit, violation list) result
