module Codec = Consort.Codec

type t =
  | Get of string
  | Put of string * string
  | Del of string
  | Cas of { key : string; expect : string; set : string }

type response = Ok | Value of string | Not_found | Cas_failed | Error of string

let key = function Get k | Put (k, _) | Del k -> k | Cas { key; _ } -> key
let is_read = function Get _ -> true | _ -> false

let pp ppf = function
  | Get k -> Fmt.pf ppf "get %s" k
  | Put (k, v) -> Fmt.pf ppf "put %s %s" k v
  | Del k -> Fmt.pf ppf "del %s" k
  | Cas { key; expect; set } -> Fmt.pf ppf "cas %s %s %s" key expect set

let pp_response ppf = function
  | Ok -> Fmt.string ppf "ok"
  | Value v -> Fmt.pf ppf "value %s" v
  | Not_found -> Fmt.string ppf "not-found"
  | Cas_failed -> Fmt.string ppf "cas-failed"
  | Error r -> Fmt.pf ppf "error: %s" r

(* Wire limits: larger than any configurable limit, so that a decoder never
   allocates more than this for one string. *)
let s = Codec.string ~max:(16 * 1024 * 1024) ()

let codec =
  Codec.union "kv-op"
    [
      Codec.case 0 "get" s (function Get k -> Some k | _ -> None) (fun k -> Get k);
      Codec.case 1 "put" (Codec.pair s s)
        (function Put (k, v) -> Some (k, v) | _ -> None)
        (fun (k, v) -> Put (k, v));
      Codec.case 2 "del" s (function Del k -> Some k | _ -> None) (fun k -> Del k);
      Codec.case 3 "cas" (Codec.tup3 s s s)
        (function Cas { key; expect; set } -> Some (key, expect, set) | _ -> None)
        (fun (key, expect, set) -> Cas { key; expect; set });
    ]

let response_codec =
  Codec.union "kv-response"
    [
      Codec.case 0 "ok" Codec.unit (function Ok -> Some () | _ -> None) (fun () -> Ok);
      Codec.case 1 "value" s (function Value v -> Some v | _ -> None) (fun v -> Value v);
      Codec.case 2 "not-found" Codec.unit
        (function Not_found -> Some () | _ -> None)
        (fun () -> Not_found);
      Codec.case 3 "cas-failed" Codec.unit
        (function Cas_failed -> Some () | _ -> None)
        (fun () -> Cas_failed);
      Codec.case 4 "error" (Codec.string ~max:4096 ())
        (function Error r -> Some r | _ -> None)
        (fun r -> Error r);
    ]

type limits = { max_key : int; max_value : int; max_keys : int; max_bytes : int; max_clients : int }

let default_limits =
  {
    max_key = 1024;
    max_value = 65536;
    max_keys = 1_000_000;
    max_bytes = 32 * 1024 * 1024;
    max_clients = 100_000;
  }

let check l op =
  let k = key op in
  let value v =
    if String.length v > l.max_value then
      Result.Error (Printf.sprintf "value of %d bytes, over %d" (String.length v) l.max_value)
    else Result.Ok ()
  in
  if String.length k > l.max_key then
    Result.Error (Printf.sprintf "key of %d bytes, over %d" (String.length k) l.max_key)
  else if k = "" then Result.Error "empty key"
  else
    match op with
    | Get _ | Del _ -> Result.Ok ()
    | Put (_, v) -> value v
    | Cas { expect; set; _ } -> Result.bind (value expect) (fun () -> value set)

module L = Consort_spec.Linearizable

let to_spec = function
  | Get _ -> L.Get
  | Put (_, v) -> L.Put v
  | Del _ -> L.Del
  | Cas { expect; set; _ } -> L.Cas { expect; set }

let response_to_spec = function
  | Ok -> Some L.Ok
  | Value v -> Some (L.Value v)
  | Not_found -> Some L.Not_found
  | Cas_failed -> Some L.Cas_failed
  | Error _ -> None

let parse = function
  | [ "get"; k ] -> Result.Ok (Get k)
  | [ "put"; k; v ] -> Result.Ok (Put (k, v))
  | [ "del"; k ] -> Result.Ok (Del k)
  | [ "cas"; k; e; s ] -> Result.Ok (Cas { key = k; expect = e; set = s })
  | ("get" | "put" | "del" | "cas") :: _ as w ->
      Result.Error
        (Printf.sprintf "%s takes %s" (List.hd w)
           (match List.hd w with
           | "get" | "del" -> "KEY"
           | "put" -> "KEY VALUE"
           | _ -> "KEY OLD NEW"))
  | w :: _ -> Result.Error (Printf.sprintf "unknown command %S (get, put, del, cas)" w)
  | [] -> Result.Error "empty command"
