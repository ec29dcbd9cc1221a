open Consort_cap
module Store = Consort_capfs.Store
module P = Fs_proto

let src = Logs.Src.create "consort.capfs.server" ~doc:"Consort file server"

module Log = (val Logs.src_log src : Logs.LOG)

type t = { store : Store.t; port : Port.t; std : Std.objects }

let store t = t.store
let port t = t.port

let secret_of store obj =
  match Store.secret store obj with
  | None -> None
  | Some raw -> ( match Cap.Secret.of_raw raw with Ok s -> Some s | Error _ -> None)

let secret t obj = secret_of t.store obj
let cap_of t obj rights = Option.map (fun s -> Cap.make t.port ~obj s rights) (secret t obj)
let server_cap t = Option.get (cap_of t 0 Rights.all)
let file_cap t obj = if obj = 0 then None else cap_of t obj Rights.all

let status_of_error : Store.error -> Status.t = function
  | `Not_found -> `Notfound
  | `Not_committed -> `Notnow
  | `Bad_range -> `Argbad
  | `Too_many_uncommitted -> `Nomem
  | `Too_large -> `Overflow
  | `No_space -> `Nospace
  | `Io _ -> `Syserr

let fail st = (Header.reply st, "")
let ok ?offset ?size ?extra () = (Header.reply ?offset ?size ?extra `Ok, "")
let with_cap c = (Header.reply ~port:(fst (Header.of_cap c)) ~priv:(snd (Header.of_cap c)) `Ok, "")

let info store obj =
  if obj = 0 then "consort file server"
  else
    match Store.committed store obj with
    | Some true -> (
        match Store.size store obj with Ok n -> Printf.sprintf "- %d bytes" n | Error _ -> "-")
    | Some false -> "- uncommitted"
    | None -> "-"

let objects store =
  {
    Std.secret = secret_of store;
    info = info store;
    destroy =
      (fun obj ->
        if obj = 0 then `Argbad
        else match Store.destroy store obj with Ok () -> `Ok | Error e -> status_of_error e);
    touch = (fun obj -> if obj <> 0 then ignore (Store.touch store obj));
    age =
      (fun () ->
        ignore (Store.age store);
        ignore (Store.gc_age store));
    status = (fun () -> Fmt.str "%a" Store.pp_stats (Store.stats store));
  }

let create store port = { store; port; std = objects store }

(* The capability in [h], checked: its object exists, its check is right for
   the object's secret and this server's port, and it has [need]. *)
let check t (h : Header.t) ~need =
  match Std.validate t.port t.std ~need h with
  | Error st -> Error st
  | Ok _ -> ( match Header.cap h with Ok c -> Ok c | Error _ -> Error `Capbad)

let flags (h : Header.t) = (h.extra land P.commit_flag <> 0, h.extra land P.safety_flag <> 0)

let on_file t h ~need f =
  match check t h ~need with
  | Error st -> fail st
  | Ok c when c.obj = 0 -> fail `Argbad
  | Ok c -> f c

let file_result t = function
  | Error e -> fail (status_of_error e)
  | Ok obj -> ( match file_cap t obj with Some c -> with_cap c | None -> fail `Syserr)

let handle_exn t (h : Header.t) data =
  let cmd = h.command in
  if cmd = P.bs_create then
    match check t h ~need:Rights.create with
    | Error st -> fail st
    | Ok c when c.obj <> 0 -> fail `Argbad
    | Ok _ ->
        let commit, safe = flags h in
        file_result t (Store.create t.store ~commit ~safe data)
  else if cmd = P.bs_read then
    on_file t h ~need:Rights.read (fun c ->
        if h.size > P.max_read then fail `Argbad
        else
          match Store.read t.store c.obj ~off:h.offset ~len:h.size with
          | Ok d -> (Header.reply ~size:(String.length d) `Ok, d)
          | Error e -> fail (status_of_error e))
  else if cmd = P.bs_size then
    on_file t h ~need:Rights.read (fun c ->
        match Store.size t.store c.obj with
        | Ok n -> ok ~size:n ()
        | Error e -> fail (status_of_error e))
  else if cmd = P.bs_modify || cmd = P.bs_insert || cmd = P.bs_delete then
    on_file t h ~need:Rights.modify (fun c ->
        let commit, safe = flags h in
        let op =
          if cmd = P.bs_modify then Store.modify t.store c.obj ~off:h.offset data
          else if cmd = P.bs_insert then Store.insert t.store c.obj ~off:h.offset data
          else Store.delete t.store c.obj ~off:h.offset ~len:h.size
        in
        file_result t (op ~commit ~safe))
  else if cmd = P.bs_commit then
    on_file t h ~need:Rights.modify (fun c ->
        let _, safe = flags h in
        match Store.commit t.store c.obj ~safe with
        | Ok () -> ok ()
        | Error e -> fail (status_of_error e))
  else if cmd = P.bs_revoke then
    match Cap.Secret.of_raw data with
    | Error _ -> fail `Argbad
    | Ok wanted -> (
        let obj = h.priv.obj in
        let already =
          Port.equal h.port t.port
          && match secret t obj with Some s -> Cap.Secret.equal s wanted | None -> false
        in
        if already then
          (* A resent revoke: done already, and its sender knows the secret. *)
          match cap_of t obj Rights.all with
          | Some c -> with_cap c
          | None -> fail `Syserr
        else
          match check t h ~need:Rights.all with
          | Error st -> fail st
          | Ok c -> (
              match Store.revoke ~secret:data t.store c.obj with
              | Error e -> fail (status_of_error e)
              | Ok _ -> (
                  match cap_of t c.obj Rights.all with Some c -> with_cap c | None -> fail `Syserr))
        )
  else match Std.handle t.port t.std h data with Some r -> r | None -> fail `Combad

let handle t h data =
  try handle_exn t h data
  with e ->
    Log.err (fun m -> m "%s: %s" (P.command_name h.command) (Printexc.to_string e));
    fail `Syserr
