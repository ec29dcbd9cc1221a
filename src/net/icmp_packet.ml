open Icmp_wire

type unreachable =
  | Net
  | Host
  | Protocol
  | Port
  | Frag_needed of { mtu : int }
  | Other_unreachable of int

type t =
  | Echo_request of { id : int; seq : int }
  | Echo_reply of { id : int; seq : int }
  | Dest_unreachable of unreachable
  | Time_exceeded of { code : int }
  | Other of { ty : int; code : int; rest : int }

let pp_unreachable ppf = function
  | Net -> Fmt.string ppf "net unreachable"
  | Host -> Fmt.string ppf "host unreachable"
  | Protocol -> Fmt.string ppf "protocol unreachable"
  | Port -> Fmt.string ppf "port unreachable"
  | Frag_needed { mtu } -> Fmt.pf ppf "fragmentation needed (mtu %d)" mtu
  | Other_unreachable c -> Fmt.pf ppf "unreachable code %d" c

let pp ppf = function
  | Echo_request { id; seq } -> Fmt.pf ppf "echo request id %d seq %d" id seq
  | Echo_reply { id; seq } -> Fmt.pf ppf "echo reply id %d seq %d" id seq
  | Dest_unreachable u -> pp_unreachable ppf u
  | Time_exceeded { code } -> Fmt.pf ppf "time exceeded code %d" code
  | Other { ty; code; rest } -> Fmt.pf ppf "icmp type %d code %d rest 0x%08x" ty code rest

let equal a b = a = b

let decode cs =
  if Cstruct.length cs < sizeof_icmp then Error (`Msg "icmp: too short")
  else if not (Checksum.valid cs) then Error (`Msg "icmp: bad checksum")
  else
    let code = get_code cs in
    let t =
      match get_ty cs with
      | 0 when code = 0 -> Echo_reply { id = get_id cs; seq = get_seq cs }
      | 8 when code = 0 -> Echo_request { id = get_id cs; seq = get_seq cs }
      | 3 ->
          Dest_unreachable
            (match code with
            | 0 -> Net
            | 1 -> Host
            | 2 -> Protocol
            | 3 -> Port
            | 4 -> Frag_needed { mtu = get_seq cs }
            | c -> Other_unreachable c)
      | 11 -> Time_exceeded { code }
      | ty -> Other { ty; code; rest = get_rest cs }
    in
    Ok (t, Cstruct.shift cs sizeof_icmp)

let encode t cs =
  if Cstruct.length cs < sizeof_icmp then invalid_arg "Icmp_packet.encode";
  let ty, code, rest =
    match t with
    | Echo_reply { id; seq } -> (echo_reply, 0, ((id land 0xffff) lsl 16) lor (seq land 0xffff))
    | Echo_request { id; seq } -> (echo_request, 0, ((id land 0xffff) lsl 16) lor (seq land 0xffff))
    | Dest_unreachable u ->
        let code, rest =
          match u with
          | Net -> (0, 0)
          | Host -> (1, 0)
          | Protocol -> (2, 0)
          | Port -> (3, 0)
          | Frag_needed { mtu } -> (4, mtu land 0xffff)
          | Other_unreachable c -> (c land 0xff, 0)
        in
        (dest_unreachable, code, rest)
    | Time_exceeded { code } -> (time_exceeded, code land 0xff, 0)
    | Other { ty; code; rest } -> (ty land 0xff, code land 0xff, rest land 0xffff_ffff)
  in
  set_ty cs ty;
  set_code cs code;
  set_checksum cs 0;
  set_rest cs rest;
  set_checksum cs (Checksum.digest cs)

let to_string t payload =
  let cs = Cstruct.create (sizeof_icmp + String.length payload) in
  Cstruct.blit_from_string payload 0 cs sizeof_icmp (String.length payload);
  encode t cs;
  Cstruct.to_string cs
