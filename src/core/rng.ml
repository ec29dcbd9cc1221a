type t = Random.State.t

let create seed = Random.State.make [| seed; 0x5eed; seed lsr 17 |]
let split t = Random.State.make [| Random.State.bits t; Random.State.bits t; Random.State.bits t |]
let int t n = if n < 0x3fffffff then Random.State.int t n else Random.State.full_int t n
let float t x = Random.State.float t x
let bool t = Random.State.bool t
let chance t p = p > 0. && Random.State.float t 1.0 < p
let bits64 t = Random.State.int64 t Int64.max_int
