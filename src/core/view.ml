type t = { group : string; ltime : int; members : string array; rank : int }

let v ~group ?(ltime = 0) ~members ~rank () =
  if rank < 0 || rank >= Array.length members then invalid_arg "View.v: rank outside members";
  { group; ltime; members; rank }

let nmembers t = Array.length t.members

(* FNV-1a, 32 bits: stable across OCaml versions, unlike Hashtbl.hash. *)
let group_hash t =
  let h = ref 0x811c9dc5 in
  String.iter (fun c -> h := (!h lxor Char.code c) * 0x01000193 land 0xffff_ffff) t.group;
  !h

let pp ppf t =
  Fmt.pf ppf "@[<h>%s@@%d[%a] rank %d@]" t.group t.ltime Fmt.(array ~sep:comma string) t.members t.rank
