(** The secure wire's cryptography, pure: the handshake that opens a session and the AEAD that seals
    its messages.

    Handshake: the client sends an ephemeral X25519 share and a nonce for a port; the server answers
    with a session id, its own ephemeral share, its Ed25519 public key and its signature of the
    transcript ["consort-hs-v1" ‖ port ‖ client share ‖ nonce ‖ session ‖ server share]. The client
    accepts only a public key whose digest is the port it asked for ({!Port.verify}): the server's
    identity is pinned by the port, and a process without the port's key cannot complete a
    handshake. Both sides derive one AES-256-GCM key per direction from the X25519 secret and the
    transcript (HMAC-SHA256). Each datagram's nonce is its sequence number, never reused under a
    key; the session id and the sequence number are authenticated as additional data. AES-GCM rather
    than ChaCha20-Poly1305 because it runs with AES-NI and carry-less multiplication, several times
    faster where they exist; the cipher is OpenSSL's ({!Consort_crypto.Gcm}), in the same format as
    mirage-crypto's. *)

type keys
(** The two directions' keys of one session, from one side's view. *)

type client_state

val client_hello : ?g:Mirage_crypto_rng.g -> Port.t -> client_state * Wire.outer
(** [client_hello port] is a fresh handshake and its [Hello]. *)

val client_nonce : client_state -> string

val client_finish :
  client_state ->
  session:string ->
  eph:string ->
  public:string ->
  signature:string ->
  (keys, string) result
(** [client_finish st ~session ~eph ~public ~signature] checks the server's answer and derives the
    session's keys; [Error] says why the server is not trusted. *)

val server_accept :
  ?g:Mirage_crypto_rng.g ->
  Port.Key.t ->
  session:string ->
  eph:string ->
  nonce:string ->
  (keys * Wire.outer, string) result
(** [server_accept key ~session ~eph ~nonce] answers a [Hello]: the keys of the new session and the
    [Hello_ack] to send. *)

val seal : keys -> session:string -> seq:int64 -> string -> string
(** [seal keys ~session ~seq msg] encrypts and authenticates [msg] for the peer. *)

val open_ : keys -> session:string -> seq:int64 -> string -> string option
(** [open_ keys ~session ~seq sealed] is the message sealed by the peer, or [None] if it was not
    (forged, altered, or under another key). *)

val locate_signature : Port.Key.t -> nonce:string -> string
(** The signature of a [Hereis] answer for the key's port and [nonce]. *)

val locate_verify : Port.t -> nonce:string -> public:string -> signature:string -> bool

val badsession_signature : Port.Key.t -> session:string -> string
(** The signature of a [Badsession] answer for the key's port and [session]: a server that lost a
    session (a restart) still holds its port's key, and nobody else does. *)

val badsession_verify : Port.t -> session:string -> public:string -> signature:string -> bool
(** [badsession_verify port ~session ~public ~signature]: [public] is [port]'s key and [signature]
    its signature of [port] and [session]. *)

val seal_cs : keys -> session:string -> seq:int64 -> Cstruct.t -> Cstruct.t
(** {!seal} on buffers. *)

val open_cs : keys -> session:string -> seq:int64 -> Cstruct.t -> Cstruct.t option
(** {!open_} on buffers. *)

val sealed_length : int -> int
(** [sealed_length n] is the length of a message of [n] bytes once sealed. *)

val seal_into : keys -> session:string -> seq:int64 -> Cstruct.t -> Cstruct.t -> unit
(** [seal_into keys ~session ~seq msg dst] is {!seal_cs} written into the first
    [sealed_length (Cstruct.length msg)] bytes of [dst]. *)

val seal2_into :
  keys ->
  session:string ->
  seq:int64 ->
  Cstruct.t ->
  string ->
  off:int ->
  len:int ->
  Cstruct.t ->
  unit
(** [seal2_into keys ~session ~seq prefix body ~off ~len dst] is {!seal_into} of [prefix] followed
    by [body]'s [len] bytes from [off], read in place. *)

val open_into : keys -> session:string -> seq:int64 -> Cstruct.t -> Cstruct.t -> bool
(** [open_into keys ~session ~seq sealed dst] is {!open_cs} written into the first
    [Cstruct.length sealed - sealed_length 0] bytes of [dst]: [true] if [sealed] opened; when
    [false], [dst]'s bytes are meaningless. *)

val open_split :
  keys ->
  session:string ->
  seq:int64 ->
  Cstruct.t ->
  head:int ->
  Cstruct.t ->
  (Cstruct.t -> (Bytes.t * int) option) ->
  [ `Opened | `Refused | `Not_placed ]
(** [Gcm.open_split] under the session's key ([`Refused] if [sealed] is too short for [head]). *)

val nonce_of : int64 -> string
(** The AEAD nonce of a sequence number (12 bytes). *)

val adata : string -> int64 -> string
(** The AEAD's additional data for a session and a sequence number. *)
