(** Extended virtual synchrony (Transis, Totem, Spread) over member logs ({!Log}), beside {!Vsync},
    which it assumes (run both). Input as for {!Vsync.check}: one log per member incarnation, in the
    order of its events.

    A member that goes from regular view [V] into regular view [W] logs a [trans] line (its
    transitional view) between them. The deliveries of [V] before that line are its {e regular part}
    of [V]; those after it, before [W], its {e transitional part}. A member {e goes on} after [V] if
    its log has a later view or a [live] line in [V] (otherwise it crashed there, or left). A cast
    is named by its sender and sequence number ([FROM#SEQ]).

    - {b Transitional views}: every member that installs [V] then [W] logs exactly one transitional
      view between them, naming [V] and [W]; its members are the members of [V] that are in [W] (the
      intersection of the two agreed memberships, in [V]'s rank order), so every member that
      installs the same two consecutive regular views hears the same transitional view; it is
      followed only by deliveries in [V], then by [W]'s view line (or the end of the log). A
      transitional view without a next view (a member that leaves or stops) holds the member alone
      and is followed by no view.
    - {b Safe delivery in the regular part}: a cast a member delivers in the regular part of [V] is
      delivered in [V] (in either part) by every member of [V] that goes on, whatever partition it
      went on in.
    - {b Safe delivery in the transitional part}: a cast a member delivers in the transitional part
      of [V] is delivered in [V] by every member of its transitional view that goes on. *)

type cast = { from : string; seq : int }

type violation =
  | No_transitional of { member : string; line : int; view : string; next : string }
      (** [member] installs [next] (at [line]) after [view] without a transitional view *)
  | Misplaced of { member : string; line : int; what : string }
      (** a transitional view where it cannot be, or an event after one that is not a delivery of
          the ending view; [what] says which *)
  | Wrong_members of {
      member : string;
      line : int;
      view : string;
      next : string;
      members : string list;
      expected : string list;
    }  (** the transitional view is not the intersection of [view] and [next] *)
  | Not_safe of { member : string; line : int; view : string; cast : cast; absent : string }
      (** [cast] delivered in the regular part of [view], never in [view] by [absent], a member of
          [view] that went on *)
  | Not_safe_transitional of {
      member : string;
      line : int;
      view : string;
      cast : cast;
      absent : string;
    }
      (** [cast] delivered in the transitional part of [view], never in [view] by [absent], of the
          same transitional view, which went on *)

val pp_violation : violation Fmt.t
(** One line. *)

val check : (string * Log.event list) list -> (unit, violation list) result
