open Consort_cap
module Loop = Consort_engine.Loop
module R = Rpc_udp
module Time = Consort.Time

let src = Logs.Src.create "consort.capboot" ~doc:"Consort boot server"

module Log = (val Logs.src_log src : Logs.LOG)

type state = Cold | Starting | Up | Down | Restarting

let state_name = function
  | Cold -> "cold"
  | Starting -> "starting"
  | Up -> "up"
  | Down -> "down"
  | Restarting -> "restarting"

type svc = {
  d : Decl.service;
  mutable state : state;
  mutable pid : int option;
  mutable cap : Cap.t option;
  mutable cap_text : string option;
  mutable named : (string * Cap.t) list; (* lines [NAME CAP] before [server CAP] *)
  mutable restarts : int;
  mutable failures : int;
  mutable poll_fails : int;
  mutable polling : bool;
  mutable up_since : Time.t;
  mutable started_at : Time.t;
  mutable why : string;
  mutable out : Unix.file_descr option;
  mutable line : Buffer.t;
  mutable timers : Loop.timer list;
  mutable killed : string option;
  mutable held : bool; (* restarts wait until released *)
  mutable due : bool; (* held when its back-off ended *)
}

type t = {
  loop : Loop.t;
  node : R.node;
  log_dir : string option;
  on_change : string -> state -> string -> unit;
  svcs : svc list;
  mutable stopping : bool;
}

let now t = Loop.now t.loop
let find t name = List.find (fun s -> s.d.Decl.name = name) t.svcs

let set t s st detail =
  if s.state <> st || detail <> "" then begin
    s.state <- st;
    if detail <> "" && (st = Restarting || st = Down) then s.why <- detail;
    Log.info (fun m -> m "%s %s %s" s.d.name (state_name st) detail);
    t.on_change s.d.name st detail
  end

let close_quiet fd = try Unix.close fd with Unix.Unix_error _ -> ()

