let consort () =
  Filename.concat
    (Filename.dirname Sys.executable_name)
    (Filename.concat ".." (Filename.concat ".." "bin/main.exe"))

let base_env = [ "CONSORT_MULTICAST=off" ]

let spawn ?(env = []) ?stdin_fd ~out ~err args =
  let fd p = Unix.openfile p [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o644 in
  let o = fd out and e = fd err in
  let i =
    match stdin_fd with
    | Some f -> f
    | None -> Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0
  in
  let env = Array.concat [ Array.of_list (base_env @ env); Unix.environment () ] in
  let pid = Unix.create_process_env (consort ()) (Array.of_list ("consort" :: args)) env i o e in
  Unix.close o;
  Unix.close e;
  if stdin_fd = None then Unix.close i;
  pid

let code_of = function Unix.WEXITED c -> c | Unix.WSIGNALED s -> 1000 + s | _ -> -1

let wait_code pid =
  let rec go n =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ when n > 0 ->
        Unix.sleepf 0.05;
        go (n - 1)
    | 0, _ ->
        (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
        ignore (Unix.waitpid [] pid);
        Alcotest.failf "consort (pid %d) still running after 60 s" pid
    | _, st -> code_of st
  in
  go 1200

let eventually ?(n = 600) what f =
  let rec go k =
    if f () then ()
    else if k = 0 then Alcotest.failf "%s: not within %d s" what (n / 20)
    else (
      Unix.sleepf 0.05;
      go (k - 1))
  in
  go n

let fs_init data =
  let out = data ^ ".init.out" and err = data ^ ".init.err" in
  match wait_code (spawn ~out ~err [ "cap"; "fs"; "init"; "--data"; data ]) with
  | 0 -> ()
  | c ->
      let ic = open_in_bin err in
      let e = really_input_string ic (in_channel_length ic) in
      close_in ic;
      failwith (Printf.sprintf "consort cap fs init --data %s: exit %d: %s" data c e)
