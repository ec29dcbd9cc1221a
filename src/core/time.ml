type t = int

let zero = 0
let of_ns n = n
let of_us n = n * 1_000
let of_ms n = n * 1_000_000
let of_sec s = int_of_float (s *. 1e9)
let to_us t = float_of_int t /. 1e3
let to_ms t = float_of_int t /. 1e6
let to_sec t = float_of_int t /. 1e9
let add = ( + )
let diff = ( - )

let pp ppf t =
  let a = abs t in
  if a < 1_000 then Fmt.pf ppf "%dns" t
  else if a < 1_000_000 then Fmt.pf ppf "%.1fus" (to_us t)
  else if a < 1_000_000_000 then Fmt.pf ppf "%.1fms" (to_ms t)
  else Fmt.pf ppf "%.3fs" (to_sec t)
