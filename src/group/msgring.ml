open Consort

(* A ring of slots indexed by the number modulo its size, as {!Seqring},
   each slot holding the parts of one message: [kind] 0 free, 1 taken apart
   ([bufs], [hoffs], [segs], [offs], [lens]), 2 whole ([whole]). The ring
   doubles when the numbers kept span more than it holds. *)
type t = {
  mutable kind : Bytes.t;
  mutable bufs : Bytes.t array;
  mutable hoffs : int array;
  mutable segs : Segment.t array;
  mutable offs : int array;
  mutable lens : int array;
  mutable whole : Msg.t array;
  mutable count : int;
  mutable lo : int; (* with count > 0: the least number kept *)
  mutable hi : int; (* with count > 0: the greatest number kept *)
}

let no_segment =
  Segment.create ~size:0 ~on_free:ignore ~on_leak:ignore ~on_handle_leak:(fun _ _ -> ())

let no_msg = Msg.empty ()

let create ?(size = 16) () =
  let rec pow2 p = if p >= size then p else pow2 (2 * p) in
  let n = pow2 1 in
  {
    kind = Bytes.make n '\000';
    bufs = Array.make n Bytes.empty;
    hoffs = Array.make n 0;
    segs = Array.make n no_segment;
    offs = Array.make n 0;
    lens = Array.make n 0;
    whole = Array.make n no_msg;
    count = 0;
    lo = 0;
    hi = -1;
  }

let length t = t.count
let slot t seq = seq land (Bytes.length t.kind - 1)

let mem t seq =
  t.count > 0 && seq >= t.lo && seq <= t.hi && Bytes.unsafe_get t.kind (slot t seq) <> '\000'

(* Doubles until [lo, hi] fits, moving what is kept. *)
let grow t lo hi =
  let n = Bytes.length t.kind in
  let m = ref n in
  while hi - lo + 1 > !m do
    m := 2 * !m
  done;
  let m = !m in
  if m > n then begin
    let kind = Bytes.make m '\000' in
    let bufs = Array.make m Bytes.empty and hoffs = Array.make m 0 in
    let segs = Array.make m no_segment and offs = Array.make m 0 and lens = Array.make m 0 in
    let whole = Array.make m no_msg in
    if t.count > 0 then
      for s = t.lo to t.hi do
        let i = slot t s and j = s land (m - 1) in
        match Bytes.get t.kind i with
        | '\000' -> ()
        | k ->
            Bytes.set kind j k;
            bufs.(j) <- t.bufs.(i);
            hoffs.(j) <- t.hoffs.(i);
            segs.(j) <- t.segs.(i);
            offs.(j) <- t.offs.(i);
            lens.(j) <- t.lens.(i);
            whole.(j) <- t.whole.(i)
      done;
    t.kind <- kind;
    t.bufs <- bufs;
    t.hoffs <- hoffs;
    t.segs <- segs;
    t.offs <- offs;
    t.lens <- lens;
    t.whole <- whole
  end

(* The slot for [seq], free: the span grows to take [seq] in. *)
let take_slot t seq =
  if t.count = 0 then begin
    t.lo <- seq;
    t.hi <- seq
  end
  else if seq < t.lo || seq > t.hi then begin
    let lo = Int.min t.lo seq and hi = Int.max t.hi seq in
    if hi - lo >= Bytes.length t.kind then grow t lo hi;
    t.lo <- lo;
    t.hi <- hi
  end;
  t.count <- t.count + 1;
  slot t seq

let drop_slot t i =
  (match Bytes.unsafe_get t.kind i with
  | '\001' ->
      (* The buffer and segment stay in the free slot until it is taken
         again: a slot reused for the same header bytes (the layers above
         Mnak write the same headers cast after cast) is then not written
         at all, and a free slot holds at most what it held in use. *)
      if t.lens.(i) > 0 then Segment.decr t.segs.(i)
  | '\002' ->
      Msg.release t.whole.(i);
      t.whole.(i) <- no_msg
  | _ -> ());
  Bytes.unsafe_set t.kind i '\000'

(* Keep [lo, hi] tight once [a, b] (within it) holds nothing: numbers
   mostly go in order, so this walks little. *)
