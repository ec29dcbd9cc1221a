open Consort

let src = Logs.Src.create "consort.frag" ~doc:"Frag layer: fragmentation and reassembly"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let size = "frag.size"
  let max_message = "frag.max_message"

  let () =
    Params.register size (Params.Int 60_000)
      ~doc:"bytes of payload per fragment, below the largest UDP datagram less lower headers";
    Params.register max_message
      (Params.Int (64 lsl 20))
      ~doc:"largest message sent or reassembled, in bytes"
end

let contract = Contract.v "frag" ~doc:"messages of any size up to frag.max_message, casts and sends"

module L = struct
  type header = Whole | First of { length : int } | More of { index : int }

  let name = "frag"

  let codec =
    Codec.(
      union "frag"
        [
          case 0 "whole" unit (function Whole -> Some () | _ -> None) (fun () -> Whole);
          case 1 "first" varint
            (function First { length } -> Some length | _ -> None)
            (fun length -> First { length });
          case 2 "more" varint
            (function More { index } -> Some index | _ -> None)
            (fun index -> More { index });
        ])

  let pp_header ppf = function
    | Whole -> Fmt.string ppf "whole"
    | First { length } -> Fmt.pf ppf "first(of %d bytes)" length
    | More { index } -> Fmt.pf ppf "more(%d)" index

  let provides = [ contract ]
  let requires = [ Contract.reliable_cast; Contract.reliable_send ]

  (* A message being put together from one origin's fragments. *)
  type assembly = {
    length : int; (* of the whole message *)
    mutable got : int;
    mutable next : int; (* index of the fragment expected next *)
    mutable parts : Iovecs.t list; (* newest first *)
  }

  type t = {
    out : header Layer.out;
    pool : Pool.t;
    n : int;
    size : int;
    max_message : int;
    casts : assembly option array; (* by origin *)
    sends : assembly option array;
    pending : (Event.dst * header * Msg.t) Queue.t;
    mutable draining : bool;
    mutable held : int;
    mutable stopped : bool;
    mutable fragmented : int;
    mutable fragments : int;
    mutable reassembled : int;
    mutable refused : int;
    mutable oversize : int;
    mutable out_of_order : int;
    mutable malformed : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      pool = ctx.pool;
      n;
      size = max 1 (Params.int ctx.params Param.size);
      max_message = max 0 (Params.int ctx.params Param.max_message);
      casts = Array.make n None;
      sends = Array.make n None;
      pending = Queue.create ();
      draining = false;
      held = 0;
      stopped = false;
      fragmented = 0;
      fragments = 0;
      reassembled = 0;
      refused = 0;
      oversize = 0;
      out_of_order = 0;
      malformed = 0;
    }

  (* Sends what is pending, unless an outer call is already doing so. *)
  let drain t =
    if not t.draining then begin
      t.draining <- true;
      Fun.protect
        ~finally:(fun () -> t.draining <- false)
        (fun () ->
          while not (Queue.is_empty t.pending) do
            let dst, h, m = Queue.pop t.pending in
            if t.stopped then Msg.release m else t.out.dn dst h m
          done)
    end

  (* All of [msg]'s bytes as iovecs: its body, behind a copy of headers
     that layers above may have pushed. *)
  let contents t msg =
    let buf, off, len = Msg.headers msg in
    let body = Msg.body msg in
    if len = 0 then body else Pool.of_string t.pool (Bytes.sub_string buf off len) :: body

  let fragment t dst msg len =
    let whole = contents t msg in
    Msg.release msg;
    t.fragmented <- t.fragmented + 1;
    let rec cut off index =
      if off < len then begin
        let k = min t.size (len - off) in
        let h = if index = 0 then First { length = len } else More { index } in
        t.fragments <- t.fragments + 1;
        Queue.push (dst, h, Msg.create (Iovecs.sub whole ~off ~len:k)) t.pending;
        cut (off + k) (index + 1)
      end
    in
    cut 0 0;
    Iovecs.release whole;
    drain t

  let dn t dst msg =
    if t.stopped then Msg.release msg
    else
      let len = Msg.length msg in
      if len <= t.size then
        if t.draining then Queue.push (dst, Whole, msg) t.pending else t.out.dn dst Whole msg
      else if len > t.max_message then begin
        t.refused <- t.refused + 1;
        Log.err (fun m ->
            m "refused a %a of %d bytes, over the limit of %d (%s)" Event.pp_dst dst len
              t.max_message Param.max_message);
        Msg.release msg
      end
      else fragment t dst msg len

  let slots t = function
    | Event.Cast_from o when o >= 0 && o < t.n -> Some (t.casts, o)
    | Event.Send_from o when o >= 0 && o < t.n -> Some (t.sends, o)
    | _ -> None

  let discard t slots o =
    match slots.(o) with
    | None -> ()
    | Some a ->
        slots.(o) <- None;
        t.held <- t.held - a.got;
        List.iter Iovecs.release a.parts

  (* A partial message from [o] cut short by a fragment that cannot
     belong to it. *)
  let interrupted t src slots o =
    if slots.(o) <> None then begin
      t.out_of_order <- t.out_of_order + 1;
      Log.debug (fun m -> m "%a: partial message dropped" Event.pp_src src);
      discard t slots o
    end

  let drop src h msg why =
    Log.debug (fun m -> m "%a: dropped %a: %s" Event.pp_src src pp_header h why);
    Msg.release msg

  let first t src slots o length msg =
    interrupted t src slots o;
    if length > t.max_message then begin
      t.oversize <- t.oversize + 1;
      drop src (First { length }) msg "over the message limit"
    end
    else
      let body = Msg.body msg in
      Msg.release msg;
      let k = Iovecs.length body in
      if k = 0 || k >= length then begin
        t.malformed <- t.malformed + 1;
        Log.debug (fun m ->
            m "%a: first fragment of %d bytes for a message of %d" Event.pp_src src k length);
        Iovecs.release body
      end
      else begin
        t.held <- t.held + k;
        slots.(o) <- Some { length; got = k; next = 1; parts = [ body ] }
      end

  let more t src slots o index msg =
    match slots.(o) with
    | None ->
        t.out_of_order <- t.out_of_order + 1;
        drop src (More { index }) msg "no message being reassembled"
    | Some a when index <> a.next ->
        t.out_of_order <- t.out_of_order + 1;
        (* An index already seen leaves the message whole; a gap ruins it. *)
        if index > a.next then discard t slots o;
        drop src (More { index }) msg (Printf.sprintf "expected fragment %d" a.next)
    | Some a ->
        let body = Msg.body msg in
        Msg.release msg;
        let k = Iovecs.length body in
        if k = 0 || a.got + k > a.length then begin
          t.malformed <- t.malformed + 1;
          Log.debug (fun m ->
              m "%a: fragment %d of %d bytes overruns %d of %d" Event.pp_src src index k a.got
                a.length);
          Iovecs.release body;
          discard t slots o
        end
        else begin
          a.got <- a.got + k;
          a.next <- index + 1;
          a.parts <- body :: a.parts;
          t.held <- t.held + k;
          if a.got = a.length then begin
            slots.(o) <- None;
            t.held <- t.held - a.length;
            t.reassembled <- t.reassembled + 1;
            t.out.up src (Msg.create (List.concat (List.rev a.parts)))
          end
        end

  let up t src h msg =
    if t.stopped then Msg.release msg
    else
      match slots t src with
      | None ->
          t.malformed <- t.malformed + 1;
          drop src h msg "invalid source"
      | Some (slots, o) -> (
          match h with
          | Whole ->
              interrupted t src slots o;
              t.out.up src msg
          | First { length } -> first t src slots o length msg
          | More { index } -> more t src slots o index msg)

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Stop ->
        t.stopped <- true;
        for o = 0 to t.n - 1 do
          discard t t.casts o;
          discard t t.sends o
        done;
        Queue.iter (fun (_, _, m) -> Msg.release m) t.pending;
        Queue.clear t.pending
    | _ -> ());
    t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("fragmented", t.fragmented);
      ("fragments", t.fragments);
      ("reassembled", t.reassembled);
      ("refused", t.refused);
      ("oversize", t.oversize);
      ("out_of_order", t.out_of_order);
      ("malformed", t.malformed);
      ("reassembling", t.held);
    ]
