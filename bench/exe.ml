let executable f =
  Sys.file_exists f
  && (not (Sys.is_directory f))
  &&
  try
    Unix.access f [ Unix.X_OK ];
    true
  with Unix.Unix_error _ -> false

let on_path name =
  match Sys.getenv_opt "PATH" with
  | None -> None
  | Some p ->
      List.find_map
        (fun d ->
          let f = Filename.concat (if d = "" then "." else d) name in
          if executable f then Some f else None)
        (String.split_on_char ':' p)

let consort () =
  match Sys.getenv_opt "CONSORT_EXE" with
  | Some e when e <> "" -> e
  | _ -> (
      let beside = Filename.concat (Filename.dirname Sys.executable_name) "consort" in
      if executable beside then beside
      else match on_path "consort" with Some f -> f | None -> "consort")
