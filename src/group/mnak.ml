open Consort

let src = Logs.Src.create "consort.mnak" ~doc:"Mnak layer: reliable FIFO multicast with NAKs"

module Log = (val Logs.src_log src : Logs.LOG)

module Param = struct
  let window = "mnak.window"
  let status_interval = "mnak.status_interval"
  let nak_delay = "mnak.nak_delay"
  let nak_retry = "mnak.nak_retry"
  let fanout = "mnak.fanout"

  let () =
    Params.register window (Params.Int 1024)
      ~doc:
        "casts buffered ahead of the next expected one per origin, and resent per NAK; raised to \
         what Mflow's window lets an origin have in flight (mflow.window / 64)";
    Params.register status_interval
      (Params.Time (Time.of_ms 20))
      ~doc:"period of status casts while casts are unstable";
    Params.register nak_delay
      (Params.Time (Time.of_ms 2))
      ~doc:"wait between noticing a gap and the first NAK";
    Params.register nak_retry
      (Params.Time (Time.of_ms 20))
      ~doc:"wait before asking again for a gap";
    Params.register fanout (Params.Int 8) ~min:(Params.Int 2) ~max:(Params.Int 256)
      ~doc:
        "with the Scale property, how many members report their status to each member of the \
         stability tree"
end

let max_ranges = 256
let max_members = 4096
let max_window = 1 lsl 20

(* Bytes of casts kept early (above a gap) per origin: at least 1 MiB, and
   four times what Mflow lets an origin have in flight, so that no
   stranger can make a member hold a window of datagrams of the largest
   size. *)
let max_early params = max (1 lsl 20) (4 * min (Params.int params Mflow.Param.window) (1 lsl 28))

(* The acceptance window: at least what Mflow lets one origin have in
   flight, so that a burst of a full flow-control window of empty casts is
   buffered, not dropped as beyond the window. Mflow counts each cast as
   its length plus [Mflow.overhead] bytes. *)
let effective_window params =
  let own = Params.int params Param.window in
  let flow = Params.int params Mflow.Param.window in
  let flow_casts =
    if flow <= 0 then 0 else (min flow max_window + Mflow.overhead - 1) / Mflow.overhead
  in
  max 1 (min max_window (max own flow_casts))

type Event.up_ctl += Stable of { stable : int array; received : int array }
type Event.dn_ctl += Track_stability

let () =
  Event.register_up_ctl_printer (function
    | Stable { stable; received } ->
        Some
          (fun ppf ->
            Fmt.pf ppf "stable(%a / %a)"
              Fmt.(array ~sep:comma int)
              stable
              Fmt.(array ~sep:comma int)
              received)
    | _ -> None);
  Event.register_dn_ctl_printer (function
    | Track_stability -> Some (fun ppf -> Fmt.string ppf "track-stability")
    | _ -> None)

(* The layer: its state and what the fused path (F) and the tree (Tree) use; the repair protocol's
   helpers stay inside. *)
module L : sig
  type header =
    | No_hdr
    | Data of { seq : int }
    | Retrans of { origin : int; seq : int }
    | Nak of { origin : int; ranges : (int * int) list }
    | Status of { busy : bool; vector : int array }
    | Report of { busy : bool; cover : string; low : int array; high : int array; who : int array }
    | Stability of { busy : bool; stable : int array; high : int array; who : int array }

  val name : string
  val codec : header Consort.Codec.t
  val pp_header : Format.formatter -> header -> unit
  val provides : Consort.Contract.t list
  val requires : Consort.Contract.t list

  type t = {
    out : header Consort.Layer.out;
    now : unit -> Consort.Time.t;
    rng : Consort.Rng.t;
    rank : int;
    n : int;
    window : int;
    status_interval : Consort.Time.t;
    nak_delay : Consort.Time.t;
    nak_retry : Consort.Time.t;
    mutable next : int;
    held : Msgring.t array;
    released : int array;
    expected : int array;
    highest : int array;
    seen : int array;
    early_bytes : int array;
    max_early : int;
    known : int array array;
    suspected : bool array;
    floor : int array;
    answered : Consort.Time.t array array;
    nak_at : Consort.Time.t array;
    mutable status_at : Consort.Time.t;
    due : Consort.Deadlines.t;
    due_now : int array;
    mutable requested : bool;
    mutable nheld : int;
    mutable stopped : bool;
    mutable naks_sent : int;
    mutable retransmissions : int;
    mutable duplicates : int;
    mutable out_of_order : int;
    mutable beyond_window : int;
    mutable stable_released : int;
    mutable status_sent : int;
    mutable malformed : int;
    mutable impossible : int;
    mutable naks_ignored : int;
    mutable track : bool;
    mutable frozen : int array option;
    told : int array;
    mutable local : Consort.Msg.t;
    self : Consort.Event.src;
    tree : bool;
    fanout : int;
    mutable live : int array;
    pos : int array;
    kids : (int, kid) Hashtbl.t;
    gstable : int array;
    gmax : int array;
    gwho : int array;
    mutable reports_sent : int;
    mutable stability_sent : int;
  }

  and kid = {
    k_busy : bool;
    k_cover : string;
    k_low : int array;
    k_high : int array;
    k_who : int array;
  }

  val create_mode : tree:bool -> Consort.Layer.ctx -> header Consort.Layer.out -> t
  val create : Consort.Layer.ctx -> header Consort.Layer.out -> t
  val keep_head : t -> int -> int -> Bytes.t -> Consort.Msg.t -> unit
  val release_stable : t -> int -> unit
  val tell_stable : ?force:bool -> t -> unit
  val kick_status : t -> unit
  val drain : t -> int -> unit
  val dn : t -> Consort.Event.dst -> Consort.Msg.t -> unit
  val up : t -> Consort.Event.src -> header -> Consort.Msg.t -> unit
  val up_ctl : t -> Consort.Event.up_ctl -> unit
  val dn_ctl : t -> Consort.Event.dn_ctl -> unit
  val timer : t -> Consort.Time.t -> unit
  val counters : t -> (string * int) list
