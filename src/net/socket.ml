module Promise = struct
  type 'a state = Pending of ('a -> unit) list | Resolved of 'a
  type 'a t = { mutable st : 'a state }

  let resolve p v =
    match p.st with
    | Resolved _ -> ()
    | Pending ks ->
        p.st <- Resolved v;
        List.iter (fun k -> k v) (List.rev ks)

  let create () =
    let p = { st = Pending [] } in
    (p, resolve p)

  let return v = { st = Resolved v }
  let peek p = match p.st with Resolved v -> Some v | Pending _ -> None
  let is_resolved p = match p.st with Resolved _ -> true | Pending _ -> false
  let upon p f = match p.st with Resolved v -> f v | Pending ks -> p.st <- Pending (f :: ks)
end

module Make (T : Tcp.S) = struct
  type write_req = {
    buf : Cstruct.t;
    mutable off : int;
    done_ : (unit, Protocol.error) result -> unit;
  }

  type t = {
    mutable conn : T.connection option;
    rq : Packet.t Queue.t;
    mutable rq_bytes : int;
    readers : (Cstruct.t * ((int, Protocol.error) result -> unit)) Queue.t;
    writers : write_req Queue.t;
    mutable eof : bool;
    mutable error : Protocol.error option;
    mutable shutdown_wanted : bool;
    mutable closing : bool;
    mutable on_connected : (t, Protocol.error) result -> unit;
    closed_p : (unit, Protocol.error) result Promise.t;
    closed_r : (unit, Protocol.error) result -> unit;
  }

  type listener = {
    tcp : T.t;
    port : int;
    ready : t Queue.t;
    waiting : ((t, Protocol.error) result -> unit) Queue.t;
    mutable stopped : bool;
  }

  let fresh () =
    let closed_p, closed_r = Promise.create () in
    {
      conn = None;
      rq = Queue.create ();
      rq_bytes = 0;
      readers = Queue.create ();
      writers = Queue.create ();
      eof = false;
      error = None;
      shutdown_wanted = false;
      closing = false;
      on_connected = (fun _ -> ());
      closed_p;
      closed_r;
    }

  let connection s = match s.conn with Some c -> c | None -> invalid_arg "Socket: no connection"
  let info s = T.info (connection s)
  let read_available s = s.rq_bytes

  (* Copy queued data into [buf]; consume it in TCP. *)
  let take s buf =
    let want = Cstruct.length buf in
    let rec go n =
      if n >= want || Queue.is_empty s.rq then n
      else
        let p = Queue.peek s.rq in
        let cs = Packet.cstruct p in
        let k = min (Cstruct.length cs) (want - n) in
        Cstruct.blit cs 0 buf n k;
        if k = Cstruct.length cs then begin
          ignore (Queue.pop s.rq : Packet.t);
          Packet.release p
        end
        else ignore (Packet.pull p k : (unit, _) result);
        go (n + k)
    in
    let n = go 0 in
    s.rq_bytes <- s.rq_bytes - n;
    if n > 0 then T.consume (connection s) n;
    n

  let rec serve_readers s =
    if not (Queue.is_empty s.readers) then
      if s.rq_bytes > 0 then begin
        let buf, k = Queue.pop s.readers in
        let n = take s buf in
        k (Ok n);
        serve_readers s
      end
      else
        match s.error with
        | Some e ->
            let _, k = Queue.pop s.readers in
            k (Error e);
            serve_readers s
        | None ->
            if s.eof then begin
              let _, k = Queue.pop s.readers in
              k (Ok 0);
              serve_readers s
            end

  let maybe_shutdown s =
    if s.shutdown_wanted && Queue.is_empty s.writers then
      match s.conn with Some c -> if s.closing then T.close c else T.shutdown c | None -> ()

  let rec serve_writers s =
    match s.error with
    | Some e ->
        while not (Queue.is_empty s.writers) do
          (Queue.pop s.writers).done_ (Error e)
        done
    | None -> (
        match (Queue.peek_opt s.writers, s.conn) with
        | Some w, Some c ->
            let len = Cstruct.length w.buf - w.off in
            let n = if len = 0 then 0 else T.write c ~off:w.off ~len w.buf in
            w.off <- w.off + n;
            if w.off >= Cstruct.length w.buf then begin
              ignore (Queue.pop s.writers : write_req);
              w.done_ (Ok ());
              serve_writers s
            end
            else if
              n = 0
              && T.send_space c = 0
              && T.state c <> Tcp.Syn_sent
              && T.state c <> Tcp.Syn_received
              && T.state c <> Tcp.Established
              && T.state c <> Tcp.Close_wait
            then begin
              s.error <- Some `Closed;
              serve_writers s
            end
        | _ -> maybe_shutdown s)

  let fail s e =
    if s.error = None then s.error <- Some e;
    serve_readers s;
    serve_writers s;
    Queue.iter Packet.release s.rq;
    Queue.clear s.rq;
    s.rq_bytes <- 0;
    s.on_connected (Error e);
    s.closed_r (Error e)

  let handler s on_connected =
    s.on_connected <- on_connected;
    {
      T.receive =
        (fun _ p ->
          if s.closing then begin
            let n = Packet.length p in
            Packet.release p;
            match s.conn with Some c -> T.consume c n | None -> ()
          end
          else begin
            s.rq_bytes <- s.rq_bytes + Packet.length p;
            Queue.push p s.rq;
            serve_readers s
          end);
      status =
        (fun _ st ->
          match st with
          | Tcp.Connected ->
              s.on_connected (Ok s);
              serve_writers s
          | Writable -> serve_writers s
          | Peer_closed ->
              s.eof <- true;
              serve_readers s
          | Closed_normally ->
              s.eof <- true;
              serve_readers s;
              if not (Queue.is_empty s.writers) then fail s `Closed else s.closed_r (Ok ())
          | Failed e -> fail s e);
    }

  let connect tcp ?local_port host port =
    let p, r = Promise.create () in
    let s = fresh () in
    (match
       T.active_open tcp { T.host; port; local_port } (fun c ->
           s.conn <- Some c;
           handler s r)
     with
    | Ok c -> s.conn <- Some c
    | Error e -> r (Error e));
    p

  let listen tcp port =
    let l = { tcp; port; ready = Queue.create (); waiting = Queue.create (); stopped = false } in
    let on_conn s = function
      | Ok _ ->
          if Queue.is_empty l.waiting then Queue.push s l.ready else (Queue.pop l.waiting) (Ok s)
      | Error _ -> ()
    in
    match
      T.passive_open tcp { T.port; from = None } (fun c ->
          let s = fresh () in
          s.conn <- Some c;
          handler s (on_conn s))
    with
    | Ok () -> Ok l
    | Error e -> Error e

  let accept l =
    if not (Queue.is_empty l.ready) then Promise.return (Ok (Queue.pop l.ready))
    else if l.stopped then Promise.return (Error `Closed)
    else begin
      let p, r = Promise.create () in
      Queue.push r l.waiting;
      p
    end

  let stop l =
    if not l.stopped then begin
      l.stopped <- true;
      T.unlisten l.tcp l.port;
      Queue.iter (fun s -> match s.conn with Some c -> T.abort c | None -> ()) l.ready;
      Queue.clear l.ready;
      Queue.iter (fun r -> r (Error `Closed)) l.waiting;
      Queue.clear l.waiting
    end

  let read s buf =
    let p, r = Promise.create () in
    Queue.push (buf, r) s.readers;
    serve_readers s;
    p

  let write s buf =
    let p, r = Promise.create () in
    if s.shutdown_wanted then r (Error `Closed)
    else begin
      Queue.push { buf; off = 0; done_ = r } s.writers;
      if Queue.length s.writers = 1 then serve_writers s
    end;
    p

  let write_string s str = write s (Cstruct.of_string str)

  let shutdown s =
    s.shutdown_wanted <- true;
    maybe_shutdown s

  let close s =
    s.closing <- true;
    Queue.iter Packet.release s.rq;
    Queue.clear s.rq;
    s.rq_bytes <- 0;
    shutdown s

  let abort s =
    (match s.conn with Some c -> T.abort c | None -> ());
    fail s `Closed

  let closed s = s.closed_p
end
