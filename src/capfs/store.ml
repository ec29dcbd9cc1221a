let src = Logs.Src.create "consort.capfs" ~doc:"Consort immutable file store"

module Log = (val Logs.src_log src : Logs.LOG)

type obj = int

type error =
  [ `Not_found
  | `Not_committed
  | `Bad_range
  | `Too_many_uncommitted
  | `Too_large
  | `No_space
  | `Io of string ]

let pp_error ppf = function
  | `Not_found -> Fmt.string ppf "no such file"
  | `Not_committed -> Fmt.string ppf "file not committed"
  | `Bad_range -> Fmt.string ppf "offset or length outside the file"
  | `Too_many_uncommitted -> Fmt.string ppf "too many uncommitted files"
  | `Too_large -> Fmt.string ppf "file or uncommitted bytes too large"
  | `No_space -> Fmt.string ppf "no space left on the disk"
  | `Io m -> Fmt.pf ppf "i/o error: %s" m

type config = {
  max_uncommitted_files : int;
  max_uncommitted_bytes : int;
  max_file_size : int;
  idle_timeout : Consort.Time.t;
  lifetime : int;
}

let default_config =
  {
    max_uncommitted_files = 1024;
    max_uncommitted_bytes = 1 lsl 30;
    max_file_size = 1 lsl 30;
    idle_timeout = Consort.Time.of_sec 600.;
    lifetime = 24;
  }

type finding =
  | Temp_removed of string
  | Corrupt_record of string * string
  | Corrupt_blob of string * string
  | Missing_blob of obj * string
  | Orphan_removed of string
  | Unknown_file of string
  | Server_record_replaced of string

let pp_finding ppf = function
  | Temp_removed p -> Fmt.pf ppf "removed interrupted write %s" p
  | Corrupt_record (p, why) -> Fmt.pf ppf "corrupt record %s: %s (set aside)" p why
  | Corrupt_blob (p, why) -> Fmt.pf ppf "corrupt blob %s: %s (set aside)" p why
  | Missing_blob (o, why) -> Fmt.pf ppf "file %d lost: %s (record set aside)" o why
  | Orphan_removed p -> Fmt.pf ppf "removed unreferenced blob %s" p
  | Unknown_file p -> Fmt.pf ppf "unknown file %s (set aside)" p
  | Server_record_replaced why -> Fmt.pf ppf "server record bad: %s; new server secret made" why

let is_damage = function
  | Temp_removed _ | Orphan_removed _ -> false
  | Corrupt_record _ | Corrupt_blob _ | Missing_blob _ | Unknown_file _ | Server_record_replaced _
    ->
      true

type upload = { mutable buf : Bytes.t; mutable len : int; mutable last_use : Consort.Time.t }

type state =
  | Uncommitted of upload
  | Committed of { hash : string; size : int; mutable durable : bool }

type file = { mutable secret : string; mutable state : state }
type blob = { bsize : int; mutable refs : int; mutable bdurable : bool }

type t = {
  dir : string;
  config : config;
  io : Consort_util.Io.t;
  random : int -> string;
  clock : unit -> Consort.Time.t;
  lock : Unix.file_descr;
  files : (obj, file) Hashtbl.t;
  blobs : (string, blob) Hashtbl.t;
  mutable server_secret : string;
  mutable next_obj : obj;
  mutable reserved : obj; (* numbers below this may have been handed out: never reused *)
  mutable unc_files : int;
  mutable unc_bytes : int;
  mutable tmp_seq : int;
  fds : (string, Unix.file_descr) Hashtbl.t;
  fd_order : string Queue.t;
  mutable closed : bool;
  lives : (obj, int) Hashtbl.t; (* rounds of ageing left to a committed file; absent: all of them *)
  mutable disk_error : string option; (* the first error a durable write met *)
  mutable fsync_failed : bool; (* once set, every durable write is refused *)
}

let secret_len = 32
let max_fds = 32

(* Hex and checksums. *)

let hex s =
  let b = Buffer.create (2 * String.length s) in
  String.iter (fun c -> Buffer.add_string b (Printf.sprintf "%02x" (Char.code c))) s;
  Buffer.contents b

let unhex s =
  let n = String.length s in
  if n mod 2 <> 0 then None
  else
    let v c =
      match c with
      | '0' .. '9' -> Some (Char.code c - 48)
      | 'a' .. 'f' -> Some (Char.code c - 87)
      | _ -> None
    in
    let b = Bytes.create (n / 2) in
    let rec go i =
      if i = n / 2 then Some (Bytes.to_string b)
      else
        match (v s.[2 * i], v s.[(2 * i) + 1]) with
        | Some h, Some l ->
            Bytes.set b i (Char.chr ((h * 16) + l));
            go (i + 1)
        | _ -> None
    in
    go 0

let sha256 s = Sha256.to_bin (Sha256.string s)
let sha256_sub b len = Sha256.to_bin (Sha256.substring (Bytes.unsafe_to_string b) 0 len)

(* Records: a few "key value" lines, then "check HEX" over everything before. *)

let seal body = body ^ "check " ^ hex (sha256 body) ^ "\n"

let unseal s =
  let n = String.length s in
  let check_len = 6 + 64 + 1 in
  if n < check_len then Error "too short"
  else
    let body = String.sub s 0 (n - check_len) and tail = String.sub s (n - check_len) check_len in
    if String.sub tail 0 6 <> "check " || tail.[check_len - 1] <> '\n' then Error "no checksum line"
    else
      match unhex (String.sub tail 6 64) with
      | None -> Error "bad checksum line"
      | Some sum -> if sum <> sha256 body then Error "checksum mismatch" else Ok body

let fields magic body =
  match String.split_on_char '\n' body with
  | m :: rest when m = magic ->
      let rec go acc = function
        | [ "" ] -> Some (List.rev acc)
        | l :: ls -> (
            match String.index_opt l ' ' with
            | Some i ->
                go ((String.sub l 0 i, String.sub l (i + 1) (String.length l - i - 1)) :: acc) ls
            | None -> None)
        | [] -> None
      in
      go [] rest
  | _ -> None

let meta_magic = "consort-capfs-meta 1"
let server_magic = "consort-capfs-server 1"

let encode_record ~obj ~secret ~hash ~size =
  seal
    (Printf.sprintf "%s\nobj %d\nsecret %s\nblob %s\nsize %d\n" meta_magic obj (hex secret)
       (hex hash) size)

let int_field s =
  if
    s = ""
    || String.length s > 18
    || not (String.for_all (function '0' .. '9' -> true | _ -> false) s)
  then None
  else Some (int_of_string s)

let decode_record s =
  match unseal s with
  | Error e -> Error e
  | Ok body -> (
      match fields meta_magic body with
      | Some [ ("obj", o); ("secret", sec); ("blob", h); ("size", sz) ] -> (
          match (int_field o, unhex sec, unhex h, int_field sz) with
          | Some o, Some sec, Some h, Some sz
            when String.length sec = secret_len && String.length h = 32 ->
              Ok (o, sec, h, sz)
          | _ -> Error "bad field")
      | _ -> Error "bad layout")

let encode_server secret reserved =
  seal (Printf.sprintf "%s\nsecret %s\nreserved %d\n" server_magic (hex secret) reserved)

let decode_server s =
  match unseal s with
  | Error e -> Error e
  | Ok body -> (
      match fields server_magic body with
      | Some [ ("secret", sec); ("reserved", r) ] -> (
          match (unhex sec, int_field r) with
          | Some sec, Some r when String.length sec = secret_len -> Ok (sec, r)
          | _ -> Error "bad field")
      | _ -> Error "bad layout")

(* Paths. *)

let ( / ) = Filename.concat
let blobs_dir t = t.dir / "blobs"
let meta_dir t = t.dir / "meta"
let tmp_dir t = t.dir / "tmp"
let corrupt_dir t = t.dir / "corrupt"
let blob_path t hash = blobs_dir t / hex hash
let meta_path t obj = meta_dir t / string_of_int obj
let server_path t = t.dir / "server"
let disk_error t = t.disk_error

let unix_error fn e arg =
  match e with
  | Unix.ENOSPC | Unix.EUNKNOWNERR 122 (* EDQUOT *) -> `No_space
  | _ -> `Io (Printf.sprintf "%s %s: %s" fn arg (Unix.error_message e))

let catch f = try Ok (f ()) with Unix.Unix_error (e, fn, arg) -> Error (unix_error fn e arg)
let now t = t.clock ()

(* Durable writes. *)

let tmp_name t kind =
  t.tmp_seq <- t.tmp_seq + 1;
  tmp_dir t / Printf.sprintf "%s.%d.%d" kind (Unix.getpid ()) t.tmp_seq

let quiet_unlink path = try Unix.unlink path with Unix.Unix_error _ -> ()

(* Fail-stop. A durable write that fails is refused (nothing acknowledged
   is lost) and kept in [disk_error], for the server to stop on. A failed
   fsync is fatal: after it the state of the page cache is unknown (the
   kernel may have dropped the dirty pages and cleared the error), so it is
   never retried, and every later durable write is refused. *)
let note_error t e = if t.disk_error = None then t.disk_error <- Some (Fmt.str "%a" pp_error e)
let fsync_failed_error = `Io "an earlier fsync failed: what is on the disk is unknown"

let fatal_fsync t f =
  try f ()
  with Unix.Unix_error _ as x ->
    t.fsync_failed <- true;
    raise x

let durably t f =
  if t.fsync_failed then Error fsync_failed_error
  else
    let r = f () in
    (match r with Error e -> note_error t e | Ok _ -> ());
    r

(* [write_new t ~safe path b len] writes [b] to a fresh temporary file, then
   renames it to [path]; with [safe], the file and its directory reach the
   disk before it returns. *)
let write_new t ~safe ~kind path b len =
  durably t @@ fun () ->
  let tmp = tmp_name t kind in
  let r =
    catch (fun () ->
        (* 0600 whatever the umask: records and the server file hold secrets. *)
        let fd = Consort_local.Private.openfile tmp [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_EXCL ] in
        Fun.protect
          ~finally:(fun () -> Unix.close fd)
          (fun () ->
            let rec go off = if off < len then go (off + t.io.write tmp fd b off (len - off)) in
            go 0;
            if safe then fatal_fsync t (fun () -> t.io.fsync tmp fd));
        t.io.rename tmp path;
        if safe then fatal_fsync t (fun () -> t.io.fsync_dir (Filename.dirname path)))
  in
  (match r with Error _ -> quiet_unlink tmp | Ok () -> ());
  r

let make_durable t path =
  durably t @@ fun () ->
  catch (fun () ->
      let fd = Unix.openfile path [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
      Fun.protect
        ~finally:(fun () -> Unix.close fd)
        (fun () -> fatal_fsync t (fun () -> t.io.fsync path fd));
      fatal_fsync t (fun () -> t.io.fsync_dir (Filename.dirname path)))

(* Reading blobs, through a few cached descriptors. *)

let drop_fd t hash =
  match Hashtbl.find_opt t.fds hash with
  | None -> ()
  | Some fd ->
      Hashtbl.remove t.fds hash;
      (try Unix.close fd with Unix.Unix_error _ -> ());
      let q = Queue.copy t.fd_order in
      Queue.clear t.fd_order;
      Queue.iter (fun h -> if h <> hash then Queue.push h t.fd_order) q

let blob_fd t hash =
  match Hashtbl.find_opt t.fds hash with
  | Some fd -> fd
  | None ->
      if Hashtbl.length t.fds >= max_fds then drop_fd t (Queue.peek t.fd_order);
      let fd = Unix.openfile (blob_path t hash) [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
      Hashtbl.replace t.fds hash fd;
      Queue.push hash t.fd_order;
      fd

let pread t hash ~off buf pos len = Consort_util.Io.pread (blob_fd t hash) ~off buf pos len

(* Recovery. *)

let is_hex64 s = String.length s = 64 && unhex s <> None

let readdir_list d =
  let h = Unix.opendir d in
  Fun.protect
    ~finally:(fun () -> Unix.closedir h)
    (fun () ->
      let rec go acc =
        match Unix.readdir h with
        | "." | ".." -> go acc
        | n -> go (n :: acc)
        | exception End_of_file -> List.sort compare acc
      in
      go [])

let read_small path max =
  let fd = Unix.openfile path [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  Fun.protect
    ~finally:(fun () -> Unix.close fd)
    (fun () ->
      let b = Bytes.create (max + 1) in
      let rec go got =
        if got > max then None
        else
          let n = Unix.read fd b got (max + 1 - got) in
          if n = 0 then Some (Bytes.sub_string b 0 got) else go (got + n)
      in
      go 0)

let hash_file path =
  let ic = open_in_bin path in
  Fun.protect
    ~finally:(fun () -> close_in_noerr ic)
    (fun () ->
      let ctx = Sha256.init () in
      let buf = Bytes.create 1048576 in
      let rec go total =
        let n = input ic buf 0 (Bytes.length buf) in
        if n = 0 then total
        else (
          Sha256.update_substring ctx (Bytes.unsafe_to_string buf) 0 n;
          go (total + n))
      in
      let total = go 0 in
      (Sha256.to_bin (Sha256.finalize ctx), total))

let set_aside t sub name =
  let src = t.dir / sub / name in
  let rec dst i =
    let base = if sub = "." then name else sub ^ "-" ^ name in
    let d =
      corrupt_dir t / Printf.sprintf "%s%s" base (if i = 0 then "" else "." ^ string_of_int i)
    in
    if Sys.file_exists d then dst (i + 1) else d
  in
  try t.io.rename src (dst 0)
  with Unix.Unix_error (e, _, _) ->
    Log.err (fun m -> m "cannot set %s aside: %s" src (Unix.error_message e))

let recover t =
  let found = ref [] in
  let note f =
    Log.warn (fun m -> m "%a" pp_finding f);
    found := f :: !found
  in
  List.iter
    (fun n ->
      let p = tmp_dir t / n in
      (try t.io.unlink p with Unix.Unix_error _ -> ());
      note (Temp_removed ("tmp" / n)))
    (readdir_list (tmp_dir t));
  (* The server record. *)
  let fresh_server () =
    let s = t.random secret_len in
    let b = Bytes.of_string (encode_server s 1) in
    match write_new t ~safe:true ~kind:"server" (server_path t) b (Bytes.length b) with
    | Ok () -> Ok (s, 1)
    | Error e -> Error (`Io (Fmt.str "cannot write the server record: %a" pp_error e))
  in
  let server =
    if not (Sys.file_exists (server_path t)) then fresh_server ()
    else
      let why =
        match read_small (server_path t) 4096 with
        | None -> Error "too large"
        | Some s -> decode_server s
      in
      match why with
      | Ok s -> Ok s
      | Error why ->
          set_aside t "." "server";
          note (Server_record_replaced why);
          fresh_server ()
  in
  match server with
  | Error e -> Error e
  | Ok (s, reserved) ->
      t.server_secret <- s;
      t.reserved <- reserved;
      t.next_obj <- reserved;
      (* Records. *)
      let records = ref [] and damaged_records = ref false in
      List.iter
        (fun n ->
          let p = meta_dir t / n in
          match int_field n with
          | None | Some 0 ->
              set_aside t "meta" n;
              note (Unknown_file ("meta" / n))
          | Some o -> (
              let r =
                try
                  match read_small p 4096 with
                  | None -> Error "too large"
                  | Some s -> decode_record s
                with Unix.Unix_error (e, _, _) -> Error (Unix.error_message e)
              in
              match r with
              | Error why ->
                  damaged_records := true;
                  set_aside t "meta" n;
                  note (Corrupt_record ("meta" / n, why))
              | Ok (o', _, _, _) when o' <> o ->
                  damaged_records := true;
                  set_aside t "meta" n;
                  note (Corrupt_record ("meta" / n, "object number differs from its name"))
              | Ok (_, sec, h, sz) -> records := (o, sec, h, sz) :: !records))
        (readdir_list (meta_dir t));
      (* Blobs: each one referenced is checked against its name; the rest go. *)
      let wanted = Hashtbl.create 64 in
      List.iter (fun (_, _, h, _) -> Hashtbl.replace wanted (hex h) ()) !records;
      let good = Hashtbl.create 64 in
      List.iter
        (fun n ->
          let p = blobs_dir t / n in
          if not (is_hex64 n) then (
            set_aside t "blobs" n;
            note (Unknown_file ("blobs" / n)))
          else if not (Hashtbl.mem wanted n) then
            if !damaged_records then (
              (* It may belong to a record that failed its checks: keep it. *)
              set_aside t "blobs" n;
              note (Unknown_file ("blobs" / n)))
            else (
              (try t.io.unlink p with Unix.Unix_error _ -> ());
              note (Orphan_removed ("blobs" / n)))
          else
            match hash_file p with
            | exception Sys_error why ->
                set_aside t "blobs" n;
                note (Corrupt_blob ("blobs" / n, why))
            | h, size ->
                if hex h = n then Hashtbl.replace good n size
                else (
                  set_aside t "blobs" n;
                  note
                    (Corrupt_blob
                       ("blobs" / n, Printf.sprintf "content hash differs (%d bytes)" size))))
        (readdir_list (blobs_dir t));
      List.iter
        (fun (o, sec, h, sz) ->
          match Hashtbl.find_opt good (hex h) with
          | Some size when size = sz ->
              Hashtbl.replace t.files o
                { secret = sec; state = Committed { hash = h; size = sz; durable = true } };
              (match Hashtbl.find_opt t.blobs h with
              | Some b -> b.refs <- b.refs + 1
              | None -> Hashtbl.replace t.blobs h { bsize = sz; refs = 1; bdurable = true });
              if o >= t.next_obj then t.next_obj <- o + 1
          | Some size ->
              set_aside t "meta" (string_of_int o);
              note (Missing_blob (o, Printf.sprintf "blob has %d bytes, record says %d" size sz))
          | None ->
              set_aside t "meta" (string_of_int o);
              note (Missing_blob (o, "blob missing or corrupt")))
        (List.sort compare !records);
      (* What recovery moved or removed stays so. *)
      (if !found <> [] then
         try List.iter t.io.fsync_dir [ tmp_dir t; meta_dir t; blobs_dir t; corrupt_dir t; t.dir ]
         with Unix.Unix_error _ -> ());
      Ok (List.rev !found)

let urandom n =
  let ic = open_in_bin "/dev/urandom" in
  Fun.protect ~finally:(fun () -> close_in_noerr ic) (fun () -> really_input_string ic n)

exception Exposed of string

let open_ ?(config = default_config) ?(io = Consort_util.Io.real) ?(random = urandom) ~clock dir =
  let mkdir = Consort_local.Private.mkdir in
  (* The secrets (the server file, the records and the directory holding them) are open to their
     owner alone: the store does not start on one that another user could read. *)
  let exposed () =
    let meta = dir / "meta" in
    (* Records are named by their object number; anything else there is set aside by recovery. *)
    let records =
      List.filter_map
        (fun n -> if int_of_string_opt n <> None then Some (meta / n) else None)
        (Array.to_list (Sys.readdir meta))
    in
    match Consort_local.Private.check ((dir / "server") :: meta :: records) with
    | Some m -> raise (Exposed m)
    | None -> ()
  in
  match
    Consort_local.Private.mkdir_p dir;
    List.iter (fun s -> mkdir (dir / s)) [ "blobs"; "meta"; "tmp"; "corrupt" ];
    exposed ();
    Consort_local.Private.openfile (dir / "lock") [ Unix.O_RDWR; Unix.O_CREAT ]
  with
  | exception (Exposed m | Sys_error m) -> Error (`Io m)
  | exception Unix.Unix_error (e, fn, arg) ->
      Error (`Io (Printf.sprintf "%s %s: %s" fn arg (Unix.error_message e)))
  | lock -> (
      match Unix.lockf lock Unix.F_TLOCK 0 with
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EACCES), _, _) ->
          Unix.close lock;
          Error `Locked
      | exception Unix.Unix_error (e, fn, _) ->
          Unix.close lock;
          Error (`Io (Printf.sprintf "%s %s: %s" fn dir (Unix.error_message e)))
      | () -> (
          let t =
            {
              dir;
              config;
              io;
              random;
              clock;
              lock;
              files = Hashtbl.create 64;
              blobs = Hashtbl.create 64;
              server_secret = "";
              next_obj = 1;
              reserved = 1;
              unc_files = 0;
              unc_bytes = 0;
              tmp_seq = 0;
              fds = Hashtbl.create max_fds;
              fd_order = Queue.create ();
              closed = false;
              lives = Hashtbl.create 64;
              disk_error = None;
              fsync_failed = false;
            }
          in
          match recover t with
          | Ok found -> Ok (t, found)
          | Error (`Io m) ->
              Unix.close lock;
              Error (`Io m)
          | exception Unix.Unix_error (e, fn, arg) ->
              Unix.close lock;
              Error (`Io (Printf.sprintf "%s %s: %s" fn arg (Unix.error_message e)))))

let close t =
  if not t.closed then (
    t.closed <- true;
    Hashtbl.iter (fun _ fd -> try Unix.close fd with Unix.Unix_error _ -> ()) t.fds;
    Hashtbl.reset t.fds;
    Queue.clear t.fd_order;
    Hashtbl.filter_map_inplace
      (fun _ f -> match f.state with Uncommitted _ -> None | Committed _ -> Some f)
      t.files;
    t.unc_files <- 0;
    t.unc_bytes <- 0;
    try Unix.close t.lock with Unix.Unix_error _ -> ())

(* Uncommitted files. *)

let ( let* ) = Result.bind

let check_room t ~new_files ~delta ~new_len =
  if new_len > t.config.max_file_size then Error `Too_large
  else if t.unc_files + new_files > t.config.max_uncommitted_files then Error `Too_many_uncommitted
  else if t.unc_bytes + delta > t.config.max_uncommitted_bytes then Error `Too_large
  else Ok ()

let reserve u n =
  if Bytes.length u.buf < n then (
    let cap = max n (min (2 * Bytes.length u.buf) (max n Sys.max_string_length)) in
    let b = Bytes.create cap in
    Bytes.blit u.buf 0 b 0 u.len;
    u.buf <- b)

let set_len t u n =
  t.unc_bytes <- t.unc_bytes + n - u.len;
  u.len <- n

(* Object numbers are reserved in blocks, durably, so that a number is never
   handed out twice, even after a restart that lost the files that had it. *)
let reserve_block = 1024

let next_obj t =
  let obj = t.next_obj in
  let* () =
    if obj < t.reserved then Ok ()
    else
      let b = Bytes.of_string (encode_server t.server_secret (obj + reserve_block)) in
      let* () = write_new t ~safe:true ~kind:"server" (server_path t) b (Bytes.length b) in
      t.reserved <- obj + reserve_block;
      Ok ()
  in
  t.next_obj <- obj + 1;
  Ok obj

let new_uncommitted t buf len =
  let* obj = next_obj t in
  let u = { buf; len = 0; last_use = now t } in
  t.unc_files <- t.unc_files + 1;
  set_len t u len;
  Hashtbl.replace t.files obj { secret = t.random secret_len; state = Uncommitted u };
  Ok (obj, u)

let drop_uncommitted t obj u =
  Hashtbl.remove t.files obj;
  t.unc_files <- t.unc_files - 1;
  t.unc_bytes <- t.unc_bytes - u.len

let commit_upload t obj f u ~safe =
  let hash = sha256_sub u.buf u.len in
  let* () =
    match Hashtbl.find_opt t.blobs hash with
    | Some b ->
        if safe && not b.bdurable then (
          let* () = make_durable t (blob_path t hash) in
          b.bdurable <- true;
          Ok ())
        else Ok ()
    | None ->
        let* () = write_new t ~safe ~kind:"blob" (blob_path t hash) u.buf u.len in
        Hashtbl.replace t.blobs hash { bsize = u.len; refs = 0; bdurable = safe };
        Ok ()
  in
  let record = Bytes.of_string (encode_record ~obj ~secret:f.secret ~hash ~size:u.len) in
  let* () = write_new t ~safe ~kind:"meta" (meta_path t obj) record (Bytes.length record) in
  let b = Hashtbl.find t.blobs hash in
  b.refs <- b.refs + 1;
  t.unc_files <- t.unc_files - 1;
  t.unc_bytes <- t.unc_bytes - u.len;
  f.state <- Committed { hash; size = u.len; durable = safe };
  Ok ()

let create t ~commit ~safe data =
  let len = String.length data in
  let* () = check_room t ~new_files:1 ~delta:len ~new_len:len in
  let* obj, u = new_uncommitted t (Bytes.of_string data) len in
  if not commit then Ok obj
  else
    match commit_upload t obj (Hashtbl.find t.files obj) u ~safe with
    | Ok () -> Ok obj
    | Error e ->
        drop_uncommitted t obj u;
        Error e

let find t obj = match Hashtbl.find_opt t.files obj with Some f -> Ok f | None -> Error `Not_found

let read_into t obj ~off buf pos len =
  let* f = find t obj in
  match f.state with
  | Uncommitted _ -> Error `Not_committed
  | Committed { hash; size; _ } ->
      if off < 0 || off > size || len < 0 then Error `Bad_range
      else if pos < 0 || pos + len > Bytes.length buf then invalid_arg "Store.read_into"
      else
        let n = min len (size - off) in
        let* got = catch (fun () -> pread t hash ~off buf pos n) in
        if got < n then Error (`Io "blob shorter than its record") else Ok n

let read t obj ~off ~len =
  let* f = find t obj in
  match f.state with
  | Uncommitted _ -> Error `Not_committed
  | Committed { size; _ } ->
      if off < 0 || off > size || len < 0 then Error `Bad_range
      else
        let n = min len (size - off) in
        let b = Bytes.create n in
        let* _ = read_into t obj ~off b 0 n in
        Ok (Bytes.unsafe_to_string b)

let size t obj =
  let* f = find t obj in
  match f.state with Uncommitted _ -> Error `Not_committed | Committed { size; _ } -> Ok size

(* A change: [new_len old_len] checks the arguments and gives the new length,
   [apply u] makes the change on an upload already long enough. *)
let change t obj ~commit ~safe ~new_len ~apply =
  let* f = find t obj in
  match f.state with
  | Uncommitted u ->
      let* nl = new_len u.len in
      let* () = check_room t ~new_files:0 ~delta:(nl - u.len) ~new_len:nl in
      reserve u nl;
      apply u;
      set_len t u nl;
      u.last_use <- now t;
      if commit then Result.map (fun () -> obj) (commit_upload t obj f u ~safe) else Ok obj
  | Committed { hash; size; _ } -> (
      let* nl = new_len size in
      let* () = check_room t ~new_files:1 ~delta:nl ~new_len:nl in
      let buf = Bytes.create (max size nl) in
      let* got = catch (fun () -> pread t hash ~off:0 buf 0 size) in
      if got < size then Error (`Io "blob shorter than its record")
      else
        let* obj', u = new_uncommitted t buf 0 in
        u.len <- size;
        t.unc_bytes <- t.unc_bytes + size;
        apply u;
        set_len t u nl;
        if not commit then Ok obj'
        else
          match commit_upload t obj' (Hashtbl.find t.files obj') u ~safe with
          | Ok () -> Ok obj'
          | Error e ->
              drop_uncommitted t obj' u;
              Error e)

