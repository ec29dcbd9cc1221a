open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module Seal = Consort_seal.Seal
module C = Consort_ops.Capture.Make (Udp)

(* {1 Log context}

   The JSON log records written on behalf of one member carry its [member],
   [group] and [view] fields ({!log_context}); the daemon's own carry none.
   [current] gives the fields of the member whose code runs now: set around
   every entry into a member (its transport's receipts and timers, below;
   the daemon's operations on it, {!within}), restored after, so that a
   member's code that calls into another's (a client failed out from one
   member's upcall: its other members leave) logs each under its own. *)

let no_fields () = []
let current : (unit -> (string * string) list) ref = ref no_fields
let log_context () = !current ()

let within fields f =
  let saved = !current in
  current := fields;
  match f () with
  | r ->
      current := saved;
      r
  | exception e ->
      current := saved;
      raise e

let outside_members f = within no_fields f

(* A transport whose upcalls (datagrams received, closes, timers) run
   within one member's log context. *)
module In_context (T : Consort.Transport.S) = struct
  type address = T.address

  let pp_address = T.pp_address
  let equal_address = T.equal_address
  let address_to_string = T.address_to_string
  let address_of_string = T.address_of_string

  type connection = T.connection
  type handler = T.handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

  type nonrec control = T.control =
    | Drop_filter of (src:address -> Cstruct.t -> bool) option
    | Join_multicast of address

  type info = T.info = {
    local : address;
    mtu : int;
    multicast : bool;
    sent : int;
    received : int;
    dropped : int;
  }

  type timer = T.timer

  let send = T.send
  let cast = T.cast
  let close = T.close
  let control = T.control
  let query = T.query
  let cancel = T.cancel

  type t = { inner : T.t; fields : unit -> (string * string) list }

  let wrap inner fields = { inner; fields }
  let now t = T.now t.inner
  let at t time f = T.at t.inner time (fun () -> within t.fields f)

  let open_ t addr mk =
    T.open_ t.inner addr (fun c ->
        let h = mk c in
        {
          recv = (fun ~src iov -> within t.fields (fun () -> h.recv ~src iov));
          closed = (fun () -> within t.fields h.closed);
        })
end

module X = In_context (C)
module S = Seal.Make (X)
module G = Consort_group.Group.Make (S)
module P = Consort_group.Properties

let src = Logs.Src.create "consort.daemon" ~doc:"consortd"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  socket : string option;
  socket_mode : int;
  allow_uids : int list;
  allow_gids : int list;
  tcp : string option;
  token : string option;
  bind : string;
  ports : int;
  peers : string list;
  seal : (Seal.secret * Seal.mode) option;
  max_frame : int;
  max_queue : int;
  max_queued : int;
  max_clients : int;
  max_members : int;
  hello_timeout : float;
  spin_us : int;
  spin_yield : bool;
  control : string option;
  metrics : string option;
  metrics_public : bool;
  http : string option;
  http_public : bool;
  pcap : string option;
}

let default =
  {
    socket = None;
    socket_mode = 0o660;
    allow_uids = [ Unix.geteuid () ];
    allow_gids = [ Unix.getegid () ];
    tcp = None;
    token = None;
    bind = "127.0.0.1:7500";
    ports = 32;
    peers = [];
    seal = None;
    max_frame = (1 lsl 20) + 1024;
    max_queue = 8 lsl 20;
    max_queued = 64 lsl 20;
    max_clients = 256;
    max_members = 64;
    hello_timeout = 10.;
    spin_us = 0;
    spin_yield = false;
    control = None;
    metrics = None;
    metrics_public = false;
    http = None;
    http_public = false;
    pcap = None;
  }

(* "A.B.C.D:PORT" into its parts, checked. *)
let split_addr s =
  match String.rindex_opt s ':' with
  | None -> Error (Printf.sprintf "%S is not IP:PORT" s)
  | Some i -> (
      let host = String.sub s 0 i and port = String.sub s (i + 1) (String.length s - i - 1) in
      match (Unix.inet_addr_of_string host, int_of_string_opt port) with
      | exception Failure _ -> Error (Printf.sprintf "%S: %S is not an IPv4 address" s host)
      | _, None -> Error (Printf.sprintf "%S: %S is not a port" s port)
      | ip, Some p ->
          if Unix.domain_of_sockaddr (Unix.ADDR_INET (ip, 0)) <> Unix.PF_INET then
            Error (Printf.sprintf "%S: not an IPv4 address" s)
          else if p < 0 || p > 65535 then Error (Printf.sprintf "%S: port %d out of range" s p)
          else Ok (host, p))

let max_peers = 1024

(* A token's length, in bytes (about 128 bits of randomness at least, in
   any printable encoding). *)
let min_token = 16
let max_token = 4096

let read_token path =
  match Consort_seal.Seal.read_private path with
  | Error e -> Error e
  | Ok s ->
      let s = String.trim s in
      if String.length s < min_token then
        Error
          (Printf.sprintf "%s: a token of %d bytes; at least %d (consort keygen FILE writes one)"
             path (String.length s) min_token)
      else Ok s

(* A client's JOIN names at most this many peer addresses: each is sent
   discovery datagrams twice a second, and the client is not trusted to
   point the daemon at the world. *)
let max_client_peers = 64

let parse_peers ?(max_peers = max_peers) l =
  let rec go acc n = function
    | [] -> Ok (List.rev acc)
    | p :: rest -> (
        let p = String.trim p in
        if p = "" then go acc n rest
        else
          let base, last =
            match String.rindex_opt p '-' with
            | Some i -> (String.sub p 0 i, Some (String.sub p (i + 1) (String.length p - i - 1)))
            | None -> (p, None)
          in
          match split_addr base with
          | Error e -> Error e
          | Ok (host, first) -> (
              let last = match last with None -> Some first | Some s -> int_of_string_opt s in
              match last with
              | None -> Error (Printf.sprintf "%S: not IP:PORT or IP:PORT-PORT" p)
              | Some last when last < first || last > 65535 || first = 0 ->
                  Error (Printf.sprintf "%S: not a range of ports" p)
              | Some last ->
                  let k = last - first + 1 in
                  if n + k > max_peers then
                    Error (Printf.sprintf "more than %d peer addresses" max_peers)
                  else
                    go
                      (List.rev_append
                         (List.init k (fun i -> Printf.sprintf "%s:%d" host (first + i)))
                         acc)
                      (n + k) rest))
  in
  go [] 0 l

type member = {
  handle : int;
  client : client;
  group : string;
  mutable g : G.t option;
  mutable port : int;
  mutable ready : bool;  (** the JOIN's reply is out: upcalls may follow *)
  early : string Queue.t;  (** upcalls made during the join itself *)
  report : bool;
  seal : Seal.mode option;  (** as it joined: a SWITCH cannot change it *)
  rekeyed : bool;  (** it has per-view keys *)
  pending : (int * string) Queue.t;  (** accepted, not yet in the stack: request number, payload *)
  mutable exited : bool;
  mutable group_flow : bool;  (** the group's flow control holds it (its last flow upcall) *)
  totals : Consort_ops.Metrics.totals;  (** its counters, monotonic across views *)
  history : Consort_ops.Console.history;  (** its last views and why each changed (--http) *)
  rates : Consort_ops.Console.rates;  (** its messages sent and delivered a second (--http) *)
  mutable seen : (string * string) option;
      (** its id and its last view's, from its view upcalls: its log fields *)
}

and client = {
  cid : int;
  fd : Unix.file_descr;
  framer : Wire.framer;
  out : string Queue.t;  (** whole frames, the first one written from [out_off] on *)
  mutable out_off : int;
  mutable queued : int;  (** bytes of [out] not written yet *)
  mutable fd_open : bool;  (** after [closed], until the last frames are out (or given up) *)
  mutable flush_timer : Loop.timer option;
  mutable hello : bool;
  needs_token : bool;  (** over TCP with [--token]: its HELLO must present the token *)
  mutable version : int;  (** agreed at HELLO *)
  mutable closed : bool;
  mutable discard : int;  (** bytes still to drop of a frame over the limit *)
  mutable batch : bool;  (** serving the client's requests: replies wait for the end *)
  mutable slow : bool;
      (** over the high mark: its members are told FLOW 1 and their messages refused, until it is
          under the low mark *)
  mutable hello_timer : Loop.timer option;
  mutable close_timer : Loop.timer option;  (** the end of [linger] *)
  handles : (int, member) Hashtbl.t;
}

type t = {
  loop : Loop.t;
  cfg : config;
  ip : string;
  first_port : int;
  peers : string list;
  mutable listeners : Unix.file_descr list;
  clients : (int, client) Hashtbl.t;
  mutable next_cid : int;
  live : (int, member) Hashtbl.t;  (** by UDP port: members not yet exited *)
  counters : (string, int ref) Hashtbl.t;
  mutable closing : bool;
  mutable queued : int;  (** bytes of upcalls and replies waiting for live clients, in all *)
  mutable lingering : int;  (** connections failed out, not closed yet *)
  wbuf : Bytes.t;  (** small frames are gathered here to go out in one write *)
  capture : Consort_ops.Capture.writer option;  (** [--pcap] *)
  mutable ops : Consort_ops.Serve.t list;  (** the control socket and the metrics port *)
}

(* The log fields of a member: its group, and from its first view its id
   and its last view's, as [consort member]'s records (a record of a view
   being installed still names the view before). *)
let member_fields m () =
  match m.seen with
  | None -> [ ("group", m.group) ]
  | Some (me, vid) -> [ ("member", me); ("group", m.group); ("view", vid) ]

let count t name n =
  match Hashtbl.find_opt t.counters name with
  | Some r -> r := !r + n
  | None -> Hashtbl.replace t.counters name (ref n)

let stats t = List.sort compare (Hashtbl.fold (fun k v acc -> (k, !v) :: acc) t.counters [])
let clients t = Hashtbl.length t.clients
let members t = Hashtbl.length t.live

(* {1 Output}

   A client's replies and upcalls wait as whole frames in [out], counted
   in [c.queued] and, while the client is live, in [t.queued]. A client
   failed out with an ERROR gets, within [linger], the frames that waited
   for it (when it is not failed out for leaving too much unread, and they
   are at most [max_kept] bytes; otherwise only the rest of the frame it
   was reading), then the ERROR, then the end. Such a connection counts as
   a client until it is closed. *)
module Output : sig
  val high_mark : t -> int
  val low_mark : t -> int

  val schedule : t -> client -> Time.t -> unit
  (** [schedule t c delay] writes the client's frames after [delay] (once, however often asked). *)

  val emit : t -> client -> string -> unit
  (** Queues a frame to a client, failing it out when it leaves too much unread. *)

  val fail : ?error:Wire.code * string -> ?clean:bool -> t -> client -> string -> string -> unit
  (** [fail t c why detail]: the client is gone, or is to be: its members leave their groups. With
      [error], an ERROR about the connection is its last frame. *)

  val fatal : t -> client -> Wire.code -> string -> unit
  (** An ERROR about the connection itself, then the end of it. *)

  val reply : t -> client -> Wire.event -> unit
  val err : t -> client -> int -> Wire.code -> string -> unit

  val up : t -> member -> Wire.event -> unit
  (** An upcall of a member (waiting until its JOIN reply is out). *)

  val one_line : string -> string
end = struct
  let linger = Time.of_ms 2000

  (* A client with more than [high_mark] bytes unread is slowed until it has
     less than [low_mark]. *)
  let high_mark t = t.cfg.max_queue / 2
  let low_mark t = t.cfg.max_queue / 4

  (* What a client failed out with an ERROR may still get before it. *)
  let max_kept = 65536

  (* [n] bytes written: the frames they finish are dropped. *)
  let rec consume c n =
    if n > 0 then begin
      let f = Queue.peek c.out in
      let rest = String.length f - c.out_off in
      if n >= rest then begin
        ignore (Queue.pop c.out);
        c.out_off <- 0;
        consume c (n - rest)
      end
      else c.out_off <- c.out_off + n
    end

  let close_fd t c =
    if c.fd_open then begin
      c.fd_open <- false;
      Option.iter Loop.cancel c.flush_timer;
      c.flush_timer <- None;
      Option.iter Loop.cancel c.close_timer;
      c.close_timer <- None;
      (try Unix.close c.fd with Unix.Unix_error _ -> ());
      if c.closed then t.lingering <- t.lingering - 1 else t.queued <- t.queued - c.queued;
      Queue.clear c.out;
      c.out_off <- 0;
      c.queued <- 0
    end

  (* One write: the first frame's rest alone if it is large, else as many
     frames as fit in [wbuf]. *)
  let write_some t c =
    let first = Queue.peek c.out in
    let rest = String.length first - c.out_off in
    if rest >= Bytes.length t.wbuf / 2 || Queue.length c.out = 1 then
      Unix.single_write_substring c.fd first c.out_off (min rest (256 * 1024))
    else begin
      let len = ref 0 and off = ref c.out_off in
      (try
         Queue.iter
           (fun f ->
             let k = min (String.length f - !off) (Bytes.length t.wbuf - !len) in
             Bytes.blit_string f !off t.wbuf !len k;
             len := !len + k;
             off := 0;
             if !len = Bytes.length t.wbuf then raise Exit)
           c.out
       with Exit -> ());
      Unix.single_write c.fd t.wbuf 0 !len
    end

  (* Writes while the socket takes them, at most [max_writes] times a round:
     one write a round would let a client that reads as fast as it is sent
     to fall behind whoever makes the daemon send more than [wbuf] a round. *)
  let max_writes = 16

  let rec flush ?(writes = 0) t c =
    c.flush_timer <- None;
    if c.fd_open && c.queued > 0 then begin
      match write_some t c with
      | n ->
          count t "bytes_out" n;
          consume c n;
          c.queued <- c.queued - n;
          if not c.closed then t.queued <- t.queued - n;
          if c.slow && (not c.closed) && c.queued < low_mark t then set_slow t c false;
          if c.queued > 0 then
            if writes + 1 < max_writes && not c.closed then flush ~writes:(writes + 1) t c
            else schedule t c (Time.of_ms (if c.closed then 10 else 1))
          else if c.closed then close_fd t c
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) ->
          schedule t c (Time.of_ms (if c.closed then 10 else 1))
      | exception Unix.Unix_error (e, _, _) ->
          if c.closed then close_fd t c else fail t c "write" (Unix.error_message e)
    end
    else if c.closed then close_fd t c

  and schedule t c delay =
    match c.flush_timer with
    | Some _ -> ()
    | None -> c.flush_timer <- Some (Loop.after t.loop delay (fun () -> flush t c))

  (* Queue a frame to a client. A client that leaves more than [max_queue]
     bytes unread is failed out; so is, when all clients together leave more
     than [max_queued], the one that leaves the most. *)
  and emit t c frame =
    if not c.closed then begin
      let n = String.length frame in
      Queue.push frame c.out;
      c.queued <- c.queued + n;
      t.queued <- t.queued + n;
      if c.queued > t.cfg.max_queue then
        let reason =
          Printf.sprintf "more than %d bytes of upcalls unread (--max-queue)" t.cfg.max_queue
        in
        fail t c "overloaded" reason ~error:(Wire.Overloaded, reason)
      else begin
        if (not c.slow) && c.queued > high_mark t then set_slow t c true;
        if t.queued > t.cfg.max_queued then shed t;
        (* Out at the end of this round of the loop, with what else comes
           in it (one write for the datagrams of one receive); while a
           client's requests are served, at the end of the batch. *)
        if not c.closed then schedule t c 0
      end
    end

  (* Backpressure (doc/protocol.md): past the high mark, each of the
     client's members is told FLOW 1 (unless its group's flow control already
     holds it) and its messages are refused; under the low mark, FLOW 0
     (unless the group's still holds it). *)
  and set_slow t c slow =
    c.slow <- slow;
    count t (if slow then "slow_on" else "slow_off") 1;
    (* Listed first: a FLOW that takes the client over its cap fails it
       out, and its members' leaving changes the table. *)
    let ms = Hashtbl.fold (fun _ m acc -> m :: acc) c.handles [] in
    List.iter
      (fun m ->
        (* A member whose JOIN reply is not out yet is told when it is. *)
        if m.ready && (not m.exited) && (not m.group_flow) && not c.closed then
          emit t c (Wire.encode_event (Wire.Flow { handle = m.handle; blocked = slow })))
      (List.sort (fun a b -> compare a.handle b.handle) ms)

  (* Over the daemon's cap: the clients that leave the most are failed out
     until the rest is under it. *)
  and shed t =
    let worst =
      Hashtbl.fold
        (fun _ (c : client) (acc : client option) ->
          match acc with
          | Some w when w.queued >= c.queued -> acc
          | _ -> if c.queued > 0 then Some c else acc)
        t.clients None
    in
    match worst with
    | None -> ()
    | Some c ->
        let reason =
          Printf.sprintf
            "the daemon's clients leave more than %d bytes unread (--max-queued); this one the \
             most, %d"
            t.cfg.max_queued c.queued
        in
        fail t c "overloaded" reason ~error:(Wire.Overloaded, reason);
        if t.queued > t.cfg.max_queued then shed t

  (* The client is gone, or is to be: its members leave their groups. With
     [error], an ERROR about the connection is its last frame. *)
  and fail ?error ?(clean = false) t c why detail =
    if not c.closed then begin
      (* The daemon's record, not a member's: even from a member's upcall
         (a client over its queue). *)
      if clean then begin
        count t why 1;
        within no_fields (fun () -> Log.info (fun m -> m "client %d closed its connection" c.cid))
      end
      else begin
        count t ("failed_" ^ why) 1;
        within no_fields (fun () ->
            Log.info (fun m -> m "client %d failed out: %s: %s" c.cid why detail))
      end;
      c.closed <- true;
      t.queued <- t.queued - c.queued;
      Option.iter Loop.cancel c.hello_timer;
      c.hello_timer <- None;
      Loop.unwatch t.loop c.fd;
      Hashtbl.remove t.clients c.cid;
      t.lingering <- t.lingering + 1;
      (match error with
      | None -> close_fd t c
      | Some (code, reason) ->
          (* The frames waiting stay if they are few (the client is owed
             its replies) and the client is not failed out for leaving too
             much unread; otherwise only the frame under way. Then the
             ERROR, and at most [linger] to write them. *)
          if code = Wire.Overloaded || c.queued > max_kept then begin
            let keep = if c.out_off > 0 then Queue.take_opt c.out else None in
            Queue.clear c.out;
            Option.iter (fun f -> Queue.push f c.out) keep;
            c.queued <- Option.fold ~none:0 ~some:(fun f -> String.length f - c.out_off) keep
          end;
          let e = Wire.encode_event (Wire.Error { handle = Wire.no_handle; code; reason }) in
          Queue.push e c.out;
          c.queued <- c.queued + String.length e;
          Option.iter Loop.cancel c.flush_timer;
          c.flush_timer <- None;
          flush t c;
          if c.fd_open then
            c.close_timer <- Some (Loop.after t.loop linger (fun () -> close_fd t c)));
      (* A leave may exit at once (a member alone), which changes the table:
         the members are listed first. *)
      let ms = Hashtbl.fold (fun _ m acc -> m :: acc) c.handles [] in
      List.iter
        (fun m ->
          match m.g with
          | Some g when not m.exited -> within (member_fields m) (fun () -> G.leave g)
          | _ -> ())
        ms
    end

  (* An ERROR about the connection itself, then the end of it. *)
  let fatal t c code reason = fail t c (Wire.code_name code) reason ~error:(code, reason)
  let reply t c ev = emit t c (Wire.encode_event ev)
  let err t c handle code reason = reply t c (Wire.Error { handle; code; reason })

  (* Upcalls of a member whose JOIN reply is not out yet wait. *)
  let up t m ev =
    let frame = Wire.encode_event ev in
    if m.ready then emit t m.client frame else Queue.push frame m.early

  let one_line s = String.map (function '\n' | '\r' -> ' ' | c -> c) s
end

open Output

(* {1 Members}

   JOIN, the members' upcalls, and the operations on a member. *)

module Members : sig
  val stack_of : P.t list -> string -> (Layer.t list * Params.t, Wire.code * string) result
  (** The layers of the properties and the parameters a client gave, checked. *)

  val not_offered : P.t list -> string option
  (** Why properties a client asked for are not offered through this protocol, if they are not. *)

  val seal_not_switchable : member -> P.t list -> string option

  val join_member :
    t ->
    client ->
    handle:int ->
    group:string ->
    props:string ->
    params:string ->
    flags:int ->
    peers:string list ->
    (member * G.t, Wire.code * string) result

  val with_member : t -> client -> int -> (member -> G.t -> unit) -> unit
  (** [with_member t c handle f] is [f] on the client's live member [handle], or an ERROR. *)

  val max_group : int
  (** The longest group name, in bytes. *)

  val ok : t -> client -> int -> unit

  val message :
    t ->
    client ->
    handle:int ->
    req:int ->
    string ->
    (G.t -> (unit, Consort_group.Group.error) result) ->
    unit
  (** A CAST or SEND: OK or ERROR in version 1; in version 2, nothing when it is taken, REFUSED when
      not. *)
end = struct
  let not_primary_prefix = "the member's view is not primary: "

  let refusal = function
    | Consort_group.Group.Flow_control ->
        (Wire.Flow_control, "flow control is full: wait for flow off")
    | Too_big { size; max } ->
        (Wire.Too_big, Printf.sprintf "%d bytes, over the largest message, %d" size max)
    | Not_member id -> (Wire.Not_member, Printf.sprintf "%s is not in the view" id)
    | Leaving -> (Wire.Leaving, "the member is leaving")
    | Exited -> (Wire.Exited, "the member has left the group")
    | Not_primary q -> (Wire.Not_primary, not_primary_prefix ^ q)

  (* The request number of a message the stack took, or reports lost: the
     first pending one with this very payload (the group hands back the
     string it was given, in order). *)
  let take_pending m payload =
    if Queue.is_empty m.pending then None
    else if snd (Queue.peek m.pending) == payload then Some (fst (Queue.pop m.pending))
    else
      let found = ref None and rest = Queue.create () in
      Queue.iter
        (fun ((req, p) as e) ->
          if !found = None && p == payload then found := Some req else Queue.push e rest)
        m.pending;
      Queue.clear m.pending;
      Queue.transfer rest m.pending;
      !found

  let member_exited t m =
    if not m.exited then begin
      m.exited <- true;
      (match Hashtbl.find_opt t.live m.port with
      | Some m' when m' == m -> Hashtbl.remove t.live m.port
      | _ -> ());
      Hashtbl.remove m.client.handles m.handle;
      Queue.clear m.pending;
      up t m (Wire.Exit { handle = m.handle })
    end

  let callbacks t m =
    let handle = m.handle in
    {
      Consort_group.Group.view =
        (fun (v : Consort_group.Group.view_info) ->
          m.seen <- Some (v.members.(v.rank), v.vid);
          Consort_ops.Console.record m.history
            {
              t = Unix.gettimeofday ();
              vid = v.vid;
              ltime = v.ltime;
              members = Array.to_list v.members;
              coordinator = v.coordinator;
              changes = Consort_ops.Console.changes ~joined:v.joined ~left:v.left ~why:v.why;
            };
          up t m
            (Wire.View
               {
                 handle;
                 vid = v.vid;
                 ltime = v.ltime;
                 rank = v.rank;
                 coordinator = v.coordinator;
                 members = Array.to_list v.members;
                 joined = v.joined;
                 left = v.left;
                 why =
                   List.map
                     (fun id ->
                       match List.assoc_opt id v.why with Some w -> one_line w | None -> "")
                     v.left;
               }));
      cast = (fun ~origin s -> up t m (Wire.Cast_up { handle; origin; payload = s }));
      send = (fun ~origin s -> up t m (Wire.Send_up { handle; origin; payload = s }));
      block =
        (fun () ->
          Option.iter
            (fun g ->
              Consort_ops.Metrics.observe m.totals
                (G.counters g @ [ ("seal", Seal.stats_list (S.stats (G.connection g))) ]))
            m.g;
          up t m (Wire.Block { handle }));
      flow =
        (fun b ->
          m.group_flow <- b;
          (* While the client is slowed its members are told blocked already. *)
          if not m.client.slow then up t m (Wire.Flow { handle; blocked = b }));
      exit = (fun () -> member_exited t m);
    }

  (* The layers of [props] and the parameters a client gave, checked. *)
  let stack_of props params =
    let ( let* ) = Result.bind in
    let* layers =
      Result.map_error (fun e -> (Wire.Bad_props, Fmt.str "%a" P.pp_error e)) (P.layers props)
    in
    let* params =
      if String.trim params = "" then Ok Params.empty
      else
        Result.map_error
          (fun e -> (Wire.Bad_params, Fmt.str "%a" Params.pp_error e))
          (Params.of_string params)
    in
    Ok (layers, params)

  (* Properties a client could ask for but not use through this protocol:
     state transfer needs callbacks in the member's process, and extended
     virtual synchrony's guarantee is stated relative to transitional views
     no upcall carries. *)
  let not_offered props =
    if List.mem P.Xfer props then
      Some "Xfer needs state callbacks in the member's process: not offered through the daemon"
    else if List.mem P.Evs props then
      Some
        "Evs states safe delivery relative to transitional views, which no upcall of this protocol \
         carries: not offered through the daemon"
    else if List.mem P.Migrate props then
      Some
        "Migrate: this protocol has no operation to move a member: not offered through the daemon"
    else if List.mem P.Cltsvr props then
      Some
        "Cltsvr: this protocol serves no clients of a server group: not offered through the daemon"
    else None

  (* The seal a member has is chosen at JOIN: a SWITCH that asks for more
     is refused, not taken with the seal as it was. *)
  let seal_not_switchable m props =
    let has p = List.mem p props in
    if (has P.Auth || has P.Privacy || has P.Rekey) && m.seal = None then
      Some "Auth, Privacy and Rekey need the daemon to run with --key FILE"
    else if has P.Privacy && m.seal <> Some Seal.Privacy then
      Some "Privacy is chosen at JOIN: this member's datagrams stay sealed as it joined (Auth)"
    else if has P.Rekey && not m.rekeyed then
      Some "Rekey is chosen at JOIN: this member joined with seal.rekey=false"
    else None

  let join_member t c ~handle ~group ~props ~params ~flags ~peers =
    let ( let* ) = Result.bind in
    let* props =
      if String.trim props = "" then Ok P.vsync
      else
        Result.map_error (fun e -> (Wire.Bad_props, Fmt.str "%a" P.pp_error e)) (P.of_string props)
    in
    let* () = match not_offered props with Some e -> Error (Wire.Bad_props, e) | None -> Ok () in
    let privacy = List.mem P.Privacy props
    and auth = List.mem P.Auth props
    and rekey = List.mem P.Rekey props in
    let* seal =
      match t.cfg.seal with
      | None when privacy || auth || rekey ->
          Error
            ( Wire.Join_failed,
              Printf.sprintf "property %s needs the daemon to run with --key FILE"
                (if privacy then "Privacy" else if rekey then "Rekey" else "Auth") )
      | None -> Ok None
      | Some (secret, mode) -> Ok (Some (secret, if privacy then Seal.Privacy else mode))
    in
    let* layers, params = stack_of props params in
    (* Per-view keys as in [consort member]: on with a key unless the
       client's seal.rekey=false, which property Rekey contradicts. *)
    let rekey_on = seal <> None && Params.bool params Seal.rekey_param in
    let* () =
      if rekey && not rekey_on then
        Error
          ( Wire.Bad_params,
            Printf.sprintf "property Rekey and %s=false contradict each other" Seal.rekey_param )
      else Ok ()
    in
    let* () =
      Result.map_error (fun e -> (Wire.Bad_params, e)) (Consort_group.Total.check_params params)
    in
    let* peers =
      Result.map_error
        (fun e -> (Wire.Bad_address, "peers: " ^ e))
        (if peers = [] then Ok t.peers else parse_peers ~max_peers:max_client_peers peers)
    in
    let* () =
      if Hashtbl.mem c.handles handle || handle = Wire.no_handle then
        Error (Wire.Handle_in_use, Printf.sprintf "handle %d is in use" handle)
      else Ok ()
    in
    let* () =
      if Hashtbl.length c.handles >= t.cfg.max_members then
        Error (Wire.Overloaded, Printf.sprintf "at most %d members per client" t.cfg.max_members)
      else Ok ()
    in
    let local =
      Hashtbl.fold
        (fun port m acc ->
          if m.group = group && not m.exited then Printf.sprintf "%s:%d" t.ip port :: acc else acc)
        t.live []
    in
    let peers = List.sort_uniq compare (local @ peers) in
    let m =
      {
        handle;
        client = c;
        group;
        g = None;
        port = 0;
        ready = false;
        early = Queue.create ();
        report = flags land Wire.flag_report <> 0;
        seal = Option.map snd seal;
        rekeyed = rekey_on;
        pending = Queue.create ();
        exited = false;
        group_flow = false;
        totals = Consort_ops.Metrics.totals ();
        history = Consort_ops.Console.history ();
        rates = Consort_ops.Console.rates ();
        seen = None;
      }
    in
    let on_sent ~vid kind s =
      if m.report then
        match take_pending m s with
        | Some req ->
            up t m
              (Wire.Sent
                 {
                   handle;
                   req;
                   kind = (match kind with `Cast -> `Cast | `Send _ -> `Send);
                   view = vid;
                 })
        | None -> ()
    in
    let on_lost _kind s reason =
      if m.report then
        match take_pending m s with
        | Some req -> up t m (Wire.Lost { handle; req; reason = one_line reason })
        | None -> ()
    in
    let rec try_port i =
      if i >= t.cfg.ports then
        Error
          ( Wire.Join_failed,
            Printf.sprintf "no free port in %s:%d-%d" t.ip t.first_port
              (t.first_port + t.cfg.ports - 1) )
      else
        let port = t.first_port + i in
        if Hashtbl.mem t.live port then try_port (i + 1)
        else begin
          m.port <- port;
          let tr =
            S.wrap ~rekey:rekey_on
              ~freshness:(Params.time params Seal.freshness_param)
              ~group
              (X.wrap (C.wrap t.loop t.capture) (member_fields m))
              seal
          in
          match
            within (member_fields m) (fun () ->
                G.join ~params ~peers ~on_sent ~on_lost ~heal:(List.mem P.Heal props) ~layers
                  ?rekey:(S.rekey tr) tr ~group
                  ~addr:(Printf.sprintf "%s:%d" t.ip port)
                  (callbacks t m))
          with
          | Ok g -> Ok g
          | Error (Consort_group.Group.Cannot_open _) -> try_port (i + 1)
          | Error e ->
              Error (Wire.Join_failed, one_line (Fmt.str "%a" Consort_group.Group.pp_join_error e))
        end
    in
    let* g = try_port 0 in
    m.g <- Some g;
    Hashtbl.replace t.live m.port m;
    Hashtbl.replace c.handles handle m;
    count t "joins" 1;
    Ok (m, g)

  let with_member t c handle f =
    match Hashtbl.find_opt c.handles handle with
    | Some ({ g = Some g; exited = false; _ } as m) -> within (member_fields m) (fun () -> f m g)
    | _ -> err t c handle Wire.No_such_handle (Printf.sprintf "no member with handle %d" handle)

  let max_group = 255
  let ok t c handle = reply t c (Wire.Ok { handle; value = 0; info = "" })

  (* A CAST or SEND: OK or ERROR in version 1; in version 2, nothing when
     it is taken, REFUSED when not. *)
  let message t c ~handle ~req payload f =
    let refused code reason =
      if c.version >= 2 then reply t c (Wire.Refused { handle; req; code; reason })
      else err t c handle code reason
    in
    match Hashtbl.find_opt c.handles handle with
    | Some { g = Some _; exited = false; _ } when c.slow ->
        count t "refused_slow" 1;
        refused Wire.Flow_control
          (Printf.sprintf
             "the client leaves more than %d bytes of upcalls unread: wait for flow off (below %d)"
             (high_mark t) (low_mark t))
    | Some ({ g = Some g; exited = false; _ } as m) -> (
        if m.report then Queue.push (req, payload) m.pending;
        match within (member_fields m) (fun () -> f g) with
        | Ok () -> if c.version < 2 then ok t c handle
        | Error e ->
            if m.report then ignore (take_pending m payload);
            let code, reason = refusal e in
            refused code reason)
    | _ -> refused Wire.No_such_handle (Printf.sprintf "no member with handle %d" handle)
end

open Members

(* {1 Who may be a client}

   On the Unix socket, the peer's credentials as the kernel recorded them
   at connect (SO_PEERCRED, SO_PEERGROUPS): root, the daemon's own user, a
   uid of [allow_uids], or a member (by its primary or a supplementary
   group) of a group of [allow_gids]. Over TCP, with a token: the token in
   HELLO. *)

module Access : sig
  val peer_allowed : config -> Unix.file_descr -> (unit, string) result
  (** Whether the peer of a Unix socket may be a client, by its credentials. *)

  val token_ok : t -> string -> bool
  (** Whether a token is the daemon's (any is, without [--token]). *)
end = struct
  external peercred : Unix.file_descr -> int * int * int = "consortd_peercred"
  external peergroups : Unix.file_descr -> int array = "consortd_peergroups"

  let peer_allowed cfg fd =
    match peercred fd with
    | exception Unix.Unix_error (e, _, _) ->
        Error (Printf.sprintf "its credentials cannot be read (%s)" (Unix.error_message e))
    | pid, uid, gid ->
        let groups () = try peergroups fd with Unix.Unix_error _ -> [||] in
        if
          uid = 0
          || uid = Unix.geteuid ()
          || List.mem uid cfg.allow_uids || List.mem gid cfg.allow_gids
          || Array.exists (fun g -> List.mem g cfg.allow_gids) (groups ())
        then Ok ()
        else
          Error
            (Printf.sprintf
               "uid %d (gid %d, pid %d) is not allowed on this socket (consortd --allow-uid, \
                --allow-gid)"
               uid gid pid)

  (* Compared in constant time, as digests: neither the bytes nor the length
     of the daemon's token show in how long a refusal takes. *)
  let token_ok t token =
    match t.cfg.token with
    | None -> true
    | Some expected ->
        let h s = Cstruct.to_string (Mirage_crypto.Hash.SHA256.digest (Cstruct.of_string s)) in
        Eqaf.equal (h expected) (h token)
end

open Access

(* {1 Dispatch}

   A client's frames read, decoded and served, one request after the other. *)

module Dispatch : sig
  val readable : t -> client -> unit
  (** Reads what the client sent and serves every whole frame. *)
end = struct
  let request t c (r : Wire.request) =
    match r with
    | Hello { min_version; max_version; token; _ } ->
        if c.hello then fatal t c Wire.Not_hello "a second HELLO"
        else if c.needs_token && not (token_ok t token) then begin
          count t "refused_token" 1;
          Log.warn (fun m ->
              m "client %d over TCP refused: %s" c.cid
                (if token = "" then "no token" else "not the daemon's token"));
          fatal t c Wire.Not_allowed
            (if token = "" then
               "a client over TCP must present the daemon's token in HELLO (consortd --token FILE)"
             else "not the daemon's token (consortd --token FILE)")
        end
        else if max_version < Wire.min_version || min_version > Wire.version then
          fatal t c Wire.Version
            (Printf.sprintf "the client speaks versions %d-%d, the daemon %d-%d" min_version
               max_version Wire.min_version Wire.version)
        else begin
          c.hello <- true;
          c.version <- min max_version Wire.version;
          Option.iter Loop.cancel c.hello_timer;
          c.hello_timer <- None;
          reply t c
            (Wire.Hello_ok
               {
                 version = c.version;
                 max_frame = t.cfg.max_frame;
                 max_queue = t.cfg.max_queue;
                 server = "consortd 0.1.0";
               })
        end
    | _ when not c.hello -> fatal t c Wire.Not_hello "the first frame must be HELLO"
    | Ping { cookie } -> reply t c (Wire.Pong { cookie })
    | Join { handle; group; props; params; flags; peers } -> (
        if group = "" then err t c handle Wire.Bad_props "an empty group name"
        else if String.length group > max_group then
          err t c handle Wire.Bad_props
            (Printf.sprintf "a group name of %d bytes, over %d" (String.length group) max_group)
        else if t.closing then err t c handle Wire.Overloaded "the daemon is stopping"
        else
          match join_member t c ~handle ~group ~props ~params ~flags ~peers with
          | Error (code, reason) -> err t c handle code reason
          | Ok (m, g) ->
              reply t c (Wire.Ok { handle; value = G.max_message g; info = G.me g });
              m.ready <- true;
              Queue.iter (emit t c) m.early;
              Queue.clear m.early;
              (* A member that joins a slowed client starts blocked. *)
              if c.slow && not c.closed then up t m (Wire.Flow { handle; blocked = true }))
    | Leave { handle } ->
        with_member t c handle (fun _ g ->
            ok t c handle;
            G.leave g)
    | Cast { handle; req; payload } -> message t c ~handle ~req payload (fun g -> G.cast g payload)
    | Send { handle; req; dst; payload } ->
        message t c ~handle ~req payload (fun g -> G.send g dst payload)
    | Suspect { handle; ids } ->
        with_member t c handle (fun _ g ->
            G.suspect g ids;
            ok t c handle)
    | Block_ok { handle } -> with_member t c handle (fun _ _ -> ok t c handle)
    | Switch { handle; props; params } ->
        with_member t c handle (fun m g ->
            let r =
              let ( let* ) = Result.bind in
              let* props =
                Result.map_error
                  (fun e -> (Wire.Bad_props, Fmt.str "%a" P.pp_error e))
                  (P.of_string props)
              in
              let* () =
                match not_offered props with Some e -> Error (Wire.Bad_switch, e) | None -> Ok ()
              in
              let* () =
                match seal_not_switchable m props with
                | Some e -> Error (Wire.Bad_switch, e)
                | None -> Ok ()
              in
              let* layers, params = stack_of props params in
              Result.map_error
                (fun e -> (Wire.Bad_switch, Fmt.str "%a" Consort_group.Group.pp_switch_error e))
                (G.switch ~params g layers)
            in
            match r with
            | Ok () -> ok t c handle
            | Error (code, reason) -> err t c handle code (one_line reason))

  (* Reads what the client sent and serves every whole frame. *)
  let readable t c =
    match Wire.read c.framer c.fd with
    | 0 when Wire.buffered c.framer = 0 && c.discard = 0 ->
        (* Between frames: the client is done, not failed. *)
        fail ~clean:true t c "closed" "end of stream"
    | 0 -> fail t c "closed" "end of stream inside a frame"
    | n ->
        count t "bytes_in" n;
        let rec frames () =
          if c.discard > 0 then c.discard <- c.discard - Wire.skip c.framer c.discard;
          if (not c.closed) && c.discard = 0 then
            match Wire.next_request c.framer with
            | `Need -> ()
            | `Empty_frame -> fatal t c Wire.Malformed "a frame of length 0"
            | `Too_big n ->
                (* Never buffered: its bytes are dropped as they come, and
                   its reply says why (the stream stays in step). *)
                count t "frames_too_big" 1;
                let handle = Option.value ~default:Wire.no_handle (Wire.peek_u32 c.framer 5) in
                let ty = Option.map (fun v -> v land 0xff) (Wire.peek_u32 c.framer 1) in
                let req = Option.value ~default:0 (Wire.peek_u32 c.framer 9) in
                ignore (Wire.skip c.framer 4);
                c.discard <- n;
                if not c.hello then fatal t c Wire.Not_hello "the first frame must be HELLO"
                else begin
                  let handle = if handle = Wire.no_handle then 0 else handle in
                  let reason =
                    Printf.sprintf "a frame of %d bytes, over the limit of %d" n t.cfg.max_frame
                  in
                  (* In version 2 a CAST or SEND has no reply: REFUSED says it. *)
                  (match ty with
                  | Some (0x04 | 0x05) when c.version >= 2 ->
                      reply t c (Wire.Refused { handle; req; code = Wire.Too_big; reason })
                  | _ -> err t c handle Wire.Too_big reason);
                  frames ()
                end
            | `Frame r -> (
                count t "frames_in" 1;
                match r with
                | Error e -> fatal t c Wire.Malformed (one_line e)
                | Ok r ->
                    request t c r;
                    frames ())
        in
        c.batch <- true;
        frames ();
        c.batch <- false;
        (* Out in the timers of the next round, after the datagrams the
           requests made (the stack sends them from a timer set before): a
           client's own cast comes back to it after it is on its way to the
           others, not before. *)
        if (not c.closed) && c.queued > 0 then schedule t c 0
    | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> ()
    | exception Unix.Unix_error (e, _, _) -> fail t c "closed" (Unix.error_message e)
end

open Dispatch

(* {1 Listeners}

   The Unix socket and the TCP port clients connect to, and each connection
   made a client. *)

module Listeners : sig
  val adopt : t -> Unix.file_descr -> unit

  val accept : t -> [ `Tcp | `Trusted | `Unix ] -> Unix.file_descr -> unit
  (** [accept t from lfd] takes a connection from the listener [lfd] as a client. *)

  val listen_unix : mode:Unix.file_perm -> string -> (Unix.file_descr, string) result
  val listen_tcp : string -> (Unix.file_descr, string) result
end = struct
  let add_client ?(from = `Trusted) t fd =
    Unix.set_nonblock fd;
    (try Unix.setsockopt_int fd Unix.SO_SNDBUF (1 lsl 20) with Unix.Unix_error _ -> ());
    t.next_cid <- t.next_cid + 1;
    let c =
      {
        cid = t.next_cid;
        fd;
        framer = Wire.framer ~max:t.cfg.max_frame;
        out = Queue.create ();
        out_off = 0;
        queued = 0;
        fd_open = true;
        close_timer = None;
        flush_timer = None;
        hello = false;
        needs_token = from = `Tcp && t.cfg.token <> None;
        version = Wire.min_version;
        closed = false;
        discard = 0;
        batch = false;
        slow = false;
        hello_timer = None;
        handles = Hashtbl.create 4;
      }
    in
    count t "clients" 1;
    Hashtbl.replace t.clients c.cid c;
    let refused =
      match from with
      | `Unix -> ( match peer_allowed t.cfg fd with Ok () -> None | Error e -> Some e)
      | `Tcp | `Trusted -> None
    in
    if t.closing || Hashtbl.length t.clients + t.lingering > t.cfg.max_clients then
      fatal t c Wire.Overloaded
        (if t.closing then "the daemon is stopping"
         else Printf.sprintf "at most %d clients" t.cfg.max_clients)
    else if refused <> None then begin
      let e = Option.get refused in
      count t "refused_peer" 1;
      Log.warn (fun m -> m "client %d on the Unix socket refused: %s" c.cid e);
      (* The ERROR answers the client's first frame: a client writes HELLO
         before it reads, and closed at once it would get EPIPE, not the
         reason. What it sent is read and dropped first, so that the close
         loses nothing of the ERROR. At most 1 s; nothing it sends is served. *)
      let refuse () =
        if not c.closed then begin
          (try ignore (Wire.read c.framer c.fd) with Unix.Unix_error _ -> ());
          fatal t c Wire.Not_allowed e
        end
      in
      Loop.watch t.loop fd refuse;
      c.hello_timer <-
        Some
          (Loop.after t.loop (Time.of_ms 1000) (fun () ->
               c.hello_timer <- None;
               refuse ()))
    end
    else begin
      Loop.watch t.loop fd (fun () -> if not c.closed then readable t c);
      (* A connection that does not say HELLO in time holds nothing for long. *)
      c.hello_timer <-
        Some
          (Loop.after t.loop
             (Time.of_ms (int_of_float (t.cfg.hello_timeout *. 1000.)))
             (fun () ->
               c.hello_timer <- None;
               if (not c.closed) && not c.hello then
                 fatal t c Wire.Not_hello
                   (Printf.sprintf "no HELLO within %g s" t.cfg.hello_timeout)))
    end

  let adopt t fd = add_client t fd

  let accept t from lfd =
    match Unix.accept ~cloexec:true lfd with
    | exception Unix.Unix_error (e, _, _) ->
        Log.warn (fun m -> m "accept: %s" (Unix.error_message e))
    | fd, _ -> add_client ~from t fd

  let listen_unix ~mode path =
    (* A socket file left by a daemon that is gone is replaced; one a live
       daemon answers on is not. *)
    let stale () =
      match Unix.lstat path with
      | exception Unix.Unix_error (Unix.ENOENT, _, _) -> Ok ()
      | { Unix.st_kind = Unix.S_SOCK; _ } -> (
          let s = Unix.socket ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
          match Unix.connect s (Unix.ADDR_UNIX path) with
          | () ->
              Unix.close s;
              Error (Printf.sprintf "%s: another daemon is listening there" path)
          | exception Unix.Unix_error _ ->
              Unix.close s;
              (try Unix.unlink path with Unix.Unix_error _ -> ());
              Ok ())
      | _ -> Error (Printf.sprintf "%s exists and is not a socket" path)
      | exception Unix.Unix_error (e, _, _) ->
          Error (Printf.sprintf "%s: %s" path (Unix.error_message e))
    in
    match stale () with
    | Error e -> Error e
    | Ok () -> (
        let s = Unix.socket ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
        (* Bound and listening under another name first, then renamed: a
           client never finds the path without a daemon listening there. *)
        let tmp = Printf.sprintf "%s.%d.tmp" path (Unix.getpid ()) in
        (* Its mode is [mode] whatever the umask, and nobody but the daemon
           can connect before it is set. *)
        match
          (try Unix.unlink tmp with Unix.Unix_error _ -> ());
          let umask = Unix.umask 0o177 in
          Fun.protect
            ~finally:(fun () -> ignore (Unix.umask umask))
            (fun () -> Unix.bind s (Unix.ADDR_UNIX tmp));
          Unix.chmod tmp mode;
          Unix.listen s 128;
          Unix.set_nonblock s;
          Unix.rename tmp path
        with
        | () -> Ok s
        | exception Unix.Unix_error (e, _, _) ->
            Unix.close s;
            (try Unix.unlink tmp with Unix.Unix_error _ -> ());
            Error (Printf.sprintf "--socket %s: %s" path (Unix.error_message e)))

  let listen_tcp addr =
    match split_addr addr with
    | Error e -> Error ("--tcp: " ^ e)
    | Ok (host, port) -> (
        let ip = Unix.inet_addr_of_string host in
        let octet0 = int_of_string (List.hd (String.split_on_char '.' host)) in
        if octet0 <> 127 then
          Error
            (Printf.sprintf "--tcp %s: only a loopback address (127.x.x.x): clients are local" addr)
        else
          let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_STREAM 0 in
          match
            Unix.setsockopt s Unix.SO_REUSEADDR true;
            Unix.setsockopt s Unix.TCP_NODELAY true;
            Unix.bind s (Unix.ADDR_INET (ip, port));
            Unix.listen s 128;
            Unix.set_nonblock s
          with
          | () -> Ok s
          | exception Unix.Unix_error (e, _, _) ->
              Unix.close s;
              Error (Printf.sprintf "--tcp %s: %s" addr (Unix.error_message e)))
end

open Listeners

(* {1 Operations: the control socket, the metrics port} *)

module Ops : sig
  val control_answer : ?only:string -> t -> string -> Yojson.Safe.t

  val open_ops : t -> (unit, string) result
  (** Opens the control socket, the metrics port and the web console the configuration names. *)

  val close_ops : t -> unit
end = struct
  (* The members the daemon holds, in the group [only] if given, by port. *)
  let held ?only t =
    Hashtbl.fold
      (fun _ m acc ->
        match m.g with
        | Some g when (not m.exited) && Option.fold ~none:true ~some:(String.equal m.group) only ->
            (m, g) :: acc
        | _ -> acc)
      t.live []
    |> List.sort (fun (a, _) (b, _) -> compare a.port b.port)

  let member_counters g = G.counters g @ [ ("seal", Seal.stats_list (S.stats (G.connection g))) ]

  (* A member's [status] fields, with its client's number and handle. *)
  let status_fields (m, g) =
    let v = G.view g in
    Consort_ops.Control.status_fields ~group:m.group ~me:(G.me g) ~view:v.Consort_group.Group.vid
      ~ltime:v.ltime ~coordinator:v.coordinator ~members:(Array.to_list v.members) ~rank:v.rank
      ~blocked:(G.is_blocked g) ~flow_blocked:(m.group_flow || m.client.slow)
    @ [ ("client", `Int m.client.cid); ("handle", `Int m.handle) ]

  let member_status mg : Yojson.Safe.t = `Assoc (status_fields mg)
  let daemon_gauges t = [ ("clients", clients t); ("members", members t); ("queued", t.queued) ]

  (* The one member an operator's cast, send or suspect goes through: the first
     the daemon holds in the group whose client keeps no member log (REPORT):
     a message it did not make would be missing from that log, and the
     checkers would find it delivered but never sent. *)
  let through t only f =
    let groups = List.sort_uniq compare (List.map (fun (m, _) -> m.group) (held t)) in
    let pick group =
      match List.filter (fun (m, _) -> not m.report) (held ~only:group t) with
      | ((m, _) as first) :: _ -> within (member_fields m) (fun () -> f first)
      | [] when held ~only:group t <> [] ->
          Error
            (Printf.sprintf
               "every member of group %S here keeps a member log (its client asked REPORT): a \
                message it did not make would be missing from it; cast through another member"
               group)
      | [] -> Error (Printf.sprintf "the daemon holds no member of group %S" group)
    in
    match only with
    | None -> (
        match groups with
        | [ one ] -> pick one
        | [] -> Error "the daemon holds no member"
        | l -> Error ("which group? (--group NAME: " ^ String.concat ", " l ^ ")"))
    | Some group -> pick group

  let refusal_text = function
    | Ok () -> Ok ()
    | Error e -> Error (Fmt.str "%a" Consort_group.Group.pp_error e)

  (* [group NAME REQUEST] names the group; [status] and [counters] without it
     cover every member. *)
  let rec control_answer ?only t line : Yojson.Safe.t =
    let word l =
      match String.index_opt l ' ' with
      | Some i -> (String.sub l 0 i, String.sub l (i + 1) (String.length l - i - 1))
      | None -> (l, "")
    in
    let of_result = function
      | Ok () -> `Assoc [ ("ok", `Bool true) ]
      | Error e -> `Assoc [ ("error", `String e) ]
    in
    match word line with
    | "group", rest when only = None -> (
        match word rest with
        | "", _ -> `Assoc [ ("error", `String "group: which group? (group NAME REQUEST)") ]
        | name, req -> control_answer ~only:name t req)
    | "status", "" ->
        `Assoc
          [
            ("daemon", `Assoc (List.map (fun (k, v) -> (k, `Int v)) (daemon_gauges t)));
            ("members", `List (List.map member_status (held ?only t)));
          ]
    | "counters", "" ->
        `Assoc
          [
            ( "daemon",
              `Assoc
                (List.map
                   (fun (k, v) -> (k, `Int v))
                   ([ ("connected", clients t); ("held", members t); ("queued", t.queued) ]
                   @ stats t)) );
            ( "members",
              `List
                (List.map
                   (fun (m, g) ->
                     `Assoc
                       [
                         ("group", `String m.group);
                         ("me", `String (G.me g));
                         ("counters", Consort_ops.Control.counters_json (member_counters g));
                       ])
                   (held ?only t)) );
          ]
    | "cast", text -> of_result (through t only (fun (_, g) -> refusal_text (G.cast g text)))
    | "send", rest -> (
        match word rest with
        | "", _ -> of_result (Error "send: which member? (send ID TEXT)")
        | id, text -> of_result (through t only (fun (_, g) -> refusal_text (G.send g id text))))
    | "suspect", ids -> (
        match List.filter (( <> ) "") (String.split_on_char ',' ids) with
        | [] -> of_result (Error "suspect: which members? (suspect ID[,ID...])")
        | l ->
            of_result
              (through t only (fun (_, g) ->
                   G.suspect g l;
                   Ok ())))
    | w, _ ->
        let w = if String.length w > 40 then String.sub w 0 40 ^ "..." else w in
        of_result
          (Error
             (Printf.sprintf
                "unknown request %S (status, counters, cast, send, suspect; group NAME REQUEST)" w))

  (* What the web console shows of each member: its status, counters, roles
     (the coordinator; the daemon does not say which member orders under Total),
     history and rates. The daemon's members have no Primary callback here:
     quorum is null. *)
  let console_groups t =
    List.map
      (fun (m, g) ->
        let seal =
          match m.seal with
          | None -> `Null
          | Some mode ->
              `Assoc
                [ ("mode", `String (Fmt.str "%a" Seal.pp_mode mode)); ("rekey", `Bool m.rekeyed) ]
        in
        Consort_ops.Console.group_json
          ~status:(status_fields (m, g) @ [ ("seal", seal) ])
          ~counters:(member_counters g) ~quorum:`Null
          ~coordinator:(G.view g).Consort_group.Group.coordinator ~sequencer:None ~token_holder:None
          m.history m.rates)
      (held t)

  let metrics_samples t =
    let sample ?(labels = []) ?(kind = `Gauge) name help value =
      { Consort_ops.Metrics.name; help; kind; labels; value = float_of_int value }
    in
    sample "consortd_clients" "Clients connected." (clients t)
    :: sample "consortd_members" "Members held for clients." (members t)
    :: sample "consortd_queued_bytes" "Bytes of upcalls and replies waiting for clients." t.queued
    :: List.map
         (fun (k, v) ->
           sample ~kind:`Counter
             ~labels:[ ("counter", k) ]
             "consortd_events_total"
             "The daemon's counters (clients, frames, bytes, clients failed out by reason)." v)
         (stats t)
    @ List.concat_map
        (fun (m, g) ->
          let labels = Consort_ops.Metrics.member_labels ~group:m.group (G.me g) in
          let v = G.view g in
          sample ~labels "consort_view_members" "Members in the current view."
            (Array.length v.Consort_group.Group.members)
          :: sample ~labels "consort_view_ltime"
               "Logical time of the current view (increases at each view change)." v.ltime
          :: sample ~labels "consort_view_rank" "This member's rank in the current view." v.rank
          :: sample ~labels "consort_flow_blocked"
               "1 while flow control asks the application to pause."
               (if m.group_flow || m.client.slow then 1 else 0)
          :: Consort_ops.Metrics.member_info ~group:m.group (G.me g)
          :: Consort_ops.Metrics.of_counters ~totals:m.totals ~labels (member_counters g))
        (held t)

  (* "IP:PORT" as a socket address. *)
  let inet_addr s =
    match split_addr s with
    | Error e -> Error e
    | Ok (ip, port) -> (
        match Unix.inet_addr_of_string ip with
        | a -> Ok (Unix.ADDR_INET (a, port))
        | exception Failure _ -> Error (Printf.sprintf "%S is not IP:PORT" s))

  let open_ops t =
    let ( let* ) = Result.bind in
    let* () =
      match t.cfg.control with
      | None -> Ok ()
      | Some path ->
          Consort_ops.Serve.listen ~max_connections:16 ~max_request:(1 lsl 20) t.loop
            (Unix.ADDR_UNIX path) Lines (fun line -> Yojson.Safe.to_string (control_answer t line))
          |> Result.map (fun s -> t.ops <- s :: t.ops)
          |> Result.map_error (fun e -> "--control " ^ path ^ ": " ^ e)
    in
    let* () =
      match t.cfg.http with
      | None -> Ok ()
      | Some addr ->
          let* () =
            Consort_ops.Console.check_address ~flag:"--http" ~public:t.cfg.http_public addr
          in
          let* sa = Result.map_error (fun e -> "--http: " ^ e) (inet_addr addr) in
          let* s =
            Consort_ops.Console.serve t.loop sa ~node:"consortd" (fun () -> console_groups t)
            |> Result.map_error (fun e -> "--http " ^ addr ^ ": " ^ e)
          in
          t.ops <- s :: t.ops;
          (* The rates the console charts: every member's, a sample a second. *)
          let rec tick () =
            if not t.closing then begin
              List.iter
                (fun (m, g) ->
                  match List.assoc_opt "group" (G.counters g) with
                  | Some kvs ->
                      let get k = Option.value ~default:0 (List.assoc_opt k kvs) in
                      Consort_ops.Console.sample m.rates ~t:(Unix.gettimeofday ())
                        ~sent:(get "sent") ~delivered:(get "delivered")
                  | None -> ())
                (held t);
              ignore (Loop.after t.loop (Consort.Time.of_sec 1.) tick)
            end
          in
          tick ();
          Log.app (fun m ->
              m "console at http://%s/"
                (match Consort_ops.Serve.address s with
                | ADDR_INET (a, p) -> Printf.sprintf "%s:%d" (Unix.string_of_inet_addr a) p
                | ADDR_UNIX p -> p));
          Ok ()
    in
    match t.cfg.metrics with
    | None -> Ok ()
    | Some addr ->
        let* sa = Result.map_error (fun e -> "--metrics: " ^ e) (inet_addr addr) in
        let* () =
          match sa with
          | Unix.ADDR_INET (a, _)
            when (not t.cfg.metrics_public)
                 && String.length (Unix.string_of_inet_addr a) >= 4
                 && String.sub (Unix.string_of_inet_addr a) 0 4 <> "127." ->
              Error
                (Printf.sprintf
                   "--metrics %s: the metrics name every group and member (what Privacy hides on \
                    the wire): on an address other than loopback, add --metrics-public"
                   addr)
          | _ -> Ok ()
        in
        Consort_ops.Metrics.serve t.loop sa (fun () -> metrics_samples t)
        |> Result.map (fun s -> t.ops <- s :: t.ops)
        |> Result.map_error (fun e -> "--metrics " ^ addr ^ ": " ^ e)

  let close_ops t =
    List.iter Consort_ops.Serve.close t.ops;
    t.ops <- [];
    Option.iter Consort_ops.Capture.close t.capture
end

open Ops

let adopt = Listeners.adopt
let control_answer = Ops.control_answer

let create loop cfg =
  let ( let* ) = Result.bind in
  let* ip, first_port = Result.map_error (fun e -> "--bind: " ^ e) (split_addr cfg.bind) in
  let* () =
    let multicast =
      match String.split_on_char '.' ip with
      | a :: _ -> ( match int_of_string_opt a with Some a -> a >= 224 && a <= 239 | None -> false)
      | [] -> false
    in
    if ip = "0.0.0.0" || ip = "255.255.255.255" || multicast then
      Error (Printf.sprintf "--bind %s: members need an address peers can reach" cfg.bind)
    else if first_port = 0 then
      Error (Printf.sprintf "--bind %s: port 0 picks a port peers cannot know; give one" cfg.bind)
    else if cfg.ports < 1 || first_port + cfg.ports - 1 > 65535 then
      Error (Printf.sprintf "--ports %d: not a range of ports from %d" cfg.ports first_port)
    else Ok ()
  in
  (* An address no interface of this machine has would fail every JOIN:
     refused up front. *)
  let* () =
    match Unix.inet_addr_of_string ip with
    | exception Failure _ -> Error (Printf.sprintf "--bind %s: not an IPv4 address" cfg.bind)
    | a -> (
        let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
        match Unix.bind s (Unix.ADDR_INET (a, 0)) with
        | () ->
            Unix.close s;
            Ok ()
        | exception Unix.Unix_error (e, _, _) ->
            Unix.close s;
            Error
              (Printf.sprintf "--bind %s: no interface of this machine has %s (%s)" cfg.bind ip
                 (Unix.error_message e)))
  in
  let* peers = Result.map_error (fun e -> "--peers: " ^ e) (parse_peers cfg.peers) in
  let* () =
    if cfg.socket = None && cfg.tcp = None then Error "give --socket PATH or --tcp 127.0.0.1:PORT"
    else Ok ()
  in
  let* () =
    if cfg.socket_mode < 0 || cfg.socket_mode > 0o777 then
      Error (Printf.sprintf "--socket-mode %o: not a file mode (0 to 0777)" cfg.socket_mode)
    else if cfg.tcp <> None && cfg.seal <> None && cfg.token = None then
      Error
        "--tcp with --key needs --token FILE: every local user can connect to a TCP port, and \
         would join the keyed groups"
    else
      match cfg.token with
      | Some tk when String.length tk < min_token || String.length tk > max_token ->
          Error
            (Printf.sprintf "--token: %d bytes, not %d to %d" (String.length tk) min_token max_token)
      | _ -> Ok ()
  in
  let* () =
    if cfg.max_frame < 64 || cfg.max_queue < cfg.max_frame then
      Error "limits: --max-queue must be at least the frame limit"
    else if cfg.max_queued < cfg.max_frame then
      Error "limits: --max-queued must be at least the frame limit"
    else Ok ()
  in
  let* lu =
    match cfg.socket with
    | None -> Ok []
    | Some p -> Result.map (fun s -> [ s ]) (listen_unix ~mode:cfg.socket_mode p)
  in
  let unlisten ls =
    List.iter Unix.close ls;
    Option.iter (fun p -> try Unix.unlink p with Unix.Unix_error _ -> ()) cfg.socket
  in
  let* lt =
    match cfg.tcp with
    | None -> Ok []
    | Some a -> (
        match listen_tcp a with
        | Ok s -> Ok [ s ]
        | Error e ->
            unlisten lu;
            Error e)
  in
  let* capture =
    match cfg.pcap with
    | None -> Ok None
    | Some path -> (
        match Consort_ops.Capture.create path with
        | Ok w -> Ok (Some w)
        | Error e ->
            unlisten (lu @ lt);
            Error ("--pcap: " ^ e))
  in
  let t =
    {
      loop;
      cfg;
      ip;
      first_port;
      peers;
      listeners = lu @ lt;
      clients = Hashtbl.create 64;
      next_cid = 0;
      live = Hashtbl.create 64;
      counters = Hashtbl.create 16;
      closing = false;
      queued = 0;
      lingering = 0;
      wbuf = Bytes.create 65536;
      capture;
      ops = [];
    }
  in
  match open_ops t with
  | Error e ->
      close_ops t;
      unlisten t.listeners;
      Error e
  | Ok () ->
      List.iter (fun l -> Loop.watch loop l (fun () -> accept t `Unix l)) lu;
      List.iter (fun l -> Loop.watch loop l (fun () -> accept t `Tcp l)) lt;
      Ok t

let close t ~on_done =
  if not t.closing then begin
    t.closing <- true;
    List.iter
      (fun l ->
        Loop.unwatch t.loop l;
        try Unix.close l with Unix.Unix_error _ -> ())
      t.listeners;
    t.listeners <- [];
    Option.iter (fun p -> try Unix.unlink p with Unix.Unix_error _ -> ()) t.cfg.socket;
    List.iter
      (fun c -> fail t c "stopping" "the daemon is stopping")
      (Hashtbl.fold (fun _ c acc -> c :: acc) t.clients [])
  end;
  let deadline = Time.add (Loop.now t.loop) (Time.of_ms 5000) in
  let rec wait () =
    if Hashtbl.length t.live = 0 || Loop.now t.loop >= deadline then begin
      close_ops t;
      on_done ()
    end
    else ignore (Loop.after t.loop (Time.of_ms 20) wait)
  in
  wait ()

let run cfg =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  (* Every frame in and out is a string of its own, most of them dead
     within a round of the loop: a minor heap of 2 MiB (the default is
     256 KiB) lets them die there instead of being promoted. *)
  Gc.set { (Gc.get ()) with Gc.minor_heap_size = 262144 };
  let loop = Loop.create () in
  Loop.set_spin ~yield:cfg.spin_yield loop (Time.of_us cfg.spin_us);
  match create loop cfg with
  | Error e -> Error e
  | Ok t -> (
      let stop = ref false and finished = ref false and usr1 = ref false in
      (* Fail-stop: a capture that cannot be written (a full disk), or a
         callback that raised, stops the daemon as SIGTERM does (its members
         leave their groups, its clients are told), then [run] ends with the
         reason. *)
      let failure = ref None in
      let fail why = if !failure = None then failure := Some why in
      let capture_failed () =
        match t.capture with
        | Some w -> (
            match Consort_ops.Capture.error w with
            | Some e -> fail (Printf.sprintf "--pcap %s: %s" (Option.get cfg.pcap) e)
            | None -> ())
        | None -> ()
      in
      Loop.on_error loop (function Loop.Timer e | Loop.Descriptor (_, e) ->
          fail (Printf.sprintf "internal error: %s" (Printexc.to_string e)));
      Sys.set_signal Sys.sigterm (Sys.Signal_handle (fun _ -> stop := true));
      Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> stop := true));
      Sys.set_signal Sys.sigusr1 (Sys.Signal_handle (fun _ -> usr1 := true));
      let rec poll () =
        if !usr1 then begin
          (* One line on standard error: what the daemon holds and has done. *)
          usr1 := false;
          let gc = Gc.stat () in
          let head =
            Printf.sprintf
              "counters clients=%d members=%d queued=%d lingering=%d timers=%d watched=%d \
               heap_kib=%d live_kib=%d"
              (clients t) (members t) t.queued t.lingering (Loop.timers loop) (Loop.watched loop)
              (gc.Gc.heap_words * (Sys.word_size / 8) / 1024)
              (gc.Gc.live_words * (Sys.word_size / 8) / 1024)
          in
          prerr_endline
            (String.concat " "
               (head :: List.map (fun (k, v) -> Printf.sprintf "%s=%d" k v) (stats t)))
        end;
        capture_failed ();
        if !stop || !failure <> None then close t ~on_done:(fun () -> finished := true)
        else ignore (Loop.after loop (Time.of_ms 50) poll)
      in
      poll ();
      Loop.run loop ~until:(fun () -> !finished);
      capture_failed ();
      match !failure with None -> Ok () | Some why -> Error (why ^ "; stopped"))
