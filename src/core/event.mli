(** Events that flow through a stack.

    Message events carry a {!Msg.t} and the layer's typed header (see {!Layer.S}); control events
    carry none. Control events are extensible variants so that each family of layers adds its own; a
    layer passes on any control event it does not know. *)

(** Where a message goes, on the way down. *)
type dst =
  | Cast  (** to every other member of the view *)
  | Send of int  (** to the member of this rank *)

(** Where a message came from, on the way up. *)
type src =
  | Cast_from of int  (** a cast by the member of this rank *)
  | Send_from of int  (** a point-to-point message from this rank *)
  | Raw  (** a datagram from the transport, not yet decoded by Bottom *)

type dn_ctl = ..
(** Control events going down. *)

type up_ctl = ..
(** Control events going up. *)

type up_ctl +=
  | Lost_message of int  (** a reliable layer gave up on messages from this rank *)
  | Blocked of bool
        (** flow control: [true] when the application should stop sending, [false] when it may send
            again *)

type dn_ctl += Stop  (** the stack is being torn down *)

(** {1 The flush barrier}

    A view change first drains the stack, as Ensemble's [EBlock] / [EBlockOk]: the membership layer
    sends {!Block_req} down; each layer sends on, or accounts for, what it holds (queued casts, a
    window of sends) and passes the request on; the bottom of the stack answers with {!Block_ok},
    which comes back up through every layer. A layer may add its own part to the member's flush
    report as it passes [Block_ok] up (a total order layer adds its ordered prefix); the membership
    layer sends the report to the coordinator, which gathers every member's, and each member hands
    them all down with {!Flush_parts} before it delivers the rest of the view, so that every member
    decides from the same reports. A layer that must wait before it can answer (for an
    acknowledgement, say) keeps the [Block_ok] until it can. *)

type part = string * string
(** A layer's part of a flush report: its name, and bytes it encodes and decodes itself. *)

type up_ctl +=
  | Block_ok of { round : int; parts : part list }
        (** going up: everything below has drained for the request [round] *)

type dn_ctl +=
  | Block_req of { round : int }
        (** going down: a view change flushes; drain, then let [Block_ok] through (the stack's
            bottom turns this into [Block_ok]) *)
  | Flush_parts of { parts : (int * part list) list }
        (** going down: every remaining member's parts, by rank, the same at every member *)

val pp_dst : dst Fmt.t
val pp_src : src Fmt.t
val pp_up_ctl : up_ctl Fmt.t
val pp_dn_ctl : dn_ctl Fmt.t
val register_up_ctl_printer : (up_ctl -> (Format.formatter -> unit) option) -> unit
val register_dn_ctl_printer : (dn_ctl -> (Format.formatter -> unit) option) -> unit
