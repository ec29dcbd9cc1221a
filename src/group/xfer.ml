open Consort

let src = Logs.Src.create "consort.xfer" ~doc:"State transfer to members that join"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let chunk = "xfer.chunk"
  let window = "xfer.window"
  let max_state = "xfer.max_state"
  let spares = "xfer.spares"
  let max_held = "xfer.max_held"

  let () =
    Params.register chunk (Params.Int 16_384) ~min:(Params.Int 64)
      ~max:(Params.Int (1 lsl 20))
      ~doc:
        "bytes of a state snapshot per chunk (no more than the largest message the stack carries)";
    Params.register window (Params.Int 65_536) ~min:(Params.Int 64)
      ~doc:"bytes of a state snapshot a giver sends ahead of the receiver's acknowledgement";
    Params.register max_state
      (Params.Int (256 lsl 20))
      ~doc:"largest state snapshot a member accepts, in bytes";
    Params.register spares (Params.Int 1) ~min:(Params.Int 0) ~max:(Params.Int 1000)
      ~doc:
        "members that take a snapshot, besides the giver, to go on with a transfer if the giver \
         fails";
    Params.register max_held
      (Params.Int (16 lsl 20))
      ~min:(Params.Int 1024)
      ~doc:
        "bytes of deliveries a member waiting for the state holds beyond which it stops returning \
         flow control credit (the senders slow down to it) until they are back to half"
end

let contract =
  Contract.v "xfer" ~doc:"a member that joins gets the group's state before its first delivery"

type Event.dn_ctl += Out of { dst : Event.dst; payload : string }
type Event.up_ctl += In of { src : int; payload : string }

let () =
  Event.register_dn_ctl_printer (function
    | Out { dst; payload } ->
        Some
          (fun ppf -> Fmt.pf ppf "xfer-out(%a, %d bytes)" Event.pp_dst dst (String.length payload))
    | _ -> None);
  Event.register_up_ctl_printer (function
    | In { src; payload } ->
        Some (fun ppf -> Fmt.pf ppf "xfer-in(%d, %d bytes)" src (String.length payload))
    | _ -> None)

