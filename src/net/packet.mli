(** Packets: one frame buffer with headroom, for the TCP/IP stack.

    A packet is a window [\[off, off+len)] on a buffer taken from a {!Consort.Pool}. On the way down
    each protocol {!push}es its header in front of the window (into headroom reserved when the
    packet was made); on the way up each protocol {!pull}s its header off the front. A packet's
    bytes are copied at most once: when application data is put into it. Trailers (Ethernet padding)
    are written with {!extend}.

    A packet owns one reference to its buffer; {!release} gives it up. {!retain} makes a second
    owner of the same bytes (TCP keeps sent segments for retransmission this way). *)

type t

val default_headroom : int
(** Room for Ethernet, IPv4 with options and TCP with options (128). *)

val create : ?headroom:int -> Consort.Pool.t -> int -> t
(** [create pool n] is a packet with an [n]-byte payload window (contents unspecified) and
    [headroom] bytes free in front of it. *)

val of_string : ?headroom:int -> Consort.Pool.t -> string -> t

val of_iovec : Consort.Iovec.t -> t
(** [of_iovec v] is a received frame: the window is all of [v]. *)

val cstruct : t -> Cstruct.t
(** The window: this layer's header and everything after it. *)

val length : t -> int

val push : t -> int -> Cstruct.t
(** [push t n] grows the window by [n] bytes at the front and returns a view of those bytes, for the
    caller to write its header into.
    @raise Invalid_argument if there is not enough headroom. *)

val pull : t -> int -> (unit, [ `Truncated ]) result
(** [pull t n] shrinks the window by [n] bytes at the front (after the caller has read its header).
*)

val trim : t -> int -> unit
(** [trim t n] keeps only the first [n] bytes of the window (an IP packet shorter than its Ethernet
    frame). *)

val extend : t -> int -> Cstruct.t
(** [extend t n] grows the window by [n] bytes at the end, within the buffer, and returns a view of
    them.
    @raise Invalid_argument if the buffer has no room. *)

val truesize : t -> int
(** [truesize t] is the size of the pool segment [t] keeps alive: what holding it costs, whatever
    its length. *)

val segment_id : t -> int
(** The identity of that segment (packets from one segment share it). *)

val retain : t -> t
val release : t -> unit
val to_string : t -> string
val pp : t Fmt.t
