type error = [ `Truncated of string | `Malformed of string | `Trailing of int ]

let pp_error ppf = function
  | `Truncated n -> Fmt.pf ppf "truncated %s" n
  | `Malformed why -> Fmt.pf ppf "malformed: %s" why
  | `Trailing n -> Fmt.pf ppf "%d trailing bytes" n

exception Fail of error

module W = struct
  type t = { mutable buf : Bytes.t; mutable pos : int }
end

module R = struct
  type t = { mutable cs : Cstruct.t; mutable pos : int }

  let remaining r = Cstruct.length r.cs - r.pos
end

type 'a t = { name : string; size : 'a -> int; write : W.t -> 'a -> unit; read : R.t -> 'a }

let name c = c.name
let size c v = c.size v
let write c w v = c.write w v
let read c r = c.read r
let fail why = raise (Fail (`Malformed why))
let need name (r : R.t) n = if r.pos + n > Cstruct.length r.cs then raise (Fail (`Truncated name))

let encode c v =
  let buf = Bytes.create (c.size v) in
  c.write { W.buf; pos = 0 } v;
  buf

let encode_string c v = Bytes.unsafe_to_string (encode c v)

let encode_into c buf off v =
  let w = { W.buf; pos = off } in
  c.write w v;
  w.pos

let decode c cs off =
  if off < 0 || off > Cstruct.length cs then Error (`Truncated c.name)
  else
    let r = { R.cs; pos = off } in
    match c.read r with
    | v -> Ok (v, r.pos)
    | exception Fail e -> Error e
    | exception Invalid_argument why -> Error (`Malformed (c.name ^ ": " ^ why))

exception Decode_error of error

let read_cursor c (r : R.t) =
  if r.pos < 0 || r.pos > Cstruct.length r.cs then raise (Decode_error (`Truncated c.name));
  match c.read r with
  | v -> v
  | exception Fail e -> raise (Decode_error e)
  | exception Invalid_argument why -> raise (Decode_error (`Malformed (c.name ^ ": " ^ why)))

let decode_cursor c (r : R.t) =
  if r.pos < 0 || r.pos > Cstruct.length r.cs then Error (`Truncated c.name)
  else
    match c.read r with
    | v -> Ok v
    | exception Fail e -> Error e
    | exception Invalid_argument why -> Error (`Malformed (c.name ^ ": " ^ why))

