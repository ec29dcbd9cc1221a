(** Frag: fragmentation and reassembly of large messages (Ensemble's [Frag]).

    Going down, a message (casts and sends alike) of at most {!Param.size} bytes passes with the
    one-byte {!Whole} header. A longer one is cut into pieces of {!Param.size} bytes (the last one
    shorter): the first carries {!First} with the whole length, the others {!More} with their index.
    Pieces are sub-slices of the message's own buffers: no payload byte is copied (headers pushed by
    layers above, if any, are copied into a small buffer in front). A message longer than
    {!Param.max_message} is refused: logged as an error, counted in ["refused"] and released.

    Frag sits above reliable FIFO layers, so the fragments of one origin's message arrive in order,
    one message after another, separately for casts and for sends. Going up, it reassembles per
    origin and kind by appending the received bodies to each other, again without copying, and
    delivers the whole message once its length is reached. Nonsense is counted and dropped, never
    raised: a first fragment that claims more than {!Param.max_message} bytes; a fragment of no
    message, or that skips an index or overruns the claimed length (with the partial message it
    would ruin); a fragment repeating an index (alone); a first or whole message arriving while
    another is incomplete (the incomplete one).

    A message re-entering {!dn} while fragments are being emitted (an application reacting to an
    event raised during the emission) is sent after them, so that the fragments of two messages
    never interleave. On [Stop] every partial message and pending fragment is released.

    Requires {!Consort.Contract.reliable_cast} and {!Consort.Contract.reliable_send}; provides
    {!contract}. *)

type t

(** The header. *)
type header =
  | Whole  (** a message in one piece *)
  | First of { length : int }
      (** the first fragment of a message of [length] bytes, longer than this fragment *)
  | More of { index : int }
      (** fragment number [index] (1, 2, ...) of the message being reassembled from this origin *)

(** Names of the registered tunables. *)
module Param : sig
  val size : string
  (** ["frag.size"]: bytes of payload per fragment (default 60000). With the headers of the layers
      below (a few dozen bytes in the default group stack) a fragment stays well under the largest
      UDP/IPv4 payload, 65507 bytes, and leaves room for IPv6 and future layers. *)

  val max_message : string
  (** ["frag.max_message"]: the largest message sent or reassembled (default 64 MiB). *)
end

val contract : Consort.Contract.t
(** ["frag"]: messages of any size up to {!Param.max_message}, whatever the transport's datagram
    size. *)

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 whole, 1 first, 2 more), then for a first fragment the total length and
    for the others the index, as varints. *)

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
(** ["fragmented"] (messages sent in pieces), ["fragments"] (pieces sent), ["reassembled"],
    ["refused"] (too long to send), ["oversize"] (received first fragments claiming more than the
    limit), ["out_of_order"] (fragments of no message or with an unexpected index, and partial
    messages cut short by another one), ["malformed"] (pieces empty or overrunning the claimed
    length, or from an invalid source), and the gauge ["reassembling"]: bytes of partial messages
    held now. *)

val layer : Consort.Layer.t
(** [layer] is Frag as a first-class layer. *)
