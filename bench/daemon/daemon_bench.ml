(* The cost of going through consortd, beside in-process members, in the
   same run on 127.0.0.1 (unpinned unless --pin or --one-cpu), each figure
   the median of --rounds rounds (5), in-process and daemon in turn:
   - round trip: 16-byte casts ping-pong between the two members of a
     group (vsync), members in-process (two processes, the Group API over
     UDP) and members through two daemons (a client process per daemon:
     client -> daemon -> UDP -> daemon -> client);
   - throughput: one member casts N 1 KB messages to a group of 3, as fast
     as flow control lets it (a client keeps at most 256 casts waiting
     for the daemon's answer); the rate is the slowest receiver's, first
     to last message.
   Prints each figure, the ratio daemon/in-process, and the targets (round
   trip at most 1.3x, throughput at least 0.7x). *)

open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module G = Consort_group.Group.Make (Udp)
module C = Consort_client

let layers = Result.get_ok Consort_group.Properties.(layers vsync)
let count = ref 2000
let warmup = ref 200
let tput_count = ref 10000
let base = ref 30000
let json = ref false
let only = ref ""
let rounds = ref 5
let spin_us = ref 0
let daemon_spin_us = ref (-1)
let pin = ref false
let one_cpu = ref false

let () =
  Arg.parse
    [
      ("--count", Arg.Set_int count, "N round trips (2000)");
      ("--messages", Arg.Set_int tput_count, "N 1 KB messages for throughput (10000)");
      ("--port", Arg.Set_int base, "P first UDP port used (30000)");
      ("--json", Arg.Set json, " also one JSON line");
      ( "--spin-us",
        Arg.Set_int spin_us,
        "US every process polls this long before it sleeps: in-process members' loops, the daemons \
         (--spin-us), the clients (CONSORT_CLIENT_SPIN_US) (0)" );
      ( "--daemon-spin-us",
        Arg.Set_int daemon_spin_us,
        "US the daemons alone poll this long before they sleep (default: as --spin-us)" );
      ( "--pin",
        Arg.Set pin,
        " pin each process to a CPU (taskset): a client with its daemon, the two ends of a round \
         trip apart" );
      ("--one-cpu", Arg.Set one_cpu, " pin every process to CPU 0");
      ("--rounds", Arg.Set_int rounds, "N measure each figure N times, keep the medians (5)");
      ("--only", Arg.Set_string only, "rtt|tput only one of the two figures (for profiling)");
    ]
    (fun _ -> raise (Arg.Bad "no positional arguments"))
    "daemon_bench [--count N] [--messages N] [--json]"

let now () = Unix.gettimeofday ()

(* {1 Members: in-process or through a daemon, with one interface} *)

type member = {
  cast : string -> bool;  (** [false]: refused by flow control, or too many casts in flight *)
  run : until:(unit -> bool) -> float -> unit;
  size : unit -> int;
  idle : unit -> bool;  (** every cast made is in the stack *)
}

type handlers = {
  mutable on_cast : origin:string -> string -> unit;
  mutable on_flow : bool -> unit;
  mutable me : string;
}

let handlers () = { on_cast = (fun ~origin:_ _ -> ()); on_flow = ignore; me = "" }

let inproc ~addr ~peers h =
  let loop = Loop.create () in
  (* Unpinned, both ends may poll on one CPU: they yield to each other. *)
  Loop.set_spin ~yield:(not (!pin || !one_cpu)) loop (Time.of_us !spin_us);
  let size = ref 0 in
  let cb =
    {
      Consort_group.Group.view = (fun v -> size := Array.length v.members);
      cast = (fun ~origin s -> h.on_cast ~origin s);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = (fun b -> h.on_flow b);
      exit = ignore;
    }
  in
  let g = Result.get_ok (G.join ~peers ~layers loop ~group:"bench" ~addr cb) in
  h.me <- G.me g;
  {
    cast = (fun s -> G.cast g s = Ok ());
    run =
      (fun ~until secs -> Loop.run loop ~until ~timeout:(Time.of_ms (int_of_float (secs *. 1000.))));
    size = (fun () -> !size);
    idle = (fun () -> true);
  }

let client ~socket h =
  let conn = match C.connect ~name:"bench" socket with Ok c -> c | Error e -> failwith e in
  let size = ref 0 in
  let blocked = ref false in
  let retry = Queue.create () in
  let cb =
    {
      C.view = (fun v -> size := Array.length v.members);
      cast = (fun ~origin s -> h.on_cast ~origin s);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow =
        (fun b ->
          blocked := b;
          h.on_flow b);
      exit = ignore;
    }
  in
  let m =
    match C.join conn ~group:"bench" cb with
    | Ok m -> m
    | Error e -> failwith (Fmt.str "%a" C.pp_join_error e)
  in
  h.me <- C.me m;
  (* Pipelined: the reply comes later. At most [window] casts wait for
     theirs (a client's share of flow control: Mflow lets 1 MiB of casts
     be in flight); one refused by flow control is cast again once flow
     control lets it. *)
  let window = 256 and in_flight = ref 0 in
  let rec cast s =
    incr in_flight;
    C.cast_async m s ~on_result:(function
      | Error C.Flow_control ->
          decr in_flight;
          Queue.push s retry
      | _ -> decr in_flight)
  and resend () =
    while (not !blocked) && (not (Queue.is_empty retry)) && !in_flight < window do
      cast (Queue.pop retry)
    done
  in
  {
    cast =
      (fun s ->
        resend ();
        if !blocked || !in_flight >= window || not (Queue.is_empty retry) then false
        else begin
          cast s;
          true
        end);
    run =
      (fun ~until secs ->
        (* At least one step: a caller held back by the window waits here
           for replies. *)
        let deadline = now () +. secs in
        let rec go first =
          resend ();
          if
            (first || ((not (until ())) && now () < deadline))
            && C.step ~timeout:(if until () then 0. else 0.001) conn
          then go false
        in
        go true);
    size = (fun () -> !size);
    idle = (fun () -> !in_flight = 0 && Queue.is_empty retry);
  }

(* {1 Processes} *)

(* With --pin, process [pid] runs on CPU [cpu] only. *)
let pin_to cpu pid =
  if !pin || !one_cpu then begin
    let cpu = if !one_cpu then 0 else cpu in
    let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
    let p =
      Unix.create_process "taskset"
        [| "taskset"; "-pc"; string_of_int cpu; string_of_int pid |]
        null null null
    in
    Unix.close null;
    ignore (Unix.waitpid [] p)
  end

let child ~cpu f =
  let r, w = Unix.pipe () in
  match Unix.fork () with
  | 0 ->
      Unix.close r;
      pin_to cpu (Unix.getpid ());
      let oc = Unix.out_channel_of_descr w in
      (try output_string oc (f ()) with e -> output_string oc ("error " ^ Printexc.to_string e));
      close_out oc;
      Unix._exit 0
  | pid ->
      Unix.close w;
      (pid, r)

let result (pid, r) =
  let ic = Unix.in_channel_of_descr r in
  let s = try input_line ic with End_of_file -> "error: no result" in
  close_in ic;
  ignore (Unix.waitpid [] pid);
  s

let consortd () =
  let here = Filename.dirname Sys.executable_name in
  let c = Filename.concat here "../../bin/consortd/consortd.exe" in
  if Sys.file_exists c then c else "_build/default/bin/consortd/consortd.exe"

let daemons = ref []

(* A polling daemon yields when its clients poll too, or when it is not
   pinned beside its client: unpinned, two polling daemons on two CPUs
   would starve the clients. *)
let daemons_yield () = !spin_us > 0 || not (!pin || !one_cpu)

let start_daemon ~cpu i ~bind ~peers =
  let sock =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-bench-%d-%d.sock" (Unix.getpid ()) i)
  in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let pid =
    Unix.create_process (consortd ())
      (Array.of_list
         ([
            "consortd";
            "--socket";
            sock;
            "--bind";
            bind;
            "--ports";
            "4";
            "--peers";
            String.concat "," peers;
            "--spin-us";
            string_of_int (if !daemon_spin_us >= 0 then !daemon_spin_us else !spin_us);
          ]
         @ if daemons_yield () then [ "--spin-yield" ] else []))
      devnull devnull Unix.stderr
  in
  Unix.close devnull;
  pin_to cpu pid;
  daemons := pid :: !daemons;
  let deadline = now () +. 10. in
  while (not (Sys.file_exists sock)) && now () < deadline do
    Unix.sleepf 0.01
  done;
  sock

let stop_daemons () =
  List.iter
    (fun pid ->
      try
        Unix.kill pid Sys.sigterm;
        ignore (Unix.waitpid [] pid)
      with Unix.Unix_error _ -> ())
    !daemons;
  daemons := []

let addr p = Printf.sprintf "127.0.0.1:%d" p

(* {1 Round trip} *)

let rtt make_member role n =
  let h = handlers () in
  let m = make_member h in
  if
    not
      (let ok = ref false in
       m.run
         ~until:(fun () ->
           ok := m.size () = 2;
           !ok)
         20.;
       m.size () = 2)
  then "error no view of two"
  else begin
    let samples = Array.make n 0. in
    let i = ref 0 and t0 = ref 0. and finished = ref false in
    let total = n + !warmup in
    h.on_cast <-
      (fun ~origin s ->
        if origin <> h.me then
          match role with
          | `Ping ->
              let t = now () in
              if !i >= !warmup then samples.(!i - !warmup) <- (t -. !t0) *. 1e6;
              incr i;
              if !i >= total then finished := true
              else begin
                t0 := now ();
                ignore (m.cast (Printf.sprintf "p%015d" !i))
              end
          | `Pong ->
              incr i;
              ignore (m.cast s);
              if !i >= total then finished := true);
    if role = `Ping then begin
      (* Let the other side see the view too. *)
      m.run ~until:(fun () -> false) 0.5;
      t0 := now ();
      ignore (m.cast (Printf.sprintf "p%015d" 0))
    end;
    m.run ~until:(fun () -> !finished) 120.;
    if role = `Pong then (
      m.run ~until:(fun () -> false) 0.3;
      "done")
    else if not !finished then Printf.sprintf "error only %d round trips" !i
    else begin
      Array.sort compare samples;
      Printf.sprintf "rtt %.1f %.1f" samples.(n / 2) samples.(n * 99 / 100)
    end
  end

(* {1 Throughput} *)

let tput make_member role n =
  let h = handlers () in
  let m = make_member h in
  if
    not
      (m.run ~until:(fun () -> m.size () = 3) 20.;
       m.size () = 3)
  then "error no view of three"
  else
    match role with
    | `Send ->
        m.run ~until:(fun () -> false) 0.5;
        let sent = ref 0 and paused = ref false in
        h.on_flow <- (fun b -> paused := b);
        let payload i = Printf.sprintf "d%010d" i ^ String.make (1024 - 11) 'x' in
        while !sent < n do
          while (not !paused) && !sent < n && m.cast (payload !sent) do
            incr sent;
            if !sent mod 64 = 0 then m.run ~until:(fun () -> false) 0.
          done;
          m.run ~until:(fun () -> not !paused) 0.01
        done;
        m.run ~until:m.idle 60.;
        m.run ~until:(fun () -> false) 3.;
        if m.idle () then "sent" else "error casts still refused at the end"
    | `Recv ->
        let got = ref 0 and first = ref 0. and last = ref 0. in
        h.on_cast <-
          (fun ~origin s ->
            if origin <> h.me && String.length s = 1024 then begin
              if !got = 0 then first := now ();
              incr got;
              last := now ()
            end);
        m.run ~until:(fun () -> !got >= n) 120.;
        if !got < n then Printf.sprintf "error received %d of %d" !got n
        else Printf.sprintf "tput %.0f" (float n /. (!last -. !first))

let parse_rtt s = Scanf.sscanf s "rtt %f %f" (fun a b -> (a, b))
let parse_tput s = Scanf.sscanf s "tput %f" (fun a -> a)

let () =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  Unix.putenv "CONSORT_CLIENT_SPIN_US" (string_of_int !spin_us);
  let p = !base in
  let fail what s =
    Printf.printf "daemon bench: %s: %s\n" what s;
    stop_daemons ();
    exit 1
  in
  let rtts () =
    (* Round trip, in-process. *)
    let a =
      child ~cpu:0 (fun () -> rtt (inproc ~addr:(addr p) ~peers:[ addr (p + 1) ]) `Ping !count)
    in
    let b =
      child ~cpu:1 (fun () -> rtt (inproc ~addr:(addr (p + 1)) ~peers:[ addr p ]) `Pong !count)
    in
    let ra = result a and _ = result b in
    let in_rtt, in_p99 = try parse_rtt ra with _ -> fail "in-process round trip" ra in
    (* Round trip, through two daemons. *)
    let s1 =
      start_daemon ~cpu:0 1
        ~bind:(addr (p + 10))
        ~peers:[ Printf.sprintf "127.0.0.1:%d-%d" (p + 20) (p + 23) ]
    in
    let s2 =
      start_daemon ~cpu:1 2
        ~bind:(addr (p + 20))
        ~peers:[ Printf.sprintf "127.0.0.1:%d-%d" (p + 10) (p + 13) ]
    in
    let a = child ~cpu:0 (fun () -> rtt (client ~socket:s1) `Ping !count) in
    let b = child ~cpu:1 (fun () -> rtt (client ~socket:s2) `Pong !count) in
    let ra = result a and _ = result b in
    stop_daemons ();
    let d_rtt, d_p99 = try parse_rtt ra with _ -> fail "daemon round trip" ra in
    (in_rtt, in_p99, d_rtt, d_p99)
  in
  let tputs () =
    (* Throughput, in-process: 3 members. *)
    let n = !tput_count in
    let peers i =
      List.filter (( <> ) (addr (p + 30 + i))) (List.init 3 (fun j -> addr (p + 30 + j)))
    in
    let r1 =
      child ~cpu:1 (fun () -> tput (inproc ~addr:(addr (p + 31)) ~peers:(peers 1)) `Recv n)
    in
    let r2 =
      child ~cpu:1 (fun () -> tput (inproc ~addr:(addr (p + 32)) ~peers:(peers 2)) `Recv n)
    in
    let s = child ~cpu:0 (fun () -> tput (inproc ~addr:(addr (p + 30)) ~peers:(peers 0)) `Send n) in
    let x1 = result r1 and x2 = result r2 in
    ignore (result s);
    let in_tput =
      try Float.min (parse_tput x1) (parse_tput x2)
      with _ -> fail "in-process throughput" (x1 ^ " / " ^ x2)
    in
    (* Throughput through 3 daemons, one per member. *)
    let range i = Printf.sprintf "127.0.0.1:%d-%d" (p + 40 + (10 * i)) (p + 43 + (10 * i)) in
    let socks =
      List.init 3 (fun i ->
          start_daemon ~cpu:(min i 1) (10 + i)
            ~bind:(addr (p + 40 + (10 * i)))
            ~peers:(List.filter_map (fun j -> if j <> i then Some (range j) else None) [ 0; 1; 2 ]))
    in
    let r1 = child ~cpu:1 (fun () -> tput (client ~socket:(List.nth socks 1)) `Recv n) in
    let r2 = child ~cpu:1 (fun () -> tput (client ~socket:(List.nth socks 2)) `Recv n) in
    let s = child ~cpu:0 (fun () -> tput (client ~socket:(List.nth socks 0)) `Send n) in
    let x1 = result r1 and x2 = result r2 in
    ignore (result s);
    stop_daemons ();
    let d_tput =
      try Float.min (parse_tput x1) (parse_tput x2)
      with _ -> fail "daemon throughput" (x1 ^ " / " ^ x2)
    in
    (in_tput, d_tput)
  in
  (* Each figure is measured [rounds] times, in-process and through the
     daemon in turn, and the median of each side is kept: the machine is
     shared, and one round can fall on a busy moment of either side. *)
  let median l =
    let a = Array.of_list l in
    Array.sort compare a;
    a.(Array.length a / 2)
  in
  let repeat f = List.init (max 1 !rounds) (fun _ -> f ()) in
  let rtts =
    if !only = "" || !only = "rtt" then begin
      let l = repeat rtts in
      Some
        ( median (List.map (fun (a, _, _, _) -> a) l),
          median (List.map (fun (_, b, _, _) -> b) l),
          median (List.map (fun (_, _, c, _) -> c) l),
          median (List.map (fun (_, _, _, d) -> d) l) )
    end
    else None
  in
  let tputs =
    if !only = "" || !only = "tput" then begin
      let l = repeat tputs in
      Some (median (List.map fst l), median (List.map snd l))
    end
    else None
  in
  Printf.printf
    "Through consortd: members of a vsync group on 127.0.0.1 (%s), beside in-process members, same \
     run (medians of %d rounds%s)\n"
    (if !one_cpu then "every process pinned to CPU 0"
     else if !pin then
       "pinned: round trip, each end and its daemon on a CPU of its own; throughput, the sender \
        and its daemon on CPU 0, the two receivers and theirs on CPU 1"
     else "unpinned")
    !rounds
    (if !daemon_spin_us >= 0 then
       Printf.sprintf ", the daemons polling %d us before they sleep%s, the others %d"
         !daemon_spin_us
         (if daemons_yield () then " (yielding)" else "")
         !spin_us
     else if !spin_us > 0 then
       Printf.sprintf ", every process polling %d us before it sleeps" !spin_us
     else "");
  Printf.printf "%-34s %14s %14s %8s  %s\n" "" "in-process" "via daemon" "ratio" "target";
  Option.iter
    (fun (in_rtt, in_p99, d_rtt, d_p99) ->
      Printf.printf "%-34s %11.1f us %11.1f us %7.2fx  <= 1.30x %s\n" "round trip, 16 B (median)"
        in_rtt d_rtt (d_rtt /. in_rtt)
        (if d_rtt /. in_rtt <= 1.3 then "met" else "NOT met");
      Printf.printf "%-34s %11.1f us %11.1f us %7.2fx\n" "round trip, 16 B (99th percentile)" in_p99
        d_p99 (d_p99 /. in_p99))
    rtts;
  Option.iter
    (fun (in_tput, d_tput) ->
      Printf.printf "%-34s %9.0f msg/s %9.0f msg/s %7.2fx  >= 0.70x %s\n"
        (Printf.sprintf "throughput, 1 KB, 1 sender, 3 members")
        in_tput d_tput (d_tput /. in_tput)
        (if d_tput /. in_tput >= 0.7 then "met" else "NOT met"))
    tputs;
  match (rtts, tputs) with
  | Some (in_rtt, _, d_rtt, _), Some (in_tput, d_tput) when !json ->
      Printf.printf
        "{\"bench\":\"daemon\",\"rtt_us\":{\"inproc\":%.1f,\"daemon\":%.1f,\"ratio\":%.3f},\"tput_msgs\":{\"inproc\":%.0f,\"daemon\":%.0f,\"ratio\":%.3f},\"count\":%d,\"messages\":%d}\n"
        in_rtt d_rtt (d_rtt /. in_rtt) in_tput d_tput (d_tput /. in_tput) !count !tput_count
  | _ -> ()
