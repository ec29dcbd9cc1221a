module Wire = Consort_daemon.Wire

type view_info = {
  vid : string;
  ltime : int;
  members : string array;
  rank : int;
  coordinator : string;
  joined : string list;
  left : string list;
  why : (string * string) list;
}

let pp_view_info ppf v =
  Fmt.pf ppf "view %s [%a] rank %d" v.vid Fmt.(array ~sep:comma string) v.members v.rank

type error =
  | Flow_control
  | Too_big of { size : int; max : int }
  | Not_member of string
  | Leaving
  | Exited
  | Not_primary of string

let pp_error ppf = function
  | Flow_control -> Fmt.string ppf "flow control is full: wait for flow false"
  | Too_big { size; max } ->
      Fmt.pf ppf "message of %d bytes, over the largest this stack carries (%d)" size max
  | Not_member id -> Fmt.pf ppf "%s is not a member of the view" id
  | Leaving -> Fmt.string ppf "this member is leaving the group"
  | Exited -> Fmt.string ppf "this member has left the group"
  | Not_primary q -> Fmt.pf ppf "this member's view is not primary: %s" q

type callbacks = {
  view : view_info -> unit;
  cast : origin:string -> string -> unit;
  send : origin:string -> string -> unit;
  block : unit -> unit;
  flow : bool -> unit;
  exit : unit -> unit;
}

type member = {
  conn : t;
  handle : int;
  mutable me : string;
  mutable max_message : int;
  cb : callbacks;
  mutable view : view_info;
  mutable exited : bool;
  mutable next_req : int;
  sent : (int, [ `Cast | `Send of string ] * string) Hashtbl.t;
  on_sent : (vid:string -> [ `Cast | `Send of string ] -> string -> unit) option;
  on_lost : ([ `Cast | `Send of string ] -> string -> string -> unit) option;
}

(* In version 2 a CAST or SEND taken by the daemon gets no reply: it waits
   here until a later reply shows that the daemon has served it, or until
   a REFUSED names it. *)
