external c_spawn :
  string -> string array -> string array -> Unix.file_descr array -> int array -> int
  = "consort_proc_spawn"

let find prog =
  if String.contains prog '/' then prog
  else
    let dirs =
      match Sys.getenv_opt "PATH" with
      | Some p -> String.split_on_char ':' p
      | None -> [ "/usr/bin"; "/bin" ]
    in
    match
      List.find_opt
        (fun d ->
          let f = Filename.concat (if d = "" then "." else d) prog in
          try
            Unix.access f [ Unix.X_OK ];
            not (Sys.is_directory f)
          with Unix.Unix_error _ | Sys_error _ -> false)
        dirs
    with
    | Some d -> Filename.concat (if d = "" then "." else d) prog
    | None -> raise (Unix.Unix_error (Unix.ENOENT, "spawn", prog))

let spawn ?(cpu_seconds = 0) ?(address_space = 0) ?(die_with_parent = 0) prog argv env (i, o, e) =
  let prog = find prog in
  if not (Sys.file_exists prog) then raise (Unix.Unix_error (Unix.ENOENT, "spawn", prog));
  let deathsig = if die_with_parent = 0 then 0 else Proc_proto.signal_to_system die_with_parent in
  c_spawn prog argv env [| i; o; e |] [| cpu_seconds; address_space; deathsig |]

external c_spawn_confined :
  string ->
  string array ->
  string array ->
  Unix.file_descr array ->
  int array ->
  string array ->
  int * int = "consort_proc_spawn_confined" "consort_proc_spawn_confined_native"

type confinement = {
  uid : int;
  gid : int;
  cwd : string;
  cgroups : string list;
  nproc : int;
  nofile : int;
  pid_namespace : bool;
}

type started = { pid : int; namespace : bool; status : Unix.file_descr option }

let no_fd : Unix.file_descr = Obj.magic (-1 : int)
let close_quiet fd = try Unix.close fd with Unix.Unix_error _ -> ()

(* The child's start: end of file on [err_r] once the program is exec'd, or "STAGE ERRNO" if it
   failed. *)