let tighten t a b =
  if t.count = 0 then begin
    t.lo <- 0;
    t.hi <- -1
  end
  else begin
    if a <= t.lo then begin
      let s = ref (b + 1) in
      while Bytes.unsafe_get t.kind (slot t !s) = '\000' do
        incr s
      done;
      t.lo <- !s
    end;
    if b >= t.hi then begin
      let s = ref (a - 1) in
      while Bytes.unsafe_get t.kind (slot t !s) = '\000' do
        decr s
      done;
      t.hi <- !s
    end
  end

let release t seq =
  if mem t seq then begin
    drop_slot t (slot t seq);
    t.count <- t.count - 1;
    tighten t seq seq
  end

let release_below t s =
  if t.count = 0 || s <= t.lo then 0
  else begin
    let b = Int.min (s - 1) t.hi in
    let k = ref 0 in
    for seq = t.lo to b do
      let i = slot t seq in
      if Bytes.unsafe_get t.kind i <> '\000' then begin
        drop_slot t i;
        incr k
      end
    done;
    t.count <- t.count - !k;
    tighten t t.lo b;
    !k
  end

let replace t seq m =
  release t seq;
  let i = take_slot t seq in
  if Msg.is_simple m then begin
    let len = Msg.slice_length m in
    Bytes.unsafe_set t.kind i '\001';
    t.bufs.(i) <- Msg.head_bytes m;
    t.hoffs.(i) <- Msg.head_offset m;
    t.lens.(i) <- len;
    if len > 0 then begin
      let s = Msg.slice_segment m in
      Segment.incr s;
      t.segs.(i) <- s;
      t.offs.(i) <- Msg.slice_offset m
    end;
    Msg.release m
  end
  else begin
    Bytes.unsafe_set t.kind i '\002';
    t.whole.(i) <- m
  end

let replace_head t seq head m =
  let len = Msg.bare_slice_length m in
  if len >= 0 then begin
    (* Most often [seq] is the next after the greatest kept, within the
       ring: nothing kept for it to release, and [take_slot] without a
       call. *)
    let i =
      if t.count > 0 && seq = t.hi + 1 && seq - t.lo < Bytes.length t.kind then begin
        t.hi <- seq;
        t.count <- t.count + 1;
        slot t seq
      end
      else begin
        release t seq;
        take_slot t seq
      end
    in
    Bytes.unsafe_set t.kind i '\001';
    if t.bufs.(i) != head then t.bufs.(i) <- head;
    t.hoffs.(i) <- 0;
    t.lens.(i) <- len;
    if len > 0 then begin
      let s = Msg.slice_segment m in
      Segment.incr s;
      if t.segs.(i) != s then t.segs.(i) <- s;
      t.offs.(i) <- Msg.slice_offset m
    end
  end
  else
    let m = Msg.retain m in
    replace t seq (if Bytes.length head = 0 then m else Msg.push_bytes head m)

let copy_slot t i =
  if Bytes.get t.kind i = '\001' then
    Msg.assemble t.bufs.(i) t.hoffs.(i) t.segs.(i) ~off:t.offs.(i) ~len:t.lens.(i)
  else Msg.retain t.whole.(i)

let copy t seq = if mem t seq then copy_slot t (slot t seq) else raise Not_found

let msg_length t seq =
  if not (mem t seq) then 0
  else
    let i = slot t seq in
    if Bytes.get t.kind i = '\001' then Bytes.length t.bufs.(i) - t.hoffs.(i) + t.lens.(i)
    else Msg.length t.whole.(i)

let reset t =
  if t.count > 0 then
    for s = t.lo to t.hi do
      drop_slot t (slot t s)
    done;
  t.count <- 0;
  t.lo <- 0;
  t.hi <- -1

let fold f t acc =
  if t.count = 0 then acc
  else begin
    let acc = ref acc in
    for s = t.lo to t.hi do
      let i = slot t s in
      if Bytes.get t.kind i <> '\000' then begin
        let m = copy_slot t i in
        let str = Msg.to_string m in
        Msg.release m;
        acc := f s str !acc
      end
    done;
    !acc
  end
