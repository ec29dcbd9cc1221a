type priv = { obj : int; rights : Rights.t; check : string }

type t = {
  port : Port.t;
  priv : priv;
  command : int;
  status : Status.t;
  offset : int;
  size : int;
  extra : int;
}

let null_priv = { obj = 0; rights = Rights.none; check = String.make Cap.check_length '\000' }

let null_port =
  match Port.of_raw (String.make Port.length '\000') with Ok p -> p | Error _ -> assert false

let of_cap (c : Cap.t) = (c.port, { obj = c.obj; rights = c.rights; check = c.check })

let request ?(offset = 0) ?(size = 0) ?(extra = 0) cap command =
  let port, priv = of_cap cap in
  { port; priv; command; status = `Ok; offset; size; extra }

let reply ?(offset = 0) ?(size = 0) ?(extra = 0) ?(priv = null_priv) ?(port = null_port) status =
  { port; priv; command = 0; status; offset; size; extra }

let cap h = Cap.v ~port:h.port ~obj:h.priv.obj ~rights:h.priv.rights ~check:h.priv.check

let priv_codec =
  let open Consort.Codec in
  conv ~name:"priv"
    (fun p -> (p.obj, Rights.to_int p.rights, p.check))
    (fun (obj, r, check) ->
      if obj > Cap.max_object then Error "object number too large"
      else Ok { obj; rights = Rights.of_int_exn r; check })
    (tup3 varint uint8 (fixed_string Cap.check_length))

let codec =
  let open Consort.Codec in
  map ~name:"header"
    (fun h -> ((h.port, h.priv, h.command, h.status), (h.offset, h.size, h.extra)))
    (fun ((port, priv, command, status), (offset, size, extra)) ->
      { port; priv; command; status; offset; size; extra })
    (pair (tup4 Port.codec priv_codec varint Status.codec) (tup3 varint varint zigzag))

let equal a b =
  Port.equal a.port b.port && a.priv.obj = b.priv.obj
  && Rights.equal a.priv.rights b.priv.rights
  && String.equal a.priv.check b.priv.check
  && a.command = b.command && Status.equal a.status b.status && a.offset = b.offset
  && a.size = b.size && a.extra = b.extra

let pp ppf h =
  Fmt.pf ppf "{port=%a obj=%d rights=%a command=%d status=%a offset=%d size=%d extra=%d}" Port.pp
    h.port h.priv.obj Rights.pp h.priv.rights h.command Status.pp h.status h.offset h.size h.extra
