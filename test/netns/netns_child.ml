let find_ip () =
  List.find_opt Sys.file_exists [ "/usr/sbin/ip"; "/sbin/ip"; "/usr/bin/ip"; "/bin/ip" ]

let command argv =
  let pid = Unix.create_process argv.(0) argv Unix.stdin Unix.stdout Unix.stderr in
  match Unix.waitpid [] pid with _, Unix.WEXITED 0 -> true | _ -> false

let wait_child pid limit =
  let t0 = Unix.gettimeofday () in
  let rec go () =
    match Unix.waitpid [ Unix.WNOHANG ] pid with
    | 0, _ ->
        if Unix.gettimeofday () -. t0 > limit then begin
          (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
          ignore (Unix.waitpid [] pid);
          `Timeout
        end
        else (
          Unix.sleepf 0.01;
          go ())
    | _, status -> `Exited status
  in
  go ()

let run ~what ~ns ~limit =
  match find_ip () with
  | None -> Alcotest.failf "%s needs the `ip` command (iproute2)" what
  | Some _ when Unix.getuid () <> 0 ->
      Alcotest.failf "%s needs root, to create a network namespace" what
  | Some ip ->
      let ns = Printf.sprintf "%s-%d" ns (Unix.getpid ()) in
      if not (command [| ip; "netns"; "add"; ns |]) then Alcotest.failf "ip netns add %s failed" ns;
      Fun.protect
        ~finally:(fun () -> ignore (command [| ip; "netns"; "delete"; ns |]))
        (fun () ->
          if
            not
              (command
                 [| ip; "netns"; "exec"; ns; ip; "link"; "set"; "lo"; "up"; "multicast"; "on" |])
          then Alcotest.fail "could not bring up lo in the namespace";
          let argv = [| ip; "netns"; "exec"; ns; Sys.executable_name; "--multicast-child" |] in
          let pid = Unix.create_process ip argv Unix.stdin Unix.stdout Unix.stderr in
          match wait_child pid limit with
          | `Timeout -> Alcotest.fail "multicast child timed out"
          | `Exited (Unix.WEXITED 0) -> ()
          | `Exited (Unix.WEXITED n) -> Alcotest.failf "multicast child exited %d" n
          | `Exited _ -> Alcotest.fail "multicast child was killed")
