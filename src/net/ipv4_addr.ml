type t = int

let of_int n = n land 0xffff_ffff
let to_int t = t

let v a b c d =
  of_int (((a land 255) lsl 24) lor ((b land 255) lsl 16) lor ((c land 255) lsl 8) lor (d land 255))

let of_string s =
  let err () = Error (`Msg (Printf.sprintf "bad IPv4 address %S" s)) in
  match String.split_on_char '.' s with
  | [ a; b; c; d ] -> (
      let byte x =
        if x = "" || String.length x > 3 || not (String.for_all (fun c -> c >= '0' && c <= '9') x)
        then None
        else
          let n = int_of_string x in
          if n > 255 then None else Some n
      in
      match (byte a, byte b, byte c, byte d) with
      | Some a, Some b, Some c, Some d -> Ok (v a b c d)
      | _ -> err ())
  | _ -> err ()

let of_string_exn s = match of_string s with Ok a -> a | Error (`Msg m) -> invalid_arg m

let to_string t =
  Printf.sprintf "%d.%d.%d.%d"
    ((t lsr 24) land 255)
    ((t lsr 16) land 255)
    ((t lsr 8) land 255)
    (t land 255)

let pp ppf t = Fmt.string ppf (to_string t)
let equal (a : t) b = a = b
let compare (a : t) b = Int.compare a b
let any = 0
let broadcast = 0xffff_ffff
let is_multicast t = t lsr 28 = 0xe

let split_prefix parse ~bits ~expected ~bad_length s =
  match String.index_opt s '/' with
  | None -> Error (`Msg (Printf.sprintf expected s))
  | Some i -> (
      let a = String.sub s 0 i and l = String.sub s (i + 1) (String.length s - i - 1) in
      match (parse a, int_of_string_opt l) with
      | Ok addr, Some len when len >= 0 && len <= bits && l <> "" && l.[0] <> '-' && l.[0] <> '+' ->
          Ok (addr, len)
      | Error e, _ -> Error e
      | _ -> Error (`Msg (Printf.sprintf bad_length s)))

module Prefix = struct
  type addr = t
  type t = { addr : addr; len : int }

  let of_string s =
    Result.map
      (fun (addr, len) -> { addr; len })
      (split_prefix of_string ~bits:32 ~expected:"bad prefix %S: expected ADDR/LEN"
         ~bad_length:"bad prefix length in %S" s)

  let to_string t = Printf.sprintf "%s/%d" (to_string t.addr) t.len
  let pp ppf t = Fmt.string ppf (to_string t)
  let netmask t = if t.len = 0 then 0 else (0xffff_ffff lsl (32 - t.len)) land 0xffff_ffff
  let network t = t.addr land netmask t
  let broadcast t = network t lor (lnot (netmask t) land 0xffff_ffff)
  let mem a t = a land netmask t = network t
end

let get cs off = Int32.to_int (Cstruct.BE.get_uint32 cs off) land 0xffff_ffff
let set cs off t = Cstruct.BE.set_uint32 cs off (Int32.of_int t)
