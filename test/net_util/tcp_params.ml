open Consort_net

let ipv4 ~clock ~pool ~rng local :
    (module Tcp.PARAMS
       with type host = Ipv4_addr.t
        and type lower_address = Ipv4.address
        and type lower_pattern = Ipv4.address_pattern) =
  (module struct
    type host = Ipv4_addr.t
    type lower_address = Ipv4.address
    type lower_pattern = Ipv4.address_pattern

    let local = local
    let lower_address h = { Ipv4.dst = h; proto = 6 }
    let lower_pattern = { Ipv4.protocol = 6; source = None }
    let pseudo_header = Some (fun ~src ~dst ~len -> Transport_checksum.ipv4 ~src ~dst ~proto:6 ~len)
    let equal_host = Ipv4_addr.equal
    let pp_host = Ipv4_addr.pp
    let clock = clock
    let rng = rng
    let pool = pool
  end)

let ipv6 ~clock ~pool ~rng local :
    (module Tcp.PARAMS
       with type host = Ipv6_addr.t
        and type lower_address = Ipv6.address
        and type lower_pattern = Ipv6.address_pattern) =
  (module struct
    type host = Ipv6_addr.t
    type lower_address = Ipv6.address
    type lower_pattern = Ipv6.address_pattern

    let local = local
    let lower_address h = { Ipv6.dst = h; proto = 6 }
    let lower_pattern = { Ipv6.protocol = 6; source = None }
    let pseudo_header = Some (fun ~src ~dst ~len -> Transport_checksum.ipv6 ~src ~dst ~proto:6 ~len)
    let equal_host = Ipv6_addr.equal
    let pp_host = Ipv6_addr.pp
    let clock = clock
    let rng = rng
    let pool = pool
  end)
