open Consort
module Cap = Consort_cap.Cap
module Port = Consort_cap.Port
module Header = Consort_cap.Header
module Crypto = Consort_crypto.Crypto
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module Rpc = Consort_cap.Rpc_udp
module Store = Consort_kv.Store.Make (Dir.Rsm)
module Replica = Consort_kv.Replica
module R = Replica.Generic (Dir.Rsm) (Store) (Udp)
module Wire = Consort_kv.Wire

let src = Logs.Src.create "consort.capdir.server" ~doc:"Directory server replica"

module Log = (val Logs.src_log src : Logs.LOG)

let dir_op = 2100
let request_codec = Codec.tup3 Codec.int64 Codec.varint Dir.op_codec

type outcome = Dir.response Wire.outcome_

let outcome_codec : outcome Codec.t =
  let s = Codec.string ~max:4096 () in
  Codec.union "dir-outcome"
    [
      Codec.case 0 "done" Dir.response_codec
        (function Wire.Done r -> Some r | _ -> None)
        (fun r -> Wire.Done r);
      Codec.case 1 "unknown" s
        (function Wire.Unknown r -> Some r | _ -> None)
        (fun r -> Wire.Unknown r);
      Codec.case 2 "refused" s
        (function Wire.Refused r -> Some r | _ -> None)
        (fun r -> Wire.Refused r);
    ]

let secret_of key label =
  Result.get_ok
    (Cap.Secret.of_raw
       (String.sub (Crypto.hmac ~key:(Port.Key.to_string key) [ "consort-capdir-v1"; label ]) 0 32))

let limits_of_key key =
  Dir.default_limits ~port:(Port.Key.port key) ~server_secret:(secret_of key "server")
    ~root_secret:(secret_of key "root")

let root_of_key key =
  let l = limits_of_key key in
  Cap.owner l.port ~obj:Dir.root_obj l.root_secret

let server_of_key key =
  let l = limits_of_key key in
  Cap.owner l.port ~obj:0 l.server_secret

type config = {
  data : string;
  key : Port.Key.t;
  bind : string;
  group_bind : string;
  peers : string list;
  params : Params.t;
  init : Consort_kv.Store.init;
}

let default_params = "suspect.timeout=2s,suspect.verify=500ms"

let reply_of_request submit data k =
  match Codec.decode_string request_codec data with
  | Error e -> k (Header.reply `Argbad) (Fmt.str "bad directory request: %a" Codec.pp_error e)
  | Ok (client, req, op) ->
      submit { Wire.client; req; op } (fun (o : outcome) ->
          k (Header.reply `Ok) (Codec.encode_string outcome_codec o))

