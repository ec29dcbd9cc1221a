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
