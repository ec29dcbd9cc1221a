(** AES-256-GCM from OpenSSL's libcrypto (its EVP interface), through a
    small C stub over {!Cstruct} buffers with no copies.

    The format is the usual one, the same as mirage-crypto's
    [Cipher_block.AES.GCM] (a test checks both ways): a 12-byte nonce, the
    ciphertext as long as the message, then a 16-byte tag. libcrypto picks
    the fastest code the CPU has (AES-NI, carry-less multiplication, VAES).
    Building needs OpenSSL's headers ([libssl-dev], installed by
    [scripts/deps.sh]); without them the C compiler stops with a message
    saying so. *)

type key

val of_secret : string -> key
(** [of_secret k] is the key [k], 32 bytes.
    @raise Invalid_argument on another length. *)

val tag_size : int
(** 16. *)

val seal_into : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t -> unit
(** [seal_into key ~nonce ~adata msg dst] writes [msg] sealed into the
    first [Cstruct.length msg + tag_size] bytes of [dst] (which may begin
    where [msg] does).
    @raise Invalid_argument if [nonce] is not 12 bytes, or [dst] is
    shorter, or overlaps [msg] elsewhere than at its start. *)

val seal : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t
(** [seal] into a fresh buffer. *)

val open_into : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t -> bool
(** [open_into key ~nonce ~adata sealed dst] writes the message sealed in
    [sealed] into the first [Cstruct.length sealed - tag_size] bytes of
    [dst] (which may begin where [sealed] does) and is [true], or is
    [false] if [sealed] was not sealed under [key], [nonce] and [adata]
    (or is shorter than a tag): then [dst]'s bytes are meaningless.
    @raise Invalid_argument as {!seal_into}. *)

val open_ : key -> nonce:string -> adata:string -> Cstruct.t -> Cstruct.t option
(** [open_] into a fresh buffer. *)
