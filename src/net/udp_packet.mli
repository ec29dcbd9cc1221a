(** UDP headers as values. *)

type t = { src_port : int; dst_port : int }

val pp : t Fmt.t
val equal : t -> t -> bool

val decode : ?pseudo:int -> Cstruct.t -> (t * Cstruct.t, [> `Msg of string ]) result
(** [decode ~pseudo dgram] is the header and payload of [dgram] (trimmed to the length field). With
    [pseudo] (the pseudo-header's sum, see {!Checksum.pseudo_ipv4}) a non-zero checksum is verified.
    It never raises. *)

val encode : ?pseudo:int -> t -> Cstruct.t -> unit
(** [encode ~pseudo t dgram] writes the header into the first 8 bytes of [dgram] (the payload must
    already follow it), the length of all of [dgram], and, with [pseudo], the checksum (zero
    without).
    @raise Invalid_argument if [dgram] is shorter than 8 or longer than 65535 bytes. *)

val to_string : ?pseudo:int -> t -> string -> string
