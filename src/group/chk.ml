open Consort

let src =
  Logs.Src.create "consort.chk"
    ~doc:"Checking layers: FIFO, total order and virtual synchrony in a running stack"

module Log = (val Logs.src_log src : Logs.LOG)

type violation = {
  layer : string;
  member : string;
  view : string;
  what : string;
  events : string list;
}

let pp_violation ppf v =
  Fmt.pf ppf "%s: violation at %s in view %s: %s" v.layer v.member v.view v.what;
  match v.events with
  | [] -> ()
  | evs ->
      Fmt.pf ppf "; the last %d events here, oldest first:" (List.length evs);
      List.iter (fun e -> Fmt.pf ppf "@\n  %s" e) evs

let default_handler v = Log.err (fun m -> m "%a" pp_violation v)
let handler = ref default_handler
let reported = ref 0
let on_violation f = handler := f
let reset_handler () = handler := default_handler
let violations () = !reported

module Param = struct
  let history = "chk.history"
  let reports = "chk.reports"

  let () =
    Params.register history (Params.Int 32) ~min:(Params.Int 1) ~max:(Params.Int 1024)
      ~doc:"debugging layers: recent events each checking layer keeps, printed with a violation";
    Params.register reports (Params.Int 8) ~min:(Params.Int 1) ~max:(Params.Int 1_000_000)
      ~doc:
        "debugging layers: violations a checking layer reports in a view; later ones are only \
         counted"
end

(* {1 What a checking layer shares: its recent events, its reports} *)

type ev =
  | Dn of Event.dst * int  (** a message sent, with the number this layer gave it *)
  | Up of Event.src * int  (** a message delivered, with its number *)
  | Note of string

type common = {
  layer : string;
  me : string;
  rank : int;
  n : int;
  vid : string;
  now : unit -> Time.t;
  ring : (Time.t * ev) option array;
  mutable next : int;
  max_reports : int;
  mutable violations : int;
  mutable malformed : int;
}

let common layer (ctx : Layer.ctx) =
  {
    layer;
    me = ctx.view.members.(ctx.view.rank);
    rank = ctx.view.rank;
    n = View.nmembers ctx.view;
    vid = ctx.view.id;
    now = ctx.now;
    ring = Array.make (Params.int ctx.params Param.history) None;
    next = 0;
    max_reports = Params.int ctx.params Param.reports;
    violations = 0;
    malformed = 0;
  }

let note c ev =
  c.ring.(c.next mod Array.length c.ring) <- Some (c.now (), ev);
  c.next <- c.next + 1

let pp_ev ppf = function
  | Dn (d, s) -> Fmt.pf ppf "down %a #%d" Event.pp_dst d s
  | Up (s, n) -> Fmt.pf ppf "up %a #%d" Event.pp_src s n
  | Note s -> Fmt.string ppf s

let events c =
  let len = Array.length c.ring in
  let first = max 0 (c.next - len) in
  List.filter_map
    (fun i -> Option.map (fun (t, ev) -> Fmt.str "%a %a" Time.pp t pp_ev ev) c.ring.(i mod len))
    (List.init (c.next - first) (fun k -> first + k))

let violate ?(before = []) c what =
  c.violations <- c.violations + 1;
  if c.violations <= c.max_reports then begin
    incr reported;
    let evs = events c in
    let keep = max 0 (Array.length c.ring - List.length evs) in
    let before = List.filteri (fun i _ -> i >= List.length before - keep) before in
    !handler { layer = c.layer; member = c.me; view = c.vid; what; events = before @ evs }
  end

