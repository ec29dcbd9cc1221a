(** Keyed functions of a connection's 4-tuple, for what an off-path attacker must not guess: initial
    sequence numbers (RFC 6528), timestamp offsets (RFC 7323 section 7.1), ephemeral port offsets
    (RFC 6056 algorithm 4) and SYN cookies (encoded as Linux does). The pseudo-random function is
    HMAC-SHA-256 from mirage-crypto, keyed by a secret from the operating system's generator
    (getrandom(2), through a small C stub). *)

type t

val create : ?key:string -> unit -> t
(** [create ()] draws a 32-byte key from the system's generator; [key] gives one (for reproducible
    tests). *)

val isn : t -> tuple:string -> now:Consort.Time.t -> Tcp_seq.t
(** RFC 6528: ISN = M + F(4-tuple, secret), M a clock ticking every 4 us. *)

val ts_offset : t -> tuple:string -> int
(** A 32-bit offset for the timestamps of a connection. *)

val port_offset : t -> endpoints:string -> int
(** RFC 6056 algorithms 3 and 4: F(local address, remote address and port). *)

val port_index : t -> endpoints:string -> int
(** RFC 6056 algorithm 4: G(local address, remote address and port), kept apart from F, which picks
    the counter. *)

(** {1 SYN cookies} *)

val mss_table : int array
(** The MSS values a cookie can carry (Linux's [msstab]). *)

val cookie :
  t -> tuple:string -> now:Consort.Time.t -> peer_isn:Tcp_seq.t -> mss:int -> Tcp_seq.t * int
(** [cookie t ~tuple ~now ~peer_isn ~mss] is the ISN of a SYN-ACK sent without state, and the MSS it
    encodes (the largest of {!mss_table} not above [mss]): H1(tuple) + peer ISN + (minute << 24) +
    ((H2(tuple, minute)
    + index) mod 2^24). *)

val check_cookie :
  t -> tuple:string -> now:Consort.Time.t -> peer_isn:Tcp_seq.t -> cookie:Tcp_seq.t -> int option
(** [check_cookie] is the MSS encoded in [cookie] when it was made by {!cookie} for this tuple and
    peer ISN in this minute or the one before. *)

val cookie_ts : ts_now:int -> wscale:int option -> sack:bool -> int
(** The TSval of a cookie SYN-ACK: [ts_now] with its low 6 bits holding the peer's window scale (15
    for none) and SACK-permitted, moved back so as not to exceed [ts_now]. *)

val cookie_ts_options : echo:int -> int option * bool
(** The window scale and SACK-permitted carried back by the TSecr of the ACK that completes the
    handshake. *)
