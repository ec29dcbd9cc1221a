open Consort

let src = Logs.Src.create "consort.cltsvr" ~doc:"Client-server groups"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let max_clients = "cltsvr.max_clients"
  let backlog = "cltsvr.backlog"
  let window = "cltsvr.window"
  let client_timeout = "cltsvr.client_timeout"
  let failover = "cltsvr.failover"
  let retry = "cltsvr.retry"
  let max_request = "cltsvr.max_request"

  let () =
    Params.register max_clients (Params.Int 1024)
      ~doc:"sessions the servers hold at most; an open beyond is refused (busy)";
    Params.register backlog (Params.Int 64)
      ~doc:
        "notifications kept per session for a client that asks again (after a loss or a failover); \
         older ones are told lost";
    Params.register window (Params.Int 32)
      ~doc:"a client's requests not yet acknowledged; request refuses beyond";
    Params.register client_timeout
      (Params.Time (Time.of_sec 10.))
      ~doc:"a session no server has heard of for this long is forgotten by every server";
    Params.register failover
      (Params.Time (Time.of_sec 1.))
      ~doc:"a client that hears nothing from its server for this long turns to the next one";
    Params.register retry
      (Params.Time (Time.of_ms 200))
      ~doc:"period of a client's resends and keepalives, and of the servers' checks";
    Params.register max_request (Params.Int 65536)
      ~doc:"the largest request or notification, in bytes"
end

(* {1 The wire} *)

type refusal = Busy | Expired

(* Between a client and a server, as datagrams ({!Group.client_magic}). *)
type wire =
  | Hello of { group : string; session : string; resumed : bool; heard : int }
  | Request of { group : string; session : string; seq : int; payload : string }
  | Bye of { group : string; session : string }
  | Welcome of { session : string; upto : int; notes : int }
  | Ack of { session : string; upto : int }
  | Note of { session : string; n : int; payload : string }
  | Gap of { session : string; first : int; last : int }
  | Refused of { session : string; why : refusal }

(* Among the servers, as casts of their group. *)
type env =
  | Open of { session : string }
  | Req of { session : string; seq : int; payload : string }
  | Notify of { session : string option; payload : string }
  | Alive of { sessions : string list }
  | Forget of { session : string; why : string; mentions : int option }

let str = Codec.string ~max:256 ()
let body = Codec.string ~max:(64 * 1024 * 1024) ()

let wire_body =
  Codec.union "cltsvr"
    [
      Codec.case 0 "hello"
        Codec.(tup4 str str bool varint)
        (function
          | Hello { group; session; resumed; heard } -> Some (group, session, resumed, heard)
          | _ -> None)
        (fun (group, session, resumed, heard) -> Hello { group; session; resumed; heard });
      Codec.case 1 "request"
        Codec.(tup4 str str varint body)
        (function
          | Request { group; session; seq; payload } -> Some (group, session, seq, payload)
          | _ -> None)
        (fun (group, session, seq, payload) -> Request { group; session; seq; payload });
      Codec.case 2 "bye"
        Codec.(pair str str)
        (function Bye { group; session } -> Some (group, session) | _ -> None)
        (fun (group, session) -> Bye { group; session });
      Codec.case 3 "welcome"
        Codec.(tup3 str varint varint)
        (function Welcome { session; upto; notes } -> Some (session, upto, notes) | _ -> None)
        (fun (session, upto, notes) -> Welcome { session; upto; notes });
      Codec.case 4 "ack"
        Codec.(pair str varint)
        (function Ack { session; upto } -> Some (session, upto) | _ -> None)
        (fun (session, upto) -> Ack { session; upto });
      Codec.case 5 "note"
        Codec.(tup3 str varint body)
        (function Note { session; n; payload } -> Some (session, n, payload) | _ -> None)
        (fun (session, n, payload) -> Note { session; n; payload });
      Codec.case 6 "gap"
        Codec.(tup3 str varint varint)
        (function Gap { session; first; last } -> Some (session, first, last) | _ -> None)
        (fun (session, first, last) -> Gap { session; first; last });
      Codec.case 7 "refused"
        Codec.(pair str bool)
        (function Refused { session; why } -> Some (session, why = Busy) | _ -> None)
        (fun (session, busy) -> Refused { session; why = (if busy then Busy else Expired) });
    ]

