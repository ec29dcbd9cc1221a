let src = Logs.Src.create "consort.ipv4" ~doc:"IPv4"

module Log = (val Logs.src_log src : Logs.LOG)

(* The types of [Protocol.S], included again in [Make]. *)
module Types = struct
  type address = { dst : Ipv4_addr.t; proto : int }
  type address_pattern = { protocol : int; source : Ipv4_addr.t option }
  type status = Icmp_error of { error : Icmp_packet.t; quoted : string }
  type control = Set_address of Ipv4_addr.Prefix.t | Set_gateway of Ipv4_addr.t option
  type v4 = { address : Ipv4_addr.Prefix.t; gateway : Ipv4_addr.t option; bad_source : int }
  type info = v4 Ip_common.info
end

include Types

type reassembly = Ip_common.reassembly = {
  timeout : Consort.Time.t;
  max_bytes : int;
  max_fragments : int;
  max_datagrams : int;
}

let default_reassembly = Ip_common.default_reassembly

let pp_info ppf (i : info) =
  Fmt.pf ppf
    "%a%a mtu %d: sent %d received %d; dropped: %d bad (%d bad source), %d not for us, %d no \
     route, %d unknown protocol; %a; %d ICMP errors sent; %a"
    Ipv4_addr.Prefix.pp i.version.address
    Fmt.(option (any " via " ++ Ipv4_addr.pp))
    i.version.gateway i.mtu i.sent i.received i.bad i.version.bad_source i.not_for_us i.no_route
    i.unknown_protocol Ip_common.pp_fragments i i.icmp_errors_sent Ip_common.pp_connections i

module type S = sig
  include Protocol.S_WITH with module T := Types

  type host = Ipv4_addr.t
  type arp

  val create :
    ?reassembly:reassembly ->
    ?max_connections:int ->
    ?connection_idle:Consort.Time.t ->
    ?gateway:Ipv4_addr.t ->
    clock:Clock.t ->
    pool:Consort.Pool.t ->
    address:Ipv4_addr.Prefix.t ->
    arp ->
    t

  val address : t -> Ipv4_addr.t
  val remote : connection -> host
  val local : connection -> Ipv4_addr.t
  val protocol : connection -> int
  val mtu : connection -> int
  val send_df : connection -> Packet.t -> (unit, Protocol.error) result

  module Pseudo_header : Pseudo_header.S with type connection = connection

  val send_icmp_error : t -> Icmp_packet.t -> Packet.t -> unit
  val deliver_icmp_error : t -> Icmp_packet.t -> Cstruct.t -> unit
end

let max_payload = 0xffff - Ipv4_wire.sizeof_ipv4

module type LINK = sig
  include
    Protocol.S
      with type address = Arp.address
       and type address_pattern = Arp.address_pattern
       and type control = Arp.control

  val mtu : t -> int
end

module Conns = Ip_common.Conns (struct
  include Ip_common.Int_key

  type addr = Ipv4_addr.t

  let make (ip : Ipv4_addr.t) proto = ((ip :> int) lsl 8) lor proto
  let equal_addr = Ipv4_addr.equal
end)

module Reassembly = Ip_common.Reassembly (Ip_common.Int_key)

