let var name =
  "CONSORT_CAP_"
  ^ String.map
      (function 'a' .. 'z' as c -> Char.uppercase_ascii c | '.' | '-' -> '_' | c -> c)
      name

let self_name = "@self"

let names () =
  match Sys.getenv_opt "CONSORT_CAPS" with
  | None | Some "" -> []
  | Some s -> List.filter (fun n -> n <> "") (String.split_on_char ',' s)

(* From a process server: "NAME CAP" lines on the descriptor CONSORT_CAPS_FD
   (read to its end once, then closed). *)
let from_fd =
  lazy
    (match Option.bind (Sys.getenv_opt "CONSORT_CAPS_FD") int_of_string_opt with
    | None -> None
    | Some n when n < 3 || n > 9 -> None
    | Some n ->
        let fd : Unix.file_descr = Obj.magic n in
        let b = Buffer.create 1024 and chunk = Bytes.create 4096 in
        let rec go () =
          match Unix.read fd chunk 0 4096 with
          | 0 -> ()
          | k ->
              Buffer.add_subbytes b chunk 0 k;
              if Buffer.length b < 1_000_000 then go ()
          | exception Unix.Unix_error (Unix.EINTR, _, _) -> go ()
          | exception Unix.Unix_error _ -> ()
        in
        go ();
        (try Unix.close fd with Unix.Unix_error _ -> ());
        Some
          (List.filter_map
             (fun l ->
               match String.index_opt l ' ' with
               | Some i -> Some (String.sub l 0 i, String.sub l (i + 1) (String.length l - i - 1))
               | None -> None)
             (String.split_on_char '\n' (Buffer.contents b))))

let find name =
  match Lazy.force from_fd with
  | Some l -> if name = self_name then None else List.assoc_opt name l
  | None -> if List.mem name (names ()) then Sys.getenv_opt (var name) else None

let root () = find "root"

let self () =
  match Lazy.force from_fd with
  | Some l -> List.assoc_opt self_name l
  | None -> Sys.getenv_opt "CONSORT_PROCESS"

let locate () = match Sys.getenv_opt "CONSORT_LOCATE" with Some "" -> None | v -> v
