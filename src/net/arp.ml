let src = Logs.Src.create "consort.arp" ~doc:"ARP"

module Log = (val Logs.src_log src : Logs.LOG)

(* The types of [Protocol.S], included again in [Make]. *)
module Types = struct
  type address = { ip : Ipv4_addr.t; ethertype : int }
  type address_pattern = Ethertype of int
  type status = Unresolved

  type control =
    | Set_ip of Ipv4_addr.t
    | Add_static of Ipv4_addr.t * Mac_addr.t
    | Remove of Ipv4_addr.t
    | Announce

  type info = {
    ip : Ipv4_addr.t;
    entries : (Ipv4_addr.t * Mac_addr.t option) list;
    requests_sent : int;
    refreshes : int;
    replies_sent : int;
    requests_received : int;
    replies_received : int;
    bad : int;
    queue_dropped : int;
    waiting : int;
    resolution_failed : int;
    conflicts : int;
  }
end

include Types

let pp_info ppf i =
  Fmt.pf ppf
    "%a: %d entries; requests %d out (%d refreshes) %d in, replies %d out %d in; %d bad, %d \
     dropped from queues, %d failed, %d conflicts"
    Ipv4_addr.pp i.ip (List.length i.entries) i.requests_sent i.refreshes i.requests_received
    i.replies_sent i.replies_received i.bad i.queue_dropped i.resolution_failed i.conflicts

type config = Ip_common.neighbours

let default_config = Ip_common.default_neighbours

module type S = sig
  include Protocol.S_WITH with module T := Types

  type ethernet

  val create :
    ?config:config -> clock:Clock.t -> pool:Consort.Pool.t -> ip:Ipv4_addr.t -> ethernet -> t

  val lookup : t -> Ipv4_addr.t -> Mac_addr.t option
  val remote : connection -> Ipv4_addr.t
  val mac : t -> Mac_addr.t
  val mtu : t -> int
end

module Neighbours = Ip_common.Neighbours (Ip_common.Int_key)