let modify t obj ~off data ~commit ~safe =
  let dl = String.length data in
  change t obj ~commit ~safe
    ~new_len:(fun len -> if off < 0 || off > len then Error `Bad_range else Ok (max len (off + dl)))
    ~apply:(fun u -> Bytes.blit_string data 0 u.buf off dl)

let insert t obj ~off data ~commit ~safe =
  let dl = String.length data in
  change t obj ~commit ~safe
    ~new_len:(fun len -> if off < 0 || off > len then Error `Bad_range else Ok (len + dl))
    ~apply:(fun u ->
      Bytes.blit u.buf off u.buf (off + dl) (u.len - off);
      Bytes.blit_string data 0 u.buf off dl)

let delete t obj ~off ~len:dl ~commit ~safe =
  change t obj ~commit ~safe
    ~new_len:(fun len ->
      if off < 0 || dl < 0 || off + dl > len then Error `Bad_range else Ok (len - dl))
    ~apply:(fun u -> Bytes.blit u.buf (off + dl) u.buf off (u.len - off - dl))

let commit t obj ~safe =
  let* f = find t obj in
  match f.state with
  | Uncommitted u -> commit_upload t obj f u ~safe
  | Committed c ->
      if safe && not c.durable then (
        let b = Hashtbl.find t.blobs c.hash in
        let* () = if b.bdurable then Ok () else make_durable t (blob_path t c.hash) in
        b.bdurable <- true;
        let* () = make_durable t (meta_path t obj) in
        c.durable <- true;
        Ok ())
      else Ok ()

let destroy t obj =
  let* f = find t obj in
  match f.state with
  | Uncommitted u ->
      drop_uncommitted t obj u;
      Ok ()
  | Committed { hash; _ } ->
      let* () =
        durably t @@ fun () ->
        catch (fun () ->
            t.io.unlink (meta_path t obj);
            fatal_fsync t (fun () -> t.io.fsync_dir (meta_dir t)))
      in
      Hashtbl.remove t.files obj;
      (match Hashtbl.find_opt t.blobs hash with
      | Some b ->
          b.refs <- b.refs - 1;
          if b.refs <= 0 then (
            drop_fd t hash;
            Hashtbl.remove t.blobs hash;
            try t.io.unlink (blob_path t hash)
            with Unix.Unix_error (e, _, _) ->
              Log.warn (fun m -> m "cannot remove blob %s: %s" (hex hash) (Unix.error_message e)))
      | None -> ());
      Ok ()

let touch t obj =
  let* f = find t obj in
  (match f.state with
  | Uncommitted u -> u.last_use <- now t
  | Committed _ -> Hashtbl.remove t.lives obj);
  Ok ()

let gc_age t =
  if t.config.lifetime <= 0 then []
  else begin
    let gone =
      Hashtbl.fold
        (fun obj f acc ->
          match f.state with
          | Committed _ ->
              let left =
                Option.value (Hashtbl.find_opt t.lives obj) ~default:t.config.lifetime - 1
              in
              if left <= 0 then obj :: acc
              else (
                Hashtbl.replace t.lives obj left;
                acc)
          | Uncommitted _ -> acc)
        t.files []
      |> List.sort compare
    in
    List.filter
      (fun obj ->
        Hashtbl.remove t.lives obj;
        match destroy t obj with
        | Ok () -> true
        | Error e ->
            Log.warn (fun m -> m "ageing: file %d not removed: %a" obj pp_error e);
            false)
      gone
  end

let life t obj =
  match Hashtbl.find_opt t.files obj with
  | Some { state = Committed _; _ } ->
      Some (Option.value (Hashtbl.find_opt t.lives obj) ~default:t.config.lifetime)
  | _ -> None

let age t =
  let n = now t in
  let old =
    Hashtbl.fold
      (fun obj f acc ->
        match f.state with
        | Uncommitted u when Consort.Time.diff n u.last_use > t.config.idle_timeout ->
            (obj, u) :: acc
        | _ -> acc)
      t.files []
  in
  List.iter (fun (obj, u) -> drop_uncommitted t obj u) old;
  List.sort compare (List.map fst old)

let mem t obj = Hashtbl.mem t.files obj

let committed t obj =
  match Hashtbl.find_opt t.files obj with
  | None -> None
  | Some { state = Uncommitted _; _ } -> Some false
  | Some { state = Committed _; _ } -> Some true

let secret t obj =
  if obj = 0 then Some t.server_secret
  else match Hashtbl.find_opt t.files obj with Some f -> Some f.secret | None -> None

let revoke ?secret t obj =
  let s =
    match secret with
    | Some s when String.length s = secret_len -> s
    | Some _ -> invalid_arg "Store.revoke: secret length"
    | None -> t.random secret_len
  in
  if obj = 0 then (
    let b = Bytes.of_string (encode_server s t.reserved) in
    let* () = write_new t ~safe:true ~kind:"server" (server_path t) b (Bytes.length b) in
    t.server_secret <- s;
    Ok s)
  else
    let* f = find t obj in
    match f.state with
    | Uncommitted _ ->
        f.secret <- s;
        Ok s
    | Committed c ->
        let b = Bytes.of_string (encode_record ~obj ~secret:s ~hash:c.hash ~size:c.size) in
        let* () = write_new t ~safe:true ~kind:"meta" (meta_path t obj) b (Bytes.length b) in
        f.secret <- s;
        c.durable <- true;
        Ok s

let files t =
  Hashtbl.fold
    (fun o f acc -> match f.state with Committed _ -> o :: acc | Uncommitted _ -> acc)
    t.files []
  |> List.sort compare

let digest t obj =
  match Hashtbl.find_opt t.files obj with
  | Some { state = Committed { hash; _ }; _ } -> Some hash
  | _ -> None

type stats = {
  committed_files : int;
  blobs : int;
  blob_bytes : int;
  uncommitted_files : int;
  uncommitted_bytes : int;
}

let stats t =
  {
    committed_files = Hashtbl.length t.files - t.unc_files;
    blobs = Hashtbl.fold (fun _ b n -> if b.refs > 0 then n + 1 else n) t.blobs 0;
    blob_bytes = Hashtbl.fold (fun _ b n -> if b.refs > 0 then n + b.bsize else n) t.blobs 0;
    uncommitted_files = t.unc_files;
    uncommitted_bytes = t.unc_bytes;
  }

let pp_stats ppf s =
  Fmt.pf ppf "%d committed files in %d blobs (%d bytes), %d uncommitted files (%d bytes)"
    s.committed_files s.blobs s.blob_bytes s.uncommitted_files s.uncommitted_bytes
