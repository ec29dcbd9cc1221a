open Consort

type t = { layers : string list; params : (string * string) list; text : string; digest : string }

let registry : (string, Layer.t) Hashtbl.t = Hashtbl.create 16
let register l = Hashtbl.replace registry (Layer.name l) l

(* Exact, and parsed back by Params.of_string. *)
let value_to_string = function
  | Params.Int i -> string_of_int i
  | Params.Float f -> Printf.sprintf "%.17g" f
  | Params.Bool b -> string_of_bool b
  | Params.Time t -> Printf.sprintf "%dns" t
  | Params.String s -> s

let effective params name = function
  | Params.Int _ -> Params.Int (Params.int params name)
  | Params.Float _ -> Params.Float (Params.float params name)
  | Params.Bool _ -> Params.Bool (Params.bool params name)
  | Params.Time _ -> Params.Time (Params.time params name)
  | Params.String _ -> Params.String (Params.string params name)

(* Bottom's own record of the identity is not part of it. *)
let own = "bottom.stack"

let make layers params =
  let text =
    String.concat ":" layers ^ "|" ^ String.concat "," (List.map (fun (k, v) -> k ^ "=" ^ v) params)
  in
  { layers; params; text; digest = String.sub (Digest.to_hex (Digest.string text)) 0 16 }

let of_layers ~params layers =
  let names = List.map Layer.name layers in
  let ps =
    List.filter_map
      (fun (name, default, _) ->
        match String.index_opt name '.' with
        | Some i when name <> own && List.mem (String.sub name 0 i) names ->
            Some (name, value_to_string (effective params name default))
        | _ -> None)
      (Params.registered ())
    |> List.sort compare
  in
  make names ps

let to_string t = t.text
let digest t = t.digest
let describe t = String.concat ":" t.layers
let equal a b = String.equal a.text b.text

let of_string s =
  match String.index_opt s '|' with
  | None -> Error (Printf.sprintf "%S is not LAYERS|TUNABLES" s)
  | Some i ->
      let layers = String.split_on_char ':' (String.sub s 0 i) in
      let rest = String.sub s (i + 1) (String.length s - i - 1) in
      let items = if rest = "" then [] else String.split_on_char ',' rest in
      let pairs =
        List.map
          (fun it ->
            match String.index_opt it '=' with
            | Some j -> Some (String.sub it 0 j, String.sub it (j + 1) (String.length it - j - 1))
            | None -> None)
          items
      in
      if List.exists (( = ) "") layers then Error (Printf.sprintf "an empty layer name in %S" s)
      else if List.exists Option.is_none pairs then
        Error (Printf.sprintf "a tunable that is not NAME=VALUE in %S" s)
      else
        let pairs = List.map Option.get pairs in
        if List.sort compare pairs <> pairs then
          Error (Printf.sprintf "tunables not in order in %S" s)
        else Ok (make layers pairs)

let resolve t ~base =
  match List.find_opt (fun n -> not (Hashtbl.mem registry n)) t.layers with
  | Some n -> Error (Printf.sprintf "layer %s is unknown to this program" n)
  | None -> (
      let layers = List.map (Hashtbl.find registry) t.layers in
      if t.params = [] then Ok (layers, base)
      else
        match
          Params.of_string (String.concat "," (List.map (fun (k, v) -> k ^ "=" ^ v) t.params))
        with
        | Error e -> Error (Fmt.str "its tunables: %a" Params.pp_error e)
        | Ok ps -> Ok (layers, Params.override base ~by:ps))
