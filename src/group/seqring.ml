type 'a t = {
  dummy : 'a;
  mutable slots : 'a array;
  mutable full : Bytes.t; (* '\001' where a value is kept *)
  mutable count : int;
  mutable lo : int; (* with count > 0: the least number kept *)
  mutable hi : int; (* with count > 0: the greatest number kept *)
}

let create ?(size = 16) dummy =
  let rec pow2 p = if p >= size then p else pow2 (2 * p) in
  let n = pow2 1 in
  { dummy; slots = Array.make n dummy; full = Bytes.make n '\000'; count = 0; lo = 0; hi = -1 }

let length t = t.count
let slot t seq = seq land (Array.length t.slots - 1)

let mem t seq =
  t.count > 0 && seq >= t.lo && seq <= t.hi && Bytes.unsafe_get t.full (slot t seq) = '\001'

let find t seq = if mem t seq then Array.unsafe_get t.slots (slot t seq) else t.dummy
let find_opt t seq = if mem t seq then Some (Array.unsafe_get t.slots (slot t seq)) else None

(* Doubles until [lo, hi] fits, moving what is kept. *)
let grow t lo hi =
  let n = ref (Array.length t.slots) in
  while hi - lo + 1 > !n do
    n := 2 * !n
  done;
  if !n > Array.length t.slots then begin
    let slots = Array.make !n t.dummy and full = Bytes.make !n '\000' in
    if t.count > 0 then
      for s = t.lo to t.hi do
        let i = slot t s in
        if Bytes.unsafe_get t.full i = '\001' then begin
          let j = s land (!n - 1) in
          slots.(j) <- t.slots.(i);
          Bytes.set full j '\001'
        end
      done;
    t.slots <- slots;
    t.full <- full
  end

let replace t seq v =
  if t.count = 0 then begin
    t.lo <- seq;
    t.hi <- seq
  end
  else if seq < t.lo || seq > t.hi then begin
    let lo = Int.min t.lo seq and hi = Int.max t.hi seq in
    if hi - lo >= Array.length t.slots then grow t lo hi;
    t.lo <- lo;
    t.hi <- hi
  end;
  let i = slot t seq in
  if Bytes.unsafe_get t.full i = '\000' then begin
    Bytes.unsafe_set t.full i '\001';
    t.count <- t.count + 1
  end;
  if Array.unsafe_get t.slots i != v then Array.unsafe_set t.slots i v

let remove t seq =
  if mem t seq then begin
    let i = slot t seq in
    Bytes.unsafe_set t.full i '\000';
    Array.unsafe_set t.slots i t.dummy;
    t.count <- t.count - 1;
    if t.count = 0 then begin
      t.lo <- 0;
      t.hi <- -1
    end
    else begin
      (* Keep [lo, hi] tight: numbers mostly go in order, so this walks little. *)
      if seq = t.lo then begin
        let s = ref (seq + 1) in
        while Bytes.unsafe_get t.full (slot t !s) = '\000' do
          incr s
        done;
        t.lo <- !s
      end;
      if seq = t.hi then begin
        let s = ref (seq - 1) in
        while Bytes.unsafe_get t.full (slot t !s) = '\000' do
          decr s
        done;
        t.hi <- !s
      end
    end
  end

let fold f t acc =
  if t.count = 0 then acc
  else begin
    let acc = ref acc in
    for s = t.lo to t.hi do
      let i = slot t s in
      if Bytes.unsafe_get t.full i = '\001' then acc := f s t.slots.(i) !acc
    done;
    !acc
  end

let iter f t = fold (fun s v () -> f s v) t ()

let reset t =
  if t.count > 0 then begin
    Array.fill t.slots 0 (Array.length t.slots) t.dummy;
    Bytes.fill t.full 0 (Bytes.length t.full) '\000'
  end;
  t.count <- 0;
  t.lo <- 0;
  t.hi <- -1
