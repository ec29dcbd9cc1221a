module Codec = Consort.Codec

type item = { origin : string; rid : int; cmd : Store.cmd }
type position = { epoch : int; seq : int; chain : string; history : (int * int) list }
type transfer = Snapshot of string | Suffix of { epoch : int; history : (int * int) list; entries : (int * Store.cmd) list }

type msg = Order of { batch : int; items : item list } | Ack of int | Begin

let version = '\002'

let item_codec =
  Codec.map ~name:"kv-item"
    (fun i -> (i.origin, i.rid, i.cmd))
    (fun (origin, rid, cmd) -> { origin; rid; cmd })
    (Codec.tup3 (Codec.string ~max:256 ()) Codec.varint Store.cmd_codec)

let history_codec = Codec.list ~max:64 (Codec.pair Codec.varint Codec.varint)

let position_codec =
  Codec.map ~name:"kv-position"
    (fun p -> (p.epoch, p.seq, p.chain, p.history))
    (fun (epoch, seq, chain, history) -> { epoch; seq; chain; history })
    (Codec.tup4 Codec.varint Codec.varint (Codec.string ~max:16 ()) history_codec)

let transfer_codec =
  Codec.union "kv-transfer"
    [
      Codec.case 0 "snapshot" (Codec.string ~max:(256 * 1024 * 1024) ()) (function Snapshot s -> Some s | _ -> None) (fun s -> Snapshot s);
      Codec.case 1 "suffix"
        (Codec.tup3 Codec.varint history_codec (Codec.list ~max:1_000_000 Store.entry_codec))
        (function Suffix { epoch; history; entries } -> Some (epoch, history, entries) | _ -> None)
        (fun (epoch, history, entries) -> Suffix { epoch; history; entries });
    ]

let msg_codec =
  Codec.union "kv-msg"
    [
      Codec.case 1 "order" (Codec.pair Codec.varint (Codec.list ~max:100_000 item_codec))
        (function Order { batch; items } -> Some (batch, items) | _ -> None)
        (fun (batch, items) -> Order { batch; items });
      Codec.case 2 "ack" Codec.varint (function Ack b -> Some b | _ -> None) (fun b -> Ack b);
      Codec.case 5 "begin" Codec.unit (function Begin -> Some () | _ -> None) (fun () -> Begin);
    ]

let tagged = Codec.pair (Codec.string ~max:256 ()) msg_codec
let encode ~vid m = String.make 1 version ^ Codec.encode_string tagged (vid, m)

let versioned codec s =
  if s = "" then Error "empty message"
  else if s.[0] <> version then Error (Printf.sprintf "message version %d, this replica speaks %d" (Char.code s.[0]) (Char.code version))
  else
    match Codec.decode_string codec (String.sub s 1 (String.length s - 1)) with
    | Ok m -> Ok m
    | Error e -> Error (Fmt.str "%a" Codec.pp_error e)

let decode s = versioned tagged s
let encode_position p = String.make 1 version ^ Codec.encode_string position_codec p
let decode_position s = versioned position_codec s
let encode_transfer x = String.make 1 version ^ Codec.encode_string transfer_codec x
let decode_transfer s = versioned transfer_codec s

type outcome = Done of Op.response | Unknown of string | Refused of string

let pp_outcome ppf = function
  | Done r -> Op.pp_response ppf r
  | Unknown r -> Fmt.pf ppf "unknown: %s" r
  | Refused r -> Fmt.pf ppf "error: %s" r

type request = { client : int64; req : int; op : Op.t }
type reply = { rreq : int; outcome : outcome }

let max_frame = (1024 * 1024) + 64

let request_codec =
  Codec.map ~name:"kv-request"
    (fun r -> (r.client, r.req, r.op))
    (fun (client, req, op) -> { client; req; op })
    (Codec.tup3 Codec.int64 Codec.varint Op.codec)

let outcome_codec =
  Codec.union "kv-outcome"
    [
      Codec.case 0 "done" Op.response_codec (function Done r -> Some r | _ -> None) (fun r -> Done r);
      Codec.case 1 "unknown" (Codec.string ~max:4096 ()) (function Unknown r -> Some r | _ -> None) (fun r -> Unknown r);
      Codec.case 2 "refused" (Codec.string ~max:4096 ()) (function Refused r -> Some r | _ -> None) (fun r -> Refused r);
    ]

let reply_codec =
  Codec.map ~name:"kv-reply" (fun r -> (r.rreq, r.outcome)) (fun (rreq, outcome) -> { rreq; outcome }) (Codec.pair Codec.varint outcome_codec)

let frame body =
  let len = String.length body + 1 in
  let b = Bytes.create (len + 4) in
  Bytes.set b 0 (Char.chr ((len lsr 24) land 0xff));
  Bytes.set b 1 (Char.chr ((len lsr 16) land 0xff));
  Bytes.set b 2 (Char.chr ((len lsr 8) land 0xff));
  Bytes.set b 3 (Char.chr (len land 0xff));
  Bytes.set b 4 version;
  Bytes.blit_string body 0 b 5 (String.length body);
  Bytes.unsafe_to_string b

let frame_request r = frame (Codec.encode_string request_codec r)
let frame_reply r = frame (Codec.encode_string reply_codec r)

let read_frame b =
  if Buffer.length b < 4 then Ok None
  else
    let s = Buffer.sub b 0 4 in
    let len = (Char.code s.[0] lsl 24) lor (Char.code s.[1] lsl 16) lor (Char.code s.[2] lsl 8) lor Char.code s.[3] in
    if len > max_frame then Error (Printf.sprintf "frame of %d bytes, over %d" len max_frame)
    else if len < 1 then Error "empty frame"
    else if Buffer.length b < 4 + len then Ok None
    else
      let f = Buffer.sub b 4 len in
      let rest = Buffer.sub b (4 + len) (Buffer.length b - 4 - len) in
      Buffer.clear b;
      Buffer.add_string b rest;
      Ok (Some f)

let decode_with c f =
  if f = "" then Error "empty frame"
  else if f.[0] <> version then Error (Printf.sprintf "protocol version %d, this side speaks %d" (Char.code f.[0]) (Char.code version))
  else
    match Codec.decode_string c (String.sub f 1 (String.length f - 1)) with
    | Ok v -> Ok v
    | Error e -> Error (Fmt.str "%a" Codec.pp_error e)

let decode_request f = decode_with request_codec f
let decode_reply f = decode_with reply_codec f
