let read_file path =
  let ic = open_in_bin path in
  Fun.protect
    ~finally:(fun () -> close_in ic)
    (fun () -> really_input_string ic (in_channel_length ic))

let write_file path s =
  let oc = open_out_bin path in
  Fun.protect ~finally:(fun () -> close_out oc) (fun () -> output_string oc s)

let replace s a b =
  let la = String.length a in
  let buf = Buffer.create (String.length s) in
  let rec go i =
    if i > String.length s - la then Buffer.add_string buf (String.sub s i (String.length s - i))
    else if String.sub s i la = a then (
      Buffer.add_string buf b;
      go (i + la))
    else (
      Buffer.add_char buf s.[i];
      go (i + 1))
  in
  go 0;
  Buffer.contents buf

let contains s sub =
  let n = String.length s and k = String.length sub in
  let rec go i = i + k <= n && (String.sub s i k = sub || go (i + 1)) in
  go 0

let quiet cmd = Sys.command (cmd ^ " >/dev/null 2>&1")

let run cmd =
  let out = Filename.temp_file "consort-test" ".out" in
  let rc = Sys.command (Printf.sprintf "%s >%s 2>&1" cmd (Filename.quote out)) in
  let text = read_file out in
  Sys.remove out;
  (rc, text)

let output cmd =
  let rc, text = run cmd in
  if rc <> 0 then Alcotest.failf "command failed (%d): %s\n%s" rc cmd text;
  text

let must cmd = ignore (output cmd : string)

let consort_exe () =
  let dir = Filename.dirname Sys.executable_name in
  let dir = if Filename.is_relative dir then Filename.concat (Sys.getcwd ()) dir else dir in
  let exe = Filename.concat dir "../../bin/main.exe" in
  if not (Sys.file_exists exe) then Alcotest.failf "the consort binary is not built: %s" exe;
  exe
