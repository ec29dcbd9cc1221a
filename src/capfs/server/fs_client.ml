open Consort_cap
module P = Fs_proto

type trans = idempotent:bool -> Header.t -> string -> (Header.t * string, Rpc_error.t) result

type error =
  [ `Refused of Status.t
  | `Rpc of Rpc_error.t
  | `Bad_reply of string
  | `Interrupted of int * bool * Rpc_error.t
  | `Cut of int * Rpc_error.t ]

let pp_error ppf = function
  | `Refused st -> Status.pp ppf st
  | `Rpc e -> Rpc_error.pp ppf e
  | `Bad_reply m -> Fmt.pf ppf "bad reply from the server: %s" m
  | `Interrupted (n, commit, e) ->
      Fmt.pf ppf "interrupted after %d bytes, %s: %a" n
        (if commit then "while committing (the file may have been stored)"
         else "before the file was committed")
        Rpc_error.pp e
  | `Cut (n, e) ->
      Fmt.pf ppf "cut short after %d bytes of the file were written: %a" n Rpc_error.pp e

let outcome = function
  | `Refused _ -> `Refused
  | `Rpc e -> ( match Rpc_error.outcome e with `Not_executed -> `Refused | `Unknown -> `Unknown)
  | `Bad_reply _ | `Interrupted _ | `Cut _ -> `Unknown

let chunk = 1 lsl 20
let ( let* ) = Result.bind

let call trans ~idempotent h data =
  match trans ~idempotent h data with
  | Error e -> Error (`Rpc e)
  | Ok ((r : Header.t), d) ->
      if Status.equal r.status `Ok then Ok (r, d) else Error (`Refused r.status)

let reply_cap (r : Header.t) =
  match Header.cap r with Ok c -> Ok c | Error m -> Error (`Bad_reply ("capability: " ^ m))

let size trans cap =
  let* r, _ = call trans ~idempotent:true (Header.request cap P.bs_size) "" in
  Ok r.size

let read trans cap ~off ~len =
  let* r, d = call trans ~idempotent:true (Header.request ~offset:off ~size:len cap P.bs_read) "" in
  if r.size <> String.length d || String.length d > len then Error (`Bad_reply "read length")
  else Ok d

