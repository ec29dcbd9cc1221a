type flags = {
  fin : bool;
  syn : bool;
  rst : bool;
  psh : bool;
  ack : bool;
  urg : bool;
  ece : bool;
  cwr : bool;
}

let no_flags =
  {
    fin = false;
    syn = false;
    rst = false;
    psh = false;
    ack = false;
    urg = false;
    ece = false;
    cwr = false;
  }

let flags_of_int n =
  let b m = n land m <> 0 in
  {
    fin = b Tcp_wire.fin;
    syn = b Tcp_wire.syn;
    rst = b Tcp_wire.rst;
    psh = b Tcp_wire.psh;
    ack = b Tcp_wire.ack;
    urg = b Tcp_wire.urg;
    ece = b Tcp_wire.ece;
    cwr = b Tcp_wire.cwr;
  }

let int_of_flags f =
  let b c m = if c then m else 0 in
  b f.fin Tcp_wire.fin lor b f.syn Tcp_wire.syn lor b f.rst Tcp_wire.rst lor b f.psh Tcp_wire.psh
  lor b f.ack Tcp_wire.ack lor b f.urg Tcp_wire.urg lor b f.ece Tcp_wire.ece
  lor b f.cwr Tcp_wire.cwr

let pp_flags ppf f =
  let s c ch = if c then Fmt.char ppf ch in
  s f.syn 'S';
  s f.fin 'F';
  s f.rst 'R';
  s f.psh 'P';
  s f.urg 'U';
  s f.ece 'E';
  s f.cwr 'W';
  if f.ack then Fmt.char ppf '.'
  else if not (f.syn || f.fin || f.rst || f.psh || f.urg || f.ece || f.cwr) then
    Fmt.string ppf "none"

type option_ =
  | Mss of int
  | Window_scale of int
  | Sack_permitted
  | Sack of (Tcp_seq.t * Tcp_seq.t) list
  | Timestamp of { value : int; echo : int }
  | Unknown of { kind : int; data : string }

let pp_option ppf = function
  | Mss n -> Fmt.pf ppf "mss %d" n
  | Window_scale n -> Fmt.pf ppf "wscale %d" n
  | Sack_permitted -> Fmt.string ppf "sackOK"
  | Sack bs ->
      Fmt.pf ppf "sack %a" Fmt.(list ~sep:sp (pair ~sep:(any ":") Tcp_seq.pp Tcp_seq.pp)) bs
  | Timestamp { value; echo } -> Fmt.pf ppf "TS val %d ecr %d" value echo
  | Unknown { kind; data } -> Fmt.pf ppf "opt-%d[%d]" kind (String.length data)

let option_length = function
  | Mss _ -> 4
  | Window_scale _ -> 3
  | Sack_permitted -> 2
  | Sack bs -> 2 + (8 * List.length bs)
  | Timestamp _ -> 10
  | Unknown { data; _ } -> 2 + String.length data

type t = {
  src_port : int;
  dst_port : int;
  seq : Tcp_seq.t;
  ack : Tcp_seq.t;
  flags : flags;
  window : int;
  urgent : int;
  options : option_ list;
}

let v ?(flags = no_flags) ?(window = 0) ?(urgent = 0) ?(options = []) ~src_port ~dst_port ~seq ~ack
    () =
  { src_port; dst_port; seq; ack; flags; window; urgent; options }

let pp ppf t =
  Fmt.pf ppf "%d > %d: %a seq %a ack %a win %d" t.src_port t.dst_port pp_flags t.flags Tcp_seq.pp
    t.seq Tcp_seq.pp t.ack t.window;
  if t.urgent <> 0 then Fmt.pf ppf " urg %d" t.urgent;
  if t.options <> [] then Fmt.pf ppf " <%a>" Fmt.(list ~sep:comma pp_option) t.options

let equal (a : t) b = a = b

