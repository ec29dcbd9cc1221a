(* A fault soak on real processes: [--members] members (5), each in a
   network namespace of its own, joined by veth links to a bridge in a hub
   namespace. A seeded driver kills and restarts members, partitions the
   network (moving bridge ports to a second bridge), cuts one member's
   link, and pauses members with SIGSTOP for 0.2 to 8 s, while every
   running member casts with total order. At the end it heals everything,
   waits for one view, lets everyone leave, and checks every log of every
   incarnation for virtual synchrony and total order. It prints each fault
   as it injects it, then the faults by kind and the violations found,
   and ends with "N passed, M failed" over its checks. Everything it
   creates (namespaces, links, processes, files) is removed at exit. *)

module P = Consort_member.Procs
module Log = Consort_spec.Log
module Vsync = Consort_spec.Vsync
module Order = Consort_spec.Order

let seconds = ref 60.
let seed = ref 1
let n = ref 5
let props = ref "vsync,Total"
let exe = ref ""

let () =
  Arg.parse
    [
      ("--seconds", Arg.Set_float seconds, "S  how long faults are injected (default 60)");
      ("--seed", Arg.Set_int seed, "N  the driver's seed (default 1)");
      ("--members", Arg.Set_int n, "N  members (default 5)");
      ("--props", Arg.Set_string props, "P  the members' properties (default vsync,Total)");
      ("--exe", Arg.Set_string exe, "PATH  the consort binary");
    ]
    (fun a -> raise (Arg.Bad ("unexpected argument " ^ a)))
    "soak_net [--seconds S] [--seed N] [--members N] [--props P] [--exe PATH]"

let say fmt =
  Printf.ksprintf
    (fun s ->
      print_endline s;
      flush stdout)
    fmt

let t0 = Unix.gettimeofday ()
let now () = Unix.gettimeofday () -. t0

let sh cmd =
  let rc = Sys.command (cmd ^ " >/dev/null 2>&1") in
  if rc <> 0 then failwith (Printf.sprintf "command failed (%d): %s" rc cmd)

let sh_ok cmd = ignore (Sys.command (cmd ^ " >/dev/null 2>&1"))

(* {1 The network} *)

let tag = Printf.sprintf "csk%d" (Unix.getpid () mod 100000)
let hub = tag ^ "-h"
let ns i = Printf.sprintf "%s-%d" tag i
let ip i = Printf.sprintf "10.77.%d.%d" (Unix.getpid () mod 200) (i + 1)
let port i = Printf.sprintf "p%d" i
let in_hub cmd = Printf.sprintf "ip netns exec %s %s" hub cmd

let setup () =
  sh ("ip netns add " ^ hub);
  sh (in_hub "ip link set lo up");
  List.iter
    (fun br ->
      sh (in_hub (Printf.sprintf "ip link add %s type bridge" br));
      sh (in_hub ("ip link set " ^ br ^ " up")))
    [ "br0"; "br1" ];
  for i = 0 to !n - 1 do
    sh ("ip netns add " ^ ns i);
    sh
      (Printf.sprintf "ip link add %s netns %s type veth peer name eth0 netns %s" (port i) hub
         (ns i));
    sh (in_hub (Printf.sprintf "ip link set %s master br0" (port i)));
    sh (in_hub (Printf.sprintf "ip link set %s up" (port i)));
    sh (Printf.sprintf "ip netns exec %s ip addr add %s/16 dev eth0" (ns i) (ip i));
    sh (Printf.sprintf "ip netns exec %s ip link set eth0 up" (ns i));
    sh (Printf.sprintf "ip netns exec %s ip link set lo up" (ns i))
  done

let teardown () =
  for i = 0 to !n - 1 do
    sh_ok ("ip netns delete " ^ ns i)
  done;
  sh_ok ("ip netns delete " ^ hub)

(* {1 Faults} *)

type fault = Kill | Pause | Partition | Cut

let fault_name = function
  | Kill -> "kill"
  | Pause -> "pause"
  | Partition -> "partition"
  | Cut -> "cut"

