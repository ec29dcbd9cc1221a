(** Reliable FIFO delivery, as a checker over traces.

    A trace is the sequence of application-level events of a run among the endpoints [0 .. n-1], in
    the order they happened: each message is recorded as {!Sent} before any of its deliveries. A
    cast is addressed to every endpoint, its sender included; a send only to its destination.

    An endpoint is correct if the trace never says it {!Crashed}. The specification, for a trace
    that ran to quiescence:
    - every message of a correct sender is delivered exactly once to each correct endpoint it is
      addressed to (otherwise {!Missing});
    - for each pair (sender, receiver), messages are delivered in the order of the sender's {!Sent}
      events (otherwise {!Out_of_order});
    - nothing is delivered that was not sent ({!Not_sent}), to an endpoint it was not addressed to
      ({!Misaddressed}), as the wrong kind ({!Wrong_kind}), or twice ({!Duplicate}).

    Messages of crashed senders or to crashed receivers may be missing, even with later ones
    delivered, but the other rules hold for them at all times, before and after the crash.

    The checker is incremental: {!add} checks each event as it comes in constant time (amortised),
    {!finish} adds what is missing in time proportional to the number of expected deliveries. *)

type kind =
  | Cast  (** to every endpoint, sender included *)
  | Send of int  (** to this endpoint only *)

type event =
  | Sent of { sender : int; kind : kind; seq : int }
      (** [sender] sent its message [seq]; [seq]s are unique per sender but need not be consecutive
      *)
  | Delivered of { receiver : int; sender : int; cast : bool; seq : int }
      (** [receiver] delivered message [seq] of [sender], as a cast or not *)
  | Crashed of int  (** the endpoint is not correct from now on *)

(** What is wrong, with the position ([index], from 0) of the offending event in the trace. *)
type violation =
  | Bad_endpoint of { index : int; endpoint : int }
      (** the event names an endpoint outside [0 .. n-1]; it is ignored *)
  | Resent of { index : int; sender : int; seq : int; first : int }
      (** a second {!Sent} with the same [seq]; [first] is the first one's index *)
  | Not_sent of { index : int; receiver : int; sender : int; seq : int }
      (** delivered before (or without) being sent *)
  | Wrong_kind of { index : int; receiver : int; sender : int; seq : int; sent : kind }
      (** delivered as a cast when it was a send, or the reverse *)
  | Misaddressed of { index : int; receiver : int; sender : int; seq : int; dst : int }
      (** a send to [dst] delivered to another endpoint *)
  | Duplicate of { index : int; receiver : int; sender : int; seq : int; first : int }
      (** delivered again; [first] is the index of the first delivery *)
  | Out_of_order of { index : int; receiver : int; sender : int; seq : int; after : int }
      (** delivered after message [after] of the same sender, sent later *)
  | Missing of { receiver : int; sender : int; seq : int }
      (** never delivered, although both ends stayed correct *)

val pp_kind : kind Fmt.t
val pp_event : event Fmt.t
val pp_violation : violation Fmt.t

type t
(** An incremental checker. *)

val create : n:int -> t
(** [create ~n] is a checker for endpoints [0 .. n-1] with no events yet.
    @raise Invalid_argument if [n < 1]. *)

val add : t -> event -> unit
(** [add t e] checks the next event of the trace. *)

val events : t -> int
(** [events t] is the number of events added so far. *)

val violations : t -> violation list
(** [violations t] is the violations found so far by {!add} (every kind but {!Missing}), in trace
    order. *)

val finish : t -> violation list
(** [finish t] is {!violations} followed by every {!Missing} delivery, taking the trace so far as
    complete. [t] may still be added to. *)

val check : n:int -> event list -> (unit, violation list) result
(** [check ~n trace] checks a whole trace that ran to quiescence. *)
