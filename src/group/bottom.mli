(** Bottom: the lowest layer of a group stack (Ensemble's [Bottom]).

    Going down it stamps every message with a small header: a magic and version byte, the 32-bit
    stamp of the group name, the view id and the stack's identity ({!stamp}), the sender's rank and
    whether the message is a cast or a send, and for a send the destination's rank. Going up it
    takes raw datagrams from the transport and lets through only those of its own protocol version
    and group, from another valid rank, and of a send only one to this member's rank; it hands them
    up as [Cast_from r] or [Send_from r]. Everything else is dropped, counted and logged at debug
    level: undecodable headers in the stack's ["garbage"] counter, the rest in this layer's counters
    ["wrong_group"], ["bad_rank"], ["from_self"], ["not_raw"], ["misdirected"] (a send to another
    rank: under a seal, where the header is authenticated, a send captured on its way to one member
    and replayed to another) and, going down, ["bad_dst"] (a send to this member itself or to a rank
    outside the view).

    Requires {!Consort.Contract.net}; provides {!Consort.Contract.datagram}. *)

type t

(** The header: the kind of message, with the group hash and origin rank. *)
type header =
  | Cast of { group : int; origin : int }  (** a cast by [origin] in [group] *)
  | Send of { group : int; origin : int; dst : int }
      (** a point-to-point message from [origin] to the member of rank [dst] *)

val magic : int
(** [magic] is the first byte of every Bottom header: protocol and version. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: magic byte, group hash (uint32, big-endian), origin (varint), kind (varint: 0 a cast,
    [1 + dst] a send to rank [dst]). A wrong magic does not decode. *)

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

val layer : Consort.Layer.t
(** [layer] is Bottom as a first-class layer. *)

val stack_param : string
(** ["bottom.stack"]: the identity of the stack ({!Stack_id.digest}), set by the group runtime;
    default [""]. *)

val stamp : Consort.View.t -> stack:string -> int
(** The stamp Bottom puts on every datagram: a hash of the group, the view and the stack's identity
    ({!Consort.View.stamp} when [stack] is [""]). *)
