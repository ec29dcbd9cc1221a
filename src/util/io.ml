type step =
  | Write of string
  | Fsync of string
  | Fsync_dir of string
  | Rename of string * string
  | Unlink of string

let pp_step ppf = function
  | Write p -> Fmt.pf ppf "write %s" p
  | Fsync p -> Fmt.pf ppf "fsync %s" p
  | Fsync_dir p -> Fmt.pf ppf "fsync-dir %s" p
  | Rename (a, b) -> Fmt.pf ppf "rename %s %s" a b
  | Unlink p -> Fmt.pf ppf "unlink %s" p

type t = {
  write : string -> Unix.file_descr -> bytes -> int -> int -> int;
  fsync : string -> Unix.file_descr -> unit;
  fsync_dir : string -> unit;
  rename : string -> string -> unit;
  unlink : string -> unit;
}

let chunk = 65536

let fsync_dir dir =
  let fd = Unix.openfile dir [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
  Fun.protect ~finally:(fun () -> Unix.close fd) (fun () -> Unix.fsync fd)

let real =
  {
    write = (fun _ fd buf off len -> Unix.write fd buf off (min len chunk));
    fsync = (fun _ fd -> Unix.fsync fd);
    fsync_dir;
    rename = Unix.rename;
    unlink = Unix.unlink;
  }

let hooked f io =
  {
    write =
      (fun p fd buf off len ->
        f (Write p);
        io.write p fd buf off (min len chunk));
    fsync =
      (fun p fd ->
        f (Fsync p);
        io.fsync p fd);
    fsync_dir =
      (fun p ->
        f (Fsync_dir p);
        io.fsync_dir p);
    rename =
      (fun a b ->
        f (Rename (a, b));
        io.rename a b);
    unlink =
      (fun p ->
        f (Unlink p);
        io.unlink p);
  }

let counting io =
  let n = ref 0 in
  (hooked (fun _ -> incr n) io, fun () -> !n)

external c_pread : Unix.file_descr -> bytes -> int -> int -> int -> int = "consort_util_pread"
external c_write : Unix.file_descr -> string -> int -> int -> int = "consort_util_write"

let pread fd ~off buf pos len =
  if pos < 0 || len < 0 || pos + len > Bytes.length buf || off < 0 then invalid_arg "Io.pread";
  c_pread fd buf pos len off

let write_string fd s =
  let rec go off =
    let left = String.length s - off in
    if left > 0 then
      match c_write fd s off left with
      | n -> go (off + n)
      | exception Unix.Unix_error (Unix.EAGAIN, _, _) ->
          (* A non-blocking output: wait until it takes more. *)
          ignore (Unix.select [] [ fd ] [] (-1.));
          go off
  in
  go 0
