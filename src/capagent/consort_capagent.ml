(* consort cap agent: consort cap exec for the small C client (bin/exec/consort_exec.c), with its
   nodes kept warm between starts. The wire: the client sends one request, MAGIC, its body's
   length (4 bytes, big-endian) and the body, with its standard input, output and error attached
   (SCM_RIGHTS); then at most single bytes ['I'] (interrupt). The agent answers one line: [X<code>]
   (the command's exit status; its messages went to the client's standard error), [F] (not run
   here: the client runs the command itself) or [E<why>] (refused, nothing done). *)

module Loop = Consort_engine.Loop
module R = Consort_cap.Rpc_udp
module X = Consort_capexec
module Time = Consort.Time

external peer_uid : Unix.file_descr -> int = "consort_agent_peer_uid"

external recv_fds : Unix.file_descr -> bytes -> int -> int -> int * Unix.file_descr array * bool
  = "consort_agent_recv"

external send_fds : Unix.file_descr -> string -> Unix.file_descr array -> int = "consort_agent_send"

let magic = "CXA1"
let max_body = 65536
let max_args = 1024
let max_clients = 16
let default_max_running = 8
let request_timeout = Time.of_sec 10.

type request = {
  home : string option;
  consort_root : string option;
  consort_locate : string option;
  consort_multicast : string option;
  root_file : string option;  (** [$HOME/.consort/root]'s contents, as the client read them *)
  argv : string list;
}

let u32 s i =
  (Char.code s.[i] lsl 24)
  lor (Char.code s.[i + 1] lsl 16)
  lor (Char.code s.[i + 2] lsl 8)
  lor Char.code s.[i + 3]

let put_u32 b n =
  Buffer.add_char b (Char.chr ((n lsr 24) land 255));
  Buffer.add_char b (Char.chr ((n lsr 16) land 255));
  Buffer.add_char b (Char.chr ((n lsr 8) land 255));
  Buffer.add_char b (Char.chr (n land 255))

let encode r =
  let b = Buffer.create 256 in
  let str s =
    put_u32 b (String.length s);
    Buffer.add_string b s
  in
  let opt = function
    | None -> Buffer.add_char b '\000'
    | Some s ->
        Buffer.add_char b '\001';
        str s
  in
  opt r.home;
  opt r.consort_root;
  opt r.consort_locate;
  opt r.consort_multicast;
  opt r.root_file;
  put_u32 b (List.length r.argv);
  List.iter str r.argv;
  let body = Buffer.contents b in
  let h = Buffer.create (8 + String.length body) in
  Buffer.add_string h magic;
  put_u32 h (String.length body);
  Buffer.add_string h body;
  Buffer.contents h

exception Bad of string

(* The body, strictly: every byte accounted for, no NUL in a string (none can be in an argument
   or a variable), at most [max_args] arguments, the first the command's name. *)
let decode body =
  let n = String.length body in
  let pos = ref 0 in
  let need k what = if !pos + k > n then raise (Bad ("truncated " ^ what)) in
  let str what =
    need 4 what;
    let l = u32 body !pos in
    pos := !pos + 4;
    need l what;
    let s = String.sub body !pos l in
    pos := !pos + l;
    if String.contains s '\000' then raise (Bad (what ^ " holds a NUL"));
    s
  in
  let opt what =
    need 1 what;
    let c = body.[!pos] in
    incr pos;
    match c with
    | '\000' -> None
    | '\001' -> Some (str what)
    | _ -> raise (Bad (what ^ ": bad presence byte"))
  in
  match
    let home = opt "HOME" in
    let consort_root = opt "CONSORT_ROOT" in
    let consort_locate = opt "CONSORT_LOCATE" in
    let consort_multicast = opt "CONSORT_MULTICAST" in
    let root_file = opt "the root file" in
    need 4 "argument count";
    let argc = u32 body !pos in
    pos := !pos + 4;
    if argc < 1 || argc > max_args then
      raise (Bad (Printf.sprintf "%d arguments (1 to %d)" argc max_args));
    let argv = List.init argc (fun _ -> str "an argument") in
    if !pos <> n then raise (Bad "bytes after the arguments");
    { home; consort_root; consort_locate; consort_multicast; root_file; argv }
  with
  | r -> Ok r
  | exception Bad m -> Error m

(* The header: MAGIC and the body's length, bounded. *)
let body_length header =
  if String.sub header 0 4 <> magic then Error "not a consort-exec request"
  else
    let l = u32 header 4 in
    if l > max_body then Error (Printf.sprintf "a request of %d bytes (at most %d)" l max_body)
    else Ok l

let default_socket ~getenv =
  match getenv "XDG_RUNTIME_DIR" with
  | Some d when d <> "" && not (Filename.is_relative d) ->
      Ok (Filename.concat (Filename.concat d "consort") "agent.sock")
  | _ -> (
      match getenv "HOME" with
      | Some h when h <> "" && not (Filename.is_relative h) ->
          Ok (Filename.concat (Filename.concat h ".consort") "agent.sock")
      | _ -> Error "no socket: set XDG_RUNTIME_DIR or HOME, or give --socket")

(* {1 The agent} *)

type conn = {
  fd : Unix.file_descr;
  buf : Buffer.t;
  mutable fds : Unix.file_descr list;
  mutable req : request option;
  mutable intr : bool;
  mutable gone : bool;
  mutable closed : bool;
  mutable timer : Loop.timer option;
  mutable writers : writer list;  (** its start's output, to its descriptors *)
}

(* A caller's output descriptor, written without holding up the agent's loop (the other starts,
   the RPC): at most [out_chunk] bytes at a time, once [select] says the descriptor takes them (a
   pipe then takes them whole), else again 5 ms later. Each piece's continuation is called once it
   is written: the program's circuit is read again only then, so a caller that does not take its
   output holds up its own program only. A descriptor that fails (its reader gone), or whose
   caller is gone, takes nothing more: what was left is dropped. *)
and writer = {
  wloop : Loop.t;
  wfd : Unix.file_descr;
  pending : (string * int ref * (unit -> unit)) Queue.t;
  mutable flushing : bool;
  mutable broken : bool;
  mutable drained : (unit -> unit) list;
}

let out_chunk = 4096

let writer wloop wfd =
  { wloop; wfd; pending = Queue.create (); flushing = false; broken = false; drained = [] }

let writable fd =
  match Unix.select [] [ fd ] [] 0. with
  | _, [], _ -> false
  | _ -> true
  | exception Unix.Unix_error (Unix.EINTR, _, _) -> false
  | exception Unix.Unix_error _ -> true (* the write says what is wrong *)

let rec flush w =
  match Queue.peek_opt w.pending with
  | None ->
      w.flushing <- false;
      let ks = w.drained in
      w.drained <- [];
      List.iter (fun k -> k ()) ks
  | Some (s, off, k) -> (
      let later () = ignore (Loop.after w.wloop (Time.of_ms 5) (fun () -> flush w)) in
      let len = String.length s in
      if w.broken || !off >= len then begin
        ignore (Queue.pop w.pending);
        k ();
        flush w
      end
      else if not (writable w.wfd) then later ()
      else
        match Unix.write_substring w.wfd s !off (min out_chunk (len - !off)) with
        | n ->
            off := !off + n;
            flush w
        | exception Unix.Unix_error ((Unix.EINTR | Unix.EAGAIN), _, _) -> later ()
        | exception Unix.Unix_error _ ->
            w.broken <- true;
            flush w)

let write w s k =
  Queue.push (s, ref 0, k) w.pending;
  if not w.flushing then begin
    w.flushing <- true;
    flush w
  end

(* [k] once everything given to [w] so far is written (or dropped). *)
let when_drained w k = if w.flushing then w.drained <- k :: w.drained else k ()

type stats = { mutable served : int; mutable foreign : int; mutable bad : int; mutable busy : int }

let write_all fd s =
  let rec go off =
    if off < String.length s then go (off + Unix.write_substring fd s off (String.length s - off))
  in
  try go 0 with Unix.Unix_error _ -> ()

let say fmt = Fmt.kstr (fun s -> Fmt.epr "consort: agent: %s@." (Consort_cli.one_line s)) fmt
let fail fmt = Fmt.kstr (fun s -> Error s) fmt

(* The socket's directory: ours, and nobody else's to read or enter. The default one is made 0700
   when missing. *)
let check_dir ~make d =
  let me = Unix.geteuid () in
  (match Unix.lstat d with
  | exception Unix.Unix_error (Unix.ENOENT, _, _) when make -> (
      try Unix.mkdir d 0o700
      with Unix.Unix_error (e, _, _) ->
        raise (Bad (Fmt.str "mkdir %s: %s" d (Unix.error_message e))))
  | _ | (exception Unix.Unix_error _) -> ());
  match Unix.lstat d with
  | exception Unix.Unix_error (e, _, _) -> fail "%s: %s" d (Unix.error_message e)
  | { Unix.st_kind = Unix.S_DIR; st_uid; st_perm; _ } ->
      if st_uid <> me then fail "%s belongs to uid %d, not to this user (%d)" d st_uid me
      else if st_perm land 0o077 <> 0 then
        fail "%s is open to other users (mode %o): chmod 700 %s" d st_perm d
      else Ok ()
  | _ -> fail "%s is not a directory" d

let listen ~make path =
  if String.length path > 107 then fail "a socket's path is at most 107 bytes"
  else
    match check_dir ~make (Filename.dirname path) with
    | exception Bad m -> Error m
    | Error m -> Error m
    | Ok () -> (
        (* A socket left by an agent that died is removed; a live one is left alone. *)
        let stale =
          match Unix.lstat path with
          | exception Unix.Unix_error (Unix.ENOENT, _, _) -> Ok ()
          | { Unix.st_kind = Unix.S_SOCK; _ } -> (
              let s = Unix.socket ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
              match Unix.connect s (Unix.ADDR_UNIX path) with
              | () ->
                  Unix.close s;
                  fail "another agent serves it"
              | exception Unix.Unix_error (Unix.ECONNREFUSED, _, _) ->
                  Unix.close s;
                  Unix.unlink path;
                  Ok ()
              | exception Unix.Unix_error (e, _, _) ->
                  Unix.close s;
                  fail "%s" (Unix.error_message e))
          | _ -> fail "it exists and is not a socket"
        in
        match stale with
        | Error m -> Error m
        | Ok () -> (
            let s = Unix.socket ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
            let old = Unix.umask 0o177 in
            match
              Fun.protect
                ~finally:(fun () -> ignore (Unix.umask old))
                (fun () -> Unix.bind s (Unix.ADDR_UNIX path));
              Unix.chmod path 0o600;
              Unix.listen s 16;
              Unix.set_nonblock s
            with
            | () -> Ok (s, (Unix.lstat path).Unix.st_ino)
            | exception Unix.Unix_error (e, f, _) ->
                Unix.close s;
                fail "%s: %s" f (Unix.error_message e)))

external inherited : int -> Unix.file_descr = "consort_agent_inherited"

(* Socket activation: the listening socket systemd passed (LISTEN_PID is this process, LISTEN_FDS
   one socket, descriptor 3). Its path is its own address; [--socket], if given, must name it. The
   same checks as for a socket of the agent's own (the directory this user's and closed to others,
   the socket 0600), and the socket is left to systemd at the end. *)
let systemd_socket ~getenv socket =
  match (getenv "LISTEN_PID", getenv "LISTEN_FDS") with
  | Some pid, Some n when int_of_string_opt (String.trim pid) = Some (Unix.getpid ()) -> (
      if int_of_string_opt (String.trim n) <> Some 1 then
        Some (fail "LISTEN_FDS=%s: systemd passed other than one socket" n)
      else
        match inherited 3 with
        | exception Unix.Unix_error (e, _, what) ->
            Some
              (fail "the descriptor systemd passed (3): %s"
                 (if what = "" then Unix.error_message e else what))
        | s -> (
            match Unix.getsockname s with
            | Unix.ADDR_UNIX path when path <> "" && path.[0] = '/' -> (
                match socket with
                | Some p when p <> path ->
                    Some (fail "--socket %s: systemd passed the socket %s" p path)
                | _ -> (
                    let me = Unix.geteuid () in
                    match check_dir ~make:false (Filename.dirname path) with
                    | exception Bad m -> Some (fail "%s" m)
                    | Error m -> Some (fail "%s" m)
                    | Ok () -> (
                        match Unix.lstat path with
                        | { Unix.st_kind = Unix.S_SOCK; st_uid; st_perm; st_ino; _ }
                          when st_uid = me && st_perm land 0o077 = 0 ->
                            Unix.set_nonblock s;
                            Some (Ok (path, s, st_ino))
                        | { Unix.st_kind = Unix.S_SOCK; _ } ->
                            Some
                              (fail "%s: not this user's or open to others (SocketMode=0600)" path)
                        | _ -> Some (fail "%s: not the socket systemd passed" path)
                        | exception Unix.Unix_error (e, _, _) ->
                            Some (fail "%s: %s" path (Unix.error_message e)))))
            | _ | (exception Unix.Unix_error _) ->
                Some (fail "the socket systemd passed has no path (ListenStream=PATH)")))
  | _ -> None

let default_logs = ((Some Logs.Warning, []), Consort_cli.Text)

(* The request as consort-exec's command line, if the agent runs it as the client would: the
   same RPC tunables, logging and servers' locations as the agent's own. *)
let runnable ~locate ~multicast r =
  let null = Format.make_formatter (fun _ _ _ -> ()) ignore in
  match
    Cmdliner.Cmd.eval_value ~help:null ~err:null ~catch:false
      ~env:(fun _ -> None)
      ~argv:(Array.of_list r.argv) X.agent_cmd
  with
  | exception _ -> None
  | Ok (`Ok (None, req, logs)) ->
      let req_locate = match req.X.locate with Some l -> Some l | None -> r.consort_locate in
      if logs = default_logs && req_locate = locate && r.consort_multicast = multicast then Some req
      else None
  | Ok (`Ok (Some _, _, _) | `Help | `Version) | Error _ -> None

(* A start's nodes, kept from one start to the next: the first carries its ps_exec and ps_wait and
   serves its circuits (the server locates them at the address its ps_exec came from), the second
   its SIGINT and SIGHUP requests. Starts that run at once each have a slot of their own: a node's
   session with the server carries one transaction at a time. *)
type slot = { node : R.node; control : R.node; circuits : Consort_capproc.Proc_client.circuits }

let host { node; control; circuits } c (fd0, w1, w2) r =
  {
    X.getenv = (function "HOME" -> r.home | "CONSORT_ROOT" -> r.consort_root | _ -> None);
    root_file =
      (fun f ->
        match r.home with
        | Some h when f = Filename.concat h ".consort/root" -> r.root_file
        | _ -> None);
    say = (fun s -> write w2 ("consort: " ^ s ^ "\n") ignore);
    stdout = Some (fun s -> write w1 s ignore);
    stderr = Some (fun s -> write w2 s ignore);
    output = Some (write w1, write w2);
    stdin = fd0;
    with_stdin = (fun k -> k ());
    interrupt =
      (fun () () ->
        let i = c.intr in
        c.intr <- false;
        i);
    hangup = (fun () -> c.gone);
    nodes =
      (* The second node always: it carries the SIGHUP of a caller gone (the first one's session
         is held by the program's ps_wait). *)
      (fun ?locate:_ ~control:_ () -> Ok (node, Some control, ignore));
    (* One port for every start's circuits: the server's node keeps its session with it. *)
    circuits = Some circuits;
  }

let serve ?(max_running = default_max_running) ~socket ~locate () =
  let getenv = Sys.getenv_opt in
  let listened =
    match systemd_socket ~getenv socket with
    | Some (Ok (path, s, ino)) -> Ok (path, Ok (s, ino), true)
    | Some (Error m) -> Error m
    | None -> (
        let path = match socket with Some p -> Ok p | None -> default_socket ~getenv in
        match path with
        | Error m -> Error m
        | Ok path -> Ok (path, listen ~make:(socket = None) path, false))
  in
  match listened with
  | Error m -> X.refused "agent: %s" m
  | Ok (path, listened, from_systemd) -> (
      match listened with
      | Error m -> X.refused "agent: %s: %s" path m
      | Ok (lsock, ino) -> (
          let loop = Loop.create () in
          let open_slot () =
            match R.open_node ~config:!X.rpc_config ?locate loop with
            | Error m -> Error m
            | Ok node -> (
                match R.open_node ~config:!X.rpc_config ?locate loop with
                | Error m ->
                    R.close node;
                    Error m
                | Ok control ->
                    Ok { node; control; circuits = Consort_capproc.Proc_client.circuits node })
          in
          let close_slot sl =
            Consort_capproc.Proc_client.close_circuits sl.circuits;
            R.close sl.control;
            R.close sl.node
          in
          let opened = open_slot () in
          let remove () =
            (* systemd's socket is systemd's: it listens on it again for the next start. *)
            if not from_systemd then
              match Unix.lstat path with
              | { Unix.st_ino; _ } when st_ino = ino -> ( try Unix.unlink path with _ -> ())
              | _ | (exception Unix.Unix_error _) -> ()
          in
          match opened with
          | Error m ->
              remove ();
              X.refused "agent: %s" m
          | Ok first ->
              (* The slots made so far; the free ones, the first made first used. *)
              let slots = ref [ first ] in
              let free = ref [ first ] in
              let locate = match locate with Some l -> Some l | None -> getenv "CONSORT_LOCATE" in
              let multicast = getenv "CONSORT_MULTICAST" in
              let me = Unix.geteuid () in
              let st = { served = 0; foreign = 0; bad = 0; busy = 0 } in
              let conns = ref 0 in
              let pending = Queue.create () in
              let running = ref 0 in
              let stopping = ref false in
              Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
              let on_stop =
                Sys.Signal_handle
                  (fun _ ->
                    stopping := true;
                    if !running = 0 then Loop.stop loop)
              in
              Sys.set_signal Sys.sigterm on_stop;
              Sys.set_signal Sys.sigint on_stop;
              let close c =
                if not c.closed then begin
                  c.closed <- true;
                  decr conns;
                  Option.iter Loop.cancel c.timer;
                  Loop.unwatch loop c.fd;
                  List.iter (fun fd -> try Unix.close fd with Unix.Unix_error _ -> ()) c.fds;
                  c.fds <- [];
                  try Unix.close c.fd with Unix.Unix_error _ -> ()
                end
              in
              let reply c s =
                write_all c.fd s;
                close c
              in
              let bad c m =
                st.bad <- st.bad + 1;
                say "bad request: %s (%d so far)" m st.bad;
                reply c ("Ebad request: " ^ Consort_cli.one_line m ^ "\n")
              in
              let chunk = Bytes.create 4096 in
              let rec on_readable c () =
                match recv_fds c.fd chunk 0 (Bytes.length chunk) with
                | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) ->
                    ()
                | exception Unix.Unix_error (Unix.ECONNRESET, _, _) -> gone c
                | exception Unix.Unix_error (e, _, _) -> bad c (Unix.error_message e)
                | 0, fds, _ ->
                    Array.iter Unix.close fds;
                    gone c
                | n, fds, more -> (
                    c.fds <- c.fds @ Array.to_list fds;
                    if Array.length fds > 0 && (c.req <> None || Buffer.length c.buf > 0) then
                      bad c "descriptors after the request's start"
                    else if more || Array.length fds > 3 then bad c "more than three descriptors"
                    else
                      match c.req with
                      | Some _ ->
                          (* After the request: interrupts only. *)
                          for i = 0 to n - 1 do
                            if Bytes.get chunk i = 'I' then c.intr <- true
                          done
                      | None -> (
                          Buffer.add_subbytes c.buf chunk 0 n;
                          let have = Buffer.length c.buf in
                          if have >= 8 then
                            match body_length (Buffer.sub c.buf 0 8) with
                            | Error m -> bad c m
                            | Ok l when have > 8 + l -> bad c "bytes after the request"
                            | Ok l when have < 8 + l -> ()
                            | Ok l -> (
                                match decode (Buffer.sub c.buf 8 l) with
                                | Error m -> bad c m
                                | Ok _ when List.length c.fds <> 3 ->
                                    bad c "the request came without its three standard streams"
                                | Ok r ->
                                    Option.iter Loop.cancel c.timer;
                                    c.timer <- None;
                                    c.req <- Some r;
                                    if !stopping || !running + Queue.length pending >= max_running
                                    then begin
                                      st.busy <- st.busy + 1;
                                      reply c "F\n"
                                    end
                                    else Queue.push c pending)))
              and gone c =
                (* The client is gone: its program is hung up on as by a dead client (its
                   circuits no longer answered), the connection closed once it has ended. *)
                if c.req = None then close c
                else begin
                  c.gone <- true;
                  (* Its output has nobody to go to. *)
                  List.iter (fun w -> w.broken <- true) c.writers;
                  Loop.unwatch loop c.fd
                end
              in
              let on_accept () =
                match Unix.accept ~cloexec:true lsock with
                | exception Unix.Unix_error _ -> ()
                | fd, _ -> (
                    match peer_uid fd with
                    | exception Unix.Unix_error _ -> Unix.close fd
                    | uid when uid <> me ->
                        st.foreign <- st.foreign + 1;
                        say "refused a client of uid %d: this agent serves uid %d only (%d refused)"
                          uid me st.foreign;
                        write_all fd (Printf.sprintf "Ethis agent serves uid %d only\n" me);
                        Unix.close fd
                    | _ when !conns >= max_clients ->
                        st.busy <- st.busy + 1;
                        write_all fd "F\n";
                        Unix.close fd
                    | _ ->
                        incr conns;
                        Unix.set_nonblock fd;
                        let c =
                          {
                            fd;
                            buf = Buffer.create 512;
                            fds = [];
                            req = None;
                            intr = false;
                            gone = false;
                            closed = false;
                            timer = None;
                            writers = [];
                          }
                        in
                        c.timer <-
                          Some
                            (Loop.after loop request_timeout (fun () ->
                                 c.timer <- None;
                                 if c.req = None then bad c "no request within 10 s"));
                        Loop.watch loop fd (on_readable c))
              in
              Loop.watch loop lsock on_accept;
              (* Its socket removed or replaced (its directory cleaned up, another agent in its
                 place): no client can reach it any more, it stops. *)
              let rec check_socket () =
                match Unix.lstat path with
                | { Unix.st_ino; _ } when st_ino = ino ->
                    ignore (Loop.after loop (Time.of_sec 5.) check_socket)
                | _ | (exception Unix.Unix_error _) ->
                    say "%s is gone: stopping" path;
                    stopping := true;
                    if !running = 0 then Loop.stop loop
              in
              ignore (Loop.after loop (Time.of_sec 5.) check_socket);
              say "serving uid %d on %s%s" me path
                (if from_systemd then " (the socket systemd passed)" else "");
              (* A start: its command checked and its paths resolved here (waiting for the
                 directory's answers: never from inside a callback), its program started on a
                 free slot; its end answered from the loop. *)
              let launch c =
                match (c.req, c.fds) with
                | Some _, _ when c.gone -> close c
                | Some _, _ when !stopping ->
                    st.busy <- st.busy + 1;
                    reply c "F\n"
                | Some r, [ fd0; fd1; fd2 ] -> (
                    match runnable ~locate ~multicast r with
                    | None ->
                        st.busy <- st.busy + 1;
                        reply c "F\n"
                    | Some req -> (
                        let slot =
                          match !free with
                          | sl :: rest ->
                              free := rest;
                              Ok sl
                          | [] -> (
                              match open_slot () with
                              | Ok sl ->
                                  slots := !slots @ [ sl ];
                                  Ok sl
                              | Error m -> Error m)
                        in
                        match slot with
                        | Error m ->
                            write_all fd2 ("consort: " ^ Consort_cli.one_line m ^ "\n");
                            st.served <- st.served + 1;
                            reply c "X2\n"
                        | Ok sl -> (
                            incr running;
                            let finished = ref false in
                            let w1 = writer loop fd1 and w2 = writer loop fd2 in
                            c.writers <- [ w1; w2 ];
                            let done_ code =
                              if not !finished then begin
                                finished := true;
                                (* Back first in line: the slots used most stay warm. *)
                                free := sl :: !free;
                                st.served <- st.served + 1;
                                (* The answer once the output and the messages are out: it
                                   ends the caller. *)
                                when_drained w1 (fun () ->
                                    when_drained w2 (fun () ->
                                        decr running;
                                        reply c (Printf.sprintf "X%d\n" code)))
                              end
                            in
                            try X.start (host sl c (fd0, w1, w2) r) req done_
                            with e ->
                              say "internal error: %s" (Printexc.to_string e);
                              write_all fd2
                                ("consort: internal error: "
                                ^ Consort_cli.one_line (Printexc.to_string e)
                                ^ "\n");
                              done_ 125)))
                | _ -> close c
              in
              while not (!stopping && !running = 0) do
                Loop.run loop ~until:(fun () ->
                    (!stopping && !running = 0) || not (Queue.is_empty pending));
                match Queue.take_opt pending with None -> () | Some c -> launch c
              done;
              Queue.iter (fun c -> reply c "F\n") pending;
              remove ();
              Unix.close lsock;
              (* The sessions of the circuits' port: one per node that reached it (a process
                 server keeps its node from one program to the next: one for all its starts). *)
              say "its circuits' port: %d sessions"
                (List.fold_left
                   (fun n sl -> n + (R.stats sl.node).Consort_cap.Rpc.sessions)
                   0 !slots);
              if List.length !slots > 1 then
                say "%d starts ran at once at most" (List.length !slots);
              List.iter close_slot !slots;
              say "stopped: %d served, %d refused for their uid, %d bad, %d not run here" st.served
                st.foreign st.bad st.busy;
              0))

open Cmdliner

let cmd =
  let socket =
    Arg.(
      value
      & opt (some string) None
      & info [ "socket" ] ~docv:"PATH"
          ~doc:
            "The socket to serve (default: $(b,\\$XDG_RUNTIME_DIR/consort/agent.sock), else \
             $(b,~/.consort/agent.sock)). Its directory must be this user's, mode 0700 (the \
             default one is made so when missing).")
  in
  let locate =
    Arg.(
      value
      & opt (some string) None
      & info [ "locate" ] ~docv:"ADDR:PORT,..."
          ~doc:
            "Where to ask for servers' ports (default: the $(b,CONSORT_LOCATE) environment \
             variable).")
  in
  let max_running =
    Arg.(
      value
      & opt Consort_cli.positive_int default_max_running
      & info [ "max-running" ] ~docv:"N"
          ~doc:
            "At most $(docv) programs run through the agent at once (each on nodes of its own, \
             kept for the next start); a start asked beyond that runs in its caller's own client.")
  in
  Cmd.v
    (Consort_cli.info ~path:"cap agent" "agent"
       ~doc:
         "Keep $(b,consort cap exec)'s work warm for this user: a long-running process that holds \
          located ports and open sessions with the servers and runs the starts that \
          $(b,consort-exec) asks of it on a Unix socket, with the caller's standard streams and \
          capabilities (it holds none of its own). Only this user's processes are served (the \
          peer's uid, SO_PEERCRED); a request the agent would not run exactly as the caller would \
          ($(b,--params), $(b,--log-level), other servers' locations, $(b,--help)) is left to the \
          caller's own client. Runs in the foreground until SIGTERM or SIGINT (after the programs \
          running); programs run at once up to $(b,--max-running), each with its own circuits and \
          streams, a start asked beyond that runs in its caller's client.")
    Term.(
      const (fun s l m () -> serve ~max_running:m ~socket:s ~locate:l ())
      $ socket $ locate $ max_running $ Consort_cli.logging)
