type syn = { mss : int option; wscale : int option; sack_permitted : bool; ts_val : int option }

let of_syn opts =
  List.fold_left
    (fun s -> function
      | Tcp_packet.Mss n -> { s with mss = Some n }
      | Window_scale n -> { s with wscale = Some (min n 14) }
      | Sack_permitted -> { s with sack_permitted = true }
      | Timestamp { value; _ } -> { s with ts_val = Some value }
      | _ -> s)
    { mss = None; wscale = None; sack_permitted = false; ts_val = None }
    opts

let timestamp opts =
  List.find_map
    (function Tcp_packet.Timestamp { value; echo } -> Some (value, echo) | _ -> None)
    opts

let sack opts = List.find_map (function Tcp_packet.Sack bs -> Some bs | _ -> None) opts

let syn ~mss ~wscale ~sack ~ts =
  let ws = match wscale with Some s -> [ Tcp_packet.Window_scale s ] | None -> [] in
  let sack = if sack then [ Tcp_packet.Sack_permitted ] else [] in
  let ts =
    match ts with Some (value, echo) -> [ Tcp_packet.Timestamp { value; echo } ] | None -> []
  in
  (Tcp_packet.Mss mss :: ws) @ sack @ ts

let data ~ts ~sack =
  let ts =
    match ts with Some (value, echo) -> [ Tcp_packet.Timestamp { value; echo } ] | None -> []
  in
  match sack with [] -> ts | bs -> ts @ [ Tcp_packet.Sack bs ]

let sack_max ~ts = if ts then 3 else 4

let length ~ts ~sack_blocks =
  let ts = if ts then 10 else 0 in
  let sack = if sack_blocks > 0 then 2 + (8 * sack_blocks) else 0 in
  (ts + sack + 3) land lnot 3
