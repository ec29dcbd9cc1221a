(* A program for the process server's tests: what it does is its first
   argument. *)
let () =
  match Array.to_list Sys.argv with
  | _ :: "echo" :: code :: rest ->
      (* Its arguments, its capability environment, its input in capitals,
         a line on stderr, and the exit code asked for. *)
      Printf.printf "args: %s\n" (String.concat " " rest);
      Printf.printf "caps: %s\n" (String.concat "," (Consort_capenv.names ()));
      List.iter
        (fun n ->
          if not (List.mem n [ "stdin"; "stdout"; "stderr" ]) then
            Printf.printf "%s: %s\n" n (Option.value ~default:"-" (Consort_capenv.find n)))
        (Consort_capenv.names ());
      Printf.printf "self: %b\n" (Consort_capenv.self () <> None);
      (try
         while true do
           print_endline (String.uppercase_ascii (input_line stdin))
         done
       with End_of_file -> ());
      prerr_endline "bye";
      exit (int_of_string code)
  | _ :: "big" :: n :: _ ->
      (* n lines of output: more than the circuit's buffer holds. *)
      for i = 1 to int_of_string n do
        Printf.printf "line %d %s\n" i (String.make 50 'x')
      done;
      exit 0
  | _ :: "spin" :: _ ->
      let x = ref 0 in
      while true do
        incr x
      done
  | _ :: "hog" :: _ ->
      let l = ref [] in
      while true do
        l := Bytes.make 1_048_576 'x' :: !l
      done
  | _ :: "sleep" :: _ -> Unix.sleepf 3600. |> ignore
  | _ :: "waitfile" :: path :: _ ->
      (* Runs until [path] exists (30 s at most): "seen", exit 0, else exit 1. *)
      let rec wait n =
        if Sys.file_exists path then begin
          print_endline "seen";
          exit 0
        end
        else if n = 0 then exit 1
        else begin
          Unix.sleepf 0.05;
          wait (n - 1)
        end
      in
      wait 600
  | _ :: "ticks" :: label :: n :: code :: go :: _ ->
      (* Once [go] exists (30 s at most, else exit 1): n lines "LABEL i", 10 ms apart, then
         "LABEL done" on stderr and the exit code asked for. *)
      let rec wait k =
        if not (Sys.file_exists go) then
          if k = 0 then exit 1
          else begin
            Unix.sleepf 0.02;
            wait (k - 1)
          end
      in
      wait 1500;
      for i = 1 to int_of_string n do
        Printf.printf "%s %d\n%!" label i;
        Unix.sleepf 0.01
      done;
      prerr_endline (label ^ " done");
      exit (int_of_string code)
  | _ :: "sleepint" :: _ ->
      (* Like intr, but with no input: sleeps until SIGINT. *)
      Sys.set_signal Sys.sigint
        (Sys.Signal_handle
           (fun _ ->
             print_endline "interrupted";
             exit 42));
      print_endline "waiting";
      for _ = 1 to 3600 do
        Unix.sleepf 1.
      done;
      exit 1
  | _ :: "intr" :: _ ->
      (* Waits for SIGINT (the caller's interrupt), then exits 42. *)
      Sys.set_signal Sys.sigint
        (Sys.Signal_handle
           (fun _ ->
             print_endline "interrupted";
             exit 42));
      print_endline "waiting";
      let rec wait n =
        if n > 0 then (
          ignore (Sys.opaque_identity (input_line stdin));
          wait (n - 1))
      in
      (try wait 1000 with End_of_file -> ());
      exit 1
  (* Hostile programs: each tries to get out of its confinement and prints
     what it got. *)
  | _ :: "whoami" :: _ ->
      Printf.printf "uid %d euid %d gid %d pid %d\n" (Unix.getuid ()) (Unix.geteuid ())
        (Unix.getgid ()) (Unix.getpid ());
      Printf.printf "cwd %s\n" (Sys.getcwd ());
      (* descriptors other than 0-4 *)
      let extra =
        List.filter
          (fun n -> int_of_string_opt n |> Option.fold ~none:false ~some:(fun n -> n > 4))
          (Array.to_list (try Sys.readdir "/proc/self/fd" with Sys_error _ -> [||]))
      in
      (* readdir's own descriptor is one *)
      Printf.printf "extra descriptors %d\n" (max 0 (List.length extra - 1));
      let env = Array.to_list (Unix.environment ()) in
      Printf.printf "environment capabilities %d\n"
        (List.length
           (List.filter
              (fun kv ->
                let n = String.length kv in
                let rec has i = i + 5 <= n && (String.sub kv i 5 = "cap1:" || has (i + 1)) in
                has 0)
              env));
      exit 0
  | _ :: "trespass" :: data :: etc :: _ ->
      (* Reads and writes where it should not; prints one line each. *)
      let try_read f =
        match open_in_bin f with
        | ic ->
            let ok =
              try
                ignore (input_char ic);
                true
              with End_of_file -> true
            in
            close_in ic;
            Printf.printf "read %s: %s\n" f (if ok then "READ" else "READ")
        | exception Sys_error _ -> Printf.printf "read %s: denied\n" f
      in
      let try_write f =
        match open_out_gen [ Open_wronly; Open_creat; Open_trunc ] 0o644 f with
        | oc ->
            output_string oc "x";
            close_out oc;
            Printf.printf "write %s: WRITTEN\n" f
        | exception Sys_error _ -> Printf.printf "write %s: denied\n" f
      in
      try_read "/etc/shadow";
      try_read (Filename.concat data "server.secret");
      try_read (Filename.concat data "port.key");
      try_write etc;
      try_write (Filename.concat data "trespass");
      try_write (Filename.concat data "run/trespass");
      (* its own directory is its to write *)
      (match open_out "mine" with
      | oc ->
          output_string oc "mine";
          close_out oc;
          print_endline "write own directory: ok"
      | exception Sys_error e -> print_endline ("write own directory: " ^ e));
      exit 0
  | _ :: "environs" :: _ ->
      (* Every environment and descriptor 3 it can read in /proc: how many
         hold a capability. *)
      let found = ref 0 and seen = ref 0 in
      let holds f =
        match open_in_bin f with
        | exception Sys_error _ -> ()
        | ic ->
            incr seen;
            let b = Buffer.create 4096 in
            (try
               while true do
                 Buffer.add_channel b ic 1
               done
             with End_of_file | Sys_error _ -> ());
            close_in_noerr ic;
            let s = Buffer.contents b in
            let n = String.length s in
            let rec has i = i + 5 <= n && (String.sub s i 5 = "cap1:" || has (i + 1)) in
            if has 0 then incr found
      in
      Array.iter
        (fun d ->
          if
            d <> "self" && d <> "thread-self"
            && int_of_string_opt d <> None
            && d <> string_of_int (Unix.getpid ())
          then begin
            holds (Printf.sprintf "/proc/%s/environ" d);
            holds (Printf.sprintf "/proc/%s/fd/3" d)
          end)
        (Sys.readdir "/proc");
      Printf.printf "capabilities found %d\n" !found;
      exit 0
  | _ :: "forkbomb" :: _ ->
      (* Forks until refused; every child forks once more and sleeps. *)
      let n = ref 0 in
      let refused =
        try
          for _ = 1 to 100_000 do
            match Unix.fork () with
            | 0 ->
                (try ignore (Unix.fork ()) with Unix.Unix_error _ -> ());
                Unix.sleep 3600;
                exit 0
            | _ -> incr n
          done;
          false
        with Unix.Unix_error _ -> true
      in
      Printf.printf "forked %d refused %b\n" !n refused;
      exit 0
  | _ :: "spinkids" :: _ ->
      (* Three children spin; the parent only waits for them, then exits 0. *)
      let kids =
        List.init 3 (fun _ ->
            match Unix.fork () with
            | 0 ->
                let x = ref 0 in
                let t0 = Sys.time () in
                (* each at most 5 s of CPU *)
                while Sys.time () -. t0 < 5. do
                  incr x
                done;
                exit 0
            | pid -> pid)
      in
      List.iter (fun pid -> ignore (Unix.waitpid [] pid)) kids;
      exit 0
  | _ :: (("limits" | "burn") as what) :: rest ->
      (* What it was started with: its rlimits, its cgroups, its pid, and how many processes in
         its v2 cgroup are neither itself nor its parent (its namespace's init): strangers,
         counted as seen from its namespace (one outside it is listed as 0). "burn MS" first
         spends MS ms of CPU time. *)
      (if what = "burn" then
         let ms = match rest with n :: _ -> float_of_string n | [] -> 0. in
         let x = ref 0 in
         while Sys.time () < ms /. 1000. do
           incr x
         done);
      let lines f =
        match open_in f with
        | exception Sys_error _ -> []
        | ic ->
            let rec go acc =
              match input_line ic with l -> go (l :: acc) | exception End_of_file -> List.rev acc
            in
            let l = go [] in
            close_in ic;
            l
      in
      List.iter
        (fun l ->
          let w = List.filter (fun x -> x <> "") (String.split_on_char ' ' l) in
          match w with
          | "Max" :: "cpu" :: "time" :: s :: h :: _ -> Printf.printf "cpu %s %s\n" s h
          | "Max" :: "address" :: "space" :: s :: h :: _ -> Printf.printf "as %s %s\n" s h
          | "Max" :: "open" :: "files" :: s :: h :: _ -> Printf.printf "files %s %s\n" s h
          | _ -> ())
        (lines "/proc/self/limits");
      Printf.printf "cgroup %s\n"
        (String.concat " " (List.sort compare (lines "/proc/self/cgroup")));
      Printf.printf "pid %d\n" (Unix.getpid ());
      let words l = List.filter (fun x -> x <> "") (String.split_on_char ' ' l) in
      let v2 =
        List.find_map
          (fun l ->
            match words l with
            | _ :: _ :: _ :: "/" :: mp :: rest when List.mem "cgroup2" rest -> Some mp
            | _ -> None)
          (lines "/proc/self/mountinfo")
      in
      let own =
        List.find_map
          (fun l ->
            if String.length l > 3 && String.sub l 0 3 = "0::" then
              Some (String.sub l 3 (String.length l - 3))
            else None)
          (lines "/proc/self/cgroup")
      in
      (match (v2, own) with
      | Some mp, Some path ->
          let procs = lines (mp ^ path ^ "/cgroup.procs") in
          let mine = [ string_of_int (Unix.getpid ()); string_of_int (Unix.getppid ()) ] in
          Printf.printf "strangers %d\n"
            (List.length (List.filter (fun l -> not (List.mem (String.trim l) mine)) procs))
      | _ -> print_endline "strangers -");
      exit 0
  | _ :: "escape" :: _marker :: _ ->
      (* A grandchild in a session of its own that would run for an hour,
         ignoring SIGHUP; the program itself exits at once. *)
      (match Unix.fork () with
      | 0 -> (
          ignore (Unix.setsid ());
          match Unix.fork () with
          | 0 ->
              Sys.set_signal Sys.sighup Sys.Signal_ignore;
              Unix.sleep 3600;
              exit 0
          | _ -> exit 0)
      | pid -> ignore (Unix.waitpid [] pid));
      print_endline "escaped";
      exit 0
  | _ :: "stubborn" :: _marker :: _ ->
      (* Ignores SIGHUP and sleeps: outlives its caller unless stopped. *)
      Sys.set_signal Sys.sighup Sys.Signal_ignore;
      print_endline "waiting";
      Unix.sleep 3600;
      exit 0
  | _ :: "huge" :: _ ->
      (* 10 GB at once. *)
      let b = Bytes.create (10 * 1024 * 1024 * 1024) in
      Bytes.fill b 0 (Bytes.length b) 'x';
      exit 0
  | _ :: "noisyhog" :: _ ->
      (* 256 KiB on stderr (more than a pipe holds), then out of memory: the
         runtime's message is still in the pipe when the program ends. *)
      let line = String.make 1023 'n' ^ "\n" in
      for _ = 1 to 256 do
        prerr_string line
      done;
      flush stderr;
      (* 256 MiB at once: refused at once, while the last of the noise is
         still in the pipe. *)
      let b = Bytes.create (256 * 1024 * 1024) in
      Bytes.fill b 0 (Bytes.length b) 'x';
      exit 0
  | _ ->
      prerr_endline "prog: unknown mode";
      exit 64
