type arp_config = Arp.config

let pp_arp = Arp.pp_info
let pp_icmp = Icmp.pp_info
let pp_udp = Udp.pp_info

module type S = sig
  type device

  module Eth : Ethernet.S with type device = device
  module Arp : Arp.S with type ethernet = Eth.t
  module Ip : Ipv4.S with type arp = Arp.t
  module Icmp : Icmp.S with type ip = Ip.t
  module Ip6 : Ipv6.S with type ethernet = Eth.t
  module Udp6 : Udp.GENERIC with type host = Ipv6_addr.t and type ip = Ip6.t
  module Udp : Udp.S with type ip = Ip.t

  type t = {
    device : device;
    clock : Clock.t;
    pool : Consort.Pool.t;
    eth : Eth.t;
    arp : Arp.t;
    ip : Ip.t;
    icmp : Icmp.t;
    udp : Udp.t;
  }

  val create :
    ?arp:arp_config ->
    ?reassembly:Ipv4.reassembly ->
    ?gateway:Ipv4_addr.t ->
    clock:Clock.t ->
    pool:Consort.Pool.t ->
    address:Ipv4_addr.Prefix.t ->
    device ->
    t

  val pp : t Fmt.t
end

module Make (D : Device.S) = struct
  type device = D.t

  module Eth = Ethernet.Make (D)
  module Arp = Arp.Make (Eth)
  module Ip = Ipv4.Make (Arp)
  module Icmp = Icmp.Make (Ip)
  module Ip6 = Ipv6.Make (Eth)
  module Udp6 = Udp.Over (Udp.Over_ipv6 (Ip6)) (Checksum.On)
  module Udp = Udp.Make (Ip) (Checksum.On)

  type t = {
    device : device;
    clock : Clock.t;
    pool : Consort.Pool.t;
    eth : Eth.t;
    arp : Arp.t;
    ip : Ip.t;
    icmp : Icmp.t;
    udp : Udp.t;
  }

  let create ?arp:config ?reassembly ?gateway ~clock ~pool ~(address : Ipv4_addr.Prefix.t) device =
    let eth = Eth.create ~clock device in
    let arp = Arp.create ?config ~clock ~pool ~ip:address.addr eth in
    let ip = Ip.create ?reassembly ?gateway ~clock ~pool ~address arp in
    let icmp = Icmp.create ~clock ip in
    let udp = Udp.create ip in
    { device; clock; pool; eth; arp; ip; icmp; udp }

  let pp ppf t =
    Fmt.pf ppf "@[<v>ethernet: %a@,arp: %a@,ipv4: %a@,icmp: %a@,udp: %a@]" Ethernet.pp_info
      (Eth.query t.eth) pp_arp (Arp.query t.arp) Ipv4.pp_info (Ip.query t.ip) pp_icmp
      (Icmp.query t.icmp) pp_udp (Udp.query t.udp)
end

include Make (Device)
