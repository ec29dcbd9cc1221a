type t = {
  servers : (string * Unix.sockaddr) array;
  id : int64;
  mutable req : int;
  mutable cur : int;
  mutable conn : Unix.file_descr option;
  timeout : float;
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
  | Ok servers -> Ok { servers; id = random_id (); req = 0; cur = 0; conn = None; timeout }

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
