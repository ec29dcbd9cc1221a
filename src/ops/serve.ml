module Loop = Consort_engine.Loop

let src = Logs.Src.create "consort.ops" ~doc:"control socket and metrics"

module Log = (val Logs.src_log src : Logs.LOG)

type framing = Lines | Http

type conn = {
  fd : Unix.file_descr;
  buf : Buffer.t;
  mutable idle_timer : Loop.timer option;
  mutable alive : bool;
  mutable waiting : bool;  (** an answer comes later ([later]): the next lines wait *)
}

type t = {
  loop : Loop.t;
  sock : Unix.file_descr;
  addr : Unix.sockaddr;
  framing : framing;
  answer : string -> string;
  later : string -> ((string -> unit) -> unit) option;
  max_connections : int;
  max_request : int;
  idle : float;
  mutable conns : conn list;
  mutable refused : int;
  mutable full : bool;  (** a connection was refused since the count was last under the limit *)
  mutable closed : bool;
}

let describe = function
  | Unix.ADDR_UNIX p -> p
  | ADDR_INET (a, p) -> Printf.sprintf "%s:%d" (Unix.string_of_inet_addr a) p

let address t = t.addr
let connections t = List.length t.conns
let refused t = t.refused

let drop t c =
  if c.alive then (
    c.alive <- false;
    Option.iter Loop.cancel c.idle_timer;
    Loop.unwatch t.loop c.fd;
    (try Unix.close c.fd with Unix.Unix_error _ -> ());
    t.conns <- List.filter (fun c' -> c' != c) t.conns;
    if List.length t.conns < t.max_connections then t.full <- false)

(* Writes all of [s] within a second; a client that does not read is
   dropped rather than allowed to stall the loop. *)
let write_all t c s =
  let n = String.length s in
  let rec go off deadline =
    if off < n then
      match Unix.write_substring c.fd s off (n - off) with
      | k -> go (off + k) deadline
      | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK), _, _) ->
          if Unix.gettimeofday () > deadline then drop t c
          else (
            ignore (Unix.select [] [ c.fd ] [] 0.05);
            go off deadline)
      | exception Unix.Unix_error (e, _, _) ->
          Log.debug (fun m -> m "write: %s" (Unix.error_message e));
          drop t c
  in
  go 0 (Unix.gettimeofday () +. 1.)

let answer t req =
  try t.answer req
  with e ->
    Log.err (fun m -> m "answering a request: %s" (Printexc.to_string e));
    raise Exit

let arm_idle t c =
  Option.iter Loop.cancel c.idle_timer;
  c.idle_timer <-
    Some
      (Loop.after t.loop (Consort.Time.of_sec t.idle) (fun () ->
           if Buffer.length c.buf > 0 then
             Log.warn (fun m ->
                 m "%s: closed a connection idle for %g s with a partial request of %d bytes"
                   (describe t.addr) t.idle (Buffer.length c.buf));
           drop t c))

let http_response code reason ?(ctype = "text/plain; charset=utf-8") body =
  Printf.sprintf
    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" code
    reason ctype (String.length body) body

let index_from s i sub =
  let n = String.length s and m = String.length sub in
  let rec go i =
    if i + m > n then None else if String.sub s i m = sub then Some i else go (i + 1)
  in
  go i

(* Serves what [c]'s buffer holds: every complete line (Lines), or the
   request once its blank line is in (Http). *)
let rec serve t c =
  let data = Buffer.contents c.buf in
  match t.framing with
  | Lines ->
      let rec go start =
        match String.index_from_opt data start '\n' with
        | Some i when c.alive && not c.waiting -> (
            let line = String.sub data start (i - start) in
            let line =
              if String.length line > 0 && line.[String.length line - 1] = '\r' then
                String.sub line 0 (String.length line - 1)
              else line
            in
            match t.later line with
            | Some f -> (
                (* The rest waits for the answer, which serves it. *)
                Buffer.clear c.buf;
                Buffer.add_string c.buf (String.sub data (i + 1) (String.length data - i - 1));
                c.waiting <- true;
                let answered = ref false in
                let reply a =
                  if (not !answered) && c.alive then begin
                    answered := true;
                    c.waiting <- false;
                    write_all t c (a ^ "\n");
                    if c.alive then serve t c
                  end
                in
                try f reply
                with e ->
                  Log.err (fun m -> m "answering a request: %s" (Printexc.to_string e));
                  drop t c)
            | None ->
                (match answer t line with
                | a -> write_all t c (a ^ "\n")
                | exception Exit -> drop t c);
                go (i + 1))
        | _ ->
            Buffer.clear c.buf;
            if c.alive then
              Buffer.add_string c.buf (String.sub data start (String.length data - start))
      in
      go 0
  | Http -> (
      match index_from data 0 "\r\n\r\n" with
      | None -> ()
      | Some i ->
          (match answer t (String.sub data 0 i) with
          | a -> write_all t c a
          | exception Exit ->
              write_all t c (http_response 500 "Internal Server Error" "internal error\n"));
          drop t c)

let too_big t c =
  t.refused <- t.refused + 1;
  Log.warn (fun m -> m "%s: refused a request over %d bytes" (describe t.addr) t.max_request);
  (match t.framing with
  | Lines -> write_all t c (Printf.sprintf "{\"error\":\"request over %d bytes\"}\n" t.max_request)
  | Http ->
      write_all t c (http_response 431 "Request Header Fields Too Large" "request too large\n"));
  drop t c