end

(* The common case of a cast: within one fragment (the layered length
   counts the headers of the layers above), nothing waiting to go. *)
module F = struct
  include L

  let cast =
    {
      Layer.nfields = 0;
      live = None;
      up_live = false;
      length = true;
      framed = false;
      size =
        (let n = Codec.size codec Whole in
         fun _ _ -> n);
      dn_ok =
        (fun t dst len -> (not t.stopped) && (not t.draining) && dst == Event.Cast && len <= t.size);
      dn_fast = Layer.nothing_dn_fast;
      dn_after = Layer.nothing_dn_after;
      up_ok =
        (fun t src _ _ _ ->
          (not t.stopped) && match src with Event.Cast_from o -> o >= 0 && o < t.n | _ -> false);
      up_fast =
        (fun t src _ _ ~layered:_ _ _ ->
          (match src with Event.Cast_from o -> interrupted t src t.casts o | _ -> ());
          src);
      up_after = Layer.nothing_up_after;
      expand = (fun _ _ -> Whole);
    }

  (* A send: the same, reassembled apart from casts. *)
  let send =
    {
      cast with
      dn_ok =
        (fun t dst len ->
          (not t.stopped) && (not t.draining)
          && (match dst with Event.Send _ -> true | Event.Cast -> false)
          && len <= t.size);
      up_ok =
        (fun t src _ _ _ ->
          (not t.stopped) && match src with Event.Send_from o -> o >= 0 && o < t.n | _ -> false);
      up_fast =
        (fun t src _ _ ~layered:_ _ _ ->
          (match src with Event.Send_from o -> interrupted t src t.sends o | _ -> ());
          src);
    }

  let state t =
    let slot ppf = function
      | None -> Fmt.string ppf "-"
      | Some a -> Fmt.pf ppf "%d/%d@%d" a.got a.length a.next
    in
    Fmt.str "stopped %b draining %b pending %d; casts %a; sends %a; %a" t.stopped t.draining
      (Queue.length t.pending)
      Fmt.(array ~sep:sp slot)
      t.casts
      Fmt.(array ~sep:sp slot)
      t.sends
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
