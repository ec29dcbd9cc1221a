(** Total: every member delivers the casts of a view in one same order (property [Total]),
    consistent with each origin's FIFO order.

    Two interchangeable protocols, chosen with [total.protocol]:
    - [sequencer] (Ensemble's Seqbb, the default): members cast as usual; the view's first member
      (its coordinator when the view is installed) casts the order in which it received them, in
      batches of runs ("the next 3 casts of rank 2"); members deliver as the order says. The
      sequencer's own casts are ordered as they go: each carries its place, the next after the
      orders it cast before it (an order it has not cast yet goes out first). A cast whose turn has
      come when it arrives (the sequencer's, with nothing ordered before it still missing; another
      member's whose order came first) is delivered at once: that is the layer's common case on the
      fused path ({!Consort.Layer.FAST}), the place its one varying field.
    - [token] (as Totem): a token goes round the members by rank; its holder stamps the casts it has
      waiting with the next places in the order and casts them; members deliver by place. A token
      that went a whole round without anything to order stays where it is; a member with casts
      waiting casts a request that sets it going again. A stamped cast whose place is the next,
      nothing stamped waiting, is delivered at once; the holder's cast with nothing waiting, and
      that cast at a receiver, are the common case on the fused path.

    The layer sits above {!Gmp}, whose flush makes every member that goes on into the next view
    deliver the same casts, including this layer's own: its orders, and its casts with their places.
    At the end of the view ([Stop], when the next view is installed) each member delivers what it
    still holds, in a deterministic order: first what the order says (sequencer: skipping casts that
    no member going on received, which only happens when their origin and the sequencer both failed;
    token: by place, skipping places that none received), then the casts that got no place, by
    origin rank and, for each origin, in FIFO order. Casts waiting for the token when the flush
    starts go out at once, without a place, and are ordered that way. So members that go on together
    deliver one same sequence; casts are never re-sent in the next view.

    Within a view, before the flush, members deliver only casts that have a place, so all of them
    deliver subsequences of one order. Members that end a view apart (a partition) each deliver
    their part of it and then order what has no place the same way.

    Memory: the casts a member holds without a place are those the sequencer (or the token) has not
    ordered yet. Flow control below (Mflow) bounds what each origin has in flight, but credits
    return as casts reach this layer; so beyond [total.held] bytes held (a member that gets the
    casts but not their order, say), this member stops returning credit for the casts of every
    origin but the sequencer ({!Mflow.Hold_credit}, with the [Flow] property), and every sender
    slows down to it until it is back to half; nothing is dropped. Casts waiting here for the token
    count against [total.queue], beyond which the application hears [Blocked true]. *)

type protocol = Sequencer | Token

module Param : sig
  val protocol : string
  (** ["total.protocol"]: ["sequencer"] (default) or ["token"] *)

  val burst : string
  (** ["total.token_burst"], default 64: casts ordered per holding of the token *)

  val queue : string
  (** ["total.queue"], default 1 MiB: bytes of casts waiting for the token beyond which the
      application hears [Blocked true] *)

  val held : string
  (** ["total.held"], default 4 MiB: bytes of casts received and waiting for their place beyond
      which this member holds back flow control credit *)
end

val protocol : Consort.Params.t -> (protocol, string) result
(** The protocol [total.protocol] names, or a one-line error. *)

val check_params : Consort.Params.t -> (unit, string) result
val protocol_name : protocol -> string
val total_order : Consort.Contract.t

type t

type header =
  | Pass  (** a send: not ordered *)
  | Data  (** a cast without its place *)
  | Order of (int * int) list  (** sequencer: the next casts, as runs (origin, how many) *)
  | Stamped of int  (** token: a cast and its place *)
  | Token of { next : int; idle : int }
      (** token: the next place, and holders in a row that had nothing *)
  | Want  (** token: this member has casts waiting *)
  | Placed of int  (** sequencer: a cast of the sequencer, ordered as it goes, and its place *)

include Consort.Layer.S with type t := t and type header := header

val layer : Consort.Layer.t
