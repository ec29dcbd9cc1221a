open Consort_net

type ('host, 'address, 'pattern) t =
  (module Tcp.PARAMS
     with type host = 'host
      and type lower_address = 'address
      and type lower_pattern = 'pattern)

type ('host, 'address, 'pattern) make =
  clock:Clock.t ->
  pool:Consort.Pool.t ->
  rng:Consort.Rng.t ->
  'host ->
  ('host, 'address, 'pattern) t

let make (type h a p) ~(address : h -> a) ~(pattern : p) ~pseudo ~equal ~pp ~clock ~pool ~rng
    (local : h) : (h, a, p) t =
  (module struct
    type host = h
    type lower_address = a
    type lower_pattern = p

    let local = local
    let lower_address = address
    let lower_pattern = pattern
    let pseudo_header = Some (fun ~src ~dst ~len -> pseudo ~src ~dst ~proto:6 ~len)
    let equal_host = equal
    let pp_host = pp
    let clock = clock
    let rng = rng
    let pool = pool
  end)

let ipv4 =
  make
    ~address:(fun h -> { Ipv4.dst = h; proto = 6 })
    ~pattern:{ Ipv4.protocol = 6; source = None }
    ~pseudo:Transport_checksum.ipv4 ~equal:Ipv4_addr.equal ~pp:Ipv4_addr.pp

let ipv6 =
  make
    ~address:(fun h -> { Ipv6.dst = h; proto = 6 })
    ~pattern:{ Ipv6.protocol = 6; source = None }
    ~pseudo:Transport_checksum.ipv6 ~equal:Ipv6_addr.equal ~pp:Ipv6_addr.pp
