module Codec = Consort.Codec

type t = {
  limits : Op.limits;
  data : (string, string) Hashtbl.t;
  mutable bytes : int;
  dedup : Op.response Dedup.t;
}

let create limits = { limits; data = Hashtbl.create 1024; bytes = 0; dedup = Dedup.create () }
let limits t = t.limits
let read t k = Hashtbl.find_opt t.data k
let keys t = Hashtbl.length t.data
let bytes t = t.bytes
let clients t = Dedup.clients t.dedup

let set t k v =
  (match Hashtbl.find_opt t.data k with
  | Some old -> t.bytes <- t.bytes - String.length old - String.length k
  | None -> ());
  Hashtbl.replace t.data k v;
  t.bytes <- t.bytes + String.length k + String.length v

let remove t k =
  match Hashtbl.find_opt t.data k with
  | Some old ->
      t.bytes <- t.bytes - String.length old - String.length k;
      Hashtbl.remove t.data k
  | None -> ()

(* Room for [k] to hold [v]. *)
let fits t k v =
  let l = t.limits in
  match Hashtbl.find_opt t.data k with
  | Some old -> t.bytes - String.length old + String.length v <= l.max_bytes
  | None ->
      Hashtbl.length t.data < l.max_keys
      && t.bytes + String.length k + String.length v <= l.max_bytes

let full t =
  Op.Error (Printf.sprintf "store full (%d keys, %d bytes)" (Hashtbl.length t.data) t.bytes)

let execute t (op : Op.t) : Op.response =
  match Op.check t.limits op with
  | Error e -> Op.Error e
  | Ok () -> (
      match op with
      | Get k -> ( match Hashtbl.find_opt t.data k with Some v -> Value v | None -> Not_found)
      | Put (k, v) ->
          if fits t k v then (
            set t k v;
            Ok)
          else full t
      | Del k ->
          if Hashtbl.mem t.data k then (
            remove t k;
            Ok)
          else Not_found
      | Cas { key; expect; set = v } -> (
          match Hashtbl.find_opt t.data key with
          | Some x when x = expect ->
              if fits t key v then (
                set t key v;
                Ok)
              else full t
          | _ -> Cas_failed))

let apply t ~client ~req op =
  if Op.is_read op then (execute t op, false)
  else
    Dedup.apply t.dedup ~max_clients:t.limits.max_clients ~client ~req
      ~older:(fun why -> Op.Error why)
      (fun () -> execute t op)

let bindings t = Hashtbl.fold (fun k v acc -> (k, v) :: acc) t.data [] |> List.sort compare
let s = Codec.string ~max:(16 * 1024 * 1024) ()

let codec limits =
  let pairs = Codec.list ~max:max_int (Codec.pair s s) in
  Codec.map ~name:"kv-state"
    (fun t -> (bindings t, t.dedup))
    (fun (kvs, dedup) ->
      let t = { (create limits) with dedup } in
      List.iter (fun (k, v) -> set t k v) kvs;
      t)
    (Codec.pair pairs (Dedup.codec Op.response_codec))

let digest t = Digest.to_hex (Digest.string (Codec.encode_string (codec t.limits) t))

module Rsm = struct
  type nonrec t = t
  type op = Op.t
  type response = Op.response
  type limits = Op.limits

  let name = "kv"
  let default_limits = Op.default_limits
  let create = create
  let limits = limits
  let apply = apply
  let is_read = Op.is_read
  let check = Op.check

  let op_size = function
    | Op.Get k | Op.Del k -> String.length k
    | Op.Put (k, v) -> String.length k + String.length v
    | Op.Cas { key; expect; set } -> String.length key + String.length expect + String.length set

  let op_codec = Op.codec
  let response_codec = Op.response_codec
  let pp_response = Op.pp_response
  let codec = codec
end
