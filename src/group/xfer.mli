(** State transfer, property [Xfer]: a member that joins receives the group's state from a member
    that holds it before it delivers its first cast in the new view.

    The layer ({!layer}, on top of the stack, above {!Gmp}) only keeps the protocol's messages apart
    from the application's; the protocol ({!t}) runs in the group runtime, which calls it at each
    view and delivery:

    + at each view, every member casts a hello: whether it holds the state, how many casts that
      state has seen (its age), the view it comes from, and, if it waits for a state, from which
      view on and how much of it it already has;
    + once every hello of the view is in, every member decides the same: the holders of the
      partition whose state has seen the most casts (ties: the least previous view id) are the
      candidates; every other member needs their state as of the start of its base view (this view,
      or the view where it started to wait); members deliver nothing of the view before this
      decision (one multicast round), then the candidates go on;
    + the candidate of least rank that holds a snapshot of the base view streams it in chunks of
      [xfer.chunk] bytes, at most [xfer.window] bytes ahead of the receiver's acknowledgements, as
      point-to-point messages: the other members are not blocked;
    + the receiver holds every delivery meanwhile; with the whole snapshot (checked against its
      digest) it installs it, then hands over what it held, in order. If the giver fails, the next
      view's decision names another candidate, which goes on from the bytes the receiver has if its
      snapshot is the same (same digest), else from the start.

    The candidates of least rank (the giver and [xfer.spares] more) take a snapshot of the state at
    the start of each view where a member needs it, and keep it while a member waits for it; if they
    all fail, a member that waited hands over what it held from before and waits for the state as of
    the current view.

    What a receiver holds while the state streams is kept in memory, and bounded: beyond
    [xfer.max_held] bytes it stops returning flow control credit ({!Mflow.Hold_credit}; with the
    [Flow] property), so every sender slows down to it (their applications hear [flow true]) until
    it has installed the state and handed over what it held; the transfer itself is point-to-point,
    outside that flow control, and goes on. Nothing is dropped. A state over [xfer.max_state] is
    refused, and the member goes on waiting. *)

module Param : sig
  val chunk : string
  (** ["xfer.chunk"], default 16 KiB *)

  val window : string
  (** ["xfer.window"], default 64 KiB *)

  val max_state : string
  (** ["xfer.max_state"], default 256 MiB *)

  val spares : string
  (** ["xfer.spares"], default 1: candidates that take a snapshot besides the giver, to go on if it
      fails *)

  val max_held : string
  (** ["xfer.max_held"], default 16 MiB: bytes of held deliveries beyond which a member waiting for
      the state holds back flow control credit *)
end

val contract : Consort.Contract.t
val name : string
val layer : Consort.Layer.t

type Consort.Event.dn_ctl +=
  | Out of { dst : Consort.Event.dst; payload : string }  (** a protocol message to send *)

type Consort.Event.up_ctl +=
  | In of { src : int; payload : string }  (** a protocol message from rank [src] *)

type hello = {
  holder : bool;
  age : int;
  prev : string;
  base : string;
  have : int;
  digest : string;
  snaps : string list;
  pos : string;  (** with a durable state: the application's position (see {!durable}) *)
}
(** The protocol's messages. *)

type ctl =
  | Hello of hello
  | Chunk of { base : string; digest : string; age : int; total : int; off : int; data : string }
  | Ack of { base : string; off : int }  (** the receiver has [off] bytes *)
  | Resume of { base : string; off : int }  (** the receiver has [off] bytes: send from there *)

val ctl_codec : ctl Consort.Codec.t

type kind = [ `Cast | `Send ]

type app = {
  take : unit -> string;  (** a snapshot of the state now *)
  install : string -> unit;  (** replace the state by a snapshot *)
  deliver : kind -> origin:string -> string -> unit;
}
(** The application's side. *)

type durable = {
  age : unit -> int;
  position : unit -> string;
  take_for : string -> string;  (** the state to give a member at this position *)
  on_decision : string array -> unit;
      (** once every hello of the view is in, before anything is given or taken: every member's
          position, by rank (the same everywhere) *)
}
(** A durable state (one the application keeps on disk, as a replicated store does): every member
    holds a state from the start, which it describes by an age (the greatest is the most advanced: a
    store gives its epoch and write number) and a position (an opaque string, small: at most 16 KiB,
    from which a giver can tell what the member lacks).

    With it, at each view: every member's hello carries its age and position; the greatest age wins,
    and the member of least rank holding it gives [take_for position] to each member of a lesser
    age, or of the same age at another position (a state of that age but not the same one: members
    that ended a view apart) (the writes it misses when its log is a prefix of the giver's, a full
    snapshot otherwise: the application decides), in chunks under the same window; the receiver
    holds its deliveries until it has it and calls [install] with it. The receiver's state is
    untouched until then: if the view ends first (the giver failed), it drops what it held (counted
    as [dropped_held]; an application that answers only what every member of a view has applied
    loses nothing by it) and offers its own state again in the next view, where the decision is made
    anew. *)

type t

val create : ?durable:durable -> params:Consort.Params.t -> max_message:int -> me:string -> app -> t

val start_view :
  ?hold_credit:(bool -> unit) ->
  t ->
  vid:string ->
  members:string array ->
  rank:int ->
  cast_ctl:(string -> unit) ->
  send_ctl:(int -> string -> unit) ->
  unit
(** A view was installed: [cast_ctl] and [send_ctl] send protocol messages in it; [hold_credit] asks
    its stack to hold back flow control credit, or to return it again. *)

val end_view : t -> unit
(** The view ends (before the next is installed). *)

val on_app : t -> vid:string -> kind -> origin:string -> string -> unit
(** An application message delivered in view [vid]: handed to the application now, or held. *)

val on_ctl : t -> src:int -> string -> unit
(** A protocol message from rank [src] of the current view. *)

val needs_state : t -> bool
val holds_state : t -> bool

val age : t -> int
(** Casts the state has seen. *)

val delivery_view : t -> string option
(** While a message is handed to the application: the view it was delivered in. *)

val queued : t -> int
val counters : t -> (string * int) list
