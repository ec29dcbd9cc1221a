let system_dir = "/run/consort"

let user_dir () =
  match Sys.getenv_opt "XDG_RUNTIME_DIR" with
  | Some d when d <> "" && (not (Filename.is_relative d)) && Sys.file_exists d ->
      Some (Filename.concat d "consort")
  | _ -> None

let member_dir () =
  match user_dir () with
  | Some d -> Some d
  | None -> if Unix.geteuid () = 0 then Some system_dir else None

let prepare dir =
  let me = Unix.geteuid () in
  let check () =
    match Unix.lstat dir with
    | exception Unix.Unix_error (e, _, _) ->
        Error (Printf.sprintf "%s: %s" dir (Unix.error_message e))
    | st when st.Unix.st_kind <> Unix.S_DIR -> Error (Printf.sprintf "%s is not a directory" dir)
    | st when st.Unix.st_uid <> me ->
        Error (Printf.sprintf "%s belongs to user %d, not to this one (%d)" dir st.Unix.st_uid me)
    | st when st.Unix.st_perm land 0o077 <> 0 ->
        Error (Printf.sprintf "%s is open to other users (mode %o)" dir st.Unix.st_perm)
    | _ -> Ok ()
  in
  match Unix.mkdir dir 0o700 with
  | () -> check ()
  | exception Unix.Unix_error (Unix.EEXIST, _, _) -> check ()
  | exception Unix.Unix_error (e, _, _) ->
      Error (Printf.sprintf "%s: %s" dir (Unix.error_message e))

let member_path dir ~group =
  let g =
    String.map
      (fun c ->
        match c with 'a' .. 'z' | 'A' .. 'Z' | '0' .. '9' | '-' | '_' | '.' -> c | _ -> '_')
      group
  in
  let g = if String.length g > 40 then String.sub g 0 40 else g in
  Filename.concat dir (Printf.sprintf "member-%s-%d.ctl" g (Unix.getpid ()))

(* The PID at the end of "member-GROUP-PID.ctl". *)
let pid_of name =
  if
    not
      (Filename.check_suffix name ".ctl"
      && String.length name > 7
      && String.sub name 0 7 = "member-")
  then None
  else
    let base = Filename.chop_suffix name ".ctl" in
    match String.rindex_opt base '-' with
    | Some i -> int_of_string_opt (String.sub base (i + 1) (String.length base - i - 1))
    | None -> None

let alive pid =
  match Unix.kill pid 0 with
  | () -> true
  | exception Unix.Unix_error (Unix.ESRCH, _, _) -> false
  | exception Unix.Unix_error _ -> true

let sweep dir =
  let me = Unix.geteuid () in
  match Sys.readdir dir with
  | exception Sys_error _ -> 0
  | names ->
      Array.fold_left
        (fun n name ->
          match pid_of name with
          | Some pid when pid > 0 && not (alive pid) -> (
              let p = Filename.concat dir name in
              match Unix.lstat p with
              | st when st.Unix.st_kind = Unix.S_SOCK && st.Unix.st_uid = me -> (
                  match Unix.unlink p with () -> n + 1 | exception Unix.Unix_error _ -> n)
              | _ -> n
              | exception Unix.Unix_error _ -> n)
          | _ -> n)
        0 names

type found = Socket of string | Skipped of string * string

let scan dirs =
  let me = Unix.geteuid () in
  List.concat_map
    (fun dir ->
      match Unix.lstat dir with
      | exception Unix.Unix_error _ -> []
      | st when st.Unix.st_kind <> Unix.S_DIR -> [ Skipped (dir, "not a directory") ]
      | st when me <> 0 && st.Unix.st_uid <> me && st.Unix.st_uid <> 0 ->
          [ Skipped (dir, Printf.sprintf "owned by user %d" st.Unix.st_uid) ]
      | _ -> (
          match Sys.readdir dir with
          | exception Sys_error e -> [ Skipped (dir, e) ]
          | names ->
              let names = List.sort compare (Array.to_list names) in
              List.filter_map
                (fun n ->
                  if not (Filename.check_suffix n ".ctl") then None
                  else
                    let p = Filename.concat dir n in
                    match Unix.lstat p with
                    | exception Unix.Unix_error _ -> None
                    | st when st.Unix.st_kind <> Unix.S_SOCK -> Some (Skipped (p, "not a socket"))
                    | st when me <> 0 && st.Unix.st_uid <> me ->
                        Some (Skipped (p, Printf.sprintf "owned by user %d" st.Unix.st_uid))
                    | _ -> Some (Socket p))
                names))
    dirs

let dirs () = (match user_dir () with Some d -> [ d ] | None -> []) @ [ system_dir ]
