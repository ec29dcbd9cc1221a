open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Replica.Make (Udp)

let src = Logs.Src.create "consort.kv.server" ~doc:"Key-value replica process"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  group : string;
  data : string;
  bind : string;
  peers : string list;
  listen : string;
  params : Params.t;
  max_connections : int;
  init : Store.init;
}

let max_output = 4 * 1024 * 1024

(* Pipelining: a client may send requests without waiting for the answers
   (matched by request number). A connection has at most [max_pipeline]
   requests under way; beyond, the server stops reading it (the client's
   writes wait in TCP) until answers go out, and it takes more only after a
   write to it succeeded: a client that does not read holds a read's worth
   of requests, [max_pipeline] requests in the replica and their answers
   (32 of 64 KB at most, under [max_output]: a client that reads late is
   not cut off). *)
let max_pipeline = 32

type conn = {
  fd : Unix.file_descr;
  input : Buffer.t;
  output : Buffer.t;
  mutable closed : bool;
  mutable flushing : bool;
  mutable outstanding : int; (* requests submitted, not answered *)
  mutable reading : bool; (* watched by the loop *)
  mutable parsing : bool; (* in [frames]: taking requests out of [input] *)
}

let parse_addr s =
  match String.rindex_opt s ':' with
  | None -> Error (Printf.sprintf "%S: not ADDR:PORT" s)
  | Some i -> (
      let host = String.sub s 0 i and port = String.sub s (i + 1) (String.length s - i - 1) in
      match (int_of_string_opt port, Unix.inet_addr_of_string host) with
      | Some p, a when p > 0 && p < 65536 -> Ok (Unix.ADDR_INET (a, p))
      | _ -> Error (Printf.sprintf "%S: not ADDR:PORT" s)
      | exception Failure _ -> Error (Printf.sprintf "%S: not an IPv4 address and port" s))

(* A replica's failure detector, unless told otherwise: writes wait for it
   when a replica dies (an order is answered once every member of the view
   has it), so 2 s rather than the group's 5 s, as etcd's leader election
   waits 1 s. A false suspicion under load costs a view change, never
   correctness: the member is excluded, joins again and catches up. *)
let default_params = "suspect.timeout=2s,suspect.verify=500ms"

external fsync_async : Unix.file_descr -> Unix.file_descr -> int -> unit = "consort_kv_fsync_async"
external error_of_errno : int -> Unix.error = "consort_kv_error_of_errno"

(* Group commit on the real disk: the fsyncs of the log run in one worker
   thread (in C, outside the runtime) while the loop goes on serving; each
   outcome comes back through a pipe the loop watches. Without a pipe (out
   of descriptors), the fsync blocks the loop as before. *)
