external sum_stub :
  Cstruct.buffer -> (int[@untagged]) -> (int[@untagged]) -> (int[@untagged]) -> (int[@untagged])
  = "consort_net_sum" "consort_net_sum_untagged"
[@@noalloc]

let rec fold s = if s > 0xffff then fold ((s land 0xffff) + (s lsr 16)) else s

let sum_sub ?(init = 0) (cs : Cstruct.t) ~off ~len =
  if off < 0 || len < 0 || off + len > cs.len then invalid_arg "Checksum.sum_sub";
  if init < 0 then invalid_arg "Checksum: negative init";
  sum_stub cs.buffer (cs.off + off) len init

let sum ?(init = 0) (cs : Cstruct.t) =
  if init < 0 then invalid_arg "Checksum: negative init";
  sum_stub cs.buffer cs.off cs.len init

let add a b = fold (a + b)
let finish s = lnot s land 0xffff
let digest ?init cs = finish (sum ?init cs)
let valid ?init cs = sum ?init cs = 0xffff

let adjust ~checksum ~old_word ~new_word =
  (* HC' = ~(~HC + ~m + m') *)
  let s = (lnot checksum land 0xffff) + (lnot old_word land 0xffff) + (new_word land 0xffff) in
  finish (fold s)

let pseudo_ipv4 ~src ~dst ~proto ~len =
  let src = Ipv4_addr.to_int src and dst = Ipv4_addr.to_int dst in
  fold ((src lsr 16) + (src land 0xffff) + (dst lsr 16) + (dst land 0xffff) + proto + len)

module type POLICY = sig
  val compute : bool
  val verify : bool
end

module On = struct
  let compute = true
  let verify = true
end

module Off = struct
  let compute = false
  let verify = false
end

module Reference = struct
  let sum ?(init = 0) cs =
    let len = Cstruct.length cs in
    let s = ref init in
    let i = ref 0 in
    while !i + 1 < len do
      s := !s + Cstruct.BE.get_uint16 cs !i;
      i := !i + 2;
      if !s > 0x3fff_ffff then s := fold !s
    done;
    if len land 1 = 1 then s := !s + (Cstruct.get_uint8 cs (len - 1) lsl 8);
    fold !s
end
