open Consort

type host = int

type impairments = {
  loss : float;
  duplicate : float;
  reorder : float;
  jitter : Time.t;
  delay : Time.t;
  rate : int option;
  queue : int;
}

let perfect =
  {
    loss = 0.;
    duplicate = 0.;
    reorder = 0.;
    jitter = 0;
    delay = Time.of_ms 1;
    rate = None;
    queue = max_int;
  }

type counts = { sent : int; delivered : int; lost : int; duplicated : int; queue_drops : int }

type net = {
  vclock : Clock.Virtual.clock;
  clk : Clock.t;
  rng : Rng.t;
  pool : Pool.t;
  mutable imp : impairments;
  mutable hosts : (host * t) list;
  mutable observers : (Time.t -> src:host -> dst:host -> string -> unit) list;
  mutable drop : (src:host -> dst:host -> string -> bool) option;
  busy : (host * host, Time.t) Hashtbl.t;
  mutable c : counts;
}

and t = {
  net : net;
  me : host;
  mtu : int;
  conns : (host, connection) Hashtbl.t;
  mutable passive : (connection -> handler) option;
}

and connection = { ep : t; peer : host; mutable handler : handler option }
and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }
and status = Tcp_icmp.t

type address = host
type address_pattern = unit
type control = unit
type info = unit

let create_net ?(seed = 1) ?(impairments = perfect) vclock pool =
  {
    vclock;
    clk = Clock.Virtual.clock vclock;
    rng = Rng.create seed;
    pool;
    imp = impairments;
    hosts = [];
    observers = [];
    drop = None;
    busy = Hashtbl.create 8;
    c = { sent = 0; delivered = 0; lost = 0; duplicated = 0; queue_drops = 0 };
  }

let set_impairments n i = n.imp <- i
let clock n = n.clk
let pool n = n.pool
let on_frame n f = n.observers <- n.observers @ [ f ]
let set_drop n f = n.drop <- f
let counts n = n.c

let pseudo ~src ~dst ~len =
  (src lsr 16) + (src land 0xFFFF) + (dst lsr 16) + (dst land 0xFFFF) + 6 + len

let attach ?(mtu = 1480) net h =
  let t = { net; me = h; mtu; conns = Hashtbl.create 4; passive = None } in
  net.hosts <- (h, t) :: List.remove_assoc h net.hosts;
  t

let host t = t.me
let remote c = c.peer

let conn_for t peer =
  match Hashtbl.find_opt t.conns peer with
  | Some c -> c
  | None ->
      let c = { ep = t; peer; handler = None } in
      Hashtbl.replace t.conns peer c;
      c

let deliver net ~src ~dst data =
  match List.assoc_opt dst net.hosts with
  | None -> ()
  | Some ep -> (
      let c = conn_for ep src in
      let h =
        match (c.handler, ep.passive) with
        | Some h, _ -> Some h
        | None, Some make ->
            let h = make c in
            c.handler <- Some h;
            Some h
        | None, None -> None
      in
      match h with
      | None -> ()
      | Some h ->
          net.c <- { net.c with delivered = net.c.delivered + 1 };
          h.receive c (Packet.of_string ~headroom:64 net.pool data))

let inject net ~src ~dst data = deliver net ~src ~dst data
let connections t = Hashtbl.length t.conns

let icmp net ~at ~about e =
  match List.assoc_opt at net.hosts with
  | None -> ()
  | Some ep -> (
      match Hashtbl.find_opt ep.conns about with
      | Some ({ handler = Some h; _ } as c) -> h.status c e
      | _ -> ())

let send c pkt =
  let t = c.ep in
  let net = t.net in
  let len = Packet.length pkt in
  if len > t.mtu then begin
    Packet.release pkt;
    Error (`Too_big len)
  end
  else begin
    let data = Packet.to_string pkt in
    Packet.release pkt;
    let now = net.clk.now () in
    let src = t.me and dst = c.peer in
    net.c <- { net.c with sent = net.c.sent + 1 };
    List.iter (fun f -> f now ~src ~dst data) net.observers;
    let imp = net.imp in
    let dropped = match net.drop with Some f -> f ~src ~dst data | None -> false in
    if dropped || Rng.chance net.rng imp.loss then net.c <- { net.c with lost = net.c.lost + 1 }
    else begin
      let depart =
        match imp.rate with
        | None -> Some now
        | Some rate ->
            let busy = max now (Option.value ~default:0 (Hashtbl.find_opt net.busy (src, dst))) in
            let backlog = (busy - now) * rate / 1_000_000_000 in
            if backlog + len > imp.queue then None
            else begin
              let d = busy + (len * 1_000_000_000 / rate) in
              Hashtbl.replace net.busy (src, dst) d;
              Some d
            end
      in
      match depart with
      | None -> net.c <- { net.c with queue_drops = net.c.queue_drops + 1 }
      | Some d ->
          let arrival () =
            let extra =
              if imp.jitter > 0 && Rng.chance net.rng imp.reorder then Rng.int net.rng imp.jitter
              else 0
            in
            d + imp.delay + extra
          in
          ignore (net.clk.at (arrival ()) (fun () -> deliver net ~src ~dst data) : Clock.cancel);
          if Rng.chance net.rng imp.duplicate then begin
            net.c <- { net.c with duplicated = net.c.duplicated + 1 };
            ignore (net.clk.at (arrival ()) (fun () -> deliver net ~src ~dst data) : Clock.cancel)
          end
    end;
    Ok ()
  end

let active_open t peer make =
  let c = conn_for t peer in
  c.handler <- Some (make c);
  Ok c

let passive_open t () make =
  t.passive <- Some make;
  Ok ()

let close c =
  match Hashtbl.find_opt c.ep.conns c.peer with
  | Some c' when c' == c -> Hashtbl.remove c.ep.conns c.peer
  | _ -> ()

let abort = close
let max_packet c = c.ep.mtu
let headroom _ = 0
let control _ () = Ok ()
let query _ = ()
