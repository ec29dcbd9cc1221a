(** Stacks: layers composed at run time, with their contracts checked.

    Layers are given top first, as Ensemble writes them
    ([Top:Mnak:Pt2pt:Bottom]). The lowest layer receives raw datagrams from
    the driver (the transport provides {!Contract.net}); the highest
    delivers to the application. *)

type t

type app = {
  deliver : Event.src -> Msg.t -> unit;
      (** a message for the application; it owns the message *)
  ctl : Event.up_ctl -> unit;  (** a control event reached the top *)
}

val check : ?requires:Contract.t list -> Layer.t list -> (unit, string) result
(** [check ~requires layers] checks, from the bottom up, that each layer's
    requirements are provided by the layers below it, and that the
    application's [requires] are provided by the whole stack. The error
    names the layer, the missing property and what was available. *)

val create :
  ?requires:Contract.t list ->
  Layer.ctx ->
  Layer.t list ->
  net:(Event.dst -> Msg.t -> unit) ->
  app:app ->
  (t, string) result
(** [create ctx layers ~net ~app] checks and instantiates a stack. [net]
    takes each datagram leaving the lowest layer (it owns the message). *)

val cast : t -> Msg.t -> unit
val send : t -> int -> Msg.t -> unit
val dn_ctl : t -> Event.dn_ctl -> unit

val recv : t -> Msg.t -> unit
(** [recv t msg] hands a datagram from the transport to the lowest layer. *)

val timer : t -> Time.t -> unit
(** [timer t now] runs the timer of each layer whose alarm is due at
    [now] (not the others). Drivers call it once [now] has reached
    {!next_alarm}. *)

val next_alarm : t -> Time.t
(** The earliest time a layer asked to be called at; [max_int] if none. *)

val view : t -> View.t
val layers : t -> string list
(** Layer names, top first. *)

val counters : t -> (string * (string * int) list) list
(** Each layer's counters, top first, including ["garbage"]: messages
    dropped because that layer's header did not decode. *)

val describe : Layer.t list -> string
(** ["top:mnak:pt2pt:bottom"]. *)
