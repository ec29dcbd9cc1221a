open Consort

type outer =
  | Hello of { port : Port.t; eph : string; nonce : string }
  | Hello_ack of {
      nonce : string;
      session : string;
      eph : string;
      public : string;
      signature : string;
    }
  | Nothere of { port : Port.t; nonce : string }
  | Data of { up : bool; session : string; seq : int64; sealed : string }
  | Badsession of { port : Port.t; session : string; public : string; signature : string }
  | Locate of { port : Port.t; nonce : string }
  | Hereis of { port : Port.t; nonce : string; public : string; signature : string }

let rest =
  Codec.custom ~name:"rest" ~size:String.length
    ~write:(fun w s ->
      Bytes.blit_string s 0 w.Codec.W.buf w.Codec.W.pos (String.length s);
      w.Codec.W.pos <- w.Codec.W.pos + String.length s)
    ~read:(fun r ->
      let n = Codec.R.remaining r in
      let s = Cstruct.to_string (Cstruct.sub r.Codec.R.cs r.Codec.R.pos n) in
      r.Codec.R.pos <- r.Codec.R.pos + n;
      s)

let b n = Codec.fixed_string n

let outer_union =
  let open Codec in
  union "rpc datagram"
    [
      case 1 "hello"
        (tup3 Port.codec (b 32) (b 16))
        (function Hello { port; eph; nonce } -> Some (port, eph, nonce) | _ -> None)
        (fun (port, eph, nonce) -> Hello { port; eph; nonce });
      case 2 "hello-ack"
        (pair (tup3 (b 16) (b 8) (b 32)) (pair (b 32) (b 64)))
        (function
          | Hello_ack { nonce; session; eph; public; signature } ->
              Some ((nonce, session, eph), (public, signature))
          | _ -> None)
        (fun ((nonce, session, eph), (public, signature)) ->
          Hello_ack { nonce; session; eph; public; signature });
      case 3 "nothere"
        (pair Port.codec (b 16))
        (function Nothere { port; nonce } -> Some (port, nonce) | _ -> None)
        (fun (port, nonce) -> Nothere { port; nonce });
      case 4 "data-up"
        (tup3 (b 8) int64 rest)
        (function
          | Data { up = true; session; seq; sealed } -> Some (session, seq, sealed) | _ -> None)
        (fun (session, seq, sealed) -> Data { up = true; session; seq; sealed });
      case 8 "data-down"
        (tup3 (b 8) int64 rest)
        (function
          | Data { up = false; session; seq; sealed } -> Some (session, seq, sealed) | _ -> None)
        (fun (session, seq, sealed) -> Data { up = false; session; seq; sealed });
      case 5 "badsession"
        (tup4 Port.codec (b 8) (b 32) (b 64))
        (function
          | Badsession { port; session; public; signature } ->
              Some (port, session, public, signature)
          | _ -> None)
        (fun (port, session, public, signature) -> Badsession { port; session; public; signature });
      case 6 "locate"
        (pair Port.codec (b 16))
        (function Locate { port; nonce } -> Some (port, nonce) | _ -> None)
        (fun (port, nonce) -> Locate { port; nonce });
      case 7 "hereis"
        (tup4 Port.codec (b 16) (b 32) (b 64))
        (function
          | Hereis { port; nonce; public; signature } -> Some (port, nonce, public, signature)
          | _ -> None)
        (fun (port, nonce, public, signature) -> Hereis { port; nonce; public; signature });
    ]

let outer =
  Codec.conv ~name:"rpc datagram"
    (fun o -> (1, o))
    (fun (v, o) -> if v = 1 then Ok o else Error (Printf.sprintf "unknown protocol version %d" v))
    (Codec.pair Codec.uint8 outer_union)

type dir = Req | Rep

type inner =
  | Frag of {
      dir : dir;
      xid : int;
      total : int;
      offset : int;
      header : Header.t option;
      chunk : string;
    }
  | Ack of { dir : dir; xid : int; upto : int }
  | Enquire of { xid : int; have : int }
  | Alive of { xid : int }
  | Unknown of { xid : int }
  | Busy of { xid : int }
  | Forgotten of { xid : int }
  | Done of { xid : int }
  | Moved of { xid : int }

let max_chunk = 65536

let dir_codec =
  Codec.map ~name:"dir"
    (function Req -> false | Rep -> true)
    (function false -> Req | true -> Rep)
    Codec.bool

let inner =
  let open Codec in
  let xid_case tag name proj inj = case tag name varint proj inj in
  union "rpc message"
    [
      case 1 "frag"
        (pair
           (tup4 dir_codec varint varint varint)
           (pair (option Header.codec) (string ~max:max_chunk ())))
        (function
          | Frag { dir; xid; total; offset; header; chunk } ->
              Some ((dir, xid, total, offset), (header, chunk))
          | _ -> None)
        (fun ((dir, xid, total, offset), (header, chunk)) ->
          Frag { dir; xid; total; offset; header; chunk });
      case 2 "ack" (tup3 dir_codec varint varint)
        (function Ack { dir; xid; upto } -> Some (dir, xid, upto) | _ -> None)
        (fun (dir, xid, upto) -> Ack { dir; xid; upto });
      case 3 "enquire" (pair varint varint)
        (function Enquire { xid; have } -> Some (xid, have) | _ -> None)
        (fun (xid, have) -> Enquire { xid; have });
      xid_case 4 "alive"
        (function Alive { xid } -> Some xid | _ -> None)
        (fun xid -> Alive { xid });
      xid_case 5 "unknown"
        (function Unknown { xid } -> Some xid | _ -> None)
        (fun xid -> Unknown { xid });
      xid_case 6 "busy" (function Busy { xid } -> Some xid | _ -> None) (fun xid -> Busy { xid });
      xid_case 7 "forgotten"
        (function Forgotten { xid } -> Some xid | _ -> None)
        (fun xid -> Forgotten { xid });
      xid_case 8 "done" (function Done { xid } -> Some xid | _ -> None) (fun xid -> Done { xid });
      xid_case 9 "moved"
        (function Moved { xid } -> Some xid | _ -> None)
        (fun xid -> Moved { xid });
    ]

