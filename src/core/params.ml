type value = Int of int | Float of float | Bool of bool | Time of Time.t | String of string
type t = (string * value) list
type range = { min : value; max : value }

let table : (string, value * string * range option) Hashtbl.t = Hashtbl.create 32
let empty = []
let set k v t = (k, v) :: List.remove_assoc k t
let override t ~by = List.fold_right (fun (k, v) acc -> set k v acc) by t

let same_kind a b =
  match (a, b) with
  | Int _, Int _ | Float _, Float _ | Bool _, Bool _ | Time _, Time _ | String _, String _ -> true
  | _ -> false

(* Without a range given, numbers are positive: every tunable so far is a
   size, a count or a duration, which zero or less would break. *)
let default_range = function
  | Int _ -> Some { min = Int 1; max = Int (1 lsl 40) }
  | Time _ -> Some { min = Time 1; max = Time (Time.of_sec 86400.) }
  | Float _ -> Some { min = Float 0.; max = Float 1e12 }
  | Bool _ | String _ -> None

let register ?min ?max name v ~doc =
  let range =
    match (default_range v, min, max) with
    | None, _, _ -> None
    | Some d, lo, hi ->
        let pick given dflt =
          match given with
          | Some x when same_kind x v -> x
          | Some _ -> invalid_arg ("Params.register: range of " ^ name)
          | None -> dflt
        in
        Some { min = pick lo d.min; max = pick hi d.max }
  in
  match Hashtbl.find_opt table name with
  | Some (old, _, _) when not (same_kind old v) ->
      invalid_arg ("Params.register: " ^ name ^ " twice")
  | _ -> Hashtbl.replace table name (v, doc, range)

let find t name =
  match List.assoc_opt name t with
  | Some v -> v
  | None -> (
      match Hashtbl.find_opt table name with
      | Some (v, _, _) -> v
      | None -> invalid_arg ("Params: unknown tunable " ^ name))

let kind_error name = invalid_arg ("Params: wrong kind for " ^ name)
let int t n = match find t n with Int i -> i | _ -> kind_error n
let float t n = match find t n with Float f -> f | _ -> kind_error n
let bool t n = match find t n with Bool b -> b | _ -> kind_error n
let time t n = match find t n with Time x -> x | _ -> kind_error n
let string t n = match find t n with String s -> s | _ -> kind_error n

let parse_time s =
  let num suffix k =
    let body = String.sub s 0 (String.length s - String.length suffix) in
    match float_of_string_opt body with
    | Some f when Float.is_finite f && Float.abs (f *. k) < 4e18 -> Some (int_of_float (f *. k))
    | _ -> None
  in
  let ends suf = String.length s > String.length suf && String.ends_with ~suffix:suf s in
  if ends "ns" then num "ns" 1.
  else if ends "us" then num "us" 1e3
  else if ends "ms" then num "ms" 1e6
  else if ends "s" then num "s" 1e9
  else None

let parse name default s =
  match default with
  | Int _ -> Option.map (fun i -> Int i) (int_of_string_opt s)
  | Float _ -> Option.map (fun f -> Float f) (float_of_string_opt s)
  | Bool _ -> Option.map (fun b -> Bool b) (bool_of_string_opt s)
  | Time _ -> Option.map (fun t -> Time t) (parse_time s)
  | String _ ->
      ignore name;
      Some (String s)

let pp_value ppf = function
  | Int i -> Fmt.int ppf i
  | Float f -> Fmt.float ppf f
  | Bool b -> Fmt.bool ppf b
  | Time t -> Time.pp ppf t
  | String s -> Fmt.string ppf s

let kind_name = function
  | Int _ -> "an integer"
  | Float _ -> "a number"
  | Bool _ -> "true or false"
  | Time _ -> "a duration such as 20ms, 1.5s, 300us or 100ns"
  | String _ -> "a string"

type error =
  | Not_an_assignment of string
  | Unknown of string
  | Bad_value of { name : string; value : string; expected : string }
  | Out_of_range of { name : string; value : value; range : range }

let pp_range ppf { min; max } = Fmt.pf ppf "[%a, %a]" pp_value min pp_value max

let pp_error ppf = function
  | Not_an_assignment item -> Fmt.pf ppf "%S: expected NAME=VALUE" item
  | Unknown name -> Fmt.pf ppf "unknown tunable %S (see consort params)" name
  | Bad_value { name; value; expected } -> Fmt.pf ppf "%s=%s: expected %s" name value expected
  | Out_of_range { name; value; range } ->
      Fmt.pf ppf "%s=%a is out of its range %a" name pp_value value pp_range range

let compare_value a b =
  match (a, b) with
  | Int x, Int y -> compare x y
  | Time x, Time y -> compare x y
  | Float x, Float y -> compare x y
  | _ -> 0

let in_range v = function
  | None -> true
  | Some { min; max } -> (
      match v with
      | Float f when Float.is_nan f -> false
      | _ -> compare_value v min >= 0 && compare_value v max <= 0)

let range name = match Hashtbl.find_opt table name with Some (_, _, r) -> r | None -> None

let of_string s =
  let items = List.filter (( <> ) "") (String.split_on_char ',' s) in
  List.fold_left
    (fun acc item ->
      Result.bind acc (fun t ->
          match String.index_opt item '=' with
          | None -> Error (Not_an_assignment item)
          | Some i -> (
              let k = String.trim (String.sub item 0 i) in
              let v = String.trim (String.sub item (i + 1) (String.length item - i - 1)) in
              match Hashtbl.find_opt table k with
              | None -> Error (Unknown k)
              | Some (d, _, r) -> (
                  match parse k d v with
                  | None -> Error (Bad_value { name = k; value = v; expected = kind_name d })
                  | Some x when not (in_range x r) -> (
                      match r with
                      | Some range -> Error (Out_of_range { name = k; value = x; range })
                      | None -> Ok (set k x t))
                  | Some x -> Ok (set k x t)))))
    (Ok empty) items

let registered () =
  Hashtbl.fold (fun k (v, d, _) acc -> (k, v, d) :: acc) table []
  |> List.sort (fun (a, _, _) (b, _, _) -> compare a b)
