type info = { frames_in : int; frames_out : int; unknown : int }

let pp_info ppf i = Fmt.pf ppf "frames %d in %d out; %d unknown" i.frames_in i.frames_out i.unknown

module type S = sig
  include Ipv4.LINK with type status = unit and type info = info

  type device

  val create : device -> t
  val remote : connection -> Ipv4_addr.t
end

let ethertype_ipv6 = 0x86dd

module Make (D : Device.S) = struct
  type address = Arp.address
  type address_pattern = Arp.address_pattern
  type status = unit
  type control = Arp.control
  type nonrec info = info
  type device = D.t

  type t = {
    dev : D.t;
    mutable v4 : connection option; (* the passive opens, by IP version *)
    mutable v6 : connection option;
    mutable frames_in : int;
    mutable frames_out : int;
    mutable unknown : int;
  }

  and connection = { link : t; peer : Ipv4_addr.t; mutable handler : handler; mutable open_ : bool }
  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ () -> ()) }

  let input t p =
    let cs = Packet.cstruct p in
    let version = if Cstruct.length cs > 0 then Cstruct.get_uint8 cs 0 lsr 4 else 0 in
    match if version = 4 then t.v4 else if version = 6 then t.v6 else None with
    | Some c when c.open_ ->
        t.frames_in <- t.frames_in + 1;
        c.handler.receive c p
    | _ ->
        t.unknown <- t.unknown + 1;
        Packet.release p

  let create dev =
    let t = { dev; v4 = None; v6 = None; frames_in = 0; frames_out = 0; unknown = 0 } in
    D.set_receive dev (input t);
    t

  let remote c = c.peer
  let mtu t = D.mtu t.dev

  let active_open t ({ ip; _ } : address) f =
    let c = { link = t; peer = ip; handler = nothing; open_ = true } in
    c.handler <- f c;
    Ok c

  let passive_open t (Arp.Ethertype ety) f =
    let slot =
      if ety = Ethernet_wire.ethertype_ipv4 then `V4
      else if ety = ethertype_ipv6 then `V6
      else `None
    in
    match (slot, t.v4, t.v6) with
    | `None, _, _ ->
        Error
          (`Unsupported
             (Printf.sprintf "a point-to-point link carries IP only, not ethertype 0x%04x" ety))
    | (`V4, Some c, _ | `V6, _, Some c) when c.open_ ->
        Error (`In_use (Printf.sprintf "ethertype 0x%04x" ety))
    | (`V4 | `V6), _, _ ->
        let c = { link = t; peer = Ipv4_addr.any; handler = nothing; open_ = true } in
        c.handler <- f c;
        if slot = `V4 then t.v4 <- Some c else t.v6 <- Some c;
        Ok ()

  let send c p =
    if not c.open_ then (
      Packet.release p;
      Error `Closed)
    else if Packet.length p > D.mtu c.link.dev then (
      let n = Packet.length p in
      Packet.release p;
      Error (`Too_big n))
    else (
      c.link.frames_out <- c.link.frames_out + 1;
      D.send c.link.dev p)

  let close c = c.open_ <- false
  let abort = close
  let max_packet c = D.mtu c.link.dev
  let headroom _ = 0
  let control _ (_ : control) = Ok ()
  let query t = { frames_in = t.frames_in; frames_out = t.frames_out; unknown = t.unknown }
end
