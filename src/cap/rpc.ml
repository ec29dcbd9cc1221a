open Consort

let src = Logs.Src.create "consort.rpc" ~doc:"Consort capability RPC"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  fragment : int;
  window : int;
  loopback_fragment : int;
  loopback_window : int;
  retransmit : Time.t;
  max_backoff : Time.t;
  silence : Time.t;
  alive : Time.t;
  locate_timeout : Time.t;
  locate_tries : int;
  locate_ttl : Time.t;
  max_message : int;
  max_sessions : int;
  max_buffered : int;
  max_queued : int;
  max_cache : int;
  max_pending : int;
}

let default_config =
  {
    fragment = 8192;
    window = 64;
    loopback_fragment = 61440;
    loopback_window = 16;
    retransmit = Time.of_ms 30;
    max_backoff = Time.of_sec 1.;
    silence = Time.of_sec 5.;
    alive = Time.of_ms 500;
    locate_timeout = Time.of_ms 100;
    locate_tries = 4;
    locate_ttl = Time.of_sec 600.;
    max_message = 64 * 1024 * 1024;
    max_sessions = 1024;
    max_buffered = 256 * 1024 * 1024;
    max_queued = 64;
    max_cache = 1024;
    max_pending = 4096;
  }

let () =
  let open Params in
  let d = default_config in
  register "rpc.loopback_fragment" (Int d.loopback_fragment) ~min:(Int 0) ~max:(Int Wire.max_chunk)
    ~doc:"data bytes per RPC fragment to a 127.x.x.x peer (0: as rpc.fragment)";
  List.iter
    (fun (name, v, doc) -> register ("rpc." ^ name) v ~doc)
    [
      ("fragment", Int d.fragment, "data bytes per RPC fragment");
      ("window", Int d.window, "RPC fragments in flight beyond the last acknowledged");
      ("loopback_window", Int d.loopback_window, "RPC fragments in flight to a 127.x.x.x peer");
      ("retransmit", Time d.retransmit, "first RPC enquiry or resend after this silence");
      ("max_backoff", Time d.max_backoff, "RPC enquiries back off up to this interval");
      ("silence", Time d.silence, "an RPC gives up after this long without a word from the server");
      ("alive", Time d.alive, "are-you-alive probe interval while the server works");
      ("locate_timeout", Time d.locate_timeout, "wait this long for a locate or handshake answer");
      ("locate_tries", Int d.locate_tries, "locate and handshake attempts");
      ("locate_ttl", Time d.locate_ttl, "a cached port location is trusted this long");
      ("max_message", Int d.max_message, "largest RPC request or reply, bytes");
      ("max_sessions", Int d.max_sessions, "server sessions kept");
      ( "max_buffered",
        Int d.max_buffered,
        "server bytes in requests being received and replies kept" );
      ("max_queued", Int d.max_queued, "requests waiting for getreq, per port");
      ("max_cache", Int d.max_cache, "locate cache entries");
      ("max_pending", Int d.max_pending, "client transactions not yet finished");
    ]

let config_of_params p =
  let i n = Params.int p ("rpc." ^ n) and t n = Params.time p ("rpc." ^ n) in
  {
    fragment = i "fragment";
    window = i "window";
    loopback_fragment = i "loopback_fragment";
    loopback_window = i "loopback_window";
    retransmit = t "retransmit";
    max_backoff = t "max_backoff";
    silence = t "silence";
    alive = t "alive";
    locate_timeout = t "locate_timeout";
    locate_tries = i "locate_tries";
    locate_ttl = t "locate_ttl";
    max_message = i "max_message";
    max_sessions = i "max_sessions";
    max_buffered = i "max_buffered";
    max_queued = i "max_queued";
    max_cache = i "max_cache";
    max_pending = i "max_pending";
  }

type call_error = [ `Rpc of Rpc_error.t | `Status of Status.t ]

let pp_call_error ppf = function `Rpc e -> Rpc_error.pp ppf e | `Status s -> Status.pp ppf s

let locate_list ?arg () =
  let v = match arg with Some a -> Some a | None -> Sys.getenv_opt "CONSORT_LOCATE" in
  match v with
  | None -> []
  | Some v -> List.filter (fun s -> s <> "") (List.map String.trim (String.split_on_char ',' v))

type stats = {
  executed : int;
  duplicates : int;
  refused_busy : int;
  bad_datagrams : int;
  rogue_answers : int;
  forged_session_errors : int;
  nothere_refuted : int;
  sessions : int;
  buffered : int;
  cache : int;
  pending : int;
}

(* A message being reassembled: its bytes, allocated whole once its size is
   known (bounded by [max_message] and counted in [max_buffered]). *)
module Acc = struct
  type t = { mutable b : Bytes.t; mutable len : int }

  let create () = { b = Bytes.empty; len = 0 }

  let reset t total =
    t.b <- Bytes.create total;
    t.len <- 0

  let clear t =
    t.b <- Bytes.empty;
    t.len <- 0

  let length t = t.len
  let fits_cs t cs = t.len + Cstruct.length cs <= Bytes.length t.b
  let fits t n = t.len + n <= Bytes.length t.b

  (* [n] bytes were written in place after the first [t.len]. *)
  let advance t n = t.len <- t.len + n

  let add_cs t cs =
    Cstruct.blit_to_bytes cs 0 t.b t.len (Cstruct.length cs);
    t.len <- t.len + Cstruct.length cs

  let contents t =
    let s =
      if t.len = Bytes.length t.b then Bytes.unsafe_to_string t.b else Bytes.sub_string t.b 0 t.len
    in
    t.b <- Bytes.empty;
    s
end

