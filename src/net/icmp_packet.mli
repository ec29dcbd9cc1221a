(** ICMP messages as values. *)

type unreachable =
  | Net  (** code 0 *)
  | Host  (** code 1 *)
  | Protocol  (** code 2 *)
  | Port  (** code 3 *)
  | Frag_needed of { mtu : int }  (** code 4, with the next hop's MTU *)
  | Other_unreachable of int

type t =
  | Echo_request of { id : int; seq : int }
  | Echo_reply of { id : int; seq : int }
  | Dest_unreachable of unreachable
  | Time_exceeded of { code : int }  (** 0: TTL, 1: reassembly *)
  | Other of { ty : int; code : int; rest : int }

val pp : t Fmt.t
val equal : t -> t -> bool
val pp_unreachable : unreachable Fmt.t

val decode : Cstruct.t -> (t * Cstruct.t, [> `Msg of string ]) result
(** [decode msg] is the header and the payload of the whole ICMP message [msg], whose checksum is
    checked; it never raises. For errors the payload is the quoted IP header and the start of its
    payload. *)

val encode : t -> Cstruct.t -> unit
(** [encode t msg] writes the header into the first 8 bytes of [msg] and the checksum over all of
    [msg] (the payload must already be there).
    @raise Invalid_argument if [msg] is shorter than 8 bytes. *)

val to_string : t -> string -> string