end = struct
  type header =
    | No_hdr
    | Data of { seq : int }
    | Retrans of { origin : int; seq : int }
    | Nak of { origin : int; ranges : (int * int) list }
    | Status of { busy : bool; vector : int array }
    | Report of { busy : bool; cover : string; low : int array; high : int array; who : int array }
    | Stability of { busy : bool; stable : int array; high : int array; who : int array }

  let name = "mnak"

  let codec =
    Codec.(
      union "mnak"
        [
          case 0 "no_hdr" unit (function No_hdr -> Some () | _ -> None) (fun () -> No_hdr);
          case 1 "data" varint
            (function Data { seq } -> Some seq | _ -> None)
            (fun seq -> Data { seq });
          case 2 "retrans" (pair varint varint)
            (function Retrans { origin; seq } -> Some (origin, seq) | _ -> None)
            (fun (origin, seq) -> Retrans { origin; seq });
          case 3 "nak"
            (pair varint (list ~max:max_ranges (pair varint varint)))
            (function Nak { origin; ranges } -> Some (origin, ranges) | _ -> None)
            (fun (origin, ranges) -> Nak { origin; ranges });
          case 4 "status"
            (pair bool (array ~max:max_members varint))
            (function Status { busy; vector } -> Some (busy, vector) | _ -> None)
            (fun (busy, vector) -> Status { busy; vector });
          case 5 "report"
            (tup4 bool
               (string ~max:((max_members + 7) / 8) ())
               (array ~max:max_members varint)
               (pair (array ~max:max_members varint) (array ~max:max_members varint)))
            (function
              | Report { busy; cover; low; high; who } -> Some (busy, cover, low, (high, who))
              | _ -> None)
            (fun (busy, cover, low, (high, who)) -> Report { busy; cover; low; high; who });
          case 6 "stability"
            (tup4 bool (array ~max:max_members varint) (array ~max:max_members varint)
               (array ~max:max_members varint))
            (function
              | Stability { busy; stable; high; who } -> Some (busy, stable, high, who) | _ -> None)
            (fun (busy, stable, high, who) -> Stability { busy; stable; high; who });
        ])

  let pp_range ppf (lo, hi) = Fmt.pf ppf "%d..%d" lo hi

  let pp_header ppf = function
    | No_hdr -> Fmt.string ppf "no_hdr"
    | Data { seq } -> Fmt.pf ppf "data(%d)" seq
    | Retrans { origin; seq } -> Fmt.pf ppf "retrans(%d of %d)" seq origin
    | Nak { origin; ranges } ->
        Fmt.pf ppf "nak(%d: %a)" origin Fmt.(list ~sep:comma pp_range) ranges
    | Status { busy; vector } ->
        Fmt.pf ppf "status(%s[%a])" (if busy then "busy " else "") Fmt.(array ~sep:sp int) vector
    | Report { busy; low; high; _ } ->
        Fmt.pf ppf "report(%s[%a] [%a])"
          (if busy then "busy " else "")
          Fmt.(array ~sep:sp int)
          low
          Fmt.(array ~sep:sp int)
          high
    | Stability { busy; stable; high; _ } ->
        Fmt.pf ppf "stability(%s[%a] [%a])"
          (if busy then "busy " else "")
          Fmt.(array ~sep:sp int)
          stable
          Fmt.(array ~sep:sp int)
          high

  let provides = [ Contract.reliable_cast ]
  let requires = [ Contract.datagram ]

  type t = {
    out : header Layer.out;
    now : unit -> Time.t;
    rng : Rng.t;
    rank : int;
    n : int;
    window : int;
    status_interval : Time.t;
    nak_delay : Time.t;
    nak_retry : Time.t;
    mutable next : int; (* number of casts this member has made *)
    held : Msgring.t array;
        (* per origin, the casts kept: numbered from [released.(o)], delivered
           ones below [expected.(o)] and early ones above it *)
    released : int array; (* casts of [o] below this are stable and released *)
    expected : int array; (* the next cast of [o] to deliver *)
    highest : int array; (* casts of [o] believed to exist *)
    seen : int array; (* above the highest number of [o] received within the window *)
    early_bytes : int array; (* bytes of [o]'s casts kept above [expected.(o)] *)
    max_early : int;
    known : int array array; (* [known.(m).(o)]: [m] has the casts of [o] below this *)
    suspected : bool array; (* final within the view: not waited for, not asked *)
    floor : int array;
        (* not [tree]: [floor.(o)], the fewest casts of [o] that a member other
           than this one and not suspected is known to have ([max_int] if
           none), kept as [known] and [suspected] change *)
    answered : Time.t array array;
        (* [answered.(m).(o)]: when a NAK of [m] for [o] was last answered *)
    nak_at : Time.t array;
    mutable status_at : Time.t;
    due : Deadlines.t; (* [o]: [nak_at.(o)]; [n]: [status_at] *)
    due_now : int array; (* the keys due in this call of [timer] *)
    mutable requested : bool;
    mutable nheld : int;
    mutable stopped : bool;
    mutable naks_sent : int;
    mutable retransmissions : int;
    mutable duplicates : int;
    mutable out_of_order : int;
    mutable beyond_window : int;
    mutable stable_released : int;
    mutable status_sent : int;
    mutable malformed : int;
    mutable impossible : int;
    mutable naks_ignored : int;
    mutable track : bool; (* a layer above asked for Stable events *)
    mutable frozen : int array option;
        (* tracking: what this member had when the flush reached it; its
           statuses claim no more of the others' casts *)
    told : int array; (* the stability last told *)
    mutable local : Msg.t; (* the fused path: this member's own cast, delivered after it went on *)
    self : Event.src; (* [Cast_from rank], made once *)
    tree : bool;
        (* Scale: statuses go up a tree of the members not suspected, and its
           root casts what all of them hold; [known] is then not kept *)
    fanout : int;
    mutable live : int array; (* the members not suspected, in rank order *)
    pos : int array; (* each rank's place in [live], -1 if suspected *)
    kids : (int, kid) Hashtbl.t; (* the last report of each child in the tree *)
    gstable : int array; (* tree: casts of [o] that every member holds, as the root last said *)
    gmax : int array; (* tree: the most casts of [o] some member holds... *)
    gwho : int array; (* ... and that member *)
    mutable reports_sent : int;
    mutable stability_sent : int;
  }

  and kid = {
    k_busy : bool;
    k_cover : string;
    k_low : int array;
    k_high : int array;
    k_who : int array;
  }

  let create_mode ~tree (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      now = ctx.now;
      rng = ctx.rng;
      rank = ctx.view.rank;
      n;
      window = effective_window ctx.params;
      status_interval = Params.time ctx.params Param.status_interval;
      nak_delay = Params.time ctx.params Param.nak_delay;
      nak_retry = Params.time ctx.params Param.nak_retry;
      next = 0;
      held = Array.init n (fun _ -> Msgring.create ~size:(if tree then 4 else 64) ());
      released = Array.make n 0;
      expected = Array.make n 0;
      highest = Array.make n 0;
      seen = Array.make n 0;
      early_bytes = Array.make n 0;
      max_early = max_early ctx.params;
      known = (if tree then Array.make n [||] else Array.make_matrix n n 0);
      suspected = Array.make n false;
      floor = Array.make n (if n > 1 then 0 else max_int);
      answered = Array.make n [||];
      nak_at = Array.make n max_int;
      status_at = max_int;
      due = Deadlines.create (n + 1);
      due_now = Array.make (n + 1) 0;
      requested = false;
      nheld = 0;
      stopped = false;
      naks_sent = 0;
      retransmissions = 0;
      duplicates = 0;
      out_of_order = 0;
      beyond_window = 0;
      stable_released = 0;
      status_sent = 0;
      malformed = 0;
      impossible = 0;
      naks_ignored = 0;
      track = false;
      frozen = None;
      told = Array.make n 0;
      local = Msg.empty ();
      self = Event.Cast_from ctx.view.rank;
      tree;
      fanout = max 2 (Params.int ctx.params Param.fanout);
      live = Array.init n Fun.id;
      pos = Array.init n Fun.id;
      kids = Hashtbl.create 8;
      gstable = Array.make n 0;
      gmax = Array.make n 0;
      gwho = Array.init n Fun.id;
      reports_sent = 0;
      stability_sent = 0;
    }

  let create ctx out = create_mode ~tree:false ctx out

  (* How many casts of [o] this member has contiguously. *)
  let mine t o = if o = t.rank then t.next else t.expected.(o)
  let gap t o = o <> t.rank && t.expected.(o) < t.highest.(o)

  (* The members a NAK for [o]'s casts from [lo] on may go to: [o] itself
     and the members known to have them, none suspected. *)
  let holders t o lo =
    let ok m = m <> t.rank && not t.suspected.(m) in
    let others =
      if t.tree then begin
        (* The member the root last named as holding the most of [o]'s
           casts, and one other member not suspected, drawn at random: no
           member knows who else holds what. *)
        let w = t.gwho.(o) in
        let named = if w <> o && ok w && t.gmax.(o) > lo then [ w ] else [] in
        let others = Array.length t.live - 1 in
        if others <= 0 then named
        else
          let r = t.live.(Rng.int t.rng (Array.length t.live)) in
          if ok r && r <> o && not (List.mem r named) then r :: named else named
      end
      else List.filter (fun m -> m <> o && ok m && t.known.(m).(o) > lo) (List.init t.n Fun.id)
    in
    if ok o then o :: others else others

  (* Once this member has blocked for a flush, the statuses of the others
     claim no more than they held when they blocked ([own_vector]), but
     the casts they got since may be what the flush asks this member to
     deliver. The origin suspected and nobody known to hold the gap, it is
     asked of the members not suspected: any of them may hold it. *)
  let askable t o lo =
    match holders t o lo with
    | [] when t.frozen <> None && not t.tree ->
        List.filter (fun m -> m <> t.rank && not t.suspected.(m)) (List.init t.n Fun.id)
    | l -> l

  (* A gap worth asking about: some member that is not suspected can fill it. *)
  let wanted t o =
    gap t o
    &&
    if t.tree then
      (* Some member not suspected may hold it: in a tree, none knows who. *)
      Array.exists (fun m -> m <> t.rank) t.live
    else askable t o t.expected.(o) <> []

  let busy t =
    t.nheld > 0
    ||
    let rec any o = o < t.n && (wanted t o || any (o + 1)) in
    any 0

  let keep t o seq msg =
    Msgring.replace t.held.(o) seq msg;
    t.nheld <- t.nheld + 1

  (* [keep] of [Msg.push_bytes head (Msg.retain msg)], which is not made. *)
  let keep_head t o seq head msg =
    Msgring.replace_head t.held.(o) seq head msg;
    t.nheld <- t.nheld + 1

  let refresh_floor t o =
    let s = ref max_int in
    for m = 0 to t.n - 1 do
      if m <> t.rank && (not t.suspected.(m)) && t.known.(m).(o) < !s then s := t.known.(m).(o)
    done;
    t.floor.(o) <- !s

  let stable t o = Int.min (mine t o) (if t.tree then t.gstable.(o) else t.floor.(o))

  let release_stable t o =
    let s = stable t o in
    if t.released.(o) < s then begin
      let k = Msgring.release_below t.held.(o) s in
      t.nheld <- t.nheld - k;
      t.stable_released <- t.stable_released + k;
      t.released.(o) <- s
    end

  (* How many casts of [o] every member of the view holds, the suspected
     ones included (as far as their statuses tell). *)
  let held_by_all t o =
    if t.tree then Int.min (mine t o) t.gstable.(o)
    else
      let s = ref (mine t o) in
      for m = 0 to t.n - 1 do
        if m <> t.rank && t.known.(m).(o) < !s then s := t.known.(m).(o)
      done;
      !s

  (* Tell the layers above when what every member holds grows (once asked:
     [Track_stability]), with what this member has received: every cast
     that reached a layer above before the event is among [received]. *)
  let tell_stable ?(force = false) t =
    if t.track && not t.stopped then begin
      let changed = ref force in
      for o = 0 to t.n - 1 do
        let s = held_by_all t o in
        if s > t.told.(o) then begin
          t.told.(o) <- s;
          changed := true
        end
      done;
      if !changed then
        t.out.up_ctl (Stable { stable = Array.copy t.told; received = Array.init t.n (mine t) })
    end

  (* Arm the timers that the current state needs. *)
  (* Each deadline is kept in its field and in [due], whence the timer
     takes only those due. *)
  let set_nak t o at =
    t.nak_at.(o) <- at;
    Deadlines.set t.due o at;
    if at <> max_int then t.out.alarm at

  let set_status t at =
    t.status_at <- at;
    Deadlines.set t.due t.n at;
    if at <> max_int then t.out.alarm at

  let kick t =
    if not t.stopped then begin
      (* The clock is read once, and only when something is armed: most
         calls arm nothing. *)
      let now = ref min_int in
      for o = 0 to t.n - 1 do
        if wanted t o && t.nak_at.(o) = max_int then begin
          if !now = min_int then now := t.now ();
          set_nak t o (!now + t.nak_delay)
        end
      done;
      if t.status_at = max_int && (t.requested || busy t) then begin
        if !now = min_int then now := t.now ();
        set_status t (!now + t.status_interval)
      end
    end

  (* [kick] after an event that can only have closed gaps or left them as
     they were (a cast made here; the next cast expected from an origin,
     and what it released): every handler ends with a [kick], so each gap
     worth asking about has its NAK armed already, and only the status
     timer may be due to be armed. *)
  let kick_status t =
    if (not t.stopped) && t.status_at = max_int && (t.requested || busy t) then
      set_status t (t.now () + t.status_interval)

  let rec drain t o =
    if not t.stopped then
      if Msgring.mem t.held.(o) t.expected.(o) then begin
        let h = t.held.(o) and seq = t.expected.(o) in
        t.early_bytes.(o) <- t.early_bytes.(o) - Msgring.msg_length h seq;
        t.expected.(o) <- seq + 1;
        t.out.up (Event.Cast_from o) (Msgring.copy h seq);
        drain t o
      end

  (* The window is checked before anything changes: a number beyond it
     (a burst too large, or a forged or corrupt header) leaves no trace. *)
  let receive t o seq msg =
    if seq < t.expected.(o) || Msgring.mem t.held.(o) seq then begin
      t.duplicates <- t.duplicates + 1;
      Msg.release msg
    end
    else if seq - t.expected.(o) >= t.window then begin
      t.beyond_window <- t.beyond_window + 1;
      Log.debug (fun m -> m "from %d: dropped %d, beyond window at %d" o seq t.expected.(o));
      Msg.release msg
    end
    else if seq > t.expected.(o) && t.early_bytes.(o) + Msg.length msg > t.max_early then begin
      t.beyond_window <- t.beyond_window + 1;
      Log.debug (fun m ->
          m "from %d: dropped %d, %d bytes already kept early" o seq t.early_bytes.(o));
      Msg.release msg
    end
    else begin
      if seq >= t.seen.(o) then t.seen.(o) <- seq + 1;
      if seq >= t.highest.(o) then t.highest.(o) <- seq + 1;
      if seq > t.expected.(o) then begin
        t.out_of_order <- t.out_of_order + 1;
        t.early_bytes.(o) <- t.early_bytes.(o) + Msg.length msg;
        keep t o seq msg
      end
      else begin
        keep t o seq (Msg.retain msg);
        t.expected.(o) <- seq + 1;
        t.out.up (Event.Cast_from o) msg;
        drain t o;
        tell_stable t
      end;
      if not t.stopped then release_stable t o
    end;
    kick t

  let dn t (dst : Event.dst) msg =
    if t.stopped then Msg.release msg
    else
      match dst with
      | Event.Send _ -> t.out.dn dst No_hdr msg
      | Event.Cast ->
          let seq = t.next in
          t.next <- seq + 1;
          keep t t.rank seq (Msg.retain msg);
          let local = Msg.retain msg in
          t.out.dn Event.Cast (Data { seq }) msg;
          release_stable t t.rank;
          kick_status t;
          t.out.up t.self local;
          tell_stable t

  let own_vector t =
    match t.frozen with
    | Some f -> Array.init t.n (fun o -> if o = t.rank then mine t o else min f.(o) (mine t o))
    | None -> Array.init t.n (mine t)

  (* {b The stability tree} (Scale). The members not suspected, in rank
     order, form a tree of [fanout] children per node: member [live.(i)]
     reports to [live.((i - 1) / fanout)]. A report carries, for its
     sender's subtree, the fewest casts of each origin any of them holds
     ([low]), the most and who has them ([high], [who]), and which members it
     covers. The root casts [low] as what every member holds once the
     reports cover every member not suspected, with [high] and [who], so
     that a lost tail shows as a gap and has someone to be asked of. Each
     member sends one report and hears [fanout] and one root cast per
     interval, whatever the size of the group. *)
  let rebuild_tree t =
    let live = List.filter (fun r -> not t.suspected.(r)) (List.init t.n Fun.id) in
    t.live <- Array.of_list live;
    Array.fill t.pos 0 t.n (-1);
    Array.iteri (fun i r -> t.pos.(r) <- i) t.live

  let parent_of t r =
    let p = if r >= 0 && r < t.n then t.pos.(r) else -1 in
    if p <= 0 then None else Some t.live.((p - 1) / t.fanout)

  let is_child t c = parent_of t c = Some t.rank
  let covers cover r = Char.code cover.[r / 8] land (1 lsl (r mod 8)) <> 0

  let on_stability t busy stable high who =
    if stable.(t.rank) > t.next || high.(t.rank) > t.next then begin
      t.impossible <- t.impossible + 1;
      Log.debug (fun f -> f "stability claims more casts of this member than it made: dropped")
    end
    else begin
      for o = 0 to t.n - 1 do
        if stable.(o) > t.gstable.(o) then t.gstable.(o) <- stable.(o);
        let h = if o = t.rank then high.(o) else min high.(o) (t.expected.(o) + t.window) in
        (* The latest word on who holds the most: the member named before may
           be suspected since. *)
        if h >= t.gmax.(o) && who.(o) >= 0 && who.(o) < t.n then begin
          t.gmax.(o) <- h;
          t.gwho.(o) <- who.(o)
        end;
        if o <> t.rank && h > t.highest.(o) then t.highest.(o) <- h
      done;
      for o = 0 to t.n - 1 do
        release_stable t o
      done;
      if busy then t.requested <- true;
      kick t;
      tell_stable t
    end

  let report_up t =
    let low = own_vector t in
    let high = Array.copy low and who = Array.make t.n t.rank in
    let cover = Bytes.make ((t.n + 7) / 8) '\000' in
    let mark r =
      Bytes.set cover (r / 8) (Char.chr (Char.code (Bytes.get cover (r / 8)) lor (1 lsl (r mod 8))))
    in
    mark t.rank;
    let busy = ref (busy t) in
    Hashtbl.iter
      (fun _ k ->
        busy := !busy || k.k_busy;
        for o = 0 to t.n - 1 do
          if k.k_low.(o) < low.(o) then low.(o) <- k.k_low.(o);
          if k.k_high.(o) > high.(o) then begin
            high.(o) <- k.k_high.(o);
            who.(o) <- k.k_who.(o)
          end
        done;
        for r = 0 to t.n - 1 do
          if covers k.k_cover r then mark r
        done)
      t.kids;
    let cover = Bytes.unsafe_to_string cover in
    match parent_of t t.rank with
    | Some p ->
        t.reports_sent <- t.reports_sent + 1;
        t.out.dn (Event.Send p) (Report { busy = !busy; cover; low; high; who }) (Msg.empty ())
    | None ->
        (* The root: what every member holds is known once every member
           not suspected is covered; until then the root asks for reports. *)
        let complete = Array.for_all (covers cover) t.live in
        let stable =
          if complete then Array.init t.n (fun o -> max t.gstable.(o) low.(o))
          else Array.copy t.gstable
        in
        let busy = !busy || not complete in
        if t.n > 1 then begin
          t.stability_sent <- t.stability_sent + 1;
          t.out.dn Event.Cast (Stability { busy; stable; high; who }) (Msg.empty ())
        end;
        on_stability t false stable high who

  let on_report t m busy cover low high who =
    if not (is_child t m) then begin
      t.malformed <- t.malformed + 1;
      Log.debug (fun f -> f "report from %d, not a child of this member in the tree: dropped" m)
    end
    else if low.(t.rank) > t.next || high.(t.rank) > t.next then t.impossible <- t.impossible + 1
    else begin
      let who = Array.map (fun w -> if w >= 0 && w < t.n then w else m) who in
      Hashtbl.replace t.kids m
        { k_busy = busy; k_cover = cover; k_low = low; k_high = high; k_who = who };
      if busy then t.requested <- true;
      kick t
    end

  let send_status t =
    if t.tree then report_up t
    else begin
      t.status_sent <- t.status_sent + 1;
      t.out.dn Event.Cast (Status { busy = busy t; vector = own_vector t }) (Msg.empty ())
    end

  (* A status is checked whole before it is used: claiming more of this
     member's casts than it has made is impossible, and drops it. Claims
     about other origins count only up to the window: beyond it they could
     only make a gap that nobody can fill. The origin's own count is the
     truth about how many casts it has made: it corrects a count raised by
     others' claims (forged, or older than what arrived since). *)
  let on_status t m busy vector =
    if vector.(t.rank) > t.next then begin
      t.impossible <- t.impossible + 1;
      Log.debug (fun f ->
          f "status of %d claims %d casts of this member, which made %d: dropped" m vector.(t.rank)
            t.next)
    end
    else begin
      for o = 0 to t.n - 1 do
        let v = if o = t.rank then vector.(o) else min vector.(o) (t.expected.(o) + t.window) in
        if v > t.known.(m).(o) then t.known.(m).(o) <- v;
        if o = m then t.highest.(o) <- max v (max t.seen.(o) t.expected.(o))
        else if o <> t.rank && v > t.highest.(o) then t.highest.(o) <- v
      done;
      for o = 0 to t.n - 1 do
        refresh_floor t o;
        release_stable t o
      done;
      if busy then t.requested <- true;
      kick t;
      tell_stable t
    end

  (* The missing runs of [o]'s casts within the window, at most [max_ranges]. *)
  let missing t o =
    let limit = min t.highest.(o) (t.expected.(o) + t.window) in
    let rec go s acc k =
      if s >= limit || k = 0 then List.rev acc
      else if Msgring.mem t.held.(o) s then go (s + 1) acc k
      else
        let rec run e =
          if e + 1 < limit && not (Msgring.mem t.held.(o) (e + 1)) then run (e + 1) else e
        in
        let e = run s in
        go (e + 1) ((s, e) :: acc) (k - 1)
    in
    go t.expected.(o) [] max_ranges

  let send_nak t o =
    match Array.of_list (askable t o t.expected.(o)) with
    | [||] -> ()
    | candidates ->
        let target = candidates.(Rng.int t.rng (Array.length candidates)) in
        let ranges =
          if target = o then missing t o
          else
            let has =
              if not t.tree then
                (* Asked without a claim ([askable]): all that is missing. *)
                if t.known.(target).(o) > t.expected.(o) then t.known.(target).(o) else max_int
              else if target = t.gwho.(o) then t.gmax.(o)
              else max_int
            in
            List.filter_map
              (fun (a, b) -> if a >= has then None else Some (a, min b (has - 1)))
              (missing t o)
        in
        if ranges <> [] then begin
          t.naks_sent <- t.naks_sent + 1;
          Log.debug (fun m ->
              m "asking %d for casts of %d: %a" target o Fmt.(list ~sep:comma pp_range) ranges);
          t.out.dn (Event.Send target) (Nak { origin = o; ranges }) (Msg.empty ())
        end

  (* A NAK is answered with what this member holds in its ranges, at most
     a window's worth of numbers looked at, and at most once per half
     [nak_retry] for one asker and origin (the asker does not ask more
     often): forged or duplicated NAKs cannot make it send more. *)
  let on_nak t m o ranges =
    let now = t.now () in
    (* A row for [m] is made when it first asks: most members never do. *)
    if Array.length t.answered.(m) = 0 then t.answered.(m) <- Array.make t.n min_int;
    if t.suspected.(m) || now < t.answered.(m).(o) + (t.nak_retry / 2) then
      t.naks_ignored <- t.naks_ignored + 1
    else begin
      t.answered.(m).(o) <- now;
      let top = if o = t.rank then t.next - 1 else t.expected.(o) + t.window - 1 in
      let budget = ref t.window in
      List.iter
        (fun (a, b) ->
          let s = ref (max a t.released.(o)) in
          let e = min b top in
          while !s <= e && !budget > 0 do
            decr budget;
            if (not t.stopped) && Msgring.mem t.held.(o) !s then begin
              t.retransmissions <- t.retransmissions + 1;
              t.out.dn (Event.Send m)
                (Retrans { origin = o; seq = !s })
                (Msgring.copy t.held.(o) !s)
            end;
            incr s
          done)
        ranges
    end

  let malformed t src h msg =
    t.malformed <- t.malformed + 1;
    Log.debug (fun m -> m "dropped %a with header %a" Event.pp_src src pp_header h);
    Msg.release msg

  let up t (src : Event.src) h msg =
    if t.stopped then Msg.release msg
    else
      let valid r = r >= 0 && r < t.n in
      match (src, h) with
      | Event.Send_from _, No_hdr -> t.out.up src msg
      | Event.Cast_from o, Data { seq } when valid o && o <> t.rank -> receive t o seq msg
      | Event.Send_from m, Retrans { origin; seq } when valid m && valid origin ->
          if origin = t.rank then begin
            t.duplicates <- t.duplicates + 1;
            Msg.release msg
          end
          else receive t origin seq msg
      | (Event.Send_from m | Event.Cast_from m), Nak { origin; ranges }
        when valid m && m <> t.rank && valid origin ->
          Msg.release msg;
          on_nak t m origin ranges
      | (Event.Send_from m | Event.Cast_from m), Status { busy; vector }
        when valid m && m <> t.rank && Array.length vector = t.n ->
          Msg.release msg;
          if t.tree then malformed t src h (Msg.empty ()) else on_status t m busy vector
      | Event.Send_from m, Report { busy; cover; low; high; who }
        when t.tree && valid m && m <> t.rank
             && String.length cover = (t.n + 7) / 8
             && Array.length low = t.n
             && Array.length high = t.n
             && Array.length who = t.n ->
          Msg.release msg;
          on_report t m busy cover low high who
      | Event.Cast_from m, Stability { busy; stable; high; who }
        when t.tree && valid m && m <> t.rank
             && Array.length stable = t.n
             && Array.length high = t.n
             && Array.length who = t.n ->
          Msg.release msg;
          on_stability t busy stable high who
      | _ -> malformed t src h msg

  (* A suspicion is final within the view: the suspected member is not
     waited for by stability, not asked for repairs, not answered. *)
  let suspect t ranks =
    let fresh =
      List.filter (fun r -> r >= 0 && r < t.n && r <> t.rank && not t.suspected.(r)) ranks
    in
    if fresh <> [] && not t.stopped then begin
      List.iter (fun r -> t.suspected.(r) <- true) fresh;
      if t.tree then begin
        rebuild_tree t;
        Hashtbl.filter_map_inplace (fun c k -> if is_child t c then Some k else None) t.kids
      end
      else
        for o = 0 to t.n - 1 do
          refresh_floor t o
        done;
      for o = 0 to t.n - 1 do
        release_stable t o
      done;
      kick t
    end

  let up_ctl t e =
    (match e with
    | Gevent.Suspect { ranks; _ } -> suspect t ranks
    | Event.Block_ok _ when t.track && t.frozen = None ->
        (* What the flush counts here was delivered before this; what comes
           later may be dropped by it: not claimed (see [Stable]). *)
        t.frozen <- Some (Array.init t.n (mine t))
    | _ -> ());
    t.out.up_ctl e

  let release_all t =
    Array.iter Msgring.reset t.held;
    t.nheld <- 0;
    Array.fill t.early_bytes 0 t.n 0;
    Array.fill t.nak_at 0 t.n max_int;
    t.status_at <- max_int;
    Deadlines.reset t.due

  let dn_ctl t e =
    match e with
    | Track_stability ->
        t.track <- true;
        tell_stable ~force:true t
    | e ->
        (match e with
        | Event.Stop ->
            t.stopped <- true;
            release_all t
        | _ -> ());
        t.out.dn_ctl e

  (* Only the deadlines due are visited, earliest first. *)
  let timer t now =
    if not t.stopped then begin
      let k = Deadlines.take_due t.due now t.due_now in
      for j = 0 to k - 1 do
        let o = t.due_now.(j) in
        if o < t.n then begin
          if t.nak_at.(o) <= now then
            if wanted t o then begin
              send_nak t o;
              set_nak t o (now + t.nak_retry)
            end
            else set_nak t o max_int
        end
        else if t.status_at <= now then begin
          set_status t max_int;
          if t.requested || busy t then begin
            t.requested <- false;
            send_status t
          end
        end
      done;
      kick t;
      let next = Deadlines.next t.due in
      if next <> max_int then t.out.alarm next
    end

  let counters t =
    [
      ("naks_sent", t.naks_sent);
      ("retransmissions", t.retransmissions);
      ("duplicates", t.duplicates);
      ("out_of_order", t.out_of_order);
      ("beyond_window", t.beyond_window);
      ("stable_released", t.stable_released);
      ("status_sent", t.status_sent);
      ("malformed", t.malformed);
      ("impossible", t.impossible);
      ("naks_ignored", t.naks_ignored);
      ("reports_sent", t.reports_sent);
      ("stability_sent", t.stability_sent);
      ("buffered", t.nheld);
    ]
end

(* The common case of a cast: down, any cast while not stopped (its number
   is the field); up, the next cast expected from a member of the view. *)
module F = struct
  include L

  let cast =
    {
      Layer.nfields = 1;
      live = None;
      up_live = false;
      length = false;
      framed = false;
      size = (fun a off -> 1 + Codec.varint_size a.(off));
      dn_ok = (fun t dst _ -> (not t.stopped) && dst == Event.Cast);
      dn_fast =
        (fun t _ msg _ ~layered a off ->
          let seq = t.next in
          t.next <- seq + 1;
          keep_head t t.rank seq (layered.head ()) msg;
          t.local <- Msg.retain msg;
          a.(off) <- seq);
      dn_after =
        (fun t _ _ ~up _ _ ->
          (* [t.local] is left as it is (the record, now the app's, stays
             reachable until the next cast): the next store then finds a
             young value there, which needs no more work from the
             collector's write barrier. *)
          let local = t.local in
          release_stable t t.rank;
          kick_status t;
          (* Up the fused path too: [local] has no layered header. *)
          up t.self local;
          tell_stable t);
      up_ok =
        (fun t src _ a off ->
          (not t.stopped)
          &&
          match src with
          | Event.Cast_from o ->
              o >= 0 && o < t.n && o <> t.rank
              && a.(off) = t.expected.(o)
              && not (Msgring.mem t.held.(o) a.(off))
          | _ -> false);
      up_fast =
        (fun t src msg _ ~layered a off ->
          match src with
          | Event.Cast_from o ->
              let seq = a.(off) in
              if seq >= t.seen.(o) then t.seen.(o) <- seq + 1;
              if seq >= t.highest.(o) then t.highest.(o) <- seq + 1;
              keep_head t o seq (layered.head ()) msg;
              t.expected.(o) <- seq + 1;
              src
          | _ -> src);
      up_after =
        (fun t src _ _ _ ->
          match src with
          | Event.Cast_from o ->
              drain t o;
              tell_stable t;
              if not t.stopped then release_stable t o;
              kick_status t
          | _ -> ());
      expand = (fun a off -> Data { seq = a.(off) });
    }

  (* Sends pass. *)
  let send = Layer.constant_send codec No_hdr ~live:(fun t -> not t.stopped) ()

  let state t =
    let ints = Fmt.(array ~sep:sp int) in
    let held ppf h =
      Fmt.(Dump.list (pair int Dump.string))
        ppf
        (List.sort compare (Msgring.fold (fun k s acc -> (k, s) :: acc) h []))
    in
    Fmt.str
      "stopped %b next %d; released %a; expected %a; highest %a; seen %a; early %a; known %a; \
       suspected %a; nak_at %a; status_at %d requested %b track %b frozen %a told %a; held %a; %a"
      t.stopped t.next ints t.released ints t.expected ints t.highest ints t.seen ints t.early_bytes
      Fmt.(array ~sep:semi ints)
      t.known
      Fmt.(array ~sep:sp bool)
      t.suspected ints t.nak_at t.status_at t.requested t.track
      Fmt.(option ints)
      t.frozen ints t.told
      Fmt.(array ~sep:semi held)
      t.held
      Fmt.(list ~sep:sp (pair ~sep:(any "=") string int))
      (counters t)
end

include L

let layer : Layer.t = Layer.fast_send (module F)

(* Scale: the same layer, its statuses gathered up a tree (see [report_up]). *)
module Tree = struct
  include F

  let name = "mnak_tree"
  let create ctx out = create_mode ~tree:true ctx out
end

let tree_layer : Layer.t = Layer.fast (module Tree)
