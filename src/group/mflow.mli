(** Mflow: credit-based flow control for casts (Ensemble's [Mflow]).

    A cast counts for its length plus {!overhead} bytes. A member keeps at most {!Param.window}
    bytes of its casts that some other member of the view has not yet delivered to its application
    (not yet credited); a cast that does not fit waits in a queue, in order, and goes as soon as
    credits make room. A cast larger than the whole window goes alone, once every earlier one is
    credited by everyone.

    Receivers count, per origin, the bytes of casts they deliver to the layer above and return
    credit as cumulative totals in one {!Credit} cast that covers every origin owed, batched: as
    soon as a quarter of the receiver's own window is owed to some origin, otherwise
    {!Param.credit_delay} after the first delivery not credited. A sender whose window is full while
    casts wait asks for credit at once: on the last cast that fits, or with an {!Ask} cast of its
    own if that cast went before anything waited; it asks again only once every member has credited
    what it asked for, so that credit comes in batches, not one credit cast per cast or two. A
    steady stream thus moves a window per round trip.

    When the queue grows beyond {!Param.queue} bytes, the layer tells the application
    [Blocked true]; once it is back to half that limit, [Blocked false]. Casts made while blocked
    are still queued, not lost. [Blocked] events from the layers below are merged with this layer's
    own state, so the application sees one [true] / [false] alternation for the whole stack beneath.

    The view is fixed: a member that stops delivering (it crashed) holds every sender back until the
    stack is replaced by the next view's. Point-to-point messages pass through with {!No_hdr}. On
    [Stop] every queued cast is released.

    Requires {!Consort.Contract.reliable_cast}; provides {!contract}. *)

type t

(** [Hold_credit { who; hold = true; except }], sent down by a layer above or the runtime ([who]
    names it), stops this member from returning credit for the casts of every origin but those in
    [except] until that holder says [hold = false]: so a member that keeps what it delivers (Total
    waiting for the order, a member waiting for the group's state) slows every sender to what it can
    take, instead of keeping without bound. Senders hear [Blocked true] when their queue fills, as
    for any slow member. Counted as ["credit_held"]. *)
type Consort.Event.dn_ctl += Hold_credit of { who : string; hold : bool; except : int list }

(** The header. *)
type header =
  | No_hdr  (** a point-to-point message, outside flow control *)
  | Data of { ask : bool }
      (** a flow-controlled cast; [ask]: return credit as soon as it is delivered *)
  | Credit of { credits : (int * int) list }
      (** for each [(origin, total)]: the sender has delivered [total] bytes of [origin]'s casts
          since the stack began *)
  | Ask  (** return the credit owed to the sender of this cast, at once *)

val overhead : int
(** [overhead] is what each cast counts for beyond its length (64 bytes), so that empty casts are
    bounded too. *)

(** Names of the registered tunables. *)
module Param : sig
  val window : string
  (** ["mflow.window"]: bytes of casts not yet credited by every other member (default 1 MiB). *)

  val queue : string
  (** ["mflow.queue"]: bytes of queued casts beyond which the application is told it is blocked
      (default 1 MiB). *)

  val credit_delay : string
  (** ["mflow.credit_delay"]: how long a receiver waits to batch credit (default 2 ms). *)
end

val contract : Consort.Contract.t
(** ["cast-flow"]: a fast caster cannot exhaust the memory of the slowest member. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 no header, 1 data, 2 data asking for credit, 3 credit, 4 ask), then for
    credit a count (at most 4096) and [(origin, total)] pairs, as varints. *)

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
(** ["credits_sent"], ["blocked"] (times the application was told to stop), ["malformed"] (headers
    that do not fit their source), ["bad_credit"] (credit naming ranks outside the view, or more
    than was cast), and the gauges ["outstanding"] (bytes cast and not credited by every other
    member), ["queued"] (bytes waiting) and ["queued_messages"]. *)

val layer : Consort.Layer.t
(** [layer] is Mflow as a first-class layer. *)
