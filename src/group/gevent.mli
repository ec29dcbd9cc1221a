(** Control events of the group communication layers.

    They extend {!Consort.Event.up_ctl} and {!Consort.Event.dn_ctl}; layers pass on any control
    event they do not handle. *)

(** Why a member suspects another. *)
type kind =
  | Requested  (** an application (an operator) asked for it: adopted by every member *)
  | Silent  (** the failure detector heard nothing from it: judged by each member *)
  | Unresponsive
      (** a coordinator waited too long for its flush report: adopted, unless the coordinator
          accuses most of the view (then it is the suspect) *)

val pp_kind : kind Fmt.t

type Consort.Event.up_ctl +=
  | Suspect of { ranks : int list; reason : string }
        (** going up: these ranks of the current view are believed to have failed (from a failure
            detector, or shared by another member) *)
  | Flush_verdict of { coord : int; accept : bool }
        (** going up, the answer to {!Judge_flush}: whether this member can confirm every exclusion
            of that coordinator's flush round *)

type Consort.Event.dn_ctl +=
  | Suspect_request of { ranks : int list; reason : string }
        (** going down: the application or an operator asks for these ranks to be suspected by the
            whole group ({!Requested}) *)
  | Suspect_unresponsive of { ranks : int list; reason : string }
        (** going down: the coordinator suspects members that did not answer its flush round in time
            ({!Unresponsive}) *)
  | Accusation of { accuser : int; ranks : int list; reason : string; kind : kind }
        (** going down: another member says it suspects these ranks; the failure detector judges it
            against what this member hears ({!Suspect.judge}) and reports up what it adopts *)
  | Judge_flush of { coord : int; excluded : int list }
        (** going down: a flush round of [coord] excludes these ranks; the failure detector answers
            with {!Flush_verdict} at once *)
