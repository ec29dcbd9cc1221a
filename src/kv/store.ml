module Codec = Consort.Codec
module Io = Consort_util.Io

let src = Logs.Src.create "consort.kv.store" ~doc:"Key-value store on disk"

module Log = (val Logs.src_log src : Logs.LOG)

type 'op command = 'op Rsm.command = { client : int64; req : int; op : 'op }

type finding = Store_intf.finding =
  | Torn_tail of { file : string; offset : int; dropped : int; why : string }
  | Temp_removed of string

type failure = Store_intf.failure = Disk_full of string | Io_error of string | Wrong_dir of string

exception Failed = Store_intf.Failed

type init = Store_intf.init = Existing | New | Join
type membership = Store_intf.membership = Fresh | Member of string | Joining | Legacy

module type S = Store_intf.S

let pp_failure ppf = function
  | Disk_full what -> Fmt.pf ppf "disk full (%s)" what
  | Io_error what -> Fmt.pf ppf "io-error: %s" what
  | Wrong_dir what -> Fmt.pf ppf "wrong data directory: %s" what

(* EDQUOT (122 on Linux) has no constructor of its own in Unix. *)
let failure_of_unix what e =
  match e with
  | Unix.ENOSPC | Unix.EUNKNOWNERR 122 ->
      Disk_full (Printf.sprintf "%s: %s" what (Unix.error_message e))
  | e -> Io_error (Printf.sprintf "%s: %s" what (Unix.error_message e))

let pp_finding ppf = function
  | Torn_tail { file; offset; dropped; why } ->
      Fmt.pf ppf "%s: torn or corrupt tail at offset %d (%s): %d bytes cut off" file offset why
        dropped
  | Temp_removed f -> Fmt.pf ppf "%s: left by an interrupted write, removed" f

let is_damage = function Torn_tail _ -> true | Temp_removed _ -> false

module Make (M : Rsm.MACHINE) = struct
  type op = M.op
  type response = M.response
  type limits = M.limits
  type machine = M.t
  type cmd = op command
  type record = Write of int * cmd | Epoch of int * int | Promise of int

  let cmd_codec =
    Codec.map ~name:(M.name ^ "-cmd")
      (fun c -> (c.client, c.req, c.op))
      (fun (client, req, op) -> { client; req; op })
      (Codec.tup3 Codec.int64 Codec.varint M.op_codec)

  let entry_codec = Codec.pair Codec.varint cmd_codec

  let record_codec =
    Codec.union (M.name ^ "-record")
      [
        Codec.case 1 "write" entry_codec
          (function Write (s, c) -> Some (s, c) | _ -> None)
          (fun (s, c) -> Write (s, c));
        Codec.case 2 "epoch"
          (Codec.pair Codec.varint Codec.varint)
          (function Epoch (e, s) -> Some (e, s) | _ -> None)
          (fun (e, s) -> Epoch (e, s));
        Codec.case 3 "promise" Codec.varint
          (function Promise p -> Some p | _ -> None)
          (fun p -> Promise p);
      ]

  let wal_magic = "consort-" ^ M.name ^ "-wal 1\n"
  let snap_magic = "consort-" ^ M.name ^ "-snapshot 1\n"
  let max_record = 64 * 1024 * 1024

  type t = {
    dir : string;
    io : Io.t;
    limits : M.limits;
    snapshot_bytes : int;
    retain : int;
    mutable machine : M.t;
    mutable seq : int;
    mutable epoch : int;
    mutable history : (int * int) list;
    mutable promise : int; (* no epoch below this will be started here *)
    mutable wal : Unix.file_descr;
    mutable wal_size : int;
    pending : Buffer.t;
    recent : (int * cmd * string) Queue.t; (* write, its command, the chain before it *)
    mutable chain : string; (* digest of the whole log: of the chain before and the last write *)
    mutable recent_bytes : int;
    lock : Unix.file_descr;
    mutable failed : failure option; (* the disk refused a step: no sync ever again *)
    mutable in_flight : int; (* fsyncs started by sync_start, not finished *)
    mutable unsynced : bool; (* written to the log since the last fsync started *)
    mutable retired : Unix.file_descr list; (* logs replaced while an fsync ran on them *)
    group : string option; (* the identity's, if the store has one *)
    mutable membership : membership;
  }

  let dir t = t.dir
  let machine t = t.machine
  let seq t = t.seq
  let epoch t = t.epoch
  let history t = t.history
  let promise t = t.promise
  let dirty t = Buffer.length t.pending > 0
  let membership t = t.membership
  let failed t = t.failed

  (* A step that makes data durable: an error of the disk stops the store for good. *)
  let durable t what f =
    match t.failed with
    | Some e -> raise (Failed e)
    | None -> (
        try f () with
        | Unix.Unix_error (e, _, _) ->
            let e = failure_of_unix what e in
            t.failed <- Some e;
            raise (Failed e)
        | Sys_error m ->
            let e = Io_error (what ^ ": " ^ m) in
            t.failed <- Some e;
            raise (Failed e))

  let path t f = Filename.concat t.dir f

  let frame payload =
    let b = Buffer.create (String.length payload + 12) in
    let len = String.length payload in
    Buffer.add_char b (Char.chr ((len lsr 24) land 0xff));
    Buffer.add_char b (Char.chr ((len lsr 16) land 0xff));
    Buffer.add_char b (Char.chr ((len lsr 8) land 0xff));
    Buffer.add_char b (Char.chr (len land 0xff));
    Buffer.add_string b (String.sub (Digest.string payload) 0 8);
    Buffer.add_string b payload;
    Buffer.contents b

  (* [unframe s off]: the payload at [off] and the next offset, or why not. *)
  let unframe s off =
    let n = String.length s in
    if off + 12 > n then Error "record header cut short"
    else
      let len =
        (Char.code s.[off] lsl 24)
        lor (Char.code s.[off + 1] lsl 16)
        lor (Char.code s.[off + 2] lsl 8)
        lor Char.code s.[off + 3]
      in
      if len > max_record then Error (Printf.sprintf "record length %d, over %d" len max_record)
      else if off + 12 + len > n then Error "record cut short"
      else
        let payload = String.sub s (off + 12) len in
        if String.sub (Digest.string payload) 0 8 <> String.sub s (off + 4) 8 then
          Error "checksum mismatch"
        else Ok (payload, off + 12 + len)

  let read_file p =
    let ic = open_in_bin p in
    Fun.protect
      ~finally:(fun () -> close_in ic)
      (fun () -> really_input_string ic (in_channel_length ic))

  let write_all io p fd s =
    let b = Bytes.unsafe_of_string s in
    let rec go off =
      if off < Bytes.length b then go (off + io.Io.write p fd b off (Bytes.length b - off))
    in
    go 0

  let cmd_size (c : cmd) = 32 + M.op_size c.op

  (* Recent writes, bounded in number and in bytes (16 MiB). *)
  let retain_bytes = 16 * 1024 * 1024

  let remember t (n, c) =
    let before = t.chain in
    t.chain <- Digest.string (before ^ Codec.encode_string entry_codec (n, c));
    Queue.push (n, c, before) t.recent;
    t.recent_bytes <- t.recent_bytes + cmd_size c;
    while Queue.length t.recent > t.retain || t.recent_bytes > retain_bytes do
      let _, c, _ = Queue.pop t.recent in
      t.recent_bytes <- t.recent_bytes - cmd_size c
    done

  let chain t = t.chain

  let chain_at t s =
    if s = t.seq then Some t.chain
    else if s > t.seq || s < 0 then None
    else Queue.fold (fun acc (n, _, before) -> if n = s + 1 then Some before else acc) None t.recent

  let log_record t r = Buffer.add_string t.pending (frame (Codec.encode_string record_codec r))

  let execute t c =
    let r, changed = M.apply t.machine ~client:c.client ~req:c.req c.op in
    if changed then begin
      t.seq <- t.seq + 1;
      log_record t (Write (t.seq, c));
      remember t (t.seq, c)
    end;
    r

  let start_epoch t e =
    t.epoch <- e;
    t.history <- (e, t.seq) :: List.filteri (fun i _ -> i < 63) t.history;
    log_record t (Epoch (e, t.seq))

  let adopt t ~epoch ~history =
    List.iter
      (fun (e, after) ->
        if e > t.epoch then begin
          t.epoch <- e;
          t.history <- (e, after) :: List.filteri (fun i _ -> i < 63) t.history;
          log_record t (Epoch (e, after))
        end)
      (List.rev history);
    if epoch > t.epoch then start_epoch t epoch

  let apply_entries t l =
    List.iter
      (fun (s, c) ->
        if s > t.seq then
          if s <> t.seq + 1 then
            invalid_arg (Printf.sprintf "Store.apply_entries: write %d after %d" s t.seq)
          else begin
            let _, changed = M.apply t.machine ~client:c.client ~req:c.req c.op in
            if not changed then Log.warn (fun m -> m "write %d changed nothing" s);
            t.seq <- s;
            log_record t (Write (s, c));
            remember t (s, c)
          end)
      l

  let entries_since t s =
    if s >= t.seq then Some []
    else
      match Queue.peek_opt t.recent with
      | Some (first, _, _) when first <= s + 1 ->
          Some
            (Queue.fold (fun acc (n, c, _) -> if n > s then (n, c) :: acc else acc) [] t.recent
            |> List.rev)
      | _ -> None

  let snap_codec limits =
    Codec.tup4
      (Codec.pair Codec.varint (Codec.string ~max:16 ()))
      Codec.varint
      (Codec.list ~max:64 (Codec.pair Codec.varint Codec.varint))
      (M.codec limits)

  let snapshot t =
    Codec.encode_string (snap_codec t.limits) ((t.seq, t.chain), t.epoch, t.history, t.machine)

  let open_wal p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_APPEND; Unix.O_CLOEXEC ] 0o644

  (* A file replaced atomically: written to [f.tmp], synced, renamed, the
   directory synced. *)
  let replace t f contents =
    let tmp = path t (f ^ ".tmp") in
    (* 0600 whatever the umask: a replica's state may hold secrets (the directory's
       capabilities). *)
    let fd = Consort_local.Private.openfile tmp [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC ] in
    Fun.protect
      ~finally:(fun () -> Unix.close fd)
      (fun () ->
        write_all t.io tmp fd contents;
        t.io.Io.fsync tmp fd);
    t.io.Io.rename tmp (path t f);
    t.io.Io.fsync_dir t.dir

  (* {2 The directory's identity} *)

  let id_magic = "consort-data-dir 1"

  let id_contents ~group m =
    Printf.sprintf "%s\nstore %s\ngroup %s\nmember %s\n" id_magic M.name group
      (match m with Member c -> c | Fresh -> "fresh" | Joining -> "joining" | Legacy -> "legacy")

  let valid_word s =
    s <> ""
    && String.length s <= 256
    && String.for_all (fun c -> c > ' ' && c <= '~' && c <> '\n') s

  (* (store, group, membership) *)
  let parse_identity s =
    match String.split_on_char '\n' s with
    | [ m; st; g; mb; "" ] when m = id_magic -> (
        let field name l =
          let p = name ^ " " in
          let n = String.length p in
          if String.length l > n && String.sub l 0 n = p then
            Some (String.sub l n (String.length l - n))
          else None
        in
        match (field "store" st, field "group" g, field "member" mb) with
        | Some st, Some g, Some mb when valid_word st && valid_word g && valid_word mb ->
            Some
              ( st,
                g,
                match mb with
                | "fresh" -> Fresh
                | "joining" -> Joining
                | "legacy" -> Legacy
                | c -> Member c )
        | _ -> None)
    | _ -> None

  let write_identity t m =
    match t.group with
    | None -> () (* no identity: Legacy for good *)
    | Some group ->
        replace t "identity" (id_contents ~group m);
        t.membership <- m

  let set_member t c = durable t "the identity" (fun () -> write_identity t (Member c))

  (* The snapshot, then an empty log. *)
  let write_snapshot t =
    replace t "snapshot" (snap_magic ^ frame (snapshot t));
    (* The promise outlives the log it was in: it is in the new log before
       that replaces the old one (written after, an error or a crash in
       between would lose it). *)
    let promise =
      if t.promise > 0 then frame (Codec.encode_string record_codec (Promise t.promise)) else ""
    in
    (* An fsync in flight (sync_start) may still use the old log: closed when none is. *)
    if t.in_flight > 0 then t.retired <- t.wal :: t.retired else Unix.close t.wal;
    replace t "wal" (wal_magic ^ promise);
    t.wal <- open_wal (path t "wal");
    t.wal_size <- String.length wal_magic + String.length promise;
    Log.info (fun m -> m "%s: snapshot at write %d" t.dir t.seq)

  (* What is pending stays pending until it is written and fsynced; a write
     that fails part way is cut back off the log, so that no torn record
     lies before later ones (the store stops anyway). *)
  let sync t =
    if t.failed <> None || dirty t then
      durable t "the log" (fun () ->
          let s = Buffer.contents t.pending in
          (match
             write_all t.io (path t "wal") t.wal s;
             t.io.Io.fsync (path t "wal") t.wal
           with
          | () -> ()
          | exception (Unix.Unix_error _ as x) ->
              (try Unix.ftruncate t.wal t.wal_size with Unix.Unix_error _ -> ());
              raise x);
          Buffer.clear t.pending;
          t.wal_size <- t.wal_size + String.length s;
          if t.wal_size > t.snapshot_bytes then write_snapshot t)

  (* Group commit: the write now, the fsync apart (in another thread, or
     later), while the replica goes on applying; what it applies meanwhile
     waits for the next fsync. *)
  type fsync = { fd : Unix.file_descr; needed : bool; run : unit -> unit }

  let sync_start t =
    if t.failed <> None || dirty t then
      durable t "the log" (fun () ->
          let s = Buffer.contents t.pending in
          (match write_all t.io (path t "wal") t.wal s with
          | () -> ()
          | exception (Unix.Unix_error _ as x) ->
              (try Unix.ftruncate t.wal t.wal_size with Unix.Unix_error _ -> ());
              raise x);
          Buffer.clear t.pending;
          t.wal_size <- t.wal_size + String.length s;
          t.unsynced <- true);
    let needed = t.unsynced || t.in_flight > 0 in
    t.unsynced <- false;
    t.in_flight <- t.in_flight + 1;
    let fd = t.wal and p = path t "wal" and io = t.io in
    { fd; needed; run = (fun () -> if needed then io.Io.fsync p fd) }

  let sync_finish t result =
    t.in_flight <- t.in_flight - 1;
    if t.in_flight = 0 then begin
      List.iter (fun fd -> try Unix.close fd with Unix.Unix_error _ -> ()) t.retired;
      t.retired <- []
    end;
    durable t "the log" (fun () ->
        (match result with Ok () -> () | Error x -> raise x);
        if t.in_flight = 0 && t.wal_size > t.snapshot_bytes then write_snapshot t)

  let install t s =
    match Codec.decode_string (snap_codec t.limits) s with
    | Error e -> Error (Fmt.str "snapshot does not decode: %a" Codec.pp_error e)
    | Ok ((seq, chain), epoch, history, machine) ->
        (match t.failed with Some e -> raise (Failed e) | None -> ());
        Buffer.clear t.pending;
        t.seq <- seq;
        t.chain <- chain;
        t.epoch <- epoch;
        t.history <- history;
        t.machine <- machine;
        Queue.clear t.recent;
        t.recent_bytes <- 0;
        durable t "a snapshot" (fun () -> write_snapshot t);
        Ok ()

  let promise_to t p =
    if p > t.promise then begin
      t.promise <- p;
      log_record t (Promise p);
      sync t
    end

  let close t =
    List.iter (fun fd -> try Unix.close fd with Unix.Unix_error _ -> ()) t.retired;
    t.retired <- [];
    (try Unix.close t.wal with Unix.Unix_error _ -> ());
    try Unix.close t.lock with Unix.Unix_error _ -> ()

  let open_ ?(io = Io.real) ?(limits = M.default_limits) ?(snapshot_bytes = 8 * 1024 * 1024)
      ?(retain = 10_000) ?identity dir =
    let ( let* ) = Result.bind in
    let findings = ref [] in
    let p f = Filename.concat dir f in
    let* () =
      try
        Consort_local.Private.mkdir dir;
        if not (Sys.is_directory dir) then Error (dir ^ ": not a directory")
        else
          (* Refused when another user could read the log or the snapshot. *)
          match Consort_local.Private.check [ p "wal"; p "snapshot" ] with
          | Some m -> Error m
          | None -> Ok ()
      with Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: %s" dir (Unix.error_message e))
    in
    let* lock =
      try
        let fd = Consort_local.Private.openfile (p "lock") [ Unix.O_RDWR; Unix.O_CREAT ] in
        try
          Unix.lockf fd Unix.F_TLOCK 0;
          Ok fd
        with Unix.Unix_error _ ->
          Unix.close fd;
          Error (dir ^ ": in use by another process")
      with Unix.Unix_error (e, _, _) ->
        Error (Printf.sprintf "%s: %s" (p "lock") (Unix.error_message e))
    in
    let fail fmt =
      Printf.ksprintf
        (fun s ->
          Unix.close lock;
          Error s)
        fmt
    in
    try
      (* The identity: who this directory belongs to, and whether it may be
         used as this replica asks. *)
      let has_state = Sys.file_exists (p "wal") || Sys.file_exists (p "snapshot") in
      let ident =
        match identity with
        | None -> Ok (None, Legacy, false)
        | Some (group, init) -> (
            let mine = Printf.sprintf "%s group %s" M.name group in
            if Sys.file_exists (p "identity") then
              match parse_identity (read_file (p "identity")) with
              | None ->
                  Error
                    (Printf.sprintf
                       "%s: not the identity of a Consort data directory: refusing to start"
                       (p "identity"))
              | Some (st, g, m) -> (
                  let theirs =
                    Printf.sprintf "%s group %s (%s)" st g
                      (match m with
                      | Member c -> "cluster " ^ c
                      | Fresh -> "a new cluster"
                      | Joining -> "joining"
                      | Legacy -> "made before identities")
                  in
                  if st <> M.name || g <> group then
                    Error
                      (Printf.sprintf
                         "%s: a data directory of %s, not of %s: refusing to start (wrong --data \
                          or --group?)"
                         dir theirs mine)
                  else
                    match (init, m) with
                    | New, _ ->
                        Error
                          (Printf.sprintf
                             "%s: already a data directory of %s: --new starts a cluster on an \
                              empty directory only"
                             dir theirs)
                    | Join, (Member _ | Legacy | Fresh) ->
                        Error
                          (Printf.sprintf
                             "%s: already a data directory of %s: --join is for an empty \
                              directory; start it without"
                             dir theirs)
                    | (Join | Existing), _ -> Ok (Some group, m, false))
            else if has_state then
              match init with
              | Existing -> Ok (Some group, Legacy, true)
              | New | Join ->
                  Error
                    (Printf.sprintf
                       "%s: holds a replica's state (made before data directories had an \
                        identity): start it without --new or --join"
                       dir)
            else
              match init with
              | New -> Ok (Some group, Fresh, true)
              | Join -> Ok (Some group, Joining, true)
              | Existing ->
                  Error
                    (Printf.sprintf
                       "%s: an empty data directory: start a brand-new cluster with --new, or \
                        replace a lost replica with --join (it then catches up from the others \
                        before it counts toward a quorum)"
                       dir))
      in
      match ident with
      | Error e -> fail "%s" e
      | Ok (group, membership, write_id) -> (
          List.iter
            (fun f ->
              if Sys.file_exists (p f) then (
                Sys.remove (p f);
                findings := Temp_removed (p f) :: !findings))
            [ "snapshot.tmp"; "wal.tmp" ];
          let base =
            if Sys.file_exists (p "snapshot") then
              let s = read_file (p "snapshot") in
              let m = String.length snap_magic in
              if String.length s < m || String.sub s 0 m <> snap_magic then
                Error "not a snapshot of this store"
              else
                match unframe s m with
                | Error why -> Error why
                | Ok (payload, _) -> (
                    match Codec.decode_string (snap_codec limits) payload with
                    | Ok v -> Ok v
                    | Error e -> Error (Fmt.str "does not decode: %a" Codec.pp_error e))
            else Ok ((0, ""), 0, [], M.create limits)
          in
          match base with
          | Error why ->
              fail
                "%s: corrupt (%s): refusing to start; move the data directory away and start this \
                 replica with --join on an empty one (it catches up from the others and has no \
                 vote until then); never start it empty without --join: beside a stale replica it \
                 could bring back an old state"
                (p "snapshot") why
          | Ok ((seq, chain), epoch, history, machine) ->
              let t =
                {
                  dir;
                  io;
                  limits;
                  snapshot_bytes;
                  retain;
                  machine;
                  seq;
                  epoch;
                  history;
                  promise = 0;
                  wal = Unix.stdin;
                  wal_size = 0;
                  pending = Buffer.create 4096;
                  recent = Queue.create ();
                  chain;
                  recent_bytes = 0;
                  lock;
                  failed = None;
                  in_flight = 0;
                  unsynced = false;
                  retired = [];
                  group;
                  membership;
                }
              in
              let m = String.length wal_magic in
              let s = if Sys.file_exists (p "wal") then read_file (p "wal") else "" in
              let good =
                if s = "" then (
                  replace t "wal" wal_magic;
                  m)
                else if String.length s < m then
                  if String.sub wal_magic 0 (String.length s) = s then (
                    replace t "wal" wal_magic;
                    m)
                  else -1
                else if String.sub s 0 m <> wal_magic then -1
                else
                  (* Replay the records after the snapshot; stop at the first bad one. *)
                  let rec go off =
                    if off = String.length s then off
                    else
                      let bad why =
                        findings :=
                          Torn_tail
                            { file = p "wal"; offset = off; dropped = String.length s - off; why }
                          :: !findings;
                        off
                      in
                      match unframe s off with
                      | Error why -> bad why
                      | Ok (payload, next) -> (
                          match Codec.decode_string record_codec payload with
                          | Error e -> bad (Fmt.str "record does not decode: %a" Codec.pp_error e)
                          | Ok (Promise p) ->
                              if p > t.promise then t.promise <- p;
                              go next
                          | Ok (Epoch (e, after)) ->
                              if e > t.epoch then (
                                t.epoch <- e;
                                t.history <-
                                  (e, after) :: List.filteri (fun i _ -> i < 63) t.history);
                              go next
                          | Ok (Write (n, c)) ->
                              if n <= t.seq then go next
                              else if n <> t.seq + 1 then
                                bad (Printf.sprintf "write %d after %d" n t.seq)
                              else (
                                ignore (M.apply t.machine ~client:c.client ~req:c.req c.op);
                                t.seq <- n;
                                remember t (n, c);
                                go next))
                  in
                  go m
              in
              if good < 0 then fail "%s: not a log of this store" (p "wal")
              else begin
                if good < String.length s then begin
                  let fd = Unix.openfile (p "wal") [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0 in
                  Fun.protect
                    ~finally:(fun () -> Unix.close fd)
                    (fun () ->
                      Unix.ftruncate fd good;
                      io.Io.fsync (p "wal") fd)
                end;
                t.wal <- open_wal (p "wal");
                t.wal_size <- max good m;
                if write_id then write_identity t membership;
                Ok (t, List.rev !findings)
              end)
    with
    | Unix.Unix_error (e, f, a) -> fail "%s: %s %s: %s" dir f a (Unix.error_message e)
    | Sys_error e -> fail "%s" e
end

include Make (Machine.Rsm)
