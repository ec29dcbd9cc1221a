open Consort

let src = Logs.Src.create "consort.causal" ~doc:"Causal layer: causally ordered casts"

module Log = (val Logs.src_log src : Logs.LOG)

let causal_order =
  Contract.v "causal-order" ~doc:"casts delivered after every cast that precedes them causally"

module L = struct
  type header =
    | Pass  (** a send *)
    | Data of (int * int) list
        (** a cast, and the entries of its sender's vector that changed since its previous cast of
            the view: (origin, casts of it delivered) *)

  let name = "causal"
  let max_entries = 4096

  let codec =
    Codec.(
      union "causal"
        [
          case 0 "pass" unit (function Pass -> Some () | _ -> None) (fun () -> Pass);
          case 1 "data"
            (list ~max:max_entries (pair varint varint))
            (function Data l -> Some l | _ -> None)
            (fun l -> Data l);
        ])

  let pp_header ppf = function
    | Pass -> Fmt.string ppf "pass"
    | Data l -> Fmt.pf ppf "data(%a)" Fmt.(list ~sep:comma (pair ~sep:(any ":") int int)) l

  let provides = [ causal_order ]
  let requires = [ Gmp.membership ]

  type t = {
    out : header Layer.out;
    n : int;
    me : int;
    delivered : int array; (* casts of each origin delivered here *)
    sent : int array; (* the vector of this member's previous cast *)
    last : int array array; (* per origin: the vector of its latest cast received *)
    waiting : (int array * Msg.t) Queue.t array; (* per origin, in FIFO order *)
    mutable stopped : bool;
    mutable delayed : int;
    mutable dropped : int;
    mutable nonsense : int;
    mutable entries_sent : int;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      n;
      me = ctx.view.rank;
      delivered = Array.make n 0;
      sent = Array.make n 0;
      last = Array.init n (fun _ -> Array.make n 0);
      waiting = Array.init n (fun _ -> Queue.create ());
      stopped = false;
      delayed = 0;
      dropped = 0;
      nonsense = 0;
      entries_sent = 0;
    }

  let ready t o v =
    let ok = ref true in
    for x = 0 to t.n - 1 do
      if x <> o && t.delivered.(x) < v.(x) then ok := false
    done;
    !ok

  (* Deliver every waiting cast whose causal past is delivered, until
     none is left that is. Each origin's casts go in FIFO order. *)
  let rec drain t =
    let progress = ref false in
    for o = 0 to t.n - 1 do
      let continue = ref true in
      while !continue && not t.stopped do
        match Queue.peek_opt t.waiting.(o) with
        | Some (v, _) when ready t o v ->
            let _, m = Queue.pop t.waiting.(o) in
            t.delivered.(o) <- t.delivered.(o) + 1;
            progress := true;
            t.out.up (Event.Cast_from o) m
        | _ -> continue := false
      done
    done;
    if !progress then drain t

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      match (src, h) with
      | Event.Send_from _, Pass -> t.out.up src msg
      | Event.Cast_from o, Data entries
        when o >= 0 && o < t.n
             && List.for_all (fun (x, k) -> x >= 0 && x < t.n && k >= t.last.(o).(x)) entries ->
          let v = t.last.(o) in
          List.iter (fun (x, k) -> v.(x) <- k) entries;
          let v = Array.copy v in
          if Queue.is_empty t.waiting.(o) && ready t o v then begin
            t.delivered.(o) <- t.delivered.(o) + 1;
            t.out.up src msg;
            drain t
          end
          else begin
            t.delayed <- t.delayed + 1;
            Queue.add (v, msg) t.waiting.(o);
            drain t
          end
      | _ ->
          t.nonsense <- t.nonsense + 1;
          Msg.release msg

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Send _ -> t.out.dn dst Pass msg
      | Event.Cast ->
          (* Only the entries that changed since this member's previous
             cast: the casts of a view arrive in FIFO order, so each
             receiver keeps the rest. *)
          let entries = ref [] in
          for x = t.n - 1 downto 0 do
            if x <> t.me && t.delivered.(x) <> t.sent.(x) then begin
              entries := (x, t.delivered.(x)) :: !entries;
              t.sent.(x) <- t.delivered.(x)
            end
          done;
          t.entries_sent <- t.entries_sent + List.length !entries;
          t.out.dn dst (Data !entries) msg

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    match e with
    | Event.Stop when not t.stopped ->
        (* What the layers below still deliver comes first. What then
           still waits depends on a cast that no member going on with this
           one received (its sender failed): it is never delivered. *)
        t.out.dn_ctl e;
        t.stopped <- true;
        Array.iter
          (fun q ->
            Queue.iter
              (fun (_, m) ->
                t.dropped <- t.dropped + 1;
                Msg.release m)
              q;
            Queue.clear q)
          t.waiting
    | e -> t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("delayed", t.delayed);
      ("waiting", Array.fold_left (fun a q -> a + Queue.length q) 0 t.waiting);
      ("dropped", t.dropped);
      ("entries_sent", t.entries_sent);
      ("nonsense", t.nonsense);
    ]
end

include L

let layer : Layer.t = (module L)