let decode_exact c cs =
  match decode c cs 0 with
  | Ok (v, n) when n = Cstruct.length cs -> Ok v
  | Ok (_, n) -> Error (`Trailing (Cstruct.length cs - n))
  | Error _ as e -> e

let decode_string c s = decode_exact c (Cstruct.of_string s)
let custom ~name ~size ~write ~read = { name; size; write; read }
let unit = { name = "unit"; size = (fun () -> 0); write = (fun _ () -> ()); read = (fun _ -> ()) }

let uint8 =
  {
    name = "uint8";
    size = (fun _ -> 1);
    write =
      (fun w v ->
        if v < 0 || v > 0xff then invalid_arg "Codec.uint8: out of range";
        Bytes.unsafe_set w.buf w.pos (Char.unsafe_chr v);
        w.pos <- w.pos + 1);
    read =
      (fun r ->
        need "uint8" r 1;
        let v = Cstruct.get_uint8 r.cs r.pos in
        r.pos <- r.pos + 1;
        v);
  }

let bool =
  {
    name = "bool";
    size = (fun _ -> 1);
    write = (fun w b -> uint8.write w (if b then 1 else 0));
    read =
      (fun r ->
        match uint8.read r with 0 -> false | 1 -> true | n -> fail (Printf.sprintf "bool %d" n));
  }

let uint16 =
  {
    name = "uint16";
    size = (fun _ -> 2);
    write =
      (fun w v ->
        if v < 0 || v > 0xffff then invalid_arg "Codec.uint16: out of range";
        Bytes.set_uint16_be w.buf w.pos v;
        w.pos <- w.pos + 2);
    read =
      (fun r ->
        need "uint16" r 2;
        let v = Cstruct.BE.get_uint16 r.cs r.pos in
        r.pos <- r.pos + 2;
        v);
  }

let uint32 =
  {
    name = "uint32";
    size = (fun _ -> 4);
    write =
      (fun w v ->
        if v < 0 || v > 0xffff_ffff then invalid_arg "Codec.uint32: out of range";
        Bytes.set_int32_be w.buf w.pos (Int32.of_int v);
        w.pos <- w.pos + 4);
    read =
      (fun r ->
        need "uint32" r 4;
        let v = Int32.to_int (Cstruct.BE.get_uint32 r.cs r.pos) land 0xffff_ffff in
        r.pos <- r.pos + 4;
        v);
  }

let int64 =
  {
    name = "int64";
    size = (fun _ -> 8);
    write =
      (fun w v ->
        Bytes.set_int64_be w.buf w.pos v;
        w.pos <- w.pos + 8);
    read =
      (fun r ->
        need "int64" r 8;
        let v = Cstruct.BE.get_uint64 r.cs r.pos in
        r.pos <- r.pos + 8;
        v);
  }

(* LEB128 on the 63 bits of a non-negative int: seven bits a byte, at most
   nine bytes (9 * 7 = 63). *)
let varint_size v =
  let rec go n v = if v land lnot 0x7f = 0 then n else go (n + 1) (v lsr 7) in
  go 1 v

(* The loops take everything as arguments: no closure is made per number. *)
let rec write_varint (w : W.t) v =
  if v land lnot 0x7f = 0 then (
    Bytes.unsafe_set w.buf w.pos (Char.unsafe_chr v);
    w.pos <- w.pos + 1)
  else (
    Bytes.unsafe_set w.buf w.pos (Char.unsafe_chr (v land 0x7f lor 0x80));
    w.pos <- w.pos + 1;
    write_varint w (v lsr 7))

let rec read_varint_from name (r : R.t) len acc shift i =
  if r.pos >= len then raise (Fail (`Truncated name));
  let b = Cstruct.get_uint8 r.cs r.pos in
  r.pos <- r.pos + 1;
  let acc = acc lor ((b land 0x7f) lsl shift) in
  if b land 0x80 = 0 then (
    if b = 0 && i > 0 then fail (name ^ ": overlong encoding");
    acc)
  else if i = 8 then fail (name ^ ": more than 9 bytes")
  else read_varint_from name r len acc (shift + 7) (i + 1)

let read_varint name (r : R.t) = read_varint_from name r (Cstruct.length r.cs) 0 0 0

(* [Array.length a] varints in one pass over [len] bytes of [buf] from
   [base], starting at [pos], without a call per number or per byte:
   one-byte numbers (the common width) taken at once, the same errors as
   [varint]. The offset after them. *)
let varints_in (buf : Cstruct.buffer) base len pos (a : int array) =
  let pos = ref pos in
  for k = 0 to Array.length a - 1 do
    let p = !pos in
    if p >= len then raise (Fail (`Truncated "varint"));
    let b = Char.code (Bigarray.Array1.unsafe_get buf (base + p)) in
    if b < 0x80 then begin
      Array.unsafe_set a k b;
      pos := p + 1
    end
    else begin
      let acc = ref (b land 0x7f) and shift = ref 7 and q = ref (p + 1) and last = ref false in
      while not !last do
        if !q >= len then raise (Fail (`Truncated "varint"));
        let c = Char.code (Bigarray.Array1.unsafe_get buf (base + !q)) in
        incr q;
        acc := !acc lor ((c land 0x7f) lsl !shift);
        if c land 0x80 = 0 then begin
          if c = 0 then fail "varint: overlong encoding";
          last := true
        end
        else if !q - p = 9 then fail "varint: more than 9 bytes"
        else shift := !shift + 7
      done;
      if !acc < 0 then fail "varint: overflow";
      Array.unsafe_set a k !acc;
      pos := !q
    end
  done;
  !pos

let read_varints (r : R.t) (a : int array) =
  let cs = r.cs in
  r.pos <- varints_in cs.Cstruct.buffer cs.Cstruct.off cs.Cstruct.len r.pos a

