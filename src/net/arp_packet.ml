open Arp_wire

type op = Request | Reply
type t = { op : op; sha : Mac_addr.t; spa : Ipv4_addr.t; tha : Mac_addr.t; tpa : Ipv4_addr.t }

let pp ppf t =
  match t.op with
  | Request ->
      Fmt.pf ppf "who-has %a tell %a (%a)" Ipv4_addr.pp t.tpa Ipv4_addr.pp t.spa Mac_addr.pp t.sha
  | Reply ->
      Fmt.pf ppf "%a is-at %a (to %a)" Ipv4_addr.pp t.spa Mac_addr.pp t.sha Ipv4_addr.pp t.tpa

let equal a b = a = b

let decode cs =
  if Cstruct.length cs < sizeof_arp then Error (`Msg "arp: too short")
  else if get_htype cs <> 1 || get_ptype cs <> 0x0800 || get_hlen cs <> 6 || get_plen cs <> 4 then
    Error (`Msg "arp: not IPv4 over Ethernet")
  else
    match get_op cs with
    | (1 | 2) as op ->
        Ok
          {
            op = (if op = 1 then Request else Reply);
            sha = get_sha cs;
            spa = get_spa cs;
            tha = get_tha cs;
            tpa = get_tpa cs;
          }
    | op -> Error (`Msg (Printf.sprintf "arp: unknown operation %d" op))

let encode t cs =
  if Cstruct.length cs < sizeof_arp then invalid_arg "Arp_packet.encode";
  set_htype cs 1;
  set_ptype cs 0x0800;
  set_hlen cs 6;
  set_plen cs 4;
  set_op cs (match t.op with Request -> 1 | Reply -> 2);
  set_sha cs t.sha;
  set_spa cs t.spa;
  set_tha cs t.tha;
  set_tpa cs t.tpa

let to_string t =
  let cs = Cstruct.create sizeof_arp in
  encode t cs;
  Cstruct.to_string cs
