(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

type t = {
  max_blocks : int;
  mutable blocks : (Tcp_seq.t * Tcp_seq.t) list;  (** ascending, disjoint, merged *)
  mutable count : int;
  mutable sacked : int;  (** bytes covered by [blocks] *)
}

let default_max_blocks = 64
let steps = ref 0
let work () = !steps
let visit n = steps := !steps + n

let create ?(max_blocks = default_max_blocks) () =
  { max_blocks = max 1 max_blocks; blocks = []; count = 0; sacked = 0 }

let set t blocks =
  let rec measure n b = function
    | [] -> (n, b)
    | (l, r) :: rest -> measure (n + 1) (b + Tcp_seq.sub r l) rest
  in
  let n, b = measure 0 0 blocks in
  visit n;
  t.blocks <- blocks;
  t.count <- n;
  t.sacked <- b

let clear t = set t []
let is_empty t = t.blocks = []
let blocks t = t.blocks
let count t = t.count
let size (l, r) = Tcp_seq.sub r l
let sacked_bytes t = t.sacked

let add_block blocks (l, r) =
  (* Insert and merge with every overlapping or touching block. *)
  let rec go acc (l, r) = function
    | [] -> List.rev ((l, r) :: acc)
    | ((bl, br) as b) :: rest ->
        visit 1;
        if Tcp_seq.lt br l then go (b :: acc) (l, r) rest
        else if Tcp_seq.lt r bl then List.rev_append acc ((l, r) :: b :: rest)
        else go acc (Tcp_seq.min l bl, Tcp_seq.max r br) rest
  in
  go [] (l, r) blocks

(* Keep the [max] lowest blocks: those nearest the cumulative ACK matter
   for recovery, and forgetting a block only costs a retransmission. *)
let rec take n = function [] -> [] | x :: r -> if n = 0 then [] else x :: take (n - 1) r

let update t ~una ~high bs =
  let before = t.sacked in
  let blocks =
    List.fold_left
      (fun blocks (l, r) ->
        let l = Tcp_seq.max l una in
        if Tcp_seq.lt l r && Tcp_seq.leq r high then add_block blocks (l, r) else blocks)
      t.blocks bs
  in
  set t (take t.max_blocks blocks);
  t.sacked - before

(* The parts of [bs] (clipped as [update] clips them) not covered yet,
   ascending. *)
let newly t ~una ~high bs =
  let minus (l, r) =
    List.fold_left
      (fun parts (bl, br) ->
        List.concat_map
          (fun (l, r) ->
            if Tcp_seq.leq br l || Tcp_seq.leq r bl then [ (l, r) ]
            else
              (if Tcp_seq.lt l bl then [ (l, bl) ] else [])
              @ if Tcp_seq.lt br r then [ (br, r) ] else [])
          parts)
      [ (l, r) ]
      t.blocks
  in
  bs
  |> List.concat_map (fun (l, r) ->
         let l = Tcp_seq.max l una in
         if Tcp_seq.lt l r && Tcp_seq.leq r high then minus (l, r) else [])
  |> List.sort (fun (a, _) (b, _) -> if Tcp_seq.lt a b then -1 else if Tcp_seq.gt a b then 1 else 0)

let advance t una =
  set t
  @@ List.filter_map
       (fun (l, r) ->
         if Tcp_seq.leq r una then None else if Tcp_seq.lt l una then Some (una, r) else Some (l, r))
       t.blocks

let high_sacked t = match List.rev t.blocks with [] -> None | (_, r) :: _ -> Some r
let is_sacked t s = List.exists (fun (l, r) -> Tcp_seq.between s ~low:l ~high:r) t.blocks

let hole t s =
  let rec go s = function
    | [] -> (s, None)
    | (l, r) :: rest ->
        if Tcp_seq.lt s l then (s, Some l) else if Tcp_seq.lt s r then go r rest else go s rest
  in
  go s t.blocks

let lost_below t ~smss =
  let rec go count bytes = function
    | [] -> None
    | ((l, _) as b) :: rest ->
        let count = count + 1 and bytes = bytes + size b in
        if count >= 3 || bytes > 2 * smss then Some l else go count bytes rest
  in
  go 0 0 (List.rev t.blocks)

let is_lost t ~smss s =
  match lost_below t ~smss with None -> false | Some l -> Tcp_seq.lt s l && not (is_sacked t s)

let unsacked_between t a b =
  if Tcp_seq.geq a b then 0
  else
    let covered =
      List.fold_left
        (fun acc (l, r) ->
          let l = Tcp_seq.max l a and r = Tcp_seq.min r b in
          if Tcp_seq.lt l r then acc + Tcp_seq.sub r l else acc)
        0 t.blocks
    in
    Tcp_seq.sub b a - covered

let pipe t ~una ~high_rxt ~high_data ~smss =
  let not_lost_from =
    match lost_below t ~smss with
    | None -> una
    | Some l -> Tcp_seq.max una (Tcp_seq.min l high_data)
  in
  let rxt_to = Tcp_seq.max una (Tcp_seq.min high_rxt high_data) in
  unsacked_between t not_lost_from high_data + unsacked_between t una rxt_to

let next_seg t ~una ~high_rxt ~smss =
  let from = Tcp_seq.max una high_rxt in
  let s, next_block = hole t from in
  let len_to limit = match limit with None -> smss | Some l -> min smss (Tcp_seq.sub l s) in
  match lost_below t ~smss with
  | Some l when Tcp_seq.lt s l -> `Lost (s, len_to next_block)
  | _ -> (
      match high_sacked t with
      | Some h when Tcp_seq.lt s h -> `Unsacked (s, len_to next_block)
      | _ -> `None)

let pp ppf t =
  Fmt.pf ppf "[%a]" Fmt.(list ~sep:sp (pair ~sep:(any "-") Tcp_seq.pp Tcp_seq.pp)) t.blocks
