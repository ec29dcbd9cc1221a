let src = Logs.Src.create "consort.arp" ~doc:"ARP"

module Log = (val Logs.src_log src : Logs.LOG)

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

let pp_info ppf i =
  Fmt.pf ppf
    "%a: %d entries; requests %d out (%d refreshes) %d in, replies %d out %d in; %d bad, %d \
     dropped from queues, %d failed, %d conflicts"
    Ipv4_addr.pp i.ip (List.length i.entries) i.requests_sent i.refreshes i.requests_received
    i.replies_sent i.replies_received i.bad i.queue_dropped i.resolution_failed i.conflicts

type config = {
  entry_ttl : Consort.Time.t;
  retry_interval : Consort.Time.t;
  retries : int;
  queue_limit : int;
  max_entries : int;
  max_pending : int;
  max_queued : int;
  refresh : Consort.Time.t;
}

let default_config =
  {
    entry_ttl = Consort.Time.of_sec 60.;
    retry_interval = Consort.Time.of_sec 1.;
    retries = 3;
    queue_limit = 16;
    max_entries = 1024;
    max_pending = 64;
    max_queued = 256;
    refresh = Consort.Time.of_sec 5.;
  }

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ethernet

  val create :
    ?config:config -> clock:Clock.t -> pool:Consort.Pool.t -> ip:Ipv4_addr.t -> ethernet -> t

  val lookup : t -> Ipv4_addr.t -> Mac_addr.t option
  val remote : connection -> Ipv4_addr.t
  val mac : t -> Mac_addr.t
  val mtu : t -> int
end

