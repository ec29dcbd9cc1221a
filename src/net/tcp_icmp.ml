type kind = Hard of string | Soft of string | Frag_needed of int
type t = { kind : kind; src_port : int; dst_port : int; seq : Tcp_seq.t }

let of_quoted kind q =
  if String.length q < 8 then None
  else
    let b = Bytes.unsafe_of_string q in
    Some
      {
        kind;
        src_port = Bytes.get_uint16_be b 0;
        dst_port = Bytes.get_uint16_be b 2;
        seq = Tcp_seq.of_int (Int32.to_int (Bytes.get_int32_be b 4) land 0xFFFF_FFFF);
      }

let of_icmp (e : Icmp_packet.t) ~quoted =
  let kind =
    match e with
    | Dest_unreachable Protocol -> Some (Hard "protocol unreachable")
    | Dest_unreachable Port -> Some (Hard "port unreachable")
    | Dest_unreachable Net -> Some (Soft "network unreachable")
    | Dest_unreachable Host -> Some (Soft "host unreachable")
    | Dest_unreachable (Frag_needed { mtu }) -> Some (Frag_needed (mtu - Ipv4_wire.sizeof_ipv4))
    | Dest_unreachable (Other_unreachable c) ->
        Some (Soft (Printf.sprintf "unreachable (code %d)" c))
    | Time_exceeded _ -> Some (Soft "time exceeded")
    | Echo_request _ | Echo_reply _ | Other _ -> None
  in
  Option.bind kind (fun k -> of_quoted k quoted)

let of_ipv4 (Ipv4.Icmp_error { error; quoted }) = of_icmp error ~quoted

let pp_kind ppf = function
  | Hard s | Soft s -> Fmt.string ppf s
  | Frag_needed mtu -> Fmt.pf ppf "fragmentation needed (MTU %d)" mtu

(* RFC 4443 and RFC 5461: an unreachable port (or next header) is hard,
   the others soft;
   packet too big carries the MTU, of which TCP gets what is left after
   the IPv6 header; an MTU under 1280, the least every IPv6 link carries,
   is taken as 1280 (RFC 8201 section 4). *)
let of_ipv6 (Ipv6.Icmp_error { error; quoted }) =
  let kind =
    match error with
    | Ipv6.Unreachable 4 -> Hard "port unreachable"
    | Unreachable 1 -> Soft "administratively prohibited"
    | Unreachable 3 -> Soft "address unreachable"
    | Unreachable c -> Soft (Printf.sprintf "unreachable (code %d)" c)
    | Packet_too_big mtu -> Frag_needed (max 1280 mtu - 40)
    | Time_exceeded _ -> Soft "time exceeded"
    | Parameter_problem { code = 1; _ } -> Hard "unrecognized next header"
    | Parameter_problem { code; _ } -> Soft (Printf.sprintf "parameter problem (code %d)" code)
  in
  of_quoted kind quoted
