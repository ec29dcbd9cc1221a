(** The [Primary] feature of the group runtime ({!Group.Make}): whether the current view holds the
    quorum, as told to the application ([join ~primary]) and as casts are admitted, and, with
    dynamic votes ([primary.mode=dynamic]), this member's knowledge of past primaries across views.
    The decisions themselves are {!Primary}'s; this module keeps their state between views and stack
    events.

    A view without the quorum is told so at once. A view with it is held pending (casts wait) until
    the layer confirms that every member installed it ({!Primary.Confirmed}), or, with dynamic
    votes, until every member's knowledge is in ({!Primary.Heard}) and the attempt succeeds; a
    pending view that ends first was never primary. *)

type t

val create : me:string -> config:Primary.config option -> on_primary:(Primary.quorum -> unit) -> t
(** [config]: the votes, when the member's stack has the Primary layer; [on_primary] hears each
    decision. *)

val quorum : t -> Primary.quorum option
(** The current view's quorum as last told ([None] without Primary). *)

val waiting : t -> bool
(** The current view holds the quorum but is not confirmed yet: casts wait in the queue. *)

val outside_primary : t -> bool
(** The current view is told not primary: a queued cast is lost. *)

val refusal : t -> string option
(** Why a cast is refused now ({!Group.Not_primary}): the view is decided and not primary. *)

(** {1 At a view boundary} *)

val end_view : t -> unit
(** The view ends (called first at each install): a view still pending was never primary, and the
    application is told so. *)

type decision

val install : t -> layers:Consort.Layer.t list -> members:(string * string) list -> decision
(** The next view is installed with these layers and members (id and address, in rank order): decide
    what can be decided now, before the application hears of the view. *)

val start : t -> vid:string -> dn_ctl:(Consort.Event.dn_ctl -> unit) -> decision -> unit
(** After the application heard of view [vid]: tell it a view without the quorum, or start the
    layer's confirmation ([dn_ctl] to the view's stack). *)

(** {1 Stack events} *)

val on_ctl :
  t -> vid:string -> dn_ctl:(Consort.Event.dn_ctl -> unit) -> Consort.Event.up_ctl -> bool
(** An event from the stack of view [vid]; [true] when it decided the view's quorum (the caller then
    lets queued casts go, or tells them lost). Events of other features are ignored. *)
