type t = { kind : string; service : string; id : string }

let ( / ) = Filename.concat
let name = "service-identity"
let file dir = dir / name
let magic = "consort-data 1"
let pp ppf t = Format.fprintf ppf "kind %s, service %s, id %s" t.kind t.service t.id
let to_string t = Printf.sprintf "%s\nkind %s\nservice %s\nid %s\n" magic t.kind t.service t.id

let of_string s =
  let fields =
    List.filter_map
      (fun l ->
        match String.index_opt l ' ' with
        | Some i -> Some (String.sub l 0 i, String.sub l (i + 1) (String.length l - i - 1))
        | None -> None)
      (String.split_on_char '\n' s)
  in
  match String.split_on_char '\n' s with
  | first :: _ when first = magic -> (
      match
        (List.assoc_opt "kind" fields, List.assoc_opt "service" fields, List.assoc_opt "id" fields)
      with
      | Some kind, Some service, Some id when kind <> "" && service <> "" && id <> "" ->
          Some { kind; service; id }
      | _ -> None)
  | _ -> None

let urandom n =
  let ic = open_in_bin "/dev/urandom" in
  Fun.protect ~finally:(fun () -> close_in_noerr ic) (fun () -> really_input_string ic n)

let hex s =
  String.concat ""
    (List.map (fun c -> Printf.sprintf "%02x" (Char.code c)) (List.of_seq (String.to_seq s)))

let read path =
  let ic = open_in_bin path in
  Fun.protect
    ~finally:(fun () -> close_in_noerr ic)
    (fun () -> really_input_string ic (min (in_channel_length ic) 4096))

let unix_msg dir fn e =
  match e with
  | Unix.ENOSPC -> Printf.sprintf "%s: cannot write its identity: no space left on the disk" dir
  | e -> Printf.sprintf "%s: cannot write its identity: %s: %s" dir fn (Unix.error_message e)

(* Written durably: a temporary file, fsynced, renamed, the directory fsynced. *)
let write dir t =
  let tmp = dir / ".service-identity.tmp" and s = to_string t in
  match
    let fd =
      Unix.openfile tmp [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
    in
    Fun.protect
      ~finally:(fun () -> Unix.close fd)
      (fun () ->
        let rec go off =
          if off < String.length s then
            go (off + Unix.write_substring fd s off (String.length s - off))
        in
        go 0;
        Unix.fsync fd);
    Unix.rename tmp (file dir);
    let d = Unix.openfile dir [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
    Fun.protect ~finally:(fun () -> Unix.close d) (fun () -> Unix.fsync d)
  with
  | () -> Ok t
  | exception Unix.Unix_error (e, fn, _) ->
      (try Unix.unlink tmp with Unix.Unix_error _ -> ());
      Error (unix_msg dir fn e)

let mint random ~kind ~service dir = write dir { kind; service; id = hex (random 16) }

let check ?(random = urandom) ?(looks_like = fun _ -> false) ?(ignore = []) ~kind ~service dir =
  let ( let* ) = Result.bind in
  let mint () =
    let* service = service () in
    mint random ~kind ~service dir
  in
  match Sys.readdir dir with
  | exception Sys_error _ when not (Sys.file_exists dir) -> (
      match Consort_local.Private.mkdir_p dir with
      | () -> mint ()
      | exception Unix.Unix_error (e, _, _) ->
          Error (Printf.sprintf "%s: cannot make the directory: %s" dir (Unix.error_message e)))
  | exception Sys_error m -> Error m
  | entries -> (
      let entries =
        List.filter
          (fun n -> n <> ".service-identity.tmp" && not (List.mem n ignore))
          (Array.to_list entries)
      in
      if entries = [] then mint ()
      else if not (List.mem name entries) then
        if looks_like dir then mint ()
        else
          Error
            (Printf.sprintf
               "%s is not empty and has no identity: not a %s data directory (give an empty or new \
                directory)"
               dir kind)
      else
        match read (file dir) with
        | exception Sys_error m -> Error m
        | s -> (
            let other t mine =
              Error
                (Printf.sprintf "%s belongs to another store: %s; this server is %s" dir
                   (Format.asprintf "%a" pp t) mine)
            in
            match of_string s with
            | None -> Error (Printf.sprintf "%s: its identity file does not parse" (file dir))
            | Some t when t.kind <> kind -> other t ("kind " ^ kind)
            | Some t ->
                let* service' = service () in
                if t.service = service' then Ok t
                else other t (Printf.sprintf "kind %s, service %s" kind service')))
