(** ARP messages (IPv4 over Ethernet only) as values. *)

type op = Request | Reply

type t = {
  op : op;
  sha : Mac_addr.t;  (** sender hardware address *)
  spa : Ipv4_addr.t;  (** sender protocol address *)
  tha : Mac_addr.t;  (** target hardware address *)
  tpa : Ipv4_addr.t;  (** target protocol address *)
}

val pp : t Fmt.t
val equal : t -> t -> bool

val decode : Cstruct.t -> (t, [> `Msg of string ]) result
(** [decode buf] reads the message at the start of [buf] (trailing bytes, such as Ethernet padding,
    are ignored); it never raises. *)

val encode : t -> Cstruct.t -> unit
(** [encode t buf] writes the 28-byte message at the start of [buf].
    @raise Invalid_argument if [buf] is shorter. *)

val to_string : t -> string
