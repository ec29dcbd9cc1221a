(** Typed binary codecs with total decoding.

    A ['a t] knows the encoded size of an ['a], writes it into a byte buffer, and reads it back from
    a [Cstruct.t]. Decoding is total: it returns [Error] on truncated, overlong or malformed input
    and never raises. Nothing here uses [Marshal].

    Integers are big-endian; {!varint} is unsigned LEB128 (at most 9 bytes, overlong forms
    rejected); {!zigzag} maps signed integers onto it. *)

type error =
  [ `Truncated of string  (** input ends inside a value of this codec *)
  | `Malformed of string  (** input is not a value of this codec: why *)
  | `Trailing of int  (** [decode_exact]: this many bytes left over *) ]

val pp_error : error Fmt.t

(** Writing cursors. *)
module W : sig
  type t = { mutable buf : Bytes.t; mutable pos : int }
end

(** Reading cursors. *)
module R : sig
  type t = { mutable cs : Cstruct.t; mutable pos : int }

  val remaining : t -> int
end

type 'a t

val name : 'a t -> string

val size : 'a t -> 'a -> int
(** [size c v] is the number of bytes [v] encodes to. *)

val write : 'a t -> W.t -> 'a -> unit
(** [write c w v] writes [size c v] bytes at [w.pos] and advances it.
    @raise Invalid_argument
      if [v] is outside the codec's domain (a programmer error, such as a negative {!varint}). *)

val read : 'a t -> R.t -> 'a
(** [read c r] reads a value at [r.pos] and advances it. Only for use inside {!custom} readers:
    raises an internal exception that {!decode} turns into [Error]. *)

val fail : string -> 'a
(** [fail why] aborts decoding with [`Malformed why]; for {!custom} readers and {!conv} checks. *)

(** {1 Running} *)

val encode : 'a t -> 'a -> Bytes.t
val encode_string : 'a t -> 'a -> string

val encode_into : 'a t -> Bytes.t -> int -> 'a -> int
(** [encode_into c buf off v] writes [v] at [off] and returns the offset after it. *)

val decode : 'a t -> Cstruct.t -> int -> ('a * int, error) result
(** [decode c cs off] reads one value at [off], returning it and the offset after it. *)

exception Decode_error of error

val read_cursor : 'a t -> R.t -> 'a
(** [read_cursor c r] is {!decode_cursor} without a result to allocate: the value, or [Decode_error]
    with what {!decode_cursor} would have returned. *)

val decode_cursor : 'a t -> R.t -> ('a, error) result
(** [decode_cursor c r] reads one value at [r.pos] and leaves [r.pos] after it (on [Error], [r.pos]
    is unspecified). Lets a hot path reuse one cursor instead of allocating one per value. *)

val decode_exact : 'a t -> Cstruct.t -> ('a, error) result
(** [decode_exact c cs] reads one value that must fill [cs]. *)

val decode_string : 'a t -> string -> ('a, error) result
(** [decode_string c s] is [decode_exact c (Cstruct.of_string s)]. *)

(** {1 Primitives} *)

val unit : unit t
(** Zero bytes. *)

val bool : bool t
val uint8 : int t
val uint16 : int t

val uint32 : int t
(** [uint32] values are OCaml [int]s in \[0, 2{^ 32}). *)

val int64 : int64 t

val varint : int t
(** Non-negative [int]s, 1 to 9 bytes. *)

val zigzag : int t
(** Any [int], 1 to 9 bytes, small magnitudes short. *)

val string : ?max:int -> unit -> string t
(** Length-prefixed (varint) bytes; longer than [max] (default 65536) is [`Malformed] on decode and
    [Invalid_argument] on encode. *)

val fixed_string : int -> string t
(** Exactly [n] bytes, no prefix. *)

(** {1 Combinators} *)

val option : 'a t -> 'a option t
val pair : 'a t -> 'b t -> ('a * 'b) t
val tup3 : 'a t -> 'b t -> 'c t -> ('a * 'b * 'c) t
val tup4 : 'a t -> 'b t -> 'c t -> 'd t -> ('a * 'b * 'c * 'd) t

val list : ?max:int -> 'a t -> 'a list t
(** Count-prefixed; more than [max] (default 4096) elements is malformed. *)

val array : ?max:int -> 'a t -> 'a array t

val conv : ?name:string -> ('b -> 'a) -> ('a -> ('b, string) result) -> 'a t -> 'b t
(** [conv to_ of_ c] encodes a ['b] as [to_ b] with [c]; on decode, [of_ a] may refuse a value with
    a reason. *)

val map : ?name:string -> ('b -> 'a) -> ('a -> 'b) -> 'a t -> 'b t
(** [map to_ of_ c] is [conv] with a total [of_]. *)

type 'a case

val case : int -> string -> 'b t -> ('a -> 'b option) -> ('b -> 'a) -> 'a case
(** [case tag name c proj inj]: values for which [proj] is [Some b] are written as the byte [tag]
    followed by [b]. Tags are 0 to 255. *)

val union : string -> 'a case list -> 'a t
(** [union name cases] is a tagged union. Unknown tags are malformed.
    @raise Invalid_argument if two cases share a tag. *)

val custom :
  name:string -> size:('a -> int) -> write:(W.t -> 'a -> unit) -> read:(R.t -> 'a) -> 'a t
(** A codec from hand-written functions over cursors. [read] reports bad input with {!fail} or by
    reading past the end with other codecs. *)

val varint_size : int -> int

val read_varints : R.t -> int array -> unit
(** [read_varints r a] reads [Array.length a] {!varint}s into [a] in one pass, with the same errors
    (raised as {!read} does, for {!custom} readers). *)

val read_varints_at : Cstruct.t -> int -> int array -> int
(** [read_varints_at cs pos a] is {!read_varints} at [pos] of [cs] without a cursor: the offset
    after the numbers.
    @raise Decode_error on bad input, with {!varint}'s errors. *)

val write_varints : W.t -> int array -> unit
(** [write_varints w a] writes each of [a] as a {!varint}.
    @raise Invalid_argument on a negative number. *)

val varints_size : int array -> int
(** The bytes {!write_varints} writes.
    @raise Invalid_argument on a negative number. *)

val write_varints_at : Bytes.t -> int -> int array -> int
(** [write_varints_at b pos a] writes each of [a] as a {!varint} at [pos] of [b], without a cursor,
    and is the offset after them. [a] must have passed {!varints_size}, and [b] must have that many
    bytes from [pos]: neither is checked. *)
