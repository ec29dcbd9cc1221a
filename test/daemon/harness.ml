(* Starting daemons and talking to them raw, for the daemon's tests. *)

module Wire = Consort_daemon.Wire
module C = Consort_client

(* The daemon built beside this test: from the test's own directory under
   _build/default (dune runs tests there, scripts/test.sh from the root). *)
let consortd () =
  let here = Filename.dirname Sys.executable_name in
  let cands =
    [
      Filename.concat here "../../bin/consortd/consortd.exe";
      "_build/default/bin/consortd/consortd.exe";
    ]
  in
  match List.find_opt Sys.file_exists cands with
  | Some p -> p
  | None -> failwith "consortd.exe not built"

type daemon = { pid : int; socket : string; dir : string }

let tmpdir () =
  let d =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consortd-test-%d-%d" (Unix.getpid ()) (Random.bits ()))
  in
  Unix.mkdir d 0o700;
  d

let rec rm_rf p =
  match Unix.lstat p with
  | { Unix.st_kind = Unix.S_DIR; _ } ->
      Array.iter (fun f -> rm_rf (Filename.concat p f)) (Sys.readdir p);
      Unix.rmdir p
  | _ -> Unix.unlink p
  | exception Unix.Unix_error _ -> ()

let start ?(args = []) ?dir ~bind () =
  let dir = match dir with Some d -> d | None -> tmpdir () in
  let socket =
    Filename.concat dir
      (Printf.sprintf "d%s.sock" (String.map (function ':' | '.' -> '_' | c -> c) bind))
  in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let err =
    Unix.openfile
      (Filename.concat dir "consortd.err")
      [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND ]
      0o600
  in
  let pid =
    Unix.create_process (consortd ())
      (Array.of_list
         ([ "consortd"; "--socket"; socket; "--bind"; bind ]
         @ (if List.mem "--ports" args then [] else [ "--ports"; "8" ])
         @ args))
      devnull devnull err
  in
  Unix.close devnull;
  Unix.close err;
  let deadline = Unix.gettimeofday () +. 10. in
  let rec wait () =
    if Sys.file_exists socket then ()
    else if Unix.gettimeofday () > deadline then failwith "consortd did not start"
    else (
      ignore (Unix.select [] [] [] 0.02);
      wait ())
  in
  wait ();
  { pid; socket; dir }

let alive d =
  match Unix.waitpid [ Unix.WNOHANG ] d.pid with
  | 0, _ -> true
  | _ -> false
  | exception Unix.Unix_error _ -> false

let stop d =
  (try Unix.kill d.pid Sys.sigterm with Unix.Unix_error _ -> ());
  let deadline = Unix.gettimeofday () +. 8. in
  let rec wait () =
    match Unix.waitpid [ Unix.WNOHANG ] d.pid with
    | 0, _ when Unix.gettimeofday () < deadline ->
        ignore (Unix.select [] [] [] 0.02);
        wait ()
    | 0, _ ->
        Unix.kill d.pid Sys.sigkill;
        ignore (Unix.waitpid [] d.pid)
    | _ -> ()
    | exception Unix.Unix_error _ -> ()
  in
  wait ()

(* A field of /proc/PID/status, in KiB (0 if the process is gone). *)
let status_kib field pid =
  match open_in (Printf.sprintf "/proc/%d/status" pid) with
  | exception Sys_error _ -> 0
  | ic ->
      let key = field ^ ":" in
      let k = String.length key in
      let rec go () =
        match input_line ic with
        | l when String.length l > k && String.sub l 0 k = key ->
            Scanf.sscanf (String.sub l k (String.length l - k)) " %d" (fun k -> k)
        | _ -> go ()
        | exception End_of_file -> 0
      in
      Fun.protect ~finally:(fun () -> close_in ic) go

(* Resident memory of a process, in KiB. *)
let rss pid = status_kib "VmRSS" pid

(* The highest resident memory of a process so far (the kernel's own
   record, not a sample), in KiB. *)
let peak_rss pid = status_kib "VmHWM" pid

(* {1 A raw connection} *)

type raw = { fd : Unix.file_descr; fr : Wire.framer; buf : Bytes.t }

let raw d =
  let fd = Unix.socket Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  Unix.connect fd (Unix.ADDR_UNIX d.socket);
  { fd; fr = Wire.framer ~max:(1 lsl 26); buf = Bytes.create 65536 }

let put r s =
  let rec go off =
    if off < String.length s then go (off + Unix.write_substring r.fd s off (String.length s - off))
  in
  go 0

let hello r =
  put r
    (Wire.encode_request
       (Wire.Hello { min_version = 1; max_version = 1; name = "raw"; token = "" }))

(* The next event within [timeout] seconds: [`Event], [`Closed] or [`Timeout]. *)
let next ?(timeout = 5.) r =
  let deadline = Unix.gettimeofday () +. timeout in
  let rec go () =
    match Wire.next r.fr with
    | `Frame s -> (
        match Wire.decode_event s with
        | Ok e -> `Event e
        | Error e -> failwith ("undecodable event: " ^ e))
    | `Too_big _ | `Empty_frame -> failwith "bad frame from the daemon"
    | `Need -> (
        let left = deadline -. Unix.gettimeofday () in
        if left <= 0. then `Timeout
        else
          match Unix.select [ r.fd ] [] [] left with
          | [], _, _ -> `Timeout
          | _ -> (
              match Unix.read r.fd r.buf 0 (Bytes.length r.buf) with
              | 0 -> `Closed
              | n ->
                  Wire.feed r.fr r.buf 0 n;
                  go ()
              | exception Unix.Unix_error (Unix.ECONNRESET, _, _) -> `Closed))
  in
  go ()

let close_raw r = try Unix.close r.fd with Unix.Unix_error _ -> ()

(* {1 A member through the OCaml client, recording what it gets} *)

type rec_member = {
  conn : C.t;
  m : C.member;
  views : C.view_info list ref;  (** newest first *)
  casts : (string * string) list ref;  (** origin, payload; newest first *)
  sends : (string * string) list ref;
  exited : bool ref;
}

(* What the daemon wrote on standard error so far. *)
let daemon_stderr d =
  try
    let ic = open_in_bin (Filename.concat d.dir "consortd.err") in
    let s = really_input_string ic (in_channel_length ic) in
    close_in ic;
    s
  with Sys_error _ -> ""

(* A member of [group] through the daemon, connected to [address] (the
   daemon's socket by default). *)
let member ?props ?params ?peers ?(name = "test") ?address ?token_file d group =
  let address = Option.value address ~default:d.socket in
  let conn = match C.connect ~name ?token_file address with Ok c -> c | Error e -> failwith e in
  let views = ref [] and casts = ref [] and sends = ref [] and exited = ref false in
  let cb =
    {
      C.view = (fun v -> views := v :: !views);
      cast = (fun ~origin s -> casts := (origin, s) :: !casts);
      send = (fun ~origin s -> sends := (origin, s) :: !sends);
      block = ignore;
      flow = ignore;
      exit = (fun () -> exited := true);
    }
  in
  match C.join ?props ?params ?peers conn ~group cb with
  | Ok m -> { conn; m; views; casts; sends; exited }
  | Error e -> failwith (Fmt.str "join: %a" C.pp_join_error e)

let view_size r = match !(r.views) with v :: _ -> Array.length v.C.members | [] -> 0

(* Steps every connection until [cond ()] or [timeout] seconds. *)
let until ?(timeout = 15.) conns cond =
  let deadline = Unix.gettimeofday () +. timeout in
  let rec go () =
    if cond () then true
    else if Unix.gettimeofday () > deadline then false
    else begin
      let fds =
        List.filter_map (fun c -> if C.closed c = None then Some (C.fd c) else None) conns
      in
      (match Unix.select fds [] [] 0.02 with
      | _ -> ()
      | exception Unix.Unix_error (Unix.EINTR, _, _) -> ());
      List.iter (fun c -> ignore (C.step c)) conns;
      go ()
    end
  in
  go ()
