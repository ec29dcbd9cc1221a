(** Causal: a member delivers a cast only after every cast of the view that its sender had delivered
    before casting it, transitively (property [Causal]).

    Each cast carries its sender's vector timestamp (how many casts of each origin it had
    delivered), compressed: only the entries that changed since the sender's previous cast of the
    view, since casts of a view arrive in FIFO order and each receiver keeps the rest. A cast whose
    causal past is not yet delivered waits; each origin's casts stay in FIFO order.

    The layer sits above {!Gmp} (and above {!Total} when both are asked for): at the end of the
    view, after the flush, every member that goes on holds the same casts; a cast that still waits
    then depends on a cast that none of them received (both senders failed) and is not delivered, by
    any of them. *)

val causal_order : Consort.Contract.t

type t

type header =
  | Pass  (** a send *)
  | Data of (int * int) list  (** a cast, and the changed entries (origin, casts delivered) *)

include Consort.Layer.S with type t := t and type header := header

val layer : Consort.Layer.t
