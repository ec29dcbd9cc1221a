(** Messages: typed headers in front of an off-heap body.

    On the way down each layer {!push}es its encoded header in front of the message, into headroom
    reserved when the message was made; nothing is copied while there is room. On the way up each
    layer {!pull}s its own header off the front, also without copying.

    A message owns one reference to each piece of its body. Every function that takes a message and
    returns one ([push], [pull]) moves that ownership: the argument must not be used afterwards.
    {!retain} makes a second owner (for retransmission buffers); {!release} gives one up. Versions
    made by {!retain} share header storage safely: a push in front of an older version copies
    instead of overwriting a newer one's bytes. *)

type t

val default_headroom : int
(** Bytes of header space reserved by {!create} unless told otherwise (64). *)

val create : ?headroom:int -> Iovecs.t -> t
(** [create body] is a message with no headers whose body is [body] (ownership moves into the
    message). *)

val of_string : Pool.t -> string -> t
(** [of_string pool s] is a message whose body is a copy of [s]. *)

val of_iovec : Iovec.t -> t
(** [of_iovec v] is a received datagram: headers still at the front of the body, to be pulled. *)

val empty : unit -> t
(** A message with an empty body, for control messages. *)

val push : 'h Codec.t -> 'h -> t -> t
(** [push c h t] is [t] with [h] encoded in front. *)

val push_bytes : Bytes.t -> t -> t
(** [push_bytes b t] is [t] with the bytes of [b] in front, as headers already encoded. Where [t]
    has no pushed header, [b] becomes its header storage, shared and never written (a later push
    copies): [b] must not change afterwards. Otherwise [b] is copied in front, as {!push} would. *)

val pull : 'h Codec.t -> t -> ('h * t, Codec.error) result
(** [pull c t] decodes a header from the front of [t] and returns it with the rest. On [Error], [t]
    is unchanged and still owned by the caller. *)

val pull_pushed : int -> t -> t
(** [pull_pushed n t] is [t] without the first [n] bytes of its pushed headers (read already, with
    {!headers}). Ownership moves as with {!pull}.
    @raise Invalid_argument if [t] has fewer pushed bytes. *)

val pull_bytes : Bytes.t -> t -> t option
(** [pull_bytes b t] is [Some t'], [t] without the bytes [b], if [t]'s pushed headers begin with
    exactly these bytes, and [None] otherwise ([t] unchanged and still the caller's). Ownership
    moves to [t'] as with {!pull}. Bytes received in the body are not looked at. *)

val push_fields : int -> int -> int array -> t -> t
(** [push_fields b0 b1 a t] is [t] with the bytes [b0] and [b1] and then each of [a] as a
    {!Codec.varint} in front, written in place with no codec (a compressed header).
    @raise Invalid_argument
      if [b0] or [b1] is not a byte or a number of [a] is negative ([t] is then still the caller's).
*)

val pull_fields : int -> int array -> t -> t
(** [pull_fields skip a t] reads [Array.length a] {!Codec.varint}s into [a] after the first [skip]
    bytes of [t] (looked at already, with {!byte_at}), and is [t] without them. Ownership moves as
    with {!pull}.
    @raise Codec.Decode_error
      on bad input ([t] is then still the caller's; [a] may have been written). *)

val pull_then :
  'h Codec.t -> t -> 'x -> ok:('x -> 'h -> t -> unit) -> error:(Codec.error -> t -> unit) -> unit
(** [pull_then c t x ~ok ~error] is [ok x h t'] if [pull c t] is [Ok (h, t')] and [error e t] if it
    is [Error e], without allocating the result (the way up of a stack). *)

val length : t -> int
(** Bytes of headers and body not yet pulled. *)

val header_length : t -> int
(** Bytes of pushed headers. *)

val body : t -> Iovecs.t
(** [body t] is a new owner of what is left of [t] after its headers: for pushed messages the
    original body, for received ones the bytes after the pulled headers. [t] stays live. Pushed
    headers not yet pulled are not included. *)

val blit_to : t -> Cstruct.t -> int -> int
(** [blit_to t dst off] copies all of [t]'s bytes (headers then body) into [dst] at [off] and
    returns the number of bytes copied. *)

val headers : t -> Bytes.t * int * int
(** [headers t] is the buffer, offset and length of [t]'s pushed headers, valid until [t] is next
    used: the first piece of a scatter-gather write. *)

val iter_body : (Cstruct.buffer -> int -> int -> unit) -> t -> unit
(** [iter_body f t] calls [f buf off len] on each non-empty piece of [t]'s body after its headers,
    in order, without copying or taking references: the other pieces of a scatter-gather write. *)

val body_string : t -> string
(** [body_string t] is a copy of what {!body} would give, in one string, made with one copy and no
    other allocation. [t] stays live. *)

val to_iovec : Pool.t -> t -> Iovec.t
(** [to_iovec pool t] is one fresh slice holding all of [t]'s bytes, the form in which it crosses a
    network. [t] stays live. *)

val to_string : t -> string
(** All of [t]'s bytes (headers then body) as a string, for tests. *)

val retain : t -> t
val release : t -> unit

(** {1 Taken apart}

    A message whose body is one slice, seen as its header storage and that slice: a store that keeps
    many messages (a retransmission buffer) holds these parts in flat arrays, so that keeping a
    message leaves no object on the heap for the collector to promote. *)

val is_simple : t -> bool
(** What is left of [t]'s body is one slice (or nothing). *)

val bare_slice_length : t -> int
(** [slice_length t] if [t] has no pushed header and is simple
    ([header_length t = 0 && is_simple t]), else [-1]: one call where a store that keeps the slice
    asks both. *)

val head_bytes : t -> Bytes.t
(** The buffer holding [t]'s pushed headers, from {!head_offset} to its end. A store that keeps it
    must not write it, nor pass it where it could be written. *)

val head_offset : t -> int

val slice_segment : t -> Segment.t
(** The segment of a simple message's body slice.
    @raise Invalid_argument if the body is empty ({!slice_length} 0). *)

val slice_offset : t -> int
(** Where a simple message's body starts in its segment's buffer. *)

val slice_length : t -> int

val assemble : Bytes.t -> int -> Segment.t -> off:int -> len:int -> t
(** [assemble buf hoff seg ~off ~len] is a new message with the headers of [buf] from [hoff] (never
    written: a push in front copies) and the body [len] bytes of [seg] at [off], taking a reference
    of [seg]; [seg] is not used if [len] is 0. *)

val is_live : t -> bool
val pp : t Fmt.t

val first_byte : t -> int
(** The first byte of [t] (its first header, or its body), [-1] if [t] is empty. *)

val byte_at : t -> int -> int
(** [byte_at t k] is the byte at offset [k] of [t] (headers, then the body not yet pulled), or -1
    past its end. *)
