type value = Int of int | Float of float | Bool of bool | Time of Time.t | String of string
type t = (string * value) list

let table : (string, value * string) Hashtbl.t = Hashtbl.create 32
let empty = []
let set k v t = (k, v) :: List.remove_assoc k t
let override t ~by = List.fold_right (fun (k, v) acc -> set k v acc) by t

let same_kind a b =
  match (a, b) with
  | Int _, Int _ | Float _, Float _ | Bool _, Bool _ | Time _, Time _ | String _, String _ -> true
  | _ -> false

let register name v ~doc =
  match Hashtbl.find_opt table name with
  | Some (old, _) when not (same_kind old v) -> invalid_arg ("Params.register: " ^ name ^ " twice")
  | _ -> Hashtbl.replace table name (v, doc)

let find t name =
  match List.assoc_opt name t with
  | Some v -> v
  | None -> (
      match Hashtbl.find_opt table name with
      | Some (v, _) -> v
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
    Option.map (fun f -> int_of_float (f *. k)) (float_of_string_opt body)
  in
  let ends suf = String.length s > String.length suf && String.ends_with ~suffix:suf s in
  if ends "ns" then num "ns" 1. else if ends "us" then num "us" 1e3
  else if ends "ms" then num "ms" 1e6
  else if ends "s" then num "s" 1e9
  else None

let parse name default s =
  match default with
  | Int _ -> Option.map (fun i -> Int i) (int_of_string_opt s)
  | Float _ -> Option.map (fun f -> Float f) (float_of_string_opt s)
  | Bool _ -> Option.map (fun b -> Bool b) (bool_of_string_opt s)
  | Time _ -> Option.map (fun t -> Time t) (parse_time s)
  | String _ -> ignore name; Some (String s)

let of_string s =
  let items = List.filter (( <> ) "") (String.split_on_char ',' s) in
  List.fold_left
    (fun acc item ->
      Result.bind acc (fun t ->
          match String.index_opt item '=' with
          | None -> Error (Printf.sprintf "%S: expected NAME=VALUE" item)
          | Some i -> (
              let k = String.trim (String.sub item 0 i) in
              let v = String.trim (String.sub item (i + 1) (String.length item - i - 1)) in
              match Hashtbl.find_opt table k with
              | None -> Error (Printf.sprintf "unknown tunable %S" k)
              | Some (d, _) -> (
                  match parse k d v with
                  | Some x -> Ok (set k x t)
                  | None -> Error (Printf.sprintf "bad value %S for %s" v k)))))
    (Ok empty) items

let pp_value ppf = function
  | Int i -> Fmt.int ppf i
  | Float f -> Fmt.float ppf f
  | Bool b -> Fmt.bool ppf b
  | Time t -> Time.pp ppf t
  | String s -> Fmt.string ppf s

let registered () =
  Hashtbl.fold (fun k (v, d) acc -> (k, v, d) :: acc) table []
  |> List.sort (fun (a, _, _) (b, _, _) -> compare a b)
