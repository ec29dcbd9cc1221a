open Consort

let src = Logs.Src.create "consort.bottom" ~doc:"Bottom layer: group and origin filtering"

module Log = (val Logs.src_log src : Logs.LOG)

let stack_param = "bottom.stack"

let () =
  Params.register stack_param (Params.String "")
    ~doc:
      "the identity of the stack (set by the group runtime): part of the stamp, so stacks that \
       differ do not talk"

(* FNV-1a, 32 bits, as View.stamp. *)
let fnv h s =
  let h = ref h in
  String.iter (fun c -> h := !h lxor Char.code c * 0x01000193 land 0xffff_ffff) s;
  !h

let stamp view ~stack =
  if stack = "" then View.stamp view else fnv (View.stamp view) ("\000" ^ stack)

module L = struct
  (* A send names its destination's rank, which with the stamp (of this
     group, view and stack) names one endpoint: under a seal that is
     authenticated, so a send captured on its way to one member and
     replayed to another is dropped there ([misdirected]). *)
  type header =
    | Cast of { group : int; origin : int }
    | Send of { group : int; origin : int; dst : int }

  let magic = 0xC1
  let name = "bottom"

  let codec =
    Codec.conv ~name:"bottom"
      (* The last field: 0 for a cast, 1 + the destination's rank for a
         send. *)
      (function
        | Cast { group; origin } -> (magic, group, origin, 0)
        | Send { group; origin; dst } -> (magic, group, origin, dst + 1))
      (fun (m, group, origin, kind) ->
        if m <> magic then Error (Printf.sprintf "magic 0x%02x, expected 0x%02x" m magic)
        else if kind = 0 then Ok (Cast { group; origin })
        else Ok (Send { group; origin; dst = kind - 1 }))
      Codec.(tup4 uint8 uint32 varint varint)

  let pp_header ppf = function
    | Cast { group; origin } -> Fmt.pf ppf "cast(group %08x, from %d)" group origin
    | Send { group; origin; dst } -> Fmt.pf ppf "send(group %08x, from %d to %d)" group origin dst

  let provides = [ Contract.datagram ]
  let requires = [ Contract.net ]

  type t = {
    out : header Layer.out;
    group : int;
    rank : int;
    nmembers : int;
    mutable stopped : bool;
    mutable wrong_group : int;
    mutable bad_rank : int;
    mutable from_self : int;
    mutable not_raw : int;
    mutable bad_dst : int;
    mutable misdirected : int; (* sends naming another rank *)
    froms : Event.src array; (* [Cast_from r] for each rank, made once (the fused path) *)
    sfroms : Event.src array; (* [Send_from r], the same *)
  }

  let create (ctx : Layer.ctx) out =
    {
      out;
      group = stamp ctx.view ~stack:(Params.string ctx.params stack_param);
      rank = ctx.view.rank;
      nmembers = View.nmembers ctx.view;
      stopped = false;
      wrong_group = 0;
      bad_rank = 0;
      from_self = 0;
      not_raw = 0;
      bad_dst = 0;
      misdirected = 0;
      froms = Array.init (View.nmembers ctx.view) (fun r -> Event.Cast_from r);
      sfroms = Array.init (View.nmembers ctx.view) (fun r -> Event.Send_from r);
    }

  let drop msg why =
    Log.debug (fun m -> m "dropped %a: %t" Msg.pp msg why);
    Msg.release msg

  let up t (src : Event.src) h msg =
    let group, origin, cast, dst =
      match h with
      | Cast { group; origin } -> (group, origin, true, t.rank)
      | Send { group; origin; dst } -> (group, origin, false, dst)
    in
    if t.stopped then Msg.release msg
    else if src <> Event.Raw then begin
      t.not_raw <- t.not_raw + 1;
      drop msg (fun ppf -> Fmt.pf ppf "came from %a, not the transport" Event.pp_src src)
    end
    else if group <> t.group then begin
      t.wrong_group <- t.wrong_group + 1;
      drop msg (fun ppf -> Fmt.pf ppf "group/view stamp %08x is not ours (%08x)" group t.group)
    end
    else if origin >= t.nmembers then begin
      t.bad_rank <- t.bad_rank + 1;
      drop msg (fun ppf -> Fmt.pf ppf "origin rank %d outside a view of %d" origin t.nmembers)
    end
    else if origin = t.rank then begin
      t.from_self <- t.from_self + 1;
      drop msg (fun ppf -> Fmt.string ppf "claims to come from this member")
    end
    else if dst <> t.rank then begin
      t.misdirected <- t.misdirected + 1;
      drop msg (fun ppf -> Fmt.pf ppf "a send to rank %d, not this member (rank %d)" dst t.rank)
    end
    else t.out.up (if cast then Event.Cast_from origin else Event.Send_from origin) msg

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Cast -> t.out.dn dst (Cast { group = t.group; origin = t.rank }) msg
      | Event.Send r when r >= 0 && r < t.nmembers && r <> t.rank ->
          t.out.dn dst (Send { group = t.group; origin = t.rank; dst = r }) msg
      | Event.Send r ->
          t.bad_dst <- t.bad_dst + 1;
          drop msg (fun ppf ->
              Fmt.pf ppf "send to rank %d (this is rank %d of %d)" r t.rank t.nmembers)

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with Event.Stop -> t.stopped <- true | _ -> ());
    t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("wrong_group", t.wrong_group);
      ("bad_rank", t.bad_rank);
      ("from_self", t.from_self);
      ("not_raw", t.not_raw);
      ("bad_dst", t.bad_dst);
      ("misdirected", t.misdirected);
    ]
