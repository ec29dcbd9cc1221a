open Cmdliner

let free_addresses n =
  let socks =
    List.init n (fun _ ->
        let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
        Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
        s)
  in
  let addrs =
    List.map
      (fun s ->
        match Unix.getsockname s with
        | Unix.ADDR_INET (_, p) -> Printf.sprintf "127.0.0.1:%d" p
        | Unix.ADDR_UNIX _ -> assert false)
      socks
  in
  List.iter Unix.close socks;
  addrs

let read_all ic =
  let b = Buffer.create 256 in
  (try
     while true do
       Buffer.add_channel b ic 1
     done
   with End_of_file -> ());
  Buffer.contents b

(* Starts the peers, relays their output, waits at most [limit] seconds and
   then kills those still running: only these, by PID. *)
let run_peers ~members ~counts ~loss ~seed ~limit =
  let exe = Sys.executable_name in
  let spawn rank =
    let r, w = Unix.pipe ~cloexec:true () in
    let args =
      [|
        exe;
        "mcast-peer";
        "--rank";
        string_of_int rank;
        "--members";
        String.concat "," members;
        "--counts";
        counts;
        "--loss";
        string_of_float loss;
        "--seed";
        string_of_int seed;
        "--deadline";
        string_of_float (limit -. 2.);
      |]
    in
    let pid = Unix.create_process exe args Unix.stdin w w in
    Unix.close w;
    (pid, r)
  in
  let peers = List.init (List.length members) spawn in
  let t0 = Unix.gettimeofday () in
  let results =
    List.map
      (fun (pid, r) ->
        let ic = Unix.in_channel_of_descr r in
        let rec wait () =
          match Unix.waitpid [ Unix.WNOHANG ] pid with
          | 0, _ when Unix.gettimeofday () -. t0 > limit ->
              (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
              ignore (Unix.waitpid [] pid);
              false
          | 0, _ ->
              Unix.sleepf 0.05;
              wait ()
          | _, Unix.WEXITED 0 -> true
          | _ -> false
        in
        let ok = wait () in
        let out = read_all ic in
        close_in ic;
        print_string out;
        ok)
      peers
  in
  List.for_all Fun.id results

module P = Consort_member.Procs

let group_demo () =
  let t0 = Unix.gettimeofday () in
  let stamp () = Unix.gettimeofday () -. t0 in
  let say fmt = Fmt.pr ("  %5.1fs  " ^^ fmt ^^ "@.") (stamp ()) in
  let dir =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-demo-%d" (Unix.getpid ()))
  in
  if not (Sys.file_exists dir) then Unix.mkdir dir 0o755;
  let ms = P.create ~dir 4 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let start m = P.start ~exe:Sys.executable_name ~group:"demo" ~peers m in
  let short v =
    match String.index_opt v ':' with
    | Some i -> String.sub v 0 (min (String.length v) (i + 16))
    | None -> v
  in
  let show_view what m =
    match P.current_view m with
    | Some (v, members) -> say "%s: view %s with %d members" what (short v) (List.length members)
    | None -> ()
  in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      Fmt.pr "A group of 4 member processes on 127.0.0.1 (stack %s):@."
        (match Consort_group.Properties.(layers vsync) with
        | Ok l -> Consort.Stack.describe l
        | Error e -> Fmt.str "%a" Consort_group.Properties.pp_error e);
      List.iter start ms;
      say "started 4 members at %s" (String.concat ", " peers);
      let formed = P.wait_until ~timeout:10. (fun () -> P.same_view ms) in
      if formed then show_view "formed" (List.hd ms) else say "the group did not form in 10 s";
      List.iter
        (fun m ->
          for i = 1 to 25 do
            P.cast m (Printf.sprintf "message %d from member %d" i m.P.idx)
          done)
        ms;
      ignore (P.wait_until ~timeout:5. (fun () -> List.for_all (fun m -> P.deliveries m >= 100) ms));
      say "100 casts sent, %d delivered in all (each member delivers every cast, its own included)"
        (List.fold_left (fun n m -> n + P.deliveries m) 0 ms);
      let victim = List.nth ms 3 and rest = List.filteri (fun i _ -> i < 3) ms in
      P.kill victim;
      let killed_at = stamp () in
      say "member 3 killed with SIGKILL";
      let excluded = P.wait_until ~timeout:12. (fun () -> P.same_view rest) in
      let detection = stamp () -. killed_at in
      if excluded then begin
        show_view "excluded" (List.hd rest);
        say "failure detected and view changed %.1f s after the kill (suspect.timeout is 5 s)"
          detection
      end
      else say "the others did not exclude member 3 within 12 s";
      List.iter
        (fun m ->
          for i = 1 to 10 do
            P.cast m (Printf.sprintf "after the failure %d from %d" i m.P.idx)
          done)
        rest;
      start victim;
      say "member 3 restarted (a new incarnation)";
      let rejoined = P.wait_until ~timeout:10. (fun () -> P.same_view ms) in
      if rejoined then show_view "rejoined" victim else say "member 3 did not rejoin within 10 s";
      List.iter (fun m -> P.cast m (Printf.sprintf "welcome back, from %d" m.P.idx)) ms;
      Unix.sleepf 0.5;
      let left = P.leave_all ms ~timeout:8. in
      say "all members %s" (if left then "left cleanly" else "stopped");
      let views =
        List.length
          (List.sort_uniq compare
             (List.concat_map
                (fun f ->
                  List.filter_map
                    (function Consort_spec.Log.View { view; _ } -> Some view | _ -> None)
                    (P.events f))
                (P.all_logs ms)))
      in
      let delivered =
        List.length
          (List.concat_map
             (fun f ->
               List.filter (function Consort_spec.Log.Deliver _ -> true | _ -> false) (P.events f))
             (P.all_logs ms))
      in
      let checked =
        match Consort_spec.Vsync.check_files (P.all_logs ms) with
        | Ok _ -> "hold"
        | Error errs ->
            "FAIL: "
            ^ String.concat "; " (List.map (Fmt.str "%a" Consort_spec.Vsync.pp_file_problem) errs)
      in
      Fmt.pr
        "Summary: %d views, %d messages delivered, failure detection %.1f s; virtual synchrony \
         checks %s.@."
        views delivered detection checked;
      formed && excluded && rejoined && checked = "hold")

