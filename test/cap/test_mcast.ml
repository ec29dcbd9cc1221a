(* Locating by IP multicast, with no configured addresses: a server and a
   client over kernel UDP inside a network namespace of their own. *)
open Consort_cap
module Udp = Consort_engine.Udp
module Loop = Consort_engine.Loop
module R = Rpc_udp

let group = "239.192.67.80:47470"

let child () =
  let fail fmt =
    Printf.ksprintf
      (fun s ->
        prerr_endline ("multicast child: " ^ s);
        exit 1)
      fmt
  in
  let get = function Ok x -> x | Error e -> fail "%s" e in
  Unix.putenv "CONSORT_LOCATE" "";
  let loop = Loop.create () in
  let g = Crypto.deterministic "mcast" in
  let key = Port.Key.generate ~g () in
  let server = get (R.open_node ~g ~multicast:(Some group) ~bind:"127.0.0.1:0" loop) in
  if not (Udp.query (R.connection server)).Udp.multicast then
    fail "the server did not join the group";
  R.listen (R.serve server key) (fun r -> R.putrep r (Header.reply `Ok) ("mcast:" ^ R.data r));
  let client = get (R.open_node ~g ~multicast:(Some group) ~bind:"127.0.0.1:0" loop) in
  let cap = Cap.owner (Port.Key.port key) ~obj:1 (Cap.Secret.generate ~g ()) in
  (match R.Sync.trans client (Header.request cap 1) "x" with
  | Ok (_, "mcast:x") -> ()
  | Ok (_, d) -> fail "wrong reply %S" d
  | Error e -> fail "%s" (Rpc_error.to_string e));
  (* A node without the group and without addresses finds nothing. *)
  let lonely = get (R.open_node ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  (match R.Sync.trans lonely (Header.request cap 1) "x" with
  | Error `Notfound -> ()
  | _ -> fail "found without multicast or addresses");
  print_endline "multicast child: ok";
  exit 0

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

let multicast () =
  match find_ip () with
  | None -> Alcotest.fail "the multicast test needs the `ip` command (iproute2)"
  | Some _ when Unix.getuid () <> 0 ->
      Alcotest.fail "the multicast test needs root, to create a network namespace"
  | Some ip ->
      let ns = Printf.sprintf "consort-cap-%d" (Unix.getpid ()) in
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
          match wait_child pid 30.0 with
          | `Timeout -> Alcotest.fail "multicast child timed out"
          | `Exited (Unix.WEXITED 0) -> ()
          | `Exited (Unix.WEXITED n) -> Alcotest.failf "multicast child exited %d" n
          | `Exited _ -> Alcotest.fail "multicast child was killed")

let tests = [ Alcotest.test_case "locate by IP multicast (network namespace)" `Quick multicast ]
