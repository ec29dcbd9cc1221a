module type S = sig
  module T : Tcp.S with type host = int and type lower = Mem.t
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
  val mem : Mem.t
end

let make ?config ?secret ?(checksum = true) ?mtu net pool host ~seed : (module S) =
  let mem = Mem.attach ?mtu net host in
  let module P = struct
    type host = int
    type lower_address = int
    type lower_pattern = unit

    let local = host
    let lower_address h = h
    let lower_pattern = ()
    let pseudo_header = if checksum then Some Mem.pseudo else None
    let equal_host = Int.equal
    let pp_host = Fmt.int
    let clock = Mem.clock net
    let rng = Consort.Rng.create seed
    let pool = pool
  end in
  let module T = Tcp.Make (Mem) (P) in
  let tcp =
    match T.create ?config ?secret ~icmp:Option.some mem with
    | Ok t -> t
    | Error e -> Fmt.failwith "%a" Protocol.pp_error e
  in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
    let mem = mem
  end)
