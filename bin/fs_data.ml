(* The file server's data directory at its start: --new, cap fs init. *)
open Consort_cap
open Consort_crypto

(* What a data directory holds, looked at before its identity is checked (which makes a missing or
   empty one): nothing (the key file aside), its identity alone (a file server started there, and
   its store is gone: the server has no replica that could give it back), or more. *)
let contents data =
  match Sys.readdir data with
  | exception Sys_error _ -> if Sys.file_exists data then `Other else `Empty
  | names -> (
      match List.filter (( <> ) "port.key") (Array.to_list names) with
      | [] -> `Empty
      | [ n ] when n = Filename.basename (Consort_datadir.file data) -> `Identity_only
      | _ -> `Other)

(* The data directory of a file server, checked before anything in it is read or made: with
   [fresh] (--new, cap fs init), an empty or missing one, made a new store's; without, a store
   already there. A file server is one server, not a replica group: a data directory that is empty
   where a store was lost what the store held, and is never started as if new without --new. *)
let check ~fresh data key_file =
  match (contents data, fresh) with
  | `Empty, false ->
      Error
        (Printf.sprintf
           "%s: an empty data directory: start a brand-new file server with --new (a file server \
            has no replicas: a lost store comes back only from a backup)"
           data)
  | `Other, true when Sys.file_exists data ->
      Error
        (Printf.sprintf
           "%s: not an empty directory: --new starts a file server on an empty directory only \
            (start it without --new)"
           data)
  | what, _ -> (
      match
        Consort_datadir.check ~ignore:[ "port.key" ]
          ~looks_like:(fun d ->
            Sys.file_exists (Filename.concat d "server")
            || Sys.file_exists (Filename.concat d "blobs"))
          ~kind:"capfs"
          ~service:(fun () ->
            match Port.Key.load_or_create key_file with
            | Ok key -> Ok (Port.to_hex (Port.Key.port key))
            | Error m -> Error (Printf.sprintf "key %s: %s" key_file m))
          data
      with
      | Error m -> Error m
      | Ok id when what = `Identity_only && not fresh ->
          Error
            (Fmt.str
               "%s: the data directory of a file server (%a) with no store in it: what it held is \
                lost; restore it from a backup, or start an empty store there with --new"
               data Consort_datadir.pp id)
      | Ok _ -> Ok ())

(* What cap fs init makes: a new store's directory, as a first start with --new would; the server's
   port. *)
let init ~data ~key_file =
  match check ~fresh:true data key_file with
  | Error m -> Error m
  | Ok () -> (
      match
        Consort_capfs.Store.open_ ~random:Crypto.random
          ~clock:(fun () -> int_of_float (Unix.gettimeofday () *. 1e9))
          data
      with
      | Error `Locked -> Error (data ^ " is in use by a file server")
      | Error (`Io m) -> Error m
      | Ok (store, _) -> (
          Consort_capfs.Store.close store;
          match Port.Key.load_or_create key_file with
          | Error m -> Error (Printf.sprintf "key %s: %s" key_file m)
          | Ok key -> Ok (Port.to_hex (Port.Key.port key))))
