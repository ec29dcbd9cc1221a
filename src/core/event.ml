type dst = Cast | Send of int
type src = Cast_from of int | Send_from of int | Raw
type dn_ctl = ..
type up_ctl = ..
type up_ctl += Lost_message of int | Blocked of bool
type dn_ctl += Stop
type part = string * string
type up_ctl += Block_ok of { round : int; parts : part list }
type dn_ctl += Block_req of { round : int } | Flush_parts of { parts : (int * part list) list }

let pp_dst ppf = function Cast -> Fmt.string ppf "cast" | Send r -> Fmt.pf ppf "send(%d)" r

let pp_src ppf = function
  | Cast_from r -> Fmt.pf ppf "cast from %d" r
  | Send_from r -> Fmt.pf ppf "send from %d" r
  | Raw -> Fmt.string ppf "raw"

let up_printers =
  ref
    [
      (function
      | Lost_message r -> Some (fun ppf -> Fmt.pf ppf "lost-message(%d)" r)
      | Blocked b -> Some (fun ppf -> Fmt.pf ppf "blocked(%b)" b)
      | Block_ok { round; parts } ->
          Some (fun ppf -> Fmt.pf ppf "block-ok(%d, %d parts)" round (List.length parts))
      | _ -> None);
    ]

let dn_printers =
  ref
    [
      (function
      | Stop -> Some (fun ppf -> Fmt.string ppf "stop")
      | Block_req { round } -> Some (fun ppf -> Fmt.pf ppf "block(%d)" round)
      | Flush_parts { parts } ->
          Some (fun ppf -> Fmt.pf ppf "flush-parts(%d members)" (List.length parts))
      | _ -> None);
    ]

let register_up_ctl_printer f = up_printers := f :: !up_printers
let register_dn_ctl_printer f = dn_printers := f :: !dn_printers

let pp_with printers ppf e =
  let rec go = function
    | [] -> Fmt.string ppf "<control event>"
    | f :: rest -> ( match f e with Some p -> p ppf | None -> go rest)
  in
  go printers

let pp_up_ctl ppf e = pp_with !up_printers ppf e
let pp_dn_ctl ppf e = pp_with !dn_printers ppf e