let await_start pid how err_r err_w st_r st_w =
  close_quiet err_w;
  close_quiet st_w;
  let buf = Bytes.create 64 in
  let rec read_all acc =
    match Unix.read err_r buf 0 64 with
    | 0 -> acc
    | n -> read_all (acc ^ Bytes.sub_string buf 0 n)
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> read_all acc
  in
  let msg = read_all "" in
  close_quiet err_r;
  if msg <> "" then begin
    close_quiet st_r;
    (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
    let why = String.trim msg in
    failwith why
  end
  else if how = 1 then { pid; namespace = true; status = Some st_r }
  else begin
    close_quiet st_r;
    { pid; namespace = false; status = None }
  end

let spawn_confined ?(cpu_seconds = 0) ?(address_space = 0) ?(die_with_parent = 0) ?caps_fd
    ?program_fd c prog argv env (i, o, e) =
  let prog = find prog in
  let deathsig = if die_with_parent = 0 then 0 else Proc_proto.signal_to_system die_with_parent in
  let err_r, err_w = Unix.pipe ~cloexec:true () in
  let st_r, st_w = Unix.pipe ~cloexec:true () in
  match
    c_spawn_confined prog argv env
      [|
        i;
        o;
        e;
        Option.value caps_fd ~default:no_fd;
        Option.value program_fd ~default:no_fd;
        st_w;
        err_w;
      |]
      [|
        cpu_seconds;
        address_space;
        deathsig;
        c.uid;
        c.gid;
        c.nproc;
        c.nofile;
        (if c.pid_namespace then 1 else 0);
      |]
      (Array.of_list (c.cwd :: c.cgroups))
  with
  | exception ex ->
      List.iter close_quiet [ err_r; err_w; st_r; st_w ];
      raise ex
  | pid, how -> await_start pid how err_r err_w st_r st_w

(* Spares (see proc_stubs.c): a confined child made before its program is known. *)

external c_spare_make : int array -> string array -> int * int * Unix.file_descr
  = "consort_proc_spare_make"

external c_spare_start :
  Unix.file_descr ->
  string ->
  string array ->
  string array ->
  Unix.file_descr array ->
  int array ->
  string ->
  unit = "consort_proc_spare_start" "consort_proc_spare_start_native"

type spare = {
  spid : int;
  snamespace : bool;
  sock : Unix.file_descr;
  mutable spent : bool; (* handed a program, or discarded *)
  mutable reaped : bool;
}

external c_zygote_make : unit -> int * Unix.file_descr = "consort_proc_zygote_make"

external c_zygote_ask : Unix.file_descr -> int array -> string array -> unit
  = "consort_proc_zygote_ask"

external c_zygote_answer : Unix.file_descr -> int * int * Unix.file_descr
  = "consort_proc_zygote_answer"

type zygote = { zpid : int; zsock : Unix.file_descr; mutable zgone : bool }

let zygote () =
  let zpid, zsock = c_zygote_make () in
  { zpid; zsock; zgone = false }

let zygote_pid z = z.zpid
let zygote_fd z = z.zsock
let zygote_gone z = z.zgone

let stop_zygote z =
  if not z.zgone then begin
    z.zgone <- true;
    close_quiet z.zsock;
    (try Unix.kill z.zpid Sys.sigkill with Unix.Unix_error _ -> ());
    try ignore (Unix.waitpid [] z.zpid) with Unix.Unix_error _ -> ()
  end

let spare_of (spid, how, sock) = { spid; snamespace = how = 1; sock; spent = false; reaped = false }

let request ?zygote ?(die_with_parent = 0) ~cgroups ~pid_namespace () =
  let deathsig = if die_with_parent = 0 then 0 else Proc_proto.signal_to_system die_with_parent in
  let opts = [| deathsig; (if pid_namespace then 1 else 0) |] and cgroups = Array.of_list cgroups in
  (* A zygote that is gone is stopped, and from then on the spares are made here. *)
  let here () = spare_of (c_spare_make opts cgroups) in
  match zygote with
  | Some z when not z.zgone -> (
      match c_zygote_ask z.zsock opts cgroups with
      | exception Failure _ ->
          stop_zygote z;
          let s = here () in
          fun () -> s
      | () -> (
          fun () ->
            match c_zygote_answer z.zsock with
            | a -> spare_of a
            | exception Failure _ ->
                stop_zygote z;
                here ()))
  | _ ->
      let s = here () in
      fun () -> s

let prepare ?zygote ?die_with_parent ~cgroups ~pid_namespace () =
  request ?zygote ?die_with_parent ~cgroups ~pid_namespace () ()

let spare_pid s = s.spid
let spare_namespace s = s.snamespace

let spare_alive s =
  (not s.spent) && (not s.reaped)
  &&
  match Unix.waitpid [ Unix.WNOHANG ] s.spid with
  | 0, _ -> true
  | _ ->
      s.reaped <- true;
      false
  | exception Unix.Unix_error (Unix.EINTR, _, _) -> true
  | exception Unix.Unix_error _ ->
      s.reaped <- true;
      false

let discard s =
  if not s.spent then begin
    s.spent <- true;
    close_quiet s.sock
  end;
  if not s.reaped then begin
    s.reaped <- true;
    (try Unix.kill s.spid Sys.sigkill with Unix.Unix_error _ -> ());
    try ignore (Unix.waitpid [] s.spid) with Unix.Unix_error _ -> ()
  end

let start_spare ?(cpu_seconds = 0) ?(address_space = 0) ?(die_with_parent = 0) ?caps_fd ?program_fd
    s c prog argv env (i, o, e) =
  if s.spent then invalid_arg "Spawn.start_spare: a spare serves one program";
  let prog = find prog in
  let deathsig = if die_with_parent = 0 then 0 else Proc_proto.signal_to_system die_with_parent in
  let err_r, err_w = Unix.pipe ~cloexec:true () in
  let st_r, st_w = Unix.pipe ~cloexec:true () in
  match
    c_spare_start s.sock prog argv env
      [|
        i;
        o;
        e;
        Option.value caps_fd ~default:no_fd;
        Option.value program_fd ~default:no_fd;
        st_w;
        err_w;
      |]
      [|
        cpu_seconds;
        address_space;
        deathsig;
        c.uid;
        c.gid;
        c.nproc;
        c.nofile;
        (if s.snamespace then 1 else 0);
      |]
      c.cwd
  with
  | exception ex ->
      List.iter close_quiet [ err_r; err_w; st_r; st_w ];
      discard s;
      raise ex
  | () ->
      (* From here the child is the caller's, as one [spawn_confined] started. *)
      s.spent <- true;
      close_quiet s.sock;
      s.reaped <- true;
      await_start s.spid (if s.snamespace then 1 else 0) err_r err_w st_r st_w
