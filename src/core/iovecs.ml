type t = Iovec.t list

let empty = []
let length t = List.fold_left (fun n v -> n + Iovec.length v) 0 t
let of_string pool s = if s = "" then [] else [ Pool.of_string pool s ]

(* One copy into the result, no intermediate string per piece. *)
let rec blit_pieces b off = function
  | [] -> ()
  | v :: rest ->
      let n = Iovec.length v in
      Cstruct.blit_to_bytes (Iovec.cstruct v) 0 b off n;
      blit_pieces b (off + n) rest

let to_string t =
  match t with
  | [] -> ""
  | [ v ] -> Iovec.to_string v
  | t ->
      let b = Bytes.create (length t) in
      blit_pieces b 0 t;
      Bytes.unsafe_to_string b

let append a b = a @ b
let retain t = List.map Iovec.retain t
let release t = List.iter Iovec.release t

let sub t ~off ~len =
  if off < 0 || len < 0 || off + len > length t then
    invalid_arg
      (Printf.sprintf "Iovecs.sub: range [%d,%d) outside %d bytes" off (off + len) (length t));
  let rec go acc off len = function
    | _ when len = 0 -> List.rev acc
    | [] -> assert false
    | v :: rest ->
        let n = Iovec.length v in
        if off >= n then go acc (off - n) len rest
        else
          let k = min len (n - off) in
          go (Iovec.sub v ~off ~len:k :: acc) 0 (len - k) rest
  in
  go [] off len t

let blit_to t dst off =
  ignore
    (List.fold_left
       (fun off v ->
         let n = Iovec.length v in
         Cstruct.blit (Iovec.cstruct v) 0 dst off n;
         off + n)
       off t)

let flatten pool t =
  match t with
  | [ v ] -> Iovec.retain v
  | _ ->
      let dst = Pool.alloc pool (length t) in
      blit_to t (Iovec.cstruct dst) 0;
      dst

let equal_string t s = length t = String.length s && to_string t = s
