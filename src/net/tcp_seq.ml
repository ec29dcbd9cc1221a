type t = int

let mask = 0xFFFF_FFFF
let of_int n = n land mask
let to_int t = t
let zero = 0
let add t n = (t + n) land mask

let sub a b =
  let d = (a - b) land mask in
  if d >= 0x8000_0000 then d - 0x1_0000_0000 else d

let succ t = add t 1
let lt a b = sub a b < 0
let leq a b = sub a b <= 0
let gt a b = sub a b > 0
let geq a b = sub a b >= 0
let equal (a : t) b = a = b
let max a b = if lt a b then b else a
let min a b = if lt a b then a else b
let between s ~low ~high = leq low s && lt s high
let pp ppf t = Fmt.int ppf t