and quiet = {
  qm : member;
  qreq : int;
  qsize : int;
  qseq : int;  (** its number among the connection's quiet requests *)
  qk : (unit, error) result -> unit;
}

and t = {
  fd : Unix.file_descr;
  framer : Wire.framer;
  mutable closed : string option;
  mutable version : int;
  replies : (int * (Wire.event option -> unit)) Queue.t;
      (** each with the number of quiet requests written before it; [None]: the connection closed *)
  quiet : quiet Queue.t;
  mutable quiet_n : int;  (** quiet requests written *)
  mutable since_ping : int;  (** quiet requests written since the last request with a reply *)
  upcalls : Wire.event Queue.t;
  deferred : (unit -> unit) Queue.t;
  members : (int, member) Hashtbl.t;
  mutable next_handle : int;
  out : Buffer.t;  (** requests written by {!cast_async}, not yet sent *)
  mutable kick : (unit -> unit) option;  (** with {!attach}: serve soon from the loop *)
}

type join_error = Refused of Wire.code * string | Disconnected of string

let pp_join_error ppf = function
  | Refused (c, r) -> Fmt.pf ppf "%s: %s" (Wire.code_name c) r
  | Disconnected r -> Fmt.pf ppf "disconnected: %s" r

let fd t = t.fd
let closed t = t.closed

let shut t reason =
  if t.closed = None then begin
    t.closed <- Some reason;
    (try Unix.close t.fd with Unix.Unix_error _ -> ());
    let q = Queue.copy t.replies in
    Queue.clear t.replies;
    Queue.iter (fun (_, k) -> k None) q;
    let q = Queue.copy t.quiet in
    Queue.clear t.quiet;
    Queue.iter (fun e -> e.qk (Error Exited)) q
  end

let close t = shut t "closed by the client"
let is_reply = function Wire.Hello_ok _ | Ok _ | Error _ | Pong _ -> true | _ -> false

let refusal m size code reason =
  match code with
  | Wire.Flow_control -> Flow_control
  | Wire.Too_big -> Too_big { size; max = m.max_message }
  | Wire.Not_member ->
      Not_member
        (match String.index_opt reason ' ' with Some i -> String.sub reason 0 i | None -> reason)
  | Wire.Leaving -> Leaving
  | Wire.Not_primary ->
      let p = "the member's view is not primary: " in
      let n = String.length p in
      Not_primary
        (if String.length reason >= n && String.sub reason 0 n = p then
           String.sub reason n (String.length reason - n)
         else reason)
  | _ -> Exited

(* The quiet requests up to number [q] that were not refused were taken. *)
let rec taken_upto t q =
  match Queue.peek_opt t.quiet with
  | Some e when e.qseq <= q ->
      ignore (Queue.pop t.quiet);
      e.qk (Ok ());
      taken_upto t q
  | _ -> ()

(* REFUSED: the ones before it were taken, this one was not. *)
let refused t handle req code reason =
  let rec go () =
    match Queue.take_opt t.quiet with
    | Some e when e.qm.handle = handle && e.qreq = req ->
        Hashtbl.remove e.qm.sent req;
        e.qk (Error (refusal e.qm e.qsize code reason))
    | Some e ->
        e.qk (Ok ());
        go ()
    | None -> shut t "the daemon refused a message it was not sent"
  in
  go ()

let process t = function
  | Error e -> shut t ("the daemon sent a frame that does not decode: " ^ e)
  | Ok (Wire.Error { handle; code; reason }) when handle = Wire.no_handle ->
      shut t (Printf.sprintf "%s: %s" (Wire.code_name code) reason)
  | Ok ev when is_reply ev -> (
      match Queue.take_opt t.replies with
      | Some (q, k) ->
          taken_upto t q;
          k (Some ev)
      | None -> shut t "the daemon sent a reply to no request")
  | Ok (Wire.Refused { handle; req; code; reason }) -> refused t handle req code reason
  | Ok ev -> Queue.push ev t.upcalls

(* Reads once what is there: [true] if something was (or the connection
   ended). *)
let poll_once t =
  match Wire.read t.framer t.fd with
  | 0 ->
      shut t "the daemon closed the connection";
      true
  | _ ->
      let rec go () =
        if t.closed = None then
          match Wire.next_event t.framer with
          | `Need -> ()
          | `Frame r ->
              process t r;
              go ()
          | `Too_big n -> shut t (Printf.sprintf "the daemon sent a frame of %d bytes" n)
          | `Empty_frame -> shut t "the daemon sent an empty frame"
      in
      go ();
      true
  | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> false
  | exception Unix.Unix_error (e, _, _) ->
      shut t (Unix.error_message e);
      true

let read_once t = ignore (poll_once t)

(* Writes a whole frame, reading meanwhile so that neither side waits on
   the other. *)
let write t s =
  let len = String.length s in
  let rec go off =
    if off < len && t.closed = None then
      match Unix.single_write_substring t.fd s off (len - off) with
      | n -> go (off + n)
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> wait off
      | exception Unix.Unix_error (e, _, _) -> shut t (Unix.error_message e)
  and wait off =
    if off < len && t.closed = None then
      match Unix.select [ t.fd ] [ t.fd ] [] (-1.) with
      | r, w, _ ->
          if r <> [] then read_once t;
          if w <> [] && t.closed = None then
            match Unix.single_write_substring t.fd s off (len - off) with
            | n -> go (off + n)
            | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) ->
                wait off
            | exception Unix.Unix_error (e, _, _) -> shut t (Unix.error_message e)
          else wait off
      | exception Unix.Unix_error (Unix.EINTR, _, _) -> wait off
  in
  go 0

(* Requests queued by cast_async go out before anything else. *)
let flush_out t =
  if Buffer.length t.out > 0 then begin
    let s = Buffer.contents t.out in
    Buffer.clear t.out;
    write t s
  end

