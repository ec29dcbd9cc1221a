(** Primary components with quorum (property [Primary]) over member logs ({!Log}), beside {!Vsync},
    which it assumes (run both). Input as for {!Vsync.check}, with each member's [quorum] lines;
    [votes id] is the configured votes of member [id] (by its address), [needed] the quorum.

    View ids are ["LTIME:COORD"] (as {!Vsync} checks). Before a member's [block] in a view are its
    deliveries {e before the flush}.

    - {b Decision}: every member that goes on from a view (a later view or a [live] line) logs one
      [quorum] line in it, with the votes of the view's members; it says primary only if they reach
      [needed], and only if every member of the view (whose log is given) installed it. A view is
      primary if a member says so (a member may end it before it heard every member there, and say
      it was not).
    - {b Writes only in the primary}: a member casts (a [cast] line) in a view only after saying it
      is primary.
    - {b At most one primary at any time}: any two primary views share a member that installed both
      (so one came first), at distinct LTIMEs: the primary views form one chain, never two at once.
    - {b One sequence}: in the order of their LTIMEs, each primary view after the first has a member
      that installed the one before it and delivered there every cast that any member of it
      delivered before its flush (what the primary served is carried into the next one; with safe
      delivery, [Agree] or [Evs]).
    - {b Rejoin}: with [~live_quorum:true], members alive at the end (a [live] line) end in a
      primary view.

    With [~dynamic:true] (dynamic votes, [primary.mode=dynamic]) the quorum follows the last
    primary, so the votes of a decision are not checked against [needed], and two primaries far
    apart in the chain may share no member: instead, each primary view shares a member that
    installed both with the primary view just before it in LTIME order. Two primaries at once in
    disjoint components fail this wherever their views meet in that order. *)

type violation =
  | No_decision of { member : string; line : int; view : string }
      (** [member] installed [view] (at [line]) and logged no decision for it *)
  | Misplaced of { member : string; line : int; view : string }
      (** a [quorum] line that does not follow its view's [view] line *)
  | Wrong_decision of {
      member : string;
      line : int;
      view : string;
      primary : bool;
      votes : int;
      expected_votes : int;
    }  (** [member] logged [primary] with [votes], where the view's members have [expected_votes] *)
  | Cast_outside of { member : string; line : int; view : string; seq : int }
      (** cast [seq] entered the stack in [view], which is not primary *)
  | Concurrent of { a : string; b : string }
      (** primary views [a] and [b] share no member that installed both *)
  | Same_time of { a : string; b : string }  (** primary views with the same LTIME *)
  | Not_carried of { view : string; next : string; from : string; seq : int }
      (** no member of primary view [next] installed [view], the primary before it, and delivered
          there cast [from#seq], which a member of [view] delivered before its flush *)
  | Not_rejoined of { member : string; view : string }
      (** [member], alive at the end, ends in [view], which is not primary *)
  | Unconfirmed of { member : string; line : int; view : string; absent : string }
      (** [member] said [view] is primary, but [absent], a member of it whose log is given, never
          installed it *)

val pp_violation : violation Fmt.t
(** One line. *)

val check :
  ?live_quorum:bool ->
  ?dynamic:bool ->
  votes:(string -> int) ->
  needed:int ->
  (string * Log.event list) list ->
  (unit, violation list) result
