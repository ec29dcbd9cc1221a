(** Virtual synchrony, as a checker over the logs of all members of a run.

    The input is one {!Log} per member incarnation, each in the order its events happened at that
    member; there is no global order. An event happens in the member's current view, the last one it
    installed. A message is identified by its sender and its digest (the workload makes payloads
    unique). Positions ([line]) count a member's events from 1, so they are the line numbers of its
    log file.

    View ids are opaque strings of the form ["LTIME:COORD"]: LTIME is a decimal logical time, COORD
    any non-empty string (the coordinator that made the view). Views installed by one member must
    have strictly increasing LTIMEs.

    A member {e stays} from view [V] into [W] if it installs [V] then [W]. It is
    {e alive at the end} if its log has no exit and it was not excluded: a member is excluded when
    another member that installed its last view later installed a view without it (it crashed, or
    was taken for crashed). Members in views whose log is missing cannot be checked; only deliveries
    from them are reported.

    The specification:
    - views: members installing a view agree on its membership (same list, same order), each is in
      every view it installs, installs each view once, in increasing LTIME order; every other event
      happens in the view its line names, after a first view and before the exit;
    - virtual synchrony: members that stay from [V] into [W] deliver the same set of casts in [V];
    - same-view delivery: a message is delivered in the view its sender sent it in, by a member of
      that view, as the kind it was sent;
    - FIFO per sender: within a view, a member delivers the casts of a sender in the order they were
      cast, and its sends to it in the order they were sent (the two kinds are not ordered with each
      other);
    - no duplication, no creation: a member delivers a message at most once, and only one its
      sender's log records as sent (its own, after recording it), never one the API refused; a
      sender uses a sequence number once;
    - no gaps: a member that delivers a message of a sender in a view delivers there every message
      of that sender of the same kind sent before it in that view and addressed to it;
    - block: a member sends nothing (no [cast] or [send] line) between a [block] and its next view;
    - liveness: a cast of a member that stays from [V] into [W] is delivered in [V] by every member
      that stays from [V] into [W], and a send to one of them as well; with [~quiescent:true], also
      in each final view: members alive at the end in the same last view deliver each other's
      messages of that view;
    - merge: with [~require_merge:true], all members alive at the end have the same last view;
    - no wedge: members with a [live] line do not end blocked, end in one view, and account for
      every cast the API accepted from them: each was sent and delivered by the member itself, or
      reported lost. Messages reported lost are exempt from the liveness rules above. *)