(* Writes what is queued and reads until [got]. *)
let await t got =
  flush_out t;
  while (not !got) && t.closed = None do
    match Unix.select [ t.fd ] [] [] (-1.) with
    | _ -> read_once t
    | exception Unix.Unix_error (Unix.EINTR, _, _) -> ()
  done;
  (* Upcalls read while waiting: a loop serving the connection would not
     hear of them from the descriptor. *)
  if not (Queue.is_empty t.upcalls) then Option.iter (fun k -> k ()) t.kick

(* A request and its reply. *)
let call t req =
  let res = ref None and got = ref false in
  if t.closed <> None then None
  else begin
    Queue.push
      ( t.quiet_n,
        fun ev ->
          got := true;
          res := ev )
      t.replies;
    t.since_ping <- 0;
    Buffer.add_string t.out (Wire.encode_request req);
    await t got;
    !res
  end

let reason t = Option.value ~default:"closed" t.closed

(* The token a client presents in HELLO: the text of [token_file], or of
   the file $CONSORT_TOKEN_FILE names, without surrounding blanks. *)
let read_token token_file =
  let file =
    match token_file with
    | Some f -> Some f
    | None -> ( match Sys.getenv_opt "CONSORT_TOKEN_FILE" with Some "" | None -> None | f -> f)
  in
  match file with
  | None -> Ok ""
  | Some f -> (
      match open_in_bin f with
      | exception Sys_error e -> Error ("token: " ^ e)
      | ic -> (
          match
            Fun.protect
              ~finally:(fun () -> close_in_noerr ic)
              (fun () -> really_input_string ic (min 4097 (in_channel_length ic)))
          with
          | exception (Sys_error e | Failure e) -> Error ("token: " ^ e)
          | exception End_of_file -> Error ("token: " ^ f ^ ": changed while read")
          | s when String.length s > 4096 -> Error ("token: " ^ f ^ ": over 4096 bytes")
          | s when String.trim s = "" -> Error ("token: " ^ f ^ " is empty")
          | s -> Ok (String.trim s)))

