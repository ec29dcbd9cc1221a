(** Member logs: one JSON object per line, the events of one group member in the order they happened
    at that member.

    The lines have these forms ({!to_line} writes the keys in this order, with no spaces; a reader
    accepts them in any order):
    {v
{"ev":"view","t":T,"me":ID,"view":VID,"members":[ID,...]}
{"ev":"cast","t":T,"me":ID,"view":VID,"seq":S,"len":N,"digest":D}
{"ev":"send","t":T,"me":ID,"view":VID,"to":ID,"seq":S,"len":N,"digest":D}
{"ev":"deliver","t":T,"me":ID,"view":VID,"from":ID,"kind":K,"seq":S,"len":N,"digest":D}
{"ev":"block","t":T,"me":ID,"view":VID}
{"ev":"refused","t":T,"me":ID,"view":VID,"kind":K,"to":ID,"seq":S,"len":N,"digest":D,"reason":R}
{"ev":"lost","t":T,"me":ID,"kind":K,"seq":S,"reason":R}
{"ev":"exit","t":T,"me":ID}
{"ev":"live","t":T,"me":ID,"casts":N}
{"ev":"trans","t":T,"me":ID,"view":VID[,"next":VID],"members":[ID,...]}
{"ev":"quorum","t":T,"me":ID,"view":VID,"primary":B,"votes":N,"needed":N}
    v}
    - [t] is the time of the event in nanoseconds (a non-negative integer): the simulator's virtual
      time, or the wall clock since the Unix epoch for real processes. It is informative; the
      checker does not order events of different members by it.
    - ID is a non-empty string naming one member incarnation, VID a non-empty string naming one
      view, K ["cast"] or ["send"], R a non-empty string (a reason for people to read).
    - S, the sequence number, identifies a message together with its origin (the [me] of a cast or
      send, the [from] of a delivery): the application of a member numbers each cast or send it
      attempts, from 1, one counter for both kinds, when it calls the API. Two messages with equal
      payloads are two messages.
    - N is a non-negative integer (a payload's length in bytes) and D the first 16 hex digits, in
      lower case, of the SHA-256 of the payload.
    - [cast] and [send] say the message entered the stack, in view VID (a message the API accepted
      while the member was blocked goes out, and is logged, in the next view).
    - [block]: a view change started at this member, in view VID: it sends nothing more until it
      installs its next view.
    - [refused]: the API refused a cast or send (["to"] only for a send); no layer counts it, it is
      never delivered.
    - [lost]: the runtime reports that a message it accepted (sent or still queued) will not be
      delivered.
    - [exit]: the member left the group.
    - [trans]: the transitional view (extended virtual synchrony) of [me] as it goes from regular
      view [view] into [next]: the members of [view] that go on with it; the deliveries after it and
      before the [view] line of [next] are in [view]'s transitional part. Without [next], [me] is
      leaving the group (its members: itself), and the deliveries after it come before its [exit].
    - [quorum]: with the [Primary] property, right after a [view] line: whether [view] is primary (B
      is [true] or [false]), the votes of its members and the quorum.
    - [live]: written when a run ends, after a quiet period, for a member that is alive and
      connected to the other members that have a [live] line; N is the number of casts the API
      accepted from it (refused ones not counted).

    The reader ignores keys it does not know; a known key must have the type above, and may appear
    once. Numbers are JSON integers (no fraction or exponent) that fit in 62 bits. *)

type kind = [ `Cast | `Send ]
(** How a message was sent or delivered: as a multicast or point to point. *)

type event =
  | View of { t : int; me : string; view : string; members : string list }
      (** [me] installed [view], whose members are listed in rank order *)
  | Cast of { t : int; me : string; view : string; seq : int; len : int; digest : string }
      (** cast [seq] of [me] entered the stack in [view] *)
  | Send of {
      t : int;
      me : string;
      view : string;
      dst : string;
      seq : int;
      len : int;
      digest : string;
    }  (** send [seq] of [me] to [dst] (key ["to"]) entered the stack in [view] *)
  | Deliver of {
      t : int;
      me : string;
      view : string;
      from : string;
      kind : kind;
      seq : int;
      len : int;
      digest : string;
    }  (** [me] delivered, in [view], message [seq] of [from] *)
  | Block of { t : int; me : string; view : string }
      (** a view change started at [me], in [view] *)
  | Refused of {
      t : int;
      me : string;
      view : string;
      kind : kind;
      dst : string option;  (** key ["to"], for a send *)
      seq : int;
      len : int;
      digest : string;
      reason : string;
    }  (** the API refused message [seq] of [me] *)
  | Lost of { t : int; me : string; kind : kind; seq : int; reason : string }
      (** the runtime reports accepted message [seq] of [me] lost *)
  | Exit of { t : int; me : string }  (** [me] left the group *)
  | Live of { t : int; me : string; casts : int }
      (** at the end of a run, [me] is alive and connected; the API accepted [casts] casts from it
      *)
  | Trans of { t : int; me : string; view : string; next : string option; members : string list }
      (** [me] goes from [view] into [next] with [members] (key ["members"]): its transitional view;
          without [next], [me] leaves the group *)
  | Quorum of { t : int; me : string; view : string; primary : bool; votes : int; needed : int }
      (** [me] decided that [view] is primary or not: its members have [votes], the quorum is
          [needed] *)

val me : event -> string
(** [me e] is the member whose event [e] is. *)

val time : event -> int
(** [time e] is the [t] of [e]. *)

val equal : event -> event -> bool
(** [equal a b] is [true] iff [a] and [b] are the same event. *)

val pp_kind : kind Fmt.t
(** [pp_kind] prints ["cast"] or ["send"]. *)

val pp : event Fmt.t
(** [pp] prints an event as its line. *)

val to_line : event -> string
(** [to_line e] is the line of [e], without a newline. [of_line (to_line e)] is [Ok e] for every
    event whose fields are valid (see above). *)

(** Why a line is not an event. *)
type error =
  | Syntax of string  (** not one JSON value (the parser's message) *)
  | Not_an_object
  | Missing_key of string
  | Repeated_key of string
  | Bad_value of { key : string; expected : string }
  | Unknown_event of string

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

val of_line : string -> (event, error) result
(** [of_line s] is the event of line [s] (surrounding JSON whitespace allowed), or what is wrong. It
    never raises. *)

val output : out_channel -> event -> unit
(** [output oc e] writes the line of [e] and a newline to [oc], and flushes. *)

(** Why a file cannot be read. *)
type file_error =
  | Io of string  (** the system's message, naming the file *)
  | Line of { path : string; line : int; error : error }

val pp_file_error : file_error Fmt.t
(** [pp_file_error] prints ["PATH:LINE: message"] or the system's message. *)

val read_file : string -> (event list, file_error) result
(** [read_file path] is the events of the file at [path], one a line, the last line's newline
    optional, a carriage return before a newline ignored. *)
