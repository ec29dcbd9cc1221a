open Consort

let src = Logs.Src.create "consort.udp_transport" ~doc:"The generic transport over this stack's UDP"

module Log = (val Logs.src_log src : Logs.LOG)

type address = { ip : Ipv4_addr.t; port : int }

module type S = sig
  type stack

  include Consort.Transport.S with type address = address and type timer = Clock.cancel

  val create : ?pool:Consort.Pool.t -> stack -> t
  val stack : t -> stack
  val local : connection -> address
  val mtu : int
  val link_mtu : t -> int
  val connections : t -> int
end

let address_to_string a = Printf.sprintf "%s:%d" (Ipv4_addr.to_string a.ip) a.port
let pp_address = Fmt.of_to_string address_to_string
let equal_address a b = Ipv4_addr.equal a.ip b.ip && a.port = b.port

let address_of_string s =
  let bad why = Error (Printf.sprintf "%S is not an IPv4 address and port (%s)" s why) in
  match String.rindex_opt s ':' with
  | None -> bad "no port"
  | Some i -> (
      let host = String.sub s 0 i and p = String.sub s (i + 1) (String.length s - i - 1) in
      let port =
        if p = "" || String.length p > 5 || not (String.for_all (fun c -> c >= '0' && c <= '9') p)
        then None
        else
          let v = int_of_string p in
          if v > 0xffff then None else Some v
      in
      match port with
      | None -> bad "port"
      | Some port -> (
          match Ipv4_addr.of_string host with
          | Ok ip -> Ok { ip; port }
          | Error _ -> bad "IPv4 address"))

let mtu = 0xffff - Ipv4_wire.sizeof_ipv4 - Udp_wire.sizeof_udp
let first_ephemeral = 49152

let error : Protocol.error -> Transport.error = function
  | `Closed -> `Closed
  | `Refused s -> `Unreachable s
  | `Timeout -> `Unreachable "timeout"
  | `Reset -> `Closed
  | `Unreachable s -> `Unreachable s
  | `Too_big n -> `Too_big (n, mtu)
  | `Bad_address s -> `Bad_address s
  | `In_use s -> `Address_in_use s
  | `Unsupported s -> `Unsupported s
  | `System s -> `System s

