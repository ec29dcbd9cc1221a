open Udp_wire

type t = { src_port : int; dst_port : int }

let pp ppf t = Fmt.pf ppf "udp %d -> %d" t.src_port t.dst_port
let equal a b = a = b

let decode ?pseudo cs =
  let n = Cstruct.length cs in
  if n < sizeof_udp then Error (`Msg "udp: too short")
  else
    let len = get_length cs in
    if len < sizeof_udp || len > n then Error (`Msg "udp: bad length")
    else
      let cs = if len = n then cs else Cstruct.sub cs 0 len in
      match pseudo with
      | Some init when get_checksum cs <> 0 && not (Checksum.valid ~init cs) ->
          Error (`Msg "udp: bad checksum")
      | _ ->
          Ok
            ({ src_port = get_src_port cs; dst_port = get_dst_port cs }, Cstruct.shift cs sizeof_udp)

let encode ?pseudo t cs =
  let n = Cstruct.length cs in
  if n < sizeof_udp || n > 0xffff then invalid_arg "Udp_packet.encode";
  set_src_port cs t.src_port;
  set_dst_port cs t.dst_port;
  set_length cs n;
  set_checksum cs 0;
  match pseudo with
  | None -> ()
  | Some init ->
      let c = Checksum.digest ~init cs in
      set_checksum cs (if c = 0 then 0xffff else c)

let to_string ?pseudo t payload =
  let cs = Cstruct.create (sizeof_udp + String.length payload) in
  Cstruct.blit_from_string payload 0 cs sizeof_udp (String.length payload);
  encode ?pseudo t cs;
  Cstruct.to_string cs