type violation =
  | Duplicate_log of { member : string }
      (** two logs were given for [member]; the first is checked *)
  | Foreign_event of { member : string; line : int; me : string }
      (** the log of [member] holds an event of [me] *)
  | No_view of { member : string; line : int }
      (** a message event before the member installed any view; ignored *)
  | After_exit of { member : string; line : int }  (** an event after the member's exit; ignored *)
  | After_live of { member : string; line : int }
      (** an event after the member's [live] line; ignored *)
  | Not_current_view of { member : string; line : int; view : string; current : string }
      (** the event names [view], but the member's current view is [current] *)
  | Bad_view_id of { member : string; line : int; view : string }
      (** the view id is not of the form LTIME:COORD *)
  | Reinstalled of { member : string; line : int; view : string; first : int }
      (** the member installs [view] again; [first] is the first install's line *)
  | Not_increasing of { member : string; line : int; view : string; previous : string }
      (** the view's LTIME is not above that of the member's [previous] view *)
  | Not_in_own_view of { member : string; line : int; view : string; members : string list }
      (** the member installs a view it is not in *)
  | Repeated_member of { member : string; line : int; view : string; id : string }
      (** [id] appears twice in the view's membership *)
  | Membership_disagrees of {
      member : string;
      line : int;
      view : string;
      members : string list;
      other : string;
      other_members : string list;
    }  (** [member] and [other] (the view's first installer) disagree on [view] *)
  | Duplicate_id of { member : string; line : int; seq : int; first : int }
      (** the member used sequence number [seq] for a second cast, send or refusal ([first] is the
          line of the first) *)
  | Sent_while_blocked of { member : string; line : int; view : string; seq : int; block : int }
      (** message [seq] entered the stack after the member's block (at line [block]) and before its
          next view *)
  | Sender_log_missing of { from : string; member : string; line : int; seq : int; count : int }
      (** [count] deliveries of messages of [from], whose log was not given; the first is at
          [member], [line] *)
  | Not_sent of { member : string; line : int; view : string; from : string; seq : int }
      (** delivered a message its sender's log does not record *)
  | Delivered_refused of { member : string; line : int; from : string; seq : int; refused : int }
      (** delivered a message the API refused (at line [refused] of [from]) *)
  | Delivered_before_sent of { member : string; line : int; seq : int; sent : int }
      (** delivered its own message before sending it (at line [sent]) *)
  | Wrong_kind of { member : string; line : int; from : string; seq : int; kind : Log.kind }
      (** delivered as [kind] a message sent as the other kind *)
  | Misaddressed of { member : string; line : int; from : string; seq : int; dst : string }
      (** delivered a send addressed to [dst] *)
  | Wrong_length of { member : string; line : int; from : string; seq : int; len : int; sent : int }
      (** delivered with length [len] a message sent with length [sent] *)
  | Wrong_digest of {
      member : string;
      line : int;
      from : string;
      seq : int;
      digest : string;
      sent : string;
    }  (** delivered with [digest] a message sent with digest [sent] *)
  | Outsider of { member : string; line : int; view : string; from : string; seq : int }
      (** delivered in [view] a message from a member not in [view] *)
  | Wrong_view of {
      member : string;
      line : int;
      view : string;
      from : string;
      seq : int;
      sent : string;
    }  (** delivered in [view] a message sent in view [sent] *)
  | Duplicate of { member : string; line : int; from : string; seq : int; first : int }
      (** delivered again; [first] is the line of the first delivery *)
  | Out_of_order of {
      member : string;
      line : int;
      view : string;
      from : string;
      seq : int;
      after : int;
    }  (** delivered after message [after] of the same sender and kind, sent later *)
  | Gap of {
      member : string;
      line : int;
      view : string;
      from : string;
      kind : Log.kind;
      seq : int;
      missing : int;
    }
      (** delivered (at [line], in [view]) message [seq] of [from], but never there message
          [missing] of the same sender and kind, sent before it in that view and addressed to it *)
  | Not_synchronous of {
      view : string;
      next : string;
      from : string;
      seq : int;
      delivered : string list;
      missing : string list;
    }
      (** of the members staying from [view] into [next], [delivered] delivered the cast in [view]
          and [missing] did not *)
  | Not_delivered of {
      view : string;
      next : string option;
      from : string;
      seq : int;
      missing : string list;
    }
      (** a message of [from], which stays from [view] into [next] (or, with [next = None], is alive
          at the end in its last view [view]), was neither delivered in [view] by [missing], which
          stay with it, nor reported lost *)
  | Not_merged of { finals : (string * string list) list }
      (** members alive at the end are in several last views: each view with its members alive at
          the end *)
  | Ended_blocked of { member : string; view : string; block : int }
      (** a live member's log ends blocked: a block at line [block] in its last view [view] *)
  | Casts_unaccounted of { member : string; accepted : int; accounted : int }
      (** the [live] line of [member] says the API accepted [accepted] casts, but [accounted] were
          sent (a [cast] line) or reported lost without being sent *)
  | Wedged of { member : string; line : int; view : string; seq : int }
      (** cast [seq] of a live member, sent at [line] in [view], neither delivered by the member
          itself nor reported lost *)
  | Live_apart of { finals : (string * string list) list }
      (** members with a [live] line end in several views: each view with its live members *)

val pp_violation : violation Fmt.t
(** [pp_violation] prints a violation in one line, naming members, views and digests. *)

val check :
  ?require_merge:bool ->
  ?quiescent:bool ->
  ?crashed:string list ->
  (string * Log.event list) list ->
  (unit, violation list) result
(** [check logs] checks the logs of a run, each paired with its member's id. [quiescent] (default
    [false]) says the run ended with all messages delivered; [require_merge] (default [false]) that
    partitions merged. [crashed] names members known to have been killed (a killed member's log just
    stops, and if no one installed a view without it, nothing in the logs tells it from a live one):
    they are not expected to be alive at the end. *)

type summary = {
  logs : int;  (** files read *)
  members : int;  (** member incarnations with a non-empty log *)
  views : int;  (** distinct views installed *)
  installs : int;  (** view installations, over all members *)
  casts : int;  (** messages cast *)
  sends : int;  (** messages sent point to point *)
  deliveries : int;  (** deliveries, over all members *)
  blocks : int;  (** blocks, over all members *)
  refused : int;  (** casts and sends the API refused *)
  lost : int;  (** messages reported lost *)
  exits : int;  (** members that left *)
}

val summarize : (string * Log.event list) list -> summary
(** [summarize logs] counts the events of [logs] (with [logs] the number of logs). *)

val pp_summary : summary Fmt.t
(** [pp_summary] prints a summary in one line. *)

(** What {!check_files} finds wrong. *)
type file_problem = Unreadable of Log.file_error | Violation of violation

val pp_file_problem : file_problem Fmt.t
(** [pp_file_problem] prints a problem in one line. *)

val check_files :
  ?require_merge:bool -> ?quiescent:bool -> string list -> (summary, file_problem list) result
(** [check_files paths] reads the member logs at [paths] (a member's id is the [me] of its log's
    first event; empty files count as logs of no member) and {!check}s them: the summary, or every
    read error, or every violation. *)