module Make (T : Transport.S) = struct
  type reply = Header.t * string

  (* ---- client side ---- *)

  type txn = {
    hdr : Header.t;
    tdata : string;
    idempotent : bool;
    k : (reply, Rpc_error.t) result -> unit;
    progress : ([ `Sent | `Received ] -> int -> int -> unit) option;
    mutable attempts : int; (* locate/handshake rounds left *)
    mutable xid : int;
    mutable sent_any : bool; (* a request fragment went out on the current session *)
    mutable acked : int; (* request bytes the server acknowledged *)
    mutable next : int; (* next request byte to send *)
    mutable working : bool; (* the server said it has the whole request *)
    mutable rep_hdr : Header.t option;
    mutable rep_total : int;
    rep_buf : Acc.t;
    mutable rep_frags : int;
    mutable last_heard : Time.t;
    mutable backoff : Time.t;
    mutable timer : T.timer option;
    mutable finished : bool;
  }

  (* Fragment size and window towards one peer: larger on loopback, where a
     datagram is never cut into frames. [ack_step]: the receiver acknowledges
     each time this many more bytes have arrived. *)
  type flow = { frag : int; window_bytes : int; ack_step : int }
  type cstate = Handshaking of Secure.client_state | Open of Secure.keys | Dead

  type csession = {
    caddr : T.address;
    cport : Port.t;
    cflow : flow;
    mutable cstate : cstate;
    mutable cid : string;
    mutable cseq : int64;
    queue : txn Queue.t;
    mutable current : txn option;
    mutable hs_tries : int;
    mutable hs_timer : T.timer option;
    mutable unsafe : string option;
    mutable checking : bool; (* a Nothere is being checked by a new locate *)
  }

  type locating = {
    lnonce : string;
    mutable waiters : ((T.address, Rpc_error.t) result -> unit) list;
    mutable ltries : int;
    mutable ltimer : T.timer option;
  }

  (* ---- server side ---- *)

  type sstate =
    | Idle
    | Receiving of { rxid : int; rtotal : int; rhdr : Header.t; rbuf : Acc.t; mutable nacked : int }
    | Executing of int
    | Replied of {
        pxid : int;
        phdr : Header.t;
        pdata : string;
        mutable packed : int;
        mutable pnext : int;
        mutable ptimer : T.timer option;
        mutable ptries : int;
      }
    | Refused of int
    | Forgot of int

  type ssession = {
    sid : string;
    saddr : T.address;
    sflow : flow;
    sserver : server;
    skeys : Secure.keys;
    snonce : string;
    sack : Wire.outer;
    mutable sseq : int64;
    mutable last_xid : int;
    mutable st : sstate;
    mutable used : Time.t;
    mutable alive_s : bool;
  }

  and server = {
    skey : Port.Key.t;
    sport : Port.t;
    snode : node;
    waiting_reqs : request Queue.t;
    mutable getter : (request -> unit) option;
    mutable stopped : bool;
  }

  and request = {
    rsession : ssession;
    xid : int;
    rheader : Header.t;
    rdata : string;
    mutable answered : bool;
  }

  and node = {
    tr : T.t;
    mutable conn : T.connection option;
    addr : T.address;
    cfg : config;
    g : Mirage_crypto_rng.g option;
    pool : Pool.t;
    scratch : Cstruct.t; (* a fragment's plaintext, sealed at once *)
    opened : Cstruct.t; (* a received datagram's plaintext, used only while it is handled *)
    mutable opened_busy : bool;
    locate_addrs : T.address list;
    multicast : T.address option;
    servers : (Port.t, server) Hashtbl.t;
    ssessions : (string, ssession) Hashtbl.t;
    hellos : (string, ssession) Hashtbl.t;
    mutable buffered : int;
    cache : (Port.t, T.address * Time.t) Hashtbl.t;
    locating : (Port.t, locating) Hashtbl.t;
    csessions : (string, csession) Hashtbl.t; (* by address and port *)
    cby_id : (string, csession) Hashtbl.t;
    mutable next_xid : int;
    mutable pending : int;
    mutable closed : bool;
    mutable executed : int;
    mutable duplicates : int;
    mutable refused_busy : int;
    mutable bad : int;
    mutable rogue : int;
    mutable forged : int;
    mutable refuted : int;
    mutable bs_left : int; (* signed Badsession answers left in the current window *)
    mutable bs_window : Time.t; (* when that window started *)
  }

  let address n = n.addr
  let transport n = n.tr
  let config n = n.cfg
  let is_closed n = n.closed

  let connection n =
    match n.conn with Some c -> c | None -> invalid_arg "Rpc.connection: not open"

  let stats n =
    {
      executed = n.executed;
      duplicates = n.duplicates;
      refused_busy = n.refused_busy;
      bad_datagrams = n.bad;
      rogue_answers = n.rogue;
      forged_session_errors = n.forged;
      nothere_refuted = n.refuted;
      sessions = Hashtbl.length n.ssessions;
      buffered = n.buffered;
      cache = Hashtbl.length n.cache;
      pending = n.pending;
    }

  type 'a sealed_send =
    node -> T.address -> Secure.keys -> up:bool -> session:string -> seq:int64 -> 'a
  (** Sends a [Data] datagram to an address, sealed with a session's keys for the direction [up]
      (client to server) under the session's id and a sequence number. *)

  (* Datagrams out of the node's connection, sealed or not, and the timers of
     its transport. *)
  module Send : sig
    val now : node -> Time.t
    val after : node -> Time.t -> (unit -> unit) -> T.timer
    val cancel : T.timer option -> unit
    val send_outer : node -> T.address -> Wire.outer -> unit

    val flow_to : node -> T.address -> flow
    (** The fragment size and window towards a peer. *)

    val crossed : flow -> int -> int -> bool
    (** [crossed f before after]: an acknowledgement is due, [after] bytes having arrived where
        there were [before]. *)

    val send_sealed : (Cstruct.t -> unit) sealed_send

    val send_frag : (Cstruct.t -> string -> off:int -> len:int -> unit) sealed_send
    (** [send_frag n dst keys ~up ~session ~seq prefix data ~off ~len] seals and sends one fragment:
        [prefix], then [len] bytes of [data] from [off]. *)

    val plain : Wire.inner -> Cstruct.t
  end = struct
    let now n = T.now n.tr
    let after n d f = T.at n.tr (Time.add (now n) d) f
    let cancel = function Some t -> T.cancel t | None -> ()

    let send_outer n dst o =
      match n.conn with
      | None -> ()
      | Some c -> (
          let msg = Msg.of_string n.pool (Codec.encode_string Wire.outer o) in
          let r = T.send c ~dst msg in
          Msg.release msg;
          match r with
          | Ok () -> ()
          | Error e -> Log.debug (fun m -> m "send to %a: %a" T.pp_address dst Transport.pp_error e)
          )

    let is_loopback addr =
      let s = T.address_to_string addr in
      String.length s > 4 && String.equal (String.sub s 0 4) "127."

    (* Room around a fragment's chunk in its datagram: the [Data] header, the
       AEAD's tag and the fragment's own header (with the request header). *)
    let frag_overhead = 512

    let flow_to n addr =
      let mtu = match n.conn with Some c -> (T.query c).mtu | None -> max_int in
      let frag, window =
        if
          n.cfg.loopback_fragment > 0
          && n.cfg.loopback_fragment + frag_overhead <= mtu
          && is_loopback addr
        then (n.cfg.loopback_fragment, n.cfg.loopback_window)
        else (n.cfg.fragment, n.cfg.window)
      in
      { frag; window_bytes = window * frag; ack_step = frag * max 1 (window / 8) }

    (* [crossed f before after]: an acknowledgement is due, [after] bytes having
       arrived where there were [before]. *)
    let crossed f before after = after / f.ack_step > before / f.ack_step

    (* Seals [plain] and sends it as one [Data] datagram, sealed straight into
       a buffer of the pool. *)
    let send_sealed_with n dst ~up ~session ~seq plain_len seal =
      match n.conn with
      | None -> ()
      | Some c -> (
          let hl = Wire.data_header_length in
          let sl = Secure.sealed_length plain_len in
          let iov = Pool.alloc n.pool (hl + sl) in
          let cs = Iovec.cstruct iov in
          Cstruct.blit_from_bytes (Wire.data_header ~up ~session ~seq) 0 cs 0 hl;
          seal (Cstruct.sub cs hl sl);
          let msg = Msg.of_iovec iov in
          let r = T.send c ~dst msg in
          Msg.release msg;
          match r with
          | Ok () -> ()
          | Error e -> Log.debug (fun m -> m "send to %a: %a" T.pp_address dst Transport.pp_error e)
          )

    let send_sealed n dst keys ~up ~session ~seq plain =
      send_sealed_with n dst ~up ~session ~seq (Cstruct.length plain)
        (Secure.seal_into keys ~session ~seq plain)

    (* A fragment: its prefix, then [len] bytes of [data] from [off], sealed
       from where they are. *)
    let send_frag n dst keys ~up ~session ~seq prefix data ~off ~len =
      send_sealed_with n dst ~up ~session ~seq
        (Cstruct.length prefix + len)
        (Secure.seal2_into keys ~session ~seq prefix data ~off ~len)

    let plain inner = Cstruct.of_string (Codec.encode_string Wire.inner inner)
  end

  open Send

  (* Where a port is served: the cache, the locate requests and their answers. *)
  module Locate : sig
    val forget : node -> Port.t -> unit

    val locate : node -> Port.t -> ((T.address, Rpc_error.t) result -> unit) -> unit
    (** From the cache, else by asking the locate addresses and the multicast group. *)

    val on_hereis : node -> T.address -> Port.t -> string -> string -> string -> unit
    (** [on_hereis n src port nonce public signature]: an answer to one of [n]'s locates. *)

    val on_locate : node -> T.address -> Port.t -> string -> unit
    (** [on_locate n src port nonce]: a locate, answered if [n] serves [port]. *)
  end = struct
    let forget n port = Hashtbl.remove n.cache port

    let locate n port k =
      match Hashtbl.find_opt n.cache port with
      | Some (addr, exp) when exp > now n -> k (Ok addr)
      | _ -> (
          Hashtbl.remove n.cache port;
          match Hashtbl.find_opt n.locating port with
          | Some l -> l.waiters <- k :: l.waiters
          | None ->
              let dsts = n.locate_addrs @ Option.to_list n.multicast in
              if dsts = [] then k (Error `Notfound)
              else if Hashtbl.length n.locating >= n.cfg.max_pending then k (Error `Tryagain)
              else begin
                let l =
                  {
                    lnonce = Crypto.random ?g:n.g 16;
                    waiters = [ k ];
                    ltries = n.cfg.locate_tries;
                    ltimer = None;
                  }
                in
                Hashtbl.replace n.locating port l;
                let rec ask () =
                  List.iter
                    (fun dst -> send_outer n dst (Wire.Locate { port; nonce = l.lnonce }))
                    dsts;
                  l.ltimer <-
                    Some
                      (after n n.cfg.locate_timeout (fun () ->
                           l.ltimer <- None;
                           l.ltries <- l.ltries - 1;
                           if l.ltries > 0 then ask ()
                           else begin
                             Hashtbl.remove n.locating port;
                             List.iter (fun k -> k (Error `Notfound)) (List.rev l.waiters)
                           end))
                in
                ask ()
              end)

    let on_hereis n src port nonce public signature =
      match Hashtbl.find_opt n.locating port with
      | Some l when String.equal l.lnonce nonce ->
          if Secure.locate_verify port ~nonce ~public ~signature then begin
            Hashtbl.remove n.locating port;
            cancel l.ltimer;
            if Hashtbl.length n.cache >= n.cfg.max_cache then begin
              (* Full: drop the entry closest to expiry. *)
              let victim =
                Hashtbl.fold
                  (fun p (_, e) acc ->
                    match acc with Some (_, e') when e' <= e -> acc | _ -> Some (p, e))
                  n.cache None
              in
              Option.iter (fun (p, _) -> Hashtbl.remove n.cache p) victim
            end;
            Hashtbl.replace n.cache port (src, Time.add (now n) n.cfg.locate_ttl);
            List.iter (fun k -> k (Ok src)) (List.rev l.waiters)
          end
          else begin
            n.rogue <- n.rogue + 1;
            Log.warn (fun m ->
                m "unverifiable locate answer for %a from %a" Port.pp port T.pp_address src)
          end
      | _ -> ()

    let on_locate n src port nonce =
      match Hashtbl.find_opt n.servers port with
      | Some srv when not srv.stopped ->
          send_outer n src
            (Wire.Hereis
               {
                 port;
                 nonce;
                 public = Port.Key.public srv.skey;
                 signature = Secure.locate_signature srv.skey ~nonce;
               })
      | _ -> ()
  end

  open Locate

  type progress = [ `Sent | `Received ] -> int -> int -> unit

  (* The client side: transactions queued on sessions, one session per
     (server address, port), opened by a handshake. *)
  module Client : sig
    val finish : node -> txn -> (reply, Rpc_error.t) result -> unit
    (** Ends a transaction once (a second time does nothing). *)

    val start_next : node -> csession -> unit
    (** Starts the session's next transaction if it is open and idle. *)

    val lose_session : node -> csession -> string -> unit
    (** The session is gone: its current transaction fails unless it may be sent again, the others
        start over. *)

    val not_there : node -> csession -> unit
    (** The port is not served where the session was being opened. *)

    val trans :
      node ->
      ?idempotent:bool ->
      ?progress:progress ->
      Header.t ->
      string ->
      ((reply, Rpc_error.t) result -> unit) ->
      unit

    val client_frag :
      node ->
      csession ->
      txn ->
      rtotal:int ->
      offset:int ->
      header:Header.t option ->
      Cstruct.t ->
      unit
    (** A fragment of the reply to the session's current transaction. *)

    val client_inner : node -> csession -> Wire.inner -> unit
    (** Any other message from the session's server. *)
  end = struct
    let csession_key addr port = T.address_to_string addr ^ "|" ^ Port.to_raw port

    let send_c_plain n cs p =
      match cs.cstate with
      | Open keys ->
          let seq = cs.cseq in
          cs.cseq <- Int64.succ seq;
          send_sealed n cs.caddr keys ~up:true ~session:cs.cid ~seq p
      | _ -> ()

    let send_c_frag n cs prefix data ~off ~len =
      match cs.cstate with
      | Open keys ->
          let seq = cs.cseq in
          cs.cseq <- Int64.succ seq;
          send_frag n cs.caddr keys ~up:true ~session:cs.cid ~seq prefix data ~off ~len
      | _ -> ()

    let send_c n cs inner = send_c_plain n cs (plain inner)

    let finish n (t : txn) r =
      if not t.finished then begin
        t.finished <- true;
        n.pending <- n.pending - 1;
        cancel t.timer;
        t.timer <- None;
        t.k r
      end

    let reset_txn t =
      t.sent_any <- false;
      t.acked <- 0;
      t.next <- 0;
      t.working <- false;
      t.rep_hdr <- None;
      t.rep_total <- 0;
      Acc.clear t.rep_buf;
      t.rep_frags <- 0;
      cancel t.timer;
      t.timer <- None

    let drop_csession n cs =
      cs.cstate <- Dead;
      cancel cs.hs_timer;
      cs.hs_timer <- None;
      (match Hashtbl.find_opt n.csessions (csession_key cs.caddr cs.cport) with
      | Some cs' when cs' == cs -> Hashtbl.remove n.csessions (csession_key cs.caddr cs.cport)
      | _ -> ());
      if cs.cid <> "" then Hashtbl.remove n.cby_id cs.cid

    (* Send request fragments from [t.next] while the window allows. *)
    let pump n cs t =
      let total = String.length t.tdata in
      let frag = cs.cflow.frag in
      let limit = t.acked + cs.cflow.window_bytes in
      let first = ref true in
      while
        (!first && total = 0 && t.next = 0 && not t.sent_any) || (t.next < total && t.next < limit)
      do
        first := false;
        let off = t.next in
        let len = min frag (total - off) in
        let header = if off = 0 then Some t.hdr else None in
        send_c_frag n cs
          (Wire.frag_head ~into:n.scratch ~dir:Wire.Req ~xid:t.xid ~total ~offset:off ~header ~len)
          t.tdata ~off ~len;
        t.sent_any <- true;
        t.next <- off + len
      done

    let rec arm n cs t d =
      cancel t.timer;
      t.timer <-
        Some
          (after n d (fun () ->
               t.timer <- None;
               on_timer n cs t))

    and on_timer n cs t =
      if t.finished || n.closed then ()
      else if Time.diff (now n) t.last_heard >= n.cfg.silence then begin
        Log.info (fun m -> m "server %a at %a silent" Port.pp cs.cport T.pp_address cs.caddr);
        forget n cs.cport;
        lose_session n cs "the server fell silent"
      end
      else begin
        send_c n cs (Wire.Enquire { xid = t.xid; have = Acc.length t.rep_buf });
        let next = if t.working then n.cfg.alive else t.backoff in
        t.backoff <- min n.cfg.max_backoff (2 * t.backoff);
        arm n cs t next
      end

    (* The session [cs] is gone (server restart, silence): its current
       transaction fails unless it may be sent again, the others start over. *)
    and lose_session n cs why =
      drop_csession n cs;
      let retry = Queue.create () in
      (match cs.current with
      | Some t when not t.finished ->
          cs.current <- None;
          if t.sent_any && not t.idempotent then finish n t (Error (`Failure why))
          else begin
            reset_txn t;
            Queue.push t retry
          end
      | _ -> ());
      Queue.iter (fun t -> if not t.finished then Queue.push t retry) cs.queue;
      Queue.clear cs.queue;
      Queue.iter
        (fun t ->
          t.attempts <- t.attempts - 1;
          if t.attempts <= 0 then
            finish n t (Error (if t.sent_any then `Failure why else `Notfound))
          else route n t)
        retry

    and start_next n cs =
      match (cs.current, cs.cstate) with
      | None, Open _ -> (
          match Queue.take_opt cs.queue with
          | None -> ()
          | Some t when t.finished -> start_next n cs
          | Some t ->
              cs.current <- Some t;
              n.next_xid <- n.next_xid + 1;
              t.xid <- n.next_xid;
              t.last_heard <- now n;
              t.backoff <- n.cfg.retransmit;
              pump n cs t;
              arm n cs t n.cfg.retransmit)
      | _ -> ()

    and complete n cs t r =
      cs.current <- None;
      finish n t r;
      start_next n cs

    and hello n cs =
      let st, o = Secure.client_hello ?g:n.g cs.cport in
      cs.cstate <- Handshaking st;
      send_outer n cs.caddr o;
      cancel cs.hs_timer;
      cs.hs_timer <-
        Some
          (after n n.cfg.locate_timeout (fun () ->
               cs.hs_timer <- None;
               match cs.cstate with
               | Handshaking _ ->
                   cs.hs_tries <- cs.hs_tries - 1;
                   if cs.hs_tries > 0 then hello n cs
                   else begin
                     forget n cs.cport;
                     drop_csession n cs;
                     let why =
                       match cs.unsafe with Some u -> u | None -> "no answer to the handshake"
                     in
                     Queue.iter
                       (fun t ->
                         if not t.finished then (
                           t.attempts <- t.attempts - 1;
                           if cs.unsafe <> None then finish n t (Error (`Unsafe why))
                           else if t.attempts <= 0 then finish n t (Error `Notfound)
                           else route n t))
                       cs.queue;
                     Queue.clear cs.queue
                   end
               | _ -> ()))

    and enqueue n addr port t =
      let key = csession_key addr port in
      let cs =
        match Hashtbl.find_opt n.csessions key with
        | Some cs -> cs
        | None ->
            let cs =
              {
                caddr = addr;
                cport = port;
                cflow = flow_to n addr;
                cstate = Dead;
                cid = "";
                cseq = 0L;
                queue = Queue.create ();
                current = None;
                hs_tries = n.cfg.locate_tries;
                hs_timer = None;
                unsafe = None;
                checking = false;
              }
            in
            Hashtbl.replace n.csessions key cs;
            hello n cs;
            cs
      in
      Queue.push t cs.queue;
      start_next n cs

    and route n t =
      locate n t.hdr.Header.port (function
        | Error e -> finish n t (Error e)
        | Ok addr -> if not t.finished then enqueue n addr t.hdr.Header.port t)

    let trans n ?(idempotent = false) ?progress hdr data k =
      let t =
        {
          hdr;
          tdata = data;
          idempotent;
          k;
          progress;
          attempts = n.cfg.locate_tries;
          xid = 0;
          sent_any = false;
          acked = 0;
          next = 0;
          working = false;
          rep_hdr = None;
          rep_total = 0;
          rep_buf = Acc.create ();
          rep_frags = 0;
          last_heard = now n;
          backoff = n.cfg.retransmit;
          timer = None;
          finished = false;
        }
      in
      if n.closed then k (Error `Aborted)
      else if String.equal (Port.to_raw hdr.Header.port) (String.make Port.length '\000') then
        k (Error `Badport)
      else if String.length data > n.cfg.max_message then
        k
          (Error
             (`Badaddress
                (Printf.sprintf "request of %d bytes over the limit of %d" (String.length data)
                   n.cfg.max_message)))
      else if n.pending >= n.cfg.max_pending then k (Error `Tryagain)
      else begin
        n.pending <- n.pending + 1;
        route n t
      end

    (* A fragment of the reply to [t], the current transaction of [cs]; [chunk]
       may share the receive buffer: it is not kept. *)
    let client_frag n cs t ~rtotal ~offset ~header chunk =
      t.last_heard <- now n;
      t.backoff <- n.cfg.retransmit;
      let total = String.length t.tdata in
      t.working <- true;
      t.acked <- total;
      if offset = 0 && t.rep_hdr = None then begin
        match header with
        | Some h when rtotal <= n.cfg.max_message ->
            t.rep_hdr <- Some h;
            t.rep_total <- rtotal;
            Acc.reset t.rep_buf rtotal
        | Some _ -> complete n cs t (Error (`Combad "reply over the size limit"))
        | None -> ()
      end;
      if t.rep_hdr <> None && rtotal = t.rep_total && not t.finished then begin
        if
          offset = Acc.length t.rep_buf
          && (Cstruct.length chunk > 0 || rtotal = 0)
          && Acc.fits_cs t.rep_buf chunk
        then begin
          let before = Acc.length t.rep_buf in
          Acc.add_cs t.rep_buf chunk;
          Option.iter (fun f -> f `Received (Acc.length t.rep_buf) rtotal) t.progress;
          t.rep_frags <- t.rep_frags + 1;
          (* The server keeps a reply of several fragments until told it arrived. *)
          let multi = t.rep_frags > 1 || rtotal > cs.cflow.frag in
          if Acc.length t.rep_buf >= rtotal then begin
            if multi then send_c n cs (Wire.Done { xid = t.xid });
            match t.rep_hdr with
            | Some h -> complete n cs t (Ok (h, Acc.contents t.rep_buf))
            | _ -> complete n cs t (Error (`Combad "reply longer than announced"))
          end
          else if crossed cs.cflow before (Acc.length t.rep_buf) then
            send_c n cs (Wire.Ack { dir = Wire.Rep; xid = t.xid; upto = Acc.length t.rep_buf })
        end
        else if offset > Acc.length t.rep_buf then
          send_c n cs (Wire.Ack { dir = Wire.Rep; xid = t.xid; upto = Acc.length t.rep_buf })
      end;
      if not t.finished then arm n cs t n.cfg.retransmit

    (* A message from the server of session [cs]. *)
    let client_inner n cs inner =
      match cs.current with
      | None -> ()
      | Some t -> (
          let heard () =
            t.last_heard <- now n;
            t.backoff <- n.cfg.retransmit
          in
          let total = String.length t.tdata in
          match inner with
          | Wire.Ack { dir = Wire.Req; xid; upto } when xid = t.xid ->
              heard ();
              let upto = min upto total in
              if upto = t.acked && upto < t.next then t.next <- upto (* a gap: go back *)
              else if upto > t.acked then begin
                t.acked <- upto;
                Option.iter (fun f -> f `Sent upto total) t.progress
              end;
              if t.next < t.acked then t.next <- t.acked;
              if t.acked >= total then t.working <- true;
              pump n cs t;
              arm n cs t (if t.working then n.cfg.alive else n.cfg.retransmit)
          | Wire.Alive { xid } when xid = t.xid ->
              heard ();
              t.working <- true;
              t.acked <- total;
              arm n cs t n.cfg.alive
          | Wire.Unknown { xid } when xid = t.xid ->
              (* The request never arrived in this session: sending it again is safe. *)
              heard ();
              t.acked <- 0;
              t.next <- 0;
              t.sent_any <- false;
              pump n cs t;
              arm n cs t n.cfg.retransmit
          | Wire.Busy { xid } when xid = t.xid -> complete n cs t (Error `Tryagain)
          | Wire.Moved { xid } when xid = t.xid ->
              (* Not carried out: find the port's new place. *)
              forget n cs.cport;
              cs.current <- None;
              reset_txn t;
              Queue.push t cs.queue;
              let q = Queue.copy cs.queue in
              Queue.clear cs.queue;
              drop_csession n cs;
              Queue.iter
                (fun t ->
                  if not t.finished then (
                    t.attempts <- t.attempts - 1;
                    if t.attempts <= 0 then finish n t (Error `Notfound) else route n t))
                q
          | Wire.Forgotten { xid } when xid = t.xid ->
              complete n cs t
                (Error (`Failure "the server carried the request out but dropped its reply"))
          | Wire.Frag { dir = Wire.Rep; xid; total = rtotal; offset; header; chunk }
            when xid = t.xid ->
              client_frag n cs t ~rtotal ~offset ~header (Cstruct.of_string chunk)
          | _ -> ())

    (* The port is not served where [cs] was opening a session: the transactions queued there start
       over (another locate) or fail when they have had their rounds. *)
    let not_there n cs =
      forget n cs.cport;
      drop_csession n cs;
      let q = Queue.copy cs.queue in
      Queue.clear cs.queue;
      Queue.iter
        (fun t ->
          if not t.finished then (
            t.attempts <- t.attempts - 1;
            if t.attempts <= 0 then finish n t (Error `Notfound) else route n t))
        q
  end

  open Client

  (* The server side: per session, the state of its last transaction (being
     received, carried out, replied), bounded in sessions and bytes; the
     requests handed to getreq. *)
  module Server : sig
    val release_state : node -> ssession -> unit
    (** Forgets what the session holds (and its bytes). *)

    val evict_session : node -> bool
    (** Drops the least recently used idle session, if there is one. *)

    val server_place :
      ssession -> plain_len:int -> got:int ref -> Cstruct.t -> (Bytes.t * int) option
    (** Where a request fragment's chunk goes if it is the next one of the request being received
        (for {!Secure.open_split}); [got] is set to the chunk's length. *)

    val server_appended :
      node -> ssession -> xid:int -> total:int -> Acc.t -> Header.t -> added:int -> unit
    (** [added] bytes of the request being received were appended to its buffer. *)

    val server_frag :
      node ->
      ssession ->
      xid:int ->
      total:int ->
      offset:int ->
      header:Header.t option ->
      Cstruct.t ->
      unit
    (** A fragment of a request. *)

    val server_inner : node -> ssession -> Wire.inner -> unit
    (** Any message from a session's client. *)

    val putrep : request -> Header.t -> string -> unit
    val header : request -> Header.t
    val data : request -> string
    val client : request -> T.address
    val serve : node -> Port.Key.t -> server
    val port : server -> Port.t
    val getreq : server -> (request -> unit) -> unit
    val listen : server -> (request -> unit) -> unit
    val stop : server -> unit
  end = struct
    let send_s_plain n ss p =
      let seq = ss.sseq in
      ss.sseq <- Int64.succ seq;
      send_sealed n ss.saddr ss.skeys ~up:false ~session:ss.sid ~seq p

    let send_s n ss inner = send_s_plain n ss (plain inner)

    let send_s_frag n ss prefix data ~off ~len =
      let seq = ss.sseq in
      ss.sseq <- Int64.succ seq;
      send_frag n ss.saddr ss.skeys ~up:false ~session:ss.sid ~seq prefix data ~off ~len

    let release_state n ss =
      (match ss.st with
      | Receiving r -> n.buffered <- n.buffered - r.rtotal
      | Replied p ->
          cancel p.ptimer;
          n.buffered <- n.buffered - String.length p.pdata
      | _ -> ());
      ss.st <- Idle

    let drop_ssession n ss =
      release_state n ss;
      ss.alive_s <- false;
      Hashtbl.remove n.ssessions ss.sid;
      Hashtbl.remove n.hellos ss.snonce

    (* Drop kept replies, least recently used first, until [need] more bytes fit. *)
    let make_room n need =
      if n.buffered + need > n.cfg.max_buffered then begin
        let replied =
          Hashtbl.fold
            (fun _ ss acc -> match ss.st with Replied _ -> ss :: acc | _ -> acc)
            n.ssessions []
        in
        let replied = List.sort (fun a b -> compare a.used b.used) replied in
        List.iter
          (fun ss ->
            if n.buffered + need > n.cfg.max_buffered then
              match ss.st with
              | Replied p ->
                  release_state n ss;
                  ss.st <- Forgot p.pxid
              | _ -> ())
          replied
      end;
      n.buffered + need <= n.cfg.max_buffered

    let rec pump_reply n ss =
      match ss.st with
      | Replied p ->
          let total = String.length p.pdata in
          let frag = ss.sflow.frag in
          let limit = p.packed + ss.sflow.window_bytes in
          let first = ref (p.pnext = 0) in
          while (!first && total = 0) || (p.pnext < total && p.pnext < limit) do
            first := false;
            let off = p.pnext in
            let len = min frag (total - off) in
            let header = if off = 0 then Some p.phdr else None in
            send_s_frag n ss
              (Wire.frag_head ~into:n.scratch ~dir:Wire.Rep ~xid:p.pxid ~total ~offset:off ~header
                 ~len)
              p.pdata ~off ~len;
            p.pnext <- off + len
          done;
          (* Long replies are driven by the server: resend from the last ack when
             acks stop. Short ones wait for the client's enquiry. *)
          cancel p.ptimer;
          p.ptimer <- None;
          if total > frag && p.packed < total && p.ptries > 0 then
            p.ptimer <-
              Some
                (after n n.cfg.retransmit (fun () ->
                     p.ptimer <- None;
                     p.ptries <- p.ptries - 1;
                     p.pnext <- p.packed;
                     pump_reply n ss))
      | _ -> ()

    let deliver n ss xid hdr data =
      let srv = ss.sserver in
      ss.st <- Executing xid;
      if srv.stopped then begin
        ss.st <- Refused xid;
        send_s n ss (Wire.Moved { xid })
      end
      else
        let r = { rsession = ss; xid; rheader = hdr; rdata = data; answered = false } in
        match srv.getter with
        | Some k ->
            srv.getter <- None;
            n.executed <- n.executed + 1;
            k r
        | None ->
            if Queue.length srv.waiting_reqs < n.cfg.max_queued then Queue.push r srv.waiting_reqs
            else begin
              ss.st <- Refused xid;
              n.refused_busy <- n.refused_busy + 1;
              send_s n ss (Wire.Busy { xid })
            end

    (* [added] bytes of the request [xid] being received were appended to
       [rbuf]. *)
    let server_appended n ss ~xid ~total rbuf rhdr ~added =
      let have = Acc.length rbuf in
      if have = total then begin
        n.buffered <- n.buffered - total;
        let data = Acc.contents rbuf in
        ss.st <- Idle;
        send_s n ss (Wire.Ack { dir = Wire.Req; xid; upto = total });
        deliver n ss xid rhdr data
      end
      else if crossed ss.sflow (have - added) have then
        send_s n ss (Wire.Ack { dir = Wire.Req; xid; upto = have })

    (* Where the chunk of a request fragment whose prefix is in [head] goes
       if it is the next one of the request being received, with its first
       bytes (those in [head]) already copied there; [None] otherwise. What
       [server_frag] would do, decided before the fragment is authenticated:
       nothing is counted until it is. *)
    let server_place ss ~plain_len ~got head =
      match Wire.peek_frag_head head ~plain_len with
      | Some (Wire.Req, xid, total, offset, _, len, pos) when xid = ss.last_xid && len > 0 -> (
          match ss.st with
          | Receiving r
            when r.rxid = xid && total = r.rtotal
                 && offset = Acc.length r.rbuf
                 && Acc.fits r.rbuf len ->
              let k = Cstruct.length head - pos in
              Cstruct.blit_to_bytes head pos r.rbuf.b r.rbuf.len k;
              got := len;
              Some (r.rbuf.b, r.rbuf.len + k)
          | _ -> None)
      | _ -> None

    (* A fragment of a request; [chunk] may share the receive buffer: it is
       not kept. *)
    let server_frag n ss ~xid ~total ~offset ~header chunk =
      if xid < ss.last_xid then n.duplicates <- n.duplicates + 1
      else if xid > ss.last_xid then begin
        (* A new transaction: the previous one is over for the client. *)
        match header with
        | Some hdr when offset = 0 ->
            release_state n ss;
            ss.last_xid <- xid;
            if total > n.cfg.max_message || not (make_room n total) then begin
              ss.st <- Refused xid;
              n.refused_busy <- n.refused_busy + 1;
              send_s n ss (Wire.Busy { xid })
            end
            else if Cstruct.length chunk >= total then begin
              if Cstruct.length chunk = total then deliver n ss xid hdr (Cstruct.to_string chunk)
            end
            else begin
              n.buffered <- n.buffered + total;
              let rbuf = Acc.create () in
              Acc.reset rbuf total;
              Acc.add_cs rbuf chunk;
              ss.st <- Receiving { rxid = xid; rtotal = total; rhdr = hdr; rbuf; nacked = -1 }
            end
        | _ -> () (* its first fragment is late: the client will enquire *)
      end
      else begin
        match ss.st with
        | Receiving r when r.rxid = xid && total = r.rtotal ->
            let have = Acc.length r.rbuf in
            if offset = have && Cstruct.length chunk > 0 && Acc.fits_cs r.rbuf chunk then begin
              Acc.add_cs r.rbuf chunk;
              server_appended n ss ~xid ~total r.rbuf r.rhdr ~added:(Cstruct.length chunk)
            end
            else if offset > have && r.nacked <> have then begin
              r.nacked <- have;
              send_s n ss (Wire.Ack { dir = Wire.Req; xid; upto = have })
            end
            else n.duplicates <- n.duplicates + 1
        | Executing x when x = xid ->
            n.duplicates <- n.duplicates + 1;
            send_s n ss (Wire.Alive { xid })
        | Replied p when p.pxid = xid ->
            n.duplicates <- n.duplicates + 1;
            if offset = 0 then begin
              p.pnext <- p.packed;
              pump_reply n ss
            end
        | Refused x when x = xid ->
            send_s n ss (if ss.sserver.stopped then Wire.Moved { xid } else Wire.Busy { xid })
        | Forgot x when x = xid -> send_s n ss (Wire.Forgotten { xid })
        | _ -> n.duplicates <- n.duplicates + 1
      end

    let server_inner n ss inner =
      ss.used <- now n;
      match inner with
      | Wire.Frag { dir = Wire.Req; xid; total; offset; header; chunk } ->
          server_frag n ss ~xid ~total ~offset ~header (Cstruct.of_string chunk)
      | Wire.Enquire { xid; have } ->
          if xid > ss.last_xid then send_s n ss (Wire.Unknown { xid })
          else if xid = ss.last_xid then begin
            match ss.st with
            | Receiving r ->
                send_s n ss (Wire.Ack { dir = Wire.Req; xid; upto = Acc.length r.rbuf })
            | Executing _ -> send_s n ss (Wire.Alive { xid })
            | Replied p ->
                let have = max 0 (min have (String.length p.pdata)) in
                p.packed <- max p.packed have;
                p.pnext <- p.packed;
                p.ptries <- 8;
                pump_reply n ss
            | Refused _ ->
                send_s n ss (if ss.sserver.stopped then Wire.Moved { xid } else Wire.Busy { xid })
            | Forgot _ -> send_s n ss (Wire.Forgotten { xid })
            | Idle -> send_s n ss (Wire.Unknown { xid })
          end
      | Wire.Ack { dir = Wire.Rep; xid; upto } -> (
          match ss.st with
          | Replied p when p.pxid = xid ->
              let total = String.length p.pdata in
              let upto = min upto total in
              if upto = p.packed && upto < p.pnext then p.pnext <- upto
              else if upto > p.packed then p.packed <- upto;
              if p.pnext < p.packed then p.pnext <- p.packed;
              p.ptries <- 8;
              pump_reply n ss
          | _ -> ())
      | Wire.Done { xid } -> (
          match ss.st with Replied p when p.pxid = xid -> release_state n ss | _ -> ())
      | _ -> n.bad <- n.bad + 1

    let putrep r hdr data =
      let ss = r.rsession in
      let n = ss.sserver.snode in
      if r.answered then ()
      else begin
        r.answered <- true;
        match ss.st with
        | Executing x when x = r.xid && ss.alive_s && not n.closed ->
            if String.length data > n.cfg.max_message || not (make_room n (String.length data)) then begin
              (* No room to keep the reply: it cannot be resent, so say so. *)
              ss.st <- Forgot r.xid;
              send_s n ss (Wire.Forgotten { xid = r.xid })
            end
            else begin
              n.buffered <- n.buffered + String.length data;
              ss.st <-
                Replied
                  {
                    pxid = r.xid;
                    phdr = hdr;
                    pdata = data;
                    packed = 0;
                    pnext = 0;
                    ptimer = None;
                    ptries = 8;
                  };
              pump_reply n ss
            end
        | _ -> ()
      end

    let header r = r.rheader
    let data r = r.rdata
    let client r = r.rsession.saddr

    let evict_session n =
      let idle =
        Hashtbl.fold
          (fun _ ss acc -> match ss.st with Receiving _ | Executing _ -> acc | _ -> ss :: acc)
          n.ssessions []
      in
      match List.sort (fun a b -> compare a.used b.used) idle with
      | ss :: _ ->
          drop_ssession n ss;
          true
      | [] -> false

    let serve n key =
      let port = Port.Key.port key in
      (match Hashtbl.find_opt n.servers port with
      | Some s when not s.stopped -> invalid_arg "Rpc.serve: the node already serves this port"
      | _ -> ());
      let s =
        {
          skey = key;
          sport = port;
          snode = n;
          waiting_reqs = Queue.create ();
          getter = None;
          stopped = n.closed;
        }
      in
      Hashtbl.replace n.servers port s;
      s

    let port s = s.sport

    let rec getreq s k =
      if s.getter <> None then invalid_arg "Rpc.getreq: a getreq is already waiting";
      match Queue.take_opt s.waiting_reqs with
      | Some r when r.rsession.alive_s ->
          s.snode.executed <- s.snode.executed + 1;
          k r
      | Some _ -> getreq s k
      | None -> s.getter <- Some k

    let listen s f =
      let rec go () =
        getreq s (fun r ->
            f r;
            if not s.stopped then go ())
      in
      go ()

    let stop s =
      s.stopped <- true;
      s.getter <- None;
      (* Requests still waiting were not carried out: send them elsewhere. *)
      Queue.iter
        (fun r ->
          let ss = r.rsession in
          match ss.st with
          | Executing x when x = r.xid && ss.alive_s ->
              ss.st <- Refused r.xid;
              send_s s.snode ss (Wire.Moved { xid = r.xid })
          | _ -> ())
        s.waiting_reqs;
      Queue.clear s.waiting_reqs
  end

  open Server

  (* The handshake's datagrams: a Hello answered (server), its answer or a
     Nothere received (client). The client sends Hello when it opens a
     session ({!Client}). *)
  module Handshake : sig
    val on_hello : node -> T.address -> Port.t -> string -> string -> unit
    (** [on_hello n src port eph nonce] *)

    val on_hello_ack : node -> T.address -> string -> string -> string -> string -> string -> unit
    (** [on_hello_ack n src nonce session eph public signature] *)

    val on_nothere : node -> T.address -> Port.t -> string -> unit
    (** [on_nothere n src port nonce] *)
  end = struct
    (* The session of [n] handshaking with [src] under the Hello's [nonce], and its state. *)
    let handshaking n src nonce =
      Hashtbl.fold
        (fun _ cs acc ->
          match cs.cstate with
          | Handshaking st
            when String.equal (Secure.client_nonce st) nonce && T.equal_address cs.caddr src ->
              Some (cs, st)
          | _ -> acc)
        n.csessions None

    let on_hello n src port eph nonce =
      match Hashtbl.find_opt n.servers port with
      | None -> send_outer n src (Wire.Nothere { port; nonce })
      | Some srv when srv.stopped -> send_outer n src (Wire.Nothere { port; nonce })
      | Some srv -> (
          match Hashtbl.find_opt n.hellos nonce with
          | Some ss when T.equal_address ss.saddr src -> send_outer n src ss.sack
          | Some _ -> n.bad <- n.bad + 1
          | None -> (
              if Hashtbl.length n.ssessions >= n.cfg.max_sessions && not (evict_session n) then
                Log.warn (fun m -> m "no room for a session from %a" T.pp_address src)
              else
                let rec fresh () =
                  let s = Crypto.random ?g:n.g 8 in
                  if Hashtbl.mem n.ssessions s then fresh () else s
                in
                let sid = fresh () in
                match Secure.server_accept ?g:n.g srv.skey ~session:sid ~eph ~nonce with
                | Error e ->
                    n.bad <- n.bad + 1;
                    Log.debug (fun m -> m "handshake from %a: %s" T.pp_address src e)
                | Ok (keys, ack) ->
                    let ss =
                      {
                        sid;
                        saddr = src;
                        sflow = flow_to n src;
                        sserver = srv;
                        skeys = keys;
                        snonce = nonce;
                        sack = ack;
                        sseq = 0L;
                        last_xid = 0;
                        st = Idle;
                        used = now n;
                        alive_s = true;
                      }
                    in
                    Hashtbl.replace n.ssessions sid ss;
                    Hashtbl.replace n.hellos nonce ss;
                    send_outer n src ack))

    let on_hello_ack n src nonce session eph public signature =
      let found = handshaking n src nonce in
      match found with
      | None -> ()
      | Some (cs, st) -> (
          match Secure.client_finish st ~session ~eph ~public ~signature with
          | Error e ->
              n.rogue <- n.rogue + 1;
              cs.unsafe <- Some e;
              Log.warn (fun m ->
                  m "handshake with %a for %a refused: %s" T.pp_address src Port.pp cs.cport e)
          | Ok keys ->
              cancel cs.hs_timer;
              cs.hs_timer <- None;
              cs.cstate <- Open keys;
              cs.cid <- session;
              cs.cseq <- 0L;
              Hashtbl.replace n.cby_id session cs;
              start_next n cs)

    (* [Nothere] comes before any key is shared and is not authenticated: anyone who sees the Hello's
       nonce can forge it. It is a hint only: the port is located again (locate answers are signed
       with the port's key), and the handshake goes on meanwhile. Only when no signed answer names
       this address does the port count as gone from here; one that does refutes the [Nothere]
       (counted), and a forger can at most cost one locate per session at a time. *)
    let on_nothere n src port nonce =
      let found = Option.map fst (handshaking n src nonce) in
      match found with
      | Some cs when Port.equal cs.cport port && not cs.checking ->
          cs.checking <- true;
          forget n port;
          locate n port (fun r ->
              cs.checking <- false;
              match (cs.cstate, r) with
              | Handshaking _, Ok addr when T.equal_address addr cs.caddr ->
                  n.refuted <- n.refuted + 1;
                  Log.info (fun m ->
                      m "a Nothere for %a from %a refuted by a locate answer" Port.pp port
                        T.pp_address src)
              | Open _, _ ->
                  (* The handshake, signed with the port's key, refuted it first. *)
                  n.refuted <- n.refuted + 1
              | Handshaking _, _ -> not_there n cs
              | Dead, _ -> ())
      | _ -> ()
  end

  open Handshake

  (* Every datagram the node receives, handed to the side it is for. *)
  module Dispatch : sig
    val on_data : node -> T.address -> up:bool -> session:string -> seq:int64 -> Cstruct.t -> unit
    (** A sealed message; the last argument may share the receive buffer: it is not kept. *)

    val on_datagram : node -> T.address -> string -> unit
    (** Any other datagram. *)
  end = struct
    (* Opens [sealed] into the node's [opened] buffer (into a fresh one when
       that is in use or too small) and hands the plaintext to [k], which must
       not keep it. *)
    let with_opened n keys ~session ~seq sealed k =
      let len = Cstruct.length sealed - Secure.sealed_length 0 in
      if n.opened_busy || len < 0 || len > Cstruct.length n.opened then
        k (Secure.open_cs keys ~session ~seq sealed)
      else begin
        let plain = Cstruct.sub n.opened 0 len in
        if Secure.open_into keys ~session ~seq sealed plain then begin
          n.opened_busy <- true;
          Fun.protect ~finally:(fun () -> n.opened_busy <- false) (fun () -> k (Some plain))
        end
        else k None
      end

    (* Datagrams of at least [placed_min] bytes of plaintext may be request
       fragments opened in place; their first [placed_head] bytes must hold
       the fragment's prefix (without a header: not the first fragment). *)
    let placed_min = 512
    let placed_head = 64

    (* Signed session errors cost a signature each and are larger than the datagram that asks for
       one: a stranger sending datagrams of made-up sessions (from a forged address) gets at most
       [badsession_burst] of them every 100 ms, so neither the CPU it takes nor what it reflects to
       another host grows with what it sends. A client whose session was lost asks again (every
       datagram it sends on it does), so one answer of the burst is enough. *)
    let badsession_burst = 20

    let badsession_allowed n =
      let t = now n in
      if Time.diff t n.bs_window >= Time.of_ms 100 || t < n.bs_window then begin
        n.bs_window <- t;
        n.bs_left <- badsession_burst
      end;
      if n.bs_left > 0 then begin
        n.bs_left <- n.bs_left - 1;
        true
      end
      else false

    (* A sealed message; [sealed] may share the receive buffer: it is not kept. *)
    let on_data n src ~up ~session ~seq sealed =
      if up then
        match Hashtbl.find_opt n.ssessions session with
        | None when not (badsession_allowed n) -> ()
        | None ->
            (* Signed by each port served here (a node serves one or a few): the client believes
               only its own session's port. *)
            Hashtbl.iter
              (fun port srv ->
                if not srv.stopped then
                  send_outer n src
                    (Wire.Badsession
                       {
                         port;
                         session;
                         public = Port.Key.public srv.skey;
                         signature = Secure.badsession_signature srv.skey ~session;
                       }))
              n.servers
        | Some ss when not (T.equal_address ss.saddr src) -> n.bad <- n.bad + 1
        | Some ss -> (
            (* The bulk of a request: its chunk opened straight into the
               request's buffer, when it is the next one. *)
            let plain_len = Cstruct.length sealed - Secure.sealed_length 0 in
            let got = ref 0 in
            let placed =
              if plain_len < placed_min || n.opened_busy then `Not_placed
              else
                Secure.open_split ss.skeys ~session ~seq sealed ~head:placed_head
                  (Cstruct.sub n.opened 0 placed_head)
                  (server_place ss ~plain_len ~got)
            in
            match placed with
            | `Refused -> n.bad <- n.bad + 1
            | `Opened -> (
                ss.used <- now n;
                match ss.st with
                | Receiving r ->
                    Acc.advance r.rbuf !got;
                    server_appended n ss ~xid:r.rxid ~total:r.rtotal r.rbuf r.rhdr ~added:!got
                | _ -> ())
            | `Not_placed -> (
                with_opened n ss.skeys ~session ~seq sealed @@ function
                | None -> n.bad <- n.bad + 1
                | Some plain -> (
                    match Wire.peek_frag plain with
                    | Some (Wire.Req, xid, total, offset, header, chunk) ->
                        ss.used <- now n;
                        server_frag n ss ~xid ~total ~offset ~header chunk
                    | _ -> (
                        match Codec.decode_exact Wire.inner plain with
                        | Ok inner -> server_inner n ss inner
                        | Error _ -> n.bad <- n.bad + 1))))
      else
        match Hashtbl.find_opt n.cby_id session with
        | Some ({ cstate = Open keys; _ } as cs) when T.equal_address cs.caddr src -> (
            with_opened n keys ~session ~seq sealed @@ function
            | None -> n.bad <- n.bad + 1
            | Some plain -> (
                match Wire.peek_frag plain with
                | Some (Wire.Rep, xid, rtotal, offset, header, chunk) -> (
                    match cs.current with
                    | Some t when xid = t.xid -> client_frag n cs t ~rtotal ~offset ~header chunk
                    | _ -> ())
                | _ -> (
                    match Codec.decode_exact Wire.inner plain with
                    | Ok inner -> client_inner n cs inner
                    | Error _ -> n.bad <- n.bad + 1)))
        | _ -> n.bad <- n.bad + 1

    let on_datagram n src s =
      match Codec.decode_string Wire.outer s with
      | Error _ -> n.bad <- n.bad + 1
      | Ok o -> (
          match o with
          | Wire.Hello { port; eph; nonce } -> on_hello n src port eph nonce
          | Wire.Hello_ack { nonce; session; eph; public; signature } ->
              on_hello_ack n src nonce session eph public signature
          | Wire.Nothere { port; nonce } -> on_nothere n src port nonce
          | Wire.Locate { port; nonce } -> on_locate n src port nonce
          | Wire.Hereis { port; nonce; public; signature } ->
              on_hereis n src port nonce public signature
          | Wire.Badsession { port; session; public; signature } -> (
              match Hashtbl.find_opt n.cby_id session with
              | Some cs when T.equal_address cs.caddr src ->
                  if
                    Port.equal port cs.cport
                    && Secure.badsession_verify port ~session ~public ~signature
                  then lose_session n cs "the server restarted"
                  else begin
                    (* Forged: whoever sent it does not hold the port's key. *)
                    n.forged <- n.forged + 1;
                    Log.debug (fun m ->
                        m "forged session error for %a from %a dropped" Port.pp cs.cport
                          T.pp_address src)
                  end
              | _ -> n.bad <- n.bad + 1)
          | Wire.Data { up; session; seq; sealed } ->
              on_data n src ~up ~session ~seq (Cstruct.of_string sealed))
  end

  open Dispatch

  let shutdown n =
    if not n.closed then begin
      n.closed <- true;
      Hashtbl.iter (fun _ srv -> srv.stopped <- true) n.servers;
      Hashtbl.iter
        (fun _ ss ->
          release_state n ss;
          ss.alive_s <- false)
        n.ssessions;
      Hashtbl.reset n.ssessions;
      Hashtbl.reset n.hellos;
      Hashtbl.iter
        (fun _ l ->
          cancel l.ltimer;
          List.iter (fun k -> k (Error `Aborted)) l.waiters)
        n.locating;
      Hashtbl.reset n.locating;
      let sessions = Hashtbl.fold (fun _ cs acc -> cs :: acc) n.csessions [] in
      Hashtbl.reset n.csessions;
      Hashtbl.reset n.cby_id;
      List.iter
        (fun cs ->
          cancel cs.hs_timer;
          Option.iter (fun t -> finish n t (Error `Aborted)) cs.current;
          Queue.iter (fun t -> finish n t (Error `Aborted)) cs.queue)
        sessions
    end

  let create ?(config = default_config) ?g ?(pool = Pool.default) ?(locate = []) ?multicast tr addr
      =
    if config.fragment <= 0 || config.fragment > Wire.max_chunk then
      Error "fragment size outside 1..65536"
    else if config.loopback_fragment < 0 || config.loopback_fragment > Wire.max_chunk then
      Error "loopback fragment size outside 0..65536"
    else if config.window <= 0 || config.loopback_window <= 0 then Error "window must be positive"
    else
      let n =
        {
          tr;
          conn = None;
          addr;
          cfg = config;
          g;
          pool;
          scratch = Cstruct.create (Wire.max_chunk + 1024);
          opened = Cstruct.create (Wire.max_chunk + 1024);
          opened_busy = false;
          locate_addrs = locate;
          multicast;
          servers = Hashtbl.create 4;
          ssessions = Hashtbl.create 16;
          hellos = Hashtbl.create 16;
          buffered = 0;
          cache = Hashtbl.create 16;
          locating = Hashtbl.create 4;
          csessions = Hashtbl.create 8;
          cby_id = Hashtbl.create 8;
          next_xid = 0;
          pending = 0;
          closed = false;
          executed = 0;
          duplicates = 0;
          refused_busy = 0;
          bad = 0;
          rogue = 0;
          forged = 0;
          refuted = 0;
          bs_left = 0;
          bs_window = Time.zero;
        }
      in
      let handler _c =
        {
          T.recv =
            (fun ~src iov ->
              if n.closed then Iovec.release iov
              else
                match Wire.peek_data (Iovec.cstruct iov) with
                | Some (up, session, seq, sealed) ->
                    Fun.protect
                      ~finally:(fun () -> Iovec.release iov)
                      (fun () -> on_data n src ~up ~session ~seq sealed)
                | None ->
                    let s = Iovec.to_string iov in
                    Iovec.release iov;
                    on_datagram n src s);
          closed = (fun () -> shutdown n);
        }
      in
      match T.open_ tr addr handler with
      | Error e -> Error (Fmt.str "cannot open %a: %a" T.pp_address addr Transport.pp_error e)
      | Ok c -> (
          n.conn <- Some c;
          match multicast with
          | None -> Ok n
          | Some group -> (
              match T.control c (T.Join_multicast group) with
              | Ok () -> Ok n
              | Error (`Unsupported _) -> Ok n
              | Error e ->
                  T.close c;
                  Error (Fmt.str "cannot join %a: %a" T.pp_address group Transport.pp_error e)))

  let close n =
    if not n.closed then begin
      let c = n.conn in
      shutdown n;
      Option.iter T.close c
    end

  (* What each side offers the node's users. *)
  let trans = Client.trans
  let forget = Locate.forget
  let locate = Locate.locate
  let serve = Server.serve
  let port = Server.port
  let getreq = Server.getreq
  let listen = Server.listen
  let putrep = Server.putrep
  let header = Server.header
  let data = Server.data
  let client = Server.client
  let stop = Server.stop

  let call n ?idempotent hdr parse k =
    trans n ?idempotent hdr "" (function
      | Error e -> k (Error (`Rpc e))
      | Ok r -> k (Result.map_error (fun s -> `Status s) (parse r)))

  let std_info n cap k = call n ~idempotent:true (Std.info_request cap) Std.parse_text k
  let std_status n cap k = call n ~idempotent:true (Std.status_request cap) Std.parse_text k

  let std_restrict n cap rights k =
    match Cap.restrict cap rights with
    | Ok c -> k (Ok c)
    | Error `Needs_server ->
        call n ~idempotent:true (Std.restrict_request cap rights) Std.parse_restrict k

  let std_destroy n cap k = call n (Std.destroy_request cap) Std.parse_unit k
  let std_touch n cap k = call n ~idempotent:true (Std.touch_request cap) Std.parse_unit k
  let std_age n cap k = call n (Std.age_request cap) Std.parse_unit k

  let serve_std s objs f =
    listen s (fun r ->
        match Std.handle s.sport objs r.rheader r.rdata with
        | Some (h, d) -> putrep r h d
        | None -> f r)

  module Blocking (W : sig
    val run_until : T.t -> (unit -> bool) -> unit
  end) =
  struct
    let wait n f =
      let res = ref None in
      f (fun r -> res := Some r);
      W.run_until n.tr (fun () -> !res <> None || n.closed);
      match !res with Some r -> r | None -> raise Exit

    let trans n ?idempotent ?progress hdr data =
      match wait n (trans n ?idempotent ?progress hdr data) with
      | r -> r
      | exception Exit -> Error `Aborted

    let getreq s = match wait s.snode (getreq s) with r -> Some r | exception Exit -> None

    let locate n port =
      match wait n (locate n port) with r -> r | exception Exit -> Error `Aborted

    let std n f = match wait n f with r -> r | exception Exit -> Error (`Rpc `Aborted)
    let std_info n cap = std n (std_info n cap)
    let std_status n cap = std n (std_status n cap)
    let std_restrict n cap rights = std n (std_restrict n cap rights)
    let std_destroy n cap = std n (std_destroy n cap)
    let std_touch n cap = std n (std_touch n cap)
    let std_age n cap = std n (std_age n cap)
  end
end