let on_readable t c () =
  let chunk = Bytes.create 4096 in
  match Unix.read c.fd chunk 0 (Bytes.length chunk) with
  | 0 -> drop t c
  | n ->
      Buffer.add_subbytes c.buf chunk 0 n;
      arm_idle t c;
      serve t c;
      if c.alive && Buffer.length c.buf > t.max_request then too_big t c
  | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK | EINTR), _, _) -> ()
  | exception Unix.Unix_error _ -> drop t c

let on_accept t () =
  let rec loop k =
    if k > 0 then
      match Unix.accept ~cloexec:true t.sock with
      | fd, _ ->
          if List.length t.conns >= t.max_connections then (
            t.refused <- t.refused + 1;
            if not t.full then
              Log.warn (fun m ->
                  m "%s: %d connections open, refusing more until one closes" (describe t.addr)
                    t.max_connections);
            t.full <- true;
            (try Unix.close fd with Unix.Unix_error _ -> ());
            loop (k - 1))
          else (
            Unix.set_nonblock fd;
            let c =
              { fd; buf = Buffer.create 256; idle_timer = None; alive = true; waiting = false }
            in
            t.conns <- c :: t.conns;
            arm_idle t c;
            Loop.watch t.loop fd (on_readable t c);
            loop (k - 1))
      | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK | EINTR | ECONNABORTED), _, _) -> ()
      | exception Unix.Unix_error (e, _, _) ->
          Log.warn (fun m -> m "accept: %s" (Unix.error_message e))
  in
  loop 64

let unix_error what e = Error (Printf.sprintf "%s: %s" what (Unix.error_message e))

(* A Unix socket path where nothing answers is stale: remove it. One where
   a server answers is in use. *)
let clear_unix_path path =
  if not (Sys.file_exists path) then Ok ()
  else
    let s = Unix.socket ~cloexec:true PF_UNIX SOCK_STREAM 0 in
    let live =
      match Unix.connect s (ADDR_UNIX path) with () -> true | exception Unix.Unix_error _ -> false
    in
    Unix.close s;
    if live then Error (Printf.sprintf "%s: a server already answers there" path)
    else
      match (Unix.lstat path).st_kind with
      | S_SOCK -> (
          try
            Unix.unlink path;
            Ok ()
          with Unix.Unix_error (e, _, _) -> unix_error path e)
      | _ -> Error (Printf.sprintf "%s: exists and is not a socket" path)
      | exception Unix.Unix_error (e, _, _) -> unix_error path e

let listen ?(max_connections = 32) ?(max_request = 65536) ?(idle = 30.) ?(later = fun _ -> None)
    loop addr framing answer =
  let domain = Unix.domain_of_sockaddr addr in
  let prepared = match addr with Unix.ADDR_UNIX p -> clear_unix_path p | _ -> Ok () in
  match prepared with
  | Error e -> Error e
  | Ok () -> (
      let sock = Unix.socket ~cloexec:true domain SOCK_STREAM 0 in
      let fail what e =
        (try Unix.close sock with Unix.Unix_error _ -> ());
        unix_error what e
      in
      try
        if domain <> PF_UNIX then Unix.setsockopt sock SO_REUSEADDR true;
        let old = match addr with Unix.ADDR_UNIX _ -> Some (Unix.umask 0o177) | _ -> None in
        (match Unix.bind sock addr with
        | () -> Option.iter (fun m -> ignore (Unix.umask m)) old
        | exception e ->
            Option.iter (fun m -> ignore (Unix.umask m)) old;
            raise e);
        Unix.listen sock 64;
        Unix.set_nonblock sock;
        let t =
          {
            loop;
            sock;
            addr = Unix.getsockname sock;
            framing;
            answer;
            later;
            max_connections;
            max_request;
            idle;
            conns = [];
            refused = 0;
            full = false;
            closed = false;
          }
        in
        Loop.watch loop sock (on_accept t);
        Ok t
      with Unix.Unix_error (e, _, _) -> fail (describe addr) e)

let close t =
  if not t.closed then (
    t.closed <- true;
    List.iter (drop t) t.conns;
    Loop.unwatch t.loop t.sock;
    (try Unix.close t.sock with Unix.Unix_error _ -> ());
    match t.addr with
    | Unix.ADDR_UNIX p -> ( try Unix.unlink p with Unix.Unix_error _ -> ())
    | _ -> ())

let request ?(timeout = 5.) addr line =
  let s = Unix.socket ~cloexec:true (Unix.domain_of_sockaddr addr) SOCK_STREAM 0 in
  let finally () = try Unix.close s with Unix.Unix_error _ -> () in
  try
    Unix.setsockopt_float s SO_RCVTIMEO timeout;
    Unix.setsockopt_float s SO_SNDTIMEO timeout;
    Unix.connect s addr;
    let msg = line ^ "\n" in
    ignore (Unix.write_substring s msg 0 (String.length msg));
    let buf = Buffer.create 1024 and chunk = Bytes.create 4096 in
    let rec read () =
      match Unix.read s chunk 0 (Bytes.length chunk) with
      | 0 -> Error "the server closed the connection without an answer"
      | n -> (
          Buffer.add_subbytes buf chunk 0 n;
          let b = Buffer.contents buf in
          match String.index_opt b '\n' with
          | Some i -> Ok (String.sub b 0 i)
          | None ->
              if Buffer.length buf > 16 * 1024 * 1024 then Error "answer too long" else read ())
    in
    let r = read () in
    finally ();
    r
  with Unix.Unix_error (e, _, _) ->
    finally ();
    Error
      (Printf.sprintf "%s: %s" (describe addr)
         (match e with EAGAIN | EWOULDBLOCK -> "no answer in time" | e -> Unix.error_message e))
