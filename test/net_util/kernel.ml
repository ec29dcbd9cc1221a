module Loop = Consort_engine.Loop
module Time = Consort.Time

let spawn ~ns loop ~default_timeout script =
  let out = Filename.temp_file "consort-kernel" ".out" in
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let argv = [| "ip"; "netns"; "exec"; ns; "python3"; "-c"; script |] in
  let pid = Unix.create_process "ip" argv Unix.stdin fd fd in
  Unix.close fd;
  fun ?(timeout = default_timeout) ~until () ->
    let status = ref None in
    let rec poll () =
      match Unix.waitpid [ WNOHANG ] pid with
      | 0, _ -> ignore (Loop.after loop (Time.of_ms 5) poll : Loop.timer)
      | _, st -> status := Some st
    in
    poll ();
    Loop.run ~until:(fun () -> !status <> None && until ()) ~timeout:(Time.of_sec timeout) loop;
    let text = Shell.read_file out in
    Sys.remove out;
    match !status with
    | Some (WEXITED 0) -> text
    | Some _ -> Alcotest.failf "the kernel side failed:\n%s" text
    | None ->
        Unix.kill pid Sys.sigkill;
        ignore (Unix.waitpid [] pid);
        Alcotest.failf "the kernel side timed out:\n%s" text

let field text key =
  let lines = String.split_on_char '\n' text in
  match
    List.find_opt
      (fun l -> String.length l > String.length key && String.sub l 0 (String.length key) = key)
      lines
  with
  | Some l -> String.trim (String.sub l (String.length key) (String.length l - String.length key))
  | None -> Alcotest.failf "no %s in the kernel's output:\n%s" key text