let demo seeds limit =
  Fmt.pr "Consort %s@.@." "0.1.0";
  let ok_group = group_demo () in
  Fmt.pr
    "@.Reliable FIFO multicast: 3 processes cast 10,000 messages over UDP, each dropping 20%% of \
     what it receives:@.";
  let members = free_addresses 3 in
  let t1 = Unix.gettimeofday () in
  let ok = run_peers ~members ~counts:"3334,3333,3333" ~loss:0.2 ~seed:1 ~limit in
  Fmt.pr "  %s in %.1fs.@."
    (if ok then "all three delivered everything, in order, once" else "FAILED")
    (Unix.gettimeofday () -. t1);
  Fmt.pr
    "@.The simulator: %d seeded schedules of a group with crashes, checked by the specifications:@."
    seeds;
  let t2 = Unix.gettimeofday () in
  let passed = ref 0 and failed = ref 0 in
  for seed = 1 to seeds do
    match Consort_sim.Scenario.run [ Consort_sim_group.Scenarios.registry ] "vsync-crash" ~seed with
    | Ok o when o.violations = [] -> incr passed
    | _ -> incr failed
  done;
  Fmt.pr "  %d passed, %d failed in %.1fs.@." !passed !failed (Unix.gettimeofday () -. t2);
  if ok_group && ok && !failed = 0 then 0 else 1

let demo =
  let seeds =
    Arg.(
      value & opt Consort_cli.natural 20
      & info [ "seeds" ] ~docv:"N" ~doc:"Simulated schedules to run.")
  in
  let limit =
    Arg.(
      value
      & opt Consort_cli.positive_float 20.
      & info [ "limit" ] ~docv:"S" ~doc:"Seconds before the multicast processes are stopped.")
  in
  Cmd.v
    (Consort_cli.info ~path:"demo" "demo"
       ~doc:
         "A group of processes forms, loses a member and takes it back; then reliable multicast \
          and the simulator.")
    Term.(const demo $ seeds $ limit)

let peer rank members counts loss seed deadline =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some Logs.Warning);
  let members = Array.of_list (String.split_on_char ',' members) in
  let counts =
    match List.map int_of_string_opt (String.split_on_char ',' counts) with
    | [ Some c ] -> Some (Array.make (Array.length members) c)
    | l when List.for_all Option.is_some l && List.length l = Array.length members ->
        Some (Array.of_list (List.map Option.get l))
    | _ -> None
  in
  match counts with
  | None ->
      Fmt.epr "consort mcast-peer: --counts needs one number, or one per member@.";
      2
  | Some counts -> (
      match Consort_member.Mcast_peer.run ~rank ~members ~counts ~loss ~seed ~deadline with
      | Ok true -> 0
      | Ok false -> 1
      | Error e ->
          (* A bad argument, address or port: nothing was done. *)
          Fmt.epr "consort mcast-peer: %a@." Consort_member.Mcast_peer.pp_error e;
          Consort_cli.refused)

let peer =
  let rank =
    Arg.(
      required
      & opt (some Consort_cli.natural) None
      & info [ "rank" ] ~docv:"R" ~doc:"This member's rank.")
  in
  let members =
    Arg.(
      required
      & opt (some string) None
      & info [ "members" ] ~docv:"ADDR,..." ~doc:"Every member's IP:PORT, in rank order.")
  in
  let counts =
    Arg.(
      value & opt string "1000"
      & info [ "counts" ] ~docv:"N[,N...]" ~doc:"Casts per member: one number, or one per member.")
  in
  let loss =
    Arg.(
      value & opt Consort_cli.fraction 0.
      & info [ "loss" ] ~docv:"P" ~doc:"Fraction of received datagrams to drop.")
  in
  let seed =
    Arg.(
      value & opt int 1 & info [ "seed" ] ~docv:"S" ~doc:"Seed of the drop filter and the stack.")
  in
  let deadline =
    Arg.(
      value
      & opt Consort_cli.positive_float 60.
      & info [ "deadline" ] ~docv:"S" ~doc:"Give up after this many seconds.")
  in
  Cmd.v
    (Consort_cli.info ~path:"mcast-peer" ~hidden:true "mcast-peer"
       ~doc:"One member of a reliable multicast group of processes (used by the demo).")
    Term.(const peer $ rank $ members $ counts $ loss $ seed $ deadline)
