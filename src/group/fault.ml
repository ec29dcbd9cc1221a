open Consort

let src =
  Logs.Src.create "consort.fault"
    ~doc:"Fault layers: datagrams dropped, delayed, duplicated, partitioned"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let seed = "fault.seed"
  let drop = "drop.rate"
  let dup = "dup.rate"
  let delay = "delay.rate"
  let delay_min = "delay.min"
  let delay_max = "delay.max"
  let delay_queue = "delay.queue"
  let partition = "partition.sets"

  let () =
    Params.register seed (Params.Int 0) ~min:(Params.Int 0)
      ~max:(Params.Int (1 lsl 40))
      ~doc:
        "fault layers: the seed of their choices (with the view and the member's rank); 0: the \
         stack's own generator";
    Params.register drop (Params.Float 0.) ~min:(Params.Float 0.) ~max:(Params.Float 1.)
      ~doc:"fault layer drop: the fraction of received datagrams dropped";
    Params.register dup (Params.Float 0.) ~min:(Params.Float 0.) ~max:(Params.Float 1.)
      ~doc:"fault layer dup: the fraction of received datagrams delivered twice";
    Params.register delay (Params.Float 0.) ~min:(Params.Float 0.) ~max:(Params.Float 1.)
      ~doc:
        "fault layer delay: the fraction of received datagrams held for delay.min to delay.max (so \
         reordered)";
    Params.register delay_min
      (Params.Time (Time.of_ms 1))
      ~min:(Params.Time (Time.of_ms 0))
      ~max:(Params.Time (Time.of_sec 60.))
      ~doc:"fault layer delay: the shortest delay";
    Params.register delay_max
      (Params.Time (Time.of_ms 50))
      ~min:(Params.Time (Time.of_ms 0))
      ~max:(Params.Time (Time.of_sec 60.))
      ~doc:"fault layer delay: the longest delay";
    Params.register delay_queue (Params.Int 4096) ~min:(Params.Int 1) ~max:(Params.Int 1_000_000)
      ~doc:
        "fault layer delay: datagrams held at most; beyond, a datagram that would be held is \
         dropped";
    Params.register partition (Params.String "")
      ~doc:
        "fault layer partition: sets of members that hear only each other, as \
         ADDR:PORT+ADDR:PORT/ADDR:PORT (or member ids); members named in no set form one more; \
         empty: no partition"
end

let rng (ctx : Layer.ctx) =
  match Params.int ctx.params Param.seed with
  | 0 -> ctx.rng
  | s -> Rng.create (Hashtbl.hash (s, ctx.view.id, ctx.view.rank))

(* Datagrams as they come from Bottom: each fault layer adds an empty
   header and acts on what it receives. *)
module Base = struct
  type header = unit

  let codec = Codec.unit
  let pp_header ppf () = Fmt.string ppf "-"
  let provides = [ Contract.datagram ]
  let requires = [ Contract.datagram ]
end

module Drop = struct
  include Base

  let name = "drop"

  type t = {
    out : header Layer.out;
    rng : Rng.t;
    rate : float;
    mutable dropped : int;
    mutable passed : int;
  }

  let create ctx out =
    { out; rng = rng ctx; rate = Params.float ctx.params Param.drop; dropped = 0; passed = 0 }

  let dn t dst msg = t.out.dn dst () msg

  let up t src () msg =
    if t.rate > 0. && Rng.chance t.rng t.rate then (
      t.dropped <- t.dropped + 1;
      Msg.release msg)
    else (
      t.passed <- t.passed + 1;
      t.out.up src msg)

  let up_ctl t e = t.out.up_ctl e
  let dn_ctl t e = t.out.dn_ctl e
  let timer _ _ = ()
  let counters t = [ ("dropped", t.dropped); ("passed", t.passed) ]
end

module Dup = struct
  include Base

  let name = "dup"

  type t = {
    out : header Layer.out;
    rng : Rng.t;
    pool : Pool.t;
    rate : float;
    mutable duplicated : int;
  }

  let create (ctx : Layer.ctx) out =
    {
      out;
      rng = rng ctx;
      pool = ctx.pool;
      rate = Params.float ctx.params Param.dup;
      duplicated = 0;
    }

  let dn t dst msg = t.out.dn dst () msg

  let up t src () msg =
    if t.rate > 0. && Rng.chance t.rng t.rate then begin
      t.duplicated <- t.duplicated + 1;
      (* A copy of its own: the layers above may keep either. *)
      let copy = Msg.of_iovec (Msg.to_iovec t.pool msg) in
      t.out.up src msg;
      t.out.up src copy
    end
    else t.out.up src msg

  let up_ctl t e = t.out.up_ctl e
  let dn_ctl t e = t.out.dn_ctl e
  let timer _ _ = ()
  let counters t = [ ("duplicated", t.duplicated) ]
