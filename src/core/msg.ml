let default_headroom = 64

(* Headers live right-aligned in [buf], from [hoff] to the end. [low] is the
   lowest offset any version sharing [buf] has written: a version may push
   in place only if nothing was written in front of it. *)
type head = { buf : Bytes.t; mutable low : int }

type t = {
  head : head;
  hoff : int;
  body : Iovecs.t;
  boff : int;  (* bytes of [body] already pulled *)
  mutable live : bool;
}

let no_head () = { buf = Bytes.empty; low = 0 }

let create ?(headroom = default_headroom) body =
  { head = { buf = Bytes.create headroom; low = headroom }; hoff = headroom; body; boff = 0; live = true }

let of_string pool s = create (Iovecs.of_string pool s)
let of_iovec v = { head = no_head (); hoff = 0; body = [ v ]; boff = 0; live = true }
let empty () = create []

let check t name =
  if not t.live then raise (Iovec.Use_after_release ("Msg." ^ name ^ ": message already consumed"))

let consume t name =
  check t name;
  t.live <- false

let header_length t = Bytes.length t.head.buf - t.hoff
let length t = header_length t + Iovecs.length t.body - t.boff

let push c h t =
  check t "push";
  (* Size first: an invalid header raises before the message is consumed. *)
  let n = Codec.size c h in
  t.live <- false;
  if t.hoff = t.head.low && t.hoff >= n then begin
    let hoff = t.hoff - n in
    ignore (Codec.encode_into c t.head.buf hoff h);
    t.head.low <- hoff;
    { t with hoff; live = true }
  end
  else begin
    let used = header_length t in
    let size = used + n + default_headroom in
    let buf = Bytes.create size in
    Bytes.blit t.head.buf t.hoff buf (size - used) used;
    let hoff = size - used - n in
    ignore (Codec.encode_into c buf hoff h);
    { t with head = { buf; low = hoff }; hoff; live = true }
  end

let rec first_piece boff = function
  | [] -> None
  | v :: rest ->
      let n = Iovec.length v in
      if boff < n then Some (v, boff) else first_piece (boff - n) rest

let pull c t =
  check t "pull";
  if t.hoff < Bytes.length t.head.buf then begin
    (* Headers pushed in this process and not yet sent: a local loopback. *)
    let used = header_length t in
    let cs = Cstruct.of_bytes ~off:t.hoff ~len:used t.head.buf in
    match Codec.decode c cs 0 with
    | Ok (h, n) ->
        t.live <- false;
        Ok (h, { t with hoff = t.hoff + n; live = true })
    | Error _ as e -> e
  end
  else
    let decoded =
      match first_piece t.boff t.body with
      | None -> Codec.decode c Cstruct.empty 0
      | Some (v, off) -> (
          match Codec.decode c (Iovec.cstruct v) off with
          | Error (`Truncated _) when Iovecs.length t.body - t.boff > Iovec.length v - off ->
              (* A header split across pieces: read it from a copy. *)
              let rest = Iovecs.sub t.body ~off:t.boff ~len:(Iovecs.length t.body - t.boff) in
              let s = Iovecs.to_string rest in
              Iovecs.release rest;
              Codec.decode c (Cstruct.of_string s) 0
              |> Result.map (fun (h, n) -> (h, off + n))
          | r -> r)
    in
    match decoded with
    | Ok (h, next) ->
        let pulled = match first_piece t.boff t.body with Some (_, off) -> next - off | None -> next in
        t.live <- false;
        Ok (h, { t with boff = t.boff + pulled; live = true })
    | Error _ as e -> e

let body t =
  check t "body";
  let n = Iovecs.length t.body - t.boff in
  Iovecs.sub t.body ~off:t.boff ~len:n

let blit_to t dst off =
  check t "blit_to";
  let used = header_length t in
  Cstruct.blit_from_bytes t.head.buf t.hoff dst off used;
  let pos = ref (off + used) in
  let skip = ref t.boff in
  List.iter
    (fun v ->
      let n = Iovec.length v in
      if !skip >= n then skip := !skip - n
      else begin
        let k = n - !skip in
        Cstruct.blit (Iovec.cstruct v) !skip dst !pos k;
        pos := !pos + k;
        skip := 0
      end)
    t.body;
  !pos - off

let headers t =
  check t "headers";
  (t.head.buf, t.hoff, header_length t)

let iter_body f t =
  check t "iter_body";
  let skip = ref t.boff in
  List.iter
    (fun v ->
      let n = Iovec.length v in
      if !skip >= n then skip := !skip - n
      else begin
        let cs = Iovec.cstruct v in
        f cs.Cstruct.buffer (cs.Cstruct.off + !skip) (n - !skip);
        skip := 0
      end)
    t.body

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
let pp ppf t = Fmt.pf ppf "<msg %d+%d bytes>" (header_length t) (length t - header_length t)
