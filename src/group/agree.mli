(** Agree: safe delivery (property [Agree], alias [Safe]; Spread's SAFE).
    In the regular part of a view, a cast is delivered only once every
    member of the view holds it, the members suspected of failure
    included: so every member that does not crash delivers it in this
    view.

    Each member casts, a little after it receives casts
    ([agree.ack_delay]), the entries of its vector of casts held (per
    origin) that changed since it last did; a cast is stable when every
    member's vector covers it. Casts are delivered in the order they
    reach the layer, so above {!Total} the total order is kept.

    Stability is counted here, in this layer's own casts, rather than
    from Mnak's status vectors: those number every cast of every layer
    and every fragment, and a member may hold at Mnak a cast that its
    flush then discards, so they cannot say that a member will deliver
    an application cast.

    When a view change starts, what is not yet stable stays held; at the
    end of the view, after the flush, every member that goes on holds the
    same casts and delivers the rest in the order they came (as Spread
    delivers in the transitional configuration). *)

module Param : sig
  val ack_delay : string  (** ["agree.ack_delay"], default 2 ms *)
end

val safe_delivery : Consort.Contract.t

type t

type header =
  | Pass  (** a send *)
  | Data  (** a cast *)
  | Holds of (int * int) list  (** changed entries (origin, casts held) *)

include Consort.Layer.S with type t := t and type header := header

val layer : Consort.Layer.t
