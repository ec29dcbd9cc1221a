open Cmdliner
module Store = Consort_capfs.Store

let clock () = int_of_float (Unix.gettimeofday () *. 1e9)

(* consort cap fs fsck --data DIR *)
let fsck data =
  match Store.open_ ~clock data with
  | Error `Locked ->
      Fmt.epr "consort: %s is in use by a running file server@." data;
      2
  | Error (`Io m) ->
      Fmt.epr "consort: %s@." m;
      2
  | Ok (t, found) ->
      List.iter (fun f -> Fmt.pr "%a@." Store.pp_finding f) found;
      Fmt.pr "%a@." Store.pp_stats (Store.stats t);
      Store.close t;
      if List.exists Store.is_damage found then 1 else 0

let data =
  Arg.(required & opt (some string) None & info [ "data" ] ~docv:"DIR" ~doc:"The file server's data directory.")

let fsck_cmd =
  Cmd.v
    (Cmd.info "fsck"
       ~doc:
         "Check a file server's data directory (the server must not be running): report each torn or corrupt \
          file on one line and set it aside. Exits 1 if anything was damaged.")
    Term.(const fsck $ data)

let fs_cmd =
  Cmd.group (Cmd.info "fs" ~doc:"The immutable file server (Bullet semantics) and its tools.") [ fsck_cmd ]

let cmd = Cmd.group (Cmd.info "cap" ~doc:"Capability services: file server, capabilities.") [ fs_cmd ]
