open Consort

let src = Logs.Src.create "consort.agree" ~doc:"Agree layer: safe delivery"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let ack_delay = "agree.ack_delay"

  let () =
    Params.register ack_delay (Params.Time (Time.of_ms 2))
      ~doc:"how long a member gathers casts it received before it casts what it holds to the others"
end

let safe_delivery = Contract.v "safe-delivery" ~doc:"casts delivered once every member of the view holds them"

module L = struct
  type header =
    | Pass  (** a send *)
    | Data  (** a cast *)
    | Holds of (int * int) list
        (** the entries that changed since this member's previous [Holds]:
            (origin, casts of it this member holds) *)

  let name = "agree"
  let max_entries = 4096

  let codec =
    Codec.(
      union "agree"
        [
          case 0 "pass" unit (function Pass -> Some () | _ -> None) (fun () -> Pass);
          case 1 "data" unit (function Data -> Some () | _ -> None) (fun () -> Data);
          case 2 "holds"
            (list ~max:max_entries (pair varint varint))
            (function Holds l -> Some l | _ -> None)
            (fun l -> Holds l);
        ])

  let pp_header ppf = function
    | Pass -> Fmt.string ppf "pass"
    | Data -> Fmt.string ppf "data"
    | Holds l -> Fmt.pf ppf "holds(%a)" Fmt.(list ~sep:comma (pair ~sep:(any ":") int int)) l

  let provides = [ safe_delivery ]
  let requires = [ Gmp.membership ]

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    ack_delay : Time.t;
    n : int;
    me : int;
    got : int array;  (* casts of each origin received here *)
    told : int array;  (* what this member last cast that it holds *)
    holds : int array array;  (* [holds.(m).(o)]: member [m] holds the casts of [o] below this *)
    held : (int * int * Msg.t) Queue.t;  (* origin, number, cast: in the order they came *)
    mutable ack_at : Time.t option;
    mutable synced : bool;
    mutable stopped : bool;
    mutable safe : int;
    mutable at_flush : int;
    mutable holds_sent : int;
    mutable nonsense : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      now = ctx.now;
      ack_delay = Params.time ctx.params Param.ack_delay;
      n;
      me = ctx.view.rank;
      got = Array.make n 0;
      told = Array.make n 0;
      holds = Array.make_matrix n n 0;
      held = Queue.create ();
      ack_at = None;
      synced = false;
      stopped = false;
      safe = 0;
      at_flush = 0;
      holds_sent = 0;
      nonsense = 0;
    }

  (* Every member of the view holds cast [k] (from 0) of origin [o]: the
     members suspected of failure included, so that no member that goes
     on misses a cast delivered here before the flush. *)
  let stable t o k =
    let ok = ref (t.got.(o) > k) in
    for m = 0 to t.n - 1 do
      if m <> t.me && t.holds.(m).(o) <= k then ok := false
    done;
    !ok

  (* In the order the casts came: above an ordering layer, its order. *)
  let rec deliver_stable t =
    if not t.stopped then
      match Queue.peek_opt t.held with
      | Some (o, k, _) when stable t o k ->
          let _, _, m = Queue.pop t.held in
          t.safe <- t.safe + 1;
          t.out.up (Event.Cast_from o) m;
          deliver_stable t
      | _ -> ()

  let send_holds t =
    t.ack_at <- None;
    let entries = ref [] in
    for o = t.n - 1 downto 0 do
      if t.got.(o) <> t.told.(o) then begin
        entries := (o, t.got.(o)) :: !entries;
        t.told.(o) <- t.got.(o)
      end
    done;
    if !entries <> [] && not t.stopped then begin
      t.holds_sent <- t.holds_sent + 1;
      t.out.dn Event.Cast (Holds !entries) (Msg.empty ())
    end

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | Event.Send_from _, Pass -> t.out.up src msg
      | Event.Cast_from o, Data when o >= 0 && o < t.n ->
          let k = t.got.(o) in
          t.got.(o) <- k + 1;
          Queue.add (o, k, msg) t.held;
          if t.n > 1 && t.ack_at = None then begin
            let at = t.now () + t.ack_delay in
            t.ack_at <- Some at;
            t.out.alarm at
          end;
          deliver_stable t
      | Event.Cast_from m, Holds entries
        when m >= 0 && m < t.n && m <> t.me
             && List.for_all (fun (o, k) -> o >= 0 && o < t.n && k >= t.holds.(m).(o)) entries ->
          Msg.release msg;
          List.iter (fun (o, k) -> t.holds.(m).(o) <- k) entries;
          deliver_stable t
      | _ ->
          t.nonsense <- t.nonsense + 1;
          Msg.release msg

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else match dst with Event.Send _ -> t.out.dn dst Pass msg | Event.Cast -> t.out.dn dst Data msg

  let up_ctl t e =
    (match e with Gmp.Synced | Gmp.Excluded -> t.synced <- true | _ -> ());
    t.out.up_ctl e

  let dn_ctl t e =
    match e with
    | Event.Stop when not t.stopped ->
        (* After a flush, every member that goes on with this one holds
           the same casts: what is not yet known to be everywhere is
           delivered now, in the order it came (the flush, not the regular
           part of the view). A member that stops without a flush (its
           transport closed) delivers nothing more. *)
        t.out.dn_ctl e;
        if t.synced || t.n = 1 then
          Queue.iter
            (fun (o, _, m) ->
              t.at_flush <- t.at_flush + 1;
              t.out.up (Event.Cast_from o) m)
            t.held
        else Queue.iter (fun (_, _, m) -> Msg.release m) t.held;
        Queue.clear t.held;
        t.stopped <- true
    | e -> t.out.dn_ctl e

  let timer t now =
    match t.ack_at with Some at when now >= at -> send_holds t | Some at -> t.out.alarm at | None -> ()

  let counters t =
    [
      ("safe", t.safe);
      ("at_flush", t.at_flush);
      ("held", Queue.length t.held);
      ("holds_sent", t.holds_sent);
      ("nonsense", t.nonsense);
    ]
end

include L

let layer : Layer.t = (module L)
