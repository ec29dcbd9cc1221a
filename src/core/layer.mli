(** Layers: sans-IO protocol state machines, composed at run time.

    A layer owns no socket, clock or random source. It is created with a {!ctx} (its view, a seeded
    generator, tunables, a buffer pool, a way to read the current time) and an {!out} record through
    which it emits events to its neighbours and asks for a timer. The same code runs in the real
    engine and in the simulator.

    Message events going down carry exactly one header of each layer they pass: a layer calls
    [out.dn dst hdr msg] and the stack pushes [hdr], encoded with the layer's {!S.codec}, in front
    of [msg]. On the way up the stack pulls and decodes that header and hands it to {!S.up}; a
    header that does not decode is counted and the message dropped, so a layer only ever sees
    well-formed headers of its own type.

    Ownership: a layer that receives a message owns it and must pass it on, keep it, or
    {!Msg.release} it. Layers call their neighbours directly, so a handler may be re-entered through
    an event it emits: update state before emitting. *)

type ctx = { view : View.t; rng : Rng.t; params : Params.t; pool : Pool.t; now : unit -> Time.t }

type 'h out = {
  up : Event.src -> Msg.t -> unit;  (** deliver a message to the layer above *)
  up_ctl : Event.up_ctl -> unit;
  dn : Event.dst -> 'h -> Msg.t -> unit;  (** send a message below, with this header *)
  dn_ctl : Event.dn_ctl -> unit;
  alarm : Time.t -> unit;
      (** [alarm t]: call my [timer] at or soon after [t]. A layer's timer runs only when a time it
          asked for has come (the earliest of them), and then once: it asks again for whatever it
          still needs. *)
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

(** A layer that passes every event on, with an empty header: for tests and for measuring the cost
    of layering. *)
module Pass (N : sig
  val name : string
end) : S

(** {1 The fused path (seed 001, sec. 4)}

    A layer may declare the common case of a cast, so that a stack of such layers runs a cast down,
    or a received cast up, through one bypass (see {!Stack}): no layered header is encoded or
    decoded, and the datagram carries one compressed header, a tag and the fields that vary (a
    sequence number), where the layered path carries every layer's header. The declaration is a
    split of the layer's own handlers:

    - [dn_ok t dst len]: the common case for a cast going down, a function of the state only
      (changes nothing); [len] is the length the message has at this layer in the layered path (its
      body and the layered headers of the layers above) if the layer declared [length], [-1]
      otherwise;
    - [dn_fast t dst msg len ~layered fields off]: what [dn] does before it passes the message on,
      writing its [nfields] varying fields at [off]; it emits no event (an alarm is fine) and keeps
      [msg] (passing it on is the stack's); [layered] gives the layered headers of the layers above,
      for a copy the layer keeps (a retransmission buffer): see {!above};
    - [dn_after t dst len ~up fields off]: what [dn] does after the message went on (the fields are
      still this cast's); [up src m] delivers [m] (a copy of the cast made in [dn_fast], with no
      layered header) to the layers above, as [out.up] would the layered cast;
    - [up_ok t src len fields off], [up_fast], [up_after]: the same on the way up, for a received
      cast whose fields are [fields] at [off]; [up_fast] returns the source to pass on (Bottom turns
      [Raw] into [Cast_from]), or {!held} when the layer took the message in without passing it up
      (a cast that waits for its place, a control cast it consumes): the layer then owns the message
      (keeps it, with the layered headers of the layers above pushed by [layered], or releases it),
      the stack passes nothing up, and the [up_after] parts run as when the cast went on; a layer
      passes a held message up later with [out.up], as its layered handler does;
    - [framed]: the layer's layered headers never begin with the byte [0xC8], the compressed
      header's tag (Bottom's begin with [0xC1]); a stack is fused only if its lowest layer is
      framed, so that a receiver tells a compressed datagram from a layered one by its first byte;
    - [expand fields off]: the layered header of these fields (a header that does not vary is a
      constant), and [size fields off] its length in bytes.

    - [live]: [Some f] when [dn_ok t dst _] is [f t] and [dst] of the case's kind alone (a cast or a
      send), and [f t] changes only while one of the layer's layered handlers runs ([up], [dn],
      [up_ctl], [dn_ctl], [timer]), never in its fast parts; [up_live]: [up_ok t src _ _ _] too is
      [f t] and [src] from a member, of that kind. A layer that declares [live] and has no other
      part going down ([dn_fast], [dn_after]) is not visited going down while every such layer of
      the stack is live; with [up_live] and no [up_fast] or [up_after], the same going up. The stack
      reads their [f] again only after a layered handler of one of them ran. {!constant_cast} and
      {!constant_send} declare both; [None]: [dn_ok] and [up_ok] are called for each cast.

    Whenever [dn_ok] (or [up_ok]) holds, [dn_fast; pass the message on; dn_after] must do exactly
    what the layered handler does: the differential test ([test/group/test_fused.exe]) checks it on
    random traces. A predicate may be stricter than it needs to be (the layered path is then taken),
    never looser. *)

