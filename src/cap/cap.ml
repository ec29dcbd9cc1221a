type t = { port : Port.t; obj : int; rights : Rights.t; check : string }

let check_length = 16
let max_object = (1 lsl 48) - 1
let length = 1 + Port.length + 6 + 1 + check_length
let version = 1

module Secret = struct
  type t = string

  let generate ?g () = Crypto.random ?g 32
  let to_raw t = t
  let of_raw s = if String.length s = 32 then Ok s else Error "an object secret has 32 bytes"
  let equal = Crypto.equal
end

let obj_bytes obj =
  let b = Bytes.create 6 in
  for i = 0 to 5 do
    Bytes.set b i (Char.chr ((obj lsr (8 * (5 - i))) land 0xff))
  done;
  Bytes.to_string b

let object_key secret port obj =
  String.sub
    (Crypto.hmac ~key:secret [ "consort-cap-v1-owner"; Port.to_raw port; obj_bytes obj ])
    0 check_length

let check_of_key key rights =
  if Rights.equal rights Rights.all then key
  else
    String.sub
      (Crypto.hmac ~key
         [ "consort-cap-v1-rights"; String.make 1 (Char.chr (Rights.to_int rights)) ])
      0 check_length

let check_obj fn obj =
  if obj < 0 || obj > max_object then invalid_arg (fn ^ ": object number outside 0..2^48-1")

let make port ~obj secret rights =
  check_obj "Cap.make" obj;
  { port; obj; rights; check = check_of_key (object_key secret port obj) rights }

let owner port ~obj secret = make port ~obj secret Rights.all

let v ~port ~obj ~rights ~check =
  if obj < 0 || obj > max_object then Error "object number outside 0..2^48-1"
  else if String.length check <> check_length then
    Error (Printf.sprintf "a check has %d bytes" check_length)
  else Ok { port; obj; rights; check }

let is_owner c = Rights.equal c.rights Rights.all

type restrict_error = [ `Needs_server ]

let restrict c mask =
  let r = Rights.inter c.rights mask in
  if Rights.equal r c.rights then Ok c
  else if is_owner c then Ok { c with rights = r; check = check_of_key c.check r }
  else Error `Needs_server

let restrict_with_secret secret c mask = make c.port ~obj:c.obj secret (Rights.inter c.rights mask)

type error = [ `Capbad | `Denied ]

let pp_error ppf = function
  | `Capbad -> Fmt.string ppf "STD_CAPBAD: bad capability"
  | `Denied -> Fmt.string ppf "STD_DENIED: the capability lacks the rights needed"

let validate secret ?port ~need c =
  let expected = check_of_key (object_key secret c.port c.obj) c.rights in
  let port_ok = match port with None -> true | Some p -> Port.equal p c.port in
  if not (Crypto.equal expected c.check && port_ok) then Error `Capbad
  else if not (Rights.subset need c.rights) then Error `Denied
  else Ok ()

type decode_error = [ `Bad_version of int | `Bad_length of int | `Bad_text of string ]

let pp_decode_error ppf = function
  | `Bad_version v -> Fmt.pf ppf "bad capability: unknown version %d" v
  | `Bad_length n -> Fmt.pf ppf "bad capability: %d bytes, expected %d" n length
  | `Bad_text why -> Fmt.pf ppf "bad capability: %s" why

let to_raw c =
  String.concat ""
    [
      String.make 1 (Char.chr version);
      Port.to_raw c.port;
      obj_bytes c.obj;
      String.make 1 (Char.chr (Rights.to_int c.rights));
      c.check;
    ]

let of_raw s =
  if String.length s >= 1 && Char.code s.[0] <> version then Error (`Bad_version (Char.code s.[0]))
  else if String.length s <> length then Error (`Bad_length (String.length s))
  else
    let port =
      match Port.of_raw (String.sub s 1 Port.length) with Ok p -> p | Error _ -> assert false
    in
    let obj = ref 0 in
    for i = 0 to 5 do
      obj := (!obj lsl 8) lor Char.code s.[1 + Port.length + i]
    done;
    let rights = Rights.of_int_exn (Char.code s.[1 + Port.length + 6]) in
    Ok { port; obj = !obj; rights; check = String.sub s (length - check_length) check_length }

let codec =
  Consort.Codec.conv ~name:"capability" to_raw
    (fun s -> Result.map_error (fun e -> Fmt.str "%a" pp_decode_error e) (of_raw s))
    (Consort.Codec.fixed_string length)

let prefix = "cap1:"

let to_string c =
  prefix ^ Base64.encode_string ~pad:false ~alphabet:Base64.uri_safe_alphabet (to_raw c)

let of_string s =
  let s = String.trim s in
  let pl = String.length prefix in
  if String.length s < pl || String.sub s 0 pl <> prefix then
    if String.length s >= 3 && String.sub s 0 3 = "cap" && String.contains s ':' then
      Error (`Bad_text "unknown capability text version (expected cap1:)")
    else Error (`Bad_text "not a capability (expected cap1:...)")
  else
    let body = String.sub s pl (String.length s - pl) in
    match Base64.decode ~pad:false ~alphabet:Base64.uri_safe_alphabet body with
    | Error (`Msg m) -> Error (`Bad_text ("not base64url: " ^ m))
    | Ok raw -> (
        (* Base64 accepts non-canonical trailing bits; require the canonical form so
           that one capability has one text. *)
        match of_raw raw with
        | Ok c when String.equal (to_string c) s -> Ok c
        | Ok _ -> Error (`Bad_text "not in canonical base64url")
        | Error e -> Error (e :> decode_error))
    | exception _ -> Error (`Bad_text "not base64url")

let equal a b =
  Port.equal a.port b.port && a.obj = b.obj && Rights.equal a.rights b.rights
  && String.equal a.check b.check

let pp ppf c = Fmt.pf ppf "%a/%d(%a)" Port.pp c.port c.obj Rights.pp c.rights
let pp_text ppf c = Fmt.string ppf (to_string c)
let digest c = Fmt.str "%a#%s" pp c (String.sub (Crypto.to_hex (Crypto.sha256 [ to_raw c ])) 0 16)