(* A 46-bit mix of a running value with a message's origin and number. *)
let mask = (1 lsl 46) - 1

let mix h a b =
  let x = h * 0x100000001b3 lxor ((a + 1) * 0x9E3779B1) lxor ((b + 7) * 0x85EBCA6B) in
  let x = x lxor (x lsr 29) in
  let x = x * 0xBF58476D1CE4E5B in
  x lxor (x lsr 32) land mask

(* {1 chk_fifo} *)

let fifo_checked = Contract.v "fifo-checked" ~doc:"FIFO delivery per origin checked (chk_fifo)"

module Fifo = struct
  type header = int

  let name = "chk_fifo"
  let codec = Codec.varint
  let pp_header ppf s = Fmt.pf ppf "#%d" s
  let provides = [ fifo_checked ]
  let requires = [ Contract.reliable_cast; Contract.reliable_send ]

  type t = {
    c : common;
    out : header Layer.out;
    mutable cast_next : int;
    send_next : int array;
    cast_exp : int array; (* the number expected next from each origin *)
    send_exp : int array;
    lost : bool array; (* a reliable layer gave up on this origin: a gap is no violation *)
    mutable checked : int;
    mutable after_loss : int;
  }

  let create ctx out =
    let c = common name ctx in
    {
      c;
      out;
      cast_next = 1;
      send_next = Array.make c.n 1;
      cast_exp = Array.make c.n 1;
      send_exp = Array.make c.n 1;
      lost = Array.make c.n false;
      checked = 0;
      after_loss = 0;
    }

  let dn t dst msg =
    let s =
      match dst with
      | Event.Cast ->
          let s = t.cast_next in
          t.cast_next <- s + 1;
          s
      | Event.Send r when r >= 0 && r < t.c.n ->
          let s = t.send_next.(r) in
          t.send_next.(r) <- s + 1;
          s
      | Event.Send _ -> 0
    in
    note t.c (Dn (dst, s));
    t.out.dn dst s msg

  let check t exp kind o s =
    let e = exp.(o) in
    t.checked <- t.checked + 1;
    if s = e then exp.(o) <- s + 1
    else if s > e && t.lost.(o) then (
      t.after_loss <- t.after_loss + 1;
      exp.(o) <- s + 1)
    else if s > e then (
      exp.(o) <- s + 1;
      violate t.c
        (Fmt.str "%s #%d from rank %d delivered while #%d was expected: %s lost or overtaken" kind s
           o e
           (if s = e + 1 then Fmt.str "#%d" e else Fmt.str "#%d to #%d" e (s - 1))))
    else
      violate t.c
        (Fmt.str "%s #%d from rank %d delivered after #%d: delivered twice or out of order" kind s o
           (e - 1))

  let up t src s msg =
    match src with
    | Event.Cast_from o when o >= 0 && o < t.c.n && s > 0 ->
        note t.c (Up (src, s));
        check t t.cast_exp "cast" o s;
        t.out.up src msg
    | Event.Send_from o when o >= 0 && o < t.c.n && s > 0 ->
        note t.c (Up (src, s));
        check t t.send_exp "send" o s;
        t.out.up src msg
    | _ ->
        t.c.malformed <- t.c.malformed + 1;
        Msg.release msg

  let up_ctl t e =
    (match e with
    | Event.Lost_message o when o >= 0 && o < t.c.n ->
        note t.c (Note (Fmt.str "messages from rank %d lost" o));
        t.lost.(o) <- true
    | _ -> ());
    t.out.up_ctl e

  let dn_ctl t e =
    (match e with Event.Stop -> note t.c (Note "stop") | _ -> ());
    t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("checked", t.checked);
      ("violations", t.c.violations);
      ("after_loss", t.after_loss);
      ("malformed", t.c.malformed);
    ]
end

(* {1 chk_total} *)

let total_checked =
  Contract.v "total-checked" ~doc:"one order of casts at every member checked (chk_total)"

(* Positions of the delivery order remembered to compare claims with, and
   claims about positions not reached yet. *)
let window = 4096
let max_pending = 1024

