type key

external create : string -> key = "consort_gcm_create"

external c_seal : key -> string -> string -> Cstruct.buffer -> int -> int -> Cstruct.buffer -> int -> bool
  = "consort_gcm_seal_bc" "consort_gcm_seal"
  [@@noalloc]

external c_open : key -> string -> string -> Cstruct.buffer -> int -> int -> Cstruct.buffer -> int -> bool
  = "consort_gcm_open_bc" "consort_gcm_open"
  [@@noalloc]

let tag_size = 16
let of_secret k = if String.length k <> 32 then invalid_arg "Gcm.of_secret: the key must be 32 bytes" else create k

(* [dst] of [n] bytes may begin where [src] does, or not overlap it. *)
let check name ~nonce (src : Cstruct.t) (dst : Cstruct.t) n =
  if String.length nonce <> 12 then invalid_arg (name ^ ": the nonce must be 12 bytes");
  if Cstruct.length dst < n then invalid_arg (name ^ ": the destination is too short");
  if src.buffer == dst.buffer && src.off <> dst.off then begin
    let s0 = src.off and s1 = src.off + src.len and d0 = dst.off and d1 = dst.off + n in
    if s0 < d1 && d0 < s1 then invalid_arg (name ^ ": the destination overlaps the source")
  end

let seal_into key ~nonce ~adata (msg : Cstruct.t) (dst : Cstruct.t) =
  let n = msg.len + tag_size in
  check "Gcm.seal_into" ~nonce msg dst n;
  if not (c_seal key nonce adata msg.buffer msg.off msg.len dst.buffer dst.off) then
    failwith "Gcm.seal_into: libcrypto failed"

let seal key ~nonce ~adata msg =
  let dst = Cstruct.create_unsafe (Cstruct.length msg + tag_size) in
  seal_into key ~nonce ~adata msg dst;
  dst

let open_into key ~nonce ~adata (sealed : Cstruct.t) (dst : Cstruct.t) =
  if sealed.len < tag_size then false
  else begin
    let n = sealed.len - tag_size in
    check "Gcm.open_into" ~nonce sealed dst n;
    c_open key nonce adata sealed.buffer sealed.off n dst.buffer dst.off
  end

let open_ key ~nonce ~adata sealed =
  if Cstruct.length sealed < tag_size then None
  else
    let dst = Cstruct.create_unsafe (Cstruct.length sealed - tag_size) in
    if open_into key ~nonce ~adata sealed dst then Some dst else None
