(** ICMP errors as TCP takes them (RFC 1122 4.2.3.9, RFC 5461, RFC 1191): what kind of error, and
    the ports and sequence number of the segment it quotes, which the connection checks (RFC 5927)
    before believing it. *)

type kind =
  | Hard of string  (** protocol or port unreachable: aborts a connection being opened *)
  | Soft of string  (** net or host unreachable, time exceeded: reported *)
  | Frag_needed of int
      (** the largest packet the lower layer can take on the path (RFC 1191: the next hop's MTU less
          the IPv4 header) *)

type t = {
  kind : kind;
  src_port : int;  (** of the quoted segment: this side's port *)
  dst_port : int;
  seq : Tcp_seq.t;
}

val of_quoted : kind -> string -> t option
(** [of_quoted kind tcp] reads the first 8 bytes of the quoted TCP header. *)

val of_icmp : Icmp_packet.t -> quoted:string -> t option

val of_ipv4 : Ipv4.status -> t option
(** The interpretation of IPv4's upcall, for [Tcp.S.create]'s [icmp]. *)

val of_ipv6 : Ipv6.status -> t option
(** The same for IPv6 (TCP over IPv6): port unreachable is hard, the other unreachables soft, packet
    too big gives the MTU less the IPv6 header, the MTU never taken under 1280 (RFC 8201). *)

val pp_kind : kind Fmt.t