module Total_chk = struct
  type header =
    | Pass  (** a send *)
    | Cast of { seq : int; count : int; hash : int }
        (** a cast, its origin's number for it, and the sender's claim: the casts it had delivered
            in this view, and a hash of their order *)

  let name = "chk_total"

  let codec =
    Codec.(
      union "chk_total"
        [
          case 0 "pass" unit (function Pass -> Some () | _ -> None) (fun () -> Pass);
          case 1 "cast" (tup3 varint varint varint)
            (function Cast { seq; count; hash } -> Some (seq, count, hash) | _ -> None)
            (fun (seq, count, hash) -> Cast { seq; count; hash });
        ])

  let pp_header ppf = function
    | Pass -> Fmt.string ppf "pass"
    | Cast { seq; count; hash } -> Fmt.pf ppf "#%d after %d (%x)" seq count hash

  let provides = [ total_checked ]
  let requires = [ Total.total_order ]

  type t = {
    c : common;
    out : header Layer.out;
    mutable cast_next : int;
    mutable count : int; (* casts delivered in the regular part of the view *)
    mutable hash : int;
    prefix : int array; (* hash of the order's first k casts, at k mod window *)
    mutable pending : (int * int * int * int) list; (* count, hash, origin, seq *)
    mutable npending : int;
    mutable stopped : bool;
    mutable checked : int;
    mutable unchecked : int;
  }

  let create ctx out =
    let c = common name ctx in
    {
      c;
      out;
      cast_next = 1;
      count = 0;
      hash = 0;
      prefix = Array.make window 0;
      pending = [];
      npending = 0;
      stopped = false;
      checked = 0;
      unchecked = 0;
    }

  let dn t dst msg =
    match dst with
    | Event.Send _ ->
        note t.c (Dn (dst, 0));
        t.out.dn dst Pass msg
    | Event.Cast ->
        let seq = t.cast_next in
        t.cast_next <- seq + 1;
        note t.c (Dn (dst, seq));
        t.out.dn dst (Cast { seq; count = t.count; hash = t.hash }) msg

  (* A claim about position [k], once this member has reached it. *)
  let judge t (k, h, o, seq) =
    if t.count - k >= window then t.unchecked <- t.unchecked + 1
    else begin
      t.checked <- t.checked + 1;
      if t.prefix.(k mod window) <> h then
        violate t.c
          (Fmt.str
             "the first %d casts of the view were delivered in another order at rank %d (its claim \
              with cast #%d) than here"
             k o seq)
    end

  let claim t ((k, _, _, _) as cl) =
    if k <= t.count then judge t cl
    else if t.npending >= max_pending then t.unchecked <- t.unchecked + 1
    else (
      t.pending <- cl :: t.pending;
      t.npending <- t.npending + 1)

  let delivered t o seq =
    t.hash <- mix t.hash o seq;
    t.count <- t.count + 1;
    t.prefix.(t.count mod window) <- t.hash;
    if t.npending > 0 then begin
      let due, later = List.partition (fun (k, _, _, _) -> k <= t.count) t.pending in
      t.pending <- later;
      t.npending <- List.length later;
      List.iter (judge t) due
    end

  let up t src h msg =
    match (src, h) with
    | Event.Send_from _, Pass ->
        note t.c (Up (src, 0));
        t.out.up src msg
    | Event.Cast_from o, Cast { seq; count; hash } when o >= 0 && o < t.c.n && count >= 0 ->
        note t.c (Up (src, seq));
        (* At the end of a view, what the flush left is ordered among the
           members that go on: compared no more, only passed on. *)
        if not t.stopped then begin
          delivered t o seq;
          claim t (count, hash, o, seq)
        end;
        t.out.up src msg
    | _ ->
        t.c.malformed <- t.c.malformed + 1;
        Msg.release msg

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Stop ->
        note t.c (Note "stop");
        t.stopped <- true;
        t.unchecked <- t.unchecked + t.npending;
        t.pending <- [];
        t.npending <- 0
    | _ -> ());
    t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("checked", t.checked);
      ("unchecked", t.unchecked);
      ("violations", t.c.violations);
      ("delivered", t.count);
      ("malformed", t.c.malformed);
    ]
end

(* {1 chk_sync} *)

let sync_checked =
  Contract.v "sync-checked"
    ~doc:"members that install the same two views delivered the same casts in the first (chk_sync)"

(* What each member of this process delivered in its latest view, by its
   member id: the next view's chk_sync casts it. Bounded: past [max_members]
   ids the table starts again (the next comparisons are skipped). *)
let max_members = 4096
let last : (string, string * int * int * common) Hashtbl.t = Hashtbl.create 16

