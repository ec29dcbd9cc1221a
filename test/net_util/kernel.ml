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

let namespace ~ns ~tap ~kernel_ip ?kernel_ip6 () =
  Shell.must (Printf.sprintf "ip netns add %s" ns);
  Shell.must (Printf.sprintf "ip link set %s netns %s" tap ns);
  let ipv6 dev on =
    ignore
      (Shell.quiet
         (Printf.sprintf "ip netns exec %s sysctl -qw net.ipv6.conf.%s.disable_ipv6=%d" ns dev
            (if on then 0 else 1)))
  in
  (match kernel_ip6 with
  | None -> ipv6 "all" false
  | Some _ ->
      ipv6 "all" true;
      ipv6 tap true);
  Shell.must (Printf.sprintf "ip -n %s addr add %s/24 dev %s" ns kernel_ip tap);
  Option.iter
    (fun k -> Shell.must (Printf.sprintf "ip -n %s -6 addr add %s/64 dev %s nodad" ns k tap))
    kernel_ip6;
  Shell.must (Printf.sprintf "ip -n %s link set %s up" ns tap);
  Shell.must (Printf.sprintf "ip -n %s link set lo up" ns)

let remove_namespace ~ns ~tap =
  ignore (Shell.quiet (Printf.sprintf "ip netns del %s" ns));
  ignore (Shell.quiet (Printf.sprintf "ip link del %s" tap))
