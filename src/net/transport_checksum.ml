let ipv4 = Checksum.pseudo_ipv4

let fill ?(zero = 0) ~pseudo ~field seg =
  if field < 0 || field + 2 > Cstruct.length seg then
    invalid_arg "Transport_checksum.fill: field outside the segment";
  Cstruct.BE.set_uint16 seg field 0;
  let ck = Checksum.digest ~init:pseudo seg in
  Cstruct.BE.set_uint16 seg field (if ck = 0 then zero else ck)

let valid ~pseudo seg = Checksum.sum ~init:pseudo seg = 0xffff
let valid_sub ~pseudo seg ~len = Checksum.sum_sub ~init:pseudo seg ~off:0 ~len = 0xffff

let ipv6 ~(src : Ipv6_addr.t) ~(dst : Ipv6_addr.t) ~proto ~len =
  let s = ref ((len lsr 16) + (len land 0xffff) + proto) in
  let add (a : Ipv6_addr.t) =
    let a = (a :> string) in
    for i = 0 to 7 do
      s :=
        !s
        + (Char.code (String.unsafe_get a (2 * i)) lsl 8)
          lor Char.code (String.unsafe_get a ((2 * i) + 1))
    done
  in
  add src;
  add dst;
  let rec fold s = if s > 0xffff then fold ((s land 0xffff) + (s lsr 16)) else s in
  fold !s
