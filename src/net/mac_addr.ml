type t = int

let of_int n = n land 0xffff_ffff_ffff
let to_int t = t

let of_string s =
  let parts = String.split_on_char ':' s in
  let hex x =
    let is_hex c = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') in
    if String.length x <> 2 || not (String.for_all is_hex x) then None
    else int_of_string_opt ("0x" ^ x)
  in
  if List.length parts <> 6 then Error (`Msg (Printf.sprintf "bad MAC address %S" s))
  else
    List.fold_left
      (fun acc x ->
        match (acc, hex x) with
        | Ok a, Some b -> Ok ((a lsl 8) lor b)
        | _ -> Error (`Msg (Printf.sprintf "bad MAC address %S" s)))
      (Ok 0) parts

let of_string_exn s = match of_string s with Ok a -> a | Error (`Msg m) -> invalid_arg m

let to_string t =
  String.concat ":" (List.init 6 (fun i -> Printf.sprintf "%02x" ((t lsr (8 * (5 - i))) land 255)))

let pp ppf t = Fmt.string ppf (to_string t)
let equal (a : t) b = a = b
let compare (a : t) b = Int.compare a b
let broadcast = 0xffff_ffff_ffff
let zero = 0
let is_group t = (t lsr 40) land 1 = 1
let local n = (0x02 lsl 40) lor (n land 0xff_ffff_ffff)

let get cs off =
  (Cstruct.BE.get_uint16 cs off lsl 32)
  lor (Int32.to_int (Cstruct.BE.get_uint32 cs (off + 2)) land 0xffff_ffff)

let set cs off t =
  Cstruct.BE.set_uint16 cs off (t lsr 32);
  Cstruct.BE.set_uint32 cs (off + 2) (Int32.of_int (t land 0xffff_ffff))
