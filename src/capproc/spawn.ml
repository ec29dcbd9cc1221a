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

let spawn_confined ?(cpu_seconds = 0) ?(address_space = 0) ?(die_with_parent = 0) ?caps_fd
    ?program_fd c prog argv env (i, o, e) =
  let prog = find prog in
  let deathsig = if die_with_parent = 0 then 0 else Proc_proto.signal_to_system die_with_parent in
  let err_r, err_w = Unix.pipe ~cloexec:true () in
  let st_r, st_w = Unix.pipe ~cloexec:true () in
  let close_quiet fd = try Unix.close fd with Unix.Unix_error _ -> () in
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
  | pid, how ->
      close_quiet err_w;
      close_quiet st_w;
      (* The child's start: end of file once the program is exec'd, or
         "STAGE ERRNO" if it failed. *)
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
