type t = string

let of_octets s =
  if String.length s = 16 then Ok s
  else Error (`Msg (Printf.sprintf "an IPv6 address is 16 bytes, not %d" (String.length s)))

let of_octets_exn s = match of_octets s with Ok a -> a | Error (`Msg m) -> invalid_arg m
let to_octets t = t
let equal = String.equal
let compare = String.compare
let hash (t : t) = Hashtbl.hash t
let group t i = (Char.code t.[2 * i] lsl 8) lor Char.code t.[(2 * i) + 1]

let of_groups g =
  String.init 16 (fun i ->
      Char.chr (if i land 1 = 0 then (g.(i / 2) lsr 8) land 0xff else g.(i / 2) land 0xff))

let parse s =
  let fail () = Error (`Msg (Printf.sprintf "%S is not an IPv6 address" s)) in
  let hex_group p =
    let n = String.length p in
    if n = 0 || n > 4 then None
    else
      let ok = ref true in
      String.iter
        (fun c -> match c with '0' .. '9' | 'a' .. 'f' | 'A' .. 'F' -> () | _ -> ok := false)
        p;
      if !ok then Some (int_of_string ("0x" ^ p)) else None
  in
  (* Groups of one side of "::": hex groups, the last possibly a dotted quad. *)
  let groups side =
    if side = "" then Some []
    else
      let parts = String.split_on_char ':' side in
      let rec go acc = function
        | [] -> Some (List.rev acc)
        | [ last ] when String.contains last '.' -> (
            match Ipv4_addr.of_string last with
            | Ok a ->
                let a = Ipv4_addr.to_int a in
                Some (List.rev_append acc [ a lsr 16; a land 0xffff ])
            | Error _ -> None)
        | p :: rest -> ( match hex_group p with Some g -> go (g :: acc) rest | None -> None)
      in
      go [] parts
  in
  let find_dc () =
    let n = String.length s in
    let rec go i =
      if i + 1 >= n then None else if s.[i] = ':' && s.[i + 1] = ':' then Some i else go (i + 1)
    in
    go 0
  in
  match find_dc () with
  | None -> (
      match groups s with
      | Some g when List.length g = 8 -> Ok (of_groups (Array.of_list g))
      | _ -> fail ())
  | Some i -> (
      let left = String.sub s 0 i and right = String.sub s (i + 2) (String.length s - i - 2) in
      if
        String.length right > 0
        && (right.[0] = ':'
           ||
           let n = String.length right in
           right.[n - 1] = ':')
        || (String.length left > 0 && left.[String.length left - 1] = ':')
        ||
        let rec has_dc j =
          j + 1 < String.length right && ((right.[j] = ':' && right.[j + 1] = ':') || has_dc (j + 1))
        in
        has_dc 0
      then fail ()
      else
        match (groups left, groups right) with
        | Some l, Some r when List.length l + List.length r <= 7 ->
            let zeros = List.init (8 - List.length l - List.length r) (fun _ -> 0) in
            Ok (of_groups (Array.of_list (l @ zeros @ r)))
        | _ -> fail ())

let of_string s = parse s
let of_string_exn s = match parse s with Ok a -> a | Error (`Msg m) -> invalid_arg m

let to_string t =
  let g = Array.init 8 (group t) in
  (* The longest run of two or more zero groups, the first if tied. *)
  let best = ref (-1, 0) in
  let i = ref 0 in
  while !i < 8 do
    if g.(!i) = 0 then begin
      let j = ref !i in
      while !j < 8 && g.(!j) = 0 do
        incr j
      done;
      if !j - !i > snd !best && !j - !i >= 2 then best := (!i, !j - !i);
      i := !j
    end
    else incr i
  done;
  let hex k = Printf.sprintf "%x" g.(k) in
  match !best with
  | -1, _ -> String.concat ":" (List.init 8 hex)
  | s, n ->
      let left = String.concat ":" (List.init s hex)
      and right = String.concat ":" (List.init (8 - s - n) (fun k -> hex (s + n + k))) in
      left ^ "::" ^ right

let pp ppf t = Fmt.string ppf (to_string t)
let unspecified = String.make 16 '\000'
let loopback = String.make 15 '\000' ^ "\001"
let all_nodes = of_string_exn "ff02::1"
let all_routers = of_string_exn "ff02::2"
let is_multicast t = t.[0] = '\xff'
let is_link_local t = t.[0] = '\xfe' && Char.code t.[1] land 0xc0 = 0x80
let is_ipv4_mapped t = String.sub t 0 12 = "\000\000\000\000\000\000\000\000\000\000\xff\xff"
let solicited_node t = "\xff\x02\000\000\000\000\000\000\000\000\000\001\xff" ^ String.sub t 13 3

let multicast_mac t =
  let b i = Char.code t.[i] in
  Mac_addr.of_int ((0x3333 lsl 32) lor (b 12 lsl 24) lor (b 13 lsl 16) lor (b 14 lsl 8) lor b 15)

let link_local_of_mac m =
  let m = Mac_addr.to_int m in
  let b i = (m lsr (8 * (5 - i))) land 0xff in
  let iid = [| b 0 lxor 2; b 1; b 2; 0xff; 0xfe; b 3; b 4; b 5 |] in
  "\xfe\x80\000\000\000\000\000\000" ^ String.init 8 (fun i -> Char.chr iid.(i))

let get cs off = Cstruct.to_string (Cstruct.sub cs off 16)
let set cs off t = Cstruct.blit_from_string t 0 cs off 16

module Prefix = struct
  type addr = t
  type t = { addr : addr; len : int }

  let of_string s =
    Result.map
      (fun (addr, len) -> { addr; len })
      (Ipv4_addr.split_prefix parse ~bits:128 ~expected:"%S: expected ADDRESS/LENGTH"
         ~bad_length:"%S: a prefix length is 0 to 128" s)

  let to_string p = Printf.sprintf "%s/%d" (to_string p.addr) p.len
  let pp ppf p = Fmt.string ppf (to_string p)

  let mem a p =
    let full = p.len / 8 and rest = p.len mod 8 in
    String.sub a 0 full = String.sub p.addr 0 full
    && (rest = 0 || (Char.code a.[full] lxor Char.code p.addr.[full]) lsr (8 - rest) = 0)
end
