(** ChaCha20-Poly1305 (RFC 8439) from OpenSSL's libcrypto (EVP), with the interface and the format
    of mirage-crypto's [Chacha20] AEAD: a 12-byte nonce, the ciphertext, then a 16-byte tag (a test
    checks both ways). For the group seal ([Consort_seal]), whose format it keeps. *)

type key

val of_secret : Cstruct.t -> key
(** @raise Invalid_argument unless the key is 32 bytes. *)

val tag_size : int

val authenticate_encrypt : key:key -> nonce:Cstruct.t -> ?adata:Cstruct.t -> Cstruct.t -> Cstruct.t
(** The message sealed, in a fresh buffer (ciphertext, then the tag).
    @raise Invalid_argument unless the nonce is 12 bytes. *)

val authenticate_decrypt :
  key:key -> nonce:Cstruct.t -> ?adata:Cstruct.t -> Cstruct.t -> Cstruct.t option
(** The message, or [None] if the data was not sealed under this key, nonce and additional data (or
    is shorter than a tag).
    @raise Invalid_argument unless the nonce is 12 bytes. *)
