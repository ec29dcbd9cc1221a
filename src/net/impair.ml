type config = {
  drop : float;
  corrupt : float;
  duplicate : float;
  reorder : float;
  reorder_delay : Consort.Time.t;
  delay : Consort.Time.t;
  jitter : Consort.Time.t;
}

let none =
  {
    drop = 0.;
    corrupt = 0.;
    duplicate = 0.;
    reorder = 0.;
    reorder_delay = Consort.Time.of_ms 1;
    delay = 0;
    jitter = 0;
  }

let pp_config ppf c =
  Fmt.pf ppf "drop %.3f corrupt %.3f duplicate %.3f reorder %.3f (+%a) delay %a jitter %a" c.drop
    c.corrupt c.duplicate c.reorder Consort.Time.pp c.reorder_delay Consort.Time.pp c.delay
    Consort.Time.pp c.jitter

type stats = { sent : int; dropped : int; corrupted : int; duplicated : int; reordered : int }

type t = {
  clock : Clock.t;
  rng : Consort.Rng.t;
  pool : Consort.Pool.t;
  inner : Device.t;
  mutable config : config;
  mutable device : Device.t option;
  mutable sent : int;
  mutable dropped : int;
  mutable corrupted : int;
  mutable duplicated : int;
  mutable reordered : int;
}

let copy t p =
  let n = Packet.length p in
  let c = Packet.create t.pool n in
  Cstruct.blit (Packet.cstruct p) 0 (Packet.cstruct c) 0 n;
  c

let out t p =
  let c = t.config in
  let d = c.delay + if c.jitter > 0 then Consort.Rng.int t.rng c.jitter else 0 in
  let d =
    if c.reorder > 0. && Consort.Rng.chance t.rng c.reorder then (
      t.reordered <- t.reordered + 1;
      d + c.reorder_delay)
    else d
  in
  t.sent <- t.sent + 1;
  if d = 0 then Device.send t.inner p
  else
    let (_ : Clock.cancel) =
      t.clock.at (t.clock.now () + d) (fun () -> ignore (Device.send t.inner p))
    in
    Ok ()

let send t p =
  let c = t.config in
  if c.drop > 0. && Consort.Rng.chance t.rng c.drop then (
    t.dropped <- t.dropped + 1;
    Packet.release p;
    Ok ())
  else
    let p =
      if c.corrupt > 0. && Consort.Rng.chance t.rng c.corrupt && Packet.length p > 0 then (
        t.corrupted <- t.corrupted + 1;
        let q = copy t p in
        Packet.release p;
        let cs = Packet.cstruct q in
        let bit = Consort.Rng.int t.rng (8 * Cstruct.length cs) in
        Cstruct.set_uint8 cs (bit / 8) (Cstruct.get_uint8 cs (bit / 8) lxor (1 lsl (bit land 7)));
        q)
      else p
    in
    if c.duplicate > 0. && Consort.Rng.chance t.rng c.duplicate then (
      t.duplicated <- t.duplicated + 1;
      let q = copy t p in
      let r = out t p in
      ignore (out t q);
      r)
    else out t p

let wrap ~clock ~seed ~pool config inner =
  let t =
    {
      clock;
      rng = Consort.Rng.create seed;
      pool;
      inner;
      config;
      device = None;
      sent = 0;
      dropped = 0;
      corrupted = 0;
      duplicated = 0;
      reordered = 0;
    }
  in
  let d =
    Device.v
      ~name:(Device.name inner ^ "+impair")
      ~mac:(Device.mac inner) ~mtu:(Device.mtu inner) ~send:(send t)
      ~close:(fun () -> Device.close inner)
      ()
  in
  Device.set_receive inner (Device.deliver d);
  t.device <- Some d;
  t

let device t = match t.device with Some d -> d | None -> assert false
let set_config t c = t.config <- c

let stats t =
  {
    sent = t.sent;
    dropped = t.dropped;
    corrupted = t.corrupted;
    duplicated = t.duplicated;
    reordered = t.reordered;
  }
