let sorted xs =
  let a = Array.copy xs in
  Array.sort Float.compare a;
  a

let percentile xs p =
  let n = Array.length xs in
  if n = 0 then nan
  else
    let a = sorted xs in
    let rank = int_of_float (Float.ceil (p /. 100. *. float n)) in
    a.(Int.max 0 (Int.min (n - 1) (rank - 1)))

let median xs = percentile xs 50.
let mean xs = if xs = [||] then nan else Array.fold_left ( +. ) 0. xs /. float (Array.length xs)
let min xs = if xs = [||] then nan else Array.fold_left Float.min infinity xs
let max xs = if xs = [||] then nan else Array.fold_left Float.max neg_infinity xs
let json_float x = if Float.is_finite x then Printf.sprintf "%.3f" x else "null"
