(** Stacks: layers composed at run time, with their contracts checked.

    Layers are given top first, as Ensemble writes them ([Top:Mnak:Pt2pt:Bottom]). The lowest layer
    receives raw datagrams from the driver (the transport provides {!Contract.net}); the highest
    delivers to the application. *)

type t
(** A stack. Its state is its own: the stacks of one process (a simulation runs dozens) share none
    of it, and one may be called from another's transport or application. *)

type app = {
  deliver : Event.src -> Msg.t -> unit;  (** a message for the application; it owns the message *)
  ctl : Event.up_ctl -> unit;  (** a control event reached the top *)
}

val check : ?requires:Contract.t list -> Layer.t list -> (unit, string) result
(** [check ~requires layers] checks, from the bottom up, that each layer's requirements are provided
    by the layers below it, and that the application's [requires] are provided by the whole stack.
    The error names the layer, the missing property and what was available. *)

val create :
  ?requires:Contract.t list ->
  ?fused:bool ->
  Layer.ctx ->
  Layer.t list ->
  net:(Event.dst -> Msg.t -> unit) ->
  app:app ->
  (t, string) result
(** [create ctx layers ~net ~app] checks and instantiates a stack. [net] takes each datagram leaving
    the lowest layer (it owns the message).

    [fused] (default: the tunable [stack.fused], on) turns on the fused path for casts when every
    layer declared its common case ({!Layer.fast}) and the lowest is framed ({!Layer.case}): see
    {!fused}; and for sends when every layer declared a send case ({!Layer.fast_send}). Every stack,
    fused or not, takes in compressed datagrams. *)

val cast : t -> Msg.t -> unit
val send : t -> int -> Msg.t -> unit
val dn_ctl : t -> Event.dn_ctl -> unit

val recv : t -> Msg.t -> unit
(** [recv t msg] hands a datagram from the transport to the lowest layer. *)

val timer : t -> Time.t -> unit
(** [timer t now] runs the timer of each layer whose alarm is due at [now] (not the others). Drivers
    call it once [now] has reached {!next_alarm}. *)

val next_alarm : t -> Time.t
(** The earliest time a layer asked to be called at; [max_int] if none. *)

val view : t -> View.t

val layers : t -> string list
(** Layer names, top first. *)

val counters : t -> (string * (string * int) list) list
(** Each layer's counters, top first, including ["garbage"]: messages dropped because that layer's
    header did not decode. *)

val describe : Layer.t list -> string
(** ["top:mnak:pt2pt:bottom"]. *)

(** {1 The fused path}

    A fused stack runs a cast through one bypass made at {!create} from the layers' declared common
    cases ({!Layer.case}): from the top, each layer whose case holds does its part, and the cast
    leaves with one compressed header ([0xC8], the kind, then each layer's varying fields, bottom
    first, as varints) instead of a header per layer. The first layer whose case does not hold gets
    the cast with the layered headers of the layers above, made from their fields, and the rest is
    the layered path. A received compressed cast goes up the same way, from the bottom; where a
    layer's case does not hold (a gap, a flush) the layered headers of the rest are made again from
    the fields and the cast takes the layered path from that layer. Everything else (control
    messages, retransmissions) is layered. A stack whose layers did not all declare a case takes in
    a compressed cast as garbage.

    Sends ({!send}) run the same way through a second bypass, made from the layers' send cases
    ({!Layer.FAST_SEND}) when every layer declared one: kind 1 in the compressed header, the send
    fields in a frame of their own. A stack that does not read sends takes in a compressed send as
    garbage. A send has no re-entry: one a layer queued goes on layered.

    A cast that a layer kept and sends down later on its layered path (Mflow's queue, emptied as
    credit comes back: under load, most casts) goes back on the fused path below that layer when the
    layer has no varying fields, its header is the constant of its common case, and the headers of
    the layers above read back into their fields (constants, or {!Layer.COMPRESS}): the layered
    headers above are taken off again and the cast leaves compressed. Receivers then deliver it by
    their fused path too. Going up, a cast a layer held (Mnak, for a gap) and passes on later goes
    on by the fused path above it the same way, as it carries the layered headers pushed back from
    its fields when it left the bypass.

    The stamp in Bottom's fields (the view and the stack's identity) makes sure a compressed cast is
    read only by a stack of the same layers. *)

val fused : t -> bool
(** Whether casts take the fused path. *)

val states : t -> (string * string) list
(** Each layer's state in words ({!Layer.FAST.state}; [""] for a layer without a declaration), top
    first: for the differential test. *)

val fused_counters : t -> (string * int) list
(** Compressed casts sent, received, and dropped as malformed (casts and sends); casts the bypass
    delivered to the application; ["held"]: received casts a layer took in on the bypass without
    passing them up ({!Layer.held}: Total's casts waiting for their place, its orders);
    ["released"]: casts the top layer passed to the application from its part after a cast on the
    bypass (casts it held, released by what came by the bypass); and, for each layer where casts
    left the bypass for the layered path (its case did not hold), how many:
    ["layered from NAME down"] and ["layered from NAME up"]; ["reentered"]: casts a layer kept that
    went back on the fused path below it; ["reentered_up"]: the same going up; ["reentry_refused"]:
    casts whose headers above could not be read back into fields (tried once per cast, at the
    highest layer that could take it back); for sends, ["sends_on"] (1 if sends take the fused
    path), ["sends_sent"], ["sends_received"], ["sends_delivered"], and
    ["layered from NAME send down"] / ["layered from NAME send up"]. *)

val frames_in_use : t -> int
(** Messages under way in the bypass now, casts and sends (frames of fields entered and not yet
    left): 0 whenever no call into the stack is running. *)

val expand : t -> Msg.t -> (Msg.t, Codec.error) result
(** [expand t msg] is a compressed cast or send made layered (every layer's header made from its
    fields), a datagram the layered path would have sent; any other datagram unchanged. *)
