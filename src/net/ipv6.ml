let src = Logs.Src.create "consort.ipv6" ~doc:"IPv6"

module Log = (val Logs.src_log src : Logs.LOG)

(* The types of [Protocol.S], included again in [Make]. *)
module Types = struct
  type address = { dst : Ipv6_addr.t; proto : int }
  type address_pattern = { protocol : int; source : Ipv6_addr.t option }

  type icmp_error =
    | Unreachable of int
    | Packet_too_big of int
    | Time_exceeded of int
    | Parameter_problem of { code : int; pointer : int }

  type status = Icmp_error of { error : icmp_error; quoted : string }

  type control =
    | Set_address of Ipv6_addr.Prefix.t
    | Set_gateway of Ipv6_addr.t option
    | Add_neighbour of Ipv6_addr.t * Mac_addr.t

  type v6 = {
    addresses : Ipv6_addr.t list;
    neighbours : (Ipv6_addr.t * Mac_addr.t option) list;
    solicitations_sent : int;
    solicitations_received : int;
    advertisements_sent : int;
    advertisements_received : int;
    resolution_failed : int;
    queue_dropped : int;
    echo_replies_sent : int;
    icmp_errors_received : int;
  }

  type info = v6 Ip_common.info
end

include Types

let pp_icmp_error ppf = function
  | Unreachable 0 -> Fmt.string ppf "no route"
  | Unreachable 1 -> Fmt.string ppf "administratively prohibited"
  | Unreachable 3 -> Fmt.string ppf "address unreachable"
  | Unreachable 4 -> Fmt.string ppf "port unreachable"
  | Unreachable c -> Fmt.pf ppf "destination unreachable (code %d)" c
  | Packet_too_big m -> Fmt.pf ppf "packet too big (MTU %d)" m
  | Time_exceeded c -> Fmt.pf ppf "time exceeded (code %d)" c
  | Parameter_problem { code; pointer } ->
      Fmt.pf ppf "parameter problem (code %d at %d)" code pointer

type config = {
  neighbours : Ip_common.neighbours;
  max_connections : int;
  connection_idle : Consort.Time.t;
  reassembly : Ipv4.reassembly;
  icmp_rate : int;
}

let default_config =
  {
    neighbours = { Ip_common.default_neighbours with ttl = Consort.Time.of_sec 30. };
    max_connections = 4096;
    connection_idle = Consort.Time.of_sec 600.;
    reassembly = { Ipv4.default_reassembly with timeout = Consort.Time.of_sec 60. };
    icmp_rate = 100;
  }

let pp_info ppf (i : info) =
  let v = i.version in
  Fmt.pf ppf
    "%a mtu %d: sent %d received %d; dropped: %d bad, %d not for us, %d no route, %d unknown \
     protocol; %d neighbours, NS %d out %d in, NA %d out %d in, %d failed, %d dropped from queues; \
     %d echo replies, ICMPv6 errors %d out %d in; %a; %a"
    Fmt.(list ~sep:comma Ipv6_addr.pp)
    v.addresses i.mtu i.sent i.received i.bad i.not_for_us i.no_route i.unknown_protocol
    (List.length v.neighbours) v.solicitations_sent v.solicitations_received v.advertisements_sent
    v.advertisements_received v.resolution_failed v.queue_dropped v.echo_replies_sent
    i.icmp_errors_sent v.icmp_errors_received Ip_common.pp_fragments i Ip_common.pp_connections i

module type S = sig
  include Protocol.S_WITH with module T := Types

  type host = Ipv6_addr.t
  type ethernet

  val create :
    ?config:config ->
    ?address:Ipv6_addr.Prefix.t ->
    ?gateway:Ipv6_addr.t ->
    clock:Clock.t ->
    pool:Consort.Pool.t ->
    ethernet ->
    t

  val link_local : t -> Ipv6_addr.t
  val address : t -> Ipv6_addr.t option
  val remote : connection -> host
  val local : connection -> Ipv6_addr.t
  val protocol : connection -> int
  val lookup : t -> Ipv6_addr.t -> Mac_addr.t option

  module Pseudo_header : Pseudo_header.S with type connection = connection

  val send_icmp_error : t -> icmp_error -> Packet.t -> unit
end

let ethertype_ipv6 = 0x86dd
let hlen = 40
let proto_icmp = 58

