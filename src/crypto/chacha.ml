type key

external create : string -> key = "consort_chacha_create"

external c_seal :
  key ->
  string ->
  Cstruct.buffer ->
  int ->
  int ->
  Cstruct.buffer ->
  int ->
  int ->
  Cstruct.buffer ->
  int ->
  bool = "consort_aead_seal_ba_bc" "consort_aead_seal_ba"
[@@noalloc]

external c_open :
  key ->
  string ->
  Cstruct.buffer ->
  int ->
  int ->
  Cstruct.buffer ->
  int ->
  int ->
  Cstruct.buffer ->
  int ->
  bool = "consort_aead_open_ba_bc" "consort_aead_open_ba"
[@@noalloc]

let tag_size = 16

let of_secret k =
  if Cstruct.length k <> 32 then invalid_arg "Chacha.of_secret: the key must be 32 bytes"
  else create (Cstruct.to_string k)

let nonce_string (n : Cstruct.t) =
  if n.len <> 12 then invalid_arg "Chacha: the nonce must be 12 bytes" else Cstruct.to_string n

let authenticate_encrypt ~key ~nonce ?(adata = Cstruct.empty) (msg : Cstruct.t) =
  let nonce = nonce_string nonce in
  let dst = Cstruct.create_unsafe (msg.len + tag_size) in
  if
    not
      (c_seal key nonce adata.buffer adata.off adata.len msg.buffer msg.off msg.len dst.buffer
         dst.off)
  then failwith "Chacha.authenticate_encrypt: libcrypto failed";
  dst

let authenticate_decrypt ~key ~nonce ?(adata = Cstruct.empty) (sealed : Cstruct.t) =
  let nonce = nonce_string nonce in
  if sealed.len < tag_size then None
  else
    let n = sealed.len - tag_size in
    let dst = Cstruct.create_unsafe n in
    if
      c_open key nonce adata.buffer adata.off adata.len sealed.buffer sealed.off n dst.buffer
        dst.off
    then Some dst
    else None
