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

module Int_key = struct
  type t = int

  let equal = Int.equal
  let hash (k : int) = Hashtbl.hash k
end

module String_key = struct
  type t = string

  let equal = String.equal
  let hash (s : string) = Hashtbl.hash s
end

module type KEY = sig
  include Hashtbl.HashedType

  type addr

  val make : addr -> int -> t
  val equal_addr : addr -> addr -> bool
end

module Conns (K : KEY) = struct
  module H = Hashtbl.Make (K)
  module L = Lru.Make (K)

  type ('ip, 'h) conn = {
    ip : 'ip;
    peer : K.addr;
    proto : int;
    key : K.t;
    mutable handler : 'h;
    mutable users : int;
    mutable is_pinned : bool;
  }

  type ('ip, 'h) t = {
    pinned : ('ip, 'h) conn H.t; (* opened actively, until closed *)
    made : ('ip, 'h) conn L.t; (* made by a passive open *)
    listeners : (K.addr option * (('ip, 'h) conn -> 'h)) list Itbl.t;
    protocol : string;
    in_use : string;
  }

  let create ~protocol ~in_use ~idle ~now max =
    {
      pinned = H.create 16;
      made = L.create ~idle ~now max;
      listeners = Itbl.create 8;
      protocol;
      in_use;
    }

  let key = K.make
  let find t k = match H.find_opt t.pinned k with Some _ as c -> c | None -> L.find t.made k

  let find_listener t proto src =
    match Itbl.find_opt t.listeners proto with
    | None -> None
    | Some l -> (
        match
          List.find_opt
            (fun (s, _) -> match s with Some a -> K.equal_addr a src | None -> false)
            l
        with
        | Some (_, f) -> Some f
        | None -> (
            match List.find_opt (fun (s, _) -> s = None) l with
            | Some (_, f) -> Some f
            | None -> None))

  let accept t ~ip ~nothing ~peer ~proto =
    let k = K.make peer proto in
    match find t k with
    | Some _ as c -> c
    | None -> (
        match find_listener t proto peer with
        | None -> None
        | Some f ->
            let c = { ip; peer; proto; key = k; handler = nothing; users = 1; is_pinned = false } in
            L.add t.made k c;
            c.handler <- f c;
            Some c)

  let active_open t ~ip ~nothing ~route peer proto f =
    if proto < 0 || proto > 255 then Error (`Bad_address (Printf.sprintf "%s %d" t.protocol proto))
    else
      let k = K.make peer proto in
      match find t k with
      | Some c ->
          c.users <- c.users + 1;
          if not c.is_pinned then begin
            L.remove t.made k;
            H.replace t.pinned k c;
            c.is_pinned <- true
          end;
          Ok c
      | None -> (
          match route peer with
          | Error _ as e -> e
          | Ok _ ->
              let c =
                { ip; peer; proto; key = k; handler = nothing; users = 1; is_pinned = true }
              in
              H.replace t.pinned k c;
              c.handler <- f c;
              Ok c)

  let passive_open t ~protocol ~source f =
    if protocol < 0 || protocol > 255 then
      Error (`Bad_address (Printf.sprintf "%s %d" t.protocol protocol))
    else
      let l = Option.value ~default:[] (Itbl.find_opt t.listeners protocol) in
      if List.exists (fun (s, _) -> Option.equal K.equal_addr s source) l then
        Error (`In_use (Printf.sprintf "%s %d" t.in_use protocol))
      else (
        Itbl.replace t.listeners protocol ((source, f) :: l);
        Ok ())

  let close t c =
    c.users <- c.users - 1;
    if c.users <= 0 then
      match H.find_opt t.pinned c.key with
      | Some c' when c' == c -> H.remove t.pinned c.key
      | _ -> (
          match L.peek t.made c.key with Some c' when c' == c -> L.remove t.made c.key | _ -> ())

  let length t = H.length t.pinned + L.length t.made
  let evicted t = L.evicted t.made
  let expire t = L.expire t.made
  let counts t = (length t, evicted t)
end

module Reassembly (K : Hashtbl.HashedType) = struct
  module L = Lru.Make (K)

  type 'm datagram = {
    mutable frags : (int * int * Packet.t) list; (* offset, length, payload; sorted *)
    mutable bytes : int;
    mutable count : int;
    mutable total : int; (* -1 until the last fragment arrives *)
    mutable meta : 'm option; (* from the first fragment (offset 0) *)
    mutable cancel : Clock.cancel;
  }

  type 'm t = {
    clock : Clock.t;
    pool : Consort.Pool.t;
    limits : reassembly;
    headroom : int;
    max_payload : int;
    pending : 'm datagram L.t; (* the oldest given up for a new datagram *)
    mutable bytes : int;
    mutable reassembled : int;
    mutable dropped : int;
    mutable timeouts : int;
  }

  type 'm verdict = Bad | Held | Complete of Packet.t * 'm

  let create ~clock ~pool ~headroom ~max_payload limits =
    {
      clock;
      pool;
      limits;
      headroom;
      max_payload;
      pending = L.create (max 1 limits.max_datagrams);
      bytes = 0;
      reassembled = 0;
      dropped = 0;
      timeouts = 0;
    }

  (* [d], no longer in [t.pending], is given up. *)
  let release t d =
    d.cancel ();
    t.bytes <- t.bytes - d.bytes;
    List.iter (fun (_, _, p) -> Packet.release p) d.frags;
    d.frags <- []

  let drop t k d =
    L.remove t.pending k;
    release t d

  (* When [max_datagrams] are in progress, the one started longest ago is given up: a flood of first
     fragments never locks out new datagrams. *)
  let start t k =
    (if L.length t.pending >= L.capacity t.pending then
       match L.oldest t.pending with
       | Some (k', d') ->
           L.remove t.pending k';
           t.dropped <- t.dropped + 1;
           release t d'
       | None -> ());
    let d =
      { frags = []; bytes = 0; count = 0; total = -1; meta = None; cancel = (fun () -> ()) }
    in
    L.add t.pending k d;
    d.cancel <-
      t.clock.at
        (t.clock.now () + t.limits.timeout)
        (fun () ->
          match L.peek t.pending k with
          | Some d' when d' == d ->
              t.timeouts <- t.timeouts + 1;
              drop t k d
          | _ -> ());
    d

  let complete t k d meta =
    d.cancel ();
    L.remove t.pending k;
    t.bytes <- t.bytes - d.bytes;
    let q = Packet.create ~headroom:t.headroom t.pool d.total in
    let dst = Packet.cstruct q in
    List.iter
      (fun (off, len, p) ->
        Cstruct.blit (Packet.cstruct p) 0 dst off len;
        Packet.release p)
      d.frags;
    d.frags <- [];
    t.reassembled <- t.reassembled + 1;
    Complete (q, meta)

  let add t k ~off ~more ~header ~meta p =
    let len = Packet.length p - header in
    if len = 0 || (more && len land 7 <> 0) || off + len > t.max_payload then (
      Packet.release p;
      Bad)
    else
      let d = match L.peek t.pending k with Some d -> d | None -> start t k in
      if List.exists (fun (o, l, _) -> o = off && l = len) d.frags then (
        Packet.release p;
        Held)
      else
        let overlaps = List.exists (fun (o, l, _) -> off < o + l && o < off + len) d.frags in
        let total = if more then d.total else off + len in
        let bad_total =
          ((not more) && d.total >= 0 && d.total <> total)
          || total >= 0
             && (off + len > total || List.exists (fun (o, l, _) -> o + l > total) d.frags)
        in
        let refused = overlaps || bad_total || d.count >= t.limits.max_fragments in
        (* Over the byte limit, the oldest other datagrams make room. *)
        let rec make_room () =
          if t.bytes + len > t.limits.max_bytes then
            match L.oldest t.pending with
            | Some (k', d') when d' != d ->
                t.dropped <- t.dropped + 1;
                drop t k' d';
                make_room ()
            | _ -> ()
        in
        if not refused then make_room ();
        if refused || t.bytes + len > t.limits.max_bytes then (
          t.dropped <- t.dropped + 1;
          Packet.release p;
          drop t k d;
          Held)
        else begin
          let (_ : (unit, _) result) = Packet.pull p header in
          let rec insert = function
            | [] -> [ (off, len, p) ]
            | ((o, _, _) as x) :: rest as l ->
                if off < o then (off, len, p) :: l else x :: insert rest
          in
          d.frags <- insert d.frags;
          d.bytes <- d.bytes + len;
          d.count <- d.count + 1;
          d.total <- total;
          if off = 0 then d.meta <- Some meta;
          t.bytes <- t.bytes + len;
          match d.meta with
          | Some meta when d.total >= 0 && d.bytes = d.total -> complete t k d meta
          | _ -> Held
        end

  let reassembled t = t.reassembled
  let dropped t = t.dropped
  let timeouts t = t.timeouts
  let counts t = (t.reassembled, t.dropped, t.timeouts)
end

type neighbours = {
  ttl : Consort.Time.t;
  refresh : Consort.Time.t;
  retry_interval : Consort.Time.t;
  retries : int;
  queue_limit : int;
  max_queued : int;
  max_entries : int;
  max_pending : int;
}

let default_neighbours =
  {
    ttl = Consort.Time.of_sec 60.;
    refresh = Consort.Time.of_sec 5.;
    retry_interval = Consort.Time.of_sec 1.;
    retries = 3;
    queue_limit = 16;
    max_queued = 256;
    max_entries = 1024;
    max_pending = 64;
  }

module Neighbours (K : Hashtbl.HashedType) = struct
  module H = Hashtbl.Make (K)
  module L = Lru.Make (K)

  type entry = {
    mutable mac : Mac_addr.t;
    mutable expires : Consort.Time.t;
    mutable probed : Consort.Time.t; (* last unicast refresh; 0: none *)
  }

  type 'q pending = { queue : 'q Queue.t; mutable tries : int; mutable cancel : Clock.cancel }

  type 'q t = {
    clock : Clock.t;
    config : neighbours;
    packet : 'q -> Packet.t;
    gave_up : K.t -> 'q list -> unit;
    static : Mac_addr.t H.t;
    resolved : entry L.t;
    pending : 'q pending L.t;
    mutable queued : int; (* in every pending queue *)
    mutable queue_dropped : int;
    mutable resolution_failed : int;
  }

  let create ~clock ~packet ~gave_up config =
    {
      clock;
      config;
      packet;
      gave_up;
      static = H.create 8;
      resolved = L.create ~now:clock.now config.max_entries;
      pending = L.create config.max_pending;
      queued = 0;
      queue_dropped = 0;
      resolution_failed = 0;
    }

  (* [pd], no longer in [t.pending], is given up. *)
  let give_up t k pd =
    pd.cancel ();
    t.resolution_failed <- t.resolution_failed + 1;
    t.queued <- t.queued - Queue.length pd.queue;
    let waiting = List.of_seq (Queue.to_seq pd.queue) in
    List.iter
      (fun q ->
        Packet.release (t.packet q);
        t.queue_dropped <- t.queue_dropped + 1)
      waiting;
    Queue.clear pd.queue;
    t.gave_up k waiting

  let drop_pending t k pd =
    L.remove t.pending k;
    give_up t k pd

  let rec retry t k pd ~solicit () =
    match L.peek t.pending k with
    | Some pd' when pd' == pd ->
        if pd.tries >= t.config.retries then drop_pending t k pd
        else begin
          pd.tries <- pd.tries + 1;
          solicit k;
          pd.cancel <- t.clock.at (t.clock.now () + t.config.retry_interval) (retry t k pd ~solicit)
        end
    | _ -> ()

  (* A new resolution gives up the least recently started one when [max_pending] are under way. *)
  let start t k ~solicit =
    (if L.length t.pending >= L.capacity t.pending then
       match L.oldest t.pending with Some (k', pd') -> drop_pending t k' pd' | None -> ());
    let pd = { queue = Queue.create (); tries = 1; cancel = (fun () -> ()) } in
    L.add t.pending k pd;
    solicit k;
    pd.cancel <- t.clock.at (t.clock.now () + t.config.retry_interval) (retry t k pd ~solicit);
    pd

  (* When [max_queued] packets wait in all, the resolution started longest ago is given up (or, if
     it is [pd]'s, [pd]'s oldest packet is dropped): the newest resolutions always have room. *)
  let enqueue t pd q =
    let drop_oldest_of pd =
      Packet.release (t.packet (Queue.pop pd.queue));
      t.queued <- t.queued - 1;
      t.queue_dropped <- t.queue_dropped + 1
    in
    if Queue.length pd.queue >= t.config.queue_limit then drop_oldest_of pd;
    let rec make_room () =
      if t.queued >= t.config.max_queued then
        match L.oldest t.pending with
        | Some (_, pd') when pd' == pd -> if not (Queue.is_empty pd.queue) then drop_oldest_of pd
        | Some (k, pd') ->
            drop_pending t k pd';
            make_room ()
        | None -> ()
    in
    make_room ();
    Queue.push q pd.queue;
    t.queued <- t.queued + 1

  let wait t k q ~solicit =
    match L.peek t.pending k with
    | Some pd -> enqueue t pd q
    | None ->
        (* Absent or expired: resolve afresh. *)
        L.remove t.resolved k;
        enqueue t (start t k ~solicit) q

  let flush_pending t k mac ~transmit =
    match L.peek t.pending k with
    | Some pd ->
        L.remove t.pending k;
        pd.cancel ();
        t.queued <- t.queued - Queue.length pd.queue;
        Queue.iter (transmit mac) pd.queue;
        Queue.clear pd.queue
    | None -> ()

  let learn t k mac ~create ~transmit =
    if not (H.mem t.static k) then begin
      let expires = t.clock.now () + t.config.ttl in
      (match L.find t.resolved k with
      | Some r ->
          r.mac <- mac;
          r.expires <- expires;
          r.probed <- 0
      | None -> if create || L.mem t.pending k then L.add t.resolved k { mac; expires; probed = 0 });
      flush_pending t k mac ~transmit
    end

  let lookup t k =
    match H.find_opt t.static k with
    | Some _ as m -> m
    | None -> (
        match L.peek t.resolved k with
        | Some r when r.expires > t.clock.now () -> Some r.mac
        | _ -> None)

  (* The MAC to send to [k] now, for a packet on its way: an entry in use close to its expiry is
     refreshed by a unicast request (RFC 1122 2.3.2.1, RFC 4861 7.3.3), so that an active flow never
     waits for a new resolution. *)
  let resolve t k ~refresh =
    match H.find_opt t.static k with
    | Some _ as m -> m
    | None -> (
        match L.find t.resolved k with
        | None -> None
        | Some r ->
            let now = t.clock.now () in
            if r.expires <= now then None
            else begin
              if r.expires - now <= t.config.refresh && now - r.probed >= t.config.retry_interval
              then begin
                r.probed <- now;
                refresh k r.mac
              end;
              Some r.mac
            end)

  let known t k = H.mem t.static k || L.mem t.resolved k || L.mem t.pending k
  let add_static t k mac = H.replace t.static k mac
  let forget_resolved t k = L.remove t.resolved k

  let remove t k =
    H.remove t.static k;
    L.remove t.resolved k;
    match L.peek t.pending k with Some pd -> drop_pending t k pd | None -> ()

  let entries t =
    let now = t.clock.now () in
    H.fold (fun k mac acc -> (k, Some mac) :: acc) t.static []
    |> L.fold (fun k r acc -> if r.expires > now then (k, Some r.mac) :: acc else acc) t.resolved
    |> L.fold (fun k _ acc -> (k, None) :: acc) t.pending

  let queued t = t.queued
  let queue_dropped t = t.queue_dropped
  let resolution_failed t = t.resolution_failed
end

type counters = {
  mutable sent : int;
  mutable received : int;
  mutable bad : int;
  mutable not_for_us : int;
  mutable no_route : int;
  mutable unknown_protocol : int;
  mutable fragments_sent : int;
  mutable fragments_received : int;
  mutable icmp_errors_sent : int;
}

let counters () =
  {
    sent = 0;
    received = 0;
    bad = 0;
    not_for_us = 0;
    no_route = 0;
    unknown_protocol = 0;
    fragments_sent = 0;
    fragments_received = 0;
    icmp_errors_sent = 0;
  }

type 'v info = {
  mtu : int;
  sent : int;
  received : int;
  bad : int;
  not_for_us : int;
  no_route : int;
  unknown_protocol : int;
  fragments_sent : int;
  fragments_received : int;
  reassembled : int;
  reassembly_dropped : int;
  reassembly_timeouts : int;
  icmp_errors_sent : int;
  connections : int;
  connections_evicted : int;
  version : 'v;
}

let info (c : counters) ~mtu ~reassembly:(reassembled, reassembly_dropped, reassembly_timeouts)
    ~connections:(connections, connections_evicted) version =
  {
    mtu;
    sent = c.sent;
    received = c.received;
    bad = c.bad;
    not_for_us = c.not_for_us;
    no_route = c.no_route;
    unknown_protocol = c.unknown_protocol;
    fragments_sent = c.fragments_sent;
    fragments_received = c.fragments_received;
    reassembled;
    reassembly_dropped;
    reassembly_timeouts;
    icmp_errors_sent = c.icmp_errors_sent;
    connections;
    connections_evicted;
    version;
  }

let pp_fragments ppf (i : _ info) =
  Fmt.pf ppf "fragments %d out %d in, %d reassembled, %d given up, %d timed out" i.fragments_sent
    i.fragments_received i.reassembled i.reassembly_dropped i.reassembly_timeouts

let pp_connections ppf (i : _ info) =
  Fmt.pf ppf "%d connections (%d evicted)" i.connections i.connections_evicted

let route next_hop (c : counters) pp dst =
  match next_hop dst with
  | Some nh -> Ok nh
  | None ->
      c.no_route <- c.no_route + 1;
      Error (`Unreachable (Fmt.str "no route to %a" pp dst))

let send_fragments ~pool ~headroom ~chunk p send =
  let payload = Packet.cstruct p in
  let len = Cstruct.length payload in
  let rec go off result =
    if off >= len then result
    else
      let n = min chunk (len - off) in
      let q = Packet.create ~headroom pool n in
      Cstruct.blit payload off (Packet.cstruct q) 0 n;
      let r = send q ~off ~more:(off + n < len) in
      go (off + n) (match result with Ok () -> r | e -> e)
  in
  let r = go 0 (Ok ()) in
  Packet.release p;
  r

(* At most [rate] a second. *)
type rate = { per_second : int; mutable tokens : int; mutable refill : Consort.Time.t }

let rate ~now per_second = { per_second; tokens = per_second; refill = now }

let allowed r ~now =
  if now - r.refill >= 1_000_000_000 then (
    r.refill <- now;
    r.tokens <- r.per_second);
  if r.tokens > 0 then (
    r.tokens <- r.tokens - 1;
    true)
  else false
