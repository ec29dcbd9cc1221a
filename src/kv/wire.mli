(** The messages replicas exchange over the group, and the client protocol
    over TCP. Both are versioned: a frame or message starts with its
    version byte; another version is refused with a clear error. *)

(** {1 Between replicas} *)

type item = { origin : string; rid : int; cmd : Store.cmd }
(** A client request: the member it came through, its number there. *)

type transfer = Snapshot of string | Suffix of (int * Store.cmd) list

type msg =
  | Request of item  (** to the sequencer *)
  | Order of { batch : int; items : item list }  (** from the sequencer: apply in this order *)
  | Ack of int  (** every batch up to this one is applied and on disk here *)
  | Summary of { epoch : int; seq : int; history : (int * int) list }  (** at the start of a primary view *)
  | State of { epoch : int; transfer : transfer }  (** from the view's sequencer: the state to start from *)

val encode : vid:string -> msg -> string
(** [encode ~vid m]: [m] as made in view [vid]; a message that reaches a
    member in another view (one made while the view changed goes out in
    the next) is ignored there. *)

val decode : string -> (string * msg, string) result

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