module Make (E : Ethernet.S) = struct
  module Lower = Protocol.Lower (E)
  include Types

  type ethernet = E.t

  type t = {
    eth : E.t;
    clock : Clock.t;
    pool : Consort.Pool.t;
    config : config;
    mutable my_ip : Ipv4_addr.t;
    cache : (connection * Packet.t) Neighbours.t;
    out : E.connection Itbl.t; (* per ethertype, for sending *)
    mutable last_defence : Consort.Time.t;
    mutable requests_sent : int;
    mutable refreshes : int;
    mutable replies_sent : int;
    mutable requests_received : int;
    mutable replies_received : int;
    mutable bad : int;
    mutable conflicts : int;
  }

  and connection = {
    arp : t;
    peer : Ipv4_addr.t;
    ety : int;
    mutable handler : handler;
    mutable open_ : bool;
  }

  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }
  let mac t = E.mac t.eth
  let mtu t = E.mtu t.eth
  let remote c = c.peer

  let eth_out t ety =
    match Itbl.find t.out ety with
    | c -> Ok c
    | exception Not_found -> (
        match
          E.active_open t.eth { Ethernet.dst = Mac_addr.broadcast; ethertype = ety } Lower.discard
        with
        | Ok c ->
            Itbl.replace t.out ety c;
            Ok c
        | Error _ as e -> e)

  let send_arp t ~dst (m : Arp_packet.t) =
    match eth_out t Ethernet_wire.ethertype_arp with
    | Error _ -> ()
    | Ok c ->
        let p = Packet.create t.pool Arp_wire.sizeof_arp in
        Arp_packet.encode m (Packet.cstruct p);
        (match m.op with
        | Request -> t.requests_sent <- t.requests_sent + 1
        | Reply -> t.replies_sent <- t.replies_sent + 1);
        ignore (E.send_to c ~dst p)

  let request t ip =
    send_arp t ~dst:Mac_addr.broadcast
      { op = Request; sha = mac t; spa = t.my_ip; tha = Mac_addr.zero; tpa = ip }

  let announce t =
    if t.my_ip <> Ipv4_addr.any then
      send_arp t ~dst:Mac_addr.broadcast
        { op = Request; sha = mac t; spa = t.my_ip; tha = Mac_addr.zero; tpa = t.my_ip }

  let transmit t mac (c, p) =
    match eth_out t c.ety with
    | Ok ec -> ignore (E.send_to ec ~dst:mac p)
    | Error _ -> Packet.release p

  (* The connections whose packets waited for [ip] are told, once each. *)
  let gave_up ip waiting =
    Log.debug (fun m -> m "no answer for %a" Ipv4_addr.pp (Ipv4_addr.of_int ip));
    let told =
      List.fold_left (fun told (c, _) -> if List.memq c told then told else c :: told) [] waiting
    in
    List.iter (fun c -> if c.open_ then c.handler.status c Unresolved) (List.rev told)

  let learn t ip mac = Neighbours.learn t.cache ip mac ~create:true ~transmit:(transmit t)

  let input t p =
    (match Arp_packet.decode (Packet.cstruct p) with
    | Error _ -> t.bad <- t.bad + 1
    | Ok m ->
        (match m.op with
        | Request -> t.requests_received <- t.requests_received + 1
        | Reply -> t.replies_received <- t.replies_received + 1);
        let me = t.my_ip in
        if m.spa = me && me <> Ipv4_addr.any then begin
          if m.sha <> mac t then begin
            t.conflicts <- t.conflicts + 1;
            let now = t.clock.now () in
            if now - t.last_defence >= t.config.retry_interval || t.last_defence = 0 then begin
              t.last_defence <- now;
              Log.warn (fun f -> f "%a claims our address %a" Mac_addr.pp m.sha Ipv4_addr.pp me);
              send_arp t ~dst:Mac_addr.broadcast
                { op = Reply; sha = mac t; spa = me; tha = Mac_addr.broadcast; tpa = me }
            end
          end
        end
        else if m.spa <> Ipv4_addr.any && not (Mac_addr.is_group m.sha) then begin
          let ip = (m.spa :> int) in
          if Neighbours.known t.cache ip || (m.tpa = me && me <> Ipv4_addr.any) then
            learn t ip m.sha
        end;
        if m.op = Request && m.tpa = me && me <> Ipv4_addr.any && m.spa <> m.tpa then
          send_arp t ~dst:m.sha { op = Reply; sha = mac t; spa = me; tha = m.sha; tpa = m.spa });
    Packet.release p

  let create ?(config = default_config) ~clock ~pool ~ip eth =
    if
      config.max_entries < 1 || config.max_pending < 1 || config.max_queued < 1
      || config.queue_limit < 1
    then invalid_arg "Arp.create: a limit below 1";
    let t =
      {
        eth;
        clock;
        pool;
        config;
        my_ip = ip;
        cache = Neighbours.create ~clock ~packet:snd ~gave_up config;
        out = Itbl.create 4;
        last_defence = 0;
        requests_sent = 0;
        refreshes = 0;
        replies_sent = 0;
        requests_received = 0;
        replies_received = 0;
        bad = 0;
        conflicts = 0;
      }
    in
    Lower.listen "Arp.create" eth (Ethernet.Ethertype Ethernet_wire.ethertype_arp) (input t);
    t

  let multicast_mac ip = Mac_addr.of_int (0x01005e000000 lor (ip land 0x7fffff))

  let lookup t (ip : Ipv4_addr.t) =
    if (ip :> int) = 0xffff_ffff then Some Mac_addr.broadcast
    else if Ipv4_addr.is_multicast ip then Some (multicast_mac (ip :> int))
    else Neighbours.lookup t.cache (ip :> int)

  (* The MAC to send to [ip] now, for a packet on its way: an entry in use
     close to its expiry is refreshed by a unicast request (RFC 1122
     2.3.2.1), so that an active flow never waits for a new resolution. *)
  let resolve_for_send t ip =
    Neighbours.resolve t.cache ip ~refresh:(fun ip dst ->
        t.refreshes <- t.refreshes + 1;
        send_arp t ~dst
          {
            op = Request;
            sha = mac t;
            spa = t.my_ip;
            tha = Mac_addr.zero;
            tpa = Ipv4_addr.of_int ip;
          })

  let send c p =
    let t = c.arp in
    if not c.open_ then (
      Packet.release p;
      Error `Closed)
    else if (c.peer :> int) = 0 then (
      Packet.release p;
      Error (`Bad_address "ARP: a receive-only connection"))
    else
      let ip = (c.peer :> int) in
      let direct =
        if ip = 0xffff_ffff || Ipv4_addr.is_multicast c.peer then lookup t c.peer
        else resolve_for_send t ip
      in
      match direct with
      | Some mac -> (
          match eth_out t c.ety with
          | Ok ec -> E.send_to ec ~dst:mac p
          | Error _ as e ->
              Packet.release p;
              e)
      | None ->
          Neighbours.wait t.cache ip (c, p) ~solicit:(fun ip -> request t (Ipv4_addr.of_int ip));
          Ok ()

  let active_open t { ip; ethertype } f =
    match eth_out t ethertype with
    | Error _ as e -> e
    | Ok _ ->
        let c = { arp = t; peer = ip; ety = ethertype; handler = nothing; open_ = true } in
        c.handler <- f c;
        Ok c

  let passive_open t (Ethertype ety) f =
    let rx = ref None in
    let conn () =
      match !rx with
      | Some c -> c
      | None ->
          let c = { arp = t; peer = Ipv4_addr.any; ety; handler = nothing; open_ = true } in
          rx := Some c;
          c.handler <- f c;
          c
    in
    E.passive_open t.eth (Ethernet.Ethertype ety) (fun _ ->
        {
          E.receive =
            (fun _ p ->
              let c = conn () in
              if c.open_ then c.handler.receive c p else Packet.release p);
          status = (fun _ _ -> ());
        })

  let close c = c.open_ <- false
  let abort = close
  let max_packet c = mtu c.arp
  let headroom _ = Ethernet_wire.sizeof_ethernet

  let control t = function
    | Set_ip ip ->
        t.my_ip <- ip;
        announce t;
        Ok ()
    | Add_static (ip, mac) ->
        let k = (ip :> int) in
        Neighbours.add_static t.cache k mac;
        Neighbours.forget_resolved t.cache k;
        Neighbours.flush_pending t.cache k mac ~transmit:(transmit t);
        Ok ()
    | Remove ip ->
        Neighbours.remove t.cache (ip :> int);
        Ok ()
    | Announce ->
        announce t;
        Ok ()

  let query t =
    let entries =
      Neighbours.entries t.cache
      |> List.map (fun (ip, mac) -> (Ipv4_addr.of_int ip, mac))
      |> List.sort compare
    in
    {
      ip = t.my_ip;
      entries;
      requests_sent = t.requests_sent;
      refreshes = t.refreshes;
      replies_sent = t.replies_sent;
      requests_received = t.requests_received;
      replies_received = t.replies_received;
      bad = t.bad;
      queue_dropped = Neighbours.queue_dropped t.cache;
      waiting = Neighbours.queued t.cache;
      resolution_failed = Neighbours.resolution_failed t.cache;
      conflicts = t.conflicts;
    }
end
