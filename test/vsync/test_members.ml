(* Real member processes on loopback: a group of five forms; one is killed
   with SIGKILL and excluded, then restarted and rejoins; then the group is
   split 2/3 and healed, and merges. A partition between processes on one
   host is imposed with the transport's receive filter (each member drops
   the datagrams of the other side), not with network namespaces. The logs
   of every member incarnation are then checked with the virtual synchrony
   specification. *)

module P = Consort_member.Procs
module Vsync = Consort_spec.Vsync

let exe () =
  let dir = Filename.dirname Sys.executable_name in
  let candidates = [ Filename.concat dir "../../bin/main.exe"; "_build/default/bin/main.exe" ] in
  match List.find_opt Sys.file_exists candidates with
  | Some e -> e
  | None -> Alcotest.fail "consort binary not found"

(* Faster failure detection than the default 5 s keeps the test short. *)
let params = "suspect.timeout=1500ms,group.merge_timeout=1s"

let temp_dir () =
  let d =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-members-%d" (Unix.getpid ()))
  in
  if not (Sys.file_exists d) then Unix.mkdir d 0o755;
  d

let check_logs ms =
  match Vsync.check_files ~quiescent:false (P.all_logs ms) with
  | Ok summary -> summary
  | Error errs ->
      Alcotest.failf "the logs break the specification:\n%s"
        (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs))

let expect what ok = if not ok then Alcotest.failf "timed out waiting until %s" what

let casts ms k tag =
  List.iter
    (fun m ->
      for i = 1 to k do
        P.cast m (Printf.sprintf "%s-%d-%d" tag m.P.idx i)
      done)
    ms

let with_members n f =
  let dir = temp_dir () in
  let ms = P.create ~dir n in
  let peers = List.map (fun m -> m.P.addr) ms in
  let start m =
    P.start ~exe:(exe ()) ~params ~group:"test" ~peers ~output:(Filename.concat dir "out.txt") m
  in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () -> f ms start)

let kill_and_rejoin () =
  with_members 5 (fun ms start ->
      List.iter start ms;
      expect "the five form one group" (P.wait_until ~timeout:20. (fun () -> P.same_view ms));
      casts ms 20 "a";
      let victim = List.nth ms 4 and rest = List.filteri (fun i _ -> i < 4) ms in
      expect "every cast is delivered"
        (P.wait_until ~timeout:10. (fun () -> List.for_all (fun m -> P.deliveries m >= 100) ms));
      P.kill victim;
      expect "the four others install a view without the killed member"
        (P.wait_until ~timeout:15. (fun () -> P.same_view rest));
      let before = List.map P.deliveries rest in
      casts rest 10 "b";
      expect "the others keep delivering"
        (P.wait_until ~timeout:10. (fun () ->
             List.for_all2 (fun m b -> P.deliveries m >= b + 40) rest before));
      start victim;
      expect "the restarted member rejoins" (P.wait_until ~timeout:20. (fun () -> P.same_view ms));
      casts ms 5 "c";
      Unix.sleepf 1.;
      expect "everyone leaves cleanly" (P.leave_all ms ~timeout:15.);
      let s = check_logs ms in
      Alcotest.(check bool) "several views were checked" true (s.Vsync.views >= 3))

let partition_and_merge () =
  with_members 5 (fun ms start ->
      List.iter start ms;
      expect "the five form one group" (P.wait_until ~timeout:20. (fun () -> P.same_view ms));
      let a = List.filteri (fun i _ -> i < 2) ms and b = List.filteri (fun i _ -> i >= 2) ms in
      P.partition [ a; b ];
      expect "the sides install views of their own"
        (P.wait_until ~timeout:20. (fun () -> P.same_view a && P.same_view b));
      casts ms 10 "split";
      Unix.sleepf 1.;
      P.heal ms;
      expect "the sides merge into one view" (P.wait_until ~timeout:30. (fun () -> P.same_view ms));
      casts ms 10 "merged";
      Unix.sleepf 1.;
      expect "everyone leaves cleanly" (P.leave_all ms ~timeout:15.);
      ignore (check_logs ms))

(* Discovery by IP multicast: loopback here has no MULTICAST flag, so the
   members run in a network namespace made for the test, whose loopback is
   given it. They are told of no unicast peer at all. *)
let sh cmd = Sys.command (cmd ^ " >/dev/null 2>&1") = 0

let multicast_discovery () =
  if Unix.getuid () <> 0 then Alcotest.fail "needs root to create a network namespace";
  if not (sh "command -v ip") then Alcotest.fail "needs the ip command (iproute2)";
  let ns = Printf.sprintf "consort-mc-%d" (Unix.getpid ()) in
  if not (sh ("ip netns add " ^ ns)) then Alcotest.fail "ip netns add failed";
  Fun.protect
    ~finally:(fun () -> ignore (sh ("ip netns delete " ^ ns)))
    (fun () ->
      if not (sh (Printf.sprintf "ip netns exec %s ip link set lo up multicast on" ns)) then
        Alcotest.fail "cannot set up loopback multicast in the namespace";
      with_members 3 (fun ms _ ->
          let dir = temp_dir () in
          List.iter
            (fun m ->
              P.start ~exe:(exe ()) ~wrap:[ "ip"; "netns"; "exec"; ns ]
                ~extra:[ "--mcast"; "239.7.7.7:7600" ] ~params ~group:"mc" ~peers:[]
                ~output:(Filename.concat dir "out-mc.txt")
                m)
            ms;
          expect "the three find each other by multicast and form one group"
            (P.wait_until ~timeout:20. (fun () -> P.same_view ms));
          casts ms 5 "mc";
          Unix.sleepf 1.;
          expect "everyone leaves cleanly" (P.leave_all ms ~timeout:15.);
          ignore (check_logs ms)))

let () =
  Alcotest.run "members"
    [
      ( "processes",
        [
          Alcotest.test_case "kill one with SIGKILL, restart it" `Quick kill_and_rejoin;
          Alcotest.test_case "partition 2/3 and heal" `Quick partition_and_merge;
          Alcotest.test_case "discovery by IP multicast (namespace)" `Quick multicast_discovery;
        ] );
    ]
