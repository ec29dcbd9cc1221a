(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

type t = { mutable cap : int; mutable buf : Cstruct.t; mutable head : int; mutable len : int }

let empty = Cstruct.empty
let create n = { cap = max n 1; buf = empty; head = 0; len = 0 }
let capacity t = t.cap
let allocated t = Cstruct.length t.buf
let length t = t.len
let space t = t.cap - t.len
let resize t n = if Cstruct.length t.buf = 0 && t.len = 0 then t.cap <- max n 1

let release t =
  t.buf <- empty;
  t.head <- 0;
  t.len <- 0

let take t =
  let b = t.buf in
  release t;
  b

let adopt t b =
  if Cstruct.length t.buf = 0 && Cstruct.length b = t.cap then begin
    t.buf <- b;
    t.head <- 0;
    t.len <- 0
  end

let write t src ~off ~len =
  let cap = t.cap in
  let n = min len (cap - t.len) in
  if n > 0 then begin
    if Cstruct.length t.buf = 0 then t.buf <- Cstruct.create_unsafe cap;
    let tail = (t.head + t.len) mod cap in
    let first = min n (cap - tail) in
    Cstruct.blit src off t.buf tail first;
    if n > first then Cstruct.blit src (off + first) t.buf 0 (n - first);
    t.len <- t.len + n
  end;
  max n 0

let blit_out t ~src_off dst ~dst_off ~len =
  if src_off < 0 || len < 0 || src_off + len > t.len then invalid_arg "Tcp_sndbuf.blit_out";
  if len > 0 then begin
    let cap = t.cap in
    let start = (t.head + src_off) mod cap in
    let first = min len (cap - start) in
    Cstruct.blit t.buf start dst dst_off first;
    if len > first then Cstruct.blit t.buf 0 dst (dst_off + first) (len - first)
  end

let drop t n =
  let n = max 0 (min n t.len) in
  if n > 0 then begin
    t.head <- (t.head + n) mod t.cap;
    t.len <- t.len - n;
    if t.len = 0 then t.head <- 0
  end
