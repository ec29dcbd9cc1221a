let default_headroom = 64

(* Headers live right-aligned in [buf], from [hoff] to the end. [low] is the
   lowest offset any version sharing [buf] has written: a version may push
   in place only if nothing was written in front of it. *)
type head = { buf : Bytes.t; mutable low : int }

type t = {
  mutable head : head;
  mutable hoff : int;
  body : Iovecs.t;
  mutable boff : int; (* bytes of [body] already pulled *)
  mutable live : bool;
}

(* The head of every received message, shared: its [low] stays 0, as
   nothing is pushed in place in front of offset 0 of an empty buffer (a
   push allocates a head of its own). *)
let no_head = { buf = Bytes.empty; low = 0 }

let create ?(headroom = default_headroom) body =
  {
    head = { buf = Bytes.create headroom; low = headroom };
    hoff = headroom;
    body;
    boff = 0;
    live = true;
  }

let of_string pool s = create (Iovecs.of_string pool s)
let of_iovec v = { head = no_head; hoff = 0; body = [ v ]; boff = 0; live = true }
let empty () = create []

let check t name =
  if not t.live then raise (Iovec.Use_after_release ("Msg." ^ name ^ ": message already consumed"))

let consume t name =
  check t name;
  t.live <- false

(* [push] and [pull] move ownership from their argument to their result. In
   checked mode the result is a fresh record and the argument is marked
   consumed, so a stale reference is caught; otherwise the record itself
   moves, which allocates nothing. *)
let moved t =
  if Iovec.checked () then begin
    t.live <- false;
    { t with live = true }
  end
  else t

(* Cursors reused by push and pull: the library is single-threaded, and a
   codec never starts another push or pull while it runs. *)
let wcur = { Codec.W.buf = Bytes.empty; pos = 0 }
let rcur = { Codec.R.cs = Cstruct.empty; pos = 0 }

let encode_at c buf off h =
  wcur.buf <- buf;
  wcur.pos <- off;
  Codec.write c wcur h;
  wcur.buf <- Bytes.empty

let header_length t = Bytes.length t.head.buf - t.hoff

(* Headers pushed in this process and pulled again (a member's own cast,
   delivered locally) are decoded from a copy in one buffer kept for the
   purpose, not from a new bigarray each time: a codec keeps no view of
   what it reads, and the copy is a few bytes. *)
let local = ref (Cstruct.create 256)

let local_view t =
  let used = header_length t in
  if used > Cstruct.length !local then
    local := Cstruct.create (max used (2 * Cstruct.length !local));
  Cstruct.blit_from_bytes t.head.buf t.hoff !local 0 used;
  Cstruct.sub !local 0 used

(* A body of one piece (a received datagram, a cast as the application
   made it) is measured without a walk of the list. *)
let body_length = function [] -> 0 | [ v ] -> Iovec.length v | body -> Iovecs.length body
let length t = header_length t + body_length t.body - t.boff

let push c h t =
  check t "push";
  (* Size first: an invalid header raises before the message is consumed. *)
  let n = Codec.size c h in
  if t.hoff = t.head.low && t.hoff >= n then begin
    let hoff = t.hoff - n in
    encode_at c t.head.buf hoff h;
    t.head.low <- hoff;
    let t = moved t in
    t.hoff <- hoff;
    t
  end
  else begin
    let used = header_length t in
    let size = used + n + default_headroom in
    let buf = Bytes.create size in
    Bytes.blit t.head.buf t.hoff buf (size - used) used;
    let hoff = size - used - n in
    encode_at c buf hoff h;
    let t = moved t in
    t.head <- { buf; low = hoff };
    t.hoff <- hoff;
    t
  end

(* [t] with [n] bytes of room made in front of its headers, which now
   begin there: the caller writes them at [t.hoff]. *)
let make_room n t =
  if t.hoff = t.head.low && t.hoff >= n then begin
    let hoff = t.hoff - n in
    t.head.low <- hoff;
    let t = moved t in
    t.hoff <- hoff;
    t
  end
  else begin
    let used = header_length t in
    let size = used + n + default_headroom in
    let buf = Bytes.create size in
    Bytes.blit t.head.buf t.hoff buf (size - used) used;
    let hoff = size - used - n in
    let t = moved t in
    t.head <- { buf; low = hoff };
    t.hoff <- hoff;
    t
  end

let push_fields b0 b1 a t =
  check t "push_fields";
  if b0 < 0 || b0 > 0xff || b1 < 0 || b1 > 0xff then invalid_arg "Msg.push_fields: not a byte";
  (* Size first: a negative number raises before the message is consumed. *)
  let t = make_room (2 + Codec.varints_size a) t in
  let buf = t.head.buf and hoff = t.hoff in
  Bytes.unsafe_set buf hoff (Char.unsafe_chr b0);
  Bytes.unsafe_set buf (hoff + 1) (Char.unsafe_chr b1);
  ignore (Codec.write_varints_at buf (hoff + 2) a);
  t

