let reference_sum ?(init = 0) (b : Cstruct.t) =
  let buf = b.Cstruct.buffer and off = b.Cstruct.off and len = b.Cstruct.len in
  let acc = ref init in
  let last = off + len - 1 in
  let i = ref off in
  while !i < last do
    acc :=
      !acc
      + (Char.code (Bigarray.Array1.unsafe_get buf !i) lsl 8)
      + Char.code (Bigarray.Array1.unsafe_get buf (!i + 1));
    i := !i + 2
  done;
  if !i = last then acc := !acc + (Char.code (Bigarray.Array1.unsafe_get buf !i) lsl 8);
  !acc

let fold s =
  let s = ref s in
  while !s > 0xFFFF do
    s := (!s land 0xFFFF) + (!s lsr 16)
  done;
  !s

let finish s = lnot (fold s) land 0xFFFF

let valid s =
  let f = fold s in
  f = 0xFFFF || f = 0

let sum ?(init = 0) b = Checksum.sum ~init:(fold init) b
