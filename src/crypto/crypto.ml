let initialised = ref false

let ensure_default () =
  if not !initialised then begin
    initialised := true;
    match Mirage_crypto_rng.default_generator () with
    | _ -> ()
    | exception _ -> Mirage_crypto_rng_unix.initialize ()
  end

let random ?g n =
  (match g with None -> ensure_default () | Some _ -> ());
  Cstruct.to_string (Mirage_crypto_rng.generate ?g n)

let deterministic seed =
  Mirage_crypto_rng.create ~seed:(Cstruct.of_string seed) (module Mirage_crypto_rng.Fortuna)

let hmac ~key parts =
  Cstruct.to_string
    (Mirage_crypto.Hash.SHA256.hmaci ~key:(Cstruct.of_string key) (fun f ->
         List.iter (fun p -> f (Cstruct.of_string p)) parts))

let sha256 parts =
  Cstruct.to_string
    (Mirage_crypto.Hash.SHA256.digesti (fun f -> List.iter (fun p -> f (Cstruct.of_string p)) parts))

let equal a b = Eqaf.equal a b

let to_hex s =
  let b = Buffer.create (2 * String.length s) in
  String.iter (fun c -> Buffer.add_string b (Printf.sprintf "%02x" (Char.code c))) s;
  Buffer.contents b

let of_hex h =
  let n = String.length h in
  if n mod 2 <> 0 then Error "odd number of hex digits"
  else
    let digit c =
      match c with
      | '0' .. '9' -> Some (Char.code c - 48)
      | 'a' .. 'f' -> Some (Char.code c - 87)
      | 'A' .. 'F' -> Some (Char.code c - 55)
      | _ -> None
    in
    let out = Bytes.create (n / 2) in
    let rec go i =
      if i >= n / 2 then Ok (Bytes.to_string out)
      else
        match (digit h.[2 * i], digit h.[(2 * i) + 1]) with
        | Some a, Some b ->
            Bytes.set out i (Char.chr ((a * 16) + b));
            go (i + 1)
        | _ -> Error "not a hex digit"
    in
    go 0