(* ICMPv6 types. *)
let ty_unreachable = 1
let ty_too_big = 2
let ty_time_exceeded = 3
let ty_param = 4
let ty_echo_request = 128
let ty_echo_reply = 129
let ty_ns = 135
let ty_na = 136

module Neighbours = Ip_common.Neighbours (struct
  type t = Ipv6_addr.t

  let equal = Ipv6_addr.equal
  let hash = Ipv6_addr.hash
end)

module Conns = Ip_common.Conns (struct
  include Ip_common.String_key

  type addr = Ipv6_addr.t

  let make (a : Ipv6_addr.t) proto = (a :> string) ^ String.make 1 (Char.chr proto)
  let equal_addr = Ipv6_addr.equal
end)

module Reassembly = Ip_common.Reassembly (Ip_common.String_key)

module Make (E : Ethernet.S) = struct
  module Lower = Protocol.Lower (E)
  include Types

  type ethernet = E.t
  type host = Ipv6_addr.t

  type t = {
    eth : E.t;
    clock : Clock.t;
    pool : Consort.Pool.t;
    config : config;
    mac : Mac_addr.t;
    link_local : Ipv6_addr.t;
    mutable prefix : Ipv6_addr.Prefix.t option;
    mutable gateway : Ipv6_addr.t option;
    mtu : int;
    mutable out : E.connection option;
    neighbours : Packet.t Neighbours.t;
    conns : (t, handler) Conns.t;
    reasm : int Reassembly.t; (* the next header of the fragmentable part *)
    mutable next_id : int;
    icmp_rate : Ip_common.rate;
    (* The datagram being delivered: for ICMPv6 errors about it. *)
    mutable rx_src : Ipv6_addr.t;
    mutable rx_dst : Ipv6_addr.t;
    mutable rx_header : string;
    stats : Ip_common.counters;
    mutable solicitations_sent : int;
    mutable solicitations_received : int;
    mutable advertisements_sent : int;
    mutable advertisements_received : int;
    mutable echo_replies_sent : int;
    mutable icmp_errors_received : int;
  }

  and connection = (t, handler) Conns.conn
  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }
  let link_local t = t.link_local
  let address t = Option.map (fun (p : Ipv6_addr.Prefix.t) -> p.addr) t.prefix
  let remote (c : connection) = c.peer
  let protocol (c : connection) = c.proto

  let source_for t dst =
    if Ipv6_addr.is_link_local dst then t.link_local
    else match t.prefix with Some p -> p.addr | None -> t.link_local

  let local (c : connection) = source_for c.ip c.peer
  let pseudo = Transport_checksum.ipv6

  module Pseudo_header = struct
    type nonrec connection = connection

    let sum (c : connection) ~len = pseudo ~src:(local c) ~dst:c.peer ~proto:c.proto ~len
  end

  let is_ours t a =
    Ipv6_addr.equal a t.link_local
    || match t.prefix with Some p -> Ipv6_addr.equal a p.addr | None -> false

  let accepts t dst =
    is_ours t dst
    || Ipv6_addr.equal dst Ipv6_addr.all_nodes
    || Ipv6_addr.equal dst (Ipv6_addr.solicited_node t.link_local)
    ||
    match t.prefix with
    | Some p -> Ipv6_addr.equal dst (Ipv6_addr.solicited_node p.addr)
    | None -> false

  let on_link t dst =
    Ipv6_addr.is_link_local dst || Ipv6_addr.is_multicast dst
    || match t.prefix with Some p -> Ipv6_addr.Prefix.mem dst p | None -> false

  let next_hop t dst = if on_link t dst then Some dst else t.gateway

  let eth_out t =
    match t.out with
    | Some c -> Ok c
    | None -> (
        match
          E.active_open t.eth
            { Ethernet.dst = Mac_addr.broadcast; ethertype = ethertype_ipv6 }
            Lower.discard
        with
        | Ok c ->
            t.out <- Some c;
            Ok c
        | Error _ as e -> e)

  let transmit t mac p =
    match eth_out t with
    | Ok c -> E.send_to c ~dst:mac p
    | Error _ as e ->
        Packet.release p;
        e

  let write_header h ~src ~dst ~proto ~len ~hop =
    Cstruct.BE.set_uint32 h 0 0x6000_0000l;
    Cstruct.BE.set_uint16 h 4 len;
    Cstruct.set_uint8 h 6 proto;
    Cstruct.set_uint8 h 7 hop;
    Ipv6_addr.set h 8 src;
    Ipv6_addr.set h 24 dst

  (* An ICMPv6 message in a fresh packet: type, code, 4 bytes of header
     rest, then [body]; checksummed for [src] to [dst]. *)
  let icmp_packet t ~src ~dst ~ty ~code ~rest body =
    let n = 8 + String.length body in
    let p = Packet.create ~headroom:(hlen + E.headroom t.eth) t.pool n in
    let m = Packet.cstruct p in
    Cstruct.set_uint8 m 0 ty;
    Cstruct.set_uint8 m 1 code;
    Cstruct.BE.set_uint16 m 2 0;
    Cstruct.BE.set_uint32 m 4 rest;
    Cstruct.blit_from_string body 0 m 8 (String.length body);
    Transport_checksum.fill ~pseudo:(pseudo ~src ~dst ~proto:proto_icmp ~len:n) ~field:2 m;
    p

  let send_ns t ~(target : Ipv6_addr.t) ~dst ~mac_dst =
    let src = source_for t target in
    let body =
      (target :> string)
      ^ "\001\001"
      ^ String.init 6 (fun i -> Char.chr ((Mac_addr.to_int t.mac lsr (8 * (5 - i))) land 0xff))
    in
    let p = icmp_packet t ~src ~dst ~ty:ty_ns ~code:0 ~rest:0l body in
    let h = Packet.push p hlen in
    write_header h ~src ~dst ~proto:proto_icmp ~len:(Packet.length p - hlen) ~hop:255;
    t.solicitations_sent <- t.solicitations_sent + 1;
    ignore (transmit t mac_dst p)

  let send_na t ~(target : Ipv6_addr.t) ~dst ~mac_dst ~solicited =
    let src = target in
    let body =
      (target :> string)
      ^ "\002\001"
      ^ String.init 6 (fun i -> Char.chr ((Mac_addr.to_int t.mac lsr (8 * (5 - i))) land 0xff))
    in
    let flags = if solicited then 0x6000_0000l else 0x2000_0000l in
    let p = icmp_packet t ~src ~dst ~ty:ty_na ~code:0 ~rest:flags body in
    let h = Packet.push p hlen in
    write_header h ~src ~dst ~proto:proto_icmp ~len:(Packet.length p - hlen) ~hop:255;
    t.advertisements_sent <- t.advertisements_sent + 1;
    ignore (transmit t mac_dst p)

  let solicit t target =
    send_ns t ~target ~dst:(Ipv6_addr.solicited_node target)
      ~mac_dst:(Ipv6_addr.multicast_mac (Ipv6_addr.solicited_node target))

  (* Neighbour resolution, as ARP's. *)
  let learn t ip mac ~create =
    Neighbours.learn t.neighbours ip mac ~create ~transmit:(fun mac p -> ignore (transmit t mac p))

  let lookup t ip = Neighbours.lookup t.neighbours ip

  let resolve_for_send t ip =
    if Ipv6_addr.is_multicast ip then Some (Ipv6_addr.multicast_mac ip)
    else
      Neighbours.resolve t.neighbours ip ~refresh:(fun ip mac ->
          send_ns t ~target:ip ~dst:ip ~mac_dst:mac)

  (* [p]'s window is a whole datagram, header written. *)
  let send_to_hop t nh p =
    match resolve_for_send t nh with
    | Some mac -> transmit t mac p
    | None ->
        Neighbours.wait t.neighbours nh p ~solicit:(solicit t);
        Ok ()

  (* RFC 8200 section 4.5: a datagram over the link MTU goes in fragments,
     each with a fragment header (next header 44) and as much of the
     payload as fits, in multiples of 8 bytes; the identification is the
     instance's counter, which starts at a random value (RFC 7739). *)
  let fragment t nh ~src ~dst ~proto p =
    let id = t.next_id in
    t.next_id <- (id + 1) land 0xFFFF_FFFF;
    let hop = if Ipv6_addr.is_multicast dst then 1 else 64 in
    t.stats.sent <- t.stats.sent + 1;
    Ip_common.send_fragments ~pool:t.pool
      ~headroom:(hlen + 8 + E.headroom t.eth)
      ~chunk:((t.mtu - hlen - 8) land lnot 7)
      p
      (fun q ~off ~more ->
        let f = Packet.push q 8 in
        Cstruct.set_uint8 f 0 proto;
        Cstruct.set_uint8 f 1 0;
        Cstruct.BE.set_uint16 f 2 (off lor if more then 1 else 0);
        Cstruct.BE.set_uint32 f 4 (Int32.of_int id);
        let h = Packet.push q hlen in
        write_header h ~src ~dst ~proto:44 ~len:(Packet.length q - hlen) ~hop;
        t.stats.fragments_sent <- t.stats.fragments_sent + 1;
        send_to_hop t nh q)

  let route t dst = Ip_common.route (next_hop t) t.stats Ipv6_addr.pp dst

  let output t ~src ~dst ~proto p =
    match route t dst with
    | Error _ as e ->
        Packet.release p;
        e
    | Ok nh ->
        let len = Packet.length p in
        if len + hlen > t.mtu then
          if len > 0xFFFF then (
            Packet.release p;
            Error (`Too_big len))
          else fragment t nh ~src ~dst ~proto p
        else begin
          let h = Packet.push p hlen in
          write_header h ~src ~dst ~proto ~len ~hop:(if Ipv6_addr.is_multicast dst then 1 else 64);
          t.stats.sent <- t.stats.sent + 1;
          send_to_hop t nh p
        end

  let send (c : connection) p =
    let t = c.ip in
    let src = local c in
    if c.proto = proto_icmp && Packet.length p >= 4 then
      Transport_checksum.fill
        ~pseudo:(pseudo ~src ~dst:c.peer ~proto:proto_icmp ~len:(Packet.length p))
        ~field:2 (Packet.cstruct p);
    output t ~src ~dst:c.peer ~proto:c.proto p

  let icmp_allowed t = Ip_common.allowed t.icmp_rate ~now:(t.clock.now ())

  let error_fields = function
    | Unreachable c -> (ty_unreachable, c, 0l)
    | Packet_too_big m -> (ty_too_big, 0, Int32.of_int m)
    | Time_exceeded c -> (ty_time_exceeded, c, 0l)
    | Parameter_problem { code; pointer } -> (ty_param, code, Int32.of_int pointer)

  (* [p] is the payload of the datagram being delivered (after every
     header); the error quotes the datagram from its IPv6 header on, as
     much as fits in the minimum MTU. *)
  let send_icmp_error t err p =
    let dst = t.rx_src in
    if
      Ipv6_addr.is_multicast t.rx_dst
      || Ipv6_addr.equal dst Ipv6_addr.unspecified
      || not (icmp_allowed t)
    then Packet.release p
    else begin
      let quoted_max = 1280 - hlen - 8 in
      let payload = Packet.to_string p in
      Packet.release p;
      let whole = t.rx_header ^ payload in
      let quoted = String.sub whole 0 (min quoted_max (String.length whole)) in
      let ty, code, rest = error_fields err in
      let src = source_for t dst in
      let q = icmp_packet t ~src ~dst ~ty ~code ~rest quoted in
      t.stats.icmp_errors_sent <- t.stats.icmp_errors_sent + 1;
      ignore (output t ~src ~dst ~proto:proto_icmp q)
    end

  (* Hands [p] (window: the upper protocol's message) to the connection
     for [src] and [proto], or a listener; [Error ()] if nobody takes it. *)
  let upcall t ~src ~proto p =
    match Conns.accept t.conns ~ip:t ~nothing ~peer:src ~proto with
    | Some c ->
        t.stats.received <- t.stats.received + 1;
        c.handler.receive c p;
        Ok ()
    | None -> Error ()

  let mac_option cs off ty =
    (* The link-layer address option of type [ty] among the options from [off]. *)
    let n = Cstruct.length cs in
    let rec go off =
      if off + 2 > n then None
      else
        let oty = Cstruct.get_uint8 cs off and olen = Cstruct.get_uint8 cs (off + 1) * 8 in
        if olen = 0 || off + olen > n then None
        else if oty = ty && olen >= 8 then Some (Mac_addr.get cs (off + 2))
        else go (off + olen)
    in
    go off

  let icmp_input t ~src ~dst ~hop p =
    let cs = Packet.cstruct p in
    let n = Cstruct.length cs in
    if
      n < 8 || not (Transport_checksum.valid ~pseudo:(pseudo ~src ~dst ~proto:proto_icmp ~len:n) cs)
    then (
      t.stats.bad <- t.stats.bad + 1;
      Packet.release p)
    else
      let ty = Cstruct.get_uint8 cs 0 and code = Cstruct.get_uint8 cs 1 in
      if ty = ty_echo_request && code = 0 then begin
        if Ipv6_addr.equal src Ipv6_addr.unspecified then Packet.release p
        else begin
          (* Answered in place, from the address asked (or ours, for a group). *)
          let me = if Ipv6_addr.is_multicast dst then source_for t src else dst in
          Cstruct.set_uint8 cs 0 ty_echo_reply;
          Transport_checksum.fill
            ~pseudo:(pseudo ~src:me ~dst:src ~proto:proto_icmp ~len:n)
            ~field:2 cs;
          t.echo_replies_sent <- t.echo_replies_sent + 1;
          ignore (output t ~src:me ~dst:src ~proto:proto_icmp p)
        end
      end
      else if ty = ty_ns && code = 0 && hop = 255 && n >= 24 then begin
        t.solicitations_received <- t.solicitations_received + 1;
        let target = Ipv6_addr.get cs 8 in
        let slla = mac_option cs 24 1 in
        Packet.release p;
        if is_ours t target then begin
          if Ipv6_addr.equal src Ipv6_addr.unspecified then
            (* Duplicate address detection by another host: defend. *)
            send_na t ~target ~dst:Ipv6_addr.all_nodes
              ~mac_dst:(Ipv6_addr.multicast_mac Ipv6_addr.all_nodes)
              ~solicited:false
          else begin
            (match slla with
            | Some mac when not (Mac_addr.is_group mac) -> learn t src mac ~create:true
            | _ -> ());
            let mac_dst = match slla with Some m -> Some m | None -> lookup t src in
            match mac_dst with
            | Some mac_dst -> send_na t ~target ~dst:src ~mac_dst ~solicited:true
            | None -> ()
          end
        end
      end
      else if ty = ty_na && code = 0 && hop = 255 && n >= 24 then begin
        t.advertisements_received <- t.advertisements_received + 1;
        let target = Ipv6_addr.get cs 8 in
        (match mac_option cs 24 2 with
        | Some mac when not (Mac_addr.is_group mac) -> learn t target mac ~create:false
        | _ -> ());
        Packet.release p
      end
      else if ty = ty_unreachable || ty = ty_too_big || ty = ty_time_exceeded || ty = ty_param then begin
        t.icmp_errors_received <- t.icmp_errors_received + 1;
        let rest = Int32.to_int (Cstruct.BE.get_uint32 cs 4) land 0xffff_ffff in
        let error =
          if ty = ty_unreachable then Unreachable code
          else if ty = ty_too_big then Packet_too_big rest
          else if ty = ty_time_exceeded then Time_exceeded code
          else Parameter_problem { code; pointer = rest }
        in
        (* The quoted datagram must be one we sent. *)
        (if n >= 8 + hlen then
           let q = Cstruct.shift cs 8 in
           let qsrc = Ipv6_addr.get q 8
           and qdst = Ipv6_addr.get q 24
           and qproto = Cstruct.get_uint8 q 6 in
           if is_ours t qsrc then
             match Conns.find t.conns (Conns.key qdst qproto) with
             | Some (c : connection) ->
                 c.handler.status c
                   (Icmp_error { error; quoted = Cstruct.to_string (Cstruct.shift q hlen) })
             | None -> ());
        Packet.release p
      end
      else if ty < 128 || ty = ty_echo_reply then begin
        match upcall t ~src ~proto:proto_icmp p with Ok () -> () | Error () -> Packet.release p
      end
      else Packet.release p

  (* The options of a hop-by-hop or destination options header (RFC 8200
     4.2), from [i] to [stop]: padding and options whose type says skip
     them pass; of the others, none known here, the type's two high bits
     say discard, and whether to send a parameter problem (code 2) pointing
     at the option. *)
  let rec options cs i stop =
    if i >= stop then `Pass
    else
      let ty = Cstruct.get_uint8 cs i in
      if ty = 0 then options cs (i + 1) stop
      else if i + 2 > stop || i + 2 + Cstruct.get_uint8 cs (i + 1) > stop then `Malformed
      else if ty = 1 || ty lsr 6 = 0 then options cs (i + 2 + Cstruct.get_uint8 cs (i + 1)) stop
      else if ty lsr 6 = 1 then `Discard
      else `Problem i

  (* [off] is where the header [proto] starts in the datagram, [named] where
     the next header field that named it is. *)
  let rec deliver ?(off = hlen) ?(named = 6) t p ~src ~dst ~hop ~proto =
    (* [p]'s window starts at the header [proto]. *)
    let cs = Packet.cstruct p in
    let n = Cstruct.length cs in
    match proto with
    | 0 when off <> hlen ->
        (* Hop-by-hop options anywhere but first (RFC 8200 4.1): an
           unrecognized next header. *)
        t.stats.bad <- t.stats.bad + 1;
        send_icmp_error t (Parameter_problem { code = 1; pointer = named }) p
    | 0 | 60 | 43 -> (
        if n < 8 then (
          t.stats.bad <- t.stats.bad + 1;
          Packet.release p)
        else
          let next = Cstruct.get_uint8 cs 0 and len = (Cstruct.get_uint8 cs 1 + 1) * 8 in
          if len > n || (proto = 43 && Cstruct.get_uint8 cs 3 <> 0) then (
            (* A routing header with segments left: we are no router. *)
            t.stats.bad <- t.stats.bad + 1;
            Packet.release p)
          else
            match if proto = 43 then `Pass else options cs 2 len with
            | `Pass ->
                ignore (Packet.pull p len);
                deliver ~off:(off + len) ~named:off t p ~src ~dst ~hop ~proto:next
            | `Malformed | `Discard ->
                t.stats.bad <- t.stats.bad + 1;
                Packet.release p
            | `Problem i ->
                t.stats.bad <- t.stats.bad + 1;
                send_icmp_error t (Parameter_problem { code = 2; pointer = off + i }) p)
    | 44 -> fragment ~off t p ~src ~dst ~hop
    | 59 -> Packet.release p
    | 58 -> icmp_input t ~src ~dst ~hop p
    | _ -> (
        match upcall t ~src ~proto p with
        | Ok () -> ()
        | Error () ->
            t.stats.unknown_protocol <- t.stats.unknown_protocol + 1;
            send_icmp_error t (Parameter_problem { code = 1; pointer = named }) p)

  and fragment ~off:frag_at t p ~src ~dst ~hop =
    let cs = Packet.cstruct p in
    let n = Cstruct.length cs in
    t.stats.fragments_received <- t.stats.fragments_received + 1;
    if n < 8 then (
      t.stats.bad <- t.stats.bad + 1;
      Packet.release p)
    else
      let next = Cstruct.get_uint8 cs 0 in
      let fo = Cstruct.BE.get_uint16 cs 2 in
      let off = fo land 0xfff8 and more = fo land 1 = 1 in
      let id = Int32.to_int (Cstruct.BE.get_uint32 cs 4) land 0xffff_ffff in
      if off = 0 && not more then begin
        (* An atomic fragment (RFC 6946): the datagram whole. *)
        ignore (Packet.pull p 8);
        deliver ~off:(frag_at + 8) ~named:frag_at t p ~src ~dst ~hop ~proto:next
      end
      else
        let k = (src :> string) ^ (dst :> string) ^ Printf.sprintf "%08x" id in
        match Reassembly.add t.reasm k ~off ~more ~header:8 ~meta:next p with
        | Bad -> t.stats.bad <- t.stats.bad + 1
        | Held -> ()
        | Complete (q, next) ->
            deliver ~off:(frag_at + 8) ~named:frag_at t q ~src ~dst ~hop ~proto:next

  let input t p =
    let cs = Packet.cstruct p in
    let n = Cstruct.length cs in
    if n < hlen || Cstruct.get_uint8 cs 0 lsr 4 <> 6 || hlen + Cstruct.BE.get_uint16 cs 4 > n then (
      t.stats.bad <- t.stats.bad + 1;
      Packet.release p)
    else
      let plen = Cstruct.BE.get_uint16 cs 4 in
      let src = Ipv6_addr.get cs 8 and dst = Ipv6_addr.get cs 24 in
      if Ipv6_addr.is_multicast src || Ipv6_addr.equal src Ipv6_addr.loopback || is_ours t src then (
        t.stats.bad <- t.stats.bad + 1;
        Packet.release p)
      else if not (accepts t dst) then (
        t.stats.not_for_us <- t.stats.not_for_us + 1;
        Packet.release p)
      else begin
        Packet.trim p (hlen + plen);
        let proto = Cstruct.get_uint8 cs 6 and hop = Cstruct.get_uint8 cs 7 in
        t.rx_src <- src;
        t.rx_dst <- dst;
        t.rx_header <- Cstruct.to_string (Cstruct.sub cs 0 hlen);
        ignore (Packet.pull p hlen);
        deliver t p ~src ~dst ~hop ~proto
      end

  let create ?(config = default_config) ?address ?gateway ~clock ~pool eth =
    if
      config.neighbours.max_entries < 1 || config.neighbours.max_pending < 1
      || config.max_connections < 1 || config.neighbours.max_queued < 1
      || config.neighbours.queue_limit < 1
    then invalid_arg "Ipv6.create: a limit below 1";
    let mac = E.mac eth in
    let t =
      {
        eth;
        clock;
        pool;
        config;
        mac;
        link_local = Ipv6_addr.link_local_of_mac mac;
        prefix = address;
        gateway;
        mtu = E.mtu eth;
        out = None;
        neighbours =
          Neighbours.create ~clock ~packet:Fun.id
            ~gave_up:(fun ip _ -> Log.debug (fun m -> m "no answer from %a" Ipv6_addr.pp ip))
            config.neighbours;
        conns =
          Conns.create ~protocol:"next header" ~in_use:"IPv6 next header"
            ~idle:config.connection_idle ~now:clock.now config.max_connections;
        reasm =
          Reassembly.create ~clock ~pool ~headroom:Packet.default_headroom ~max_payload:0xffff
            config.reassembly;
        (* Not the same at every start (RFC 7739), yet the same under the
           same virtual clock. *)
        next_id = Hashtbl.hash (Mac_addr.to_string (E.mac eth), clock.now ()) land 0xFFFF_FFFF;
        icmp_rate = Ip_common.rate ~now:(clock.now ()) config.icmp_rate;
        rx_src = Ipv6_addr.unspecified;
        rx_dst = Ipv6_addr.unspecified;
        rx_header = "";
        stats = Ip_common.counters ();
        solicitations_sent = 0;
        solicitations_received = 0;
        advertisements_sent = 0;
        advertisements_received = 0;
        echo_replies_sent = 0;
        icmp_errors_received = 0;
      }
    in
    Lower.listen "Ipv6.create" eth (Ethernet.Ethertype ethertype_ipv6) (input t);
    t

  let active_open t { dst; proto } f =
    Conns.active_open t.conns ~ip:t ~nothing ~route:(route t) dst proto f

  let passive_open t { protocol; source } f = Conns.passive_open t.conns ~protocol ~source f
  let close (c : connection) = Conns.close c.ip.conns c
  let abort = close
  let max_packet (c : connection) = c.ip.mtu - hlen
  let headroom t = hlen + E.headroom t.eth

  let control t = function
    | Set_address p ->
        t.prefix <- Some p;
        Ok ()
    | Set_gateway g ->
        t.gateway <- g;
        Ok ()
    | Add_neighbour (ip, mac) ->
        Neighbours.add_static t.neighbours ip mac;
        Ok ()

  let query t =
    let neighbours = List.sort compare (Neighbours.entries t.neighbours) in
    Ip_common.info t.stats ~mtu:t.mtu ~reassembly:(Reassembly.counts t.reasm)
      ~connections:(Conns.counts t.conns)
      ({
         addresses = t.link_local :: Option.to_list (address t);
         neighbours;
         solicitations_sent = t.solicitations_sent;
         solicitations_received = t.solicitations_received;
         advertisements_sent = t.advertisements_sent;
         advertisements_received = t.advertisements_received;
         resolution_failed = Neighbours.resolution_failed t.neighbours;
         queue_dropped = Neighbours.queue_dropped t.neighbours;
         echo_replies_sent = t.echo_replies_sent;
         icmp_errors_received = t.icmp_errors_received;
       }
        : v6)
end
