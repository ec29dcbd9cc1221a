(** AES-256-GCM from OpenSSL's libcrypto (its EVP interface), through a small C stub over [Cstruct]
    buffers with no copies.

    The format is the usual one, the same as mirage-crypto's [Cipher_block.AES.GCM] (a test checks
    both ways): a 12-byte nonce, the ciphertext as long as the message, then a 16-byte tag.
    libcrypto picks the fastest code the CPU has (AES-NI, carry-less multiplication, VAES). Building
    needs OpenSSL's headers ([libssl-dev], installed by [scripts/deps.sh]); without them the C
    compiler stops with a message saying so. *)

type key

val of_secret : string -> key
(** [of_secret k] is the key [k], 32 bytes.
    @raise Invalid_argument on another length. *)

val tag_size : int
(** 16. *)

val seal_into : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t -> unit
(** [seal_into key ~nonce ~adata msg dst] writes [msg] sealed into the first
    [Cstruct.length msg + tag_size] bytes of [dst] (which may begin where [msg] does).
    @raise Invalid_argument
      if [nonce] is not 12 bytes, or [dst] is shorter, or overlaps [msg] elsewhere than at its
      start. *)

val seal2_into :
  key ->
  nonce:string ->
  adata:string ->
  Cstruct.t ->
  string ->
  off:int ->
  len:int ->
  Cstruct.t ->
  unit
(** [seal2_into key ~nonce ~adata prefix body ~off ~len dst] is [seal_into] of [prefix] followed by
    [len] bytes of [body] from [off], read where they are (no copy of the body first).
    @raise Invalid_argument as {!seal_into}, or if the range is outside [body]. *)

val seal : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t
(** [seal] into a fresh buffer. *)

val open_into : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t -> bool
(** [open_into key ~nonce ~adata sealed dst] writes the message sealed in [sealed] into the first
    [Cstruct.length sealed - tag_size] bytes of [dst] (which may begin where [sealed] does) and is
    [true], or is [false] if [sealed] was not sealed under [key], [nonce] and [adata] (or is shorter
    than a tag): then [dst]'s bytes are meaningless.
    @raise Invalid_argument as {!seal_into}. *)

val open_ : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t option
(** [open_] into a fresh buffer. *)

val open_split :
  key ->
  nonce:string ->
  adata:string ->
  Cstruct.t ->
  head:int ->
  Cstruct.t ->
  (Cstruct.t -> (Bytes.t * int) option) ->
  [ `Opened | `Refused | `Not_placed ]
(** [open_split key ~nonce ~adata sealed ~head hdst place] opens [sealed] in two parts: its first
    [head] plaintext bytes into [hdst] (which must not be [sealed]'s buffer), handed to [place]
    {e before they are authenticated}; [place] says where the rest goes, [Some (b, pos)]: into [b]
    from [pos], then the tag is checked: [`Opened] if it is right, [`Refused] if not (then every
    byte written, in [hdst] and in [b], is meaningless and must not be used). [`Not_placed] if
    [place] said [None]: nothing is authenticated, open it whole instead. [place] must not use
    [key].
    @raise Invalid_argument
      if [head] is beyond the message or [hdst], or the rest does not fit in [b] from [pos]. *)
