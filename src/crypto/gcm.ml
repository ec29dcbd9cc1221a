type key

external create : string -> key = "consort_gcm_create"

external c_seal :
  key -> string -> string -> Cstruct.buffer -> int -> int -> Cstruct.buffer -> int -> bool
  = "consort_gcm_seal_bc" "consort_gcm_seal"
[@@noalloc]

external c_open :
  key -> string -> string -> Cstruct.buffer -> int -> int -> Cstruct.buffer -> int -> bool
  = "consort_gcm_open_bc" "consort_gcm_open"
[@@noalloc]

external c_seal2 :
  key ->
  string ->
  string ->
  Cstruct.buffer ->
  int ->
  int ->
  string ->
  int ->
  int ->
  Cstruct.buffer ->
  int ->
  bool = "consort_gcm_seal2_bc" "consort_gcm_seal2"
[@@noalloc]

external c_open_head :
  key -> string -> string -> Cstruct.buffer -> int -> int -> Cstruct.buffer -> int -> bool
  = "consort_gcm_open_head_bc" "consort_gcm_open_head"
[@@noalloc]

external c_open_rest :
  key -> Cstruct.buffer -> int -> int -> Bytes.t -> int -> Cstruct.buffer -> int -> bool
  = "consort_gcm_open_rest_bc" "consort_gcm_open_rest"
[@@noalloc]

let tag_size = 16

let of_secret k =
  if String.length k <> 32 then invalid_arg "Gcm.of_secret: the key must be 32 bytes" else create k

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

let seal2_into key ~nonce ~adata (prefix : Cstruct.t) body ~off ~len (dst : Cstruct.t) =
  if off < 0 || len < 0 || off > String.length body - len then
    invalid_arg "Gcm.seal2_into: the body's range is out of bounds";
  check "Gcm.seal2_into" ~nonce prefix dst (prefix.len + len + tag_size);
  if
    not
      (c_seal2 key nonce adata prefix.buffer prefix.off prefix.len body off len dst.buffer dst.off)
  then failwith "Gcm.seal2_into: libcrypto failed"

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

let open_split key ~nonce ~adata (sealed : Cstruct.t) ~head (hdst : Cstruct.t) place =
  let n = sealed.len - tag_size in
  if String.length nonce <> 12 then invalid_arg "Gcm.open_split: the nonce must be 12 bytes";
  if head < 0 || head > n || Cstruct.length hdst < head then invalid_arg "Gcm.open_split: bad head";
  if hdst.buffer == sealed.buffer then
    invalid_arg "Gcm.open_split: the head's destination is the source";
  if not (c_open_head key nonce adata sealed.buffer sealed.off head hdst.buffer hdst.off) then
    `Refused
  else
    let h = Cstruct.sub hdst 0 head in
    match place h with
    | None -> `Not_placed
    | Some (b, pos) ->
        let rest = n - head in
        if pos < 0 || pos > Bytes.length b - rest then
          invalid_arg "Gcm.open_split: the rest does not fit";
        if
          c_open_rest key sealed.buffer (sealed.off + head) rest b pos sealed.buffer (sealed.off + n)
        then `Opened
        else `Refused