(* {1 The layer: application messages and the protocol's own, apart} *)

module L = struct
  type header = App | Ctl

  let name = "xfer"

  let codec =
    Codec.(
      union "xfer"
        [
          case 0 "app" unit (function App -> Some () | _ -> None) (fun () -> App);
          case 1 "ctl" unit (function Ctl -> Some () | _ -> None) (fun () -> Ctl);
        ])

  let pp_header ppf = function App -> Fmt.string ppf "app" | Ctl -> Fmt.string ppf "ctl"
  let provides = [ contract ]
  let requires = [ Contract.v "membership" ~doc:"views agreed by flush; virtual synchrony" ]

  type t = { out : header Layer.out; pool : Pool.t; mutable ctl_in : int; mutable ctl_out : int }

  let create (ctx : Layer.ctx) out = { out; pool = ctx.pool; ctl_in = 0; ctl_out = 0 }

  let up t src h msg =
    match h with
    | App -> t.out.up src msg
    | Ctl -> (
        let body = Msg.body msg in
        let payload = Iovecs.to_string body in
        Iovecs.release body;
        Msg.release msg;
        match src with
        | Event.Cast_from r | Event.Send_from r ->
            t.ctl_in <- t.ctl_in + 1;
            t.out.up_ctl (In { src = r; payload })
        | Event.Raw -> ())

  let up_ctl t e = t.out.up_ctl e
  let dn t dst msg = t.out.dn dst App msg

  let dn_ctl t = function
    | Out { dst; payload } ->
        t.ctl_out <- t.ctl_out + 1;
        t.out.dn dst Ctl (Msg.create (Iovecs.of_string t.pool payload))
    | e -> t.out.dn_ctl e

  let timer _ _ = ()
  let counters t = [ ("ctl_in", t.ctl_in); ("ctl_out", t.ctl_out) ]
end

let layer : Layer.t = (module L)
let name = L.name

(* {1 The protocol} *)

type hello = {
  holder : bool;
  age : int;
  prev : string;
  base : string;
  have : int;
  digest : string;
  snaps : string list;
  pos : string;
}

type ctl =
  | Hello of hello
  | Chunk of { base : string; digest : string; age : int; total : int; off : int; data : string }
  | Ack of { base : string; off : int }
  | Resume of { base : string; off : int }

let id = Codec.string ~max:1024 ()
let max_pos = 16_384

let ctl_codec =
  Codec.(
    union "xfer-ctl"
      [
        case 0 "hello"
          (tup4 (pair bool varint) (pair id id) (pair varint id)
             (pair (list ~max:4096 id) (string ~max:max_pos ())))
          (function
            | Hello { holder; age; prev; base; have; digest; snaps; pos } ->
                Some ((holder, age), (prev, base), (have, digest), (snaps, pos))
            | _ -> None)
          (fun ((holder, age), (prev, base), (have, digest), (snaps, pos)) ->
            Hello { holder; age; prev; base; have; digest; snaps; pos });
        case 1 "chunk"
          (tup4 (pair id id) (pair varint varint) varint (string ~max:(1 lsl 20) ()))
          (function
            | Chunk { base; digest; age; total; off; data } ->
                Some ((base, digest), (age, total), off, data)
            | _ -> None)
          (fun ((base, digest), (age, total), off, data) ->
            Chunk { base; digest; age; total; off; data });
        case 2 "ack" (pair id varint)
          (function Ack { base; off } -> Some (base, off) | _ -> None)
          (fun (base, off) -> Ack { base; off });
        case 3 "resume" (pair id varint)
          (function Resume { base; off } -> Some (base, off) | _ -> None)
          (fun (base, off) -> Resume { base; off });
      ])

type kind = [ `Cast | `Send ]

type app = {
  take : unit -> string;
  install : string -> unit;
  deliver : kind -> origin:string -> string -> unit;
}

type durable = {
  age : unit -> int;
  position : unit -> string;
  take_for : string -> string;
  on_decision : string array -> unit;
}

(* A snapshot of the state as it was when view [sbase] started. *)
type snap = { sbase : string; data : string; sdigest : string; sage : int }

(* What a member that needs the state has of it so far. *)
type need = {
  base : string;
  mutable ndigest : string;
  buf : Buffer.t;
  mutable total : int;
  mutable nage : int;
}

type giving = {
  dst : int;
  snap : snap;
  mutable acked : int;
  mutable next : int;
  mutable started : bool;
}

type view = {
  vid : string;
  members : string array;
  rank : int;
  cast_ctl : string -> unit;
  send_ctl : int -> string -> unit;
  hold_credit : bool -> unit;
  hellos : hello option array;
  mutable decided : bool;
  mutable givings : giving list;
}

type t = {
  app : app;
  durable : durable option;
  chunk : int;
  window : int;
  max_state : int;
  spares : int;
  me : string;
  mutable holder : bool;
  mutable age : int;
  mutable prev : string;
  mutable need : need option;
  queue : (string * kind * string * string) Queue.t; (* view, kind, origin, payload *)
  mutable snaps : snap list;
  mutable cur : view option;
  mutable delivering : string option;
  mutable early : bool; (* chunks came before this member knew it needs them *)
  mutable installs : int;
  mutable chunks_sent : int;
  mutable chunks_received : int;
  mutable restarts : int;
  mutable rebased : int;
  mutable resumed : int; (* transfers this member went on with from where another stopped *)
  mutable dropped : int; (* durable: deliveries held when a view ended before the state came *)
  held_limit : int;
  mutable held_bytes : int;
  mutable held_peak : int;
  mutable holding_credit : bool;
  mutable credit_held : int;
}

let create ?durable ~params ~max_message ~me app =
  {
    app;
    durable;
    chunk = max 64 (min (Params.int params Param.chunk) (max_message - 1200));
    window = Params.int params Param.window;
    max_state = Params.int params Param.max_state;
    spares = Params.int params Param.spares;
    me;
    (* A member starts with the application's initial state, as if it had
       delivered nothing: the state of a group that has delivered nothing
       either. Any group that has delivered more wins at a merge. *)
    holder = true;
    age = 0;
    prev = "";
    need = None;
    queue = Queue.create ();
    snaps = [];
    cur = None;
    delivering = None;
    early = false;
    installs = 0;
    chunks_sent = 0;
    chunks_received = 0;
    restarts = 0;
    rebased = 0;
    resumed = 0;
    dropped = 0;
    held_limit = max 1024 (Params.int params Param.max_held);
    held_bytes = 0;
    held_peak = 0;
    holding_credit = false;
    credit_held = 0;
  }

let needs_state t = t.need <> None
let holds_state t = t.holder
let age t = t.age
let delivery_view t = t.delivering
let queued t = Queue.length t.queue

let counters t =
  [
    ("installs", t.installs);
    ("chunks_sent", t.chunks_sent);
    ("chunks_received", t.chunks_received);
    ("restarts", t.restarts);
    ("rebased", t.rebased);
    ("resumed", t.resumed);
    ("queued", Queue.length t.queue);
    ("dropped_held", t.dropped);
    ("held_bytes", t.held_bytes);
    ("held_peak", t.held_peak);
    ("credit_held", t.credit_held);
  ]

(* What a member waiting for the state holds is bounded: over
   [xfer.max_held] bytes it stops returning flow control credit, so the
   senders slow down to it; at half, it returns it again. The transfer
   itself goes on (point-to-point, outside that flow control). *)
let check_held t =
  if t.held_bytes > t.held_peak then t.held_peak <- t.held_bytes;
  match t.cur with
  | Some v ->
      if (not t.holding_credit) && t.held_bytes > t.held_limit then begin
        t.holding_credit <- true;
        t.credit_held <- t.credit_held + 1;
        Log.warn (fun m ->
            m
              "%s: %d bytes of deliveries held while the state comes (xfer.max_held %d): credit \
               held back"
              t.me t.held_bytes t.held_limit);
        v.hold_credit true
      end
      else if t.holding_credit && t.held_bytes <= t.held_limit / 2 then begin
        t.holding_credit <- false;
        v.hold_credit false
      end
  | None -> ()

let hold t ((_, _, _, payload) as item) =
  Queue.add item t.queue;
  t.held_bytes <- t.held_bytes + String.length payload + 64;
  check_held t

let encode c = Codec.encode_string ctl_codec c

let hand_over t (vid, kind, origin, payload) =
  t.delivering <- Some vid;
  (match kind with `Cast -> t.age <- t.age + 1 | `Send -> ());
  Fun.protect
    ~finally:(fun () -> t.delivering <- None)
    (fun () -> t.app.deliver kind ~origin payload)

(* Deliver what waits, oldest first, while [keep] holds. *)
let drain ?(keep = fun _ -> true) t =
  let rec go () =
    match Queue.peek_opt t.queue with
    | Some ((vid, _, _, payload) as item) when keep vid ->
        ignore (Queue.pop t.queue);
        t.held_bytes <- t.held_bytes - String.length payload - 64;
        hand_over t item;
        go ()
    | _ -> ()
  in
  go ();
  check_held t

let can_deliver t =
  t.holder && match t.cur with Some v -> v.decided && Queue.is_empty t.queue | None -> false

let on_app t ~vid kind ~origin payload =
  if can_deliver t then hand_over t (vid, kind, origin, payload)
  else hold t (vid, kind, origin, payload)

let pump t v g =
  let total = String.length g.snap.data in
  while (g.next < total && g.next - g.acked < t.window) || (total = 0 && not g.started) do
    let len = min t.chunk (total - g.next) in
    let data = String.sub g.snap.data g.next len in
    v.send_ctl g.dst
      (encode
         (Chunk
            {
              base = g.snap.sbase;
              digest = g.snap.sdigest;
              age = g.snap.sage;
              total;
              off = g.next;
              data;
            }));
    t.chunks_sent <- t.chunks_sent + 1;
    g.started <- true;
    g.next <- g.next + len
  done

let take_snapshot t vid =
  let data = t.app.take () in
  { sbase = vid; data; sdigest = Digest.to_hex (Digest.string data); sage = t.age }

(* Every member's hello is in: the same decision everywhere. The state of
   the partition whose holders have delivered the most casts (ties: the
   least previous view id) is the group's; its holders are the candidates
   to give it. Every other member needs it, as of the start of its base
   view: this view for a member that held another partition's state, the
   view where it started to wait for one that still waits. *)
(* Durable states: every member holds one (on its disk), of the age the
   application gives; the oldest (greatest age) wins, the least rank of
   its holders gives it, to each member behind, as [take_for] that
   member's position makes it. Nothing is held across views. *)
let decide_durable t v d =
  v.decided <- true;
  let hs = Array.map Option.get v.hellos in
  let n = Array.length hs in
  let giver = ref 0 in
  for r = 1 to n - 1 do
    if hs.(r).age > hs.(!giver).age then giver := r
  done;
  let giver = !giver and top = hs.(!giver).age in
  let me = v.rank in
  (* A member of the greatest age whose position is not the giver's holds
     another state of that age (members that ended a view apart each
     applied their part of it, then what had no place in the order, in
     the same epoch): it takes the giver's too. *)
  let behind r = hs.(r).age < top || (r <> giver && hs.(r).pos <> hs.(giver).pos) in
  d.on_decision (Array.map (fun h -> h.pos) hs);
  if not (behind me) then begin
    if me = giver then begin
      let made = Hashtbl.create 4 in
      v.givings <-
        List.filter_map
          (fun r ->
            if not (behind r) then None
            else
              let pos = hs.(r).pos in
              let snap =
                match Hashtbl.find_opt made pos with
                | Some s -> s
                | None ->
                    let data = d.take_for pos in
                    let s =
                      {
                        sbase = v.vid;
                        data;
                        sdigest = Digest.to_hex (Digest.string data);
                        sage = 0;
                      }
                    in
                    Hashtbl.replace made pos s;
                    s
              in
              Log.info (fun m ->
                  m "%s: gives its state (age %d, %d bytes) to %s (age %d)" t.me top
                    (String.length snap.data) v.members.(r) hs.(r).age);
              Some { dst = r; snap; acked = 0; next = 0; started = false })
          (List.init n Fun.id)
    end;
    drain t;
    List.iter (pump t v) v.givings
  end
  else begin
    Log.info (fun m ->
        m "%s: takes the state of %s (age %d, this member's %d)" t.me v.members.(giver) top
          hs.(me).age);
    t.holder <- false;
    t.need <- Some { base = v.vid; ndigest = ""; buf = Buffer.create 0; total = 0; nage = 0 };
    if t.early then v.send_ctl giver (encode (Resume { base = v.vid; off = 0 }))
  end;
  t.early <- false

let decide t v =
  match t.durable with
  | Some d -> decide_durable t v d
  | None -> (
      v.decided <- true;
      let hs = Array.map Option.get v.hellos in
      let n = Array.length hs in
      let ranks = List.init n Fun.id in
      let holders = List.filter (fun r -> hs.(r).holder) ranks in
      match holders with
      | [] ->
          (* Every member that held the state is gone: start over from what
         this member has, the application's initial state. *)
          Log.warn (fun m ->
              m "%s: no member of view %s holds the group's state: starting from the initial state"
                t.me v.vid);
          if t.need <> None then begin
            t.need <- None;
            t.holder <- true;
            t.age <- 0;
            drain t
          end
      | h0 :: _ ->
          let size r = List.length (List.filter (fun h -> hs.(h).prev = hs.(r).prev) holders) in
          let better a b =
            (* Is holder rank [a]'s partition preferred to [b]'s? The state that
           has seen more casts; then the larger partition (members that
           have seen nothing hold the same empty state, so this only saves
           work); then the least id. *)
            hs.(a).age > hs.(b).age
            || hs.(a).age = hs.(b).age
               && (size a > size b
                  || (size a = size b && String.compare hs.(a).prev hs.(b).prev < 0))
          in
          let best = List.fold_left (fun b r -> if better r b then r else b) h0 holders in
          let senior = hs.(best).prev in
          let cand r = hs.(r).holder && hs.(r).prev = senior in
          (* The candidates of least rank take a snapshot of this view: the
         giver and [xfer.spares] more. *)
          let takers = List.filteri (fun i _ -> i <= t.spares) (List.filter cand ranks) in
          let base_of r = if hs.(r).holder then v.vid else hs.(r).base in
          let giver_of r =
            let b = base_of r in
            match
              List.find_opt
                (fun c -> (b = v.vid && List.mem c takers) || (cand c && List.mem b hs.(c).snaps))
                ranks
            with
            | Some c -> (b, c)
            | None -> (v.vid, List.hd takers)
          in
          let needers = List.filter (fun r -> not (cand r)) ranks in
          let plan = List.map (fun r -> (r, giver_of r)) needers in
          let me = v.rank in
          if cand me then begin
            if List.mem me takers && List.exists (fun (_, (b, _)) -> b = v.vid) plan then
              t.snaps <- take_snapshot t v.vid :: t.snaps;
            t.snaps <-
              List.filter (fun s -> List.exists (fun (_, (b, _)) -> b = s.sbase) plan) t.snaps;
            v.givings <-
              List.filter_map
                (fun (r, (b, g)) ->
                  if g <> me then None
                  else
                    match List.find_opt (fun s -> s.sbase = b) t.snaps with
                    | None -> None
                    | Some snap ->
                        let from =
                          if hs.(r).base = b && hs.(r).digest = snap.sdigest then
                            min hs.(r).have (String.length snap.data)
                          else 0
                        in
                        if from > 0 then t.resumed <- t.resumed + 1;
                        Log.info (fun m ->
                            m "%s: gives the state of %s (%d bytes) to %s from byte %d" t.me b
                              (String.length snap.data) v.members.(r) from);
                        Some { dst = r; snap; acked = from; next = from; started = false })
                plan;
            drain t;
            List.iter (pump t v) v.givings
          end
          else begin
            t.snaps <- [];
            let b, g = List.assoc me plan in
            let resume () =
              (* Chunks that came before this decision were dropped. *)
              if t.early then
                match t.need with
                | Some nd ->
                    v.send_ctl g (encode (Resume { base = nd.base; off = Buffer.length nd.buf }))
                | None -> ()
            in
            if (not hs.(me).holder) && t.need = None then
              (* It installed the state it waited for after its hello: the
             giver named here need not send it. *)
              v.send_ctl g (encode (Resume { base = b; off = 1 lsl 40 }))
            else if hs.(me).holder then begin
              (* This member held another partition's state: it takes the
             group's, as of the start of this view. *)
              Log.info (fun m -> m "%s: takes the group's state from %s" t.me v.members.(g));
              t.holder <- false;
              t.need <-
                Some { base = v.vid; ndigest = ""; buf = Buffer.create 0; total = 0; nage = 0 };
              resume ()
            end
            else begin
              (match t.need with
              | Some nd when nd.base <> b ->
                  (* No one here holds the state as of the view this member
                 started to wait in: it hands over what it holds from
                 before this view and waits for this view's state. *)
                  Log.warn (fun m ->
                      m "%s: no member holds the state of %s any more: waits for that of %s" t.me
                        nd.base b);
                  t.rebased <- t.rebased + 1;
                  drain ~keep:(fun vid -> vid <> v.vid) t;
                  t.need <-
                    Some { base = b; ndigest = ""; buf = Buffer.create 0; total = 0; nage = 0 }
              | _ -> ());
              resume ()
            end
          end;
          t.early <- false)

let hello t =
  match t.durable with
  | Some d ->
      let pos = d.position () in
      let pos = if String.length pos > max_pos then "" else pos in
      Hello
        {
          holder = true;
          age = d.age ();
          prev = "";
          base = "";
          have = 0;
          digest = "";
          snaps = [];
          pos;
        }
  | None ->
      let base, have, digest =
        match t.need with
        | Some nd -> (nd.base, Buffer.length nd.buf, nd.ndigest)
        | None -> ("", 0, "")
      in
      Hello
        {
          holder = t.holder;
          age = t.age;
          prev = t.prev;
          base;
          have;
          digest;
          snaps = List.map (fun s -> s.sbase) t.snaps;
          pos = "";
        }

(* The view ends: a holder hands over what it kept while the decision was
   pending (every member that goes on delivers this view's messages in it). *)
let end_view t =
  if t.durable <> None && t.need <> None then begin
    (* The state did not come in this view: what was held goes, this
       member goes on from its own state (the next view decides again). *)
    let n = Queue.length t.queue in
    if n > 0 then
      Log.warn (fun m ->
          m "%s: the view ended before the state came: %d held deliveries dropped" t.me n);
    t.dropped <- t.dropped + n;
    Queue.clear t.queue;
    t.held_bytes <- 0;
    t.need <- None;
    t.holder <- true
  end;
  (match t.cur with
  | Some v when v.decided -> t.prev <- v.vid
  | Some v ->
      (* Undecided: members that held different states may have been
         together in it (one that joined, say); they must stay apart. Those
         that came from one view and go on together stay together. *)
      t.prev <- Digest.to_hex (Digest.string (t.prev ^ "|" ^ v.vid))
  | None -> ());
  t.cur <- None;
  if t.holder then drain t

let start_view ?(hold_credit = ignore) t ~vid ~members ~rank ~cast_ctl ~send_ctl =
  let v =
    {
      vid;
      members;
      rank;
      cast_ctl;
      send_ctl;
      hold_credit;
      hellos = Array.make (Array.length members) None;
      decided = false;
      givings = [];
    }
  in
  t.cur <- Some v;
  (* A new stack: nothing held back in it yet. *)
  t.holding_credit <- false;
  check_held t;
  cast_ctl (encode (hello t))

let complete t nd =
  let data = Buffer.contents nd.buf in
  if Digest.to_hex (Digest.string data) <> nd.ndigest then begin
    Log.warn (fun m -> m "%s: state of %s does not match its digest: asked again" t.me nd.base);
    t.restarts <- t.restarts + 1;
    Buffer.clear nd.buf;
    nd.ndigest <- "";
    false
  end
  else begin
    t.need <- None;
    t.holder <- true;
    t.age <- nd.nage;
    t.installs <- t.installs + 1;
    Log.info (fun m ->
        m "%s: installs the state of %s (%d bytes), then %d held messages" t.me nd.base
          (String.length data) (Queue.length t.queue));
    t.app.install data;
    drain t;
    true
  end

let on_ctl t ~src payload =
  match t.cur with
  | None -> ()
  | Some v -> (
      match Codec.decode_string ctl_codec payload with
      | Error e ->
          Log.warn (fun m ->
              m "%s: bad state transfer message from rank %d: %a" t.me src Codec.pp_error e)
      | Ok (Hello h) ->
          if src >= 0 && src < Array.length v.hellos && v.hellos.(src) = None then begin
            v.hellos.(src) <- Some h;
            if (not v.decided) && Array.for_all Option.is_some v.hellos then decide t v
          end
      | Ok (Chunk { base; digest; age; total; off; data }) -> (
          Log.debug (fun m ->
              m "%s: chunk %s %d+%d/%d from %d (need %s)" t.me base off (String.length data) total
                src
                (match t.need with
                | Some nd -> nd.base ^ " " ^ string_of_int (Buffer.length nd.buf)
                | None -> "-"));
          match t.need with
          | Some nd when nd.base = base ->
              t.chunks_received <- t.chunks_received + 1;
              if total > t.max_state then begin
                if off = 0 then
                  Log.err (fun m ->
                      m "%s: a state of %d bytes is over xfer.max_state (%d): refused" t.me total
                        t.max_state)
              end
              else begin
                if nd.ndigest <> digest then begin
                  if nd.ndigest <> "" then t.restarts <- t.restarts + 1;
                  Buffer.clear nd.buf;
                  nd.ndigest <- digest;
                  nd.total <- total;
                  nd.nage <- age
                end;
                (* A state given with another digest starts over. *)
                let have = Buffer.length nd.buf in
                if off = have && have + String.length data <= total then begin
                  Buffer.add_string nd.buf data;
                  let have = Buffer.length nd.buf in
                  if have = total then begin
                    if complete t nd then () else v.send_ctl src (encode (Resume { base; off = 0 }))
                  end
                  else v.send_ctl src (encode (Ack { base; off = have }))
                end
                else if off > have then v.send_ctl src (encode (Resume { base; off = have }))
              end
          | _ -> if not v.decided then t.early <- true)
      | Ok (Resume { base; off }) -> (
          match List.find_opt (fun g -> g.dst = src && g.snap.sbase = base) v.givings with
          | Some g ->
              let off = min off (String.length g.snap.data) in
              g.next <- off;
              g.acked <- off;
              g.started <- off > 0;
              pump t v g
          | None -> ())
      | Ok (Ack { base; off }) -> (
          Log.debug (fun m -> m "%s: ack %s %d from %d" t.me base off src);
          match List.find_opt (fun g -> g.dst = src && g.snap.sbase = base) v.givings with
          | Some g ->
              if off > g.acked && off <= g.next then begin
                g.acked <- off;
                pump t v g
              end
          | None -> ()))
