(** Pt2ptw: window flow control for point-to-point messages (Ensemble's [Pt2ptw]).

    A message counts for its length plus {!overhead} bytes. A sender keeps at most {!Param.window}
    bytes of messages to each peer that the peer's application has not yet consumed; a message that
    does not fit waits in a queue for that peer, in order, and goes as soon as acknowledgements make
    room. A message larger than the whole window goes alone, once nothing else is outstanding.

    A receiver counts the bytes it delivers to the layer above, and acknowledges them with a
    cumulative total, batched: as soon as a quarter of its own window has been delivered since its
    last acknowledgement, otherwise {!Param.ack_delay} after the first delivery not acknowledged. A
    sender whose window is full while messages wait asks for an acknowledgement at once: on the last
    message that fits, or with an {!Ask} of its own if that message went before anything waited. A
    steady stream thus moves a window per round trip.

    When the queue for some peer grows beyond {!Param.queue} bytes, the layer tells the application
    [Blocked true]; once every queue is back to half that limit, [Blocked false]. Messages sent
    while blocked are still queued, not lost: the application is expected to wait. [Blocked] events
    from the layers below are merged with this layer's own state, so the application sees one [true]
    / [false] alternation for the whole stack beneath.

    Casts and sends to this member itself pass through with {!No_hdr}. On [Stop] every queued
    message is released.

    Requires {!Consort.Contract.reliable_send}; provides {!contract}. *)

type t

(** The header. *)
type header =
  | No_hdr  (** a cast or a send to oneself, outside flow control *)
  | Data of { ask : bool }
      (** a flow-controlled point-to-point message; [ask]: acknowledge as soon as it is consumed *)
  | Ack of { consumed : int }
      (** the sender's application has consumed this many bytes of the receiver's messages to it,
          since the stack began *)
  | Ask  (** acknowledge what you have consumed, at once *)

val overhead : int
(** [overhead] is what each message counts for beyond its length (64 bytes), so that empty messages
    are bounded too. *)

(** Names of the registered tunables. *)
module Param : sig
  val window : string
  (** ["pt2ptw.window"]: bytes sent to one peer and not yet acknowledged (default 256 KiB). *)

  val queue : string
  (** ["pt2ptw.queue"]: bytes queued for one peer beyond which the application is told it is blocked
      (default 1 MiB). *)

  val ack_delay : string
  (** ["pt2ptw.ack_delay"]: how long a receiver waits to batch an acknowledgement (default 2 ms). *)
end

val contract : Consort.Contract.t
(** ["send-flow"]: a fast sender of point-to-point messages cannot exhaust a slow receiver's memory.
*)

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 no header, 1 data, 2 data asking for an acknowledgement, 3 ack, 4 ask),
    then for an ack the consumed total as a varint. *)

val pp_header : header Fmt.t
val provides : Consort.Contract.t list
val requires : Consort.Contract.t list
val create : Consort.Layer.ctx -> header Consort.Layer.out -> t
val up : t -> Consort.Event.src -> header -> Consort.Msg.t -> unit
val up_ctl : t -> Consort.Event.up_ctl -> unit
val dn : t -> Consort.Event.dst -> Consort.Msg.t -> unit
val dn_ctl : t -> Consort.Event.dn_ctl -> unit
val timer : t -> Consort.Time.t -> unit

val counters : t -> (string * int) list
(** ["acks_sent"], ["blocked"] (times the application was told to stop), ["malformed"] (headers that
    do not fit their source), ["bad_ack"] (acknowledgements of more than was sent), ["bad_dst"], and
    the gauges ["outstanding"] (bytes sent and not acknowledged), ["queued"] (bytes waiting) and
    ["queued_messages"], summed over peers. *)

val layer : Consort.Layer.t
(** [layer] is Pt2ptw as a first-class layer. *)