let wire_codec =
  Codec.conv ~name:"cltsvr"
    (fun v -> (Group.client_magic, v))
    (fun (m, v) -> if m = Group.client_magic then Ok v else Error (Printf.sprintf "magic 0x%02x" m))
    Codec.(pair uint8 wire_body)

(* A server cast of this protocol starts with the magic byte; the
   application's casts, with a zero byte ({!Make.Server.cast}). *)
let env_body =
  Codec.union "cltsvr-env"
    [
      Codec.case 0 "open" str
        (function Open { session } -> Some session | _ -> None)
        (fun session -> Open { session });
      Codec.case 1 "req"
        Codec.(tup3 str varint body)
        (function Req { session; seq; payload } -> Some (session, seq, payload) | _ -> None)
        (fun (session, seq, payload) -> Req { session; seq; payload });
      Codec.case 2 "notify"
        Codec.(pair (option str) body)
        (function Notify { session; payload } -> Some (session, payload) | _ -> None)
        (fun (session, payload) -> Notify { session; payload });
      Codec.case 3 "alive"
        Codec.(list ~max:65536 str)
        (function Alive { sessions } -> Some sessions | _ -> None)
        (fun sessions -> Alive { sessions });
      Codec.case 4 "forget"
        Codec.(tup3 str str (option varint))
        (function Forget { session; why; mentions } -> Some (session, why, mentions) | _ -> None)
        (fun (session, why, mentions) -> Forget { session; why; mentions });
    ]

let env_codec =
  Codec.conv ~name:"cltsvr-env"
    (fun v -> (Group.client_magic, v))
    (fun (m, v) -> if m = Group.client_magic then Ok v else Error (Printf.sprintf "magic 0x%02x" m))
    Codec.(pair uint8 env_body)

type error =
  | Flow_control
  | Too_big of { size : int; max : int }
  | Unknown_client of string
  | Closed
  | Not_running

let pp_error ppf = function
  | Flow_control ->
      Fmt.string ppf
        "too many requests not yet acknowledged (cltsvr.window), or the group's flow control is \
         full"
  | Too_big { size; max } -> Fmt.pf ppf "message of %d bytes, over the largest (%d)" size max
  | Unknown_client c -> Fmt.pf ppf "no session %s" c
  | Closed -> Fmt.string ppf "the client is closed (it said bye, or its session expired)"
  | Not_running -> Fmt.string ppf "the server's member has left the group"

type attach_error = No_total of string | No_agree of string

let pp_attach_error ppf = function
  | No_total st ->
      Fmt.pf ppf
        "the servers' stack %s has no total order: client-server groups need Total (sessions are \
         opened, numbered and forgotten in one order at every server)"
        st
  | No_agree st ->
      Fmt.pf ppf
        "the servers' stack %s has no safe delivery: client-server groups need Agree (a request is \
         acknowledged only once every server holds it, so that it survives its contact's crash)"
        st

type status = Connected of string | Busy_refused | Expired_session | Failing_over of string

let pp_status ppf = function
  | Connected s -> Fmt.pf ppf "connected to %s" s
  | Busy_refused ->
      Fmt.string ppf "refused: the servers hold as many sessions as they may (cltsvr.max_clients)"
  | Expired_session ->
      Fmt.string ppf "the session expired (silent for longer than cltsvr.client_timeout)"
  | Failing_over s -> Fmt.pf ppf "no answer: turning to %s" s

let encode_wire w = Codec.encode_string wire_codec w

module Make (T : Transport.S) = struct
  module G = Group.Make (T)

  module Server : sig
    type t

    type callbacks = {
      request : client:string -> seq:int -> string -> unit;
      opened : client:string -> unit;
      closed : client:string -> why:string -> unit;
      noted : client:string -> n:int -> string -> unit;
      cast : origin:string -> string -> unit;
    }

    val create : ?params:Consort.Params.t -> T.t -> group:string -> callbacks -> t
    val callbacks : t -> Group.callbacks -> Group.callbacks
    val attach : t -> Group.Make(T).t -> (unit, attach_error) result
    val cast : t -> string -> (unit, error) result
    val notify : t -> client:string -> string -> (unit, error) result
    val notify_all : t -> string -> (unit, error) result
    val take_state : t -> string
    val install_state : t -> string -> unit
    val stop : t -> unit
    val sessions : t -> int
    val clients : t -> string list
    val upto : t -> string -> int option
    val contacts : t -> int
    val counters : t -> (string * int) list
  end = struct
    type session = {
      mutable upto : int; (* requests delivered *)
      mutable notes : int; (* notifications numbered *)
      kept : (int * string) Queue.t; (* the latest notifications, at most [backlog] *)
      mutable seen : Time.t; (* when the group last spoke of it (local clock) *)
      mutable mentions : int; (* casts about it delivered: the same at every server at each point *)
    }

    (* A client that talks to this server. *)
    type contact = { mutable addr : string; mutable heard_at : Time.t; mutable forwarded : int }

    type callbacks = {
      request : client:string -> seq:int -> string -> unit;
      opened : client:string -> unit;
      closed : client:string -> why:string -> unit;
      noted : client:string -> n:int -> string -> unit;
      cast : origin:string -> string -> unit;
    }

    type t = {
      tr : T.t;
      group : string;
      mutable g : G.t option;
      cb : callbacks;
      sessions : (string, session) Hashtbl.t;
      contacts : (string, contact) Hashtbl.t;
      opening : (string, Time.t) Hashtbl.t; (* opens cast and not yet delivered, by session *)
      forgetting : (string, Time.t) Hashtbl.t; (* forgets cast and not yet delivered *)
      max_clients : int;
      backlog : int;
      client_timeout : Time.t;
      retry : Time.t;
      max_request : int;
      mutable last_alive : Time.t;
      mutable ordered_at : Time.t;
          (* when this server's own Alive was last delivered: the group orders casts *)
      mutable stopped : bool;
      mutable garbage : int;
      mutable refused_busy : int;
      mutable expired : int;
      mutable delivered : int;
      mutable duplicates : int;
    }

    let create ?(params = Params.empty) tr ~group cb =
      {
        tr;
        group;
        g = None;
        cb;
        sessions = Hashtbl.create 64;
        contacts = Hashtbl.create 64;
        opening = Hashtbl.create 16;
        forgetting = Hashtbl.create 16;
        max_clients = max 1 (Params.int params Param.max_clients);
        backlog = max 1 (Params.int params Param.backlog);
        client_timeout = Params.time params Param.client_timeout;
        retry = Params.time params Param.retry;
        max_request = Params.int params Param.max_request;
        last_alive = 0;
        ordered_at = 0;
        stopped = false;
        garbage = 0;
        refused_busy = 0;
        expired = 0;
        delivered = 0;
        duplicates = 0;
      }

    let now t = T.now t.tr

    let reply t addr w =
      match t.g with Some g -> G.send_client g ~dst:addr (encode_wire w) | None -> ()

    let cast_env t e =
      match t.g with
      | Some g when not (G.has_exited g) -> (
          match G.cast g (Codec.encode_string env_codec e) with Ok () -> true | Error _ -> false)
      | _ -> false

    let cast t s =
      match t.g with
      | None -> Error Not_running
      | Some g -> (
          match G.cast g ("\000" ^ s) with
          | Ok () -> Ok ()
          | Error Group.Flow_control -> Error Flow_control
          | Error (Group.Too_big { size; max }) ->
              Error (Too_big { size = size - 1; max = max - 1 })
          | Error _ -> Error Not_running)

    let notify_env t session payload =
      if String.length payload > t.max_request then
        Error (Too_big { size = String.length payload; max = t.max_request })
      else
        match t.g with
        | None -> Error Not_running
        | Some g -> (
            match G.cast g (Codec.encode_string env_codec (Notify { session; payload })) with
            | Ok () -> Ok ()
            | Error Group.Flow_control -> Error Flow_control
            | Error (Group.Too_big { size; max }) -> Error (Too_big { size; max })
            | Error _ -> Error Not_running)

    let notify t ~client payload =
      if not (Hashtbl.mem t.sessions client) then Error (Unknown_client client)
      else notify_env t (Some client) payload

    let notify_all t payload = notify_env t None payload

    (* What this server tells a client it is the contact of: the
       notifications from [from] on, or that those out of the backlog are
       lost. *)
    let resend_notes t session s addr ~from =
      let first = match Queue.peek_opt s.kept with Some (n, _) -> n | None -> s.notes + 1 in
      if from < first && from <= s.notes then
        reply t addr (Gap { session; first = from; last = min s.notes (first - 1) });
      Queue.iter
        (fun (n, p) -> if n >= from then reply t addr (Note { session; n; payload = p }))
        s.kept

    let contact_of t session addr =
      match Hashtbl.find_opt t.contacts session with
      | Some c ->
          c.addr <- addr;
          c.heard_at <- now t;
          c
      | None ->
          let upto =
            match Hashtbl.find_opt t.sessions session with Some s -> s.upto | None -> 0
          in
          let c = { addr; heard_at = now t; forwarded = upto } in
          Hashtbl.replace t.contacts session c;
          c

    let on_client t ~src bytes =
      match Codec.decode_string wire_codec bytes with
      | Error _ -> t.garbage <- t.garbage + 1
      | Ok (Hello { group; session; resumed; heard }) when group = t.group -> (
          match Hashtbl.find_opt t.sessions session with
          | Some s ->
              let c = contact_of t session src in
              c.forwarded <- max c.forwarded s.upto;
              reply t src (Welcome { session; upto = s.upto; notes = s.notes });
              if heard < s.notes then resend_notes t session s src ~from:(heard + 1)
          | None when resumed ->
              t.expired <- t.expired + 1;
              reply t src (Refused { session; why = Expired })
          | None ->
              (* A new session: opened in one order at every server. The
                 contacts of sessions not yet open are bounded too. *)
              if
                Hashtbl.length t.sessions + Hashtbl.length t.opening >= t.max_clients
                && not (Hashtbl.mem t.opening session)
              then begin
                t.refused_busy <- t.refused_busy + 1;
                reply t src (Refused { session; why = Busy })
              end
              else begin
                ignore (contact_of t session src);
                match Hashtbl.find_opt t.opening session with
                | Some at when now t < at + (t.retry * 5) -> ()
                | _ ->
                    if cast_env t (Open { session }) then Hashtbl.replace t.opening session (now t)
              end)
      | Ok (Request { group; session; seq; payload }) when group = t.group -> (
          match Hashtbl.find_opt t.sessions session with
          | None ->
              if not (Hashtbl.mem t.opening session) then
                reply t src (Refused { session; why = Expired })
          | Some s ->
              let c = contact_of t session src in
              if seq <= s.upto then reply t src (Ack { session; upto = s.upto })
              else if seq = c.forwarded + 1 && String.length payload <= t.max_request then begin
                if cast_env t (Req { session; seq; payload }) then c.forwarded <- seq
              end
              (* Further on: the client sends it again once the ones
                 before are acknowledged. *)
          )
      | Ok (Bye { group; session }) when group = t.group ->
          if Hashtbl.mem t.sessions session && not (Hashtbl.mem t.forgetting session) then
            if cast_env t (Forget { session; why = "said bye"; mentions = None }) then
              Hashtbl.replace t.forgetting session (now t)
      | Ok _ -> t.garbage <- t.garbage + 1

    let forget t session why =
      if Hashtbl.mem t.sessions session then begin
        Hashtbl.remove t.sessions session;
        Hashtbl.remove t.contacts session;
        Hashtbl.remove t.forgetting session;
        Log.info (fun m -> m "session %s forgotten: %s" session why);
        t.cb.closed ~client:session ~why
      end

    let mention s t =
      s.seen <- now t;
      s.mentions <- s.mentions + 1

    let deliver_env t ~mine e =
      match e with
      | Open { session } -> (
          Hashtbl.remove t.opening session;
          match Hashtbl.find_opt t.sessions session with
          | Some _ -> ()
          | None ->
              if Hashtbl.length t.sessions >= t.max_clients then begin
                t.refused_busy <- t.refused_busy + 1;
                match Hashtbl.find_opt t.contacts session with
                | Some c ->
                    Hashtbl.remove t.contacts session;
                    reply t c.addr (Refused { session; why = Busy })
                | None -> ()
              end
              else begin
                let s =
                  { upto = 0; notes = 0; kept = Queue.create (); seen = now t; mentions = 1 }
                in
                Hashtbl.replace t.sessions session s;
                t.cb.opened ~client:session;
                match Hashtbl.find_opt t.contacts session with
                | Some c -> reply t c.addr (Welcome { session; upto = 0; notes = 0 })
                | None -> ()
              end)
      | Req { session; seq; payload } -> (
          match Hashtbl.find_opt t.sessions session with
          | Some s when seq = s.upto + 1 -> (
              s.upto <- seq;
              mention s t;
              t.delivered <- t.delivered + 1;
              t.cb.request ~client:session ~seq payload;
              match Hashtbl.find_opt t.contacts session with
              | Some c -> reply t c.addr (Ack { session; upto = s.upto })
              | None -> ())
          | Some _ | None -> t.duplicates <- t.duplicates + 1)
      | Notify { session; payload } -> (
          let one session s =
            s.notes <- s.notes + 1;
            t.cb.noted ~client:session ~n:s.notes payload;
            Queue.add (s.notes, payload) s.kept;
            while Queue.length s.kept > t.backlog do
              ignore (Queue.pop s.kept)
            done;
            match Hashtbl.find_opt t.contacts session with
            | Some c -> reply t c.addr (Note { session; n = s.notes; payload })
            | None -> ()
          in
          match session with
          | Some c -> Option.iter (one c) (Hashtbl.find_opt t.sessions c)
          | None ->
              (* In a fixed order, the same at every server. *)
              List.iter
                (fun c -> one c (Hashtbl.find t.sessions c))
                (List.sort compare (Hashtbl.fold (fun c _ acc -> c :: acc) t.sessions [])))
      | Alive { sessions } ->
          if mine then t.ordered_at <- now t;
          List.iter
            (fun c -> match Hashtbl.find_opt t.sessions c with Some s -> mention s t | None -> ())
            sessions
      | Forget { session; why; mentions } -> (
          (* Unless something about it was delivered since the Forget was
             cast (a client that came back, an Alive delayed): the same
             decision at every server, at this point of the order. *)
          match (Hashtbl.find_opt t.sessions session, mentions) with
          | Some s, Some m when s.mentions <> m -> ()
          | Some _, _ -> forget t session why
          | None, _ -> ())

    (* The group's casts: this protocol's, or the application's. *)
    let on_cast t ~origin s =
      if String.length s > 0 && Char.code s.[0] = Group.client_magic then
        match Codec.decode_string env_codec s with
        | Ok e -> deliver_env t ~mine:(match t.g with Some g -> origin = G.me g | None -> false) e
        | Error e ->
            Log.warn (fun m ->
                m "a server cast of the client protocol does not decode: %a" Codec.pp_error e)
      else if String.length s > 0 && s.[0] = '\000' then
        t.cb.cast ~origin (String.sub s 1 (String.length s - 1))
      else t.cb.cast ~origin s

    let callbacks t (cb : Group.callbacks) =
      { cb with Group.cast = (fun ~origin s -> on_cast t ~origin s) }

    let rec tick t =
      if not t.stopped then begin
        (match t.g with
        | Some g when not (G.has_exited g) ->
            let n = now t in
            (* Contacts gone quiet are let go; the sessions this server
               hears from are said alive, in one cast. *)
            Hashtbl.filter_map_inplace
              (fun _ c -> if n - c.heard_at > t.client_timeout then None else Some c)
              t.contacts;
            (* Cast even with no session: its delivery tells this server
               the group orders casts, so that silence while it does not
               (a sequencer that crashed, before the view change) is not
               taken for the clients'. *)
            if n - t.last_alive >= t.client_timeout / 4 && not (G.is_blocked g) then begin
              let mine =
                Hashtbl.fold
                  (fun c _ acc -> if Hashtbl.mem t.sessions c then c :: acc else acc)
                  t.contacts []
              in
              if cast_env t (Alive { sessions = List.sort compare mine }) then t.last_alive <- n
            end;
            (* Sessions no one has spoken of, while the group ordered
               casts: forgotten, everywhere. *)
            if n - t.ordered_at < t.client_timeout / 2 then
              Hashtbl.iter
                (fun c s ->
                  if n - s.seen > t.client_timeout then
                    match Hashtbl.find_opt t.forgetting c with
                    | Some at when n < at + (t.client_timeout / 2) -> ()
                    | _ ->
                        if
                          cast_env t
                            (Forget { session = c; why = "silent"; mentions = Some s.mentions })
                        then Hashtbl.replace t.forgetting c n)
                t.sessions;
            Hashtbl.filter_map_inplace
              (fun _ at -> if n - at > t.client_timeout then None else Some at)
              t.opening
        | _ -> ());
        match t.g with
        | Some g when G.has_exited g -> t.stopped <- true
        | _ -> ignore (T.at t.tr (T.now t.tr + t.retry) (fun () -> tick t))
      end

    let attach t g =
      let st = G.stack_name g in
      let layers = String.split_on_char ':' st in
      if not (List.mem "total" layers) then Error (No_total st)
      else if not (List.mem "agree" layers) then Error (No_agree st)
      else begin
        t.g <- Some g;
        G.set_client_handler g (fun ~src s -> on_client t ~src s);
        tick t;
        Ok ()
      end

    (* The session table as state transfer carries it (property Xfer):
       sorted, so that servers with the same table give the same string. *)
    let state_codec =
      Codec.(
        list ~max:1_000_000
          (tup4 str (tup3 varint varint varint) (list ~max:1_000_000 (pair varint body)) unit))

    let take_state t =
      let l =
        List.sort compare
          (Hashtbl.fold
             (fun c s acc ->
               (c, (s.upto, s.notes, s.mentions), List.of_seq (Queue.to_seq s.kept), ()) :: acc)
             t.sessions [])
      in
      Codec.encode_string state_codec l

    let install_state t snapshot =
      match Codec.decode_string state_codec snapshot with
      | Error e -> Log.err (fun m -> m "a session table that does not decode: %a" Codec.pp_error e)
      | Ok l ->
          Hashtbl.reset t.sessions;
          Hashtbl.reset t.opening;
          Hashtbl.reset t.forgetting;
          List.iter
            (fun (c, (upto, notes, mentions), kept, ()) ->
              let q = Queue.create () in
              List.iter (fun x -> Queue.add x q) kept;
              Hashtbl.replace t.sessions c { upto; notes; kept = q; seen = now t; mentions })
            l;
          (* Contacts forward from what the group delivered. *)
          Hashtbl.iter
            (fun c ct ->
              match Hashtbl.find_opt t.sessions c with
              | Some s -> ct.forwarded <- s.upto
              | None -> ())
            t.contacts

    let stop t = t.stopped <- true
    let sessions t = Hashtbl.length t.sessions
    let clients t = List.sort compare (Hashtbl.fold (fun c _ acc -> c :: acc) t.sessions [])
    let upto t client = Option.map (fun s -> s.upto) (Hashtbl.find_opt t.sessions client)
    let contacts t = Hashtbl.length t.contacts

    let counters t =
      [
        ("sessions", Hashtbl.length t.sessions);
        ("contacts", Hashtbl.length t.contacts);
        ("delivered", t.delivered);
        ("duplicates", t.duplicates);
        ("refused_busy", t.refused_busy);
        ("expired", t.expired);
        ("garbage", t.garbage);
      ]
  end

  module Client : sig
    type t
    type callbacks = { note : string -> unit; lost : int -> unit; status : status -> unit }

    val connect :
      ?params:Consort.Params.t ->
      ?seed:int ->
      T.t ->
      group:string ->
      addr:string ->
      servers:string list ->
      callbacks ->
      (t, string) result

    val request : t -> string -> (int, error) result
    val close : t -> unit
    val crash : t -> unit
    val session : t -> string
    val acked : t -> int
    val heard : t -> int
    val outstanding : t -> int
    val server : t -> string
    val is_closed : t -> bool
    val failovers : t -> int
  end = struct
    type callbacks = { note : string -> unit; lost : int -> unit; status : status -> unit }

    type t = {
      tr : T.t;
      conn : T.connection;
      group : string;
      session : string;
      servers : string array;
      mutable contact : int;
      cb : callbacks;
      mutable opened : bool; (* the servers opened the session once *)
      mutable welcomed : bool; (* the current contact welcomed it *)
      mutable next : int; (* the number of the next request *)
      outstanding : (int * string) Queue.t; (* requests not yet acknowledged, in order *)
      mutable acked : int;
      mutable heard : int; (* notifications heard (or told lost), in order *)
      mutable last_reply : Time.t;
      mutable last_sent : Time.t;
      mutable closed : bool;
      window : int;
      failover : Time.t;
      retry : Time.t;
      max_request : int;
      mutable failovers : int;
      mutable garbage : int;
    }

    let now t = T.now t.tr

    let send t w =
      if not t.closed then
        match T.address_of_string t.servers.(t.contact) with
        | Error _ -> ()
        | Ok dst ->
            t.last_sent <- now t;
            let msg = Msg.create (Iovecs.of_string Pool.default (encode_wire w)) in
            ignore (T.send t.conn ~dst msg);
            Msg.release msg

    let hello t =
      send t (Hello { group = t.group; session = t.session; resumed = t.opened; heard = t.heard })

    let resend t =
      if t.welcomed then
        Queue.iter
          (fun (seq, payload) ->
            send t (Request { group = t.group; session = t.session; seq; payload }))
          t.outstanding

    let close t =
      if not t.closed then begin
        if t.opened then send t (Bye { group = t.group; session = t.session });
        t.closed <- true;
        T.close t.conn
      end

    let acked_upto t upto =
      if upto > t.acked then begin
        t.acked <- upto;
        while match Queue.peek_opt t.outstanding with Some (s, _) -> s <= upto | None -> false do
          ignore (Queue.pop t.outstanding)
        done
      end

    let on_wire t ~src bytes =
      let from_contact = src = t.servers.(t.contact) in
      match Codec.decode_string wire_codec bytes with
      | Error _ -> t.garbage <- t.garbage + 1
      | Ok w -> (
          match w with
          | Welcome { session; _ }
          | Ack { session; _ }
          | Note { session; _ }
          | Gap { session; _ }
          | Refused { session; _ }
            when session <> t.session ->
              t.garbage <- t.garbage + 1
          | Welcome { upto; _ } when from_contact ->
              t.last_reply <- now t;
              let first = not t.welcomed in
              t.opened <- true;
              t.welcomed <- true;
              acked_upto t upto;
              if first then t.cb.status (Connected t.servers.(t.contact));
              resend t
          | Ack { upto; _ } ->
              if from_contact then t.last_reply <- now t;
              acked_upto t upto
          | Note { n; payload; _ } ->
              if from_contact then t.last_reply <- now t;
              if n = t.heard + 1 then begin
                t.heard <- n;
                t.cb.note payload
              end
              else if n > t.heard + 1 && from_contact then hello t
          | Gap { first; last; _ } ->
              if first = t.heard + 1 && last >= first then begin
                t.heard <- last;
                t.cb.lost (last - first + 1)
              end
          | Refused { why = Busy; _ } when from_contact ->
              t.last_reply <- now t;
              t.cb.status Busy_refused
          | Refused { why = Expired; _ } when from_contact ->
              t.closed <- true;
              T.close t.conn;
              t.cb.status Expired_session
          | _ -> t.garbage <- t.garbage + 1)

    let rec tick t =
      if not t.closed then begin
        let n = now t in
        if n - t.last_reply > t.failover then begin
          (* No answer: the next server. *)
          t.contact <- (t.contact + 1) mod Array.length t.servers;
          t.welcomed <- false;
          t.failovers <- t.failovers + 1;
          t.last_reply <- n;
          t.cb.status (Failing_over t.servers.(t.contact));
          hello t
        end
        else if not t.welcomed then hello t
        else if not (Queue.is_empty t.outstanding) then resend t
        else if n - t.last_sent >= t.failover / 3 then hello t;
        ignore (T.at t.tr (n + t.retry) (fun () -> tick t))
      end

    let connect ?(params = Params.empty) ?seed tr ~group ~addr ~servers cb =
      if servers = [] then Error "no server address"
      else
        match T.address_of_string addr with
        | Error e -> Error (Printf.sprintf "bad address %S: %s" addr e)
        | Ok a -> (
            match List.find_opt (fun s -> Result.is_error (T.address_of_string s)) servers with
            | Some s -> Error (Printf.sprintf "bad server address %S" s)
            | None -> (
                let seed =
                  match seed with
                  | Some s -> s
                  | None -> Random.State.bits (Random.State.make_self_init ())
                in
                let rng = Rng.create seed in
                let session =
                  Printf.sprintf "%08x%08x" (Rng.int rng 0x3fffffff) (Rng.int rng 0x3fffffff)
                in
                let self = ref None in
                let handler _ =
                  {
                    T.recv =
                      (fun ~src v ->
                        let s = Cstruct.to_string (Iovec.cstruct v) in
                        Iovec.release v;
                        match !self with
                        | Some t when not t.closed -> on_wire t ~src:(T.address_to_string src) s
                        | _ -> ());
                    closed = (fun () -> match !self with Some t -> t.closed <- true | None -> ());
                  }
                in
                match T.open_ tr a handler with
                | Error e -> Error (Fmt.str "cannot open %s: %a" addr Transport.pp_error e)
                | Ok conn ->
                    let servers = Array.of_list servers in
                    let t =
                      {
                        tr;
                        conn;
                        group;
                        session;
                        servers;
                        contact = Rng.int rng (Array.length servers);
                        cb;
                        opened = false;
                        welcomed = false;
                        next = 1;
                        outstanding = Queue.create ();
                        acked = 0;
                        heard = 0;
                        last_reply = T.now tr;
                        last_sent = 0;
                        closed = false;
                        window = max 1 (Params.int params Param.window);
                        failover = Params.time params Param.failover;
                        retry = Params.time params Param.retry;
                        max_request = Params.int params Param.max_request;
                        failovers = 0;
                        garbage = 0;
                      }
                    in
                    self := Some t;
                    hello t;
                    ignore (T.at tr (T.now tr + t.retry) (fun () -> tick t));
                    Ok t))

    let request t payload =
      if t.closed then Error Closed
      else if String.length payload > t.max_request then
        Error (Too_big { size = String.length payload; max = t.max_request })
      else if Queue.length t.outstanding >= t.window then Error Flow_control
      else begin
        let seq = t.next in
        t.next <- seq + 1;
        Queue.add (seq, payload) t.outstanding;
        if t.welcomed then send t (Request { group = t.group; session = t.session; seq; payload });
        Ok seq
      end

    let session t = t.session
    let acked t = t.acked
    let heard t = t.heard
    let outstanding t = Queue.length t.outstanding
    let server t = t.servers.(t.contact)
    let is_closed t = t.closed
    let failovers t = t.failovers

    let crash t =
      if not t.closed then begin
        t.closed <- true;
        T.close t.conn
      end
  end
end
