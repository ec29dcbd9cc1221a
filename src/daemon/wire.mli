(** The daemon's client protocol (see doc/protocol.md): length-prefixed binary frames over a stream
    socket.

    A frame is a 4-byte big-endian length [L] (the bytes that follow, at least 1) and [L] bytes: a
    type byte and its fields. Integers are big-endian ([u8], [u16], [u32], [u64] below 2{^ 62}); a
    string is a [u32] length and its bytes; a list is a [u32] count and its elements. The decoders
    are total (any bytes give a value or an error, never an exception) and canonical (a decoded
    value encodes to the same bytes). *)

val version : int
(** The highest protocol version this code speaks: [2] (version 1 is also spoken). *)

val min_version : int

(** Error codes, in ERROR frames. *)
type code =
  | Malformed  (** 1: a frame that does not decode *)
  | Version  (** 2: no version in common *)
  | Too_big  (** 3: a frame over the limit, or a message over the stack's *)
  | Flow_control  (** 4 *)
  | Not_member  (** 5: a send to a member not in the view *)
  | Leaving  (** 6 *)
  | Exited  (** 7 *)
  | No_such_handle  (** 8 *)
  | Handle_in_use  (** 9 *)
  | Bad_props  (** 10 *)
  | Bad_params  (** 11 *)
  | Bad_address  (** 12: a peer address that does not parse *)
  | Join_failed  (** 13: no free port, a key the daemon lacks, ... *)
  | Not_hello  (** 14: a request before HELLO, or a second HELLO *)
  | Overloaded  (** 15: too many clients or members *)
  | Bad_switch  (** 16 *)
  | Not_primary  (** 17: a cast in a view that is not primary (property [Primary]) *)
  | Not_allowed
      (** 18: a peer the Unix socket's allow-list does not name, or a TCP client without the
          daemon's token (fatal) *)
  | Unknown_code of int  (** a code from a newer daemon *)

val code_to_int : code -> int
val code_of_int : int -> code
val code_name : code -> string

(** Client to daemon. Every request but HELLO names a member by the handle the client chose at JOIN.
*)
type request =
  | Hello of { min_version : int; max_version : int; name : string; token : string }
      (** [token]: the daemon's token ([consortd --token]), or [""]: the field is absent then (a
          HELLO of version 1 has none). *)
  | Join of {
      handle : int;
      group : string;
      props : string;
      params : string;
      flags : int;
      peers : string list;
    }
  | Leave of { handle : int }
  | Cast of { handle : int; req : int; payload : string }
  | Send of { handle : int; req : int; dst : string; payload : string }
  | Suspect of { handle : int; ids : string list }
  | Block_ok of { handle : int }
  | Switch of { handle : int; props : string; params : string }
  | Ping of { cookie : int }

val flag_report : int
(** JOIN flag: report SENT and LOST for each message (for member logs). *)

type kind = [ `Cast | `Send ]

(** Daemon to client: replies (HELLO_OK, OK, ERROR, PONG: one per request, in order) and upcalls
    (the others). *)
type event =
  | Hello_ok of { version : int; max_frame : int; max_queue : int; server : string }
  | Ok of { handle : int; value : int; info : string }
  | Error of { handle : int; code : code; reason : string }
  | Pong of { cookie : int }
  | View of {
      handle : int;
      vid : string;
      ltime : int;
      rank : int;
      coordinator : string;
      members : string list;
      joined : string list;
      left : string list;
      why : string list;  (** one per [left] member *)
    }
  | Cast_up of { handle : int; origin : string; payload : string }
  | Send_up of { handle : int; origin : string; payload : string }
  | Block of { handle : int }
  | Flow of { handle : int; blocked : bool }
  | Exit of { handle : int }
  | Sent of { handle : int; req : int; kind : kind; view : string }
  | Lost of { handle : int; req : int; reason : string }
  | Refused of { handle : int; req : int; code : code; reason : string }
      (** version 2: a CAST or SEND refused (accepted ones get no reply) *)

val no_handle : int
(** [0xffffffff]: the handle of an ERROR about the connection itself. *)

val encode_request : request -> string
(** The whole frame, its length prefix included. *)

val decode_request : string -> (request, string) result
(** A frame's body (without the prefix). *)

val encode_event : event -> string
val decode_event : string -> (event, string) result

val pp_request : request Fmt.t
(** One line, payloads by length only. *)

(** {1 Cutting a byte stream into frames} *)

type framer

val framer : max:int -> framer
(** [max]: the largest body accepted. *)

val feed : framer -> Bytes.t -> int -> int -> unit
(** [feed f b off len] appends bytes read from the stream. *)

val read : framer -> Unix.file_descr -> int
(** [read f fd] reads up to 64 KiB from [fd] straight into the framer (as {!feed} would append
    them); says how many ([0]: the end of the stream).
    @raise Unix.Unix_error as [Unix.read]. *)

val next : framer -> [ `Frame of string | `Need | `Too_big of int | `Empty_frame ]
(** The next whole frame's body, if there is one. [`Too_big n] and [`Empty_frame] are fatal: the
    stream cannot be resynchronised. Never holds more than [max] + 4 bytes of a partial frame beyond
    one [feed]. *)

val next_request :
  framer -> [ `Frame of (request, string) result | `Need | `Too_big of int | `Empty_frame ]
(** {!next} and {!decode_request} at once, without copying the body. *)

val next_event :
  framer -> [ `Frame of (event, string) result | `Need | `Too_big of int | `Empty_frame ]

val buffered : framer -> int
(** Bytes held. *)

val skip : framer -> int -> int
(** [skip f n] drops up to [n] bytes held; says how many. *)

val peek_u32 : framer -> int -> int option
(** The big-endian [u32] at this offset of the bytes held, if held. *)
