let src = Logs.Src.create "consort.udp" ~doc:"UDP"

module Log = (val Logs.src_log src : Logs.LOG)

type address = { dst : Ipv4_addr.t; dst_port : int; src_port : int }
type address_pattern = Port of int
type status = Unreachable of Icmp_packet.unreachable
type control = Unlisten of int

type info = { datagrams_in : int; datagrams_out : int; bad : int; no_port : int; wrong_peer : int }

let pp_info ppf i =
  Fmt.pf ppf "datagrams %d in %d out; dropped: %d bad, %d no port, %d wrong peer" i.datagrams_in
    i.datagrams_out i.bad i.no_port i.wrong_peer

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ip

  val create : ip -> t
  val remote : connection -> Ipv4_addr.t * int
  val local_port : connection -> int
  val sender : t -> address -> (connection, Protocol.error) result
end

let max_payload = 0xffff - Ipv4_wire.sizeof_ipv4 - Udp_wire.sizeof_udp

module Make (Ip : Ipv4.S) (C : Checksum.POLICY) = struct
  type nonrec address = address
  type nonrec address_pattern = address_pattern
  type nonrec status = status
  type nonrec control = control
  type nonrec info = info
  type ip = Ip.t

  type t = {
    ip : Ip.t;
    ports : binding Itbl.t;
    mutable next_ephemeral : int;
    mutable datagrams_in : int;
    mutable datagrams_out : int;
    mutable bad : int;
    mutable no_port : int;
    mutable wrong_peer : int;
  }

  and binding = Bound of connection | Listening of (connection -> handler)

  and connection = {
    udp : t;
    ipc : Ip.connection;
    lport : int;
    rport : int;
    bound : bool;  (** the port is ours: datagrams for it come here *)
    owns_ip : bool;  (** [ipc] was opened for this connection *)
    mutable handler : handler;
    mutable open_ : bool;
  }

  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }
  let remote c = (Ip.remote c.ipc, c.rport)
  let local_port c = c.lport

  let input t ipc p =
    let cs = Packet.cstruct p in
    let n = Cstruct.length cs in
    let ulen = if n >= Udp_wire.sizeof_udp then Udp_wire.get_length cs else 0 in
    if
      ulen < Udp_wire.sizeof_udp || ulen > n
      || C.verify
         && Udp_wire.get_checksum cs <> 0
         && Checksum.sum_sub ~init:(Ip.Pseudo_header.sum ipc ~len:ulen) cs ~off:0 ~len:ulen <> 0xffff
    then (
      t.bad <- t.bad + 1;
      Packet.release p)
    else begin
      Packet.trim p ulen;
      let sport = Udp_wire.get_src_port cs and dport = Udp_wire.get_dst_port cs in
      match Itbl.find t.ports dport with
      | Bound c ->
          if c.rport = sport && c.open_ && (Ip.remote c.ipc :> int) = (Ip.remote ipc :> int) then (
            let (_ : (unit, _) result) = Packet.pull p Udp_wire.sizeof_udp in
            t.datagrams_in <- t.datagrams_in + 1;
            c.handler.receive c p)
          else (
            t.wrong_peer <- t.wrong_peer + 1;
            Packet.release p)
      | Listening f ->
          let c = { udp = t; ipc; lport = dport; rport = sport; bound = false; owns_ip = false; handler = nothing; open_ = true } in
          c.handler <- f c;
          let (_ : (unit, _) result) = Packet.pull p Udp_wire.sizeof_udp in
          t.datagrams_in <- t.datagrams_in + 1;
          c.handler.receive c p
      | exception Not_found ->
          t.no_port <- t.no_port + 1;
          Ip.send_icmp_error t.ip (Dest_unreachable Port) p
    end

  let ip_status t _ipc (s : Ipv4.status) =
    match s with
    | Icmp_error { error = Dest_unreachable u; quoted } when String.length quoted >= 4 -> (
        let sport = (Char.code quoted.[0] lsl 8) lor Char.code quoted.[1] in
        let dport = (Char.code quoted.[2] lsl 8) lor Char.code quoted.[3] in
        match Itbl.find_opt t.ports sport with
        | Some (Bound c) when c.rport = dport && c.open_ -> c.handler.status c (Unreachable u)
        | _ -> ())
    | Icmp_error _ -> ()

  let ip_handler t _ = { Ip.receive = input t; status = ip_status t }

  let create ip =
    let t =
      {
        ip;
        ports = Itbl.create 16;
        next_ephemeral = 49152;
        datagrams_in = 0;
        datagrams_out = 0;
        bad = 0;
        no_port = 0;
        wrong_peer = 0;
      }
    in
    (match Ip.passive_open ip { protocol = Ipv4_wire.proto_udp; source = None } (ip_handler t) with
    | Ok () -> ()
    | Error e -> Fmt.invalid_arg "Udp.create: %a" Protocol.pp_error e);
    t

  let ephemeral t =
    let rec go tries =
      if tries = 0 then None
      else
        let p = t.next_ephemeral in
        t.next_ephemeral <- (if p = 65535 then 49152 else p + 1);
        if Itbl.mem t.ports p then go (tries - 1) else Some p
    in
    go 16384

  let valid_port p = p > 0 && p <= 0xffff

  let active_open t { dst; dst_port; src_port } f =
    if not (valid_port dst_port) then Error (`Bad_address (Printf.sprintf "port %d" dst_port))
    else
      let lport =
        if src_port = 0 then ephemeral t
        else if valid_port src_port && not (Itbl.mem t.ports src_port) then Some src_port
        else None
      in
      match lport with
      | None -> Error (`In_use (Printf.sprintf "UDP port %d" src_port))
      | Some lport -> (
          match Ip.active_open t.ip { dst; proto = Ipv4_wire.proto_udp } (ip_handler t) with
          | Error _ as e -> e
          | Ok ipc ->
              let c = { udp = t; ipc; lport; rport = dst_port; bound = true; owns_ip = true; handler = nothing; open_ = true } in
              Itbl.replace t.ports lport (Bound c);
              c.handler <- f c;
              Ok c)

  let sender t { dst; dst_port; src_port } =
    if not (valid_port dst_port) then Error (`Bad_address (Printf.sprintf "port %d" dst_port))
    else if not (valid_port src_port) then Error (`Bad_address (Printf.sprintf "port %d" src_port))
    else
      match Ip.active_open t.ip { dst; proto = Ipv4_wire.proto_udp } (ip_handler t) with
      | Error _ as e -> e
      | Ok ipc ->
          Ok { udp = t; ipc; lport = src_port; rport = dst_port; bound = false; owns_ip = true; handler = nothing; open_ = true }

  let passive_open t (Port p) f =
    if not (valid_port p) then Error (`Bad_address (Printf.sprintf "port %d" p))
    else if Itbl.mem t.ports p then Error (`In_use (Printf.sprintf "UDP port %d" p))
    else (
      Itbl.replace t.ports p (Listening f);
      Ok ())

  let send c p =
    let n = Packet.length p in
    if not c.open_ then (
      Packet.release p;
      Error `Closed)
    else if n > max_payload then (
      Packet.release p;
      Error (`Too_big n))
    else
      let len = n + Udp_wire.sizeof_udp in
      let h = Packet.push p Udp_wire.sizeof_udp in
      Udp_wire.set_src_port h c.lport;
      Udp_wire.set_dst_port h c.rport;
      Udp_wire.set_length h len;
      Udp_wire.set_checksum h 0;
      if C.compute then begin
        let ck = Checksum.digest ~init:(Ip.Pseudo_header.sum c.ipc ~len) (Packet.cstruct p) in
        Udp_wire.set_checksum h (if ck = 0 then 0xffff else ck)
      end;
      c.udp.datagrams_out <- c.udp.datagrams_out + 1;
      Ip.send c.ipc p

  let close c =
    if c.open_ then begin
      c.open_ <- false;
      if c.bound then begin
        match Itbl.find_opt c.udp.ports c.lport with
        | Some (Bound c') when c' == c -> Itbl.remove c.udp.ports c.lport
        | _ -> ()
      end;
      if c.owns_ip then Ip.close c.ipc
    end

  let abort = close
  let max_packet _ = max_payload
  let headroom t = Udp_wire.sizeof_udp + Ip.headroom t.ip

  let control t (Unlisten p) =
    (match Itbl.find_opt t.ports p with
    | Some (Listening _) -> Itbl.remove t.ports p
    | _ -> ());
    Ok ()

  let query t =
    {
      datagrams_in = t.datagrams_in;
      datagrams_out = t.datagrams_out;
      bad = t.bad;
      no_port = t.no_port;
      wrong_peer = t.wrong_peer;
    }
end
