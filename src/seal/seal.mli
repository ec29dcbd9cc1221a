(** Sealed datagrams: a group's traffic authenticated, or authenticated and
    encrypted, under a secret that only its members hold (the [Auth] and
    [Privacy] properties).

    [Make (T)] is a transport with [T]'s addresses that seals every
    datagram its users send, the stack's and the side channel's alike
    (gossip, merge requests, Install), and opens every datagram it
    receives before anyone above sees it. Whoever lacks the secret can
    neither join (its merge requests and Installs do not open), nor inject
    a cast or a view, nor, with [Privacy], read a payload.

    {2 The wire}

    A sealed datagram is a 34-byte header, the payload (in clear with
    [Auth]; with [Privacy], a zero byte and the payload, encrypted), then
    (with [Auth]) a zero byte encrypted, and a 16-byte tag:

    {v
    0      magic 0xC5
    1      mode: 1 Auth, 2 Privacy
    2-17   sender id: 16 random bytes drawn when the connection opens
    18-25  counter: this sender's datagrams, from 1, big-endian
    26-33  sender's wall clock, milliseconds since the epoch, big-endian
    34-    payload, then the tag
    v}

    Each sender seals under its own key, HMAC-SHA256 of the group secret
    and its id, with ChaCha20-Poly1305 (RFC 8439) and the counter as
    nonce, so that no two senders ever share a nonce under one key: with
    [Privacy] the header is associated data and the marker and payload
    are encrypted; with [Auth] the header and the payload are associated
    data and only the marker is encrypted (the AEAD as a MAC, Poly1305's
    speed). The cryptography is mirage-crypto's.

    {2 What is dropped, and counted}

    A receiver checks the tag first and only then anything else, so that a
    forgery changes no state. It drops, each under its own counter: a
    datagram too short or not sealed ([malformed], [clear]); one whose tag
    does not verify ([bad_tag]: altered, forged, or sealed with another
    secret); one sealed in the other mode ([wrong_mode]); a replay
    ([replayed]: a counter already seen from that sender, or older than
    the 1024 most recent); one whose clock is more than [freshness] away
    from the receiver's ([stale]: a replay from a sender the receiver no
    longer remembers, or a clock far off). It remembers at most 4096
    senders (the least recently heard are forgotten first), so a flood of
    forged sender ids costs one key derivation each and no memory. *)

type mode = Auth | Privacy

val pp_mode : mode Fmt.t

type secret
(** A group secret: 32 bytes. Never printed: its printer shows a digest. *)

val secret_of_string : string -> (secret, string) result
(** The raw 32 bytes. *)

val pp_secret : secret Fmt.t
(** Prints [secret:] and the first 8 hex digits of the SHA-256 of a
    label and the secret: enough to tell two keys apart, nothing of the key. *)

val generate : unit -> secret
(** 32 bytes from the system's random generator (getrandom). *)

val write_key : string -> secret -> (unit, string) result
(** [write_key path s] writes a key file (one line: [consort-key-v1:] and
    the base64url of the secret), created with mode 0600; it refuses to
    overwrite an existing file. *)

val read_key : string -> (secret, string) result
(** [read_key path] reads a key file; refuses one that others than its
    owner can read or write (mode must be 0600 or stricter), one that is
    malformed, or a secret of the wrong length. Errors are one line and
    never contain key material. *)

type stats = {
  sealed : int;  (** datagrams sent *)
  opened : int;  (** datagrams received, verified and handed up *)
  malformed : int;
  clear : int;  (** received without a seal *)
  bad_tag : int;
  wrong_mode : int;
  replayed : int;
  stale : int;
}

val pp_stats : stats Fmt.t
val overhead : int
(** 51: header, marker byte and tag; the connection's MTU is the inner
    one less this. *)

module Make (T : Consort.Transport.S) : sig
  include Consort.Transport.S with type address = T.address and type timer = T.timer

  val wrap : ?freshness:Consort.Time.t -> ?wall:(unit -> float) -> T.t -> (secret * mode) option -> t
  (** [wrap inner (Some (secret, mode))] seals over [inner]; [wrap inner
      None] adds nothing (datagrams pass as they are). [freshness]
      (default 60 s) bounds the clock difference accepted; [wall] (default
      [Unix.gettimeofday]) is the clock written into and compared with
      headers. *)

  val inner : t -> T.t
  val stats : connection -> stats

  val senders : connection -> int
  (** The senders this connection remembers (at most 4096). *)
end
