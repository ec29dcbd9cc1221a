(** Ethernet II headers as values. *)

type t = { dst : Mac_addr.t; src : Mac_addr.t; ethertype : int }

val pp : t Fmt.t
val equal : t -> t -> bool

val decode : Cstruct.t -> (t * Cstruct.t, [> `Msg of string ]) result
(** [decode frame] is the header and the payload after it; it never raises. *)

val encode : t -> Cstruct.t -> unit
(** [encode t buf] writes the header into the first 14 bytes of [buf].
    @raise Invalid_argument if [buf] is shorter. *)

val to_string : t -> string -> string
(** [to_string t payload] is a whole frame. *)
