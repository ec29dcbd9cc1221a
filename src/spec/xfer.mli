(** State transfer, as a checker over the application-level traces of all members of a run.

    Each member incarnation's trace lists, in the order they happened there: the views it installed,
    the casts its application applied to its state (each named by a key, and by the view it was
    delivered in, which for a cast held during a transfer is an earlier view than the current one),
    the snapshots it took and installed (the base view they are the state of, and the content of
    those installed as a set of keys), and its final state. The state is the set of the keys of the
    casts applied.

    The specification:
    - reference replay: a snapshot installed with base view [B] holds exactly the casts that the
      trace of each member that took a snapshot of [B] applied before it installed [B] (replayed
      from its deliveries and installs, not taken from any snapshot);
    - nothing before the state: a member applies no cast delivered in [B] or a later view before it
      installs a snapshot of base [B], and none delivered before [B] after it;
    - final state: each member's final state is the replay of its own trace (installs reset the
      state, casts add to it); live members that end in one view end with the same state. *)

type event =
  | View of { view : string }
  | Apply of { view : string; key : string }  (** a cast delivered in [view] applied to the state *)
  | Take of { base : string }
      (** a snapshot of the state was taken, as of the start of view [base] *)
  | Install of { base : string; keys : string list }
  | Final of { view : string; keys : string list }
      (** the state at the end of the run, in the member's last view *)

val check : (string * event list) list -> string list
(** [check traces], by member id: the violations, one sentence each. *)

val normalize : Log.event list -> Log.event list
(** A member log whose deliveries name the views they were delivered in, some written after a later
    view was installed (held during a state transfer), rewritten so that each delivery comes before
    the next view of its own: a stable sort by view. The order within a view is kept. *)
