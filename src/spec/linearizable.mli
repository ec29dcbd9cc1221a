(** Linearizability of key-value histories, as a checker.

    A history is a set of operations on a map from keys to values, each with the time it was invoked
    and the time its response came back, or no response at all (its outcome is {e unknown}: it may
    or may not have taken effect, at any time after its invocation). The history is linearizable if
    every operation can be given one instant between its invocation and its response (any instant
    after its invocation, or none, for an unknown one) such that the responses are those of a single
    map applying the operations one after the other at those instants (Herlihy and Wing).

    The search is Wing and Gong's, with Lowe's memoisation as in Porcupine: operations on different
    keys are independent, so each key's operations are checked on their own; the search remembers
    every (set of operations linearized, value of the key) it has tried. *)

type op =
  | Get
  | Put of string
  | Del
  | Cas of { expect : string; set : string }  (** put [set] if the value is [expect] *)

type response =
  | Ok  (** a put done, a delete of a present key, a cas done *)
  | Value of string  (** a get of a present key *)
  | Not_found  (** a get or delete of an absent key *)
  | Cas_failed  (** the key was absent or held another value *)

type event = {
  client : int;
  key : string;
  op : op;
  call : int;  (** invocation time *)
  return : int option;  (** response time; [None]: the outcome is unknown *)
  response : response option;  (** [None] exactly when [return] is [None] *)
}

val pp_op : op Fmt.t
val pp_response : response Fmt.t
val pp_event : event Fmt.t

val step : string option -> op -> response * string option
(** [step v op] is the response of [op] on a key holding [v], and the key's new value: the
    sequential specification. *)

type violation = {
  key : string;
  ops : int;  (** operations on that key *)
  linearized : int;  (** the most the search could order *)
  stuck_at : event option;  (** an operation the longest order could not take next *)
}

val pp_violation : violation Fmt.t

type result =
  | Linearizable
  | Not_linearizable of violation
  | Gave_up of { key : string; steps : int }  (** the search for this key took over [max_steps] *)

val pp_result : result Fmt.t

val check : ?max_steps:int -> event list -> result
(** [check events] decides whether the history is linearizable. Events whose [return] is before
    their [call], or that have a [response] without a [return] or the reverse, make it not
    linearizable ([stuck_at] names the first). [max_steps] (default 50 million) bounds the search
    steps for each key. *)