module Make (E : Ethernet.S) = struct
  type nonrec address = address
  type nonrec address_pattern = address_pattern
  type nonrec status = status
  type nonrec control = control
  type nonrec info = info
  type ethernet = E.t

  type t = {
    eth : E.t;
    clock : Clock.t;
    pool : Consort.Pool.t;
    config : config;
    mutable my_ip : Ipv4_addr.t;
    static : Mac_addr.t Itbl.t;
    resolved : resolved Lru.t;
    pending : pending Lru.t;
    mutable queued : int; (* packets in every pending queue *)
    out : E.connection Itbl.t; (* per ethertype, for sending *)
    mutable last_defence : Consort.Time.t;
    mutable requests_sent : int;
    mutable refreshes : int;
    mutable replies_sent : int;
    mutable requests_received : int;
    mutable replies_received : int;
    mutable bad : int;
    mutable queue_dropped : int;
    mutable resolution_failed : int;
    mutable conflicts : int;
  }

  and resolved = {
    mutable mac : Mac_addr.t;
    mutable expires : Consort.Time.t;
    mutable probed : Consort.Time.t; (* last unicast refresh request; 0: none *)
  }

  and pending = {
    queue : (connection * Packet.t) Queue.t;
    mutable tries : int;
    mutable cancel : Clock.cancel;
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
          E.active_open t.eth { Ethernet.dst = Mac_addr.broadcast; ethertype = ety } (fun _ ->
              { E.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) })
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

  let flush_queue t q mac =
    match Queue.length q with
    | 0 -> ()
    | _ ->
        Queue.iter
          (fun (c, p) ->
            match eth_out t c.ety with
            | Ok ec -> ignore (E.send_to ec ~dst:mac p)
            | Error _ -> Packet.release p)
          q;
        Queue.clear q

  (* [pd], no longer in [t.pending], is given up. *)
  let give_up t ip pd =
    pd.cancel ();
    t.resolution_failed <- t.resolution_failed + 1;
    t.queued <- t.queued - Queue.length pd.queue;
    let told = ref [] in
    Queue.iter
      (fun (c, p) ->
        Packet.release p;
        t.queue_dropped <- t.queue_dropped + 1;
        if not (List.memq c !told) then told := c :: !told)
      pd.queue;
    Queue.clear pd.queue;
    Log.debug (fun m -> m "no answer for %a" Ipv4_addr.pp (Ipv4_addr.of_int ip));
    List.iter (fun c -> if c.open_ then c.handler.status c Unresolved) (List.rev !told)

  let drop_pending t ip pd =
    Lru.remove t.pending ip;
    give_up t ip pd

  let rec retry t ip pd () =
    match Lru.peek t.pending ip with
    | Some pd' when pd' == pd ->
        if pd.tries >= t.config.retries then drop_pending t ip pd
        else begin
          pd.tries <- pd.tries + 1;
          request t (Ipv4_addr.of_int ip);
          pd.cancel <- t.clock.at (t.clock.now () + t.config.retry_interval) (retry t ip pd)
        end
    | _ -> ()

  (* A new resolution evicts the least recently started one when
     [max_pending] are under way (the pending cache does, see [create]). *)
  let start_pending t ip =
    let pd = { queue = Queue.create (); tries = 1; cancel = (fun () -> ()) } in
    Lru.add t.pending ip pd;
    request t (Ipv4_addr.of_int ip);
    pd.cancel <- t.clock.at (t.clock.now () + t.config.retry_interval) (retry t ip pd);
    pd

  let known t ip = Itbl.mem t.static ip || Lru.mem t.resolved ip || Lru.mem t.pending ip

  let learn t ip mac =
    if not (Itbl.mem t.static ip) then begin
      let expires = t.clock.now () + t.config.entry_ttl in
      (match Lru.find t.resolved ip with
      | Some r ->
          r.mac <- mac;
          r.expires <- expires;
          r.probed <- 0
      | None -> Lru.add t.resolved ip { mac; expires; probed = 0 });
      match Lru.peek t.pending ip with
      | Some pd ->
          Lru.remove t.pending ip;
          pd.cancel ();
          t.queued <- t.queued - Queue.length pd.queue;
          flush_queue t pd.queue mac
      | None -> ()
    end

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
          if known t ip || (m.tpa = me && me <> Ipv4_addr.any) then learn t ip m.sha
        end;
        if m.op = Request && m.tpa = me && me <> Ipv4_addr.any && m.spa <> m.tpa then
          send_arp t ~dst:m.sha { op = Reply; sha = mac t; spa = me; tha = m.sha; tpa = m.spa });
    Packet.release p

  let create ?(config = default_config) ~clock ~pool ~ip eth =
    if
      config.max_entries < 1 || config.max_pending < 1 || config.max_queued < 1
      || config.queue_limit < 1
    then invalid_arg "Arp.create: a limit below 1";
    let evict_pending = ref (fun _ _ -> ()) in
    let t =
      {
        eth;
        clock;
        pool;
        config;
        my_ip = ip;
        static = Itbl.create 8;
        resolved = Lru.create ~now:clock.now config.max_entries;
        pending = Lru.create ~on_evict:(fun ip pd -> !evict_pending ip pd) config.max_pending;
        queued = 0;
        out = Itbl.create 4;
        last_defence = 0;
        requests_sent = 0;
        refreshes = 0;
        replies_sent = 0;
        requests_received = 0;
        replies_received = 0;
        bad = 0;
        queue_dropped = 0;
        resolution_failed = 0;
        conflicts = 0;
      }
    in
    evict_pending := give_up t;
    (match
       E.passive_open eth (Ethernet.Ethertype Ethernet_wire.ethertype_arp) (fun _ ->
           { E.receive = (fun _ p -> input t p); status = (fun _ _ -> ()) })
     with
    | Ok () -> ()
    | Error e -> Fmt.invalid_arg "Arp.create: %a" Protocol.pp_error e);
    t

  let multicast_mac ip = Mac_addr.of_int (0x01005e000000 lor (ip land 0x7fffff))

  let lookup t (ip : Ipv4_addr.t) =
    if (ip :> int) = 0xffff_ffff then Some Mac_addr.broadcast
    else if Ipv4_addr.is_multicast ip then Some (multicast_mac (ip :> int))
    else
      match Itbl.find_opt t.static (ip :> int) with
      | Some _ as m -> m
      | None -> (
          match Lru.peek t.resolved (ip :> int) with
          | Some r when r.expires > t.clock.now () -> Some r.mac
          | _ -> None)

  (* The MAC to send to [ip] now, for a packet on its way: an entry in use
     close to its expiry is refreshed by a unicast request (RFC 1122
     2.3.2.1), so that an active flow never waits for a new resolution. *)
  let resolve_for_send t ip =
    match Itbl.find_opt t.static ip with
    | Some _ as m -> m
    | None -> (
        match Lru.find t.resolved ip with
        | None -> None
        | Some r ->
            let now = t.clock.now () in
            if r.expires <= now then None
            else begin
              if r.expires - now <= t.config.refresh && now - r.probed >= t.config.retry_interval
              then begin
                r.probed <- now;
                t.refreshes <- t.refreshes + 1;
                send_arp t ~dst:r.mac
                  {
                    op = Request;
                    sha = mac t;
                    spa = t.my_ip;
                    tha = Mac_addr.zero;
                    tpa = Ipv4_addr.of_int ip;
                  }
              end;
              Some r.mac
            end)

  (* When [max_queued] packets wait in all, the resolution started
     longest ago is given up (or, if it is [pd]'s, [pd]'s oldest packet is
     dropped): the newest resolutions always have room. *)
  let enqueue t pd c p =
    let drop_oldest_of pd =
      let _, old = Queue.pop pd.queue in
      Packet.release old;
      t.queued <- t.queued - 1;
      t.queue_dropped <- t.queue_dropped + 1
    in
    if Queue.length pd.queue >= t.config.queue_limit then drop_oldest_of pd;
    let rec make_room () =
      if t.queued >= t.config.max_queued then
        match Lru.oldest t.pending with
        | Some (_, pd') when pd' == pd -> if not (Queue.is_empty pd.queue) then drop_oldest_of pd
        | Some (ip, pd') ->
            drop_pending t ip pd';
            make_room ()
        | None -> ()
    in
    make_room ();
    Queue.push (c, p) pd.queue;
    t.queued <- t.queued + 1;
    Ok ()

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
      | None -> (
          match Lru.peek t.pending ip with
          | Some pd -> enqueue t pd c p
          | None ->
              (* Absent or expired: resolve afresh. *)
              Lru.remove t.resolved ip;
              enqueue t (start_pending t ip) c p)

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
        Itbl.replace t.static k mac;
        Lru.remove t.resolved k;
        (match Lru.peek t.pending k with
        | Some pd ->
            Lru.remove t.pending k;
            pd.cancel ();
            t.queued <- t.queued - Queue.length pd.queue;
            flush_queue t pd.queue mac
        | None -> ());
        Ok ()
    | Remove ip ->
        let k = (ip :> int) in
        Itbl.remove t.static k;
        Lru.remove t.resolved k;
        (match Lru.peek t.pending k with Some pd -> drop_pending t k pd | None -> ());
        Ok ()
    | Announce ->
        announce t;
        Ok ()

  let query t =
    let now = t.clock.now () in
    let entries =
      Itbl.fold (fun ip mac acc -> (Ipv4_addr.of_int ip, Some mac) :: acc) t.static []
      |> Lru.fold
           (fun ip r acc ->
             if r.expires > now then (Ipv4_addr.of_int ip, Some r.mac) :: acc else acc)
           t.resolved
      |> Lru.fold (fun ip _ acc -> (Ipv4_addr.of_int ip, None) :: acc) t.pending
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
      queue_dropped = t.queue_dropped;
      waiting = t.queued;
      resolution_failed = t.resolution_failed;
      conflicts = t.conflicts;
    }
end