let bytes_codec =
  Codec.custom ~name:"headers" ~size:Bytes.length
    ~write:(fun (w : Codec.W.t) b ->
      Bytes.blit b 0 w.buf w.pos (Bytes.length b);
      w.pos <- w.pos + Bytes.length b)
    ~read:(fun _ -> Codec.fail "write only")

(* The shared buffer's [low] is 0: nothing is ever pushed in place in
   front of it. *)
let push_bytes b t =
  check t "push_bytes";
  if header_length t = 0 then begin
    let t = moved t in
    t.head <- { buf = b; low = 0 };
    t.hoff <- 0;
    t
  end
  else push bytes_codec b t

let pull_pushed n t =
  check t "pull_pushed";
  if n < 0 || n > header_length t then invalid_arg "Msg.pull_pushed: not that many pushed bytes";
  let t = moved t in
  t.hoff <- t.hoff + n;
  t

let pull_bytes b t =
  check t "pull_bytes";
  let n = Bytes.length b in
  if header_length t < n then None
  else begin
    let buf = t.head.buf and off = t.hoff in
    let rec same k =
      k >= n || (Bytes.unsafe_get buf (off + k) = Bytes.unsafe_get b k && same (k + 1))
    in
    if same 0 then begin
      let t = moved t in
      t.hoff <- off + n;
      Some t
    end
    else None
  end

let rec piece_at boff = function
  | [] -> None
  | v :: rest ->
      let n = Iovec.length v in
      if boff < n then Some (v, boff) else piece_at (boff - n) rest

