open Cmdliner
open Consort_cap
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Rpc_udp
module Pd = Consort_capproc.Pd
module Proc_server = Consort_capproc.Proc_server
module Proc_client = Consort_capproc.Proc_client
module P = Consort_capproc.Proc_proto

let refused = Consort_capexec.refused

(* As root, a process server runs programs as consort-run (make deps makes it, never uid or gid
   0: consort cap proc serve --user): whether that user is missing. *)
let no_program_user () =
  match Unix.getpwnam "consort-run" with
  | pw -> pw.Unix.pw_uid = 0 || pw.Unix.pw_gid = 0
  | exception Not_found -> true

(* The CPU time (user and system, with its waited-for children) of process [pid] so far, in
   seconds: /proc/PID/stat's utime, stime, cutime and cstime, in USER_HZ (100) ticks. *)
(* The first line of a file of /proc (its size is 0: read_file would read nothing). *)
let proc_line f =
  match open_in f with
  | exception Sys_error _ -> None
  | ic ->
      let l = try Some (input_line ic) with End_of_file | Sys_error _ -> None in
      close_in_noerr ic;
      l

let proc_cpu pid =
  match proc_line (Printf.sprintf "/proc/%d/stat" pid) with
  | None -> 0.
  | Some s -> (
      match String.rindex_opt s ')' with
      | None -> 0.
      | Some i -> (
          (* After "PID (comm) ": state is field 3; utime is 14 .. cstime 17. *)
          let f = String.split_on_char ' ' (String.sub s (i + 2) (String.length s - i - 2)) in
          match List.filteri (fun k _ -> k >= 11 && k <= 14) f with
          | [ a; b; c; d ] ->
              float_of_int
                (List.fold_left
                   (fun acc x -> acc + Option.value ~default:0 (int_of_string_opt x))
                   0 [ a; b; c; d ])
              /. 100.
          | _ -> 0.))

(* The CPU time of process [pid]'s threads so far, in seconds, to the nanosecond: the first field
   of /proc/PID/task/TID/schedstat (its waited-for children not counted). *)
let task_cpu pid =
  let d = Printf.sprintf "/proc/%d/task" pid in
  match Sys.readdir d with
  | exception Sys_error _ -> 0.
  | ts ->
      Array.fold_left
        (fun acc t ->
          match proc_line (Printf.sprintf "%s/%s/schedstat" d t) with
          | Some l -> (
              match String.split_on_char ' ' l with
              | ns :: _ -> acc +. ((float_of_string_opt ns |> Option.value ~default:0.) /. 1e9)
              | [] -> acc)
          | None -> acc)
        0. ts

(* consort-exec beside this binary: installed (PREFIX/bin), or in the build tree. *)
let find_consort_exec exe =
  let d = Filename.dirname exe in
  List.find_opt Sys.file_exists
    [
      Filename.concat d "consort-exec";
      Filename.concat (Filename.concat d "exec") "consort_exec.exe";
    ]

let children_cpu () =
  let t = Unix.times () in
  t.Unix.tms_cutime +. t.Unix.tms_cstime

let load_average () =
  match proc_line "/proc/loadavg" with
  | None -> "?"
  | Some s -> String.concat " " (List.filteri (fun i _ -> i < 3) (String.split_on_char ' ' s))

let bench_proc rounds json save =
  let exe = Consort_bench.Exe.consort () in
  match (Option.bind save Consort_cli.unwritable_dir, find_consort_exec exe) with
  | Some m, _ -> refused "bench proc: --save %s: %s" (Option.get save) m
  | None, None ->
      refused
        "bench proc: no consort-exec beside %s (make build makes it, make install installs it)" exe
  | None, Some small_exe -> (
      let dir = Consort_local.temp_dir "consort-bench-proc" in
      let children = ref [] in
      let cleanup () =
        List.iter
          (fun pid ->
            (try Unix.kill pid Sys.sigterm with Unix.Unix_error _ -> ());
            try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
          !children;
        Consort_local.rm_rf dir
      in
      Fun.protect ~finally:cleanup @@ fun () ->
      let ( / ) = Filename.concat in
      let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
      let wait_ok pid = match Unix.waitpid [] pid with _, Unix.WEXITED 0 -> true | _ -> false in
      let load_start = load_average () in
      (* The program: the smallest bytecode executable, compiled here. *)
      let src = dir / "hello.ml" and byte = dir / "hello.byte" in
      let oc = open_out src in
      output_string oc "let () = exit 0\n";
      close_out oc;
      let compiled =
        match
          Unix.create_process "ocamlc" [| "ocamlc"; "-o"; byte; src |] devnull devnull Unix.stderr
        with
        | pid -> wait_ok pid
        | exception Unix.Unix_error _ -> false
      in
      if not compiled then refused "bench proc: cannot compile a bytecode program (ocamlc)"
      else
        let free_port () = Printf.sprintf "127.0.0.1:%d" (Consort_local.free_port ()) in
        let start args =
          let r, w = Unix.pipe ~cloexec:true () in
          let pid = Unix.create_process exe (Array.of_list (exe :: args)) devnull w devnull in
          children := pid :: !children;
          Unix.close w;
          let ic = Unix.in_channel_of_descr r in
          let line = try input_line ic with End_of_file -> "" in
          close_in ic;
          match String.split_on_char ' ' line with
          | [ "server"; c ] -> Option.map (fun c -> (c, pid)) (Result.to_option (Cap.of_string c))
          | _ -> None
        in
        Unix.mkdir (dir / "fs") 0o700;
        Unix.mkdir (dir / "ps") 0o700;
        let fsa = free_port () and psa = free_port () in
        match
          ( start [ "cap"; "fs"; "serve"; "--new"; "--data"; dir / "fs"; "--bind"; fsa ],
            start
              ([ "cap"; "proc"; "serve"; "--data"; dir / "ps"; "--bind"; psa; "--locate"; fsa ]
              (* as root without make deps' user: nobody's uid and gid *)
              @
              if Unix.geteuid () = 0 && no_program_user () then [ "--user"; "65534:65534" ] else []
              ) )
        with
        | None, _ | _, None -> refused "bench proc: the servers did not start"
        | Some (fs, fs_pid), Some (ps, ps_pid) -> (
            Unix.mkdir (dir / "agent") 0o700;
            let agent_sock = dir / "agent" / "agent.sock" in
            let agent_err, agent_pid =
              let r, w = Unix.pipe ~cloexec:true () in
              let pid =
                Unix.create_process_env exe
                  [| exe; "cap"; "agent"; "--socket"; agent_sock |]
                  (Array.append
                     [| "CONSORT_LOCATE=" ^ fsa ^ "," ^ psa; "CONSORT_MULTICAST=off" |]
                     (Unix.environment ()))
                  devnull devnull w
              in
              children := pid :: !children;
              Unix.close w;
              (Unix.in_channel_of_descr r, pid)
            in
            let agent_up =
              match input_line agent_err with
              | l -> Consort_local.contains l "serving uid"
              | exception End_of_file -> false
            in
            (* Its count of starts run, said when it stops. *)
            let stop_agent () =
              Unix.kill agent_pid Sys.sigterm;
              let rec last acc =
                match input_line agent_err with
                | l when Consort_local.contains l "stopped:" -> last (Some l)
                | _ -> last acc
                | exception End_of_file -> acc
              in
              let l = last None in
              ignore (Unix.waitpid [] agent_pid);
              children := List.filter (( <> ) agent_pid) !children;
              match l with
              | Some l -> (
                  try Scanf.sscanf l "consort: agent: stopped: %d served" (fun n -> Some n)
                  with _ -> None)
              | None -> None
            in
            if not agent_up then refused "bench proc: the agent did not start"
            else
              let loop = Loop.create () in
              match R.open_node ~locate:(fsa ^ "," ^ psa) ~multicast:None loop with
              | Error m -> refused "bench proc: %s" m
              | Ok node -> (
                  Fun.protect ~finally:(fun () -> R.close node) @@ fun () ->
                  let trans ~idempotent h d = R.Sync.trans node ~idempotent h d in
                  let size = (Unix.stat byte).Unix.st_size in
                  let ic = open_in_bin byte in
                  let put =
                    Fun.protect
                      ~finally:(fun () -> close_in ic)
                      (fun () ->
                        Consort_capfs_server.Fs_client.put trans ~server:fs ~size (fun b o l ->
                            input ic b o l))
                  in
                  match put with
                  | Error e ->
                      refused "bench proc: put: %a" Consort_capfs_server.Fs_client.pp_error e
                  | Ok program -> (
                      let ocamlrun = (Proc_server.default_config ~data:dir).ocamlrun in
                      (* A child's wall time, and its CPU time (with its own children's). *)
                      let child argv env =
                        let t0 = Unix.gettimeofday () and c0 = children_cpu () in
                        let pid =
                          Unix.create_process_env argv.(0) argv env devnull devnull devnull
                        in
                        if not (wait_ok pid) then failwith (argv.(0) ^ " failed");
                        (Unix.gettimeofday () -. t0, children_cpu () -. c0)
                      in
                      let env =
                        Array.append
                          [| "CONSORT_LOCATE=" ^ fsa ^ "," ^ psa; "CONSORT_MULTICAST=off" |]
                          (Unix.environment ())
                      in
                      let local () = child [| ocamlrun; byte |] env in
                      let remote () =
                        let t0 = Unix.gettimeofday () in
                        match
                          Proc_client.exec node ~server:ps ~program ~stdout:ignore ~stderr:ignore ()
                        with
                        | Ok { Proc_client.kind = P.Exited; code = 0; _ } ->
                            Unix.gettimeofday () -. t0
                        | Ok o -> failwith o.Proc_client.text
                        | Error e -> failwith (Fmt.str "%a" Proc_client.pp_error e)
                      in
                      let caps = [ Cap.to_string ps; Cap.to_string program ] in
                      let cli () =
                        child (Array.of_list ([ exe; "cap"; "exec"; "-n" ] @ caps)) env
                      in
                      (* consort-exec, with the CPU time the servers spent on it. *)
                      let servers_cpu () = proc_cpu ps_pid +. proc_cpu fs_pid in
                      let small () =
                        let s0 = servers_cpu () in
                        let w, c =
                          child
                            (Array.of_list ([ small_exe; "-n" ] @ caps))
                            (Array.append [| "CONSORT_AGENT=off" |] env)
                        in
                        (w, c, servers_cpu () -. s0)
                      in
                      (* consort-exec through the agent: the client's CPU, the agent's and the
                       servers'. *)
                      let agent_env = Array.append [| "CONSORT_AGENT=" ^ agent_sock |] env in
                      let through_agent () =
                        let s0 = servers_cpu () and a0 = task_cpu agent_pid in
                        let w, c = child (Array.of_list ([ small_exe; "-n" ] @ caps)) agent_env in
                        (w, c, task_cpu agent_pid -. a0, servers_cpu () -. s0)
                      in
                      (* The floor of cap exec: this binary starting and exiting. *)
                      let bare () = child [| exe; "--version" |] env in
                      match
                        ignore (local ());
                        ignore (through_agent ());
                        (* The first start: the port located, a session opened and the program
                         fetched (the server caches it). *)
                        let first = remote () in
                        let rs =
                          (* Each start through the server from an idle server (20 ms after the
                           last: its next spare made), as a start by hand would be. *)
                          let idle f =
                            Unix.sleepf 0.02;
                            f ()
                          in
                          List.init rounds (fun _ ->
                              let b = bare () in
                              let l = local () in
                              let r = idle remote in
                              let c = idle cli in
                              let s = idle small in
                              let a = idle through_agent in
                              (b, l, r, c, (s, a)))
                        in
                        (first, rs)
                      with
                      | exception Failure m -> refused "bench proc: %s" m
                      | first, rs -> (
                          (* Every start through the agent ran there: its count when it stops. *)
                          let served = stop_agent () in
                          if served <> Some (rounds + 1) then
                            refused "bench proc: the agent ran %s of the %d starts asked of it"
                              (match served with Some n -> string_of_int n | None -> "?")
                              (rounds + 1)
                          else
                            let rs =
                              List.map (fun (b, l, r, c, (s, a)) -> ((b, l, r, c, s), a)) rs
                            in
                            let ag = List.map snd rs and rs = List.map fst rs in
                            let med f =
                              let a = Array.of_list (List.map f rs) in
                              Array.sort compare a;
                              a.(Stdlib.( / ) (Array.length a) 2)
                            in
                            let ms x = x *. 1000. in
                            let b = med (fun (b, _, _, _, _) -> fst b)
                            and l = med (fun (_, l, _, _, _) -> fst l)
                            and r = med (fun (_, _, r, _, _) -> r)
                            and c = med (fun (_, _, _, c, _) -> fst c)
                            and s = med (fun (_, _, _, _, (w, _, _)) -> w) in
                            let lc = med (fun (_, l, _, _, _) -> snd l)
                            and cc = med (fun (_, _, _, c, _) -> snd c)
                            and sc = med (fun (_, _, _, _, (_, c, _)) -> c) in
                            (* The servers' CPU in ticks of 10 ms: a mean over the rounds. *)
                            let srv =
                              List.fold_left (fun a (_, _, _, _, (_, _, x)) -> a +. x) 0. rs
                              /. float_of_int rounds
                            in
                            let bcpu = med (fun (b, _, _, _, _) -> snd b) in
                            let amed f =
                              let a = Array.of_list (List.map f ag) in
                              Array.sort compare a;
                              a.(Stdlib.( / ) (Array.length a) 2)
                            and amean f =
                              List.fold_left (fun acc x -> acc +. f x) 0. ag /. float_of_int rounds
                            in
                            let aw = amed (fun (w, _, _, _) -> w)
                            and ac = amed (fun (_, c, _, _) -> c)
                            and aa = amean (fun (_, _, a, _) -> a)
                            and asrv = amean (fun (_, _, _, s) -> s) in
                            let load_end = load_average () in
                            Fmt.pr
                              "Process start: a %d-byte bytecode program that exits at once, %d \
                               rounds (medians; load %s at the start, %s at the end)@."
                              size rounds load_start load_end;
                            Fmt.pr "  %-60s %8s %8s %7s@." "" "wall ms" "CPU ms" "ratio";
                            let row what w cpu =
                              Fmt.pr "  %-60s %8.2f %8s %7.1f@." what (ms w)
                                (match cpu with Some c -> Fmt.str "%.2f" (ms c) | None -> "-")
                                (w /. l)
                            in
                            row "ocamlrun locally (fork, exec, run, wait)" l (Some lc);
                            row "first start through the server (locate, session, fetch)" first None;
                            row "warm: through the server (session open, program cached)" r None;
                            row "cap exec through the agent (consort-exec, consort cap agent)" aw
                              (Some ac);
                            row "consort-exec, no agent (its OCaml client: locate, session)" s
                              (Some sc);
                            row "consort cap exec (the same from the consort binary)" c (Some cc);
                            row "consort --version (the consort binary alone)" b (Some bcpu);
                            Fmt.pr
                              "  CPU per consort-exec start: client %.2f ms + servers %.1f ms \
                               (ticks of 10 ms, mean) = %.1f ms, %.1fx ocamlrun's %.2f ms@."
                              (ms sc) (ms srv)
                              (ms (sc +. srv))
                              ((sc +. srv) /. lc)
                              (ms lc);
                            Fmt.pr
                              "  CPU per start through the agent: client %.2f ms + agent %.2f ms \
                               (schedstat, mean) + servers %.1f ms (ticks of 10 ms, mean) = %.1f \
                               ms, %.1fx ocamlrun's; wall %.1fx@."
                              (ms ac) (ms aa) (ms asrv)
                              (ms (ac +. aa +. asrv))
                              ((ac +. aa +. asrv) /. lc)
                              (aw /. l);
                            let line =
                              Printf.sprintf
                                "{\"bench\":\"proc\",\"rounds\":%d,\"size\":%d,\"load_start\":\"%s\",\"load_end\":\"%s\",\"local_ms\":%.3f,\"local_cpu_ms\":%.3f,\"first_ms\":%.3f,\"remote_ms\":%.3f,\"exec_ms\":%.3f,\"exec_cpu_ms\":%.3f,\"servers_cpu_ms\":%.2f,\"cli_ms\":%.3f,\"cli_cpu_ms\":%.3f,\"binary_ms\":%.3f,\"binary_cpu_ms\":%.3f,\"ratio\":%.2f,\"exec_ratio\":%.2f,\"cli_ratio\":%.2f,\"exec_cpu_ratio\":%.2f,\"agent_ms\":%.3f,\"agent_client_cpu_ms\":%.3f,\"agent_cpu_ms\":%.2f,\"agent_servers_cpu_ms\":%.2f,\"agent_ratio\":%.2f,\"agent_cpu_ratio\":%.2f}"
                                rounds size load_start load_end (ms l) (ms lc) (ms first) (ms r)
                                (ms s) (ms sc) (ms srv) (ms c) (ms cc) (ms b) (ms bcpu) (r /. l)
                                (s /. l) (c /. l)
                                ((sc +. srv) /. lc)
                                (ms aw) (ms ac) (ms aa) (ms asrv) (aw /. l)
                                ((ac +. aa +. asrv) /. lc)
                            in
                            if json then print_endline line;
                            match save with
                            | None -> 0
                            | Some d -> (
                                match Consort_cli.save_result ~dir:d ~name:"proc" line with
                                | Ok f ->
                                    Fmt.pr "  kept in %s@." f;
                                    0
                                | Error m -> refused "bench proc: --save %s: %s" d m))))))

let bench =
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 20
      & info [ "rounds" ] ~docv:"N" ~doc:"Rounds, each starting the program each way.")
  in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  let save =
    Arg.(
      value
      & opt (some string) None
      & info [ "save" ] ~docv:"DIR"
          ~doc:"Also keep the JSON line in $(i,DIR)/proc-$(i,DATE)-$(i,TIME).json (UTC).")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench proc" "proc"
       ~doc:
         "Process start latency through a process server (file and process servers on loopback) \
          beside starting ocamlrun locally, in the same run: warm (the client's session open, the \
          program cached by the server), through consort-exec with an agent running (consort cap \
          agent) and without, and consort cap exec (a new client process each time, the program \
          cached), and the first start (program fetched). Wall times and, for the processes the \
          bench waits for, CPU times.")
    Term.(const bench_proc $ rounds $ json $ save)
