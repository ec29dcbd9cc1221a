let src = Logs.Src.create "consort.ipv4" ~doc:"IPv4"

module Log = (val Logs.src_log src : Logs.LOG)

type address = { dst : Ipv4_addr.t; proto : int }
type address_pattern = { protocol : int; source : Ipv4_addr.t option }
type status = Icmp_error of { error : Icmp_packet.t; quoted : string }
type control = Set_address of Ipv4_addr.Prefix.t | Set_gateway of Ipv4_addr.t option

type reassembly = {
  timeout : Consort.Time.t;
  max_bytes : int;
  max_fragments : int;
  max_datagrams : int;
}

let default_reassembly =
  {
    timeout = Consort.Time.of_sec 30.;
    max_bytes = 1 lsl 20;
    max_fragments = 64;
    max_datagrams = 64;
  }

type info = {
  address : Ipv4_addr.Prefix.t;
  gateway : Ipv4_addr.t option;
  mtu : int;
  sent : int;
  received : int;
  bad : int;
  not_for_us : int;
  no_route : int;
  unknown_protocol : int;
  connections_evicted : int;
  bad_source : int;
  fragments_sent : int;
  fragments_received : int;
  reassembled : int;
  reassembly_dropped : int;
  reassembly_timeouts : int;
  icmp_errors_sent : int;
  connections : int;
}

let pp_info ppf i =
  Fmt.pf ppf
    "%a%a mtu %d: sent %d received %d; dropped: %d bad (%d bad source), %d not for us, %d no \
     route, %d unknown protocol; fragments %d out %d in, %d reassembled, %d given up, %d timed \
     out; %d ICMP errors sent; %d connections (%d evicted)"
    Ipv4_addr.Prefix.pp i.address
    Fmt.(option (any " via " ++ Ipv4_addr.pp))
    i.gateway i.mtu i.sent i.received i.bad i.bad_source i.not_for_us i.no_route i.unknown_protocol
    i.fragments_sent i.fragments_received i.reassembled i.reassembly_dropped i.reassembly_timeouts
    i.icmp_errors_sent i.connections i.connections_evicted

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

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

