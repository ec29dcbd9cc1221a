(** Layers: sans-IO protocol state machines, composed at run time.

    A layer owns no socket, clock or random source. It is created with a
    {!ctx} (its view, a seeded generator, tunables, a buffer pool, a way to
    read the current time) and an {!out} record through which it emits
    events to its neighbours and asks for a timer. The same code runs in
    the real engine and in the simulator.

    Message events going down carry exactly one header of each layer they
    pass: a layer calls [out.dn dst hdr msg] and the stack pushes [hdr],
    encoded with the layer's {!S.codec}, in front of [msg]. On the way up
    the stack pulls and decodes that header and hands it to {!S.up}; a
    header that does not decode is counted and the message dropped, so a
    layer only ever sees well-formed headers of its own type.

    Ownership: a layer that receives a message owns it and must pass it on,
    keep it, or {!Msg.release} it. Layers call their neighbours directly,
    so a handler may be re-entered through an event it emits: update state
    before emitting. *)

type ctx = {
  view : View.t;
  rng : Rng.t;
  params : Params.t;
  pool : Pool.t;
  now : unit -> Time.t;
}

type 'h out = {
  up : Event.src -> Msg.t -> unit;  (** deliver a message to the layer above *)
  up_ctl : Event.up_ctl -> unit;
  dn : Event.dst -> 'h -> Msg.t -> unit;  (** send a message below, with this header *)
  dn_ctl : Event.dn_ctl -> unit;
  alarm : Time.t -> unit;
      (** [alarm t]: call my [timer] at or soon after [t]. A layer's timer
          runs only when a time it asked for has come (the earliest of
          them), and then once: it asks again for whatever it still needs. *)
}

module type S = sig
  type t
  type header

  val name : string
  val codec : header Codec.t
  val pp_header : header Fmt.t

  val provides : Contract.t list
  (** Properties this layer adds for the layers above. *)

  val requires : Contract.t list
  (** Properties this layer needs from the layers below. *)

  val create : ctx -> header out -> t
  val up : t -> Event.src -> header -> Msg.t -> unit
  val up_ctl : t -> Event.up_ctl -> unit
  val dn : t -> Event.dst -> Msg.t -> unit
  val dn_ctl : t -> Event.dn_ctl -> unit
  val timer : t -> Time.t -> unit

  val counters : t -> (string * int) list
  (** Named counters (messages retransmitted, garbage dropped, ...). *)
end

type t = (module S)

val name : t -> string
val provides : t -> Contract.t list
val requires : t -> Contract.t list

module Pass (N : sig
  val name : string
end) : S
(** A layer that passes every event on, with an empty header: for tests
    and for measuring the cost of layering. *)
