type t = string

let length = 16

let of_raw s =
  if String.length s = length then Ok s
  else Error (Printf.sprintf "a port has %d bytes, not %d" length (String.length s))

let to_raw t = t
let equal = String.equal
let compare = String.compare
let hash = Hashtbl.hash
let to_hex = Crypto.to_hex
let of_hex h = match Crypto.of_hex h with Ok s -> of_raw s | Error e -> Error e
let pp ppf t = Fmt.string ppf (Crypto.to_hex (String.sub t 0 6))

let codec =
  Consort.Codec.map ~name:"port" (fun t -> t) (fun s -> s) (Consort.Codec.fixed_string length)

let of_public pub = String.sub (Crypto.sha256 [ "consort-port-v1"; pub ]) 0 length

module Ed = Mirage_crypto_ec.Ed25519

let verify port ~public ~signature msg =
  String.length public = 32
  && String.length signature = 64
  && Crypto.equal (of_public public) port
  &&
  match Ed.pub_of_cstruct (Cstruct.of_string public) with
  | Error _ -> false
  | Ok key -> Ed.verify ~key (Cstruct.of_string signature) ~msg:(Cstruct.of_string msg)

module Key = struct
  type nonrec t = { priv : Ed.priv; public : string; port : t }

  let of_priv priv =
    let public = Cstruct.to_string (Ed.pub_to_cstruct (Ed.pub_of_priv priv)) in
    { priv; public; port = of_public public }

  let generate ?g () =
    let raw = Crypto.random ?g 32 in
    match Ed.priv_of_cstruct (Cstruct.of_string raw) with
    | Ok p -> of_priv p
    | Error _ -> invalid_arg "Port.Key.generate: 32 random bytes refused as a key"

  let port k = k.port
  let public k = k.public
  let sign k msg = Cstruct.to_string (Ed.sign ~key:k.priv (Cstruct.of_string msg))
  let prefix = "consort-key-v1:"
  let to_string k = prefix ^ Crypto.to_hex (Cstruct.to_string (Ed.priv_to_cstruct k.priv))

  let of_string s =
    let s = String.trim s in
    let pl = String.length prefix in
    if String.length s < pl || String.sub s 0 pl <> prefix then
      Error "not a consort key (expected consort-key-v1:HEX)"
    else
      match Crypto.of_hex (String.sub s pl (String.length s - pl)) with
      | Error e -> Error ("bad key: " ^ e)
      | Ok raw when String.length raw <> 32 -> Error "bad key: a private key has 32 bytes"
      | Ok raw -> (
          match Ed.priv_of_cstruct (Cstruct.of_string raw) with
          | Ok p -> Ok (of_priv p)
          | Error _ -> Error "bad key: not an Ed25519 private key")

  let load path =
    match open_in_bin path with
    | exception Sys_error e -> Error e
    | ic ->
        let r =
          match really_input_string ic (min 4096 (in_channel_length ic)) with
          | s -> of_string s
          | exception (Sys_error e | Failure e) -> Error e
          | exception End_of_file -> Error (path ^ ": truncated")
        in
        close_in_noerr ic;
        Result.map_error (fun e -> path ^ ": " ^ e) r

  let save path k =
    match Unix.openfile path [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_EXCL ] 0o600 with
    | exception Unix.Unix_error (e, _, _) -> Error (path ^ ": " ^ Unix.error_message e)
    | fd ->
        let s = to_string k ^ "\n" in
        let r =
          match Unix.write_substring fd s 0 (String.length s) with
          | n when n = String.length s -> (
              match Unix.fsync fd with
              | () -> Ok ()
              | exception Unix.Unix_error (e, _, _) -> Error (Unix.error_message e))
          | _ -> Error (path ^ ": short write")
          | exception Unix.Unix_error (e, _, _) -> Error (path ^ ": " ^ Unix.error_message e)
        in
        Unix.close fd;
        (* A key that did not reach the disk whole is not left behind. *)
        (match r with
        | Error _ -> ( try Unix.unlink path with Unix.Unix_error _ -> ())
        | Ok () -> ());
        r

  let load_or_create ?g path =
    if Sys.file_exists path then load path
    else
      let k = generate ?g () in
      match save path k with Ok () -> Ok k | Error e -> Error e
end
