let src = Logs.Src.create "consort.pool" ~doc:"Consort buffer pools"

module Log = (val Logs.src_log src : Logs.LOG)

type t = {
  name : string;
  seg_size : int;
  max_free : int;
  mutable current : Segment.t option;
  mutable pos : int;
  mutable free : Segment.t list;
  mutable nfree : int;
  mutable created : int;
  mutable in_use : int; (* pooled segments with count > 0, not counting current *)
  mutable oversize : int;
  mutable allocs : int;
  mutable leaks : int;
  mutable where : string list;
  mutable pending : (Segment.t * string) list; (* written by finalisers only *)
}

let poison seg = if Iovec.checked () then Bigarray.Array1.fill (Segment.buffer seg) '\xde'

let rec on_free t seg =
  match t.current with
  | Some c when c == seg -> t.pos <- 0
  | _ ->
      poison seg;
      t.in_use <- t.in_use - 1;
      if t.nfree < t.max_free then (
        t.free <- seg :: t.free;
        t.nfree <- t.nfree + 1)

and on_leak t seg =
  (* In checked mode the slices' own finalisers report and recover it. *)
  if not (Iovec.checked ()) then begin
    t.leaks <- t.leaks + 1;
    Log.err (fun m ->
        m "pool %s: segment %d collected with live references" t.name (Segment.id seg))
  end

and on_handle_leak t seg where = t.pending <- (seg, where) :: t.pending

and new_segment t size =
  t.created <- t.created + 1;
  Segment.create ~size ~on_free:(on_free t) ~on_leak:(on_leak t) ~on_handle_leak:(on_handle_leak t)

let drain t =
  match t.pending with
  | [] -> ()
  | l ->
      t.pending <- [];
      List.iter
        (fun (seg, where) ->
          t.leaks <- t.leaks + 1;
          if List.length t.where < 32 then t.where <- where :: t.where;
          Log.err (fun m ->
              m "pool %s: slice of segment %d leaked (never released), made at:@\n%s" t.name
                (Segment.id seg) where);
          Segment.decr seg)
        l

let create ?(segment_size = 262144) ?(max_free = 64) ?(name = "pool") () =
  if segment_size < 64 then invalid_arg "Pool.create: segment_size < 64";
  {
    name;
    seg_size = segment_size;
    max_free;
    current = None;
    pos = 0;
    free = [];
    nfree = 0;
    created = 0;
    in_use = 0;
    oversize = 0;
    allocs = 0;
    leaks = 0;
    where = [];
    pending = [];
  }

let default = create ~name:"default" ()

(* The current segment is counted as in use only once it is retired. *)
let retire t =
  match t.current with
  | None -> ()
  | Some seg ->
      t.current <- None;
      t.pos <- 0;
      if Segment.count seg = 0 then (
        t.in_use <- t.in_use + 1;
        on_free t seg)
      else t.in_use <- t.in_use + 1

let take t =
  match t.free with
  | seg :: rest ->
      t.free <- rest;
      t.nfree <- t.nfree - 1;
      seg
  | [] -> new_segment t t.seg_size

let oversize_free t seg =
  poison seg;
  t.oversize <- t.oversize - 1

let alloc t n =
  if n < 0 then invalid_arg "Pool.alloc: negative size";
  drain t;
  t.allocs <- t.allocs + 1;
  if n > t.seg_size then begin
    t.created <- t.created + 1;
    t.oversize <- t.oversize + 1;
    let seg =
      Segment.create ~size:n ~on_free:(oversize_free t) ~on_leak:(on_leak t)
        ~on_handle_leak:(on_handle_leak t)
    in
    Iovec.make seg ~off:0 ~len:n
  end
  else begin
    let seg =
      match t.current with
      | Some seg when t.seg_size - t.pos >= n -> seg
      | _ ->
          retire t;
          let seg = take t in
          t.current <- Some seg;
          t.pos <- 0;
          seg
    in
    let off = t.pos in
    (* Keep slices 8-byte aligned. *)
    t.pos <- Int.min t.seg_size ((off + n + 7) land lnot 7);
    Iovec.make seg ~off ~len:n
  end

let copy t cs =
  let n = Cstruct.length cs in
  let v = alloc t n in
  Cstruct.blit cs 0 (Iovec.cstruct v) 0 n;
  v

let of_string t s =
  let n = String.length s in
  let v = alloc t n in
  Cstruct.blit_from_string s 0 (Iovec.cstruct v) 0 n;
  v

type stats = {
  segment_size : int;
  segments_created : int;
  segments_free : int;
  segments_in_use : int;
  oversize_in_use : int;
  allocs : int;
  bytes_in_use : int;
  leaks : int;
}

let stats t =
  drain t;
  let cur = match t.current with Some _ -> 1 | None -> 0 in
  {
    segment_size = t.seg_size;
    segments_created = t.created;
    segments_free = t.nfree;
    segments_in_use = t.in_use + cur;
    oversize_in_use = t.oversize;
    allocs = t.allocs;
    bytes_in_use = (t.in_use + cur) * t.seg_size;
    leaks = t.leaks;
  }

let pp_stats ppf s =
  Fmt.pf ppf
    "segments: %d created, %d free, %d in use (+%d oversize); %d allocs; %d bytes in use; %d leaks"
    s.segments_created s.segments_free s.segments_in_use s.oversize_in_use s.allocs s.bytes_in_use
    s.leaks

let in_use t =
  drain t;
  let cur = match t.current with Some seg when Segment.count seg > 0 -> 1 | _ -> 0 in
  t.in_use + cur + t.oversize

let leak_check t =
  retire t;
  Gc.full_major ();
  Gc.full_major ();
  drain t;
  t.leaks

let leaks_where t = t.where
