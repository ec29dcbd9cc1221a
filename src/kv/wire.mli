(** The messages replicas exchange over the group, and the client protocol over TCP. Both are
    versioned: a frame or message starts with its version byte; another version is refused with a
    clear error.

    The types take the machine's operation (['op]) or response (['r]); {!Make} gives the codecs for
    any {!Rsm.MACHINE}, and the key-value store's are included at the end. *)

(** {1 Between replicas} *)

type 'op item_ = { origin : string; rid : int; cmd : 'op Store.command }
(** A client request: the member it came through, its number there. *)

type 'op msg_ =
  | Order of { batch : int; items : 'op item_ list }
      (** requests a member's clients made, cast in the group's total order: every member applies
          them in that order *)
  | Ack of { count : int; digest : string }
      (** sent to every other member: the first [count] orders of this view are applied and on disk
          here, and [digest] is the digest of those orders chained order by order: a member counts
          the acknowledgement only if its own chain after its [count]th order is the same (so it can
          only vouch for the orders it names) *)
  | Begin
      (** cast by every member of a primary view once it knows the view's epoch and has promised it:
          the epoch starts, at every member, once every member's [Begin] is delivered *)
  | Read of { mark : int }
      (** a read marker, cast in the total order like an [Order] (it counts as one) but carrying no
          request: its member answers the reads of its clients that came before the marker was
          applied here from the state at the marker's place, once that place is committed *)

(** {2 State transfer} *)

type position = {
  epoch : int;
  seq : int;
  chain : string;
  history : (int * int) list;
  promise : int;
  member : Store_intf.membership;
}
(** Where a replica's log is: its last epoch, its last write, the digest of its writes
    ({!Store.chain}), its epochs (newest first, each with the write after which it started), and the
    greatest epoch whose start it took part in ({!Store.promise}), and what its data directory's
    identity says of it ({!Store.val-membership}: a member of which cluster, or joining, with no
    vote). *)

type 'op transfer_ =
  | Snapshot of string  (** the whole state ({!Store.snapshot}) *)
  | Suffix of { epoch : int; history : (int * int) list; entries : (int * 'op Store.command) list }
      (** the writes after the receiver's last, and the giver's epochs *)

(** {1 Client protocol}

    A frame is [length (4 bytes, big endian) | version (1 byte) | body]; [length] counts the version
    and body and is at most [max_frame]. A request's body is
    [client (8 bytes) | request number | operation]; a reply's [request number | outcome]. *)

type 'r outcome_ =
  | Done of 'r
  | Unknown of string  (** the request may or may not have taken effect *)
  | Refused of string  (** the request certainly did not take effect *)

type 'op request_ = { client : int64; req : int; op : 'op }
type 'r reply_ = { rreq : int; outcome : 'r outcome_ }

module type S = sig
  type op
  type response
  type item = op item_
  type msg = op msg_
  type transfer = op transfer_
  type outcome = response outcome_
  type request = op request_
  type reply = response reply_

  val encode : vid:string -> msg -> string
  (** [encode ~vid m]: [m] as made in view [vid]; a message that reaches a member in another view
      (one made while the view changed goes out in the next) is ignored there. *)

  val decode : string -> (string * msg, string) result
  val encode_position : position -> string
  val decode_position : string -> (position, string) result
  val encode_transfer : transfer -> string
  val decode_transfer : string -> (transfer, string) result
  val pp_outcome : outcome Fmt.t
  val max_frame : int
  val frame_request : request -> string
  val frame_reply : reply -> string

  val read_frame : Buffer.t -> (string option, string) result
  (** [read_frame b] takes one whole frame's version and body out of the front of [b] if there is
      one; [Error] if the length is over [max_frame]. *)

  val decode_request : string -> (request, string) result
  val decode_reply : string -> (reply, string) result
end

module Make (M : Rsm.MACHINE) : S with type op = M.op and type response = M.response
include S with type op = Op.t and type response = Op.response