let connect ?(name = "ocaml") ?token_file addr =
  (* Over TCP only: the Unix socket checks credentials instead, and a path
     in a shared directory could be another user's socket. *)
  let tcp = String.length addr > 4 && String.sub addr 0 4 = "tcp:" in
  match if tcp then read_token token_file else Ok "" with
  | Error e -> Error e
  | Ok token -> (
      let sockaddr =
        if String.length addr > 4 && String.sub addr 0 4 = "tcp:" then
          let a = String.sub addr 4 (String.length addr - 4) in
          match String.rindex_opt a ':' with
          | None -> Error (Printf.sprintf "%s: not tcp:IP:PORT" addr)
          | Some i -> (
              match
                ( Unix.inet_addr_of_string (String.sub a 0 i),
                  int_of_string_opt (String.sub a (i + 1) (String.length a - i - 1)) )
              with
              | ip, Some p -> Ok (Unix.PF_INET, Unix.ADDR_INET (ip, p))
              | _, None -> Error (Printf.sprintf "%s: not tcp:IP:PORT" addr)
              | exception Failure _ -> Error (Printf.sprintf "%s: not tcp:IP:PORT" addr))
        else Ok (Unix.PF_UNIX, Unix.ADDR_UNIX addr)
      in
      match sockaddr with
      | Error e -> Error e
      | Ok (dom, sa) -> (
          let fd = Unix.socket ~cloexec:true dom Unix.SOCK_STREAM 0 in
          match Unix.connect fd sa with
          | exception Unix.Unix_error (e, _, _) ->
              Unix.close fd;
              Error (Printf.sprintf "%s: %s" addr (Unix.error_message e))
          | () -> (
              (if dom = Unix.PF_INET then
                 try Unix.setsockopt fd Unix.TCP_NODELAY true with Unix.Unix_error _ -> ());
              Unix.set_nonblock fd;
              let t =
                {
                  fd;
                  framer = Wire.framer ~max:(1 lsl 30);
                  closed = None;
                  version = Wire.min_version;
                  replies = Queue.create ();
                  quiet = Queue.create ();
                  quiet_n = 0;
                  since_ping = 0;
                  upcalls = Queue.create ();
                  deferred = Queue.create ();
                  members = Hashtbl.create 4;
                  next_handle = 0;
                  out = Buffer.create 4096;
                  kick = None;
                }
              in
              match
                call t
                  (Wire.Hello
                     { min_version = Wire.min_version; max_version = Wire.version; name; token })
              with
              | Some (Wire.Hello_ok { version; _ }) ->
                  t.version <- version;
                  Ok t
              | Some (Wire.Error { code; reason; _ }) ->
                  shut t reason;
                  Error (Printf.sprintf "%s: %s: %s" addr (Wire.code_name code) reason)
              | Some _ ->
                  shut t "unexpected reply";
                  Error (Printf.sprintf "%s: the daemon answered HELLO with something else" addr)
              | None -> Error (Printf.sprintf "%s: %s" addr (reason t)))))

let me m = m.me
let view m = m.view
let max_message m = m.max_message
let has_exited m = m.exited

let empty_view me =
  {
    vid = "";
    ltime = 0;
    members = [| me |];
    rank = 0;
    coordinator = me;
    joined = [];
    left = [];
    why = [];
  }

let join ?(props = "vsync") ?(params = "") ?(peers = []) ?on_sent ?on_lost t ~group cb =
  t.next_handle <- t.next_handle + 1;
  let handle = t.next_handle in
  let flags = if on_sent <> None || on_lost <> None then Wire.flag_report else 0 in
  let m =
    {
      conn = t;
      handle;
      me = "";
      max_message = 0;
      cb;
      view = empty_view "";
      exited = false;
      next_req = 0;
      sent = Hashtbl.create 16;
      on_sent;
      on_lost;
    }
  in
  (* Upcalls of this handle may be queued before the reply is read. *)
  Hashtbl.replace t.members handle m;
  match call t (Wire.Join { handle; group; props; params; flags; peers }) with
  | Some (Wire.Ok { value; info; _ }) ->
      m.me <- info;
      m.max_message <- value;
      m.view <- empty_view info;
      Ok m
  | Some (Wire.Error { code; reason; _ }) ->
      Hashtbl.remove t.members handle;
      Error (Refused (code, reason))
  | Some _ ->
      Hashtbl.remove t.members handle;
      shut t "unexpected reply to JOIN";
      Error (Disconnected "unexpected reply to JOIN")
  | None ->
      Hashtbl.remove t.members handle;
      Error (Disconnected (reason t))

let result m size = function
  | Some (Wire.Ok _) -> Ok ()
  | Some (Wire.Error { code; reason; _ }) -> Error (refusal m size code reason)
  | _ -> Error Exited

let track m kind payload =
  m.next_req <- (m.next_req + 1) land 0xffffffff;
  if m.on_sent <> None || m.on_lost <> None then Hashtbl.replace m.sent m.next_req (kind, payload);
  m.next_req

let untrack m req = Hashtbl.remove m.sent req

(* Every so many quiet requests, one with a reply: it shows which were
   taken, and bounds what waits in [quiet]. *)
let quiet_window = 64

let push_ping t =
  t.since_ping <- 0;
  Queue.push (t.quiet_n, ignore) t.replies;
  Buffer.add_string t.out (Wire.encode_request (Wire.Ping { cookie = 0 }))

(* Queues a CAST or SEND; [k] gets its result (from the reading code). *)
let message m kind payload k =
  let t = m.conn in
  let req = track m kind payload in
  let size = String.length payload in
  let frame =
    match kind with
    | `Cast -> Wire.encode_request (Wire.Cast { handle = m.handle; req; payload })
    | `Send dst -> Wire.encode_request (Wire.Send { handle = m.handle; req; dst; payload })
  in
  if t.version >= 2 then begin
    t.quiet_n <- t.quiet_n + 1;
    Queue.push { qm = m; qreq = req; qsize = size; qseq = t.quiet_n; qk = k } t.quiet;
    Buffer.add_string t.out frame;
    t.since_ping <- t.since_ping + 1;
    if t.since_ping >= quiet_window then push_ping t
  end
  else begin
    Queue.push
      ( t.quiet_n,
        fun ev ->
          let r = result m size ev in
          if r <> Ok () then untrack m req;
          k r )
      t.replies;
    t.since_ping <- 0;
    Buffer.add_string t.out frame
  end

(* A message and its result: in version 2, a PING after it says when the
   daemon has served it. *)
let message_sync m kind payload =
  if m.exited || m.conn.closed <> None then Error Exited
  else begin
    let res = ref (Error Exited) and got = ref false in
    message m kind payload (fun r ->
        res := r;
        got := true);
    if m.conn.version >= 2 then push_ping m.conn;
    await m.conn got;
    !res
  end

let cast m payload = message_sync m `Cast payload
let send m dst payload = message_sync m (`Send dst) payload

