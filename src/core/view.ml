type t = { group : string; id : string; ltime : int; members : string array; rank : int }

let v ~group ?(ltime = 0) ?id ~members ~rank () =
  if rank < 0 || rank >= Array.length members then invalid_arg "View.v: rank outside members";
  let id = match id with Some id -> id | None -> Printf.sprintf "%d:%s" ltime members.(0) in
  { group; id; ltime; members; rank }

let nmembers t = Array.length t.members

(* FNV-1a, 32 bits: stable across OCaml versions, unlike Hashtbl.hash. *)
let fnv s =
  let h = ref 0x811c9dc5 in
  String.iter (fun c -> h := !h lxor Char.code c * 0x01000193 land 0xffff_ffff) s;
  !h

let group_hash t = fnv t.group
let stamp t = fnv (t.group ^ "\000" ^ t.id)

let pp ppf t =
  Fmt.pf ppf "@[<h>%s@@%s[%a] rank %d@]" t.group t.id Fmt.(array ~sep:comma string) t.members t.rank