end

module Delay = struct
  include Base

  let name = "delay"

  module Q = Map.Make (struct
    type t = Time.t * int

    let compare = compare
  end)

  type t = {
    out : header Layer.out;
    rng : Rng.t;
    now : unit -> Time.t;
    rate : float;
    lo : Time.t;
    span : int;
    max : int;
    mutable q : (Event.src * Msg.t) Q.t;
    mutable n : int;
    mutable next : int;
    mutable stopped : bool;
    mutable delayed : int;
    mutable overflow : int;
  }

  let create (ctx : Layer.ctx) out =
    let lo = Params.time ctx.params Param.delay_min
    and hi = Params.time ctx.params Param.delay_max in
    {
      out;
      rng = rng ctx;
      now = ctx.now;
      rate = Params.float ctx.params Param.delay;
      lo = min lo hi;
      span = max lo hi - min lo hi;
      max = Params.int ctx.params Param.delay_queue;
      q = Q.empty;
      n = 0;
      next = 0;
      stopped = false;
      delayed = 0;
      overflow = 0;
    }

  let dn t dst msg = t.out.dn dst () msg

  let up t src () msg =
    if t.stopped then Msg.release msg
    else if t.rate > 0. && Rng.chance t.rng t.rate then
      if t.n >= t.max then (
        t.overflow <- t.overflow + 1;
        Msg.release msg)
      else begin
        let d = if t.span <= 0 then 0 else int_of_float (Rng.float t.rng (float_of_int t.span)) in
        let at = Time.add (t.now ()) (Time.add t.lo (Time.of_ns d)) in
        t.q <- Q.add (at, t.next) (src, msg) t.q;
        t.next <- t.next + 1;
        t.n <- t.n + 1;
        t.delayed <- t.delayed + 1;
        t.out.alarm (fst (fst (Q.min_binding t.q)))
      end
    else t.out.up src msg

  let rec timer t now =
    if not t.stopped then
      match Q.min_binding_opt t.q with
      | Some (((at, _) as k), (src, msg)) when at <= now ->
          t.q <- Q.remove k t.q;
          t.n <- t.n - 1;
          t.out.up src msg;
          timer t now
      | Some ((at, _), _) -> t.out.alarm at
      | None -> ()

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Stop ->
        t.stopped <- true;
        Q.iter (fun _ (_, m) -> Msg.release m) t.q;
        t.q <- Q.empty;
        t.n <- 0
    | _ -> ());
    t.out.dn_ctl e

  let counters t = [ ("delayed", t.delayed); ("held", t.n); ("overflow", t.overflow) ]
end

(* [partition.sets]: "a+b/c" is [[a; b]; [c]]. *)
let parse_sets s =
  if String.trim s = "" then []
  else
    String.split_on_char '/' s
    |> List.map (fun set ->
           String.split_on_char '+' set |> List.map String.trim |> List.filter (( <> ) ""))

(* A member id is ADDR:PORT#INCARNATION: a set names it by either. *)
let names item member =
  item = member
  || String.length member > String.length item
     && String.sub member 0 (String.length item) = item
     && member.[String.length item] = '#'

let set_of sets member =
  let rec go i = function
    | [] -> -1
    | s :: rest -> if List.exists (fun item -> names item member) s then i else go (i + 1) rest
  in
  go 0 sets

module Partition = struct
  include Base

  let name = "partition"

  type t = { out : header Layer.out; apart : bool array; mutable cut : int }

  let create (ctx : Layer.ctx) out =
    let sets = parse_sets (Params.string ctx.params Param.partition) in
    let mine = set_of sets ctx.view.members.(ctx.view.rank) in
    {
      out;
      apart = Array.map (fun m -> sets <> [] && set_of sets m <> mine) ctx.view.members;
      cut = 0;
    }

  let dn t dst msg = t.out.dn dst () msg

  let up t src () msg =
    match src with
    | (Event.Cast_from o | Event.Send_from o) when o >= 0 && o < Array.length t.apart && t.apart.(o)
      ->
        t.cut <- t.cut + 1;
        Msg.release msg
    | _ -> t.out.up src msg

  let up_ctl t e = t.out.up_ctl e
  let dn_ctl t e = t.out.dn_ctl e
  let timer _ _ = ()
  let counters t = [ ("cut", t.cut) ]
end

let drop : Layer.t = (module Drop)
let dup : Layer.t = (module Dup)
let delay : Layer.t = (module Delay)
let partition : Layer.t = (module Partition)
