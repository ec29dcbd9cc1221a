module Codec = Consort.Codec

type t = {
  limits : Op.limits;
  data : (string, string) Hashtbl.t;
  mutable bytes : int;
  dedup : (int64, int * Op.response) Hashtbl.t;
  order : int64 Queue.t; (* clients, oldest first *)
}

let create limits =
  {
    limits;
    data = Hashtbl.create 1024;
    bytes = 0;
    dedup = Hashtbl.create 64;
    order = Queue.create ();
  }

let limits t = t.limits
let read t k = Hashtbl.find_opt t.data k
let keys t = Hashtbl.length t.data
let bytes t = t.bytes
let clients t = Hashtbl.length t.dedup

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

let remember t client req r =
  if not (Hashtbl.mem t.dedup client) then begin
    while Hashtbl.length t.dedup >= t.limits.max_clients && not (Queue.is_empty t.order) do
      Hashtbl.remove t.dedup (Queue.pop t.order)
    done;
    Queue.push client t.order
  end;
  Hashtbl.replace t.dedup client (req, r)

let apply t ~client ~req op =
  if Op.is_read op then (execute t op, false)
  else
    match Hashtbl.find_opt t.dedup client with
    | Some (last, r) when last = req -> (r, false)
    | Some (last, _) when req < last ->
        (Op.Error (Printf.sprintf "request %d is older than this client's last, %d" req last), false)
    | _ ->
        let r = execute t op in
        remember t client req r;
        (r, true)

let bindings t = Hashtbl.fold (fun k v acc -> (k, v) :: acc) t.data [] |> List.sort compare
let s = Codec.string ~max:(16 * 1024 * 1024) ()

let codec limits =
  let pairs = Codec.list ~max:max_int (Codec.pair s s) in
  let clients = Codec.list ~max:max_int (Codec.tup3 Codec.int64 Codec.varint Op.response_codec) in
  Codec.map ~name:"kv-state"
    (fun t ->
      ( bindings t,
        Queue.fold
          (fun acc c ->
            let req, r = Hashtbl.find t.dedup c in
            (c, req, r) :: acc)
          [] t.order
        |> List.rev ))
    (fun (kvs, cs) ->
      let t = create limits in
      List.iter (fun (k, v) -> set t k v) kvs;
      List.iter
        (fun (c, req, r) ->
          Queue.push c t.order;
          Hashtbl.replace t.dedup c (req, r))
        cs;
      t)
    (Codec.pair pairs clients)

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
