(** The Internet checksum (RFC 1071), with incremental updates (RFC 1624) and pseudo-headers.

    A {e sum} is the folded 16-bit one's-complement sum of some bytes, in network order, between [0]
    and [0xffff]; sums of adjacent pieces are combined with {!add} (the second piece must start at
    an even offset from the first). A {e checksum} is the complement of a sum, as written in a
    header. {!sum} runs in C, 64 bits at a time; {!Reference.sum} is the plain OCaml definition it
    is tested against. *)

val sum : ?init:int -> Cstruct.t -> int
(** [sum ~init cs] is the sum of [cs]'s bytes added to [init] (default 0), read as big-endian 16-bit
    words, an odd last byte padded with zero. *)

val sum_sub : ?init:int -> Cstruct.t -> off:int -> len:int -> int
(** [sum_sub cs ~off ~len] is [sum (Cstruct.sub cs off len)] without allocating the view.
    @raise Invalid_argument if the range is outside [cs]. *)

val add : int -> int -> int
(** [add a b] is the one's-complement sum of two sums. *)

val finish : int -> int
(** [finish s] is the checksum for sum [s]: its complement, 16 bits. *)

val digest : ?init:int -> Cstruct.t -> int
(** [digest cs] is [finish (sum cs)]: what goes in a checksum field. *)

val valid : ?init:int -> Cstruct.t -> bool
(** [valid ~init cs] holds when [cs], whose checksum field is filled in, sums (with [init]) to
    [0xffff]. *)

val adjust : checksum:int -> old_word:int -> new_word:int -> int
(** [adjust ~checksum ~old_word ~new_word] is [checksum] updated for one 16-bit word changed from
    [old_word] to [new_word] (RFC 1624, eqn. 3). *)

val pseudo_ipv4 : src:Ipv4_addr.t -> dst:Ipv4_addr.t -> proto:int -> len:int -> int
(** [pseudo_ipv4 ~src ~dst ~proto ~len] is the sum of the IPv4 pseudo-header of a TCP or UDP segment
    of [len] bytes (RFC 793, 768). *)

(** Whether a transport protocol computes and checks its checksum: a functor parameter (Fox's
    [compute_checksums]). *)
module type POLICY = sig
  val compute : bool
  (** Fill in checksums of packets sent. *)

  val verify : bool
  (** Drop packets received whose checksum is wrong. *)
end

module On : POLICY
module Off : POLICY

(** The plain definition, in OCaml. *)
module Reference : sig
  val sum : ?init:int -> Cstruct.t -> int
end
