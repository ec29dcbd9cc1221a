type t = {
  name : string;
  pid : int;
  spawned : float;
  mutable out : Unix.file_descr option;
  mutable input : Unix.file_descr option;
  partial : Buffer.t;
  mutable rev_lines : (float * string) list;
  mutable status : Unix.process_status option;
  mutable killed : bool;
}

let now () = Int64.to_float (Mtime.Span.to_uint64_ns (Mtime_clock.elapsed ())) /. 1e9

let taskset =
  lazy
    (List.find_opt Sys.file_exists
       (List.map
          (fun d -> Filename.concat d "taskset")
          ((match Sys.getenv_opt "PATH" with Some p -> String.split_on_char ':' p | None -> [])
          @ [ "/usr/bin"; "/bin" ])))

let can_pin () = Lazy.force taskset <> None

let placement ~cpu =
  match (cpu, Lazy.force taskset) with
  | Some c, Some _ -> Printf.sprintf "CPU %d" c
  | _ -> "unpinned"

let spawn ?cpu ?(stdin = `Pipe) ?stderr ~name exe args =
  let argv =
    match (cpu, Lazy.force taskset) with
    | Some c, Some ts -> ts :: "-c" :: string_of_int c :: exe :: args
    | _ -> exe :: args
  in
  let prog = List.hd argv in
  let out_r, out_w = Unix.pipe ~cloexec:true () in
  let in_r, input =
    match stdin with
    | `Pipe ->
        let r, w = Unix.pipe ~cloexec:true () in
        (r, Some w)
    | `Null -> (Unix.openfile "/dev/null" [ Unix.O_RDONLY; Unix.O_CLOEXEC ] 0, None)
  in
  let err =
    match stderr with
    | Some f -> Unix.openfile f [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND; Unix.O_CLOEXEC ] 0o644
    | None -> Unix.openfile "/dev/null" [ Unix.O_WRONLY; Unix.O_CLOEXEC ] 0
  in
  let spawned = now () in
  let pid = Unix.create_process prog (Array.of_list argv) in_r out_w err in
  List.iter Unix.close [ in_r; out_w; err ];
  {
    name;
    pid;
    spawned;
    out = Some out_r;
    input;
    partial = Buffer.create 256;
    rev_lines = [];
    status = None;
    killed = false;
  }

let name p = p.name
let spawned_at p = p.spawned
let lines p = List.rev p.rev_lines
let chunk = Bytes.create 65536

let close_out_fd p =
  match p.out with
  | Some fd ->
      (try Unix.close fd with Unix.Unix_error _ -> ());
      p.out <- None
  | None -> ()

let read_from p at =
  match p.out with
  | None -> ()
  | Some fd -> (
      match Unix.read fd chunk 0 (Bytes.length chunk) with
      | 0 -> close_out_fd p
      | n ->
          for i = 0 to n - 1 do
            match Bytes.get chunk i with
            | '\n' ->
                p.rev_lines <- (at, Buffer.contents p.partial) :: p.rev_lines;
                Buffer.clear p.partial
            | c -> Buffer.add_char p.partial c
          done
      | exception Unix.Unix_error ((Unix.EINTR | Unix.EAGAIN), _, _) -> ()
      | exception Unix.Unix_error _ -> close_out_fd p)

let pump ps ~timeout =
  let fds = List.filter_map (fun p -> Option.map (fun fd -> (fd, p)) p.out) ps in
  if fds = [] then Unix.sleepf (Float.max 0. timeout)
  else
    match Unix.select (List.map fst fds) [] [] (Float.max 0. timeout) with
    | ready, _, _ ->
        let at = now () in
        List.iter (fun fd -> read_from (List.assq fd fds) at) ready
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> ()

let wait_until ps ~timeout f =
  let deadline = now () +. timeout in
  let rec go () =
    if f () then true
    else
      let left = deadline -. now () in
      if left <= 0. then false
      else begin
        pump ps ~timeout:(Float.min left 0.05);
        go ()
      end
  in
  go ()

let close_input p =
  match p.input with
  | Some fd ->
      (try Unix.close fd with Unix.Unix_error _ -> ());
      p.input <- None
  | None -> ()

let write_line p s =
  match p.input with
  | None -> false
  | Some fd -> (
      let b = Bytes.of_string (s ^ "\n") in
      match
        Unix.set_nonblock fd;
        Unix.single_write fd b 0 (Bytes.length b)
      with
      | n -> n = Bytes.length b
      | exception Unix.Unix_error _ -> false)

let reap p =
  match p.status with
  | Some _ -> true
  | None -> (
      match Unix.waitpid [ Unix.WNOHANG ] p.pid with
      | 0, _ -> false
      | _, st ->
          p.status <- Some st;
          true
      | exception Unix.Unix_error (Unix.ECHILD, _, _) ->
          p.status <- Some (Unix.WEXITED 255);
          true)

let kill p =
  close_input p;
  if not (reap p) then begin
    p.killed <- true;
    (try Unix.kill p.pid Sys.sigkill with Unix.Unix_error _ -> ());
    match Unix.waitpid [] p.pid with
    | _, st -> p.status <- Some st
    | exception Unix.Unix_error _ -> p.status <- Some (Unix.WEXITED 255)
  end;
  close_out_fd p

let exit_ok p = (not p.killed) && p.status = Some (Unix.WEXITED 0)

let finish ps ~timeout =
  let ended = wait_until ps ~timeout (fun () -> List.for_all reap ps) in
  (* What the processes wrote before they ended is still in the pipes. *)
  ignore
    (wait_until ps
       ~timeout:(if ended then 0.5 else 0.)
       (fun () -> List.for_all (fun p -> p.out = None) ps));
  List.iter kill ps;
  ended && List.for_all exit_ok ps

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
        | Unix.ADDR_UNIX _ -> invalid_arg "free_addresses")
      socks
  in
  List.iter Unix.close socks;
  addrs

let counter = ref 0

let temp_dir prefix =
  let rec go k =
    incr counter;
    let d =
      Filename.concat (Filename.get_temp_dir_name ())
        (Printf.sprintf "%s-%d-%d" prefix (Unix.getpid ()) !counter)
    in
    match Unix.mkdir d 0o755 with
    | () -> d
    | exception Unix.Unix_error (Unix.EEXIST, _, _) when k > 0 -> go (k - 1)
  in
  go 100

let remove_dir d =
  (match Sys.readdir d with
  | files ->
      Array.iter (fun f -> try Sys.remove (Filename.concat d f) with Sys_error _ -> ()) files
  | exception Sys_error _ -> ());
  try Unix.rmdir d with Unix.Unix_error _ -> ()

let read_tail ?(max = 2000) f =
  match open_in_bin f with
  | exception Sys_error _ -> ""
  | ic ->
      Fun.protect
        ~finally:(fun () -> close_in ic)
        (fun () ->
          match in_channel_length ic with
          | n -> (
              let k = Int.min n max in
              seek_in ic (n - k);
              try really_input_string ic k with End_of_file -> "")
          | exception Sys_error _ -> "")

(* "0-1", "0,2-3" *)
let online_cpus () =
  let s =
    match open_in "/sys/devices/system/cpu/online" with
    | exception Sys_error _ -> ""
    | ic ->
        let l = try input_line ic with End_of_file -> "" in
        close_in ic;
        String.trim l
  in
  let count part =
    match String.split_on_char '-' part with
    | [ a ] -> Option.map (fun _ -> 1) (int_of_string_opt a)
    | [ a; b ] -> (
        match (int_of_string_opt a, int_of_string_opt b) with
        | Some a, Some b when b >= a -> Some (b - a + 1)
        | _ -> None)
    | _ -> None
  in
  let parts = List.map count (String.split_on_char ',' s) in
  if s = "" || List.exists Option.is_none parts then 1
  else List.fold_left (fun a p -> a + Option.get p) 0 parts
