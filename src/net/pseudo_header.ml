module type S = sig
  type connection

  val sum : connection -> len:int -> int
end

module None (L : sig
  type connection
end) =
struct
  type connection = L.connection

  let sum _ ~len:_ = 0
end