let threaded_fsync loop =
  match Unix.pipe ~cloexec:true () with
  | exception Unix.Unix_error (e, _, _) ->
      Log.warn (fun m -> m "no pipe for the fsync thread (%s): fsyncs block" (Unix.error_message e));
      (Replica.inline_fsync, ignore)
  | r, w ->
      Unix.set_nonblock r;
      let waiting = Hashtbl.create 4 and next = ref 0 and input = Buffer.create 64 in
      let b = Bytes.create 512 in
      let rec drain () =
        match Unix.read r b 0 (Bytes.length b) with
        | 0 -> ()
        | n ->
            Buffer.add_subbytes input b 0 n;
            let s = Buffer.contents input in
            let whole = String.length s / 8 * 8 in
            Buffer.clear input;
            Buffer.add_string input (String.sub s whole (String.length s - whole));
            for i = 0 to (whole / 8) - 1 do
              let id = Int32.to_int (String.get_int32_ne s (8 * i))
              and e = Int32.to_int (String.get_int32_ne s ((8 * i) + 4)) in
              match Hashtbl.find_opt waiting id with
              | Some k ->
                  Hashtbl.remove waiting id;
                  k
                    (if e = 0 then Ok ()
                     else Error (Unix.Unix_error (error_of_errno e, "fsync", "")))
              | None -> ()
            done;
            drain ()
        | exception Unix.Unix_error _ -> ()
      in
      Loop.watch loop r drain;
      let runner ~fd run k =
        next := (!next + 1) land 0x3fff_ffff;
        Hashtbl.replace waiting !next k;
        match fsync_async fd w !next with
        | () -> ()
        | exception Unix.Unix_error _ ->
            (* No worker thread (pthread_create failed): this fsync blocks the loop. *)
            Hashtbl.remove waiting !next;
            Replica.inline_fsync ~fd run k
      in
      let close () =
        Loop.unwatch loop r;
        (try Unix.close r with Unix.Unix_error _ -> ());
        (* A thread still running writes to [w]: left open (never another file's number). *)
        if Hashtbl.length waiting = 0 then try Unix.close w with Unix.Unix_error _ -> ()
      in
      (runner, close)

(* The minor heap, in words: 4M (32 MB). A request's records (its waiting
   entry and timer, its result until the commit, the chain of its order)
   live a few milliseconds; with the default 256k words, a replica under 64
   clients filled the minor heap several times while they lived and
   promoted them, and marking the major heap took about 35% of the three
   replicas' CPU samples under `perf record` (mark_slice_darken alone 24%);
   with 4M words, 8%. *)
let minor_heap_words = 4 * 1024 * 1024

let run ?(on_ready = ignore) cfg =
  if (Gc.get ()).minor_heap_size < minor_heap_words then
    Gc.set { (Gc.get ()) with minor_heap_size = minor_heap_words };
  let cfg =
    match Params.of_string default_params with
    | Ok d -> { cfg with params = Params.override d ~by:cfg.params }
    | Error _ -> cfg
  in
  let ( let* ) = Result.bind in
  let* listen_addr = parse_addr cfg.listen in
  let* store, found = Store.open_ ~identity:(cfg.group, cfg.init) cfg.data in
  List.iter (fun f -> Fmt.epr "consort kv serve: %a@." Store.pp_finding f) found;
  let loop = Loop.create () in
  let rcfg = Replica.default_config ~group:cfg.group ~addr:cfg.bind ~peers:cfg.peers in
  let stop = ref false and failed = ref None in
  let on_failure e =
    failed := Some e;
    stop := true
  in
  let fsync, close_fsync = threaded_fsync loop in
  match R.create ~params:cfg.params ~on_failure ~fsync loop rcfg store with
  | Error e ->
      close_fsync ();
      Store.close store;
      Error e
  | Ok r -> (
      let sock = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_STREAM 0 in
      match
        Unix.setsockopt sock Unix.SO_REUSEADDR true;
        Unix.bind sock listen_addr;
        Unix.listen sock 128;
        Unix.set_nonblock sock
      with
      | exception Unix.Unix_error (e, _, _) ->
          Unix.close sock;
          R.crash r;
          Store.close store;
          Error (Printf.sprintf "--listen %s: %s" cfg.listen (Unix.error_message e))
      | () -> (
          let conns = ref 0 in
          let close c =
            if not c.closed then begin
              c.closed <- true;
              decr conns;
              if c.reading then Loop.unwatch loop c.fd;
              c.reading <- false;
              try Unix.close c.fd with Unix.Unix_error _ -> ()
            end
          in
          let room c = c.outstanding < max_pipeline in
          let rec flush c =
            c.flushing <- false;
            if (not c.closed) && Buffer.length c.output > 0 then
              let s = Buffer.contents c.output in
              match Unix.single_write_substring c.fd s 0 (String.length s) with
              | n ->
                  Buffer.clear c.output;
                  Buffer.add_string c.output (String.sub s n (String.length s - n));
                  if Buffer.length c.output > 0 then later c;
                  resume c
              | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) ->
                  later c
              | exception Unix.Unix_error _ -> close c
          and later c =
            if not c.flushing then (
              c.flushing <- true;
              ignore (Loop.after loop (Time.of_ms 1) (fun () -> flush c)))
          and reply c rreq outcome =
            c.outstanding <- c.outstanding - 1;
            if not c.closed then begin
              Buffer.add_string c.output (Wire.frame_reply { Wire.rreq; outcome });
              if Buffer.length c.output > max_output then (
                Log.warn (fun m -> m "a client does not read its replies: connection closed");
                close c)
              else flush c
            end
          (* The requests in [input], while the connection has room; then
             the loop reads it only if it still has room. *)
          and frames c =
            c.parsing <- true;
            let rec go () =
              if (not c.closed) && room c then
                match Wire.read_frame c.input with
                | Ok None -> ()
                | Error e ->
                    Log.info (fun m -> m "client: %s: connection closed" e);
                    close c
                | Ok (Some f) -> (
                    match Wire.decode_request f with
                    | Error e ->
                        Log.info (fun m -> m "client: bad request (%s): connection closed" e);
                        close c
                    | Ok req ->
                        c.outstanding <- c.outstanding + 1;
                        R.submit r req (reply c req.req);
                        go ())
            in
            go ();
            c.parsing <- false;
            if not c.closed then
              if room c && not c.reading then begin
                c.reading <- true;
                Loop.watch loop c.fd (on_readable c)
              end
              else if (not (room c)) && c.reading then begin
                c.reading <- false;
                Loop.unwatch loop c.fd
              end
          (* An answer went out: a connection that had no room may have some. *)
          and resume c = if (not c.closed) && (not c.parsing) && not c.reading then frames c
          and on_readable c () =
            let b = Bytes.create 65536 in
            match Unix.read c.fd b 0 (Bytes.length b) with
            | 0 -> close c
            | n ->
                Buffer.add_subbytes c.input b 0 n;
                frames c
            | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> ()
            | exception Unix.Unix_error _ -> close c
          in
          let rec accept () =
            match Unix.accept ~cloexec:true sock with
            | fd, _ ->
                if !conns >= cfg.max_connections then (
                  Log.warn (fun m -> m "%d connections: one more refused" !conns);
                  Unix.close fd)
                else begin
                  incr conns;
                  Unix.set_nonblock fd;
                  (try Unix.setsockopt fd Unix.TCP_NODELAY true with Unix.Unix_error _ -> ());
                  let c =
                    {
                      fd;
                      input = Buffer.create 256;
                      output = Buffer.create 256;
                      closed = false;
                      flushing = false;
                      outstanding = 0;
                      reading = true;
                      parsing = false;
                    }
                  in
                  Loop.watch loop fd (on_readable c)
                end;
                accept ()
            | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> ()
            | exception Unix.Unix_error (e, _, _) ->
                Log.warn (fun m -> m "accept: %s" (Unix.error_message e))
          in
          Loop.watch loop sock accept;
          Sys.set_signal Sys.sigterm (Sys.Signal_handle (fun _ -> stop := true));
          Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> stop := true));
          Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
          let rec poll () = if not !stop then ignore (Loop.after loop (Time.of_ms 20) poll) in
          poll ();
          on_ready ();
          Loop.run loop ~until:(fun () -> !stop);
          R.leave r;
          (* Let the leave go out (and, after a failure of the disk, the
             refusals to the clients). *)
          Loop.run loop ~timeout:(Time.of_ms 300);
          (if !failed = None then try Store.sync store with Store.Failed e -> failed := Some e);
          Store.close store;
          close_fsync ();
          Unix.close sock;
          match !failed with
          | None -> Ok ()
          | Some e ->
              Error
                (Fmt.str "%s: %a: stopped acknowledging and left the group" cfg.data
                   Store.pp_failure e)))
