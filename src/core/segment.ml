type t = {
  buf : Cstruct.buffer;
  id : int;
  mutable count : int;
  mutable generation : int;
  on_free : t -> unit;
  on_leak : t -> unit;
  on_handle_leak : t -> string -> unit;
}

let next_id = ref 0
let finalise t = if t.count > 0 then t.on_leak t

let create ~size ~on_free ~on_leak ~on_handle_leak =
  incr next_id;
  let t =
    {
      buf = Bigarray.(Array1.create char c_layout size);
      id = !next_id;
      count = 0;
      generation = 0;
      on_free;
      on_leak;
      on_handle_leak;
    }
  in
  Gc.finalise finalise t;
  t

let buffer t = t.buf
let size t = Bigarray.Array1.dim t.buf
let count t = t.count
let generation t = t.generation
let id t = t.id
let incr t = t.count <- t.count + 1

let decr t =
  if t.count <= 0 then invalid_arg "Segment.decr: count already zero";
  t.count <- t.count - 1;
  if t.count = 0 then (
    t.generation <- t.generation + 1;
    t.on_free t)

let handle_leaked t where = t.on_handle_leak t where