module Make (A : LINK) = struct
  type nonrec address = address
  type nonrec address_pattern = address_pattern
  type nonrec status = status
  type nonrec control = control
  type nonrec info = info
  type arp = A.t
  type host = Ipv4_addr.t

  type fragments = {
    fsrc : Ipv4_addr.t;
    fproto : int;
    fid : int;
    mutable frags : (int * int * Packet.t) list; (* offset, length, payload; sorted *)
    mutable bytes : int;
    mutable count : int;
    mutable total : int; (* -1 until the last fragment arrives *)
    mutable cancel : Clock.cancel;
  }

  type t = {
    arp : A.t;
    clock : Clock.t;
    pool : Consort.Pool.t;
    reasm : reassembly;
    mutable prefix : Ipv4_addr.Prefix.t;
    mutable gateway : Ipv4_addr.t option;
    mutable bcast : Ipv4_addr.t;
    mtu : int;
    pinned : connection Itbl.t; (* opened actively, until closed *)
    conns : connection Lru.t; (* made by a passive open *)
    listeners : (Ipv4_addr.t option * (connection -> handler)) list Itbl.t;
    hops : A.connection Lru.t;
    pending : fragments Lru.t; (* the oldest evicted for a new datagram *)
    mutable pending_bytes : int;
    mutable next_id : int;
    mutable rx_hlen : int;
    mutable rx_bcast : bool;
    mutable icmp_tokens : int;
    mutable icmp_refill : Consort.Time.t;
    mutable sent : int;
    mutable received : int;
    mutable bad : int;
    mutable not_for_us : int;
    mutable no_route : int;
    mutable unknown_protocol : int;
    mutable bad_source : int;
    mutable fragments_sent : int;
    mutable fragments_received : int;
    mutable reassembled : int;
    mutable reassembly_dropped : int;
    mutable reassembly_timeouts : int;
    mutable icmp_errors_sent : int;
  }

  and connection = {
    ip : t;
    peer : Ipv4_addr.t;
    proto : int;
    key : int;
    mutable handler : handler;
    mutable users : int;
    mutable is_pinned : bool;
  }

  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }
  let key ip proto = ((ip : Ipv4_addr.t :> int) lsl 8) lor proto
  let address t = t.prefix.addr
  let remote c = c.peer
  let local c = c.ip.prefix.addr
  let protocol c = c.proto
  let hlen = Ipv4_wire.sizeof_ipv4
  let mtu c = c.ip.mtu - hlen

  module Pseudo_header = struct
    type nonrec connection = connection

    let sum c ~len = Checksum.pseudo_ipv4 ~src:c.ip.prefix.addr ~dst:c.peer ~proto:c.proto ~len
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
          A.active_open t.arp { Arp.ip = nh; ethertype = Ethernet_wire.ethertype_ipv4 } (fun _ ->
              { A.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) })
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
    let payload = Packet.cstruct p in
    let len = Cstruct.length payload in
    let chunk = (t.mtu - hlen) land lnot 7 in
    let id = fresh_id t in
    let rec go off result =
      if off >= len then result
      else
        let n = min chunk (len - off) in
        let q = Packet.create ~headroom:(hlen + A.headroom t.arp) t.pool n in
        Cstruct.blit payload off (Packet.cstruct q) 0 n;
        let h = Packet.push q hlen in
        let more = off + n < len in
        write_header t h ~dst ~proto ~len:(n + hlen) ~id
          ~flags_off:((if more then Ipv4_wire.flag_mf else 0) lor (off / 8));
        t.fragments_sent <- t.fragments_sent + 1;
        let r = A.send hop q in
        go (off + n) (match result with Ok () -> r | e -> e)
    in
    let r = go 0 (Ok ()) in
    Packet.release p;
    r

  let output t ~df ~dst ~proto p =
    let len = Packet.length p in
    match next_hop t dst with
    | None ->
        t.no_route <- t.no_route + 1;
        Packet.release p;
        Error (`Unreachable (Fmt.str "no route to %a" Ipv4_addr.pp dst))
    | Some nh -> (
        match hop_conn t nh with
        | Error _ as e ->
            Packet.release p;
            e
        | Ok hop ->
            if len + hlen <= t.mtu then begin
              let h = Packet.push p hlen in
              write_header t h ~dst ~proto ~len:(len + hlen) ~id:(fresh_id t)
                ~flags_off:(if df then Ipv4_wire.flag_df else 0);
              t.sent <- t.sent + 1;
              A.send hop p
            end
            else if df || len > max_payload then (
              Packet.release p;
              Error (`Too_big len))
            else (
              t.sent <- t.sent + 1;
              fragment t hop ~dst ~proto p))

  let send c p = output c.ip ~df:false ~dst:c.peer ~proto:c.proto p
  let send_df c p = output c.ip ~df:true ~dst:c.peer ~proto:c.proto p

  (* ICMP errors: at most 100 a second. *)
  let icmp_allowed t =
    let now = t.clock.now () in
    if now - t.icmp_refill >= 1_000_000_000 then (
      t.icmp_refill <- now;
      t.icmp_tokens <- 100);
    if t.icmp_tokens > 0 then (
      t.icmp_tokens <- t.icmp_tokens - 1;
      true)
    else false

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
        t.icmp_errors_sent <- t.icmp_errors_sent + 1;
        ignore (output t ~df:false ~dst:src ~proto:Ipv4_wire.proto_icmp q)

  let find_conn t k =
    match Itbl.find_opt t.pinned k with Some _ as c -> c | None -> Lru.find t.conns k

  let deliver_icmp_error t err quoted =
    match Ipv4_packet.decode_quoted quoted with
    | Error _ -> ()
    | Ok (h, rest) -> (
        if h.src = t.prefix.addr then
          match find_conn t (key h.dst h.proto) with
          | Some c ->
              c.handler.status c (Icmp_error { error = err; quoted = Cstruct.to_string rest })
          | None -> ())

  let find_listener t proto src =
    match Itbl.find_opt t.listeners proto with
    | None -> None
    | Some l -> (
        match List.find_opt (fun (s, _) -> s = Some src) l with
        | Some (_, f) -> Some f
        | None -> (
            match List.find_opt (fun (s, _) -> s = None) l with
            | Some (_, f) -> Some f
            | None -> None))

  (* [p]'s window is the datagram, header of [h] bytes included. *)
  let deliver t p ~src ~proto ~h ~bcast =
    let k = key src proto in
    match find_conn t k with
    | Some c ->
        let (_ : (unit, _) result) = Packet.pull p h in
        t.rx_hlen <- h;
        t.rx_bcast <- bcast;
        t.received <- t.received + 1;
        c.handler.receive c p
    | None -> (
        match find_listener t proto src with
        | Some f ->
            let c =
              {
                ip = t;
                peer = src;
                proto;
                key = k;
                handler = nothing;
                users = 1;
                is_pinned = false;
              }
            in
            Lru.add t.conns k c;
            c.handler <- f c;
            let (_ : (unit, _) result) = Packet.pull p h in
            t.rx_hlen <- h;
            t.rx_bcast <- bcast;
            t.received <- t.received + 1;
            c.handler.receive c p
        | None ->
            t.unknown_protocol <- t.unknown_protocol + 1;
            let (_ : (unit, _) result) = Packet.pull p h in
            t.rx_hlen <- h;
            t.rx_bcast <- bcast;
            send_icmp_error t (Dest_unreachable Protocol) p)

  (* [fr], no longer in [t.pending], is given up. *)
  let release_fragments t fr =
    fr.cancel ();
    t.pending_bytes <- t.pending_bytes - fr.bytes;
    List.iter (fun (_, _, p) -> Packet.release p) fr.frags;
    fr.frags <- []

  let drop_fragments t k fr =
    fr.cancel ();
    Lru.remove t.pending k;
    t.pending_bytes <- t.pending_bytes - fr.bytes;
    List.iter (fun (_, _, p) -> Packet.release p) fr.frags;
    fr.frags <- []

  let complete t k fr =
    fr.cancel ();
    Lru.remove t.pending k;
    t.pending_bytes <- t.pending_bytes - fr.bytes;
    let q = Packet.create ~headroom:(Packet.default_headroom + hlen) t.pool fr.total in
    let dst = Packet.cstruct q in
    List.iter
      (fun (off, len, p) ->
        Cstruct.blit (Packet.cstruct p) 0 dst off len;
        Packet.release p)
      fr.frags;
    fr.frags <- [];
    t.reassembled <- t.reassembled + 1;
    (* A header in front, as if the datagram had come whole, so that ICMP
       errors about it can quote it. *)
    let h = Packet.push q hlen in
    Ipv4_wire.set_version_ihl h ~ihl:5;
    Ipv4_wire.set_tos h 0;
    Ipv4_wire.set_len h (fr.total + hlen);
    Ipv4_wire.set_id h fr.fid;
    Ipv4_wire.set_flags_off h 0;
    Ipv4_wire.set_ttl h 64;
    Ipv4_wire.set_proto h fr.fproto;
    Ipv4_wire.set_checksum h 0;
    Ipv4_wire.set_src h fr.fsrc;
    Ipv4_wire.set_dst h t.prefix.addr;
    deliver t q ~src:fr.fsrc ~proto:fr.fproto ~h:hlen ~bcast:false

  let reassemble t p ~src ~proto ~h ~fo =
    let cs = Packet.cstruct p in
    let id = Ipv4_wire.get_id cs in
    let off = fo land 0x1fff * 8 and more = fo land Ipv4_wire.flag_mf <> 0 in
    let len = Cstruct.length cs - h in
    t.fragments_received <- t.fragments_received + 1;
    if len = 0 || (more && len land 7 <> 0) || off + len > max_payload then (
      t.bad <- t.bad + 1;
      Packet.release p)
    else
      let k = ((src : Ipv4_addr.t :> int) lsl 24) lor (proto lsl 16) lor id in
      let fr =
        match Lru.peek t.pending k with
        | Some fr -> Some fr
        | None ->
            (* When [max_datagrams] are in progress, the one started
                 longest ago is given up: a flood of first fragments never
                 locks out new datagrams. *)
            let fr =
              {
                fsrc = src;
                fproto = proto;
                fid = id;
                frags = [];
                bytes = 0;
                count = 0;
                total = -1;
                cancel = (fun () -> ());
              }
            in
            Lru.add t.pending k fr;
            fr.cancel <-
              t.clock.at
                (t.clock.now () + t.reasm.timeout)
                (fun () ->
                  match Lru.peek t.pending k with
                  | Some fr' when fr' == fr ->
                      t.reassembly_timeouts <- t.reassembly_timeouts + 1;
                      drop_fragments t k fr
                  | _ -> ());
            Some fr
      in
      match fr with
      | None ->
          t.reassembly_dropped <- t.reassembly_dropped + 1;
          Packet.release p
      | Some fr ->
          if List.exists (fun (o, l, _) -> o = off && l = len) fr.frags then Packet.release p
          else
            let overlaps = List.exists (fun (o, l, _) -> off < o + l && o < off + len) fr.frags in
            let total = if more then fr.total else off + len in
            let bad_total =
              ((not more) && fr.total >= 0 && fr.total <> total)
              || total >= 0
                 && (off + len > total || List.exists (fun (o, l, _) -> o + l > total) fr.frags)
            in
            (* Over the byte limit, the oldest other datagrams make room. *)
            let rec make_room () =
              if t.pending_bytes + len > t.reasm.max_bytes then
                match Lru.oldest t.pending with
                | Some (k', fr') when fr' != fr ->
                    t.reassembly_dropped <- t.reassembly_dropped + 1;
                    drop_fragments t k' fr';
                    make_room ()
                | _ -> ()
            in
            if not (overlaps || bad_total || fr.count >= t.reasm.max_fragments) then make_room ();
            if
              overlaps || bad_total || fr.count >= t.reasm.max_fragments
              || t.pending_bytes + len > t.reasm.max_bytes
            then (
              t.reassembly_dropped <- t.reassembly_dropped + 1;
              Packet.release p;
              drop_fragments t k fr)
            else begin
              let (_ : (unit, _) result) = Packet.pull p h in
              let rec insert = function
                | [] -> [ (off, len, p) ]
                | ((o, _, _) as x) :: rest as l ->
                    if off < o then (off, len, p) :: l else x :: insert rest
              in
              fr.frags <- insert fr.frags;
              fr.bytes <- fr.bytes + len;
              fr.count <- fr.count + 1;
              fr.total <- total;
              t.pending_bytes <- t.pending_bytes + len;
              if fr.total >= 0 && fr.bytes = fr.total then complete t k fr
            end

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
      t.bad <- t.bad + 1;
      Packet.release p)
    else
      let h = Cstruct.get_uint8 cs 0 land 0xf * 4 in
      let total = Ipv4_wire.get_len cs in
      if h < hlen || h > n || total < h || total > n || Checksum.sum_sub cs ~off:0 ~len:h <> 0xffff
      then (
        t.bad <- t.bad + 1;
        Packet.release p)
      else
        let src = Ipv4_wire.get_src cs and dst = Ipv4_wire.get_dst cs in
        let src_i = (src :> int) and dst_i = (dst :> int) in
        if bad_source t src_i then (
          t.bad <- t.bad + 1;
          t.bad_source <- t.bad_source + 1;
          Packet.release p)
        else
          let bcast = dst_i = 0xffff_ffff || dst_i = (t.bcast :> int) in
          if dst_i <> (t.prefix.addr :> int) && not bcast then (
            t.not_for_us <- t.not_for_us + 1;
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
    let evict_fragments = ref (fun _ -> ()) in
    let t =
      {
        arp;
        clock;
        pool;
        reasm = reassembly;
        prefix = address;
        gateway;
        bcast = Ipv4_addr.broadcast;
        mtu = A.mtu arp;
        pinned = Itbl.create 16;
        conns = Lru.create ~idle:connection_idle ~now:clock.now max_connections;
        listeners = Itbl.create 8;
        hops = Lru.create ~idle:connection_idle ~now:clock.now 256;
        pending =
          Lru.create ~on_evict:(fun _ fr -> !evict_fragments fr) (max 1 reassembly.max_datagrams);
        pending_bytes = 0;
        next_id = 1;
        rx_hlen = 0;
        rx_bcast = false;
        icmp_tokens = 100;
        icmp_refill = clock.now ();
        sent = 0;
        received = 0;
        bad = 0;
        not_for_us = 0;
        no_route = 0;
        unknown_protocol = 0;
        bad_source = 0;
        fragments_sent = 0;
        fragments_received = 0;
        reassembled = 0;
        reassembly_dropped = 0;
        reassembly_timeouts = 0;
        icmp_errors_sent = 0;
      }
    in
    (evict_fragments :=
       fun fr ->
         t.reassembly_dropped <- t.reassembly_dropped + 1;
         release_fragments t fr);
    set_prefix t address;
    (match
       A.passive_open arp (Arp.Ethertype Ethernet_wire.ethertype_ipv4) (fun _ ->
           { A.receive = (fun _ p -> input t p); status = (fun _ _ -> ()) })
     with
    | Ok () -> ()
    | Error e -> Fmt.invalid_arg "Ipv4.create: %a" Protocol.pp_error e);
    t

  let active_open t { dst; proto } f =
    if proto < 0 || proto > 255 then Error (`Bad_address (Printf.sprintf "protocol %d" proto))
    else
      let k = key dst proto in
      match find_conn t k with
      | Some c ->
          c.users <- c.users + 1;
          if not c.is_pinned then begin
            Lru.remove t.conns k;
            Itbl.replace t.pinned k c;
            c.is_pinned <- true
          end;
          Ok c
      | None ->
          if next_hop t dst = None then (
            t.no_route <- t.no_route + 1;
            Error (`Unreachable (Fmt.str "no route to %a" Ipv4_addr.pp dst)))
          else
            let c =
              { ip = t; peer = dst; proto; key = k; handler = nothing; users = 1; is_pinned = true }
            in
            Itbl.replace t.pinned k c;
            c.handler <- f c;
            Ok c

  let passive_open t { protocol; source } f =
    if protocol < 0 || protocol > 255 then
      Error (`Bad_address (Printf.sprintf "protocol %d" protocol))
    else
      let l = Option.value ~default:[] (Itbl.find_opt t.listeners protocol) in
      if List.exists (fun (s, _) -> s = source) l then
        Error (`In_use (Printf.sprintf "IP protocol %d" protocol))
      else (
        Itbl.replace t.listeners protocol ((source, f) :: l);
        Ok ())

  let close c =
    c.users <- c.users - 1;
    if c.users <= 0 then
      match Itbl.find_opt c.ip.pinned c.key with
      | Some c' when c' == c -> Itbl.remove c.ip.pinned c.key
      | _ -> (
          match Lru.peek c.ip.conns c.key with
          | Some c' when c' == c -> Lru.remove c.ip.conns c.key
          | _ -> ())

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
    Lru.expire t.conns;
    {
      address = t.prefix;
      gateway = t.gateway;
      mtu = t.mtu;
      sent = t.sent;
      received = t.received;
      bad = t.bad;
      not_for_us = t.not_for_us;
      no_route = t.no_route;
      unknown_protocol = t.unknown_protocol;
      connections_evicted = Lru.evicted t.conns;
      bad_source = t.bad_source;
      fragments_sent = t.fragments_sent;
      fragments_received = t.fragments_received;
      reassembled = t.reassembled;
      reassembly_dropped = t.reassembly_dropped;
      reassembly_timeouts = t.reassembly_timeouts;
      icmp_errors_sent = t.icmp_errors_sent;
      connections = Itbl.length t.pinned + Lru.length t.conns;
    }
end

module Df (I : S) = struct
  include I

  let send = I.send_df
end