let log_fd t s =
  match t.log_dir with
  | None -> Unix.openfile "/dev/null" [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0
  | Some d -> (
      try
        (* 0600: a service's log is its own business. *)
        Consort_local.Private.openfile
          (Filename.concat d (s.d.name ^ ".log"))
          [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND ]
      with Unix.Unix_error _ -> Unix.openfile "/dev/null" [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0)

let after t s d f = s.timers <- Loop.after t.loop d f :: s.timers

let cancel_timers s =
  List.iter Loop.cancel s.timers;
  s.timers <- []

(* Each service is a process group of its own. *)
let kill s sig_ =
  match s.pid with
  | Some pid -> ( try Unix.kill (-pid) sig_ with Unix.Unix_error _ -> ())
  | None -> ()

(* Stop a running service that failed: it is restarted when its exit is seen. *)
let fail t s why =
  if s.killed = None then begin
    s.killed <- Some why;
    Log.warn (fun m -> m "%s: %s" s.d.name why);
    kill s Sys.sigkill
  end;
  ignore t

let rec step t =
  if not t.stopping then
    List.iter
      (fun s ->
        if s.state = Cold && List.for_all (fun d -> (find t d).state = Up) s.d.Decl.after then
          launch t s)
      t.svcs

and launch t s =
  let cap_of n = (find t n).cap_text in
  let expand w = Decl.expand cap_of w in
  let all r =
    List.fold_right
      (fun x acc ->
        match (x, acc) with Ok v, Ok l -> Ok (v :: l) | Error e, _ | _, Error e -> Error e)
      r (Ok [])
  in
  match
    ( all (List.map expand s.d.run),
      all (List.map (fun (k, w) -> Result.map (fun v -> (k, v)) (expand w)) s.d.caps) )
  with
  | Error e, _ | _, Error e -> ended t s ("cannot start: " ^ e) ~ok:false
  | Ok argv, Ok caps -> (
      let env =
        Array.of_list
          (List.map (fun (k, v) -> k ^ "=" ^ v) s.d.env
          @ (if caps = [] then [] else [ "CONSORT_CAPS=" ^ String.concat "," (List.map fst caps) ])
          @ List.map (fun (k, v) -> Consort_capenv.var k ^ "=" ^ v) caps
          @ List.filter
              (fun kv ->
                not
                  ((String.length kv > 12 && String.sub kv 0 12 = "CONSORT_CAP_")
                  || (String.length kv > 12 && String.sub kv 0 12 = "CONSORT_CAPS")))
              (Array.to_list (Unix.environment ())))
      in
      let r, w = Unix.pipe ~cloexec:true () in
      let err = log_fd t s in
      let null = Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 in
      let prog = List.hd argv in
      match
        Consort_capproc.Spawn.spawn ~die_with_parent:Sys.sigterm prog (Array.of_list argv) env
          (null, w, err)
      with
      | exception Unix.Unix_error (e, _, _) ->
          List.iter close_quiet [ r; w; err; null ];
          ended t s (Printf.sprintf "cannot start %s: %s" prog (Unix.error_message e)) ~ok:false
      | pid ->
          List.iter close_quiet [ w; null ];
          s.pid <- Some pid;
          s.cap <- None;
          s.named <- [];
          s.killed <- None;
          s.poll_fails <- 0;
          s.started_at <- now t;
          s.out <- Some r;
          Buffer.clear s.line;
          set t s Starting (Printf.sprintf "pid %d" pid);
          Unix.set_nonblock r;
          let buf = Bytes.create 4096 in
          let rec on_out () =
            match Unix.read r buf 0 4096 with
            | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EINTR), _, _) -> ()
            | exception Unix.Unix_error _ -> stop_out ()
            | 0 -> stop_out ()
            | n ->
                if s.d.capability && s.cap = None then begin
                  Buffer.add_subbytes s.line buf 0 n;
                  (* Lines naming other capabilities ([root CAP]) may come before [server CAP]:
                     at most 4 of them, kept for [capabilities]; the log gets a digest of each,
                     never the capability. *)
                  let rec named k =
                    let l = Buffer.contents s.line in
                    match String.index_opt l '\n' with
                    | Some i when k < 4 -> (
                        match String.split_on_char ' ' (String.trim (String.sub l 0 i)) with
                        | [ w; c ] when w <> "server" && Result.is_ok (Cap.of_string c) ->
                            let cap = Result.get_ok (Cap.of_string c) in
                            s.named <- s.named @ [ (w, cap) ];
                            let line = Printf.sprintf "%s %s\n" w (Cap.digest cap) in
                            ignore (Unix.write_substring err line 0 (String.length line));
                            Buffer.clear s.line;
                            Buffer.add_string s.line
                              (String.sub l (i + 1) (String.length l - i - 1));
                            named (k + 1)
                        | _ -> ())
                    | _ -> ()
                  in
                  named 0;
                  let l = Buffer.contents s.line in
                  match String.index_opt l '\n' with
                  | Some i -> (
                      let first = String.sub l 0 i in
                      ignore (Unix.write_substring err l (i + 1) (String.length l - i - 1));
                      match String.split_on_char ' ' (String.trim first) with
                      | [ "server"; c ] -> (
                          match Cap.of_string c with
                          | Ok cap ->
                              s.cap <- Some cap;
                              s.cap_text <- Some c;
                              poll t s
                          | Error _ -> fail t s "its first line is not \"server CAP\"")
                      | _ -> fail t s "its first line is not \"server CAP\"")
                  | None ->
                      if Buffer.length s.line > 4096 then
                        fail t s "its first line is not \"server CAP\""
                end
                else ignore (Unix.write err buf 0 n)
          and stop_out () =
            Loop.unwatch t.loop r;
            close_quiet r;
            close_quiet err;
            s.out <- None
          in
          Loop.watch t.loop r on_out;
          if not s.d.capability then
            after t s
              (Time.of_sec (min 1. s.d.poll))
              (fun () -> if s.state = Starting && s.killed = None then came_up t s);
          after t s (Time.of_sec s.d.start_timeout) (fun () ->
              if s.state = Starting && s.pid <> None then
                fail t s (Printf.sprintf "not up within %g s" s.d.start_timeout)))

and came_up t s =
  s.up_since <- now t;
  set t s Up (match s.pid with Some p -> Printf.sprintf "pid %d" p | None -> "");
  step t

(* std_status on the service's capability, every [poll] seconds while it runs. *)
and poll t s =
  match (s.cap, s.pid) with
  | Some cap, Some pid when (not s.polling) && s.killed = None && not t.stopping ->
      s.polling <- true;
      R.std_status t.node cap (fun r ->
          s.polling <- false;
          if s.pid = Some pid && s.killed = None then begin
            (match r with
            | Ok _ ->
                s.poll_fails <- 0;
                if s.state = Starting then came_up t s
                else if Time.diff (now t) s.up_since >= Time.of_sec 10. then s.failures <- 0
            | Error e ->
                s.poll_fails <- s.poll_fails + 1;
                Log.info (fun m -> m "%s: std_status: %a" s.d.name Rpc.pp_call_error e);
                if s.poll_fails >= 3 then
                  fail t s (Fmt.str "std_status failed 3 times (%a)" Rpc.pp_call_error e));
            after t s (Time.of_sec s.d.poll) (fun () -> if s.pid = Some pid then poll t s)
          end)
  | _ -> ()

(* The service ended (or could not start): restart as its policy says. *)
and ended t s why ~ok =
  cancel_timers s;
  s.pid <- None;
  s.polling <- false;
  if t.stopping then set t s Down why
  else
    let again =
      match s.d.restart with Decl.Always -> true | On_failure -> not ok | Never -> false
    in
    if not again then set t s Down why
    else begin
      if Time.diff (now t) s.up_since >= Time.of_sec 10. && s.state = Up then s.failures <- 0;
      s.failures <- s.failures + 1;
      let lo, hi = s.d.backoff in
      let delay = Float.min hi (lo *. (2. ** float (min 30 (s.failures - 1)))) in
      set t s Restarting (Printf.sprintf "%s; again in %g s" why delay);
      after t s (Time.of_sec delay) (fun () ->
          if s.state = Restarting && not t.stopping then
            if s.held then s.due <- true else restart_now t s)
    end

and restart_now t s =
  s.due <- false;
  s.restarts <- s.restarts + 1;
  s.state <- Cold;
  step t

let reap t =
  List.iter
    (fun s ->
      match s.pid with
      | None -> ()
      | Some pid -> (
          match Unix.waitpid [ Unix.WNOHANG ] pid with
          | exception Unix.Unix_error (Unix.EINTR, _, _) -> ()
          | exception Unix.Unix_error _ -> ended t s "lost" ~ok:false
          | 0, _ -> ()
          | _, st ->
              let how =
                match st with
                | Unix.WEXITED c -> Printf.sprintf "exited with code %d" c
                | Unix.WSIGNALED n -> "killed by " ^ Consort_capproc.Proc_proto.signal_name n
                | Unix.WSTOPPED n -> "stopped by " ^ Consort_capproc.Proc_proto.signal_name n
              in
              let why = match s.killed with Some k -> k ^ ", " ^ how | None -> how in
              ended t s why ~ok:(st = Unix.WEXITED 0 && s.killed = None)))
    t.svcs

let create ?log_dir ?(on_change = fun _ _ _ -> ()) loop node decls =
  let svcs =
    List.map
      (fun d ->
        {
          d;
          state = Cold;
          pid = None;
          cap = None;
          cap_text = None;
          named = [];
          restarts = 0;
          failures = 0;
          poll_fails = 0;
          polling = false;
          up_since = 0;
          started_at = 0;
          why = "";
          out = None;
          line = Buffer.create 64;
          timers = [];
          killed = None;
          held = false;
          due = false;
        })
      decls
  in
  { loop; node; log_dir; on_change; svcs; stopping = false }

let start t =
  let rec tick () =
    reap t;
    if not (t.stopping && List.for_all (fun s -> s.pid = None) t.svcs) then
      ignore (Loop.after t.loop (Time.of_ms 100) tick)
  in
  tick ();
  step t

let states t = List.map (fun s -> (s.d.name, s.state)) t.svcs
let service t name = List.find_opt (fun s -> s.d.name = name) t.svcs
let capability t name = Option.bind (service t name) (fun s -> s.cap)
let pid t name = Option.bind (service t name) (fun s -> s.pid)

let hold t name on =
  match service t name with
  | None -> ()
  | Some s ->
      s.held <- on;
      if (not on) && s.due && s.state = Restarting && not t.stopping then restart_now t s

let status t =
  String.concat "\n"
    (Printf.sprintf "consort boot server: %d services, %d up" (List.length t.svcs)
       (List.length (List.filter (fun s -> s.state = Up) t.svcs))
    :: List.map
         (fun s ->
           Printf.sprintf "%s %s%s restarts %d%s" s.d.name (state_name s.state)
             (match s.pid with Some p -> Printf.sprintf " pid %d" p | None -> "")
             s.restarts
             (if s.why = "" then ""
              else " (" ^ String.map (function '\n' -> ' ' | c -> c) s.why ^ ")"))
         t.svcs)

let capabilities t =
  List.concat_map
    (fun s ->
      (s.d.name, state_name s.state, (if s.d.capability then "server" else "none"), s.cap)
      :: List.map (fun (w, c) -> (s.d.name, state_name s.state, w, Some c)) s.named)
    t.svcs

let stop t =
  t.stopping <- true;
  List.iter
    (fun s ->
      cancel_timers s;
      match s.pid with
      | None -> ()
      | Some pid ->
          kill s Sys.sigterm;
          let rec wait n =
            match Unix.waitpid [ Unix.WNOHANG ] pid with
            | 0, _ when n > 0 ->
                Unix.sleepf 0.05;
                wait (n - 1)
            | 0, _ ->
                kill s Sys.sigkill;
                ignore (Unix.waitpid [] pid)
            | _ -> ()
            | exception Unix.Unix_error _ -> ()
          in
          wait 100;
          s.pid <- None;
          (match s.out with
          | Some fd ->
              Loop.unwatch t.loop fd;
              close_quiet fd;
              s.out <- None
          | None -> ());
          set t s Down "stopped")
    (List.rev t.svcs)