module Sync_chk = struct
  type header =
    | Pass  (** a send *)
    | Data of int  (** a cast, and its origin's number for it *)
    | Digest of { prev : string; count : int; digest : int }
        (** the casts the sender delivered in its previous view: how many, and a hash of the set *)

  let name = "chk_sync"
  let max_vid = 1024

  let codec =
    Codec.(
      union "chk_sync"
        [
          case 0 "pass" unit (function Pass -> Some () | _ -> None) (fun () -> Pass);
          case 1 "data" varint (function Data s -> Some s | _ -> None) (fun s -> Data s);
          case 2 "digest"
            (tup3 (string ~max:max_vid ()) varint varint)
            (function Digest { prev; count; digest } -> Some (prev, count, digest) | _ -> None)
            (fun (prev, count, digest) -> Digest { prev; count; digest });
        ])

  let pp_header ppf = function
    | Pass -> Fmt.string ppf "pass"
    | Data s -> Fmt.pf ppf "#%d" s
    | Digest { prev; count; digest } -> Fmt.pf ppf "digest(%s: %d, %x)" prev count digest

  let provides = [ sync_checked ]
  let requires = [ Gmp.membership ]

  type t = {
    c : common;
    out : header Layer.out;
    prev : (string * int * int) option; (* this member's previous view: id, casts, digest *)
    before : string list; (* the previous view's last events here *)
    mutable told : bool;
    mutable cast_next : int;
    mutable count : int;
    mutable digest : int;
    mutable compared : int;
    mutable skipped : int;
  }

  let record t =
    if (not (Hashtbl.mem last t.c.me)) && Hashtbl.length last >= max_members then Hashtbl.reset last;
    Hashtbl.replace last t.c.me (t.c.vid, t.count, t.digest, t.c)

  let create (ctx : Layer.ctx) out =
    let c = common name ctx in
    let prev, before =
      match Hashtbl.find_opt last c.me with
      | Some (vid, count, digest, pc) ->
          (Some (vid, count, digest), List.map (fun e -> "(view " ^ vid ^ ") " ^ e) (events pc))
      | None -> (None, [])
    in
    let t =
      {
        c;
        out;
        prev;
        before;
        told = false;
        cast_next = 1;
        count = 0;
        digest = 0;
        compared = 0;
        skipped = 0;
      }
    in
    record t;
    (* Tell the others, once the stack runs. *)
    if prev <> None && c.n > 1 then out.alarm (ctx.now ());
    t

  let timer t _ =
    match t.prev with
    | Some (prev, count, digest) when not t.told ->
        t.told <- true;
        note t.c (Note (Fmt.str "casts its digest of view %s: %d casts (%x)" prev count digest));
        t.out.dn Event.Cast (Digest { prev; count; digest }) (Msg.empty ())
    | _ -> ()

  let dn t dst msg =
    match dst with
    | Event.Send _ ->
        note t.c (Dn (dst, 0));
        t.out.dn dst Pass msg
    | Event.Cast ->
        let s = t.cast_next in
        t.cast_next <- s + 1;
        note t.c (Dn (dst, s));
        t.out.dn dst (Data s) msg

  let compare_digest t o prev count digest =
    match t.prev with
    | Some (mine, c, d) when mine = prev ->
        t.compared <- t.compared + 1;
        if c <> count || d <> digest then
          violate ~before:t.before t.c
            (Fmt.str
               "rank %d and this member installed view %s, then this view, but delivered other \
                casts in %s: %d there (digest %x), %d here (digest %x)"
               o prev prev count digest c d)
    | _ -> t.skipped <- t.skipped + 1

  let up t src h msg =
    match (src, h) with
    | Event.Send_from _, Pass ->
        note t.c (Up (src, 0));
        t.out.up src msg
    | Event.Cast_from o, Data s when o >= 0 && o < t.c.n ->
        note t.c (Up (src, s));
        (* A set: the digest does not depend on the order. *)
        t.count <- t.count + 1;
        t.digest <- (t.digest + mix 0 o s) land mask;
        record t;
        t.out.up src msg
    | Event.Cast_from o, Digest { prev; count; digest } when o >= 0 && o < t.c.n ->
        Msg.release msg;
        note t.c (Note (Fmt.str "rank %d delivered %d casts (%x) in view %s" o count digest prev));
        if o <> t.c.rank then compare_digest t o prev count digest
    | _ ->
        t.c.malformed <- t.c.malformed + 1;
        Msg.release msg

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with Event.Stop -> note t.c (Note "stop") | _ -> ());
    t.out.dn_ctl e

  let counters t =
    [
      ("compared", t.compared);
      ("skipped", t.skipped);
      ("violations", t.c.violations);
      ("delivered", t.count);
      ("malformed", t.c.malformed);
    ]
end

let reset () = Hashtbl.reset last
let fifo : Layer.t = (module Fifo)
let total : Layer.t = (module Total_chk)
let sync : Layer.t = (module Sync_chk)
