(** Member logs: one JSON object per line, the events of one group member
    in the order they happened at that member.

    The lines have exactly these forms (keys may come in any order when
    read; {!to_line} writes them in this order, with no spaces):
    {v
{"ev":"view","me":ID,"view":VID,"members":[ID,...]}
{"ev":"cast","me":ID,"view":VID,"len":N,"digest":D}
{"ev":"send","me":ID,"view":VID,"to":ID,"len":N,"digest":D}
{"ev":"deliver","me":ID,"view":VID,"from":ID,"kind":"cast"|"send","len":N,"digest":D}
{"ev":"exit","me":ID}
    v}
    ID is a non-empty string naming one member incarnation, VID a non-empty
    string naming one view, N a non-negative integer (the payload's length
    in bytes) and D the first 16 hex digits, in lower case, of the SHA-256
    of the payload. Strings are JSON strings: valid UTF-8, with the JSON
    escapes. Nothing else is accepted: no other keys, no repeated keys, no
    other value types, no fractions or exponents in N. *)

type kind = [ `Cast | `Send ]
(** How a message was delivered: as a multicast or point to point. *)

type event =
  | View of { me : string; view : string; members : string list }
      (** [me] installed [view], whose members are listed in rank order *)
  | Cast of { me : string; view : string; len : int; digest : string }
      (** the application of [me] cast a message in [view] *)
  | Send of { me : string; view : string; dst : string; len : int; digest : string }
      (** the application of [me] sent a message to [dst] (key ["to"]) *)
  | Deliver of {
      me : string;
      view : string;
      from : string;
      kind : kind;
      len : int;
      digest : string;
    }  (** [me] delivered, in [view], a message of [from] *)
  | Exit of { me : string }  (** [me] left the group *)

val me : event -> string
(** [me e] is the member whose event [e] is. *)

val equal : event -> event -> bool
(** [equal a b] is [true] iff [a] and [b] are the same event. *)

val pp_kind : kind Fmt.t
(** [pp_kind] prints ["cast"] or ["send"]. *)

val pp : event Fmt.t
(** [pp] prints an event as its line. *)

val to_line : event -> string
(** [to_line e] is the line of [e], without a newline. [of_line (to_line e)]
    is [Ok e] for every event whose fields are valid (see above). *)

val of_line : string -> (event, string) result
(** [of_line s] is the event of line [s] (surrounding JSON whitespace
    allowed), or an error saying what is wrong and at which column. It
    never raises. *)

val output : out_channel -> event -> unit
(** [output oc e] writes the line of [e] and a newline to [oc], and flushes. *)

val read_file : string -> (event list, string) result
(** [read_file path] is the events of the file at [path], one a line, the
    last line's newline optional. An error names the file and the line
    ([path:line: message]), or the system error. *)