let pull_slow c t =
  match piece_at t.boff t.body with
  | None -> Codec.decode c Cstruct.empty 0
  | Some (v, off) -> (
      match Codec.decode c (Iovec.cstruct v) off with
      | Ok (h, next) -> Ok (h, next - off)
      | Error (`Truncated _) when Iovecs.length t.body - t.boff > Iovec.length v - off ->
          (* A header split across pieces: read it from a copy. *)
          let rest = Iovecs.sub t.body ~off:t.boff ~len:(Iovecs.length t.body - t.boff) in
          let s = Iovecs.to_string rest in
          Iovecs.release rest;
          Codec.decode c (Cstruct.of_string s) 0
      | Error _ as e -> e)

let pull c t =
  check t "pull";
  if t.hoff < Bytes.length t.head.buf then begin
    (* Headers pushed in this process and not yet sent: a local loopback. *)
    match Codec.decode c (local_view t) 0 with
    | Ok (h, n) ->
        let t = moved t in
        t.hoff <- t.hoff + n;
        Ok (h, t)
    | Error _ as e -> e
  end
  else
    let decoded =
      match t.body with
      | [ v ] when t.boff < Iovec.length v -> (
          (* A received datagram: one piece. *)
          rcur.cs <- Iovec.cstruct v;
          rcur.pos <- t.boff;
          let r = Codec.decode_cursor c rcur in
          rcur.cs <- Cstruct.empty;
          match r with Ok h -> Ok (h, rcur.pos - t.boff) | Error _ as e -> e)
      | _ -> pull_slow c t
    in
    match decoded with
    | Ok (h, pulled) ->
        let t = moved t in
        t.boff <- t.boff + pulled;
        Ok (h, t)
    | Error _ as e -> e

(* [pull] without the result and the pair: the common case of a received
   datagram in one piece decodes in place and calls [ok]; anything else
   goes through [pull]. *)
let pull_then c t x ~ok ~error =
  check t "pull";
  if t.hoff >= Bytes.length t.head.buf then
    match t.body with
    | [ v ] when t.boff < Iovec.length v -> (
        rcur.cs <- Iovec.cstruct v;
        rcur.pos <- t.boff;
        match Codec.read_cursor c rcur with
        | h ->
            let pulled = rcur.pos - t.boff in
            rcur.cs <- Cstruct.empty;
            let t = moved t in
            t.boff <- t.boff + pulled;
            ok x h t
        | exception Codec.Decode_error e ->
            rcur.cs <- Cstruct.empty;
            error e t)
    | _ -> ( match pull c t with Ok (h, t) -> ok x h t | Error e -> error e t)
  else begin
    rcur.cs <- local_view t;
    rcur.pos <- 0;
    match Codec.read_cursor c rcur with
    | h ->
        let pulled = rcur.pos in
        rcur.cs <- Cstruct.empty;
        let t = moved t in
        t.hoff <- t.hoff + pulled;
        ok x h t
    | exception Codec.Decode_error e ->
        rcur.cs <- Cstruct.empty;
        error e t
  end

(* The fields after [skip] bytes, read by the codec of a whole header
   (a message that is not a received datagram in one piece). *)
let fields_codec skip a =
  Codec.custom ~name:"fields"
    ~size:(fun () -> 0)
    ~write:(fun _ () -> invalid_arg "read only")
    ~read:(fun r ->
      for _ = 1 to skip do
        ignore (Codec.read Codec.uint8 r)
      done;
      Codec.read_varints r a)

let pull_fields skip a t =
  check t "pull_fields";
  match t.body with
  | [ v ] when t.hoff >= Bytes.length t.head.buf && t.boff < Iovec.length v ->
      (* A received datagram: one piece, read in place. *)
      let next = Codec.read_varints_at (Iovec.cstruct v) (t.boff + skip) a in
      let t = moved t in
      t.boff <- next;
      t
  | _ -> (
      match pull (fields_codec skip a) t with
      | Ok ((), t) -> t
      | Error e -> raise (Codec.Decode_error e))

let body t =
  check t "body";
  let n = Iovecs.length t.body - t.boff in
  Iovecs.sub t.body ~off:t.boff ~len:n

(* The body's bytes from [skip] on, copied by [blit] (Cstruct's, to a
   Cstruct or to bytes) to [dst] at [pos]: the offset after. A function of
   its own, so that a copy (each datagram sent, each string delivered)
   allocates no closure and no reference. *)
let rec blit_pieces blit dst pos skip = function
  | [] -> pos
  | v :: rest ->
      let n = Iovec.length v in
      if skip >= n then blit_pieces blit dst pos (skip - n) rest
      else begin
        let k = n - skip in
        blit (Iovec.cstruct v) skip dst pos k;
        blit_pieces blit dst (pos + k) 0 rest
      end

let blit_to t dst off =
  check t "blit_to";
  let used = header_length t in
  Cstruct.blit_from_bytes t.head.buf t.hoff dst off used;
  blit_pieces Cstruct.blit dst (off + used) t.boff t.body - off

let headers t =
  check t "headers";
  (t.head.buf, t.hoff, header_length t)

(* A function of its own, so that a walk allocates no closure (a delivery
   walks its message's body once). *)
let rec iter_pieces f skip = function
  | [] -> ()
  | v :: rest ->
      let n = Iovec.length v in
      if skip >= n then iter_pieces f (skip - n) rest
      else begin
        let cs = Iovec.cstruct v in
        f cs.Cstruct.buffer (cs.Cstruct.off + skip) (n - skip);
        iter_pieces f 0 rest
      end

let iter_body f t =
  check t "iter_body";
  iter_pieces f t.boff t.body

let body_string t =
  check t "body_string";
  let n = Iovecs.length t.body - t.boff in
  if n <= 0 then ""
  else begin
    let b = Bytes.create n in
    ignore (blit_pieces Cstruct.blit_to_bytes b 0 t.boff t.body);
    Bytes.unsafe_to_string b
  end

let to_iovec pool t =
  let v = Pool.alloc pool (length t) in
  ignore (blit_to t (Iovec.cstruct v) 0);
  v

let to_string t =
  let cs = Cstruct.create (length t) in
  ignore (blit_to t cs 0);
  Cstruct.to_string cs

let retain t =
  check t "retain";
  { t with body = Iovecs.retain t.body; live = true }

let release t =
  consume t "release";
  Iovecs.release t.body

let is_live t = t.live

let is_simple t =
  check t "is_simple";
  match t.body with [] -> true | [ v ] -> t.boff <= Iovec.length v | _ -> false

let bare_slice_length t =
  check t "bare_slice_length";
  if t.hoff < Bytes.length t.head.buf then -1
  else
    match t.body with
    | [] -> 0
    | [ v ] ->
        let n = Iovec.length v - t.boff in
        if n >= 0 then n else -1
    | _ -> -1

let head_bytes t = t.head.buf
let head_offset t = t.hoff

let slice_segment t =
  match t.body with
  | [ v ] when t.boff < Iovec.length v -> Iovec.segment v
  | _ -> invalid_arg "Msg.slice_segment: no body"

let slice_offset t = match t.body with [ v ] -> (Iovec.cstruct v).Cstruct.off + t.boff | _ -> 0
let slice_length t = match t.body with [ v ] -> Iovec.length v - t.boff | _ -> 0

let assemble buf hoff seg ~off ~len =
  let body = if len > 0 then [ Iovec.make seg ~off ~len ] else [] in
  { head = { buf; low = 0 }; hoff; body; boff = 0; live = true }

let pp ppf t = Fmt.pf ppf "<msg %d+%d bytes>" (header_length t) (length t - header_length t)

let first_byte t =
  check t "first_byte";
  if t.hoff < Bytes.length t.head.buf then Char.code (Bytes.get t.head.buf t.hoff)
  else
    match t.body with
    | [ v ] when t.boff < Iovec.length v -> Cstruct.get_uint8 (Iovec.cstruct v) t.boff
    | body -> (
        match piece_at t.boff body with
        | None -> -1
        | Some (v, off) -> Cstruct.get_uint8 (Iovec.cstruct v) off)

let byte_at t k =
  check t "byte_at";
  let used = header_length t in
  if k < 0 then -1
  else if k < used then Char.code (Bytes.get t.head.buf (t.hoff + k))
  else
    match t.body with
    | [ v ] ->
        let p = t.boff + k - used in
        if p < Iovec.length v then Cstruct.get_uint8 (Iovec.cstruct v) p else -1
    | body -> (
        match piece_at (t.boff + k - used) body with
        | None -> -1
        | Some (v, off) -> Cstruct.get_uint8 (Iovec.cstruct v) off)