end

(* The common case of a cast: this view's stamp and a rank of the view;
   the fields are the stamp and the origin. *)
module F = struct
  include L

  let cast =
    {
      Layer.nfields = 2;
      live = None;
      up_live = false;
      length = false;
      framed = true;
      size = (fun a off -> 6 + Codec.varint_size a.(off + 1));
      dn_ok = (fun t dst _ -> (not t.stopped) && dst == Event.Cast);
      dn_fast =
        (fun t _ _ _ ~layered:_ a off ->
          a.(off) <- t.group;
          a.(off + 1) <- t.rank);
      dn_after = Layer.nothing_dn_after;
      up_ok =
        (fun t src _ a off ->
          let origin = a.(off + 1) in
          (not t.stopped) && src == Event.Raw
          && a.(off) = t.group
          && origin < t.nmembers && origin <> t.rank);
      up_fast = (fun t _ _ _ ~layered:_ a off -> t.froms.(a.(off + 1)));
      up_after = Layer.nothing_up_after;
      expand = (fun a off -> Cast { group = a.(off); origin = a.(off + 1) });
    }

  (* A send: the same fields and the destination's rank, another rank of
     the view; coming up, this member's. *)
  let send =
    {
      cast with
      nfields = 3;
      size = (fun a off -> 5 + Codec.varint_size a.(off + 1) + Codec.varint_size (a.(off + 2) + 1));
      dn_ok =
        (fun t dst _ ->
          (not t.stopped)
          && match dst with Event.Send r -> r >= 0 && r < t.nmembers && r <> t.rank | _ -> false);
      dn_fast =
        (fun t dst _ _ ~layered:_ a off ->
          a.(off) <- t.group;
          a.(off + 1) <- t.rank;
          a.(off + 2) <- (match dst with Event.Send r -> r | _ -> -1));
      up_ok =
        (fun t src _ a off ->
          let origin = a.(off + 1) in
          (not t.stopped) && src == Event.Raw
          && a.(off) = t.group
          && origin < t.nmembers && origin <> t.rank
          && a.(off + 2) = t.rank);
      up_fast = (fun t _ _ _ ~layered:_ a off -> t.sfroms.(a.(off + 1)));
      expand = (fun a off -> Send { group = a.(off); origin = a.(off + 1); dst = a.(off + 2) });
    }

  let state t =
    Fmt.str "stopped %b; %a" t.stopped
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)
