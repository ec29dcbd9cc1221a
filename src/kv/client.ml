type t = {
  servers : (string * Unix.sockaddr) array;
  id : int64;
  mutable req : int;
  mutable cur : int;
  mutable conn : Unix.file_descr option;
  timeout : float;
  mutable slots : int64 array; (* the client ids of a pipeline's requests under way *)
}

let random_id () =
  let b = Bytes.create 8 in
  (try
     let ic = open_in_bin "/dev/urandom" in
     really_input ic b 0 8;
     close_in ic
   with _ ->
     Random.self_init ();
     for i = 0 to 7 do
       Bytes.set b i (Char.chr (Random.int 256))
     done);
  Int64.logand (Bytes.get_int64_be b 0) Int64.max_int

let create ?(timeout = 15.) servers =
  let rec parse acc = function
    | [] -> Ok (Array.of_list (List.rev acc))
    | s :: rest -> (
        match Server.parse_addr s with
        | Ok a -> parse ((s, a) :: acc) rest
        | Error e -> Error ("--servers: " ^ e))
  in
  match parse [] servers with
  | Error e -> Error e
  | Ok [||] -> Error "--servers: no server given"
  | Ok servers ->
      Ok { servers; id = random_id (); req = 0; cur = 0; conn = None; timeout; slots = [||] }

let close t =
  Option.iter (fun fd -> try Unix.close fd with Unix.Unix_error _ -> ()) t.conn;
  t.conn <- None

let connect t deadline =
  match t.conn with
  | Some fd -> Ok fd
  | None -> (
      let _, addr = t.servers.(t.cur) in
      let fd = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_STREAM 0 in
      try
        (* A connect with a timeout: non-blocking, then wait. *)
        Unix.set_nonblock fd;
        (try Unix.connect fd addr with Unix.Unix_error (Unix.EINPROGRESS, _, _) -> ());
        let wait = max 0.01 (min 2. (deadline -. Unix.gettimeofday ())) in
        (match Unix.select [] [ fd ] [] wait with
        | _, [], _ -> raise (Unix.Unix_error (Unix.ETIMEDOUT, "connect", ""))
        | _ -> (
            match Unix.getsockopt_error fd with
            | Some e -> raise (Unix.Unix_error (e, "connect", ""))
            | None -> ()));
        Unix.clear_nonblock fd;
        (try Unix.setsockopt fd Unix.TCP_NODELAY true with Unix.Unix_error _ -> ());
        t.conn <- Some fd;
        Ok fd
      with Unix.Unix_error (e, _, _) ->
        (try Unix.close fd with Unix.Unix_error _ -> ());
        Error (Printf.sprintf "%s: %s" (fst t.servers.(t.cur)) (Unix.error_message e)))

let rec write_all fd s off =
  if off < String.length s then
    write_all fd s (off + Unix.write_substring fd s off (String.length s - off))

(* Reads the reply to [req], skipping late replies to earlier requests. *)
let read_reply fd req deadline =
  let buf = Buffer.create 256 and b = Bytes.create 65536 in
  let rec go () =
    match Wire.read_frame buf with
    | Error e -> `Lost e
    | Ok (Some f) -> (
        match Wire.decode_reply f with
        | Ok r when r.Wire.rreq = req -> `Reply r.outcome
        | Ok _ -> go ()
        | Error e -> `Lost ("bad reply: " ^ e))
    | Ok None -> (
        let left = deadline -. Unix.gettimeofday () in
        if left <= 0. then `Lost "timeout"
        else
          match Unix.select [ fd ] [] [] left with
          | [], _, _ -> `Lost "timeout"
          | _ -> (
              match Unix.read fd b 0 (Bytes.length b) with
              | 0 -> `Lost "connection closed by the server"
              | n ->
                  Buffer.add_subbytes buf b 0 n;
                  go ()
              | exception Unix.Unix_error (e, _, _) -> `Lost (Unix.error_message e)))
  in
  go ()

let call t op =
  t.req <- t.req + 1;
  let req = t.req in
  let frame = Wire.frame_request { Wire.client = t.id; req; op } in
  let deadline = Unix.gettimeofday () +. t.timeout in
  let n = Array.length t.servers in
  let next () =
    close t;
    t.cur <- (t.cur + 1) mod n
  in
  (* [maybe]: an earlier attempt may have taken effect. *)
  (* [unreachable]: consecutive attempts that could not connect; after two
     rounds of them, no server is running. *)
  let unreachable = ref 0 in
  let storage = ref None in
  let note_storage why =
    let starts p = String.length why >= String.length p && String.sub why 0 (String.length p) = p in
    if starts "disk full" || starts "io-error" then storage := Some why
  in
  let rec attempt tries maybe last =
    (* A replica's storage failure says more than what the next server
       said (the failed replicas exit: connection refused). *)
    let last = Option.value !storage ~default:last in
    let give_up () = if maybe then Wire.Unknown last else Wire.Refused last in
    let round = tries > 0 && tries mod n = 0 in
    if Unix.gettimeofday () >= deadline || !unreachable >= 2 * n then give_up ()
    else if round && deadline -. Unix.gettimeofday () <= 0.5 then
      (* No time for another round after the pause: what the servers said
         stands (a refusal is a refusal, not a timeout). *)
      give_up ()
    else begin
      (* After a round of every server, wait a little: a view change may be under way. *)
      if round then Unix.sleepf 0.5;
      match connect t deadline with
      | Error e ->
          incr unreachable;
          next ();
          attempt (tries + 1) maybe e
      | Ok fd -> (
          unreachable := 0;
          match write_all fd frame 0 with
          | exception Unix.Unix_error (e, _, _) ->
              (* Perhaps sent in part: the server never decodes a partial frame. *)
              next ();
              attempt (tries + 1) maybe
                (Printf.sprintf "%s: %s" (fst t.servers.(t.cur)) (Unix.error_message e))
          | () -> (
              match read_reply fd req deadline with
              | `Reply (Wire.Done r) -> Wire.Done r
              | `Reply (Wire.Refused why) ->
                  note_storage why;
                  next ();
                  attempt (tries + 1) maybe why
              | `Reply (Wire.Unknown why) ->
                  note_storage why;
                  next ();
                  attempt (tries + 1) true why
              | `Lost why ->
                  let s = fst t.servers.(t.cur) in
                  next ();
                  attempt (tries + 1) true (Printf.sprintf "%s: %s" s why)))
    end
  in
  attempt 0 false "no server answered"

type item = Op of Op.t * (Wire.outcome -> unit) | Note of (unit -> unit)

(* A request of a pipeline: sent (under way) until its outcome comes. *)
type entry = {
  item : item;
  mutable outcome : Wire.outcome option;
  mutable slot : int; (* its client id's index in [slots], while under way; -1 otherwise *)
  mutable deadline : float;
}

let max_depth = Server.max_pipeline

let pipeline ?(depth = 8) t next =
  let depth = max 1 (min max_depth depth) in
  (* One client id per request under way: the replicas' deduplication
     table keeps each client's last request only. *)
  if Array.length t.slots < depth then
    t.slots <-
      Array.init depth (fun i -> if i < Array.length t.slots then t.slots.(i) else random_id ());
  let free = ref (List.init depth Fun.id) in
  let order = Queue.create () (* every entry not yet handed back, in order *)
  and under_way = Hashtbl.create depth (* request number -> entry *)
  and input = Buffer.create 4096
  and b = Bytes.create 65536 in
  let settle e o =
    e.outcome <- Some o;
    if e.slot >= 0 then free := e.slot :: !free;
    e.slot <- -1
  in
  (* The entries at the front that have their outcome, in order. *)
  let rec hand_back () =
    match Queue.peek_opt order with
    | Some { item = Note f; _ } ->
        ignore (Queue.pop order);
        f ();
        hand_back ()
    | Some { item = Op (_, k); outcome = Some o; _ } ->
        ignore (Queue.pop order);
        k o;
        hand_back ()
    | _ -> ()
  in
  let next_server () =
    close t;
    t.cur <- (t.cur + 1) mod Array.length t.servers
  in
  (* The connection is lost: every request under way may or may not have
     taken effect. *)
  let lose why =
    let why = Printf.sprintf "%s: %s" (fst t.servers.(t.cur)) why in
    Hashtbl.iter (fun _ e -> settle e (Wire.Unknown why)) under_way;
    Hashtbl.reset under_way;
    Buffer.clear input;
    next_server ()
  in
  (* Sends [e]'s request, trying each server once; refused if none takes it. *)
  let send e op =
    let frame_for slot =
      t.req <- t.req + 1;
      (t.req, Wire.frame_request { Wire.client = t.slots.(slot); req = t.req; op })
    in
    let rec attempt tries last =
      if tries >= Array.length t.servers then settle e (Wire.Refused last)
      else
        match connect t (Unix.gettimeofday () +. t.timeout) with
        | Error why ->
            next_server ();
            attempt (tries + 1) why
        | Ok fd -> (
            match !free with
            | [] -> assert false (* at most [depth] entries are waiting *)
            | slot :: rest -> (
                let req, frame = frame_for slot in
                match write_all fd frame 0 with
                | () ->
                    free := rest;
                    e.slot <- slot;
                    e.deadline <- Unix.gettimeofday () +. t.timeout;
                    Hashtbl.replace under_way req e
                | exception Unix.Unix_error (err, _, _) ->
                    (* Never decoded in part: this request did not go out. *)
                    let why = Unix.error_message err in
                    lose why;
                    attempt (tries + 1) why))
    in
    attempt 0 "no server answered"
  in
  (* The replies already read; [Error] if the connection must be dropped. *)
  let rec take () =
    match Wire.read_frame input with
    | Error e -> Error e
    | Ok None -> Ok ()
    | Ok (Some f) -> (
        match Wire.decode_reply f with
        | Error e -> Error ("bad reply: " ^ e)
        | Ok r ->
            let rreq = r.Wire.rreq in
            (match Hashtbl.find_opt under_way rreq with
            | Some e ->
                Hashtbl.remove under_way rreq;
                settle e r.outcome
            | None -> (* a late reply to a request given up *) ());
            take ())
  in
  (* Reads what comes within [wait] seconds (at most until the earliest
     deadline of the requests under way). *)
  let receive wait =
    match t.conn with
    | None -> ()
    | Some fd -> (
        let now = Unix.gettimeofday () in
        let soonest = Hashtbl.fold (fun _ e acc -> min acc e.deadline) under_way infinity in
        if soonest <= now then lose "timeout"
        else
          match Unix.select [ fd ] [] [] (max 0. (min wait (soonest -. now))) with
          | [], _, _ -> if wait > 0. && Unix.gettimeofday () >= soonest then lose "timeout"
          | _ -> (
              match Unix.read fd b 0 (Bytes.length b) with
              | 0 -> lose "connection closed by the server"
              | n -> (
                  Buffer.add_subbytes input b 0 n;
                  match take () with Ok () -> () | Error e -> lose e)
              | exception Unix.Unix_error (e, _, _) -> lose (Unix.error_message e))
          | exception Unix.Unix_error (Unix.EINTR, _, _) -> ())
  in
  let rec go ended =
    hand_back ();
    if (not ended) && Queue.length order < depth then begin
      (* Answers that came meanwhile go back before the next item is asked for. *)
      if Hashtbl.length under_way > 0 then begin
        receive 0.;
        hand_back ()
      end;
      match next () with
      | None -> go true
      | Some item ->
          let e = { item; outcome = None; slot = -1; deadline = infinity } in
          Queue.push e order;
          (match item with Op (op, _) -> send e op | Note _ -> ());
          go false
    end
    else if Hashtbl.length under_way > 0 then begin
      receive infinity;
      go ended
    end
  in
  go false
