type t = int

let none = 0
let all = 0xff
let read = 0x01
let create = 0x02
let modify = 0x04
let destroy = 0x08
let r4 = 0x10
let r5 = 0x20
let r6 = 0x40
let admin = 0x80

let names =
  [
    ("read", read);
    ("create", create);
    ("modify", modify);
    ("destroy", destroy);
    ("r4", r4);
    ("r5", r5);
    ("r6", r6);
    ("admin", admin);
  ]

let of_int n =
  if n >= 0 && n <= 0xff then Ok n else Error (Printf.sprintf "rights %d outside 0..255" n)

let of_int_exn n =
  match of_int n with Ok r -> r | Error e -> invalid_arg ("Rights.of_int_exn: " ^ e)

let to_int t = t
let union = ( lor )
let inter = ( land )
let subset a b = a land b = a
let mem need have = subset need have
let equal = Int.equal

let of_string s =
  let one w =
    let w = String.trim w in
    match w with
    | "all" -> Ok all
    | "none" | "" -> Ok none
    | _ -> (
        match List.assoc_opt (String.lowercase_ascii w) names with
        | Some r -> Ok r
        | None -> (
            match int_of_string_opt w with
            | Some n when n >= 0 && n <= 0xff -> Ok n
            | _ ->
                Error
                  (Printf.sprintf "unknown right %S (known: all, none, %s, or a number 0..255)" w
                     (String.concat ", " (List.map fst names)))))
  in
  List.fold_left
    (fun acc w -> match acc with Error _ -> acc | Ok r -> Result.map (union r) (one w))
    (Ok none) (String.split_on_char ',' s)

let to_string t =
  if t = all then "all"
  else if t = none then "none"
  else
    String.concat "," (List.filter_map (fun (n, b) -> if t land b <> 0 then Some n else None) names)

let pp ppf t = Fmt.string ppf (to_string t)