type above = { push : Msg.t -> Msg.t; head : unit -> Bytes.t }
(** The layered headers of the layers above a layer, made from the fields of the cast under way:
    [push m] is [m] with them pushed; [head ()] is the same bytes, as {!Msg.push_bytes} would put
    them in front (never to be written: the stack reuses them while the fields do not change), for a
    store that keeps a message taken apart without making it first. *)

type ('t, 'h) case = {
  nfields : int;
  length : bool;
  framed : bool;
  size : int array -> int -> int;
  dn_ok : 't -> Event.dst -> int -> bool;
  dn_fast : 't -> Event.dst -> Msg.t -> int -> layered:above -> int array -> int -> unit;
  dn_after : 't -> Event.dst -> int -> up:(Event.src -> Msg.t -> unit) -> int array -> int -> unit;
  up_ok : 't -> Event.src -> int -> int array -> int -> bool;
  up_fast : 't -> Event.src -> Msg.t -> int -> layered:above -> int array -> int -> Event.src;
  up_after : 't -> Event.src -> int -> int array -> int -> unit;
  expand : int array -> int -> 'h;
  live : ('t -> bool) option;
  up_live : bool;
}

val held : Event.src
(** What [up_fast] returns when the layer took the message in and nothing goes up (compared with
    [==]). *)

(** Parts that do nothing (an empty [dn_fast], [dn_after] or [up_after], an [up_fast] that returns
    its source): a case that uses these very values lets the stack skip the call. *)

val nothing_dn_fast : 't -> Event.dst -> Msg.t -> int -> layered:above -> int array -> int -> unit

val nothing_dn_after :
  't -> Event.dst -> int -> up:(Event.src -> Msg.t -> unit) -> int array -> int -> unit

val nothing_up_fast :
  't -> Event.src -> Msg.t -> int -> layered:above -> int array -> int -> Event.src

val nothing_up_after : 't -> Event.src -> int -> int array -> int -> unit

val constant_cast :
  'h Codec.t ->
  'h ->
  live:('t -> bool) ->
  ?up_fast:('t -> Event.src -> Msg.t -> int -> layered:above -> int array -> int -> Event.src) ->
  unit ->
  ('t, 'h) case
(** [constant_cast codec h ~live ()] is the case of a layer whose casts all carry the one header [h]
    (no fields): taken while [live t] holds, for a cast going down and for a cast from any member
    coming up; [up_fast] (by default {!nothing_up_fast}) is what a received cast does to the layer's
    state. *)

val constant_send :
  'h Codec.t ->
  'h ->
  live:('t -> bool) ->
  ?up_fast:('t -> Event.src -> Msg.t -> int -> layered:above -> int array -> int -> Event.src) ->
  unit ->
  ('t, 'h) case
(** [constant_send codec h ~live ()] is {!constant_cast} for sends: a send to any rank going down, a
    send from any member coming up. *)

module type FAST = sig
  include S

  val cast : (t, header) case
  (** The common case of a cast. *)

  val state : t -> string
  (** The layer's state in words, for the differential test: two states that differ print
      differently. *)
end

val fast : (module FAST) -> t
(** [fast (module L)] is [L] as a layer whose fused declaration stacks find ({!find_fast}). *)

val find_fast : t -> (module FAST) option
val is_fast : t -> bool

module type COMPRESS = sig
  include FAST

  val compress : header -> int array -> int -> bool
  (** [compress h fields off] writes at [off] the fields that [cast.expand] makes [h] from, and is
      [true], if there are such fields; [false] otherwise. A cast that a layer below kept and sends
      down later (Mflow's queue) goes back on the fused path only if the header of every layer above
      it compresses: a layer without fields compresses the constant it expands to, with no
      declaration; one with fields needs this. *)
end

val fast_compress : (module COMPRESS) -> t
(** [fast_compress (module L)] is {!fast}, with [L.compress] for {!find_compress}. *)

val find_compress : t -> (module COMPRESS) option

module type FAST_SEND = sig
  include FAST

  val send : (t, header) case
  (** The common case of a point-to-point send ([Event.Send] going down, [Event.Send_from] coming
      up), declared as {!FAST.cast} is; its fields are numbered apart from the cast's. *)
end

val fast_send : (module FAST_SEND) -> t
(** [fast_send (module L)] is {!fast}, with [L.send] for {!find_send}. A stack runs sends fused only
    if every layer declared a send case. *)

val find_send : t -> (module FAST_SEND) option

module type COMPRESS_SEND = sig
  include COMPRESS

  val send : (t, header) case
  (** As {!FAST_SEND.send}. *)
end

val fast_compress_send : (module COMPRESS_SEND) -> t
(** [fast_compress_send (module L)] is {!fast_compress} and {!fast_send} at once: [L.compress] for
    {!find_compress}, [L.send] for {!find_send}. *)

(** {!Pass} with its (trivial) fused declaration, for casts and sends. *)
module Pass_fast (N : sig
  val name : string
end) : FAST_SEND