module Make (S : Ipstack.S) = struct
  type stack = S.t
  type nonrec address = address

  let pp_address = pp_address
  let equal_address = equal_address
  let address_to_string = address_to_string
  let address_of_string = address_of_string
  let mtu = mtu

  type handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

  type control =
    | Drop_filter of (src:address -> Cstruct.t -> bool) option
    | Join_multicast of address

  type info = {
    local : address;
    mtu : int;
    multicast : bool;
    sent : int;
    received : int;
    dropped : int;
  }

  type t = { stack : S.t; pool : Pool.t; conns : connection Itbl.t }

  and connection = {
    tr : t;
    local : address;
    mutable handler : handler;
    mutable filter : (src:address -> Cstruct.t -> bool) option;
    senders : (address, S.Udp.connection) Hashtbl.t;
    mutable closed : bool;
    mutable sent : int;
    mutable received : int;
    mutable dropped : int;
  }

  (* Senders kept per connection; past this many, all are dropped and
     made again as needed. *)
  let max_senders = 1024

  let create ?pool stack =
    let pool = match pool with Some p -> p | None -> stack.S.pool in
    { stack; pool; conns = Itbl.create 8 }

  let stack t = t.stack
  let local c = c.local
  let connections t = Itbl.length t.conns
  let link_mtu t = S.Eth.mtu t.stack.S.eth - Ipv4_wire.sizeof_ipv4 - Udp_wire.sizeof_udp
  let our_ip t = S.Ip.address t.stack.S.ip

  (* Receiving. *)

  let deliver c ~src cs =
    let drop =
      match c.filter with
      | None -> false
      | Some f -> (
          try f ~src cs
          with e ->
            Log.err (fun m -> m "drop filter raised %s; datagram dropped" (Printexc.to_string e));
            true)
    in
    if drop then c.dropped <- c.dropped + 1
    else begin
      let v = Pool.copy c.tr.pool cs in
      c.received <- c.received + 1;
      try c.handler.recv ~src v
      with e ->
        Log.err (fun m ->
            m "%a: receive handler raised %s" pp_address c.local (Printexc.to_string e))
    end

  let input c uc p =
    if c.closed then Packet.release p
    else begin
      let ip, port = S.Udp.remote uc in
      Fun.protect
        ~finally:(fun () -> Packet.release p)
        (fun () -> deliver c ~src:{ ip; port } (Packet.cstruct p))
    end

  let no_handler = { recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }
  let udp_handler c _ = { S.Udp.receive = input c; status = (fun _ _ -> ()) }

  let bind t port f =
    let c =
      {
        tr = t;
        local = { ip = our_ip t; port };
        handler = no_handler;
        filter = None;
        senders = Hashtbl.create 8;
        closed = false;
        sent = 0;
        received = 0;
        dropped = 0;
      }
    in
    match S.Udp.passive_open t.stack.S.udp (Udp.Port port) (udp_handler c) with
    | Error _ as e -> e
    | Ok () ->
        Itbl.replace t.conns port c;
        c.handler <- f c;
        Log.debug (fun m -> m "opened %a" pp_address c.local);
        Ok c

  let open_ t addr f =
    if not (Ipv4_addr.equal addr.ip Ipv4_addr.any || Ipv4_addr.equal addr.ip (our_ip t)) then
      Error (`Bad_address (address_to_string addr ^ " is not this stack's address"))
    else if addr.port <> 0 then Result.map_error error (bind t addr.port f)
    else
      let rec try_port p =
        if p > 0xffff then Error (`Address_in_use "no free UDP port from 49152")
        else
          match bind t p f with
          | Ok c -> Ok c
          | Error (`In_use _) -> try_port (p + 1)
          | Error e -> Error (error e)
      in
      try_port first_ephemeral

  let close_senders c =
    Hashtbl.iter (fun _ uc -> S.Udp.close uc) c.senders;
    Hashtbl.reset c.senders

  let close c =
    if not c.closed then begin
      c.closed <- true;
      let t = c.tr in
      ignore (S.Udp.control t.stack.S.udp (Udp.Unlisten c.local.port) : (unit, _) result);
      (match Itbl.find_opt t.conns c.local.port with
      | Some c' when c' == c -> Itbl.remove t.conns c.local.port
      | _ -> ());
      close_senders c;
      c.filter <- None;
      Log.debug (fun m -> m "closed %a" pp_address c.local);
      try c.handler.closed ()
      with e ->
        Log.err (fun m -> m "%a: close handler raised %s" pp_address c.local (Printexc.to_string e))
    end

  (* Sending. *)

  let sender c dst =
    match Hashtbl.find_opt c.senders dst with
    | Some uc -> Ok uc
    | None -> (
        if Hashtbl.length c.senders >= max_senders then close_senders c;
        match
          S.Udp.sender c.tr.stack.S.udp
            { Udp.dst = dst.ip; dst_port = dst.port; src_port = c.local.port }
        with
        | Ok uc ->
            Hashtbl.replace c.senders dst uc;
            Ok uc
        | Error e -> Error (error e))

  (* A datagram to our own address: to the connection on that port, from
     the clock, so that no handler runs inside [send]. *)
  let loopback c dst msg =
    let t = c.tr in
    let v = Msg.to_iovec t.pool msg in
    let src = { ip = our_ip t; port = c.local.port } in
    let (_ : Clock.cancel) =
      t.stack.S.clock.at (t.stack.S.clock.now ()) (fun () ->
          match Itbl.find_opt t.conns dst.port with
          | Some d when not d.closed ->
              Fun.protect
                ~finally:(fun () -> Iovec.release v)
                (fun () -> deliver d ~src (Iovec.cstruct v))
          | _ -> Iovec.release v)
    in
    c.sent <- c.sent + 1;
    Ok ()

  let send_one c dst len msg =
    if dst.port = 0 then Error (`Bad_address (address_to_string dst))
    else if Ipv4_addr.equal dst.ip (our_ip c.tr) then loopback c dst msg
    else
      match sender c dst with
      | Error _ as e ->
          c.dropped <- c.dropped + 1;
          e
      | Ok uc -> (
          let p = Packet.create ~headroom:(S.Udp.headroom c.tr.stack.S.udp) c.tr.pool len in
          let (_ : int) = Msg.blit_to msg (Packet.cstruct p) 0 in
          match S.Udp.send uc p with
          | Ok () ->
              c.sent <- c.sent + 1;
              Ok ()
          | Error e ->
              c.dropped <- c.dropped + 1;
              Error (error e))

  let check c msg =
    if c.closed then Error `Closed
    else
      let len = Msg.length msg in
      if len > mtu then Error (`Too_big (len, mtu)) else Ok len

  let send c ~dst msg =
    match check c msg with Error _ as e -> e | Ok len -> send_one c dst len msg

  let cast c ~dsts msg =
    match check c msg with
    | Error _ as e -> e
    | Ok len ->
        List.fold_left
          (fun first dst ->
            let r = send_one c dst len msg in
            match first with Ok () -> r | Error _ -> first)
          (Ok ()) dsts

  (* Control and query. *)

  let control c = function
    | _ when c.closed -> Error `Closed
    | Drop_filter f ->
        c.filter <- f;
        Ok ()
    | Join_multicast _ -> Error (`Unsupported "IP multicast on this stack")

  let query (c : connection) =
    {
      local = c.local;
      mtu;
      multicast = false;
      sent = c.sent;
      received = c.received;
      dropped = c.dropped;
    }

  (* Time. *)

  type timer = Clock.cancel

  let now t = t.stack.S.clock.now ()
  let at t time f = t.stack.S.clock.at time f
  let cancel (tm : timer) = tm ()
end

include (Make (Ipstack) : S with type stack = Ipstack.t with type address := address)
