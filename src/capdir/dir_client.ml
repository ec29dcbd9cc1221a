module Cap = Consort_cap.Cap
module Header = Consort_cap.Header
module Rpc_error = Consort_cap.Rpc_error

type trans = idempotent:bool -> Header.t -> string -> (Header.t * string, Rpc_error.t) result
type error = [ `Refused of string | `Unknown of string | `Dir of Dir.error ]

let pp_error ppf = function
  | `Refused s -> Fmt.pf ppf "refused: %s" s
  | `Unknown s -> Fmt.pf ppf "outcome unknown: %s" s
  | `Dir e -> Dir.pp_error ppf e

type t = { trans : trans; client : int64; mutable req : int }

let create ?(client = Dir_client_id.fresh ()) trans = { trans; client; req = 0 }
let trans t = t.trans

let call t (op : Dir.op) =
  t.req <- t.req + 1;
  let cap =
    match op with
    | Lookup { dir; _ }
    | List dir
    | Touch dir
    | Age dir
    | Chmod { dir; _ }
    | Delete { dir; _ }
    | Install { dir; _ } ->
        dir
    | Create { via; _ } -> via
    | Refs { server; _ } -> server
  in
  let data = Consort.Codec.encode_string Dir_server.request_codec (t.client, t.req, op) in
  match t.trans ~idempotent:(Dir.is_read op) (Header.request cap Dir_server.dir_op) data with
  | Error e -> (
      match Rpc_error.outcome e with
      | `Unknown -> Error (`Unknown (Fmt.str "%a" Rpc_error.pp e))
      | `Not_executed -> Error (`Refused (Fmt.str "%a" Rpc_error.pp e)))
  | Ok (h, d) -> (
      if h.status = `Combad then
        Error (`Refused "not a directory (its server does not know the directory commands)")
      else if h.status <> `Ok then
        Error (`Refused (Fmt.str "status %d: %s" (Consort_cap.Status.to_int h.status) d))
      else
        match Consort.Codec.decode_string Dir_server.outcome_codec d with
        | Error e ->
            Error (`Refused (Fmt.str "a reply that does not decode: %a" Consort.Codec.pp_error e))
        | Ok (Consort_kv.Wire.Done (Dir.Error e)) -> Error (`Dir e)
        | Ok (Consort_kv.Wire.Done r) -> Ok r
        | Ok (Consort_kv.Wire.Unknown s) -> Error (`Unknown s)
        | Ok (Consort_kv.Wire.Refused s) -> Error (`Refused s))

let lookup t dir name =
  match call t (Dir.Lookup { dir; name }) with
  | Ok (Dir.Caps l) -> Ok l
  | Ok r -> Error (`Refused (Fmt.str "unexpected reply %a" Dir.pp_response r))
  | Error e -> Error e

let resolve t root path = Path.resolve ~lookup:(lookup t) root path
