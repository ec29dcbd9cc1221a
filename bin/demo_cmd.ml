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
        exe; "mcast-peer"; "--rank"; string_of_int rank; "--members"; String.concat "," members;
        "--counts"; counts; "--loss"; string_of_float loss; "--seed"; string_of_int seed;
        "--deadline"; string_of_float (limit -. 2.);
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

let demo seeds limit =
  Fmt.pr "Consort %s: reliable FIFO multicast, simulated and real.@.@." "0.1.0";
  Fmt.pr "1. The deterministic simulator: %d schedules of 5 endpoints casting over a network that@." seeds;
  Fmt.pr "   loses 30%% and duplicates 10%% of datagrams and reorders them, each checked by the FIFO spec.@.";
  let t0 = Unix.gettimeofday () in
  let passed = ref 0 and failed = ref 0 and datagrams = ref 0 and delivered = ref 0 in
  for seed = 1 to seeds do
    match Consort_scenario.Scenario.run "mnak-lossy" ~seed with
    | Ok o when o.violations = [] ->
        incr passed;
        datagrams := !datagrams + o.datagrams;
        delivered := !delivered + o.delivered
    | Ok o ->
        incr failed;
        Fmt.pr "   seed %d failed: %s@." seed (List.hd o.violations)
    | Error e ->
        incr failed;
        Fmt.pr "   %s@." e
  done;
  Fmt.pr "   %d passed, %d failed: %d deliveries over %d datagrams in %.1fs of real time.@.@." !passed !failed
    !delivered !datagrams
    (Unix.gettimeofday () -. t0);
  Fmt.pr "2. Three processes on 127.0.0.1 cast 10,000 messages between them over kernel UDP, each@.";
  Fmt.pr "   dropping 20%% of the datagrams it receives; each checks exactly-once FIFO delivery.@.";
  let members = free_addresses 3 in
  let t1 = Unix.gettimeofday () in
  let ok = run_peers ~members ~counts:"3334,3333,3333" ~loss:0.2 ~seed:1 ~limit in
  Fmt.pr "   %s in %.1fs.@." (if ok then "all three delivered everything, in order, once" else "FAILED")
    (Unix.gettimeofday () -. t1);
  if ok && !failed = 0 then 0 else 1

let demo =
  let seeds = Arg.(value & opt int 200 & info [ "seeds" ] ~docv:"N" ~doc:"Simulated schedules to run.") in
  let limit =
    Arg.(value & opt float 60. & info [ "limit" ] ~docv:"S" ~doc:"Seconds before the processes are stopped.")
  in
  Cmd.v
    (Cmd.info "demo" ~doc:"Reliable multicast in the simulator, then between three real processes.")
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
      match Consort_scenario.Mcast_peer.run ~rank ~members ~counts ~loss ~seed ~deadline with
      | true -> 0
      | false -> 1
      | exception (Invalid_argument e | Failure e) ->
          Fmt.epr "consort mcast-peer: %s@." e;
          2)

let peer =
  let rank = Arg.(required & opt (some int) None & info [ "rank" ] ~docv:"R" ~doc:"This member's rank.") in
  let members =
    Arg.(required & opt (some string) None & info [ "members" ] ~docv:"ADDR,..." ~doc:"Every member's IP:PORT, in rank order.")
  in
  let counts =
    Arg.(value & opt string "1000" & info [ "counts" ] ~docv:"N[,N...]" ~doc:"Casts per member: one number, or one per member.")
  in
  let loss = Arg.(value & opt float 0. & info [ "loss" ] ~docv:"P" ~doc:"Fraction of received datagrams to drop.") in
  let seed = Arg.(value & opt int 1 & info [ "seed" ] ~docv:"S" ~doc:"Seed of the drop filter and the stack.") in
  let deadline = Arg.(value & opt float 60. & info [ "deadline" ] ~docv:"S" ~doc:"Give up after this many seconds.") in
  Cmd.v
    (Cmd.info "mcast-peer" ~doc:"One member of a reliable multicast group of processes (used by the demo).")
    Term.(const peer $ rank $ members $ counts $ loss $ seed $ deadline)