let put trans ~server ?(chunk = chunk) ?(progress = ignore) ~size input =
  let buf = Bytes.create (min chunk (max size 1)) in
  let fill () =
    let rec go got =
      if got = Bytes.length buf then got
      else
        let n = input buf got (Bytes.length buf - got) in
        if n = 0 then got else go (got + n)
    in
    let n = go 0 in
    Bytes.sub_string buf 0 n
  in
  let first = fill () in
  let last = String.length first < Bytes.length buf || String.length first >= size in
  let* r, _ =
    call trans ~idempotent:false
      (Header.request ~extra:(P.flags ~commit:last ~safe:last) server P.bs_create)
      first
  in
  let* cap = reply_cap r in
  progress (String.length first);
  let interrupted off ~commit = function
    | Error (`Rpc e) -> Error (`Interrupted (off, commit, e))
    | r -> r
  in
  (* Appends never commit: a resent append that finds the file committed
     would make a copy. The commit comes last, by itself; a resent commit of
     a committed file does nothing. *)
  let rec go off =
    let piece = fill () in
    let n = String.length piece in
    if n = 0 then Ok off
    else
      let* r, _ =
        interrupted off ~commit:false
          (call trans ~idempotent:true (Header.request ~offset:off ~extra:0 cap P.bs_modify) piece)
      in
      let* cap' = reply_cap r in
      if not (Cap.equal cap' cap) then Error (`Bad_reply "an append made a new file")
      else (
        progress (off + n);
        if n < Bytes.length buf || off + n >= size then Ok (off + n) else go (off + n))
  in
  let commit off =
    let* _ =
      interrupted off ~commit:true
        (call trans ~idempotent:true
           (Header.request ~extra:(P.flags ~commit:true ~safe:true) cap P.bs_commit)
           "")
    in
    Ok cap
  in
  if last then Ok cap
  else
    let* off = go (String.length first) in
    commit off

let get trans ?(progress = fun _ _ -> ()) cap output =
  let* total = size trans cap in
  let rec go off =
    if off >= total then Ok total
    else
      let* d =
        match read trans cap ~off ~len:(min P.max_read (total - off)) with
        | Error (`Rpc e) when off > 0 -> Error (`Cut (off, e))
        | r -> r
      in
      if d = "" then Error (`Bad_reply "file shorter than its size")
      else (
        output d;
        progress (off + String.length d) total;
        go (off + String.length d))
  in
  go 0

type async_trans =
  idempotent:bool -> Header.t -> string -> ((Header.t * string, Rpc_error.t) result -> unit) -> unit

(* Reads of [max_read] bytes, one outstanding on each lane (each lane its
   own session, so the server has the next read while the client takes in
   the last); written to [output] in order as they complete. A committed
   file never changes, so each read must be exactly as long as asked. *)
let get_pipelined lanes ~run ?(read_size = P.max_read) ?(progress = fun _ _ -> ()) cap output =
  let read_size = max 1 (min read_size P.max_read) in
  if Array.length lanes = 0 then invalid_arg "Fs_client.get_pipelined: no lane";
  let blocking ~idempotent h d =
    let r = ref None in
    lanes.(0) ~idempotent h d (fun x -> r := Some x);
    run (fun () -> !r <> None);
    match !r with Some x -> x | None -> Error `Aborted
  in
  let* total = size blocking cap in
  let nl = Array.length lanes in
  let next = ref 0 and written = ref 0 and failed = ref None in
  let busy = Array.make nl false in
  let ready = Hashtbl.create nl in
  let fail e = if !failed = None then failed := Some e in
  let rec flush () =
    match Hashtbl.find_opt ready !written with
    | Some d ->
        Hashtbl.remove ready !written;
        output d;
        written := !written + String.length d;
        progress !written total;
        flush ()
    | None -> ()
  in
  let rec issue i =
    if !failed = None && !next < total && not busy.(i) then begin
      let off = !next in
      let len = min read_size (total - off) in
      next := off + len;
      busy.(i) <- true;
      lanes.(i) ~idempotent:true (Header.request ~offset:off ~size:len cap P.bs_read) "" (fun r ->
          busy.(i) <- false;
          (match r with
          | Error e -> fail (`Rpc e)
          | Ok ((h : Header.t), d) ->
              if not (Status.equal h.status `Ok) then fail (`Refused h.status)
              else if h.size <> String.length d || String.length d <> len then
                fail (`Bad_reply "read length")
              else Hashtbl.replace ready off d);
          flush ();
          issue i)
    end
  in
  for i = 0 to nl - 1 do
    issue i
  done;
  run (fun () -> !written >= total || (!failed <> None && not (Array.exists Fun.id busy)));
  match !failed with
  | None when !written >= total -> Ok total
  | Some (`Rpc e) when !written > 0 -> Error (`Cut (!written, e))
  | Some e -> Error e
  | None -> if !written > 0 then Error (`Cut (!written, `Aborted)) else Error (`Rpc `Aborted)

let std trans ~idempotent h parse =
  match trans ~idempotent h "" with
  | Error e -> Error (`Rpc e)
  | Ok r -> ( match parse r with Ok x -> Ok x | Error st -> Error (`Refused st))

let restrict trans cap mask =
  match Cap.restrict cap mask with
  | Ok c -> Ok c
  | Error `Needs_server ->
      std trans ~idempotent:true (Std.restrict_request cap mask) Std.parse_restrict

let revoke trans cap secret =
  let* r, _ =
    call trans ~idempotent:true (Header.request cap P.bs_revoke) (Cap.Secret.to_raw secret)
  in
  let* c = reply_cap r in
  if Cap.equal c (Cap.owner cap.Cap.port ~obj:cap.Cap.obj secret) then Ok c
  else Error (`Bad_reply "revoke: not the capability of the new secret")

let destroy trans cap = std trans ~idempotent:false (Std.destroy_request cap) Std.parse_unit
let info trans cap = std trans ~idempotent:true (Std.info_request cap) Std.parse_text
let touch trans cap = std trans ~idempotent:true (Std.touch_request cap) Std.parse_unit
let age trans cap = std trans ~idempotent:false (Std.age_request cap) Std.parse_unit
let status trans cap = std trans ~idempotent:true (Std.status_request cap) Std.parse_text
