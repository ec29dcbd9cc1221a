open Consort

let default_headroom = 128

type t = { iov : Iovec.t; mutable off : int; mutable len : int }

let create ?(headroom = default_headroom) pool n =
  let iov = Pool.alloc pool (headroom + n) in
  { iov; off = headroom; len = n }

let of_string ?headroom pool s =
  let t = create ?headroom pool (String.length s) in
  Cstruct.blit_from_string s 0 (Iovec.cstruct t.iov) t.off (String.length s);
  t

let of_iovec iov = { iov; off = 0; len = Iovec.length iov }
let cstruct t = Cstruct.sub (Iovec.cstruct t.iov) t.off t.len
let length t = t.len

let push t n =
  if n < 0 || n > t.off then
    invalid_arg (Printf.sprintf "Packet.push: %d bytes, %d of headroom" n t.off);
  t.off <- t.off - n;
  t.len <- t.len + n;
  Cstruct.sub (Iovec.cstruct t.iov) t.off n

let pull t n =
  if n < 0 || n > t.len then Error `Truncated
  else begin
    t.off <- t.off + n;
    t.len <- t.len - n;
    Ok ()
  end

let trim t n = if n >= 0 && n < t.len then t.len <- n

let extend t n =
  let cap = Iovec.length t.iov in
  if n < 0 || t.off + t.len + n > cap then invalid_arg "Packet.extend: no room at the end";
  let v = Cstruct.sub (Iovec.cstruct t.iov) (t.off + t.len) n in
  t.len <- t.len + n;
  v

let truesize t = Segment.size (Iovec.segment t.iov)
let segment_id t = Segment.id (Iovec.segment t.iov)
let retain t = { t with iov = Iovec.retain t.iov }
let release t = Iovec.release t.iov
let to_string t = Cstruct.to_string (cstruct t)
let pp ppf t = Fmt.pf ppf "<packet %d bytes, %d headroom>" t.len t.off
