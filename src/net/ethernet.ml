let src = Logs.Src.create "consort.ethernet" ~doc:"Ethernet II"

module Log = (val Logs.src_log src : Logs.LOG)

(* The types of [Protocol.S], included again in [Make]. *)
module Types = struct
  type address = { dst : Mac_addr.t; ethertype : int }
  type address_pattern = Ethertype of int
  type status = |
  type control = Promiscuous of bool

  type info = {
    mac : Mac_addr.t;
    mtu : int;
    frames_in : int;
    frames_out : int;
    runts : int;
    not_for_us : int;
    unknown_type : int;
    bad_source : int;
    peers : int;
    peers_evicted : int;
  }
end

include Types

let pp_info ppf i =
  Fmt.pf ppf
    "%a mtu %d: in %d out %d; dropped: %d runts, %d not for us, %d unknown type, %d from a group \
     address; %d peers (%d evicted)"
    Mac_addr.pp i.mac i.mtu i.frames_in i.frames_out i.runts i.not_for_us i.unknown_type
    i.bad_source i.peers i.peers_evicted

module type S = sig
  include Protocol.S_WITH with module T := Types

  type host = Mac_addr.t
  type device

  val create : ?max_peers:int -> ?peer_idle:Consort.Time.t -> ?clock:Clock.t -> device -> t
  val mac : t -> Mac_addr.t
  val mtu : t -> int
  val send_to : connection -> dst:Mac_addr.t -> Packet.t -> (unit, Protocol.error) result
  val remote : connection -> host
end

