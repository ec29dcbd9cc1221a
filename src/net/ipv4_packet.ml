open Ipv4_wire

type t = {
  tos : int;
  id : int;
  df : bool;
  mf : bool;
  frag_offset : int;
  ttl : int;
  proto : int;
  src : Ipv4_addr.t;
  dst : Ipv4_addr.t;
  options : string;
}

let v ?(tos = 0) ?(id = 0) ?(df = false) ?(ttl = 64) ~proto ~src ~dst () =
  { tos; id; df; mf = false; frag_offset = 0; ttl; proto; src; dst; options = "" }

let pp ppf t =
  Fmt.pf ppf "%a -> %a proto %d id %d%s%s off %d ttl %d%s" Ipv4_addr.pp t.src Ipv4_addr.pp t.dst
    t.proto t.id
    (if t.df then " DF" else "")
    (if t.mf then " MF" else "")
    t.frag_offset t.ttl
    (if t.options = "" then "" else Printf.sprintf " options %d bytes" (String.length t.options))

let equal a b = a = b
let header_length t = sizeof_ipv4 + String.length t.options

let decode ?(verify = true) cs =
  let n = Cstruct.length cs in
  if n < sizeof_ipv4 then Error (`Msg "ipv4: too short")
  else if get_version cs <> 4 then Error (`Msg "ipv4: not version 4")
  else
    let hlen = get_ihl cs * 4 in
    let total = get_len cs in
    if hlen < sizeof_ipv4 then Error (`Msg "ipv4: header length under 20")
    else if hlen > n then Error (`Msg "ipv4: header longer than the buffer")
    else if total < hlen then Error (`Msg "ipv4: total length under header length")
    else if total > n then Error (`Msg "ipv4: total length over the buffer")
    else if verify && not (Checksum.sum_sub cs ~off:0 ~len:hlen = 0xffff) then
      Error (`Msg "ipv4: bad header checksum")
    else
      let fo = get_flags_off cs in
      Ok
        ( {
            tos = get_tos cs;
            id = get_id cs;
            df = fo land flag_df <> 0;
            mf = fo land flag_mf <> 0;
            frag_offset = fo land 0x1fff * 8;
            ttl = get_ttl cs;
            proto = get_proto cs;
            src = get_src cs;
            dst = get_dst cs;
            options = Cstruct.to_string (Cstruct.sub cs sizeof_ipv4 (hlen - sizeof_ipv4));
          },
          Cstruct.sub cs hlen (total - hlen) )

(* RFC 792 quotes the header and 8 bytes of the payload; RFC 1812 4.3.2.3
   as much as fits in 576 bytes: the quote may end before the quoted
   header's total length says, but never before those 8 bytes. *)
let decode_quoted cs =
  let n = Cstruct.length cs in
  if n < sizeof_ipv4 then Error (`Msg "ipv4 quote: too short")
  else if get_version cs <> 4 then Error (`Msg "ipv4 quote: not version 4")
  else
    let hlen = get_ihl cs * 4 in
    let total = get_len cs in
    if hlen < sizeof_ipv4 then Error (`Msg "ipv4 quote: header length under 20")
    else if total < hlen + 8 then Error (`Msg "ipv4 quote: total length under the header and 8")
    else if n < hlen + 8 then Error (`Msg "ipv4 quote: under the header and 8 bytes of payload")
    else
      (* The header alone, read by [decode] as a datagram without payload. *)
      let header = Cstruct.create hlen in
      Cstruct.blit cs 0 header 0 hlen;
      set_len header hlen;
      match decode ~verify:false header with
      | Error _ as e -> e
      | Ok (h, _) -> Ok (h, Cstruct.sub cs hlen (min total n - hlen))

let encode t ~payload_len cs =
  let hlen = header_length t in
  let olen = String.length t.options in
  if olen land 3 <> 0 || olen > 40 then invalid_arg "Ipv4_packet.encode: options";
  if t.frag_offset land 7 <> 0 || t.frag_offset > 0xfff8 then
    invalid_arg "Ipv4_packet.encode: fragment offset";
  if hlen + payload_len > 0xffff then invalid_arg "Ipv4_packet.encode: too long";
  if Cstruct.length cs < hlen then invalid_arg "Ipv4_packet.encode: buffer too short";
  set_version_ihl cs ~ihl:(hlen / 4);
  set_tos cs t.tos;
  set_len cs (hlen + payload_len);
  set_id cs t.id;
  set_flags_off cs
    ((if t.df then flag_df else 0) lor (if t.mf then flag_mf else 0) lor (t.frag_offset / 8));
  set_ttl cs t.ttl;
  set_proto cs t.proto;
  set_checksum cs 0;
  set_src cs t.src;
  set_dst cs t.dst;
  Cstruct.blit_from_string t.options 0 cs sizeof_ipv4 olen;
  set_checksum cs (Checksum.finish (Checksum.sum_sub cs ~off:0 ~len:hlen))

let to_string t payload =
  let hlen = header_length t in
  let cs = Cstruct.create (hlen + String.length payload) in
  encode t ~payload_len:(String.length payload) cs;
  Cstruct.blit_from_string payload 0 cs hlen (String.length payload);
  Cstruct.to_string cs
