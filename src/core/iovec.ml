exception Use_after_release of string

let checked_mode = ref (match Sys.getenv_opt "CONSORT_CHECKED" with Some "1" -> true | _ -> false)
let set_checked b = checked_mode := b
let checked () = !checked_mode

type t = { seg : Segment.t; cs : Cstruct.t; mutable live : bool }

let describe t =
  Printf.sprintf "iovec of %d bytes at offset %d of segment %d" t.cs.Cstruct.len t.cs.Cstruct.off
    (Segment.id t.seg)

let dead t = raise (Use_after_release (describe t))

(* Where the iovec was made is kept raw, and made text only if it leaks:
   formatting it for every iovec made checked runs four times slower. *)
let watch t =
  let where = Printexc.get_callstack 6 in
  Gc.finalise
    (fun t ->
      if t.live then (
        t.live <- false;
        Segment.handle_leaked t.seg (Printexc.raw_backtrace_to_string where)))
    t

let make seg ~off ~len =
  Segment.incr seg;
  let t = { seg; cs = Cstruct.of_bigarray (Segment.buffer seg) ~off ~len; live = true } in
  if !checked_mode then watch t;
  t

let length t = t.cs.Cstruct.len
let is_live t = t.live
let cstruct t = if t.live then t.cs else dead t
let segment t = t.seg

let sub t ~off ~len =
  if not t.live then dead t;
  if off < 0 || len < 0 || off + len > t.cs.Cstruct.len then
    invalid_arg
      (Printf.sprintf "Iovec.sub: range [%d,%d) outside %d bytes" off (off + len) t.cs.Cstruct.len);
  make t.seg ~off:(t.cs.Cstruct.off + off) ~len

let shift t n = sub t ~off:n ~len:(length t - n)

(* A new owner of the same bytes: the slice (immutable) is shared. *)
let retain t =
  if not t.live then dead t;
  Segment.incr t.seg;
  let r = { seg = t.seg; cs = t.cs; live = true } in
  if !checked_mode then watch r;
  r

let release t =
  if not t.live then dead t;
  t.live <- false;
  Segment.decr t.seg

let to_string t = Cstruct.to_string (cstruct t)
let pp ppf t = Fmt.pf ppf "<iovec %d bytes%s>" (length t) (if t.live then "" else " released")
