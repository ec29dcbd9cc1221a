module Codec = Consort.Codec

type 'op item_ = { origin : string; rid : int; cmd : 'op Store.command }

type position = {
  epoch : int;
  seq : int;
  chain : string;
  history : (int * int) list;
  promise : int;
  member : Store_intf.membership;
}

type 'op transfer_ =
  | Snapshot of string
  | Suffix of { epoch : int; history : (int * int) list; entries : (int * 'op Store.command) list }

type 'op msg_ =
  | Order of { batch : int; items : 'op item_ list }
  | Ack of { count : int; digest : string }
  | Begin
  | Read of { mark : int }

type 'r outcome_ = Done of 'r | Unknown of string | Refused of string
type 'op request_ = { client : int64; req : int; op : 'op }
type 'r reply_ = { rreq : int; outcome : 'r outcome_ }

module type S = sig
  type op
  type response
  type item = op item_
  type msg = op msg_
  type transfer = op transfer_
  type outcome = response outcome_
  type request = op request_
  type reply = response reply_

  val encode : vid:string -> msg -> string
  (** [encode ~vid m]: [m] as made in view [vid]; a message that reaches a member in another view
      (one made while the view changed goes out in the next) is ignored there. *)

  val decode : string -> (string * msg, string) result
  val encode_position : position -> string
  val decode_position : string -> (position, string) result
  val encode_transfer : transfer -> string
  val decode_transfer : string -> (transfer, string) result
  val pp_outcome : outcome Fmt.t
  val max_frame : int
  val frame_request : request -> string
  val frame_reply : reply -> string

  val read_frame : Buffer.t -> (string option, string) result
  (** [read_frame b] takes one whole frame's version and body out of the front of [b] if there is
      one; [Error] if the length is over [max_frame]. *)

  val decode_request : string -> (request, string) result
  val decode_reply : string -> (reply, string) result
end

module Make (M : Rsm.MACHINE) = struct
  type op = M.op
  type response = M.response

  module Store = Store.Make (M)

  type item = M.op item_
  type transfer = M.op transfer_
  type msg = M.op msg_
  type outcome = M.response outcome_
  type request = M.op request_
  type reply = M.response reply_

  let version = '\003'

  let item_codec =
    Codec.map ~name:"kv-item"
      (fun i -> (i.origin, i.rid, i.cmd))
      (fun (origin, rid, cmd) -> { origin; rid; cmd })
      (Codec.tup3 (Codec.string ~max:256 ()) Codec.varint Store.cmd_codec)

  let history_codec = Codec.list ~max:64 (Codec.pair Codec.varint Codec.varint)

  let member_codec =
    Codec.union "kv-member"
      [
        Codec.case 0 "fresh" Codec.unit
          (function Store_intf.Fresh -> Some () | _ -> None)
          (fun () -> Store_intf.Fresh);
        Codec.case 1 "member" (Codec.string ~max:256 ())
          (function Store_intf.Member c -> Some c | _ -> None)
          (fun c -> Store_intf.Member c);
        Codec.case 2 "joining" Codec.unit
          (function Store_intf.Joining -> Some () | _ -> None)
          (fun () -> Store_intf.Joining);
        Codec.case 3 "legacy" Codec.unit
          (function Store_intf.Legacy -> Some () | _ -> None)
          (fun () -> Store_intf.Legacy);
      ]

  let position_codec =
    Codec.map ~name:"kv-position"
      (fun p -> (((p.epoch, p.promise), p.seq, p.chain, p.history), p.member))
      (fun (((epoch, promise), seq, chain, history), member) ->
        { epoch; seq; chain; history; promise; member })
      (Codec.pair
         (Codec.tup4
            (Codec.pair Codec.varint Codec.varint)
            Codec.varint (Codec.string ~max:16 ()) history_codec)
         member_codec)

  let transfer_codec =
    Codec.union "kv-transfer"
      [
        Codec.case 0 "snapshot"
          (Codec.string ~max:(256 * 1024 * 1024) ())
          (function Snapshot s -> Some s | _ -> None)
          (fun s -> Snapshot s);
        Codec.case 1 "suffix"
          (Codec.tup3 Codec.varint history_codec (Codec.list ~max:1_000_000 Store.entry_codec))
          (function
            | Suffix { epoch; history; entries } -> Some (epoch, history, entries) | _ -> None)
          (fun (epoch, history, entries) -> Suffix { epoch; history; entries });
      ]

  let msg_codec =
    Codec.union "kv-msg"
      [
        Codec.case 1 "order"
          (Codec.pair Codec.varint (Codec.list ~max:100_000 item_codec))
          (function Order { batch; items } -> Some (batch, items) | _ -> None)
          (fun (batch, items) -> Order { batch; items });
        Codec.case 3 "ack"
          (Codec.pair Codec.varint (Codec.string ~max:16 ()))
          (function Ack { count; digest } -> Some (count, digest) | _ -> None)
          (fun (count, digest) -> Ack { count; digest });
        Codec.case 5 "begin" Codec.unit (function Begin -> Some () | _ -> None) (fun () -> Begin);
        Codec.case 7 "read" Codec.varint
          (function Read { mark } -> Some mark | _ -> None)
          (fun mark -> Read { mark });
      ]

  let tagged = Codec.pair (Codec.string ~max:256 ()) msg_codec
  let encode ~vid m = String.make 1 version ^ Codec.encode_string tagged (vid, m)

  let versioned codec s =
    if s = "" then Error "empty message"
    else if s.[0] <> version then
      Error
        (Printf.sprintf "message version %d, this replica speaks %d"
           (Char.code s.[0])
           (Char.code version))
    else
      match Codec.decode_string codec (String.sub s 1 (String.length s - 1)) with
      | Ok m -> Ok m
      | Error e -> Error (Fmt.str "%a" Codec.pp_error e)

  let decode s = versioned tagged s
  let encode_position p = String.make 1 version ^ Codec.encode_string position_codec p
  let decode_position s = versioned position_codec s
  let encode_transfer x = String.make 1 version ^ Codec.encode_string transfer_codec x
  let decode_transfer s = versioned transfer_codec s

  let pp_outcome ppf = function
    | Done r -> M.pp_response ppf r
    | Unknown r -> Fmt.pf ppf "unknown: %s" r
    | Refused r -> Fmt.pf ppf "error: %s" r

  let max_frame = (1024 * 1024) + 64

  let request_codec =
    Codec.map ~name:"kv-request"
      (fun r -> (r.client, r.req, r.op))
      (fun (client, req, op) -> { client; req; op })
      (Codec.tup3 Codec.int64 Codec.varint M.op_codec)

  let outcome_codec =
    Codec.union "kv-outcome"
      [
        Codec.case 0 "done" M.response_codec
          (function Done r -> Some r | _ -> None)
          (fun r -> Done r);
        Codec.case 1 "unknown" (Codec.string ~max:4096 ())
          (function Unknown r -> Some r | _ -> None)
          (fun r -> Unknown r);
        Codec.case 2 "refused" (Codec.string ~max:4096 ())
          (function Refused r -> Some r | _ -> None)
          (fun r -> Refused r);
      ]

  let reply_codec =
    Codec.map ~name:"kv-reply"
      (fun r -> (r.rreq, r.outcome))
      (fun (rreq, outcome) -> { rreq; outcome })
      (Codec.pair Codec.varint outcome_codec)

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
      let len =
        (Char.code s.[0] lsl 24)
        lor (Char.code s.[1] lsl 16)
        lor (Char.code s.[2] lsl 8)
        lor Char.code s.[3]
      in
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
    else if f.[0] <> version then
      Error
        (Printf.sprintf "protocol version %d, this side speaks %d"
           (Char.code f.[0])
           (Char.code version))
    else
      match Codec.decode_string c (String.sub f 1 (String.length f - 1)) with
      | Ok v -> Ok v
      | Error e -> Error (Fmt.str "%a" Codec.pp_error e)

  let decode_request f = decode_with request_codec f
  let decode_reply f = decode_with reply_codec f
end

include Make (Machine.Rsm)
