open Consort_cap
open Consort_crypto
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Rpc_udp
module P = Proc_proto
module E = Consort_capvc.Vc_end
module Fs_proto = Consort_capfs_server.Fs_proto
module Time = Consort.Time

let src = Logs.Src.create "consort.capproc" ~doc:"Consort process server"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  data : string;
  ocamlrun : string;
  max_processes : int;
  max_program : int;
  default_limits : Pd.limits;
  max_limits : Pd.limits;
  keep : Time.t;
  hold : Time.t;
  fetch_timeout : Time.t;
  locate : string list;
  rpc : Rpc.config;
  user : (int * int) option;
  max_tree : int;
  max_files : int;
  namespaces : bool;
  cgroups : bool;
}

let find_ocamlrun () =
  let path = try String.split_on_char ':' (Sys.getenv "PATH") with Not_found -> [] in
  match List.find_opt (fun d -> Sys.file_exists (Filename.concat d "ocamlrun")) path with
  | Some d -> Filename.concat d "ocamlrun"
  | None -> "/usr/bin/ocamlrun"

let default_config ~data =
  {
    data;
    ocamlrun = find_ocamlrun ();
    max_processes = 32;
    max_program = 64 * 1024 * 1024;
    default_limits = { Pd.cpu_ms = 60_000; memory_kib = 1024 * 1024; run_ms = 3_600_000 };
    max_limits = { Pd.cpu_ms = 3_600_000; memory_kib = 4 * 1024 * 1024; run_ms = 86_400_000 };
    keep = Time.of_sec 60.;
    hold = Time.of_sec 10.;
    fetch_timeout = Time.of_sec 60.;
    locate = [];
    rpc = Rpc.default_config;
    user = None;
    max_tree = 64;
    max_files = 256;
    namespaces = true;
    cgroups = true;
  }

type final = { kind : P.kind; code : int; text : string }

type state =
  | Fetching
  | Running of int
  | Ending of Unix.process_status
  (* exited; output still being passed on: what it means is decided once
     every byte of stderr is in (an out-of-memory message may still be in
     the pipe when the child is reaped) *)
  | Done of final

type proc = {
  obj : int;
  secret : Cap.Secret.t;
  pd : Pd.t;
  limits : Pd.limits;
  node : R.node;
  node_locate : string; (* the locate list [node] was opened with *)
  mutable node_kept : bool; (* [node] kept for the next program when this one ended *)
  mutable state : state;
  mutable file : string option;
  mutable waiters : (Time.t * R.request) list;
  mutable killed_for : (P.kind * string) option;
  mutable relays : int; (* output relays still passing bytes on *)
  mutable tail : string; (* the end of stderr *)
  mutable stdin_fd : Unix.file_descr option;
  mutable timers : Loop.timer list;
  mutable ended_at : Time.t;
  mutable ends : E.t list;
  started : float;
  mutable cg : Cgroup.prog option;
  mutable namespaced : bool;
  mutable status_fd : Unix.file_descr option;
  mutable workdir : string option;
}

(* A program read from a file server: kept by its content's digest, found by
   the capability it was read with (files are immutable; a capability for
   another object, or one the file server no longer honours, is another key
   or fails the size request each start makes). *)
type cached = { path : string; size : int; mutable used : float }