let read_varints_at (cs : Cstruct.t) pos a =
  if pos < 0 || pos > cs.Cstruct.len then raise (Decode_error (`Truncated "varint"));
  match varints_in cs.Cstruct.buffer cs.Cstruct.off cs.Cstruct.len pos a with
  | next -> next
  | exception Fail e -> raise (Decode_error e)

let write_varints (w : W.t) (a : int array) =
  for k = 0 to Array.length a - 1 do
    let v = Array.unsafe_get a k in
    if v < 0 then invalid_arg "Codec.varint: negative";
    if v < 0x80 then begin
      Bytes.unsafe_set w.buf w.pos (Char.unsafe_chr v);
      w.pos <- w.pos + 1
    end
    else write_varint w v
  done

let varints_size (a : int array) =
  let n = ref 0 in
  for k = 0 to Array.length a - 1 do
    let v = Array.unsafe_get a k in
    if v < 0 then invalid_arg "Codec.varint: negative";
    n := !n + if v < 0x80 then 1 else varint_size v
  done;
  !n

(* [write_varints] at [pos] of [buf], without a cursor: the offset after.
   The numbers were checked by [varints_size], which gave the room. *)
let write_varints_at buf pos (a : int array) =
  let pos = ref pos in
  for k = 0 to Array.length a - 1 do
    let v = ref (Array.unsafe_get a k) in
    while !v land lnot 0x7f <> 0 do
      Bytes.unsafe_set buf !pos (Char.unsafe_chr (!v land 0x7f lor 0x80));
      incr pos;
      v := !v lsr 7
    done;
    Bytes.unsafe_set buf !pos (Char.unsafe_chr !v);
    incr pos
  done;
  !pos

let varint =
  {
    name = "varint";
    size =
      (fun v ->
        if v < 0 then invalid_arg "Codec.varint: negative";
        varint_size v);
    write =
      (fun w v ->
        if v < 0 then invalid_arg "Codec.varint: negative";
        write_varint w v);
    read =
      (fun r ->
        let v = read_varint "varint" r in
        if v < 0 then fail "varint: overflow";
        v);
  }

let zz v = (v lsl 1) lxor (v asr 62)
let unzz u = (u lsr 1) lxor -(u land 1)

let zigzag =
  {
    name = "zigzag";
    size = (fun v -> varint_size (zz v));
    write = (fun w v -> write_varint w (zz v));
    read = (fun r -> unzz (read_varint "zigzag" r));
  }

let read_bytes name (r : R.t) n =
  need name r n;
  let s = Cstruct.to_string ~off:r.pos ~len:n r.cs in
  r.pos <- r.pos + n;
  s

let string ?(max = 65536) () =
  let name = "string" in
  {
    name;
    size = (fun s -> varint_size (String.length s) + String.length s);
    write =
      (fun w s ->
        let n = String.length s in
        if n > max then invalid_arg "Codec.string: too long";
        write_varint w n;
        Bytes.blit_string s 0 w.buf w.pos n;
        w.pos <- w.pos + n);
    read =
      (fun r ->
        let n = read_varint name r in
        if n < 0 then fail "string: length overflows an int";
        if n > max then fail (Printf.sprintf "string of %d bytes, limit %d" n max);
        read_bytes name r n);
  }

let fixed_string n =
  let name = Printf.sprintf "fixed_string(%d)" n in
  {
    name;
    size = (fun _ -> n);
    write =
      (fun w s ->
        if String.length s <> n then invalid_arg ("Codec." ^ name ^ ": wrong length");
        Bytes.blit_string s 0 w.buf w.pos n;
        w.pos <- w.pos + n);
    read = (fun r -> read_bytes name r n);
  }

let option c =
  {
    name = c.name ^ " option";
    size = (function None -> 1 | Some v -> 1 + c.size v);
    write =
      (fun w -> function
        | None -> uint8.write w 0
        | Some v ->
            uint8.write w 1;
            c.write w v);
    read =
      (fun r ->
        match uint8.read r with
        | 0 -> None
        | 1 -> Some (c.read r)
        | n -> fail (Printf.sprintf "%s option: tag %d" c.name n));
  }

let pair a b =
  {
    name = Printf.sprintf "(%s * %s)" a.name b.name;
    size = (fun (x, y) -> a.size x + b.size y);
    write =
      (fun w (x, y) ->
        a.write w x;
        b.write w y);
    read =
      (fun r ->
        let x = a.read r in
        let y = b.read r in
        (x, y));
  }

let tup3 a b c =
  {
    name = Printf.sprintf "(%s * %s * %s)" a.name b.name c.name;
    size = (fun (x, y, z) -> a.size x + b.size y + c.size z);
    write =
      (fun w (x, y, z) ->
        a.write w x;
        b.write w y;
        c.write w z);
    read =
      (fun r ->
        let x = a.read r in
        let y = b.read r in
        let z = c.read r in
        (x, y, z));
  }

let tup4 a b c d =
  {
    name = Printf.sprintf "(%s * %s * %s * %s)" a.name b.name c.name d.name;
    size = (fun (x, y, z, u) -> a.size x + b.size y + c.size z + d.size u);
    write =
      (fun w (x, y, z, u) ->
        a.write w x;
        b.write w y;
        c.write w z;
        d.write w u);
    read =
      (fun r ->
        let x = a.read r in
        let y = b.read r in
        let z = c.read r in
        let u = d.read r in
        (x, y, z, u));
  }

let list ?(max = 4096) c =
  let name = c.name ^ " list" in
  {
    name;
    size = (fun l -> List.fold_left (fun n v -> n + c.size v) (varint_size (List.length l)) l);
    write =
      (fun w l ->
        let n = List.length l in
        if n > max then invalid_arg ("Codec." ^ name ^ ": too many elements");
        write_varint w n;
        List.iter (c.write w) l);
    read =
      (fun r ->
        let n = read_varint name r in
        (* A count past 62 bits reads as negative and would never reach zero below. *)
        if n < 0 then fail (name ^ ": count overflows an int");
        if n > max then fail (Printf.sprintf "%s: %d elements, limit %d" name n max);
        (* Each element takes at least one byte unless its codec is empty,
           so a huge count on short input fails fast below. *)
        let rec go acc i = if i = 0 then List.rev acc else go (c.read r :: acc) (i - 1) in
        go [] n);
  }

let array ?max c =
  let l = list ?max c in
  {
    name = c.name ^ " array";
    size = (fun a -> l.size (Array.to_list a));
    write = (fun w a -> l.write w (Array.to_list a));
    read = (fun r -> Array.of_list (l.read r));
  }

let conv ?name to_ of_ c =
  let name = match name with Some n -> n | None -> c.name in
  {
    name;
    size = (fun b -> c.size (to_ b));
    write = (fun w b -> c.write w (to_ b));
    read = (fun r -> match of_ (c.read r) with Ok b -> b | Error why -> fail (name ^ ": " ^ why));
  }

let map ?name to_ of_ c = conv ?name to_ (fun a -> Ok (of_ a)) c

type 'a case = Case : int * string * 'b t * ('a -> 'b option) * ('b -> 'a) -> 'a case

let case tag name c proj inj =
  if tag < 0 || tag > 255 then invalid_arg "Codec.case: tag outside 0..255";
  Case (tag, name, c, proj, inj)

(* Top-level loops: no closure is made per value. *)
let rec union_size name v = function
  | [] -> invalid_arg ("Codec.union " ^ name ^ ": no case for value")
  | Case (_, _, c, proj, _) :: rest -> (
      match proj v with Some b -> 1 + c.size b | None -> union_size name v rest)

let rec union_write name w v = function
  | [] -> invalid_arg ("Codec.union " ^ name ^ ": no case for value")
  | Case (tag, _, c, proj, _) :: rest -> (
      match proj v with
      | Some b ->
          uint8.write w tag;
          c.write w b
      | None -> union_write name w v rest)

let union name cases =
  let table = Array.make 256 None in
  List.iter
    (fun (Case (tag, _, _, _, _) as k) ->
      if table.(tag) <> None then
        invalid_arg (Printf.sprintf "Codec.union %s: tag %d twice" name tag);
      table.(tag) <- Some k)
    cases;
  {
    name;
    size = (fun v -> union_size name v cases);
    write = (fun w v -> union_write name w v cases);
    read =
      (fun r ->
        let tag = uint8.read r in
        match table.(tag) with
        | Some (Case (_, _, c, _, inj)) -> inj (c.read r)
        | None -> fail (Printf.sprintf "%s: unknown tag %d" name tag));
  }