let pp_dir ppf = function Req -> Fmt.string ppf "req" | Rep -> Fmt.string ppf "rep"

let pp_inner ppf = function
  | Frag { dir; xid; total; offset; header; chunk } ->
      Fmt.pf ppf "frag %a xid=%d %d+%d/%d%s" pp_dir dir xid offset (String.length chunk) total
        (if header = None then "" else " +header")
  | Ack { dir; xid; upto } -> Fmt.pf ppf "ack %a xid=%d upto=%d" pp_dir dir xid upto
  | Enquire { xid; have } -> Fmt.pf ppf "enquire xid=%d have=%d" xid have
  | Alive { xid } -> Fmt.pf ppf "alive xid=%d" xid
  | Unknown { xid } -> Fmt.pf ppf "unknown xid=%d" xid
  | Busy { xid } -> Fmt.pf ppf "busy xid=%d" xid
  | Forgotten { xid } -> Fmt.pf ppf "forgotten xid=%d" xid
  | Done { xid } -> Fmt.pf ppf "done xid=%d" xid
  | Moved { xid } -> Fmt.pf ppf "moved xid=%d" xid

let hex s = Crypto.to_hex s

let pp_outer ppf = function
  | Hello { port; _ } -> Fmt.pf ppf "hello %a" Port.pp port
  | Hello_ack { session; _ } -> Fmt.pf ppf "hello-ack session=%s" (hex session)
  | Nothere { port; _ } -> Fmt.pf ppf "nothere %a" Port.pp port
  | Data { up; session; seq; sealed } ->
      Fmt.pf ppf "data-%s session=%s seq=%Ld %dB"
        (if up then "up" else "down")
        (hex session) seq (String.length sealed)
  | Badsession { port; session; _ } -> Fmt.pf ppf "badsession %a %s" Port.pp port (hex session)
  | Locate { port; _ } -> Fmt.pf ppf "locate %a" Port.pp port
  | Hereis { port; _ } -> Fmt.pf ppf "hereis %a" Port.pp port

(* The fast path of fragments: the same bytes as [inner] gives for a [Frag],
   written straight into a buffer, the chunk taken from its string without
   a copy of its own. *)
let frag_prefix =
  let open Codec in
  tup4 uint8 (tup4 dir_codec varint varint varint) (option Header.codec) varint

let frag_cstruct ?into ~headroom ~dir ~xid ~total ~offset ~header data ~off ~len =
  let prefix = (1, (dir, xid, total, offset), header, len) in
  let plen = Codec.size frag_prefix prefix in
  let p = Bytes.create plen in
  ignore (Codec.encode_into frag_prefix p 0 prefix);
  let size = headroom + plen + len in
  let cs =
    match into with
    | Some b when Cstruct.length b >= size -> Cstruct.sub b 0 size
    | _ -> Cstruct.create_unsafe size
  in
  Cstruct.blit_from_bytes p 0 cs headroom plen;
  Cstruct.blit_from_string data off cs (headroom + plen) len;
  cs

let frag_head ~into ~dir ~xid ~total ~offset ~header ~len =
  let prefix = (1, (dir, xid, total, offset), header, len) in
  let plen = Codec.size frag_prefix prefix in
  let p = Bytes.create plen in
  ignore (Codec.encode_into frag_prefix p 0 prefix);
  let cs =
    if Cstruct.length into >= plen then Cstruct.sub into 0 plen else Cstruct.create_unsafe plen
  in
  Cstruct.blit_from_bytes p 0 cs 0 plen;
  cs

let peek_frag cs =
  match Codec.decode frag_prefix cs 0 with
  | Ok ((1, (dir, xid, total, offset), header, len), pos)
    when len <= max_chunk && pos + len = Cstruct.length cs ->
      Some (dir, xid, total, offset, header, Cstruct.sub cs pos len)
  | _ -> None

let peek_frag_head cs ~plain_len =
  match Codec.decode frag_prefix cs 0 with
  | Ok ((1, (dir, xid, total, offset), header, len), pos)
    when len <= max_chunk && pos + len = plain_len ->
      Some (dir, xid, total, offset, header, len, pos)
  | _ -> None

let data_header_length = 18

let data_header ~up ~session ~seq =
  let b = Bytes.create data_header_length in
  Bytes.set b 0 '\001';
  Bytes.set b 1 (if up then '\004' else '\008');
  Bytes.blit_string session 0 b 2 8;
  Bytes.set_int64_be b 10 seq;
  b

let peek_data cs =
  if
    Cstruct.length cs >= data_header_length + 16
    && Cstruct.get_uint8 cs 0 = 1
    && (Cstruct.get_uint8 cs 1 = 4 || Cstruct.get_uint8 cs 1 = 8)
  then
    Some
      ( Cstruct.get_uint8 cs 1 = 4,
        Cstruct.to_string (Cstruct.sub cs 2 8),
        Cstruct.BE.get_uint64 cs 10,
        Cstruct.shift cs data_header_length )
  else None
