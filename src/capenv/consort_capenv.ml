let var name =
  "CONSORT_CAP_"
  ^ String.map
      (function 'a' .. 'z' as c -> Char.uppercase_ascii c | '.' | '-' -> '_' | c -> c)
      name

let names () =
  match Sys.getenv_opt "CONSORT_CAPS" with
  | None | Some "" -> []
  | Some s -> List.filter (fun n -> n <> "") (String.split_on_char ',' s)

let find name = if List.mem name (names ()) then Sys.getenv_opt (var name) else None
let root () = find "root"
let self () = Sys.getenv_opt "CONSORT_PROCESS"
let locate () = match Sys.getenv_opt "CONSORT_LOCATE" with Some "" -> None | v -> v
