type t = { key : Cstruct.t }

external getrandom : int -> string = "consort_net_getrandom"

let create ?key () =
  let key =
    match key with Some k -> Cstruct.of_string k | None -> Cstruct.of_string (getrandom 32)
  in
  { key }

(* The first 32 bits of HMAC-SHA-256(key, domain || message). *)
let prf t ~domain msg =
  let d = Mirage_crypto.Hash.SHA256.hmac ~key:t.key (Cstruct.of_string (domain ^ msg)) in
  Int32.to_int (Cstruct.BE.get_uint32 d 0) land 0xFFFF_FFFF

let isn t ~tuple ~now = Tcp_seq.of_int ((now / 4000) + prf t ~domain:"isn\000" tuple)
let ts_offset t ~tuple = prf t ~domain:"tso\000" tuple
let port_offset t ~endpoints = prf t ~domain:"port\000" endpoints
let port_index t ~endpoints = prf t ~domain:"pidx\000" endpoints
let mss_table = [| 536; 1300; 1440; 1460 |]
let cookie_bits = 24
let cookie_mask = (1 lsl cookie_bits) - 1
let minute now = now / 60_000_000_000 land 0xFF
let h1 t tuple = prf t ~domain:"ck1\000" tuple
let h2 t tuple count = prf t ~domain:"ck2\000" (tuple ^ string_of_int count)

let cookie t ~tuple ~now ~peer_isn ~mss =
  let idx =
    let rec go i = if i = 0 || mss >= mss_table.(i) then i else go (i - 1) in
    go (Array.length mss_table - 1)
  in
  let count = minute now in
  let c =
    h1 t tuple + Tcp_seq.to_int peer_isn + (count lsl cookie_bits)
    + ((h2 t tuple count + idx) land cookie_mask)
  in
  (Tcp_seq.of_int c, mss_table.(idx))

let check_cookie t ~tuple ~now ~peer_isn ~cookie =
  let c = (Tcp_seq.to_int cookie - h1 t tuple - Tcp_seq.to_int peer_isn) land 0xFFFF_FFFF in
  let count = c lsr cookie_bits in
  let age = (minute now - count) land 0xFF in
  if age >= 2 then None
  else
    let idx = (c - h2 t tuple count) land cookie_mask in
    if idx < Array.length mss_table then Some mss_table.(idx) else None

let ts_bits = 6

let cookie_ts ~ts_now ~wscale ~sack =
  let opts =
    (match wscale with Some s -> s land 0xF | None -> 0xF) lor if sack then 0x10 else 0
  in
  let ts = ((ts_now lsr ts_bits) lsl ts_bits) lor opts in
  (if ts > ts_now then ts - (1 lsl ts_bits) else ts) land 0xFFFF_FFFF

let cookie_ts_options ~echo =
  let ws = echo land 0xF in
  ((if ws = 0xF then None else Some ws), echo land 0x10 <> 0)
