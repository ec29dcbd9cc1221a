(** Rights: an 8-bit set, as in Amoeba, of the operations a capability allows.

    What each bit allows is up to the server that owns the object; the names below are the
    conventions of Consort's servers (the file server reads with [read], makes files with [create],
    and so on). {!all} is the owner's set. *)

type t = private int
(** A set of rights, 0 to 255. *)

val none : t
val all : t

val read : t
(** 0x01 *)

val create : t
(** 0x02 *)

val modify : t
(** 0x04 *)

val destroy : t
(** 0x08 *)

val r4 : t
(** 0x10, server-specific *)

val r5 : t
(** 0x20, server-specific *)

val r6 : t
(** 0x40, server-specific *)

val admin : t
(** 0x80: server administration (std_age, std_status) *)

val of_int : int -> (t, string) result

val of_int_exn : int -> t
(** @raise Invalid_argument outside 0..255 (a programmer error). *)

val to_int : t -> int
val union : t -> t -> t
val inter : t -> t -> t

val subset : t -> t -> bool
(** [subset a b] is [true] when every right of [a] is in [b]. *)

val mem : t -> t -> bool
(** [mem need have] is [subset need have]. *)

val equal : t -> t -> bool

val of_string : string -> (t, string) result
(** [of_string "read,modify"] parses a comma-separated list of the names [read], [create], [modify],
    [destroy], [r4], [r5], [r6], [admin], the words [all] and [none], and numbers ([0x05], [5]);
    white space is allowed around names. Total. *)

val to_string : t -> string
(** [to_string r] is ["all"], ["none"], or the names of its bits joined with commas;
    [of_string (to_string r) = Ok r]. *)

val pp : t Fmt.t
