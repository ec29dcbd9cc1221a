open Ethernet_wire

type t = { dst : Mac_addr.t; src : Mac_addr.t; ethertype : int }

let pp ppf t = Fmt.pf ppf "%a -> %a type 0x%04x" Mac_addr.pp t.src Mac_addr.pp t.dst t.ethertype
let equal a b = a = b

let decode cs =
  if Cstruct.length cs < sizeof_ethernet then Error (`Msg "ethernet: frame too short")
  else
    Ok
      ( { dst = get_dst cs; src = get_src cs; ethertype = get_ethertype cs },
        Cstruct.shift cs sizeof_ethernet )

let encode t cs =
  if Cstruct.length cs < sizeof_ethernet then invalid_arg "Ethernet_packet.encode";
  set_dst cs t.dst;
  set_src cs t.src;
  set_ethertype cs t.ethertype

let to_string t payload =
  let cs = Cstruct.create (sizeof_ethernet + String.length payload) in
  encode t cs;
  Cstruct.blit_from_string payload 0 cs sizeof_ethernet (String.length payload);
  Cstruct.to_string cs
