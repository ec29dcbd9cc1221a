open Consort

(* Slots hold the parts of one message each: [kind] 0 free, 1 taken apart
   ([bufs], [hoffs], [segs], [offs], [lens]), 2 whole ([whole]). [index]
   maps a number to its slot; free slots are a stack. *)
type t = {
  index : int Seqring.t;
  mutable kind : Bytes.t;
  mutable bufs : Bytes.t array;
  mutable hoffs : int array;
  mutable segs : Segment.t array;
  mutable offs : int array;
  mutable lens : int array;
  mutable whole : Msg.t array;
  mutable free : int array;
  mutable nfree : int;
}

let no_segment =
  Segment.create ~size:0 ~on_free:ignore ~on_leak:ignore ~on_handle_leak:(fun _ _ -> ())

let no_msg = Msg.empty ()

let create ?(size = 16) () =
  let n = max 1 size in
  {
    index = Seqring.create ~size (-1);
    kind = Bytes.make n '\000';
    bufs = Array.make n Bytes.empty;
    hoffs = Array.make n 0;
    segs = Array.make n no_segment;
    offs = Array.make n 0;
    lens = Array.make n 0;
    whole = Array.make n no_msg;
    free = Array.init n (fun i -> n - 1 - i);
    nfree = n;
  }

let length t = Seqring.length t.index
let mem t seq = Seqring.mem t.index seq

let grow t =
  let n = Bytes.length t.kind in
  let m = 2 * n in
  let ext a d =
    let b = Array.make m d in
    Array.blit a 0 b 0 n;
    b
  in
  let kind = Bytes.make m '\000' in
  Bytes.blit t.kind 0 kind 0 n;
  t.kind <- kind;
  t.bufs <- ext t.bufs Bytes.empty;
  t.hoffs <- ext t.hoffs 0;
  t.segs <- ext t.segs no_segment;
  t.offs <- ext t.offs 0;
  t.lens <- ext t.lens 0;
  t.whole <- ext t.whole no_msg;
  let free = Array.make m 0 in
  for i = 0 to n - 1 do
    free.(i) <- m - 1 - i
  done;
  t.free <- free;
  t.nfree <- n

let take_slot t =
  if t.nfree = 0 then grow t;
  t.nfree <- t.nfree - 1;
  t.free.(t.nfree)

let drop_slot t i =
  (match Bytes.get t.kind i with
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
  Bytes.set t.kind i '\000';
  t.free.(t.nfree) <- i;
  t.nfree <- t.nfree + 1

let release t seq =
  if Seqring.mem t.index seq then begin
    let i = Seqring.find t.index seq in
    Seqring.remove t.index seq;
    drop_slot t i
  end

let replace t seq m =
  release t seq;
  let i = take_slot t in
  if Msg.is_simple m then begin
    let len = Msg.slice_length m in
    Bytes.set t.kind i '\001';
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
    Bytes.set t.kind i '\002';
    t.whole.(i) <- m
  end;
  Seqring.replace t.index seq i

let replace_head t seq head m =
  if Msg.header_length m = 0 && Msg.is_simple m then begin
    release t seq;
    let i = take_slot t in
    let len = Msg.slice_length m in
    Bytes.set t.kind i '\001';
    if t.bufs.(i) != head then t.bufs.(i) <- head;
    t.hoffs.(i) <- 0;
    t.lens.(i) <- len;
    if len > 0 then begin
      let s = Msg.slice_segment m in
      Segment.incr s;
      if t.segs.(i) != s then t.segs.(i) <- s;
      t.offs.(i) <- Msg.slice_offset m
    end;
    Seqring.replace t.index seq i
  end
  else
    let m = Msg.retain m in
    replace t seq (if Bytes.length head = 0 then m else Msg.push_bytes head m)

let copy_slot t i =
  if Bytes.get t.kind i = '\001' then
    Msg.assemble t.bufs.(i) t.hoffs.(i) t.segs.(i) ~off:t.offs.(i) ~len:t.lens.(i)
  else Msg.retain t.whole.(i)

let copy t seq = if mem t seq then copy_slot t (Seqring.find t.index seq) else raise Not_found

let msg_length t seq =
  if not (mem t seq) then 0
  else
    let i = Seqring.find t.index seq in
    if Bytes.get t.kind i = '\001' then Bytes.length t.bufs.(i) - t.hoffs.(i) + t.lens.(i)
    else Msg.length t.whole.(i)

let reset t =
  Seqring.iter (fun _ i -> drop_slot t i) t.index;
  Seqring.reset t.index

let fold f t acc =
  Seqring.fold
    (fun seq i acc ->
      let m = copy_slot t i in
      let s = Msg.to_string m in
      Msg.release m;
      f seq s acc)
    t.index acc
