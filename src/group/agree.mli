(** Agree: safe delivery (property [Agree], alias [Safe]; Spread's SAFE). In the regular part of a
    view, a cast is delivered only once every member of the view holds it, the members suspected of
    failure included: so every member that does not crash delivers it in this view.

    Stability comes from Mnak ({!Mnak.Stable}, asked for with {!Mnak.Track_stability}): Mnak tells,
    from its status vectors, how many casts of each origin every member holds. A cast kept here
    takes as its mark Mnak's count of its origin's casts received at the first such event after it
    came (it came through Mnak before, so it is among them); it is safe once every member holds that
    many. Mnak numbers the casts of every layer and every fragment, so the mark may be above the
    cast's own number: that only waits a little longer. A member's Mnak claims only what it had when
    the flush reached it, since the flush may drop what comes later. Casts are delivered in the
    order they reach the layer, so above {!Total} the total order is kept.

    When a view change starts ({!Gmp.Block}), nothing more is delivered in the regular part of the
    view (a cast stable then may be missing at a member the flush excludes); at the end of the view,
    after the flush, every member that goes on holds the same casts and delivers the rest in the
    order they came (as Spread delivers in the transitional configuration). *)

val safe_delivery : Consort.Contract.t

type t
type header = Pass  (** a send *) | Data  (** a cast *)

include Consort.Layer.S with type t := t and type header := header

val layer : Consort.Layer.t