module Make (A : LINK) = struct
  module Lower = Protocol.Lower (A)
  include Types

  type arp = A.t
  type host = Ipv4_addr.t

  type t = {
    arp : A.t;
    clock : Clock.t;
    pool : Consort.Pool.t;
    mutable prefix : Ipv4_addr.Prefix.t;
    mutable gateway : Ipv4_addr.t option;
    mutable bcast : Ipv4_addr.t;
    mtu : int;
    conns : (t, handler) Conns.t;
    hops : A.connection Lru.t;
    reasm : (Ipv4_addr.t * int * int) Reassembly.t; (* source, protocol, identification *)
    mutable next_id : int;
    mutable rx_hlen : int;
    mutable rx_bcast : bool;
    icmp_rate : Ip_common.rate;
    stats : Ip_common.counters;
    mutable bad_source : int;
  }

  and connection = (t, handler) Conns.conn
  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }
  let address t = t.prefix.addr
  let remote (c : connection) = c.peer
  let local (c : connection) = c.ip.prefix.addr
  let protocol (c : connection) = c.proto
  let hlen = Ipv4_wire.sizeof_ipv4
  let mtu (c : connection) = c.ip.mtu - hlen

  module Pseudo_header = struct
    type nonrec connection = connection

    let sum (c : connection) ~len =
      Checksum.pseudo_ipv4 ~src:c.ip.prefix.addr ~dst:c.peer ~proto:c.proto ~len
  end

  let next_hop t dst =
    if Ipv4_addr.Prefix.mem dst t.prefix || (dst :> int) = 0xffff_ffff || Ipv4_addr.is_multicast dst
    then Some dst
    else t.gateway

  let hop_conn t nh =
    match Lru.find t.hops (nh : Ipv4_addr.t :> int) with
    | Some c -> Ok c
    | None -> (
        match
          A.active_open t.arp
            { Arp.ip = nh; ethertype = Ethernet_wire.ethertype_ipv4 }
            Lower.discard
        with
        | Ok c ->
            Lru.add t.hops (nh :> int) c;
            Ok c
        | Error _ as e -> e)

  let write_header t h ~dst ~proto ~len ~id ~flags_off =
    Ipv4_wire.set_version_ihl h ~ihl:5;
    Ipv4_wire.set_tos h 0;
    Ipv4_wire.set_len h len;
    Ipv4_wire.set_id h id;
    Ipv4_wire.set_flags_off h flags_off;
    Ipv4_wire.set_ttl h 64;
    Ipv4_wire.set_proto h proto;
    Ipv4_wire.set_checksum h 0;
    Ipv4_wire.set_src h t.prefix.addr;
    Ipv4_wire.set_dst h dst;
    Ipv4_wire.set_checksum h (Checksum.digest h)

  let fresh_id t =
    let id = t.next_id in
    t.next_id <- (id + 1) land 0xffff;
    id

  let fragment t hop ~dst ~proto p =
    let id = fresh_id t in
    Ip_common.send_fragments ~pool:t.pool
      ~headroom:(hlen + A.headroom t.arp)
      ~chunk:((t.mtu - hlen) land lnot 7)
      p
      (fun q ~off ~more ->
        let h = Packet.push q hlen in
        write_header t h ~dst ~proto ~len:(Packet.length q) ~id
          ~flags_off:((if more then Ipv4_wire.flag_mf else 0) lor (off / 8));
        t.stats.fragments_sent <- t.stats.fragments_sent + 1;
        A.send hop q)

  let route t dst = Ip_common.route (next_hop t) t.stats Ipv4_addr.pp dst

  let output t ~df ~dst ~proto p =
    match route t dst with
    | Error _ as e ->
        Packet.release p;
        e
    | Ok nh -> (
        let len = Packet.length p in
        match hop_conn t nh with
        | Error _ as e ->
            Packet.release p;
            e
        | Ok hop ->
            if len + hlen <= t.mtu then begin
              let h = Packet.push p hlen in
              write_header t h ~dst ~proto ~len:(len + hlen) ~id:(fresh_id t)
                ~flags_off:(if df then Ipv4_wire.flag_df else 0);
              t.stats.sent <- t.stats.sent + 1;
              A.send hop p
            end
            else if df || len > max_payload then (
              Packet.release p;
              Error (`Too_big len))
            else (
              t.stats.sent <- t.stats.sent + 1;
              fragment t hop ~dst ~proto p))

  let send (c : connection) p = output c.ip ~df:false ~dst:c.peer ~proto:c.proto p
  let send_df (c : connection) p = output c.ip ~df:true ~dst:c.peer ~proto:c.proto p

  (* ICMP errors: at most 100 a second. *)
  let icmp_allowed t = Ip_common.allowed t.icmp_rate ~now:(t.clock.now ())

  let send_icmp_error t err p =
    let h = t.rx_hlen in
    if t.rx_bcast || h < hlen || not (icmp_allowed t) then Packet.release p
    else
      let orig = Packet.push p h in
      if Ipv4_wire.get_version orig <> 4 || Ipv4_wire.get_ihl orig * 4 <> h then Packet.release p
      else
        let src = Ipv4_wire.get_src orig in
        let quoted = min (Packet.length p) (576 - hlen - Icmp_wire.sizeof_icmp) in
        let q =
          Packet.create ~headroom:(hlen + A.headroom t.arp) t.pool (Icmp_wire.sizeof_icmp + quoted)
        in
        let m = Packet.cstruct q in
        Cstruct.blit (Packet.cstruct p) 0 m Icmp_wire.sizeof_icmp quoted;
        Packet.release p;
        Icmp_packet.encode err m;
        t.stats.icmp_errors_sent <- t.stats.icmp_errors_sent + 1;
        ignore (output t ~df:false ~dst:src ~proto:Ipv4_wire.proto_icmp q)

  let deliver_icmp_error t err quoted =
    match Ipv4_packet.decode_quoted quoted with
    | Error _ -> ()
    | Ok (h, rest) -> (
        if h.src = t.prefix.addr then
          match Conns.find t.conns (Conns.key h.dst h.proto) with
          | Some (c : connection) ->
              c.handler.status c (Icmp_error { error = err; quoted = Cstruct.to_string rest })
          | None -> ())

  (* [p]'s window is the datagram, header of [h] bytes included. *)
  let deliver t p ~src ~proto ~h ~bcast =
    match Conns.accept t.conns ~ip:t ~nothing ~peer:src ~proto with
    | Some c ->
        let (_ : (unit, _) result) = Packet.pull p h in
        t.rx_hlen <- h;
        t.rx_bcast <- bcast;
        t.stats.received <- t.stats.received + 1;
        c.handler.receive c p
    | None ->
        t.stats.unknown_protocol <- t.stats.unknown_protocol + 1;
        let (_ : (unit, _) result) = Packet.pull p h in
        t.rx_hlen <- h;
        t.rx_bcast <- bcast;
        send_icmp_error t (Dest_unreachable Protocol) p

  (* The datagram reassembled, a header in front as if it had come whole, so that ICMP errors about
     it can quote it. *)
  let reassembled t q ~src ~proto ~id =
    let h = Packet.push q hlen in
    Ipv4_wire.set_version_ihl h ~ihl:5;
    Ipv4_wire.set_tos h 0;
    Ipv4_wire.set_len h (Packet.length q);
    Ipv4_wire.set_id h id;
    Ipv4_wire.set_flags_off h 0;
    Ipv4_wire.set_ttl h 64;
    Ipv4_wire.set_proto h proto;
    Ipv4_wire.set_checksum h 0;
    Ipv4_wire.set_src h src;
    Ipv4_wire.set_dst h t.prefix.addr;
    deliver t q ~src ~proto ~h:hlen ~bcast:false

  let reassemble t p ~src ~proto ~h ~fo =
    let id = Ipv4_wire.get_id (Packet.cstruct p) in
    let off = fo land 0x1fff * 8 and more = fo land Ipv4_wire.flag_mf <> 0 in
    t.stats.fragments_received <- t.stats.fragments_received + 1;
    let k = ((src : Ipv4_addr.t :> int) lsl 24) lor (proto lsl 16) lor id in
    match Reassembly.add t.reasm k ~off ~more ~header:h ~meta:(src, proto, id) p with
    | Bad -> t.stats.bad <- t.stats.bad + 1
    | Held -> ()
    | Complete (q, (src, proto, id)) -> reassembled t q ~src ~proto ~id

  (* RFC 1122 3.2.1.3 and 3.2.1.8: a datagram from this host, from 0.0.0.0
     (a host still without an address never sends us anything but DHCP,
     which we do not run), from the loopback net, from a multicast,
     limited or directed broadcast address, is a forgery or a loop. *)
  let bad_source t src_i =
    src_i = 0
    || src_i lsr 24 = 127
    || src_i land 0xf000_0000 = 0xe000_0000
    || src_i >= 0xf000_0000
    || src_i = (t.bcast :> int)
    || src_i = (t.prefix.addr :> int)

  let input t p =
    let cs = Packet.cstruct p in
    let n = Cstruct.length cs in
    if n < hlen || Cstruct.get_uint8 cs 0 lsr 4 <> 4 then (
      t.stats.bad <- t.stats.bad + 1;
      Packet.release p)
    else
      let h = Cstruct.get_uint8 cs 0 land 0xf * 4 in
      let total = Ipv4_wire.get_len cs in
      if h < hlen || h > n || total < h || total > n || Checksum.sum_sub cs ~off:0 ~len:h <> 0xffff
      then (
        t.stats.bad <- t.stats.bad + 1;
        Packet.release p)
      else
        let src = Ipv4_wire.get_src cs and dst = Ipv4_wire.get_dst cs in
        let src_i = (src :> int) and dst_i = (dst :> int) in
        if bad_source t src_i then (
          t.stats.bad <- t.stats.bad + 1;
          t.bad_source <- t.bad_source + 1;
          Packet.release p)
        else
          let bcast = dst_i = 0xffff_ffff || dst_i = (t.bcast :> int) in
          if dst_i <> (t.prefix.addr :> int) && not bcast then (
            t.stats.not_for_us <- t.stats.not_for_us + 1;
            Packet.release p)
          else begin
            Packet.trim p total;
            let proto = Ipv4_wire.get_proto cs in
            let fo = Ipv4_wire.get_flags_off cs in
            if fo land 0x3fff <> 0 then reassemble t p ~src ~proto ~h ~fo
            else deliver t p ~src ~proto ~h ~bcast
          end

  let set_prefix t prefix =
    if t.bcast <> Ipv4_addr.broadcast then ignore (A.control t.arp (Arp.Remove t.bcast));
    t.prefix <- prefix;
    t.bcast <- (if prefix.len >= 31 then Ipv4_addr.broadcast else Ipv4_addr.Prefix.broadcast prefix);
    Lru.clear t.hops;
    ignore (A.control t.arp (Arp.Set_ip prefix.addr));
    if t.bcast <> Ipv4_addr.broadcast then
      ignore (A.control t.arp (Arp.Add_static (t.bcast, Mac_addr.broadcast)))

  let create ?(reassembly = default_reassembly) ?(max_connections = 4096)
      ?(connection_idle = Consort.Time.of_sec 600.) ?gateway ~clock ~pool ~address arp =
    if max_connections < 1 then invalid_arg "Ipv4.create: max_connections < 1";
    let t =
      {
        arp;
        clock;
        pool;
        prefix = address;
        gateway;
        bcast = Ipv4_addr.broadcast;
        mtu = A.mtu arp;
        conns =
          Conns.create ~protocol:"protocol" ~in_use:"IP protocol" ~idle:connection_idle
            ~now:clock.now max_connections;
        hops = Lru.create ~idle:connection_idle ~now:clock.now 256;
        reasm =
          Reassembly.create ~clock ~pool ~headroom:(Packet.default_headroom + hlen) ~max_payload
            reassembly;
        next_id = 1;
        rx_hlen = 0;
        rx_bcast = false;
        icmp_rate = Ip_common.rate ~now:(clock.now ()) 100;
        stats = Ip_common.counters ();
        bad_source = 0;
      }
    in
    set_prefix t address;
    Lower.listen "Ipv4.create" arp (Arp.Ethertype Ethernet_wire.ethertype_ipv4) (input t);
    t

  let active_open t { dst; proto } f =
    Conns.active_open t.conns ~ip:t ~nothing ~route:(route t) dst proto f

  let passive_open t { protocol; source } f = Conns.passive_open t.conns ~protocol ~source f
  let close (c : connection) = Conns.close c.ip.conns c
  let abort = close
  let max_packet c = mtu c
  let headroom t = hlen + A.headroom t.arp

  let control t = function
    | Set_address p ->
        set_prefix t p;
        Ok ()
    | Set_gateway g ->
        t.gateway <- g;
        Lru.clear t.hops;
        Ok ()

  let query t =
    Conns.expire t.conns;
    Ip_common.info t.stats ~mtu:t.mtu ~reassembly:(Reassembly.counts t.reasm)
      ~connections:(Conns.counts t.conns)
      ({ address = t.prefix; gateway = t.gateway; bad_source = t.bad_source } : v4)
end

module Df (I : S) = struct
  include I

  let send = I.send_df
end