(* A callback's exception as one line: what a replica that stops says. *)
let failure_line data = function
  | Unix.Unix_error ((Unix.ENOSPC | Unix.EUNKNOWNERR 122 (* EDQUOT *)), _, _) ->
      Printf.sprintf "%s: no space left on the disk" data
  | Unix.Unix_error (e, fn, _) -> Printf.sprintf "%s: %s: %s" data fn (Unix.error_message e)
  | Sys_error m -> Printf.sprintf "%s: %s" data m
  | e -> Printf.sprintf "internal error: %s" (Printexc.to_string e)

let kind = "capdir"
let service key = "capdir-" ^ Port.to_hex (Port.Key.port key)
let looks_like d = Sys.file_exists (Filename.concat d "wal")

let serve ~on_ready cfg =
  let params =
    match Params.of_string default_params with
    | Ok d -> Params.override d ~by:cfg.params
    | Error _ -> cfg.params
  in
  let limits = limits_of_key cfg.key in
  match Store.open_ ~limits ~identity:(service cfg.key, cfg.init) cfg.data with
  | Error e -> Error e
  | Ok (store, found) -> (
      List.iter (fun f -> Fmt.epr "consort: recovery: %a@." Consort_kv.Store.pp_finding f) found;
      let loop = Loop.create () in
      let rcfg =
        Replica.default_config ~group:(service cfg.key) ~addr:cfg.group_bind ~peers:cfg.peers
      in
      (* The replica stops itself when its disk refuses a write (it
         acknowledges nothing more and leaves the group); then the process
         stops too (set below). *)
      let on_failure = ref ignore in
      match R.create ~params ~on_failure:(fun f -> !on_failure f) loop rcfg store with
      | Error e ->
          Store.close store;
          Error e
      | Ok r -> (
          match Rpc.open_node ~bind:cfg.bind loop with
          | Error e ->
              R.crash r;
              Store.close store;
              Error (Printf.sprintf "cannot serve on %s: %s" cfg.bind e)
          | Ok node -> (
              let server = Rpc.serve node cfg.key in
              Rpc.listen server (fun req ->
                  let h = Rpc.header req in
                  if h.command = dir_op then
                    reply_of_request (R.submit r) (Rpc.data req) (fun h d -> Rpc.putrep req h d)
                  else if h.command = Consort_cap.Std.std_touch then
                    (* The standard touch, for collectors that know only it. *)
                    match Header.cap h with
                    | Error _ -> Rpc.putrep req (Header.reply `Capbad) ""
                    | Ok c ->
                        R.submit r { Wire.client = 0L; req = 0; op = Dir.Touch c } (fun o ->
                            let st =
                              match o with
                              | Wire.Done (Dir.Done _) -> `Ok
                              | Wire.Done (Dir.Error Dir.Capbad) -> `Capbad
                              | Wire.Done (Dir.Error (Dir.Not_found _)) -> `Notfound
                              | _ -> `Notnow
                            in
                            Rpc.putrep req (Header.reply st) "")
                  else if h.command = Consort_cap.Std.std_age then
                    (* Ordered like any change; a fresh client number, as ageing is not idempotent. *)
                    match Header.cap h with
                    | Error _ -> Rpc.putrep req (Header.reply `Capbad) ""
                    | Ok c ->
                        R.submit r
                          { Wire.client = Dir_client_id.fresh (); req = 1; op = Dir.Age c }
                          (fun o ->
                            let st =
                              match o with
                              | Wire.Done (Dir.Aged _) -> `Ok
                              | Wire.Done (Dir.Error Dir.Capbad) -> `Capbad
                              | Wire.Done (Dir.Error (Dir.Denied _)) -> `Denied
                              | _ -> `Notnow
                            in
                            Rpc.putrep req (Header.reply st) "")
                  else
                    (* info, status, restrict from this replica's state; destroy refused: directories go by ageing. *)
                    let machine () = Store.machine (R.store r) in
                    let objects =
                      {
                        Consort_cap.Std.secret = (fun obj -> Dir.secret (machine ()) obj);
                        info = (fun obj -> Dir.info (machine ()) obj);
                        destroy = (fun _ -> `Denied);
                        touch = ignore;
                        age = ignore;
                        status =
                          (fun () ->
                            Fmt.str "directory replica %s, %a, %d directories, write %d" (R.me r)
                              Replica.pp_phase (R.phase r)
                              (Dir.dirs (machine ()))
                              (Store.seq (R.store r)));
                      }
                    in
                    match
                      Consort_cap.Std.handle (Port.Key.port cfg.key) objects h (Rpc.data req)
                    with
                    | Some (h, d) -> Rpc.putrep req h d
                    | None -> Rpc.putrep req (Header.reply `Combad) "");
              let stop = ref false in
              let halt _ = stop := true in
              (* Fail-stop: a callback that raised (a write to the data
                 directory that failed: a full disk, an I/O error) stops the
                 replica at once, before anything else is answered; it leaves
                 the group and [run] returns the reason (exit 2). *)
              let failure = ref None in
              (on_failure :=
                 fun f ->
                   if !failure = None then
                     failure := Some (Fmt.str "%s: %a" cfg.data Consort_kv.Store.pp_failure f);
                   stop := true);
              Loop.on_error loop (fun f ->
                  let e = match f with Loop.Timer e | Loop.Descriptor (_, e) -> e in
                  if !failure = None then failure := Some (failure_line cfg.data e);
                  stop := true;
                  Loop.stop loop);
              Sys.set_signal Sys.sigterm (Sys.Signal_handle halt);
              Sys.set_signal Sys.sigint (Sys.Signal_handle halt);
              (* One write: whoever started us may read the first line and close the pipe. *)
              Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
              (try
                 Fmt.pr "root %s\nserver %s@."
                   (Cap.to_string (root_of_key cfg.key))
                   (Cap.to_string (server_of_key cfg.key))
               with Sys_error _ -> ());
              Fmt.epr "consort: directory replica for port %s: RPC on %s, group on %s@."
                (Port.to_hex (Port.Key.port cfg.key))
                (Udp.address_to_string (Rpc.address node))
                cfg.group_bind;
              on_ready ();
              let rec poll () = if not !stop then ignore (Loop.after loop (Time.of_ms 20) poll) in
              poll ();
              Loop.run loop ~until:(fun () -> !stop);
              (match !failure with
              | None ->
                  R.leave r;
                  Loop.run loop ~timeout:(Time.of_ms 300)
              | Some _ -> (
                  (* Leave without writing again: whatever fails, stop. *)
                  try
                    R.leave r;
                    Loop.run loop ~timeout:(Time.of_ms 300)
                  with _ -> ()));
              Rpc.close node;
              (try Store.close store with _ -> ());
              match !failure with None -> Ok () | Some e -> Error (e ^ "; left the group"))))

let check_dir data key =
  Result.map ignore
    (Consort_datadir.check ~ignore:[ "port.key" ] ~looks_like ~kind
       ~service:(fun () -> Ok (service key))
       data)

(* The data directory's identity first, then the replica. *)
let run ?(on_ready = ignore) cfg =
  match check_dir cfg.data cfg.key with Error e -> Error e | Ok () -> serve ~on_ready cfg

let init ~data ~key how =
  match check_dir data key with
  | Error e -> Error e
  | Ok () -> (
      match Store.open_ ~limits:(limits_of_key key) ~identity:(service key, how) data with
      | Error e -> Error e
      | Ok (store, _) ->
          Store.close store;
          Ok ())
