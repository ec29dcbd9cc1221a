type t = {
  n : int;
  me : int;
  marked : bool array;
  mutable count : int;
  mutable bad_rank : int;
  mutable self : int;
}

let create ~n ~me = { n; me; marked = Array.make n false; count = 0; bad_rank = 0; self = 0 }

let add t ranks =
  let add acc r =
    if r < 0 || r >= t.n then begin
      t.bad_rank <- t.bad_rank + 1;
      acc
    end
    else if r = t.me then begin
      t.self <- t.self + 1;
      acc
    end
    else if t.marked.(r) then acc
    else begin
      t.marked.(r) <- true;
      t.count <- t.count + 1;
      r :: acc
    end
  in
  List.rev (List.fold_left add [] ranks)

let mem t r = r >= 0 && r < t.n && t.marked.(r)
let elements t = List.filter (fun r -> t.marked.(r)) (List.init t.n Fun.id)
let cardinal t = t.count
let bad_rank t = t.bad_rank
let self t = t.self
