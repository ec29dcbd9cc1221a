(** Sealed datagrams: a group's traffic authenticated, or authenticated and encrypted, under a
    secret that only its members hold (the [Auth] and [Privacy] properties).

    [Make (T)] is a transport with [T]'s addresses that seals every datagram its users send, the
    stack's and the side channel's alike (gossip, merge requests, Install), and opens every datagram
    it receives before anyone above sees it. Whoever lacks the secret can neither join (its merge
    requests and Installs do not open), nor inject a cast or a view, nor, with [Privacy], read a
    payload.

    {2 The wire}

    A sealed datagram is a 34-byte header, the payload (in clear with [Auth]; with [Privacy], a zero
    byte and the payload, encrypted), then (with [Auth]) a zero byte encrypted, and a 16-byte tag:

    {v
    0      magic 0xC5
    1      mode: 1 Auth, 2 Privacy; 3 and 4 the same under a view key (Rekey)
    2-17   sender id: 16 random bytes drawn when the connection opens
    18-25  counter: this sender's datagrams, from 1, big-endian
    26-33  sender's wall clock, milliseconds since the epoch, big-endian
    34-    payload, then the tag
    v}

    (modes 3 and 4: bytes 34-41 are the view key's id, and the payload starts at 42).

    Each sender seals under its own key, HMAC-SHA256 of the group secret, the group's name and its
    id (so that two groups sharing a key file open none of each other's datagrams), with
    ChaCha20-Poly1305 (RFC 8439) and the counter as nonce, so that no two senders ever share a nonce
    under one key: with [Privacy] the header is associated data and the marker and payload are
    encrypted; with [Auth] the header and the payload are associated data and only the marker is
    encrypted (the AEAD as a MAC, Poly1305's speed). The AEAD is OpenSSL's
    ({!Consort_crypto.Chacha}, in mirage-crypto's format, checked both ways in [test_cap gcm]; 8
    times mirage-crypto's speed on 60 KB, 4 times on 1 KB, per [consort bench rpc]); X25519, HMAC
    and the random numbers are mirage-crypto's.

    {2 What is dropped, and counted}

    A receiver checks the tag first and only then anything else, so that a forgery changes no state.
    It drops, each under its own counter: a datagram too short or not sealed ([malformed], [clear]);
    one whose tag does not verify ([bad_tag]: altered, forged, or sealed with another secret); one
    sealed in the other mode ([wrong_mode]); a replay ([replayed]: a counter already seen from that
    sender, or older than the 1024 most recent); one whose clock is more than [freshness] away from
    the receiver's ([stale]: a replay from a sender the receiver no longer remembers, or a clock far
    off). It remembers at most 4096 senders (the least recently heard are forgotten first), so a
    flood of forged sender ids costs one key derivation each and no memory.

    A receiver's replay window is its own, so the seal alone would let a datagram captured on its
    way to one member be replayed to another that has not seen its counter. What is sealed names the
    destination wherever it matters: Bottom's send header carries the destination's rank (with its
    stamp, one endpoint of one view), and the side channel's messages to one member carry its id;
    both are authenticated here, and the receiver drops what names another member
    ([bottom.misdirected], [group.side_misdirected]). The header itself (its layout above) names no
    destination, so casts, which every member receives, cost nothing more.

    {2 Per-view keys (property [Rekey])}

    The group secret admits: whoever holds it may join. A member that left or was excluded still
    holds it, so with rekeying (on by default with [Auth] and [Privacy]: {!rekey_param},
    [seal.rekey=false] turns it off) it seals only the side channel, and each view's stack traffic
    goes under a key of that view:

    - each member draws an X25519 key pair when its transport is made (each process start); its
      public key travels in its member record (gossip, merge requests, Installs), under the group
      secret;
    - the member that makes a view (the coordinator of the flush, or the one a partition merges
      into) draws a fresh 32-byte view key and puts it in the Install wrapped for each member of the
      view and no one else (not the members excluded or leaving, which get the Install too):
      ChaCha20-Poly1305 (a random 12-byte nonce, 60 bytes in all) under HMAC-SHA256 of the X25519
      shared secret of maker and member, over the view id, both ids, both public keys and the
      SHA-256 of the Install less its keys. A member installs a view only if its key opens, with the
      maker's public key as the member's current view knows it when the maker is in that view: an
      Install altered, or made by anyone but the maker, brings no key and is refused
      ([group.no_view_key]). A view of one draws its own key;
    - as a member installs a view, its stack's datagrams are sealed under per-sender keys derived
      from the view key as above (HMAC-SHA256 of the view key and the sender id), in modes 3 (Auth)
      and 4 (Privacy), whose header has 8 more bytes: the view key's id (a digest of it), so the
      receiver knows at once whether it holds the key;
    - a receiver holds one view key, its current view's: a datagram under any other (an earlier
      view's, one from a view not yet installed here, or a made-up id) is dropped before any
      cryptography ([unknown_key]). Keeping the previous view's key for datagrams in flight at the
      flush would buy nothing, since the previous view's stack is stopped at the install and Bottom
      drops its datagrams, and it would let a member excluded at that view change seal datagrams for
      the new view's stack under the key it still holds. Datagrams of the new view that reach a
      member before its Install are dropped as they were before (the reliable layers send them
      again);
    - with rekeying, a datagram under the group secret that is not the side channel's, or under a
      view key that is, is dropped ([wrong_key]): the secret alone passes nothing to a stack. The
      datagrams between the servers of a client-server group and their clients
      ({!Consort_group.Cltsvr}, first byte {!Consort_group.Group.client_magic}) go under the group
      secret as the side channel's do: clients hold the secret, never a view key.

    So a member excluded (or gone) at a view change, still running, holding the group secret, its
    key pair and every key it ever had, and capturing every datagram, can neither read a payload of
    a later view (with [Privacy]) nor pass a datagram to a later view's stack. It can still ask to
    join again, as any holder of the secret can: to keep it out for good, give the others a new
    secret. Memory is bounded: one view key, two sender keys (the secret's and the view key's) per
    remembered sender; a stranger makes a member hold no key. Members with and without rekeying
    never merge (each reports the other as an incompatible stack). Keys have no printer and never
    reach a log. *)

type mode = Auth | Privacy

val pp_mode : mode Fmt.t

type secret
(** A group secret: 32 bytes. Never printed: its printer shows a digest. *)

val secret_of_string : string -> (secret, string) result
(** The raw 32 bytes. *)

val pp_secret : secret Fmt.t
(** Prints [secret:] and the first 8 hex digits of the SHA-256 of a label and the secret: enough to
    tell two keys apart, nothing of the key. *)

val generate : unit -> secret
(** 32 bytes from the system's random generator (getrandom). *)

val write_key : string -> secret -> (unit, string) result
(** [write_key path s] writes a key file (one line: [consort-key-v1:] and the base64url of the
    secret), created with mode 0600; it refuses to overwrite an existing file. *)

val read_key : string -> (secret, string) result
(** [read_key path] reads a key file ({!read_private}); refuses one that is malformed, or a secret
    of the wrong length. Errors are one line and never contain key material. *)

val read_private : string -> (string, string) result
(** [read_private path]: the bytes of a file only this user may read (a key file, consortd's token),
    opened once; what is checked is the file opened ([fstat] of its descriptor): a regular file,
    owned by this process's effective user or root, that no one else may read or write (mode 0600 or
    stricter), of at most 4096 bytes. One-line errors, never with the file's contents. *)

type stats = {
  sealed : int;  (** datagrams sent *)
  opened : int;  (** datagrams received, verified and handed up *)
  malformed : int;
  clear : int;  (** received without a seal *)
  bad_tag : int;
  wrong_mode : int;
  replayed : int;
  stale : int;
  unknown_key : int;  (** under a view key this member does not hold *)
  wrong_key : int;
      (** with Rekey: a stack's datagram under the group secret, or the side channel's under a view
          key *)
  unsent : int;  (** with Rekey: a stack's datagram to send before any view key (none is sent) *)
  rekeys : int;  (** view keys installed *)
}

val pp_stats : stats Fmt.t

val stats_list : stats -> (string * int) list
(** The counters by name, as [consort member] prints them ([seal.NAME]). *)

val overhead : int
(** 51: header, marker byte and tag; the connection's MTU is the inner one less this. *)

val overhead_rekeyed : int
(** 59, with Rekey: the view key's id is 8 bytes more. *)

val freshness_param : string
(** ["seal.freshness"] (default 60 s, at least 100 ms): the largest difference accepted between a
    sender's clock (as its datagrams carry it) and the receiver's. A datagram that opens but is
    further off is dropped ([stale]), and the receiver warns, at most every 10 s per connection,
    naming the peer's address, its sender id and the offset: a clock far off splits a group, and
    says so. *)

val rekey_param : string
(** ["seal.rekey"] (default [true]): whether a member sealing with [Auth] or [Privacy] rekeys at
    each view change. *)

(** {2 What a member holds}

    For tests of what a member can still do once it has left or was excluded: the keys it held at
    some moment, to open or seal bytes with as an attacker would. No printer; nothing here reaches a
    log. *)

type held

val open_held : held -> string -> string option
(** [open_held h bytes]: the payload of a sealed datagram (as captured on the wire) if the keys of
    [h] open it (the group secret, or the view key [h] held); no replay or freshness check. *)

val seal_held :
  held ->
  under:[ `Secret | `View ] ->
  id:string ->
  counter:int64 ->
  wall_ms:int64 ->
  string ->
  string option
(** [seal_held h ~under ~id ~counter ~wall_ms payload]: [payload] sealed as sender [id] (16 bytes)
    under the group secret or the view key [h] held ([None] if it held none). *)

module Make (T : Consort.Transport.S) : sig
  include Consort.Transport.S with type address = T.address and type timer = T.timer

  val wrap :
    ?freshness:Consort.Time.t ->
    ?wall:(unit -> float) ->
    ?rekey:bool ->
    ?g:Mirage_crypto_rng.g ->
    ?group:string ->
    T.t ->
    (secret * mode) option ->
    t
  (** [wrap inner (Some (secret, mode))] seals over [inner]; [wrap inner None] adds nothing
      (datagrams pass as they are). [freshness] (default 60 s) bounds the clock difference accepted;
      [wall] (default [Unix.gettimeofday]) is the clock written into and compared with headers. With
      [rekey] (default [false] here; [consort member] sets it from {!rekey_param}) and a secret, a
      key pair is drawn and {!rekey} gives the group runtime its keys. [g] is the generator of
      sender ids and keys (default: the system's; the simulator passes a seeded one so that runs
      repeat). [group] (default [""]) is the group's name, bound into every key: members of one
      group must pass the same name, and members of groups that share a secret under different names
      open none of each other's datagrams. *)

  val freshness : t -> Consort.Time.t
  (** The clock difference accepted ({!freshness_param}). *)

  val rekey : t -> Consort_group.Group.rekey option
  (** What {!Consort_group.Group.Make.join} takes as [?rekey]: [None] without [rekey] or a secret.
  *)

  val inner : t -> T.t

  val held : t -> held option
  (** The keys [t] holds now ([None] without a secret). *)

  val stats : connection -> stats

  val senders : connection -> int
  (** The senders this connection remembers (at most 4096). *)
end