type t = {
  config : config;
  loop : Loop.t;
  snode : R.node;
  key : Port.Key.t;
  port : Port.t;
  magic : string;
  server_secret : Cap.Secret.t;
  procs : (int, proc) Hashtbl.t;
  mutable next : int;
  cgroups : Cgroup.t;
  mutable leftover : Cgroup.prog list; (* cgroups still busy when their program ended *)
  mutable pool : Cgroup.prog list; (* emptied cgroups for the next spares, at most [pool_max] *)
  relay_buf : Bytes.t;
      (* what every output relay reads into (copied out at once): one for the server, not two
         of 60 KiB per program allocated in the major heap *)
  cache : (string, cached) Hashtbl.t;
  fetcher : R.node; (* every fetch: its sessions with the file servers are kept *)
  mutable removers : (int * string) list;
      (* children emptying a working directory as its user; then it is removed *)
  mutable spare : spare option; (* the next program's confined child, made beforehand *)
  mutable spares : int;
  mutable zygote : Spawn.zygote option; (* makes the spares *)
  mutable coming : coming option; (* a spare asked of the zygote, its answer not yet read *)
  mutable kept_relays : (string * R.node * Loop.timer) list;
      (* nodes of ended programs, by their locate list, kept for the next program of the same
         caller: their sessions with its circuits' port open (no locate, no handshake) *)
}

(* A spare (Spawn.prepare) in cgroups of its own: the next program's. *)
and spare = { sp : Spawn.spare; scg : Cgroup.prog option }
and coming = { complete : unit -> Spawn.spare; ccg : Cgroup.prog option }

let server_cap t = Cap.owner t.port ~obj:0 t.server_secret

let running t =
  Hashtbl.fold
    (fun _ p n -> match p.state with Running _ | Fetching | Ending _ -> n + 1 | Done _ -> n)
    t.procs 0

let now t = Loop.now t.loop

let read_all path =
  let ic = open_in_bin path in
  Fun.protect
    ~finally:(fun () -> close_in_noerr ic)
    (fun () -> really_input_string ic (in_channel_length ic))

let one_line s = String.map (function '\n' | '\r' -> ' ' | c -> c) s

(* The bytecode magic number that the local ocamlrun expects. *)
let read_magic path =
  match read_all path with
  | exception Sys_error e -> Error e
  | s -> (
      let pre = "Caml1999X" in
      let rec find i =
        if i + 12 > String.length s then None
        else if
          String.sub s i 9 = pre
          && String.for_all (function '0' .. '9' -> true | _ -> false) (String.sub s (i + 9) 3)
        then Some (String.sub s i 12)
        else match String.index_from_opt s (i + 1) 'C' with Some j -> find j | None -> None
      in
      match String.index_opt s 'C' with
      | None -> Error (path ^ " holds no bytecode magic number")
      | Some i -> (
          match find i with
          | Some m -> Ok m
          | None -> Error (path ^ " holds no bytecode magic number")))

let check_bytecode t file =
  match Unix.openfile file [ Unix.O_RDONLY ] 0 with
  | exception Unix.Unix_error (e, _, _) -> Error (Unix.error_message e)
  | fd ->
      Fun.protect
        ~finally:(fun () -> Unix.close fd)
        (fun () ->
          let size = (Unix.fstat fd).Unix.st_size in
          if size < 16 then Error "not an OCaml bytecode executable (too short)"
          else begin
            ignore (Unix.lseek fd (size - 16) Unix.SEEK_SET);
            let b = Bytes.create 16 in
            let n = Unix.read fd b 0 16 in
            let trailer = Bytes.sub_string b 0 n in
            if n < 16 then Error "not an OCaml bytecode executable"
            else
              let magic = String.sub trailer 4 12 in
              let sections = Int32.to_int (Bytes.get_int32_be b 0) in
              if String.length magic = 12 && String.sub magic 0 9 = "Caml1999X" && magic <> t.magic
              then
                Error
                  (Printf.sprintf
                     "bytecode for another OCaml runtime (%s; the local ocamlrun reads %s)" magic
                     t.magic)
              else if magic <> t.magic then
                Error "not an OCaml bytecode executable (no bytecode trailer)"
              else if sections <= 0 || sections > 64 then
                Error "not an OCaml bytecode executable (bad section count)"
              else Ok ()
          end)

let final_kind_text f = f.text

let answer_wait p (r : R.request) =
  match p.state with
  | Done f -> R.putrep r (Header.reply ~offset:(P.kind_to_int f.kind) ~extra:f.code `Ok) f.text
  | _ -> R.putrep r (Header.reply `Notnow) "still running"

let close_quiet fd = try Unix.close fd with Unix.Unix_error _ -> ()

(* A tree the program may have left: removed as root only when nothing of
   the program can still be running in it (a PID namespace or a cgroup held
   it, and it was killed); otherwise by a child running as the program's
   user, so that a symbolic link planted by an escaped process leads
   nowhere. *)
let rec remove_tree path =
  match Unix.lstat path with
  | exception Unix.Unix_error _ -> ()
  | { Unix.st_kind = Unix.S_DIR; _ } -> (
      (try Array.iter (fun f -> remove_tree (Filename.concat path f)) (Sys.readdir path)
       with Sys_error _ -> ());
      try Unix.rmdir path with Unix.Unix_error _ -> ())
  | _ -> ( try Unix.unlink path with Unix.Unix_error _ -> ())

let remove_workdir ?(contained = false) t p =
  match p.workdir with
  | None -> ()
  | Some d -> (
      p.workdir <- None;
      match Unix.rmdir d with
      | () -> ()
      | exception Unix.Unix_error _ -> (
          if contained || p.namespaced then remove_tree d
          else
            match t.config.user with
            | None -> remove_tree d
            | Some (uid, gid) -> (
                let null = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
                Fun.protect ~finally:(fun () -> close_quiet null) @@ fun () ->
                match
                  Spawn.spawn_confined
                    {
                      Spawn.uid;
                      gid;
                      (* entered as root: the user cannot reach it by its path *)
                      cwd = d;
                      cgroups = [];
                      nproc = 0;
                      nofile = 0;
                      pid_namespace = false;
                    }
                    "/usr/bin/find"
                    [| "find"; "."; "-xdev"; "-mindepth"; "1"; "-delete" |]
                    [| "PATH=/usr/bin:/bin" |] (null, null, null)
                with
                | exception (Unix.Unix_error _ | Failure _) ->
                    Log.warn (fun m -> m "cannot empty %s" d)
                | r -> t.removers <- (r.Spawn.pid, d) :: t.removers)))

let hung_up = "killed: its caller hung up"

(* What the end of the program means, told with the limit's name. *)
let classify t p st =
  let l = p.limits in
  let oom =
    let low = String.lowercase_ascii p.tail in
    let has sub =
      let n = String.length sub and m = String.length low in
      let rec go i = i + n <= m && (String.sub low i n = sub || go (i + 1)) in
      go 0
    in
    has "out of memory" || has "out_of_memory"
  in
  ignore t;
  let f =
    match (p.killed_for, st) with
    | Some (_, why), Unix.WSIGNALED s when s = Sys.sighup && why = hung_up ->
        (* it died of the SIGHUP before the kill that follows it *)
        { kind = Signaled; code = P.signal_to_system s; text = "killed by " ^ P.signal_name s }
    | Some (kind, why), _ ->
        { kind; code = Proc_proto.signal_to_system Sys.sigkill; text = "stopped: " ^ why }
    | None, Unix.WSIGNALED s when s = Sys.sigxcpu ->
        {
          kind = Limit;
          code = P.signal_to_system s;
          text = Printf.sprintf "stopped: cpu time limit (%d ms) exceeded" l.cpu_ms;
        }
    | None, Unix.WSIGNALED s ->
        { kind = Signaled; code = P.signal_to_system s; text = "killed by " ^ P.signal_name s }
    | None, Unix.WSTOPPED s ->
        { kind = Signaled; code = P.signal_to_system s; text = "stopped by " ^ P.signal_name s }
    | None, Unix.WEXITED 2 when oom ->
        {
          kind = Limit;
          code = 2;
          text = Printf.sprintf "stopped: memory limit (%d KiB) exceeded" l.memory_kib;
        }
    | None, Unix.WEXITED c ->
        { kind = Exited; code = c; text = Printf.sprintf "exited with code %d" c }
  in
  match p.cg with
  | Some cg when Cgroup.pids_refused cg > 0 && f.kind <> Limit ->
      { f with text = Printf.sprintf "%s (process limit %d reached)" f.text t.config.max_tree }
  | _ -> f

(* At most [max_kept_relays] nodes are kept, each for [relay_idle] at most. *)
let max_kept_relays = 8
let relay_idle = Time.of_sec 30.

(* The node a program's circuits were reached with, kept for the next program whose caller is
   located the same way (a long-running client such as [consort cap agent] serves every start's
   circuits on one port). *)
let keep_relay t p =
  if not p.node_kept then begin
    p.node_kept <- true;
    let rec close_oldest = function
      | [] -> []
      | [ (_, n, tm) ] ->
          Loop.cancel tm;
          R.close n;
          []
      | x :: rest -> x :: close_oldest rest
    in
    if List.length t.kept_relays >= max_kept_relays then t.kept_relays <- close_oldest t.kept_relays;
    let node = p.node in
    let tm =
      Loop.after t.loop relay_idle (fun () ->
          t.kept_relays <- List.filter (fun (_, n, _) -> n != node) t.kept_relays;
          R.close node)
    in
    t.kept_relays <- (p.node_locate, node, tm) :: t.kept_relays
  end

(* A kept node for [locate], taken out of [t.kept_relays]. *)
let take_relay t locate =
  match List.find_opt (fun (l, _, _) -> l = locate) t.kept_relays with
  | None -> None
  | Some (_, n, tm) ->
      Loop.cancel tm;
      t.kept_relays <- List.filter (fun (_, n', _) -> n' != n) t.kept_relays;
      Some n

(* Emptied cgroups kept for the next spares instead of a rmdir and mkdir each: at most this many. *)
let pool_max = 4

(* The cgroup of a program that ended: every member killed; kept for a next program only once
   it is empty (a process the kill has not ended yet, or a killed one not yet reaped, keeps it
   out), else removed (or left to remove when it is empty). True if nothing of the program is
   left in it. *)
let release_cgroup t cg =
  Cgroup.kill cg;
  if Cgroup.empty cg && List.length t.pool < pool_max then begin
    t.pool <- cg :: t.pool;
    true
  end
  else
    let gone = Cgroup.remove cg in
    if not gone then t.leftover <- cg :: t.leftover;
    gone

let finish t p st =
  Log.debug (fun m ->
      m "process %d: ended %.2f ms after ps_exec" p.obj
        ((Unix.gettimeofday () -. p.started) *. 1000.));
  let f = classify t p st in
  p.state <- Done f;
  p.ended_at <- now t;
  List.iter Loop.cancel p.timers;
  p.timers <- [];
  (* The waiters first: what follows may wait for the kernel's cgroup lock
     (held through an RCU grace period while a spare joins its v1 cgroups). *)
  let ws = p.waiters in
  p.waiters <- [];
  List.iter (fun (_, r) -> answer_wait p r) ws;
  keep_relay t p;
  (* A cgroup killed and removed held every process of the tree: none is
     left to race the removal of its directory. *)
  let emptied =
    match p.cg with
    | Some cg ->
        p.cg <- None;
        release_cgroup t cg
    | None -> false
  in
  remove_workdir ~contained:emptied t p;
  Log.info (fun m -> m "process %d: %s" p.obj f.text)

(* Output relays done and the child reaped: the process has ended. *)
let maybe_done t p = match p.state with Ending st when p.relays = 0 -> finish t p st | _ -> ()

let relay_done t p =
  p.relays <- p.relays - 1;
  maybe_done t p

(* Pass the bytes of [fd] (a pipe from the child) on to the circuit end [e]
   (or nowhere, if it hung up), keeping the last 512 bytes in [tail]. *)
let relay_out t p fd e ~tail =
  Unix.set_nonblock fd;
  let buf = t.relay_buf in
  let finished = ref false in
  let stop () =
    if not !finished then begin
      finished := true;
      Loop.unwatch t.loop fd;
      close_quiet fd;
      relay_done t p
    end
  in
  let rec on_readable () =
    match Unix.read fd buf 0 (Bytes.length buf) with
    | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> ()
    | exception Unix.Unix_error _ -> stop ()
    | 0 -> (
        match e with
        | Some e when E.hung e = None ->
            Loop.unwatch t.loop fd;
            E.close e (fun _ -> stop ())
        | _ -> stop ())
    | n -> (
        let s = Bytes.sub_string buf 0 n in
        if tail then begin
          let all = p.tail ^ s in
          p.tail <-
            (if String.length all > 512 then String.sub all (String.length all - 512) 512 else all)
        end;
        match e with
        | Some e when E.hung e = None ->
            Loop.unwatch t.loop fd;
            E.write e s (fun _ -> if not !finished then Loop.watch t.loop fd on_readable)
        | _ -> () (* nobody to pass it to: drained so the child does not block *))
  in
  Loop.watch t.loop fd on_readable

(* Pass what the circuit end [e] reads on to the child's stdin [fd]. *)
let relay_in t p fd e =
  Unix.set_nonblock fd;
  let closed = ref false in
  let close () =
    if not !closed then begin
      closed := true;
      p.stdin_fd <- None;
      close_quiet fd
    end
  in
  let signal s =
    match p.state with
    | Running pid -> ( try Unix.kill (-pid) s with Unix.Unix_error _ -> ())
    | _ -> ()
  in
  let rec write s off k =
    if !closed then ()
    else
      match Unix.write_substring fd s off (String.length s - off) with
      | n when off + n >= String.length s -> k ()
      | n -> write s (off + n) k
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) ->
          ignore (Loop.after t.loop (Time.of_ms 10) (fun () -> write s off k))
      | exception Unix.Unix_error _ -> close () (* the child closed its stdin *)
  in
  let rec next () =
    match p.state with
    | Done _ | Ending _ -> close ()
    | _ ->
        if not !closed then
          E.read e (function
            | `Data d -> write d 0 next
            | `Eof -> close ()
            | `Intr ->
                signal Sys.sigint;
                next ()
            | `Hangup _ ->
                (* The signal first: pending before the end of file is
                   there to read, it is what the program meets. *)
                signal Sys.sighup;
                close ())
  in
  next ()

(* The environment holds no capability: a program's capabilities are read
   from descriptor 3 (see [caps_text]), so that no other process can read
   them in /proc/PID/environ. *)
let env_of p ~locate =
  let keep v = match Sys.getenv_opt v with Some x -> [ v ^ "=" ^ x ] | None -> [] in
  let names = List.map fst p.pd.Pd.caps in
  Array.of_list
    ([
       "PATH=/usr/local/bin:/usr/bin:/bin";
       "CONSORT_CAPS=" ^ String.concat "," names;
       "CONSORT_CAPS_FD=3";
     ]
    @ (if locate = [] then [] else [ "CONSORT_LOCATE=" ^ String.concat "," locate ])
    @ keep "CAML_LD_LIBRARY_PATH" @ keep "CONSORT_MULTICAST")

let caps_text t p =
  let self = Cap.restrict_with_secret p.secret (Cap.owner t.port ~obj:p.obj p.secret) Rights.read in
  String.concat ""
    (List.map (fun (n, c) -> n ^ " " ^ Cap.to_string c ^ "\n") p.pd.Pd.caps
    @ [ Consort_capenv.self_name ^ " " ^ Cap.to_string self ^ "\n" ])

(* Every process of the program's tree: its group, its namespace (its init
   killed), its cgroup. *)
let kill_tree p pid =
  (try Unix.kill (-pid) Sys.sigkill with Unix.Unix_error _ -> ());
  (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
  Option.iter Cgroup.kill p.cg

(* The wait status the namespace's init reported (4 bytes, little-endian),
   if it did. *)
let reported_status p =
  match p.status_fd with
  | None -> None
  | Some fd ->
      p.status_fd <- None;
      let b = Bytes.create 4 in
      let n = try Unix.read fd b 0 4 with Unix.Unix_error _ -> 0 in
      close_quiet fd;
      if n <> 4 then None
      else
        let w = Int32.to_int (Bytes.get_int32_le b 0) land 0xffff in
        let sg = w land 0x7f in
        if sg = 0 then Some (Unix.WEXITED ((w lsr 8) land 0xff))
        else if sg = 0x7f then Some (Unix.WSTOPPED (P.signal_of_system ((w lsr 8) land 0xff)))
        else Some (Unix.WSIGNALED (P.signal_of_system sg))

let reap t p pid =
  match Unix.waitpid [ Unix.WNOHANG ] pid with
  | exception Unix.Unix_error (Unix.EINTR, _, _) -> ()
  | exception Unix.Unix_error (e, _, _) ->
      p.killed_for <- Some (P.Failed, "lost: " ^ Unix.error_message e);
      p.state <- Ending (Unix.WEXITED 0);
      maybe_done t p
  | 0, _ -> ()
  | _, st ->
      Log.debug (fun m ->
          m "process %d: reaped %.2f ms after ps_exec" p.obj
            ((Unix.gettimeofday () -. p.started) *. 1000.));
      let st = if p.namespaced then Option.value (reported_status p) ~default:st else st in
      (* Whatever the tree left behind goes too. *)
      kill_tree p pid;
      (match p.stdin_fd with
      | Some fd ->
          close_quiet fd;
          p.stdin_fd <- None
      | None -> ());
      p.state <- Ending st;
      (* Output still held by a descendant is given 2 s. *)
      p.timers <-
        Loop.after t.loop (Time.of_sec 2.) (fun () ->
            if p.relays > 0 then begin
              p.relays <- 0;
              maybe_done t p
            end)
        :: p.timers;
      maybe_done t p

let kill_group_of p s =
  match p.state with
  | Running pid -> ( try Unix.kill (-pid) s with Unix.Unix_error _ -> ())
  | _ -> ()

let stop_for t p kind why =
  match p.state with
  | Running pid ->
      if p.killed_for = None then p.killed_for <- Some (kind, why);
      kill_tree p pid;
      ignore t
  | _ -> ()

(* CPU time of a process group, from /proc (the fallback without a cgroup):
   every live member's, and what the leader collected from the children it
   waited for. A member that left the group (setsid) is not counted. *)
let group_cpu_ms pgid =
  let tick =
    10
    (* ms: USER_HZ is 100 on Linux *)
  in
  let fields pid =
    match open_in_bin (Printf.sprintf "/proc/%s/stat" pid) with
    | exception Sys_error _ -> None
    | ic -> (
        let l = try input_line ic with End_of_file -> "" in
        close_in_noerr ic;
        match String.rindex_opt l ')' with
        | None -> None
        | Some i ->
            let f = String.split_on_char ' ' (String.sub l (i + 2) (String.length l - i - 2)) in
            let a = Array.of_list f in
            if Array.length a < 15 then None
            else
              let n k = Option.value ~default:0 (int_of_string_opt a.(k)) in
              (* after the name: state 0, ppid 1, pgrp 2, ..., utime 11, stime 12, cutime 13, cstime 14 *)
              Some (n 2, n 11 + n 12, n 13 + n 14))
  in
  let total = ref 0 in
  (try
     Array.iter
       (fun d ->
         if d <> "" && d.[0] >= '0' && d.[0] <= '9' then
           match fields d with
           | Some (g, own, children) when g = pgid ->
               total := !total + own + if d = string_of_int pgid then children else 0
           | _ -> ())
       (Sys.readdir "/proc")
   with Sys_error _ -> ());
  !total * tick

(* Spares. A start hands its program to the spare made beforehand (or to one made now), and
   the next is made once the program runs: the slow part of a confined start (joining the v1
   cgroups, the clone, the namespace's /proc) is then out of the way of the next start. A spare
   serves one program, in cgroups made for it. *)
let drop_cgroup t c =
  Cgroup.kill c;
  if not (Cgroup.remove c) then t.leftover <- c :: t.leftover

(* The cgroups of a new spare: an emptied one from the pool, checked empty again and its limits
   and counters set afresh ([Cgroup.renew]; one that fails is dropped: killed and removed), else
   new ones. *)
let rec spare_cgroup t =
  match t.pool with
  | c :: rest ->
      t.pool <- rest;
      if Cgroup.renew c ~nproc:t.config.max_tree then Ok c
      else begin
        drop_cgroup t c;
        spare_cgroup t
      end
  | [] ->
      let n = t.spares in
      t.spares <- n + 1;
      Cgroup.make t.cgroups (Printf.sprintf "spare-%d" n) ~nproc:t.config.max_tree

(* Asks for a spare: its cgroups made, the zygote asked; [complete] reads the answer. *)
let ask_spare t =
  let cg = if not t.config.cgroups then Ok None else Result.map Option.some (spare_cgroup t) in
  match cg with
  | Error e -> Error e
  | Ok ccg -> (
      match
        Spawn.request ?zygote:t.zygote ~die_with_parent:Sys.sigkill
          ~cgroups:(Option.fold ~none:[] ~some:(fun c -> c.Cgroup.procs) ccg)
          ~pid_namespace:t.config.namespaces ()
      with
      | exception Unix.Unix_error (e, _, _) ->
          Option.iter (drop_cgroup t) ccg;
          Error ("cannot start: " ^ Unix.error_message e)
      | complete -> Ok { complete; ccg })

let complete_spare t c =
  match c.complete () with
  | exception Unix.Unix_error (e, _, _) ->
      Option.iter (drop_cgroup t) c.ccg;
      Error ("cannot start: " ^ Unix.error_message e)
  | sp -> Ok { sp; scg = c.ccg }

let make_spare t = Result.bind (ask_spare t) (complete_spare t)

let discard_spare t s =
  Spawn.discard s.sp;
  Option.iter (drop_cgroup t) s.scg

(* The zygote's answer to the spare asked for, read when it is there (or when a start needs the
   spare at once). *)
let settle t =
  match t.coming with
  | None -> ()
  | Some c -> (
      t.coming <- None;
      Option.iter (fun z -> Loop.unwatch t.loop (Spawn.zygote_fd z)) t.zygote;
      match complete_spare t c with
      | Ok s -> t.spare <- Some s
      | Error e -> Log.warn (fun m -> m "no spare for the next program: %s" e))

(* The spare made beforehand if it still waits (one that died is replaced), else a new one. *)
let take_spare t =
  settle t;
  match t.spare with
  | Some s when Spawn.spare_alive s.sp ->
      t.spare <- None;
      Ok s
  | Some s ->
      t.spare <- None;
      discard_spare t s;
      make_spare t
  | None -> make_spare t

(* The next spare, asked for without waiting: the server's loop goes on while the zygote makes
   it. *)
let refill t =
  if t.spare = None && t.coming = None then
    match ask_spare t with
    | Error e -> Log.warn (fun m -> m "no spare for the next program: %s" e)
    | Ok c -> (
        t.coming <- Some c;
        match t.zygote with
        | Some z when not (Spawn.zygote_gone z) ->
            Loop.watch t.loop (Spawn.zygote_fd z) (fun () -> settle t)
        | _ -> settle t)

let start t p file ~locate =
  let l = p.limits in
  let pipe () = Unix.pipe ~cloexec:true () in
  let end_of name = Pd.cap p.pd name in
  let trans ~idempotent h d k = R.trans p.node ~idempotent h d k in
  let ends = Hashtbl.create 3 in
  let end_for c =
    let k = Cap.to_raw c in
    match Hashtbl.find_opt ends k with
    | Some e -> e
    | None ->
        let e = E.create trans c in
        Hashtbl.replace ends k e;
        p.ends <- e :: p.ends;
        e
  in
  let devnull flags = Unix.openfile "/dev/null" (Unix.O_CLOEXEC :: flags) 0 in
  match Unix.openfile file [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 with
  | exception Unix.Unix_error (e, _, _) -> Error ("cannot open the program: " ^ Unix.error_message e)
  | prog_fd -> (
      (* A private working directory, the program's user's, in DATA/run (which
     only the server can enter). *)
      let workdir =
        Filename.concat
          (Filename.concat t.config.data "run")
          (Printf.sprintf "%d-%s" p.obj
             (Crypto.random 6 |> Base64.encode_string ~alphabet:Base64.uri_safe_alphabet ~pad:false))
      in
      match
        Unix.mkdir workdir 0o700;
        p.workdir <- Some workdir;
        Option.iter (fun (uid, gid) -> Unix.chown workdir uid gid) t.config.user
      with
      | exception Unix.Unix_error (e, _, _) ->
          close_quiet prog_fd;
          remove_workdir t p;
          Error ("cannot make the working directory: " ^ Unix.error_message e)
      | () -> (
          let spare = take_spare t in
          let cg = Result.map (fun s -> s.scg) spare in
          match cg with
          | Error e ->
              close_quiet prog_fd;
              remove_workdir t p;
              Error e
          | Ok cg -> (
              let spare = Result.get_ok spare in
              p.cg <- cg;
              let in_r, in_w =
                match end_of "stdin" with
                | Some _ -> pipe ()
                | None -> (devnull [ Unix.O_RDONLY ], devnull [ Unix.O_WRONLY ])
              in
              let out_r, out_w = pipe () and err_r, err_w = pipe () in
              let caps_r, caps_w = pipe () in
              let text = caps_text t p in
              ignore (Unix.write_substring caps_w text 0 (String.length text));
              close_quiet caps_w;
              let argv = Array.of_list (t.config.ocamlrun :: "/proc/self/fd/4" :: p.pd.Pd.args) in
              let uid, gid = Option.value t.config.user ~default:(-1, -1) in
              let limits_pids = Option.fold ~none:false ~some:Cgroup.limits_pids cg in
              let conf =
                {
                  Spawn.uid;
                  gid;
                  cwd = workdir;
                  cgroups = Option.fold ~none:[] ~some:(fun c -> c.Cgroup.procs) cg;
                  (* RLIMIT_NPROC counts every process of the user: only where no
                 pids cgroup bounds the tree. *)
                  nproc = (if limits_pids then 0 else t.config.max_tree);
                  nofile = t.config.max_files;
                  pid_namespace = t.config.namespaces;
                }
              in
              let fail_start why =
                List.iter close_quiet [ in_r; in_w; out_r; out_w; err_r; err_w; caps_r; prog_fd ];
                Option.iter
                  (fun c ->
                    Cgroup.kill c;
                    ignore (Cgroup.remove c))
                  cg;
                p.cg <- None;
                remove_workdir t p;
                Error ("cannot start: " ^ why)
              in
              match
                Spawn.start_spare
                  ~cpu_seconds:((l.cpu_ms + 999) / 1000)
                  ~address_space:(l.memory_kib * 1024) ~die_with_parent:Sys.sigkill ~caps_fd:caps_r
                  ~program_fd:prog_fd spare.sp conf t.config.ocamlrun argv (env_of p ~locate)
                  (in_r, out_w, err_w)
              with
              | exception Unix.Unix_error (e, _, _) -> fail_start (Unix.error_message e)
              | exception Failure why -> fail_start why
              | started ->
                  let pid = started.Spawn.pid in
                  p.namespaced <- started.namespace;
                  p.status_fd <- started.status;
                  List.iter close_quiet [ in_r; out_w; err_w; caps_r; prog_fd ];
                  p.state <- Running pid;
                  (match end_of "stdin" with
                  | Some c ->
                      p.stdin_fd <- Some in_w;
                      relay_in t p in_w (end_for c)
                  | None -> close_quiet in_w);
                  p.relays <- 2;
                  relay_out t p out_r (Option.map end_for (end_of "stdout")) ~tail:false;
                  relay_out t p err_r (Option.map end_for (end_of "stderr")) ~tail:true;
                  let rec poll () =
                    match p.state with
                    | Running pid ->
                        reap t p pid;
                        (* SIGCHLD wakes the loop (see [create]); this poll is the fallback. *)
                        p.timers <- Loop.after t.loop (Time.of_ms 200) poll :: p.timers
                    | _ -> ()
                  in
                  poll ();
                  (* The CPU time of the whole tree (RLIMIT_CPU counts each
                 process alone): its cgroup's, or its process group's. *)
                  let rec cpu_watch () =
                    match p.state with
                    | Running pid ->
                        let used_ms =
                          match Option.bind p.cg Cgroup.cpu_usec with
                          | Some us -> us / 1000
                          | None -> group_cpu_ms pid
                        in
                        if used_ms > l.cpu_ms then
                          stop_for t p P.Limit
                            (Printf.sprintf "cpu time limit (%d ms) exceeded" l.cpu_ms)
                        else
                          (* a scan of /proc costs more than a cgroup's file *)
                          let every =
                            if Option.fold ~none:false ~some:Cgroup.counts_cpu p.cg then 100
                            else 500
                          in
                          p.timers <- Loop.after t.loop (Time.of_ms every) cpu_watch :: p.timers
                    | _ -> ()
                  in
                  p.timers <- Loop.after t.loop (Time.of_ms 100) cpu_watch :: p.timers;
                  (* The caller's circuits: kept alive; when one hangs up (the
                 caller died or hung up), the program gets SIGHUP, as on a
                 terminal, and what still runs 2 s later is killed. *)
                  let hup_sent = ref false in
                  let rec touch () =
                    match p.state with
                    | Running _ | Ending _ ->
                        if (not !hup_sent) && List.exists (fun e -> E.hung e <> None) p.ends then begin
                          hup_sent := true;
                          kill_group_of p Sys.sighup;
                          p.timers <-
                            Loop.after t.loop (Time.of_sec 2.) (fun () ->
                                stop_for t p P.Killed hung_up)
                            :: p.timers
                        end;
                        List.iter E.touch p.ends;
                        p.timers <- Loop.after t.loop (Time.of_sec 3.) touch :: p.timers
                    | _ -> ()
                  in
                  p.timers <- Loop.after t.loop (Time.of_sec 3.) touch :: p.timers;
                  if l.run_ms > 0 then
                    p.timers <-
                      Loop.after t.loop (Time.of_ms l.run_ms) (fun () ->
                          stop_for t p P.Limit
                            (Printf.sprintf "run time limit (%d ms) exceeded" l.run_ms))
                      :: p.timers;
                  Ok ())))

let cache_dir t = Filename.concat t.config.data "cache"
let max_cached = 32

let cache_add t key path size =
  if Hashtbl.length t.cache >= max_cached then begin
    (* The least recently used goes; a program already started holds its
       file open. *)
    match
      Hashtbl.fold
        (fun k c acc ->
          match acc with Some (_, c') when c'.used <= c.used -> acc | _ -> Some (k, c))
        t.cache None
    with
    | Some (k, c) -> (
        Hashtbl.remove t.cache k;
        if not (Hashtbl.fold (fun _ c' b -> b || c'.path = c.path) t.cache false) then
          try Sys.remove c.path with Sys_error _ -> ())
    | None -> ()
  end;
  Hashtbl.replace t.cache key { path; size; used = Unix.gettimeofday () }

(* Reads the program from its file server, one read after the other, into
   DATA/cache/DIGEST (0444, in a directory only the server enters); a
   program already there (same capability, same size) is not read again. *)
let fetch t p k =
  (* The server's own client node, its sessions kept from one program to the
     next, unless the descriptor names where to locate ports. *)
  let node = if p.pd.Pd.hints = [] then t.fetcher else p.node in
  let trans h d k = R.trans node ~idempotent:true h d k in
  let prog = p.pd.Pd.program in
  let key = Cap.to_raw prog in
  let fail m = k (Error m) in
  trans (Header.request prog Fs_proto.bs_size) "" (function
    | Error e -> fail ("cannot reach the program's file server: " ^ Rpc_error.to_string e)
    | Ok (h, _) when h.Header.status <> `Ok ->
        fail ("the program's file server refused: " ^ Status.to_string h.status)
    | Ok (h, _) -> (
        let size = h.Header.size in
        match Hashtbl.find_opt t.cache key with
        | Some c when c.size = size && Sys.file_exists c.path ->
            c.used <- Unix.gettimeofday ();
            k (Ok c.path)
        | _ ->
            if size > t.config.max_program then
              fail (Printf.sprintf "the program is larger than %d bytes" t.config.max_program)
            else begin
              let file =
                Filename.concat (cache_dir t)
                  (Printf.sprintf "part-%d-%s" p.obj
                     (Crypto.random 6
                     |> Base64.encode_string ~alphabet:Base64.uri_safe_alphabet ~pad:false))
              in
              match
                Unix.openfile file
                  [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_EXCL; Unix.O_CLOEXEC ]
                  0o400
              with
              | exception Unix.Unix_error (e, _, _) ->
                  fail ("cannot store the program: " ^ Unix.error_message e)
              | fd ->
                  p.file <- Some file;
                  let done_ () =
                    Unix.close fd;
                    match Sha256.to_hex (Sha256.file_fast file) with
                    | exception e -> fail ("cannot store the program: " ^ Printexc.to_string e)
                    | digest -> (
                        let final = Filename.concat (cache_dir t) (digest ^ ".byte") in
                        match
                          Unix.chmod file 0o444;
                          Unix.rename file final
                        with
                        | exception Unix.Unix_error (e, _, _) ->
                            fail ("cannot store the program: " ^ Unix.error_message e)
                        | () -> (
                            p.file <- None;
                            match check_bytecode t final with
                            | Error why ->
                                (try Sys.remove final with Sys_error _ -> ());
                                k (Error ("bytecode: " ^ why))
                            | Ok () ->
                                cache_add t key final size;
                                k (Ok final)))
                  in
                  let rec read off =
                    if p.state <> Fetching || not (Hashtbl.mem t.procs p.obj) then
                      try Unix.close fd with Unix.Unix_error _ -> ()
                      (* given up (see [fetch_timeout]) *)
                    else if off >= size then done_ ()
                    else
                      let len = min Fs_proto.max_read (size - off) in
                      trans (Header.request ~offset:off ~size:len prog Fs_proto.bs_read) ""
                        (function
                        | Error e ->
                            Unix.close fd;
                            fail ("the program's file server fell silent: " ^ Rpc_error.to_string e)
                        | Ok (h, _) when h.Header.status <> `Ok ->
                            Unix.close fd;
                            fail ("the program's file server refused: " ^ Status.to_string h.status)
                        | Ok (_, d) when String.length d = 0 || String.length d > len ->
                            Unix.close fd;
                            fail "the program's file server sent a bad read"
                        | Ok (_, d) -> (
                            match Unix.write_substring fd d 0 (String.length d) with
                            | exception Unix.Unix_error (e, _, _) ->
                                Unix.close fd;
                                fail ("cannot store the program: " ^ Unix.error_message e)
                            | _ -> read (off + String.length d)))
                  in
                  read 0
            end))

let clamp ~default ~max v = if v <= 0 then default else min v max

let forget t p =
  Hashtbl.remove t.procs p.obj;
  (match p.file with Some f -> ( try Sys.remove f with Sys_error _ -> ()) | None -> ());
  if not p.node_kept then R.close p.node

let exec t r =
  let refuse st why = R.putrep r (Header.reply st) (one_line why) in
  match Pd.decode (R.data r) with
  | Error e -> refuse `Argbad e
  | Ok pd when pd.Pd.arch <> Pd.arch_bytecode ->
      refuse `Argbad
        (Printf.sprintf "architecture %S is not served here (only %s)" pd.Pd.arch Pd.arch_bytecode)
  | Ok pd -> (
      (* Room: forget the oldest ended processes first. *)
      if Hashtbl.length t.procs >= t.config.max_processes then begin
        let ended =
          Hashtbl.fold
            (fun _ p acc -> match p.state with Done _ -> p :: acc | _ -> acc)
            t.procs []
        in
        match List.sort (fun a b -> compare a.ended_at b.ended_at) ended with
        | p :: _ -> forget t p
        | [] -> ()
      end;
      if Hashtbl.length t.procs >= t.config.max_processes then
        refuse `Nospace (Printf.sprintf "%d processes already" t.config.max_processes)
      else
        let bad_hint =
          List.find_opt (fun h -> Result.is_error (Udp.address_of_string h)) pd.Pd.hints
        in
        match bad_hint with
        | Some h -> refuse `Argbad ("bad locate hint " ^ h)
        | None -> (
            let locate = (Udp.address_to_string (R.client r) :: pd.Pd.hints) @ t.config.locate in
            let node_locate = String.concat "," locate in
            let node =
              match take_relay t node_locate with
              | Some n -> Ok n
              | None -> R.open_node ~config:t.config.rpc ~locate:node_locate t.loop
            in
            match node with
            | Error e -> refuse `Syserr e
            | Ok node ->
                let d = t.config.default_limits and m = t.config.max_limits in
                let limits =
                  {
                    Pd.cpu_ms = clamp ~default:d.cpu_ms ~max:m.cpu_ms pd.limits.cpu_ms;
                    memory_kib = clamp ~default:d.memory_kib ~max:m.memory_kib pd.limits.memory_kib;
                    run_ms = clamp ~default:d.run_ms ~max:m.run_ms pd.limits.run_ms;
                  }
                in
                let rec fresh n =
                  if Hashtbl.mem t.procs n || n > Cap.max_object then
                    fresh (if n > Cap.max_object then 1 else n + 1)
                  else n
                in
                let obj = fresh t.next in
                t.next <- obj + 1;
                let p =
                  {
                    obj;
                    secret = Cap.Secret.generate ();
                    pd;
                    limits;
                    node;
                    node_locate;
                    node_kept = false;
                    state = Fetching;
                    file = None;
                    waiters = [];
                    killed_for = None;
                    relays = 0;
                    tail = "";
                    stdin_fd = None;
                    timers = [];
                    ended_at = 0;
                    ends = [];
                    started = Unix.gettimeofday ();
                    cg = None;
                    namespaced = false;
                    status_fd = None;
                    workdir = None;
                  }
                in
                Hashtbl.replace t.procs obj p;
                let decided = ref false in
                let fail st why =
                  if not !decided then begin
                    decided := true;
                    forget t p;
                    refuse st why
                  end
                in
                (* A file server that answers too slowly does not hold a place for ever. *)
                p.timers <-
                  Loop.after t.loop t.config.fetch_timeout (fun () ->
                      if p.state = Fetching then
                        fail `Notfound "the program's file server is too slow")
                  :: p.timers;
                let t0 = Unix.gettimeofday () in
                let ms () = (Unix.gettimeofday () -. t0) *. 1000. in
                fetch t p (function
                  | _ when !decided -> ()
                  | Error why when String.length why > 10 && String.sub why 0 10 = "bytecode: " ->
                      fail `Argbad (String.sub why 10 (String.length why - 10))
                  | Error why -> fail `Notfound why
                  | Ok file -> (
                      Log.debug (fun m -> m "process %d: fetched in %.2f ms" obj (ms ()));
                      match start t p file ~locate with
                      | Error why -> fail `Syserr why
                      | Ok () ->
                          Log.debug (fun m -> m "process %d: started in %.2f ms" obj (ms ()));
                          decided := true;
                          let c = Cap.owner t.port ~obj p.secret in
                          let port, priv = Header.of_cap c in
                          R.putrep r (Header.reply ~port ~priv `Ok) "";
                          refill t))))

let status_line t p =
  let st =
    match p.state with
    | Fetching -> "fetching"
    | Running pid -> Printf.sprintf "running pid %d" pid
    | Ending _ -> "ending"
    | Done f -> final_kind_text f
  in
  ignore t;
  let tree =
    match Option.bind p.cg Cgroup.count with
    | Some n when match p.state with Running _ -> true | _ -> false ->
        Printf.sprintf " (%d process%s)" n (if n = 1 then "" else "es")
    | _ -> ""
  in
  Printf.sprintf "%d %s%s %.1fs %s" p.obj (one_line st) tree
    (Unix.gettimeofday () -. p.started)
    (one_line
       (String.concat " "
          (List.map
             (fun a -> if String.length a > 40 then String.sub a 0 40 ^ "..." else a)
             p.pd.Pd.args)))

let objects t =
  {
    Std.secret =
      (fun obj ->
        if obj = 0 then Some t.server_secret
        else Option.map (fun p -> p.secret) (Hashtbl.find_opt t.procs obj));
    info =
      (fun obj ->
        if obj = 0 then "consort process server"
        else
          match Hashtbl.find_opt t.procs obj with
          | Some p -> "process " ^ status_line t p
          | None -> "-");
    destroy = (fun _ -> `Ok) (* done in [handle] *);
    touch = (fun _ -> ());
    age = (fun () -> ());
    status =
      (fun () ->
        let ps =
          Hashtbl.fold (fun _ p acc -> p :: acc) t.procs []
          |> List.sort (fun a b -> compare a.obj b.obj)
        in
        String.concat "\n"
          (Printf.sprintf "consort process server: %d processes, %d running or starting"
             (List.length ps) (running t)
          :: List.map (status_line t) ps));
  }

let kill_group p s =
  match p.state with
  | Running pid -> ( try Unix.kill (-pid) s with Unix.Unix_error _ -> ())
  | _ -> ()

let handle t std r =
  let h = R.header r in
  let cmd = h.Header.command in
  let reply st = R.putrep r (Header.reply st) "" in
  let on_proc need f =
    match Std.validate t.port std ~need h with
    | Error st -> reply st
    | Ok 0 -> reply `Argbad
    | Ok obj -> ( match Hashtbl.find_opt t.procs obj with Some p -> f p | None -> reply `Notfound)
  in
  if cmd = P.ps_exec then
    match Std.validate t.port std ~need:Rights.create h with
    | Error st -> reply st
    | Ok 0 -> exec t r
    | Ok _ -> reply `Argbad
  else if cmd = P.ps_wait then
    on_proc Rights.read (fun p ->
        match p.state with
        | Done _ -> answer_wait p r
        | _ ->
            if List.length p.waiters >= 4 then reply `Notnow
            else p.waiters <- (now t, r) :: p.waiters)
  else if cmd = P.ps_signal then
    on_proc Rights.modify (fun p ->
        match List.find_opt (fun (_, s) -> P.signal_to_system s = h.Header.offset) P.signals with
        | None -> reply `Argbad
        | Some (_, s) -> (
            match p.state with
            | Running _ ->
                if s = Sys.sigkill then p.killed_for <- Some (P.Killed, "killed (SIGKILL asked for)");
                kill_group p s;
                reply `Ok
            | _ -> reply `Notnow))
  else if cmd = Std.std_destroy then
    on_proc Rights.destroy (fun p ->
        (match p.state with
        | Running _ ->
            p.killed_for <- Some (P.Killed, "killed (std_destroy)");
            kill_group p Sys.sigkill
        | _ -> ());
        reply `Ok)
  else
    match Std.handle t.port std h (R.data r) with
    | Some (h, d) -> R.putrep r h d
    | None -> reply `Combad

let tick t =
  let n = now t in
  let gone = ref [] in
  Hashtbl.iter
    (fun _ p ->
      (* Held waits are answered after [hold]; ended processes forgotten after [keep]. *)
      let old, young = List.partition (fun (at, _) -> Time.diff n at >= t.config.hold) p.waiters in
      p.waiters <- young;
      List.iter (fun (_, r) -> answer_wait p r) old;
      match p.state with
      | Done _ when Time.diff n p.ended_at >= t.config.keep -> gone := p :: !gone
      | _ -> ())
    t.procs;
  List.iter (forget t) !gone;
  (* Cgroups that were still emptying; the remover children. *)
  t.leftover <- List.filter (fun cg -> not (Cgroup.remove cg)) t.leftover;
  t.removers <-
    List.filter
      (fun (pid, d) ->
        match Unix.waitpid [ Unix.WNOHANG ] pid with
        | 0, _ -> true
        | _ ->
            (try Unix.rmdir d with Unix.Unix_error _ -> ());
            false
        | exception Unix.Unix_error _ -> false)
      t.removers

let create config loop node key =
  match read_magic config.ocamlrun with
  | Error e -> Error ("ocamlrun: " ^ e)
  | Ok magic -> (
      let run = Filename.concat config.data "run" in
      let cache = Filename.concat config.data "cache" in
      match
        List.iter
          (fun d ->
            if not (Sys.file_exists d) then Unix.mkdir d 0o700;
            Unix.chmod d 0o700;
            Array.iter (fun f -> remove_tree (Filename.concat d f)) (Sys.readdir d))
          [ run; cache ]
      with
      | exception Unix.Unix_error (e, _, _) -> Error (run ^ ": " ^ Unix.error_message e)
      | exception Sys_error e -> Error e
      | () -> (
          let secret_file = Filename.concat config.data "server.secret" in
          let secret =
            match read_all secret_file with
            | s -> Cap.Secret.of_raw s
            | exception Sys_error _ -> (
                let s = Cap.Secret.generate () in
                try
                  let oc =
                    open_out_gen
                      [ Open_wronly; Open_creat; Open_excl; Open_binary ]
                      0o600 secret_file
                  in
                  output_string oc (Cap.Secret.to_raw s);
                  close_out oc;
                  Ok s
                with Sys_error e -> Error e)
          in
          match secret with
          | Error e -> Error (secret_file ^ ": " ^ e)
          | Ok server_secret -> (
              match
                R.open_node ~config:config.rpc ~locate:(String.concat "," config.locate) loop
              with
              | Error e -> Error e
              | Ok fetcher ->
                  let cgroups =
                    if config.cgroups then
                      Cgroup.setup ~name:(Printf.sprintf "consort-proc-%d" (Unix.getpid ()))
                    else Cgroup.none
                  in
                  let t =
                    {
                      config;
                      loop;
                      snode = node;
                      key;
                      port = Port.Key.port key;
                      magic;
                      server_secret;
                      procs = Hashtbl.create 16;
                      next = 1;
                      cgroups;
                      leftover = [];
                      pool = [];
                      relay_buf = Bytes.create Consort_capvc.Vc_proto.max_chunk;
                      cache = Hashtbl.create 16;
                      fetcher;
                      removers = [];
                      spare = None;
                      spares = 0;
                      coming = None;
                      kept_relays = [];
                      zygote =
                        (match Spawn.zygote () with
                        | z -> Some z
                        | exception Unix.Unix_error (e, _, _) ->
                            Log.warn (fun m ->
                                m "no zygote (%s): spares are made by the server"
                                  (Unix.error_message e));
                            None);
                    }
                  in
                  refill t;
                  let std = objects t in
                  let srv = R.serve node key in
                  R.listen srv (fun r ->
                      try handle t std r
                      with e ->
                        Log.err (fun m ->
                            m "%s: %s"
                              (P.command_name (R.header r).Header.command)
                              (Printexc.to_string e));
                        R.putrep r (Header.reply `Syserr) "");
                  (* SIGCHLD: a byte on a pipe the loop watches, then reap every child. *)
                  let r, w = Unix.pipe ~cloexec:true () in
                  Unix.set_nonblock r;
                  Unix.set_nonblock w;
                  let one = Bytes.make 1 'c' in
                  Sys.set_signal Sys.sigchld
                    (Sys.Signal_handle
                       (fun _ ->
                         try ignore (Unix.single_write w one 0 1) with Unix.Unix_error _ -> ()));
                  let buf = Bytes.create 64 in
                  Loop.watch loop r (fun () ->
                      (try ignore (Unix.read r buf 0 64) with Unix.Unix_error _ -> ());
                      Hashtbl.iter
                        (fun _ p -> match p.state with Running pid -> reap t p pid | _ -> ())
                        t.procs);
                  let rec tk () =
                    tick t;
                    ignore (Loop.after loop (Time.of_ms 500) tk)
                  in
                  tk ();
                  Ok t)))

let shutdown t =
  Hashtbl.iter
    (fun _ p ->
      match p.state with
      | Running pid -> (
          kill_tree p pid;
          try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
      | _ -> ())
    t.procs;
  Hashtbl.iter
    (fun _ p ->
      (match p.file with Some f -> ( try Sys.remove f with Sys_error _ -> ()) | None -> ());
      Option.iter (fun cg -> ignore (Cgroup.remove cg)) p.cg;
      remove_workdir t p)
    t.procs;
  settle t;
  Option.iter (discard_spare t) t.spare;
  t.spare <- None;
  Option.iter Spawn.stop_zygote t.zygote;
  t.zygote <- None;
  List.iter (fun cg -> ignore (Cgroup.remove cg)) (t.pool @ t.leftover);
  Cgroup.teardown t.cgroups;
  List.iter
    (fun (_, n, tm) ->
      Loop.cancel tm;
      R.close n)
    t.kept_relays;
  t.kept_relays <- [];
  R.close t.fetcher

let confinement t =
  let ns =
    t.config.namespaces
    &&
    (* what the kernel allows, as the first program will find it *)
    Sys.file_exists "/proc/self/ns/pid"
  in
  Printf.sprintf "programs run as %s; %s; %s"
    (match t.config.user with
    | Some (u, g) -> Printf.sprintf "uid %d gid %d" u g
    | None -> Printf.sprintf "the server's own uid %d (no --user)" (Unix.geteuid ()))
    (if ns then "a PID namespace each where the kernel allows"
     else "no PID namespace (setsid escapes the process group)")
    (if t.config.cgroups then Cgroup.describe t.cgroups else "no cgroups")