let () =
  if Unix.getuid () <> 0 then (
    prerr_endline "soak_net: needs root (network namespaces)";
    exit 2);
  if Sys.command "command -v ip >/dev/null 2>&1" <> 0 then (
    prerr_endline "soak_net: needs ip (iproute2)";
    exit 2);
  if !exe = "" then begin
    let dir = Filename.dirname Sys.executable_name in
    exe :=
      List.find
        (fun e -> Sys.file_exists e)
        [ Filename.concat dir "../../bin/main.exe"; "_build/default/bin/main.exe" ]
  end;
  let dir =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-soak-%d" (Unix.getpid ()))
  in
  Unix.mkdir dir 0o755;
  let ms = P.create_at ~dir (List.init !n (fun i -> ip i ^ ":7400")) in
  let cleanup () =
    List.iter P.kill ms;
    teardown ();
    P.remove_dir dir
  in
  at_exit cleanup;
  Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> exit 130));
  Sys.set_signal Sys.sigterm (Sys.Signal_handle (fun _ -> exit 143));
  let passed = ref 0 and failed = ref 0 in
  let check name ok detail =
    if ok then incr passed else incr failed;
    say "%s %s%s"
      (if ok then "ok  " else "FAIL")
      name
      (if ok || detail = "" then "" else ": " ^ detail)
  in
  (try setup ()
   with Failure e ->
     say "setup: %s" e;
     check "network set up" false e;
     say "%d passed, %d failed" !passed !failed;
     exit 1);
  let peers = List.map (fun m -> m.P.addr) ms in
  let params = "suspect.timeout=2s,group.merge_timeout=1s" in
  let start m =
    P.start ~exe:!exe
      ~wrap:[ "ip"; "netns"; "exec"; ns m.P.idx ]
      ~props:!props ~params ~group:"soak" ~peers
      ~output:(Filename.concat dir (Printf.sprintf "out-%d.txt" m.P.idx))
      m
  in
  List.iter start ms;
  let rng = Random.State.make [| !seed |] in
  let counts = Hashtbl.create 7 in
  let count f =
    Hashtbl.replace counts f (1 + Option.value ~default:0 (Hashtbl.find_opt counts f))
  in
  (* Pending repairs: (due time, what, action). *)
  let pending = ref [] in
  let later dt what f = pending := (now () +. dt, what, f) :: !pending in
  let down = Array.make !n false and paused = Array.make !n false in
  let net_fault = ref false in
  let killed_ids = ref [] in
  let first_me m =
    match m.P.logs with
    | [] -> None
    | log :: _ -> ( match P.events log with e :: _ -> Some (Log.me e) | [] -> None)
  in
  let seq = ref 0 in
  let cast_all () =
    incr seq;
    List.iter
      (fun m ->
        if (not down.(m.P.idx)) && not paused.(m.P.idx) then
          P.cast m (Printf.sprintf "c-%d-%d" m.P.idx !seq))
      ms
  in
  let inject () =
    let i = Random.State.int rng !n in
    let m = List.nth ms i in
    let kinds = [| Kill; Pause; Partition; Cut |] in
    match kinds.(Random.State.int rng 4) with
    | Kill when (not down.(i)) && not paused.(i) ->
        count Kill;
        Option.iter (fun id -> killed_ids := id :: !killed_ids) (first_me m);
        P.kill m;
        down.(i) <- true;
        let dt = 1. +. Random.State.float rng 3. in
        say "%6.1f s  kill member %d (restart in %.1f s)" (now ()) i dt;
        later dt "restart" (fun () ->
            down.(i) <- false;
            start m)
    | Pause when (not down.(i)) && not paused.(i) -> (
        match m.P.pid with
        | Some pid ->
            count Pause;
            let dt = 0.2 +. Random.State.float rng 7.8 in
            say "%6.1f s  pause member %d for %.1f s" (now ()) i dt;
            (try Unix.kill pid Sys.sigstop with Unix.Unix_error _ -> ());
            paused.(i) <- true;
            later dt "resume" (fun () ->
                paused.(i) <- false;
                try Unix.kill pid Sys.sigcont with Unix.Unix_error _ -> ())
        | None -> ())
    | Partition when not !net_fault ->
        count Partition;
        net_fault := true;
        let side = List.filter (fun _ -> Random.State.bool rng) (List.init !n Fun.id) in
        let side = if side = [] || List.length side = !n then [ i ] else side in
        let dt = 2. +. Random.State.float rng 6. in
        say "%6.1f s  partition {%s} from the rest for %.1f s" (now ())
          (String.concat "," (List.map string_of_int side))
          dt;
        List.iter (fun j -> sh (in_hub (Printf.sprintf "ip link set %s master br1" (port j)))) side;
        later dt "heal" (fun () ->
            List.iter
              (fun j -> sh (in_hub (Printf.sprintf "ip link set %s master br0" (port j))))
              side;
            net_fault := false)
    | Cut when not !net_fault ->
        count Cut;
        net_fault := true;
        let dt = 2. +. Random.State.float rng 4. in
        say "%6.1f s  cut member %d's link for %.1f s" (now ()) i dt;
        sh (in_hub (Printf.sprintf "ip link set %s down" (port i)));
        later dt "restore" (fun () ->
            sh (in_hub (Printf.sprintf "ip link set %s up" (port i)));
            net_fault := false)
    | _ -> ()
  in
  let run_due ~all =
    let due, rest = List.partition (fun (t, _, _) -> all || t <= now ()) !pending in
    pending := rest;
    List.iter (fun (_, _, f) -> f ()) (List.sort (fun (a, _, _) (b, _, _) -> compare a b) due)
  in
  let formed = P.wait_until ~timeout:30. (fun () -> P.same_view ms) in
  check "the members form one group" formed "";
  let next_fault = ref (now () +. 2.) in
  let stop_at = now () +. !seconds in
  while now () < stop_at do
    run_due ~all:false;
    if now () >= !next_fault then begin
      inject ();
      next_fault := now () +. 1. +. Random.State.float rng 3.
    end;
    cast_all ();
    Unix.sleepf 0.1
  done;
  say "%6.1f s  healing everything" (now ());
  run_due ~all:true;
  let converged = P.wait_until ~timeout:60. (fun () -> P.same_view ms) in
  check "every member is in one view after healing" converged "";
  for _ = 1 to 5 do
    cast_all ();
    Unix.sleepf 0.1
  done;
  Unix.sleepf 2.;
  let left = P.leave_all ms ~timeout:30. in
  check "every member leaves cleanly" left "";
  let logs =
    List.concat_map
      (fun m ->
        List.filter_map
          (fun f ->
            match Log.read_file f with
            | Ok (e :: _ as es) -> Some (Log.me e, es)
            | Ok [] | Error _ -> None)
          m.P.logs)
      ms
  in
  let s = Vsync.summarize logs in
  say "faults: %s"
    (String.concat ", "
       (List.map
          (fun f ->
            Printf.sprintf "%s %d" (fault_name f)
              (Option.value ~default:0 (Hashtbl.find_opt counts f)))
          [ Kill; Pause; Partition; Cut ]));
  say "logs: %a" (fun () -> Fmt.str "%a" Vsync.pp_summary) s;
  (match Vsync.check ~crashed:!killed_ids logs with
  | Ok () -> check "virtual synchrony" true ""
  | Error vs ->
      List.iter (fun v -> say "  %s" (Fmt.str "%a" Vsync.pp_violation v)) vs;
      check "virtual synchrony" false (Printf.sprintf "%d violations" (List.length vs)));
  if List.mem "total" (List.map String.lowercase_ascii (String.split_on_char ',' !props)) then begin
    match Order.check_total logs with
    | Ok () -> check "total order" true ""
    | Error vs ->
        List.iter (fun v -> say "  %s" (Fmt.str "%a" Order.pp_violation v)) vs;
        check "total order" false (Printf.sprintf "%d violations" (List.length vs))
  end;
  check "casts were delivered" (s.Vsync.deliveries > 0) "";
  say "%d passed, %d failed" !passed !failed;
  exit (if !failed = 0 then 0 else 1)
