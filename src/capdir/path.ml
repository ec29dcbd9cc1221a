module Cap = Consort_cap.Cap

let split path = String.split_on_char '/' path |> List.filter (fun s -> s <> "" && s <> ".")

let parent path =
  match List.rev (split path) with
  | [] -> None
  | last :: rest -> Some (String.concat "/" (List.rev rest), last)

type 'e error = [ `Lookup of string * 'e | `Withheld of string | `Empty of string ]

let pp_error pp_e ppf = function
  | `Lookup (p, e) -> Fmt.pf ppf "%s: %a" p pp_e e
  | `Withheld p -> Fmt.pf ppf "%s: the capability is withheld (only its own server can narrow it)" p
  | `Empty p -> Fmt.pf ppf "%s: a row without a capability" p

let resolve ~lookup root path =
  let rec go cap seen = function
    | [] -> Ok cap
    | name :: rest -> (
        let here = String.concat "/" (List.rev (name :: seen)) in
        match lookup cap name with
        | Error e -> Error (`Lookup (here, e))
        | Ok entries -> (
            match
              List.find_map (function Dir.Narrowed c -> Some c | Dir.Withheld _ -> None) entries
            with
            | Some c -> go c (name :: seen) rest
            | None -> if entries = [] then Error (`Empty here) else Error (`Withheld here)))
  in
  go root [] (split path)
