type config = { budget : int option; eio_rate : float; fsync_fail_rate : float }

let no_faults = { budget = None; eio_rate = 0.; fsync_fail_rate = 0. }

type t = {
  rng : Random.State.t;
  mutable config : config;
  mutable written : int;
  mutable faults : int;
  durable : (string, int) Hashtbl.t; (* a file written since its last fsync: its size then *)
}

let create rng config = { rng; config; written = 0; faults = 0; durable = Hashtbl.create 8 }
let set_config t c = t.config <- c
let written t = t.written
let faults t = t.faults
let size fd = (Unix.fstat fd).Unix.st_size

let fail t call path e =
  t.faults <- t.faults + 1;
  raise (Unix.Unix_error (e, call, path))

let chance t p = p > 0. && Random.State.float t.rng 1. < p

let write t path fd b off len =
  let len = min len Io.chunk in
  if chance t t.config.eio_rate then fail t "write" path Unix.EIO;
  let len =
    match t.config.budget with
    | Some b when t.written + len > b ->
        let room = b - t.written in
        if room <= 0 then fail t "write" path Unix.ENOSPC else room
    | _ -> len
  in
  if not (Hashtbl.mem t.durable path) then Hashtbl.replace t.durable path (size fd);
  let n = Io.real.write path fd b off len in
  t.written <- t.written + n;
  n

let fsync t path fd =
  if chance t t.config.fsync_fail_rate then begin
    (* Linux may drop the pages of a failed fsync: they stay unsynced
       here (lost at the next crash), whatever later fsyncs say. *)
    if not (Hashtbl.mem t.durable path) then Hashtbl.replace t.durable path (size fd);
    Hashtbl.replace t.durable ("!" ^ path) 0;
    fail t "fsync" path Unix.EIO
  end;
  Io.real.fsync path fd;
  if not (Hashtbl.mem t.durable ("!" ^ path)) then Hashtbl.remove t.durable path

let fsync_dir t path =
  if chance t t.config.fsync_fail_rate then fail t "fsync" path Unix.EIO;
  Io.real.fsync_dir path

let rename t a b =
  Io.real.rename a b;
  Hashtbl.remove t.durable b;
  Hashtbl.remove t.durable ("!" ^ b);
  (match Hashtbl.find_opt t.durable a with
  | Some n ->
      Hashtbl.remove t.durable a;
      Hashtbl.replace t.durable b n
  | None -> ());
  match Hashtbl.find_opt t.durable ("!" ^ a) with
  | Some _ ->
      Hashtbl.remove t.durable ("!" ^ a);
      Hashtbl.replace t.durable ("!" ^ b) 0
  | None -> ()

let unlink t path =
  Io.real.unlink path;
  Hashtbl.remove t.durable path;
  Hashtbl.remove t.durable ("!" ^ path)

let io t =
  {
    Io.write = write t;
    fsync = fsync t;
    fsync_dir = fsync_dir t;
    rename = rename t;
    unlink = unlink t;
  }

let crash t =
  let files =
    Hashtbl.fold
      (fun p n acc -> if String.length p > 0 && p.[0] = '!' then acc else (p, n) :: acc)
      t.durable []
    |> List.sort compare
  in
  Hashtbl.reset t.durable;
  List.fold_left
    (fun cut (p, n) ->
      match Unix.stat p with
      | exception Unix.Unix_error _ -> cut
      | st when st.Unix.st_size <= n -> cut
      | st ->
          (* A torn write: some of what followed made it, one time in three. *)
          let keep =
            if Random.State.int t.rng 3 = 0 then n + Random.State.int t.rng (st.Unix.st_size - n)
            else n
          in
          Unix.truncate p keep;
          cut + 1)
    0 files
