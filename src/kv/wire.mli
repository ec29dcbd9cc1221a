(** The messages replicas exchange over the group, and the client protocol
    over TCP. Both are versioned: a frame or message starts with its
    version byte; another version is refused with a clear error. *)

(** {1 Between replicas} *)

type item = { origin : string; rid : int; cmd : Store.cmd }
(** A client request: the member it came through, its number there. *)

type msg =
  | Order of { batch : int; items : item list }
      (** requests a member's clients made, cast in the group's total order: every member applies them in that order *)
  | Ack of int  (** the first [n] orders of this view are applied and on disk here *)
  | Begin  (** cast by every member at the start of a primary view: the view's first delivery starts its epoch *)

val encode : vid:string -> msg -> string
(** [encode ~vid m]: [m] as made in view [vid]; a message that reaches a
    member in another view (one made while the view changed goes out in
    the next) is ignored there. *)

val decode : string -> (string * msg, string) result

(** {2 State transfer} *)

type position = { epoch : int; seq : int; chain : string; history : (int * int) list }
(** Where a replica's log is: its last epoch, its last write, the digest
    of its writes ({!Store.chain}), its epochs (newest first, each with the
    write after which it started). *)

type transfer =
  | Snapshot of string  (** the whole state ({!Store.snapshot}) *)
  | Suffix of { epoch : int; history : (int * int) list; entries : (int * Store.cmd) list }
      (** the writes after the receiver's last, and the giver's epochs *)

val encode_position : position -> string
val decode_position : string -> (position, string) result
val encode_transfer : transfer -> string
val decode_transfer : string -> (transfer, string) result

(** {1 Client protocol}

    A frame is [length (4 bytes, big endian) | version (1 byte) | body];
    [length] counts the version and body and is at most {!max_frame}. A
    request's body is [client (8 bytes) | request number | operation]; a
    reply's [request number | outcome]. *)

type outcome =
  | Done of Op.response
  | Unknown of string  (** the request may or may not have taken effect *)
  | Refused of string  (** the request certainly did not take effect *)

val pp_outcome : outcome Fmt.t

type request = { client : int64; req : int; op : Op.t }
type reply = { rreq : int; outcome : outcome }

val max_frame : int
val frame_request : request -> string
val frame_reply : reply -> string

val read_frame : Buffer.t -> (string option, string) result
(** [read_frame b] takes one whole frame's version and body out of the
    front of [b] if there is one; [Error] if the length is over
    {!max_frame}. *)

val decode_request : string -> (request, string) result
val decode_reply : string -> (reply, string) result