module Make (D : Device.S) = struct
  include Types

  type device = D.t
  type host = Mac_addr.t

  type t = {
    dev : D.t;
    mac : Mac_addr.t;
    mtu : int;
    max_peers : int;
    peer_idle : Consort.Time.t option;
    now : unit -> Consort.Time.t;
    types : ethertype Itbl.t;
    mutable promiscuous : bool;
    mutable frames_in : int;
    mutable frames_out : int;
    mutable runts : int;
    mutable not_for_us : int;
    mutable unknown_type : int;
    mutable bad_source : int;
  }

  (* Peers are in [pinned] while some user has opened them actively, in
     the [peers] cache while only a passive open made them. *)
  and ethertype = {
    pinned : connection Itbl.t;
    peers : connection Lru.t;
    mutable listener : (connection -> handler) option;
  }

  and connection = {
    eth : t;
    ty : int;
    peer : Mac_addr.t;
    mutable handler : handler;
    mutable open_ : bool;
    mutable users : int;
    mutable is_pinned : bool;
  }

  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing =
    {
      receive = (fun _ p -> Packet.release p);
      status = (fun _ (s : status) -> match s with _ -> .);
    }

  let table t ty =
    match Itbl.find t.types ty with
    | e -> e
    | exception Not_found ->
        let e =
          {
            pinned = Itbl.create 8;
            peers = Lru.create ?idle:t.peer_idle ~now:t.now t.max_peers;
            listener = None;
          }
        in
        Itbl.replace t.types ty e;
        e

  let find_peer e k =
    match Itbl.find_opt e.pinned k with Some _ as c -> c | None -> Lru.find e.peers k

  let input t p =
    let cs = Packet.cstruct p in
    if Cstruct.length cs < Ethernet_wire.sizeof_ethernet then (
      t.runts <- t.runts + 1;
      Packet.release p)
    else
      let dst = Ethernet_wire.get_dst cs in
      if (dst :> int) <> (t.mac :> int) && (not (Mac_addr.is_group dst)) && not t.promiscuous then (
        t.not_for_us <- t.not_for_us + 1;
        Packet.release p)
      else
        let ty = Ethernet_wire.get_ethertype cs in
        match Itbl.find t.types ty with
        | exception Not_found ->
            t.unknown_type <- t.unknown_type + 1;
            Packet.release p
        | _ when Mac_addr.is_group (Ethernet_wire.get_src cs) ->
            t.bad_source <- t.bad_source + 1;
            Packet.release p
        | e -> (
            let src = Ethernet_wire.get_src cs in
            let (_ : (unit, _) result) = Packet.pull p Ethernet_wire.sizeof_ethernet in
            match find_peer e (src :> int) with
            | Some c ->
                t.frames_in <- t.frames_in + 1;
                c.handler.receive c p
            | None -> (
                match e.listener with
                | None ->
                    t.unknown_type <- t.unknown_type + 1;
                    Packet.release p
                | Some f ->
                    let c =
                      {
                        eth = t;
                        ty;
                        peer = src;
                        handler = nothing;
                        open_ = true;
                        users = 1;
                        is_pinned = false;
                      }
                    in
                    Lru.add e.peers (src :> int) c;
                    c.handler <- f c;
                    t.frames_in <- t.frames_in + 1;
                    c.handler.receive c p))

  let create ?(max_peers = 1024) ?(peer_idle = Consort.Time.of_sec 300.) ?clock dev =
    if max_peers < 1 then invalid_arg "Ethernet.create: max_peers < 1";
    let t =
      {
        dev;
        mac = D.mac dev;
        mtu = D.mtu dev;
        max_peers;
        peer_idle = (match clock with Some _ -> Some peer_idle | None -> None);
        now = (match clock with Some c -> c.Clock.now | None -> fun () -> 0);
        types = Itbl.create 8;
        promiscuous = false;
        frames_in = 0;
        frames_out = 0;
        runts = 0;
        not_for_us = 0;
        unknown_type = 0;
        bad_source = 0;
      }
    in
    D.set_receive dev (input t);
    t

  let mac t = t.mac
  let mtu t = t.mtu
  let remote c = c.peer

  let check_type ty =
    if ty < 0x600 || ty > 0xffff then Error (`Bad_address (Printf.sprintf "ethertype 0x%x" ty))
    else Ok ()

  let active_open t { dst; ethertype } f =
    match check_type ethertype with
    | Error _ as e -> e
    | Ok () -> (
        let e = table t ethertype in
        let k = (dst :> int) in
        match find_peer e k with
        | Some c ->
            c.users <- c.users + 1;
            if not c.is_pinned then begin
              Lru.remove e.peers k;
              Itbl.replace e.pinned k c;
              c.is_pinned <- true
            end;
            Ok c
        | None ->
            let c =
              {
                eth = t;
                ty = ethertype;
                peer = dst;
                handler = nothing;
                open_ = true;
                users = 1;
                is_pinned = false;
              }
            in
            if not (Mac_addr.is_group dst) then begin
              Itbl.replace e.pinned k c;
              c.is_pinned <- true
            end;
            c.handler <- f c;
            Ok c)

  let passive_open t (Ethertype ty) f =
    match check_type ty with
    | Error _ as e -> e
    | Ok () ->
        let e = table t ty in
        if e.listener <> None then Error (`In_use (Printf.sprintf "ethertype 0x%04x" ty))
        else (
          e.listener <- Some f;
          Ok ())

  let send_to c ~dst p =
    let t = c.eth in
    if not c.open_ then (
      Packet.release p;
      Error `Closed)
    else if Packet.length p > t.mtu then (
      let n = Packet.length p in
      Packet.release p;
      Error (`Too_big n))
    else
      let h = Packet.push p Ethernet_wire.sizeof_ethernet in
      Ethernet_wire.set_dst h dst;
      Ethernet_wire.set_src h t.mac;
      Ethernet_wire.set_ethertype h c.ty;
      t.frames_out <- t.frames_out + 1;
      D.send t.dev p

  let send c p = send_to c ~dst:c.peer p

  let close c =
    c.users <- c.users - 1;
    if c.open_ && c.users <= 0 then begin
      c.open_ <- false;
      match Itbl.find_opt c.eth.types c.ty with
      | Some e -> (
          let k = (c.peer :> int) in
          match Itbl.find_opt e.pinned k with
          | Some c' when c' == c -> Itbl.remove e.pinned k
          | _ -> (
              match Lru.peek e.peers k with Some c' when c' == c -> Lru.remove e.peers k | _ -> ()))
      | None -> ()
    end

  let abort = close
  let max_packet c = c.eth.mtu
  let headroom _ = Ethernet_wire.sizeof_ethernet

  let control t = function
    | Promiscuous b ->
        t.promiscuous <- b;
        Ok ()

  let query t =
    Itbl.iter (fun _ e -> Lru.expire e.peers) t.types;
    {
      mac = t.mac;
      mtu = t.mtu;
      frames_in = t.frames_in;
      frames_out = t.frames_out;
      runts = t.runts;
      not_for_us = t.not_for_us;
      unknown_type = t.unknown_type;
      bad_source = t.bad_source;
      peers = Itbl.fold (fun _ e n -> n + Itbl.length e.pinned + Lru.length e.peers) t.types 0;
      peers_evicted = Itbl.fold (fun _ e n -> n + Lru.evicted e.peers) t.types 0;
    }
end
