(* Control groups for the process server: a directory per server, one per
   program under it, in the cgroup v2 hierarchy and in the v1 pids and
   cpuacct hierarchies where those controllers are not in v2. *)

type t = {
  v2 : string option; (* the server's directory in the unified hierarchy *)
  v2_pids : bool; (* pids is enabled for its children *)
  pids_v1 : string option; (* the server's directory in the v1 pids hierarchy *)
  cpuacct_v1 : string option;
}

type prog = {
  dirs : string list; (* every directory made for the program, removed at the end *)
  procs : string list; (* the cgroup.procs files it joins *)
  v2dir : string option;
  pids_dir : string option; (* where pids.max and pids.events are *)
  cpu : [ `V2 of string | `V1 of string | `None ];
  mutable cpu0 : int; (* the counters when the group was (re)given to a program: what it reads *)
  mutable refused0 : int; (* is the difference from them *)
}

let none = { v2 = None; v2_pids = false; pids_v1 = None; cpuacct_v1 = None }

(* A small file read with read(2): an in_channel would be a custom block counted as its 64 KiB
   buffer, and the server reads several of these files per program (the major GC is sped up by
   what custom blocks hold). *)
let read_file f =
  match Unix.openfile f [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0 with
  | exception Unix.Unix_error _ -> None
  | fd ->
      let b = Buffer.create 256 and chunk = Bytes.create 1024 in
      let rec go () =
        match Unix.read fd chunk 0 (Bytes.length chunk) with
        | 0 -> Some (Buffer.contents b)
        | n ->
            Buffer.add_subbytes b chunk 0 n;
            go ()
        | exception Unix.Unix_error (Unix.EINTR, _, _) -> go ()
        | exception Unix.Unix_error _ -> None
      in
      let r = go () in
      (try Unix.close fd with Unix.Unix_error _ -> ());
      r

let write_file f s =
  match Unix.openfile f [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0 with
  | exception Unix.Unix_error _ -> false
  | fd ->
      let ok =
        try Unix.write_substring fd s 0 (String.length s) = String.length s
        with Unix.Unix_error _ -> false
      in
      (try Unix.close fd with Unix.Unix_error _ -> ());
      ok

let lines s = List.filter (fun l -> l <> "") (String.split_on_char '\n' s)
let words l = List.filter (fun w -> w <> "") (String.split_on_char ' ' l)

(* The mount points of cgroup file systems: (fstype, root, mountpoint, superopts). *)
let mounts () =
  match read_file "/proc/self/mountinfo" with
  | None -> []
  | Some s ->
      List.filter_map
        (fun l ->
          match words l with
          | _ :: _ :: _ :: root :: mp :: rest -> (
              let rec after_dash = function
                | "-" :: r -> Some r
                | _ :: r -> after_dash r
                | [] -> None
              in
              match after_dash rest with
              | Some (fstype :: _ :: opts :: _) when fstype = "cgroup2" || fstype = "cgroup" ->
                  Some (fstype, root, mp, String.split_on_char ',' opts)
              | _ -> None)
          | _ -> None)
        (lines s)

(* This process's cgroup in each hierarchy: (controllers, path). *)
let own () =
  match read_file "/proc/self/cgroup" with
  | None -> []
  | Some s ->
      List.filter_map
        (fun l ->
          match String.split_on_char ':' l with
          | _ :: ctl :: path -> Some (String.split_on_char ',' ctl, String.concat ":" path)
          | _ -> None)
        (lines s)

let under ~root ~mp path =
  let rel =
    if root = "/" then Some path
    else if path = root then Some "/"
    else
      let n = String.length root in
      if String.length path > n && String.sub path 0 n = root && path.[n] = '/' then
        Some (String.sub path n (String.length path - n))
      else None
  in
  Option.map (fun r -> if r = "/" then mp else mp ^ r) rel

let mkdir_ok d =
  match Unix.mkdir d 0o755 with
  | () -> true
  | exception Unix.Unix_error (Unix.EEXIST, _, _) -> true
  | exception Unix.Unix_error _ -> false

(* What servers killed before their teardown left: the directories of
   servers no longer running ([consort-proc-PID]), their empty program
   cgroups first (rmdir fails on a busy one). *)
let sweep base =
  let prefix = "consort-proc-" in
  let n = String.length prefix in
  let rmdir d = try Unix.rmdir d with Unix.Unix_error _ -> () in
  let dead s =
    match int_of_string_opt (String.sub s n (String.length s - n)) with
    | None -> false
    | Some pid -> (
        match Unix.kill pid 0 with
        | () -> false
        | exception Unix.Unix_error (Unix.ESRCH, _, _) -> true
        | exception Unix.Unix_error _ -> false)
  in
  match Sys.readdir base with
  | exception Sys_error _ -> ()
  | names ->
      Array.iter
        (fun s ->
          if String.length s > n && String.sub s 0 n = prefix && dead s then begin
            let d = Filename.concat base s in
            (try
               Array.iter
                 (fun c ->
                   let c = Filename.concat d c in
                   if Sys.is_directory c then rmdir c)
                 (Sys.readdir d)
             with Sys_error _ -> ());
            rmdir d
          end)
        names

let setup ~name =
  let ms = mounts () and own = own () in
  let mkdir_ok d =
    sweep (Filename.dirname d);
    mkdir_ok d
  in
  let v2 =
    match List.find_opt (fun (fs, _, _, _) -> fs = "cgroup2") ms with
    | None -> None
    | Some (_, root, mp, _) -> (
        match List.assoc_opt [ "" ] own with
        | None -> None
        | Some path -> (
            match under ~root ~mp path with
            | None -> None
            | Some base ->
                let d = Filename.concat base name in
                if mkdir_ok d && Sys.file_exists (Filename.concat d "cgroup.procs") then
                  Some (base, d)
                else None))
  in
  let v2_pids =
    match v2 with
    | None -> false
    | Some (base, d) ->
        let has f =
          match read_file f with Some s -> List.mem "pids" (words (String.trim s)) | None -> false
        in
        if not (has (Filename.concat d "cgroup.controllers")) then
          ignore (write_file (Filename.concat base "cgroup.subtree_control") "+pids");
        has (Filename.concat d "cgroup.controllers")
        &&
        (ignore (write_file (Filename.concat d "cgroup.subtree_control") "+pids");
         has (Filename.concat d "cgroup.subtree_control"))
  in
  let v1 ctl =
    match List.find_opt (fun (fs, _, _, opts) -> fs = "cgroup" && List.mem ctl opts) ms with
    | None -> None
    | Some (_, root, mp, _) -> (
        match List.find_opt (fun (ctls, _) -> List.mem ctl ctls) own with
        | None -> None
        | Some (_, path) -> (
            match under ~root ~mp path with
            | None -> None
            | Some base ->
                let d = Filename.concat base name in
                if mkdir_ok d && Sys.file_exists (Filename.concat d "cgroup.procs") then Some d
                else None))
  in
  let v2_cpu =
    match v2 with Some (_, d) -> Sys.file_exists (Filename.concat d "cpu.stat") | None -> false
  in
  {
    v2 = Option.map snd v2;
    v2_pids;
    pids_v1 = (if v2_pids then None else v1 "pids");
    cpuacct_v1 = (if v2_cpu then None else v1 "cpuacct");
  }

let describe t =
  let w = function Some d -> d | None -> "-" in
  Printf.sprintf "cgroup v2 %s (pids %b), v1 pids %s, v1 cpuacct %s" (w t.v2) t.v2_pids
    (w t.pids_v1) (w t.cpuacct_v1)

let make t leaf ~nproc =
  let made = ref [] in
  let mk base =
    match base with
    | None -> Ok None
    | Some b ->
        let d = Filename.concat b leaf in
        if mkdir_ok b && mkdir_ok d then begin
          made := d :: !made;
          Ok (Some d)
        end
        else Error (d ^ ": cannot make the program's cgroup")
  in
  let ( let* ) = Result.bind in
  (* If another server's sweep took our (then empty) v2 directory, pids is
     enabled in it again. *)
  (match t.v2 with
  | Some b when t.v2_pids && (not (Sys.file_exists b)) && mkdir_ok b ->
      ignore (write_file (Filename.concat b "cgroup.subtree_control") "+pids")
  | _ -> ());
  let* v2dir = mk t.v2 in
  let* pids1 = mk t.pids_v1 in
  let* cpu1 = mk t.cpuacct_v1 in
  let pids_dir = if t.v2_pids then v2dir else pids1 in
  let* () =
    match pids_dir with
    | Some d when nproc > 0 ->
        if write_file (Filename.concat d "pids.max") (string_of_int nproc) then Ok ()
        else Error (d ^ ": cannot set pids.max")
    | _ -> Ok ()
  in
  let dirs = !made in
  Ok
    {
      dirs;
      procs = List.map (fun d -> Filename.concat d "cgroup.procs") dirs;
      v2dir;
      pids_dir;
      cpu =
        (match (v2dir, cpu1) with
        | Some d, _ when Sys.file_exists (Filename.concat d "cpu.stat") -> `V2 d
        | _, Some d -> `V1 d
        | _ -> `None);
      cpu0 = 0;
      refused0 = 0;
    }

let limits_pids p = p.pids_dir <> None
let counts_cpu p = p.cpu <> `None

(* CPU time used by everything that ever ran in the group, in microseconds. *)
let cpu_total p =
  match p.cpu with
  | `None -> None
  | `V2 d -> (
      match read_file (Filename.concat d "cpu.stat") with
      | None -> None
      | Some s ->
          List.find_map
            (fun l -> match words l with [ "usage_usec"; v ] -> int_of_string_opt v | _ -> None)
            (lines s))
  | `V1 d -> (
      match read_file (Filename.concat d "cpuacct.usage") with
      | None -> None
      | Some s -> Option.map (fun ns -> ns / 1000) (int_of_string_opt (String.trim s)))

(* Since the group was given to its program: the counters are the group's whole life's. *)
let cpu_usec p = Option.map (fun us -> us - p.cpu0) (cpu_total p)

(* How many times a fork was refused for pids.max, in the group's whole life. *)
let refused_total p =
  match p.pids_dir with
  | None -> Some 0
  | Some d -> (
      match read_file (Filename.concat d "pids.events") with
      | None -> None
      | Some s ->
          List.find_map
            (fun l -> match words l with [ "max"; v ] -> int_of_string_opt v | _ -> None)
            (lines s))

let pids_refused p = Option.fold ~none:0 ~some:(fun n -> n - p.refused0) (refused_total p)

let pids_of p =
  List.concat_map
    (fun f ->
      match read_file f with
      | None -> []
      | Some s -> List.filter_map (fun l -> int_of_string_opt (String.trim l)) (lines s))
    p.procs
  |> List.sort_uniq compare

let count p = match p.procs with [] -> None | _ -> Some (List.length (pids_of p))

(* Empty: the v2 group not populated (no process in it or below), every cgroup.procs read and
   empty, no process still charged to pids.current (one killed but not yet reaped). A file that
   cannot be read is not empty. *)
let empty p =
  let has_line f want =
    match read_file f with None -> false | Some s -> List.mem want (List.map words (lines s))
  in
  (match p.v2dir with
  | None -> true
  | Some d -> has_line (Filename.concat d "cgroup.events") [ "populated"; "0" ])
  && List.for_all (fun f -> match read_file f with Some s -> lines s = [] | None -> false) p.procs
  &&
  match p.pids_dir with
  | None -> true
  | Some d -> (
      let f = Filename.concat d "pids.current" in
      (not (Sys.file_exists f))
      || match read_file f with Some s -> String.trim s = "0" | None -> false)

(* An emptied group given to the next program: only if it is empty, its pids.max set again and
   its counters read (its program reads them from now on). *)
let renew p ~nproc =
  empty p
  && (match p.pids_dir with
     | Some d when nproc > 0 -> write_file (Filename.concat d "pids.max") (string_of_int nproc)
     | _ -> true)
  &&
  match ((match p.cpu with `None -> Some 0 | _ -> cpu_total p), refused_total p) with
  | Some c, Some r ->
      p.cpu0 <- c;
      p.refused0 <- r;
      true
  | _ -> false

(* Kills every process of the group: cgroup.kill where there is one, else
   SIGKILL to each member until none is left (bounded rounds: a member can
   fork only until pids.max). *)
let kill p =
  let killed =
    match p.v2dir with
    | Some d when Sys.file_exists (Filename.concat d "cgroup.kill") -> (
        (* Nothing to kill in a group that holds no process (none can come in: only a member
           forks into it), and writing cgroup.kill waits for the kernel's cgroup lock. *)
        match read_file (Filename.concat d "cgroup.events") with
        | Some s when List.mem [ "populated"; "0" ] (List.map words (lines s)) -> true
        | _ -> write_file (Filename.concat d "cgroup.kill") "1")
    | _ -> false
  in
  if not killed then
    let rec rounds n =
      match pids_of p with
      | [] -> ()
      | ps when n > 0 ->
          List.iter (fun pid -> try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ()) ps;
          rounds (n - 1)
      | _ -> ()
    in
    rounds 50

(* The directories, once empty; false if one is still busy. *)
let remove p =
  List.for_all
    (fun d ->
      match Unix.rmdir d with
      | () -> true
      | exception Unix.Unix_error (Unix.ENOENT, _, _) -> true
      | exception Unix.Unix_error _ -> false)
    p.dirs

let teardown t =
  List.iter
    (function Some d -> ( try Unix.rmdir d with Unix.Unix_error _ -> ()) | None -> ())
    [ t.v2; t.pids_v1; t.cpuacct_v1 ]