type error = [ `Too_short of int | `Bad_offset of int | `Bad_options of string ]

let pp_error ppf = function
  | `Too_short n -> Fmt.pf ppf "segment too short (%d bytes)" n
  | `Bad_offset n -> Fmt.pf ppf "bad data offset %d" n
  | `Bad_options w -> Fmt.pf ppf "bad options: %s" w

let get32 b off = Int32.to_int (Cstruct.BE.get_uint32 b off) land 0xFFFF_FFFF

let decode_option b off kind len =
  let data_len = len - 2 in
  let unknown () = Unknown { kind; data = Cstruct.to_string (Cstruct.sub b (off + 2) data_len) } in
  if kind = Tcp_wire.opt_mss then
    if len = 4 then Mss (Cstruct.BE.get_uint16 b (off + 2)) else unknown ()
  else if kind = Tcp_wire.opt_window_scale then
    if len = 3 then Window_scale (Cstruct.get_uint8 b (off + 2)) else unknown ()
  else if kind = Tcp_wire.opt_sack_permitted then if len = 2 then Sack_permitted else unknown ()
  else if kind = Tcp_wire.opt_sack then
    if data_len > 0 && data_len mod 8 = 0 then
      Sack
        (List.init (data_len / 8) (fun i ->
             let o = off + 2 + (8 * i) in
             (Tcp_seq.of_int (get32 b o), Tcp_seq.of_int (get32 b (o + 4)))))
    else unknown ()
  else if kind = Tcp_wire.opt_timestamp then
    if len = 10 then Timestamp { value = get32 b (off + 2); echo = get32 b (off + 6) }
    else unknown ()
  else unknown ()

let decode_options b =
  let n = Cstruct.length b in
  let rec go off acc =
    if off >= n then Ok (List.rev acc)
    else
      let kind = Cstruct.get_uint8 b off in
      if kind = Tcp_wire.opt_eol then Ok (List.rev acc)
      else if kind = Tcp_wire.opt_nop then go (off + 1) acc
      else if off + 1 >= n then Error (`Bad_options (Printf.sprintf "option %d has no length" kind))
      else
        let len = Cstruct.get_uint8 b (off + 1) in
        if len < 2 || off + len > n then
          Error (`Bad_options (Printf.sprintf "option %d has length %d" kind len))
        else go (off + len) (decode_option b off kind len :: acc)
  in
  go 0 []

let decode b =
  let n = Cstruct.length b in
  if n < Tcp_wire.min_header then Error (`Too_short n)
  else
    let hl = Tcp_wire.get_data_offset b in
    if hl < Tcp_wire.min_header || hl > n then Error (`Bad_offset hl)
    else
      match decode_options (Cstruct.sub b Tcp_wire.min_header (hl - Tcp_wire.min_header)) with
      | Error _ as e -> e
      | Ok options ->
          Ok
            ( {
                src_port = Tcp_wire.get_src_port b;
                dst_port = Tcp_wire.get_dst_port b;
                seq = Tcp_seq.of_int (Tcp_wire.get_seq b);
                ack = Tcp_seq.of_int (Tcp_wire.get_ack b);
                flags = flags_of_int (Tcp_wire.get_flags b);
                window = Tcp_wire.get_window b;
                urgent = Tcp_wire.get_urgent b;
                options;
              },
              hl )

let options_length opts = List.fold_left (fun acc o -> acc + option_length o) 0 opts

let header_length t =
  let o = options_length t.options in
  let padded = (o + 3) land lnot 3 in
  if padded > 40 then invalid_arg (Printf.sprintf "Tcp_packet.header_length: %d bytes of options" o);
  Tcp_wire.min_header + padded

let set32 b off v = Cstruct.BE.set_uint32 b off (Int32.of_int v)

let write_option b off = function
  | Mss n ->
      Cstruct.set_uint8 b off Tcp_wire.opt_mss;
      Cstruct.set_uint8 b (off + 1) 4;
      Cstruct.BE.set_uint16 b (off + 2) n
  | Window_scale n ->
      Cstruct.set_uint8 b off Tcp_wire.opt_window_scale;
      Cstruct.set_uint8 b (off + 1) 3;
      Cstruct.set_uint8 b (off + 2) n
  | Sack_permitted ->
      Cstruct.set_uint8 b off Tcp_wire.opt_sack_permitted;
      Cstruct.set_uint8 b (off + 1) 2
  | Sack bs ->
      Cstruct.set_uint8 b off Tcp_wire.opt_sack;
      Cstruct.set_uint8 b (off + 1) (2 + (8 * List.length bs));
      List.iteri
        (fun i (l, r) ->
          set32 b (off + 2 + (8 * i)) (Tcp_seq.to_int l);
          set32 b (off + 6 + (8 * i)) (Tcp_seq.to_int r))
        bs
  | Timestamp { value; echo } ->
      Cstruct.set_uint8 b off Tcp_wire.opt_timestamp;
      Cstruct.set_uint8 b (off + 1) 10;
      set32 b (off + 2) value;
      set32 b (off + 6) echo
  | Unknown { kind; data } ->
      Cstruct.set_uint8 b off kind;
      Cstruct.set_uint8 b (off + 1) (2 + String.length data);
      Cstruct.blit_from_string data 0 b (off + 2) (String.length data)

let encode_into t b =
  let hl = header_length t in
  if Cstruct.length b < hl then invalid_arg "Tcp_packet.encode_into: buffer too short";
  Tcp_wire.set_src_port b t.src_port;
  Tcp_wire.set_dst_port b t.dst_port;
  Tcp_wire.set_seq b (Tcp_seq.to_int t.seq);
  Tcp_wire.set_ack b (Tcp_seq.to_int t.ack);
  Tcp_wire.set_data_offset b hl;
  Tcp_wire.set_flags b (int_of_flags t.flags);
  Tcp_wire.set_window b t.window;
  Tcp_wire.set_checksum b 0;
  Tcp_wire.set_urgent b t.urgent;
  let off =
    List.fold_left
      (fun off o ->
        write_option b off o;
        off + option_length o)
      Tcp_wire.min_header t.options
  in
  Cstruct.memset (Cstruct.sub b off (hl - off)) 0

let to_cstruct ?pseudo t ~payload =
  let hl = header_length t in
  let b = Cstruct.create (hl + String.length payload) in
  encode_into t b;
  Cstruct.blit_from_string payload 0 b hl (String.length payload);
  (match pseudo with
  | None -> ()
  | Some p -> Tcp_wire.set_checksum b (Tcp_checksum.finish (Tcp_checksum.sum ~init:p b)));
  b
