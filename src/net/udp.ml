let src = Logs.Src.create "consort.udp" ~doc:"UDP"

module Log = (val Logs.src_log src : Logs.LOG)

type 'host endpoint = { dst : 'host; dst_port : int; src_port : int }
type address = Ipv4_addr.t endpoint
type address_pattern = Port of int
type status = Unreachable of Icmp_packet.unreachable
type control = Unlisten of int
type info = { datagrams_in : int; datagrams_out : int; bad : int; no_port : int; wrong_peer : int }

let pp_info ppf i =
  Fmt.pf ppf "datagrams %d in %d out; dropped: %d bad, %d no port, %d wrong peer" i.datagrams_in
    i.datagrams_out i.bad i.no_port i.wrong_peer

module type GENERIC = sig
  type host

  include
    Protocol.S
      with type address = host endpoint
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ip

  val create : ip -> t
  val remote : connection -> host * int
  val local_port : connection -> int
  val sender : t -> address -> (connection, Protocol.error) result
end

module type S = GENERIC with type host = Ipv4_addr.t

module type LOWER = sig
  type host

  include Protocol.S

  val remote : connection -> host
  val equal_host : host -> host -> bool
  val udp_address : host -> address
  val udp_pattern : address_pattern
  val pseudo_header : connection -> len:int -> int
  val zero_checksum_ok : bool
  val max_payload : int
  val port_unreachable : t -> Packet.t -> unit
  val unreachable : status -> (Icmp_packet.unreachable * string) option
end

module Over_ipv4 (Ip : Ipv4.S) = struct
  include Ip

  let equal_host = Ipv4_addr.equal
  let udp_address h = { Ipv4.dst = h; proto = Ipv4_wire.proto_udp }
  let udp_pattern = { Ipv4.protocol = Ipv4_wire.proto_udp; source = None }
  let pseudo_header = Ip.Pseudo_header.sum
  let zero_checksum_ok = true
  let max_payload = 0xffff - Ipv4_wire.sizeof_ipv4 - Udp_wire.sizeof_udp
  let port_unreachable t p = Ip.send_icmp_error t (Dest_unreachable Port) p

  let unreachable (s : Ipv4.status) =
    match s with Icmp_error { error = Dest_unreachable u; quoted } -> Some (u, quoted) | _ -> None
end

module Over_ipv6 (Ip : Ipv6.S) = struct
  include Ip

  let equal_host = Ipv6_addr.equal
  let udp_address h = { Ipv6.dst = h; proto = Ipv4_wire.proto_udp }
  let udp_pattern = { Ipv6.protocol = Ipv4_wire.proto_udp; source = None }
  let pseudo_header = Ip.Pseudo_header.sum
  let zero_checksum_ok = false
  let max_payload = 0xffff - Udp_wire.sizeof_udp
  let port_unreachable t p = Ip.send_icmp_error t (Unreachable 4) p

  let unreachable (s : Ipv6.status) =
    match s with
    | Icmp_error { error; quoted } -> (
        let u : Icmp_packet.unreachable option =
          match error with
          | Unreachable 0 -> Some Net
          | Unreachable 3 -> Some Host
          | Unreachable 4 -> Some Port
          | Unreachable c -> Some (Other_unreachable c)
          | Packet_too_big mtu -> Some (Frag_needed { mtu })
          | Time_exceeded _ | Parameter_problem _ -> None
        in
        match u with Some u -> Some (u, quoted) | None -> None)
end

module Over (Ip : LOWER) (C : Checksum.POLICY) = struct
  type host = Ip.host
  type nonrec address = host endpoint
  type nonrec address_pattern = address_pattern
  type nonrec status = status
  type nonrec control = control
  type nonrec info = info
  type ip = Ip.t

  let max_payload = Ip.max_payload

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
         &&
         if Udp_wire.get_checksum cs = 0 then not Ip.zero_checksum_ok
         else
           not (Transport_checksum.valid_sub ~pseudo:(Ip.pseudo_header ipc ~len:ulen) cs ~len:ulen)
    then (
      t.bad <- t.bad + 1;
      Packet.release p)
    else begin
      Packet.trim p ulen;
      let sport = Udp_wire.get_src_port cs and dport = Udp_wire.get_dst_port cs in
      match Itbl.find t.ports dport with
      | Bound c ->
          if c.rport = sport && c.open_ && Ip.equal_host (Ip.remote c.ipc) (Ip.remote ipc) then (
            let (_ : (unit, _) result) = Packet.pull p Udp_wire.sizeof_udp in
            t.datagrams_in <- t.datagrams_in + 1;
            c.handler.receive c p)
          else (
            t.wrong_peer <- t.wrong_peer + 1;
            Packet.release p)
      | Listening f ->
          let c =
            {
              udp = t;
              ipc;
              lport = dport;
              rport = sport;
              bound = false;
              owns_ip = false;
              handler = nothing;
              open_ = true;
            }
          in
          c.handler <- f c;
          let (_ : (unit, _) result) = Packet.pull p Udp_wire.sizeof_udp in
          t.datagrams_in <- t.datagrams_in + 1;
          c.handler.receive c p
      | exception Not_found ->
          t.no_port <- t.no_port + 1;
          Ip.port_unreachable t.ip p
    end

  let ip_status t _ipc s =
    match Ip.unreachable s with
    | Some (u, quoted) when String.length quoted >= 4 -> (
        let sport = (Char.code quoted.[0] lsl 8) lor Char.code quoted.[1] in
        let dport = (Char.code quoted.[2] lsl 8) lor Char.code quoted.[3] in
        match Itbl.find_opt t.ports sport with
        | Some (Bound c) when c.rport = dport && c.open_ -> c.handler.status c (Unreachable u)
        | _ -> ())
    | _ -> ()

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
    Protocol.opened "Udp.create" (Ip.passive_open ip Ip.udp_pattern (ip_handler t));
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
          match Ip.active_open t.ip (Ip.udp_address dst) (ip_handler t) with
          | Error _ as e -> e
          | Ok ipc ->
              let c =
                {
                  udp = t;
                  ipc;
                  lport;
                  rport = dst_port;
                  bound = true;
                  owns_ip = true;
                  handler = nothing;
                  open_ = true;
                }
              in
              Itbl.replace t.ports lport (Bound c);
              c.handler <- f c;
              Ok c)

  let sender t { dst; dst_port; src_port } =
    if not (valid_port dst_port) then Error (`Bad_address (Printf.sprintf "port %d" dst_port))
    else if not (valid_port src_port) then Error (`Bad_address (Printf.sprintf "port %d" src_port))
    else
      match Ip.active_open t.ip (Ip.udp_address dst) (ip_handler t) with
      | Error _ as e -> e
      | Ok ipc ->
          Ok
            {
              udp = t;
              ipc;
              lport = src_port;
              rport = dst_port;
              bound = false;
              owns_ip = true;
              handler = nothing;
              open_ = true;
            }

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
      if C.compute || not Ip.zero_checksum_ok then
        Transport_checksum.fill ~zero:0xffff ~pseudo:(Ip.pseudo_header c.ipc ~len) ~field:6
          (Packet.cstruct p);
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
    (match Itbl.find_opt t.ports p with Some (Listening _) -> Itbl.remove t.ports p | _ -> ());
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

module Make (Ip : Ipv4.S) (C : Checksum.POLICY) = Over (Over_ipv4 (Ip)) (C)
