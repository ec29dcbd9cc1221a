let rec rm_rf p =
  match (Unix.lstat p).Unix.st_kind with
  | Unix.S_DIR ->
      Array.iter (fun n -> rm_rf (Filename.concat p n)) (Sys.readdir p);
      Unix.rmdir p
  | _ -> Unix.unlink p
  | exception Unix.Unix_error (Unix.ENOENT, _, _) -> ()

let temp_dir prefix =
  let d = Filename.temp_file prefix "" in
  Sys.remove d;
  Unix.mkdir d 0o700;
  d

let with_scratch name ~seed f =
  let base =
    if Sys.file_exists "/dev/shm" && Sys.is_directory "/dev/shm" then "/dev/shm"
    else Filename.get_temp_dir_name ()
  in
  let d = Filename.concat base (Printf.sprintf "consort-%s-sim.%d.%d" name (Unix.getpid ()) seed) in
  rm_rf d;
  Unix.mkdir d 0o755;
  Fun.protect ~finally:(fun () -> rm_rf d) (fun () -> f d)

let read_file p =
  let ic = open_in_bin p in
  Fun.protect
    ~finally:(fun () -> close_in ic)
    (fun () -> really_input_string ic (in_channel_length ic))

let write_file p s =
  let oc = open_out_bin p in
  Fun.protect ~finally:(fun () -> close_out oc) (fun () -> output_string oc s)

let contains s sub =
  let n = String.length sub in
  let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
  go 0

let free_port () =
  let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
  Fun.protect
    ~finally:(fun () -> Unix.close s)
    (fun () ->
      Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
      match Unix.getsockname s with Unix.ADDR_INET (_, p) -> p | Unix.ADDR_UNIX _ -> 0)

module Private = struct
  let dir_mode = 0o700
  let file_mode = 0o600

  let mkdir path =
    match Unix.mkdir path dir_mode with
    | () -> Unix.chmod path dir_mode
    | exception Unix.Unix_error (Unix.EEXIST, _, _) -> ()

  let rec mkdir_p path =
    if not (Sys.file_exists path) then begin
      let parent = Filename.dirname path in
      if parent <> path then mkdir_p parent;
      mkdir path
    end

  let openfile path flags =
    let fd = Unix.openfile path (Unix.O_CLOEXEC :: flags) file_mode in
    (match Unix.fchmod fd file_mode with
    | () -> ()
    | exception e ->
        Unix.close fd;
        raise e);
    fd

  let write_file path s =
    let fd = openfile path [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC ] in
    Fun.protect
      ~finally:(fun () -> Unix.close fd)
      (fun () ->
        let b = Bytes.unsafe_of_string s in
        let rec go off =
          if off < Bytes.length b then go (off + Unix.write fd b off (Bytes.length b - off))
        in
        go 0)

  let exposed path =
    match Unix.stat path with
    | exception Unix.Unix_error (Unix.ENOENT, _, _) -> None
    | exception Unix.Unix_error (e, _, _) ->
        Some (Printf.sprintf "%s: %s" path (Unix.error_message e))
    | st ->
        let perm = st.Unix.st_perm land 0o777 in
        if perm land 0o077 = 0 then None
        else
          let dir = st.Unix.st_kind = Unix.S_DIR in
          Some
            (Printf.sprintf
               "%s holds secrets but is open to other users (mode %04o): chmod %s %s, or remove it"
               path perm
               (if dir then "700" else "600")
               (Filename.quote path))

  let check paths = List.find_map exposed paths
end
