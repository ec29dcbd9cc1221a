(** Pt2pt: reliable FIFO point-to-point messages (Ensemble's [Pt2pt]).

    Each member numbers the messages it sends to each peer. The receiver delivers them in order and
    exactly once: it suppresses duplicates and buffers messages that arrive early, up to
    {!Param.window} ahead of the next expected one (later ones are dropped: the sender will send
    them again; numbers are checked before anything changes, so such a message, or one acknowledging
    messages never sent, is dropped whole, its acknowledgement included). It acknowledges
    cumulatively ("I have all messages below [n]") on every data message it sends back to that peer;
    otherwise with an acknowledgement message, which also lists the early messages it holds
    (selective acknowledgement), {!Param.ack_delay} after a message arrives, at once after
    {!Param.ack_every} messages and on every duplicate. The sender keeps each message until it is
    acknowledged and, when its retransmission timer expires, sends again those it still holds among
    the {!Param.window} oldest, and doubles the timeout, from {!Param.rto} up to {!Param.max_rto}.

    A send to this member itself is delivered at once, locally. Casts pass through with the
    {!No_hdr} header. On [Stop] every buffered message is released.

    Requires {!Consort.Contract.datagram}; provides {!Consort.Contract.reliable_send}. *)

type t

(** The header. *)
type header =
  | No_hdr  (** a cast, passed through *)
  | Data of { seq : int; ack : int }
      (** message number [seq] to this peer, with a piggybacked cumulative acknowledgement: the
          sender has all of the peer's messages below [ack] *)
  | Ack of { ack : int; sack : (int * int) list }
      (** an acknowledgement alone: the sender has all of the peer's messages below [ack] and those
          in the inclusive ranges [sack] (early ones it holds, at most 16 ranges) *)

(** Names of the registered tunables. *)
module Param : sig
  val rto : string
  (** ["pt2pt.rto"]: initial retransmission timeout (default 20 ms). *)

  val max_rto : string
  (** ["pt2pt.max_rto"]: largest retransmission timeout after backoff (default 1 s). *)

  val window : string
  (** ["pt2pt.window"]: messages buffered ahead of the next expected one, and retransmitted at each
      timeout (default 256). *)

  val ack_delay : string
  (** ["pt2pt.ack_delay"]: how long an acknowledgement waits for a data message to ride on (default
      5 ms). *)

  val ack_every : string
  (** ["pt2pt.ack_every"]: messages received after which an acknowledgement is sent at once (default
      32). *)
end

val name : string

val codec : header Consort.Codec.t
(** Layout: a tag byte (0 no header, 1 data, 2 ack) then varints: for data, [seq] and [ack]; for an
    ack, [ack], the number of ranges and each range's [lo] and [hi]. *)

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
(** ["retransmissions"], ["duplicates"], ["out_of_order"], ["acks_sent"], ["beyond_window"] (early
    messages dropped), ["malformed"] (headers that do not fit their source), ["impossible"]
    (acknowledging messages never sent: dropped whole), ["bad_dst"], and the gauges ["unacked"] and
    ["buffered"] (messages held now by senders and receivers). *)

val layer : Consort.Layer.t
(** [layer] is Pt2pt as a first-class layer. *)