let cast_async ?(on_result = ignore) m payload =
  let t = m.conn in
  if m.exited || t.closed <> None then Queue.push (fun () -> on_result (Error Exited)) t.deferred
  else begin
    message m `Cast payload (fun r -> Queue.push (fun () -> on_result r) t.deferred);
    if Buffer.length t.out >= 65536 then flush_out t else Option.iter (fun k -> k ()) t.kick
  end

let simple m req = if not m.exited then ignore (call m.conn req)
let leave m = simple m (Wire.Leave { handle = m.handle })
let suspect m ids = simple m (Wire.Suspect { handle = m.handle; ids })
let block_ok m = simple m (Wire.Block_ok { handle = m.handle })

let switch ?(params = "") m props =
  match call m.conn (Wire.Switch { handle = m.handle; props; params }) with
  | Some (Wire.Ok _) -> Ok ()
  | Some (Wire.Error { code; reason; _ }) -> Error (code, reason)
  | _ -> Error (Wire.Exited, reason m.conn)

let ping t =
  match call t (Wire.Ping { cookie = 7 }) with
  | Some (Wire.Pong _) -> Ok ()
  | Some _ -> Error "unexpected reply to PING"
  | None -> Error (reason t)

let upcall t ev =
  let find h = Hashtbl.find_opt t.members h in
  match (ev : Wire.event) with
  | View { handle; vid; ltime; rank; coordinator; members; joined; left; why } -> (
      match find handle with
      | Some m ->
          let why =
            List.combine left
              (if List.length why = List.length left then why else List.map (fun _ -> "") left)
          in
          let v =
            { vid; ltime; members = Array.of_list members; rank; coordinator; joined; left; why }
          in
          m.view <- v;
          m.cb.view v
      | None -> ())
  | Cast_up { handle; origin; payload } ->
      Option.iter (fun m -> m.cb.cast ~origin payload) (find handle)
  | Send_up { handle; origin; payload } ->
      Option.iter (fun m -> m.cb.send ~origin payload) (find handle)
  | Block { handle } -> Option.iter (fun m -> m.cb.block ()) (find handle)
  | Flow { handle; blocked } -> Option.iter (fun m -> m.cb.flow blocked) (find handle)
  | Exit { handle } ->
      Option.iter
        (fun m ->
          m.exited <- true;
          Hashtbl.remove t.members handle;
          m.cb.exit ())
        (find handle)
  | Sent { handle; req; view; _ } ->
      Option.iter
        (fun m ->
          match Hashtbl.find_opt m.sent req with
          | Some (kind, payload) ->
              Hashtbl.remove m.sent req;
              Option.iter (fun f -> f ~vid:view kind payload) m.on_sent
          | None -> ())
        (find handle)
  | Lost { handle; req; reason } ->
      Option.iter
        (fun m ->
          match Hashtbl.find_opt m.sent req with
          | Some (kind, payload) ->
              Hashtbl.remove m.sent req;
              Option.iter (fun f -> f kind payload reason) m.on_lost
          | None -> ())
        (find handle)
  | Hello_ok _ | Ok _ | Error _ | Pong _ | Refused _ -> ()

let dispatch t =
  let rec go () =
    match Queue.take_opt t.deferred with
    | Some f ->
        f ();
        go ()
    | None -> (
        match Queue.take_opt t.upcalls with
        | Some ev ->
            upcall t ev;
            go ()
        | None -> ())
  in
  go ();
  if t.closed <> None then
    (* Members of a closed connection are gone. *)
    Hashtbl.iter
      (fun _ m ->
        if not m.exited then begin
          m.exited <- true;
          m.cb.exit ()
        end)
      (Hashtbl.copy t.members)

(* CONSORT_CLIENT_SPIN_US: how long a step that may wait polls the
   connection before it sleeps (0 by default), in seconds; {!set_spin}
   sets it. *)
let spin_s = ref None

let spin () =
  match !spin_s with
  | Some s -> s
  | None ->
      let s =
        match Sys.getenv_opt "CONSORT_CLIENT_SPIN_US" with
        | Some v -> (
            match int_of_string_opt v with
            | Some n when n > 0 -> Float.min 0.01 (float n *. 1e-6)
            | _ -> 0.)
        | None -> 0.
      in
      spin_s := Some s;
      s

let set_spin us = spin_s := Some (Float.min 0.01 (float (max 0 us) *. 1e-6))

(* In version 2, with messages whose fate is not known and no reply on
   the way, a PING that will tell it. *)
let ask t =
  if (not (Queue.is_empty t.quiet)) && Queue.is_empty t.replies then begin
    push_ping t;
    flush_out t
  end

let step ?(timeout = 0.) t =
  flush_out t;
  if t.closed = None then begin
    let spin = spin () in
    let spun =
      timeout > 0. && spin > 0.
      &&
      let until = Unix.gettimeofday () +. Float.min spin timeout in
      let rec go () =
        poll_once t
        || Unix.gettimeofday () < until
           && begin
                Consort_engine.Loop.yield ();
                go ()
              end
      in
      go ()
    in
    let read =
      spun
      ||
      match Unix.select [ t.fd ] [] [] timeout with
      | r, _, _ -> r <> [] && poll_once t
      | exception Unix.Unix_error (Unix.EINTR, _, _) -> false
    in
    (* Idle with messages whose fate is not known yet: ask. *)
    if (not read) && t.closed = None then ask t
  end;
  dispatch t;
  t.closed = None

let run ?(until = fun () -> false) ?timeout t =
  let deadline = Option.map (fun s -> Unix.gettimeofday () +. s) timeout in
  let rec go () =
    if not (until ()) then
      let left = match deadline with Some d -> d -. Unix.gettimeofday () | None -> 1. in
      if left > 0. && step ~timeout:(Float.min left 0.05) t then go ()
  in
  go ()

let attach t loop =
  let fd = t.fd in
  let module L = Consort_engine.Loop in
  let serve () =
    dispatch t;
    ask t;
    flush_out t;
    if t.closed <> None then begin
      t.kick <- None;
      L.unwatch loop fd
    end
  in
  let pending = ref false in
  t.kick <-
    Some
      (fun () ->
        if not !pending then begin
          pending := true;
          ignore
            (L.after loop 0 (fun () ->
                 pending := false;
                 serve ()))
        end);
  L.watch loop fd (fun () ->
      if t.closed = None then read_once t;
      serve ())
