type t = {
  time : Time.t array; (* by key; [max_int]: not set *)
  pos : int array; (* by key: its index in [heap], [-1] if not set *)
  heap : int array; (* keys, [heap.(0)] the earliest *)
  mutable n : int;
}

let create k =
  let k = max 0 k in
  { time = Array.make k max_int; pos = Array.make k (-1); heap = Array.make k 0; n = 0 }

let before t a b =
  let ta = t.time.(a) and tb = t.time.(b) in
  ta < tb || (ta = tb && a < b)

let place t i k =
  t.heap.(i) <- k;
  t.pos.(k) <- i

let rec up t i k =
  if i > 0 then begin
    let p = (i - 1) / 2 in
    let pk = t.heap.(p) in
    if before t k pk then begin
      place t i pk;
      up t p k
    end
    else place t i k
  end
  else place t i k

let rec down t i k =
  let l = (2 * i) + 1 in
  if l >= t.n then place t i k
  else
    let r = l + 1 in
    let c = if r < t.n && before t t.heap.(r) t.heap.(l) then r else l in
    let ck = t.heap.(c) in
    if before t ck k then begin
      place t i ck;
      down t c k
    end
    else place t i k

let clear t k =
  let i = t.pos.(k) in
  if i >= 0 then begin
    t.pos.(k) <- -1;
    t.time.(k) <- max_int;
    t.n <- t.n - 1;
    if i < t.n then begin
      let last = t.heap.(t.n) in
      if i > 0 && before t last t.heap.((i - 1) / 2) then up t i last else down t i last
    end
  end

let set t k at =
  if at = max_int then clear t k
  else
    let i = t.pos.(k) in
    if i < 0 then begin
      t.time.(k) <- at;
      let i = t.n in
      t.n <- i + 1;
      up t i k
    end
    else begin
      let old = t.time.(k) in
      t.time.(k) <- at;
      if at < old then up t i k else if at > old then down t i k
    end

let get t k = t.time.(k)
let next t = if t.n = 0 then max_int else t.time.(t.heap.(0))
let length t = t.n

let reset t =
  for j = 0 to t.n - 1 do
    let k = t.heap.(j) in
    t.pos.(k) <- -1;
    t.time.(k) <- max_int
  done;
  t.n <- 0

let take_due t now buf =
  let c = ref 0 in
  while t.n > 0 && t.time.(t.heap.(0)) <= now do
    let k = t.heap.(0) in
    buf.(!c) <- k;
    incr c;
    clear t k
  done;
  !c
