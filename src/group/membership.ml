open Consort
module Log = Group_log.Log

let max_probes = 16
let max_known = 1024

module type ADDRESS = sig
  type t

  val equal : t -> t -> bool
  val to_string : t -> string
  val of_string : string -> (t, string) result
end

module Make (A : ADDRESS) = struct
  type ctx = {
    now : Time.t;
    me : Side.member;
    view : View.t;
    addrs : A.t array;
    pubs : string array;
    coord : int;
    blocked : bool;
    resumed : bool;
    gone : int -> bool;
    reported : (int * int list * int list * string) option;
  }

  type refusal = View of string | Stack of { stack : Side.stack; reason : string } | Key of string

  type action =
    | Send of A.t * Side.t
    | Start_flush of string
    | Merge_into of string
    | Suspect of { ranks : int list; reason : string }
    | Install of {
        vid : string;
        ltime : int;
        members : Side.member list;
        stack : Side.stack option;
        key : (unit -> unit) option;
      }
    | Dead_view of string
    | Leave
    | Exit
    | Refused of { vid : string; src : A.t; why : refusal }

  type input =
    | Side of { src : A.t; msg : Side.t }
    | Flushed of { survivors : int list; leavers : int list }
    | Alone
    | Retry
    | Merge_wait
    | Heard
    | Gossip
    | Leave_wait

  (* A probe out before a merge: to member [who] at [at], asking whether it
     is in view [pvid] now; what to do once it answers. *)
  type probe = {
    nonce : string;
    at : A.t;
    who : string;
    pvid : string;
    since : Time.t;
    then_ : [ `Merge_into of Side.member | `Take_in of Side.t | `Still_there | `Moved_on ];
  }

  type t = {
    group : string;
    rng : Rng.t;
    peers : A.t list;
    discovery : A.t option; (* a multicast group all members joined *)
    heal : bool;
    merge_timeout : Time.t;
    install_retry : Time.t;
    leave_timeout : Time.t;
    current_stack : unit -> Side.stack;
    next_stack : unit -> Side.stack;
    wrap : vid:string -> members:Side.member list -> Side.t -> Side.t * (unit -> unit) option;
    buildable : Side.stack -> (unit, string) result;
    unwrap :
      view_members:string array ->
      pubs:string array ->
      Side.t ->
      ((unit -> unit) option, string) result;
    known : (string, Side.member) Hashtbl.t; (* every member seen, by id *)
    mutable merging : (A.t * Time.t option) option;
        (* merging into the partition there: flushing first (no deadline),
           then waiting for its view until the deadline *)
    mutable merge_req : Side.t option;
        (* the request sent with the current merge, asked again until answered *)
    mutable absorbing : (int * Side.member list * string list) option;
        (* will take these members in: their logical time, members, views *)
    mutable minted : int; (* the highest logical time this member named a view with *)
    mutable pending : (Side.t * (string * A.t) list) option;
        (* a view this coordinator announced, and who has not acknowledged it *)
    mutable pending_since : Time.t; (* when [pending] was announced *)
    mutable merge_since : Time.t; (* when the current merge attempt started *)
    mutable merge_vid : string; (* the view of the coordinator the current merge asks *)
    mutable merge_heard : Time.t;
        (* when that coordinator last answered a probe naming that view: it
           is still flushing it (a flush that takes this partition in, or
           another), and the merge waits on, up to [max_merge_wait] *)
    mutable heard : (A.t * string * string) option;
        (* a partition to merge into, heard of while busy with a view change *)
    mutable merge_into : string; (* the coordinator the current merge asks *)
    mutable probes : probe list; (* out, newest first, at most [max_probes] *)
    mutable garbage : int; (* probe answers that match no probe out, Installs refused *)
    mutable current : A.t Group_view.t option; (* the view installed, as the driver bound it *)
    mutable leaving : Time.t option; (* leaving the group: the time it goes anyway *)
  }

  let create ~group ~rng ?(peers = []) ?discovery ?(heal = true) ~merge_timeout ~install_retry
      ~leave_timeout ~current_stack ~next_stack ~wrap ~buildable ~unwrap () =
    {
      group;
      rng;
      peers;
      discovery;
      heal;
      merge_timeout;
      install_retry;
      leave_timeout;
      current_stack;
      next_stack;
      wrap;
      buildable;
      unwrap;
      known = Hashtbl.create 16;
      merging = None;
      merge_req = None;
      absorbing = None;
      minted = 0;
      pending = None;
      pending_since = 0;
      merge_since = 0;
      merge_vid = "";
      merge_heard = 0;
      heard = None;
      merge_into = "";
      probes = [];
      garbage = 0;
      current = None;
      leaving = None;
    }

  (* {1 What the driver reads} *)

  let merging t = t.merging <> None
  let absorbing t = t.absorbing <> None
  let awaiting_acks t = t.pending <> None
  let pending_targets t = match t.pending with Some (_, ts) -> List.map fst ts | None -> []
  let changing t = t.merging <> None || t.absorbing <> None || t.pending <> None
  let hurry t ~blocked = (t.merging <> None && blocked) || t.pending <> None || t.heard <> None
  let garbage t = t.garbage
  let leaving t = t.leaving <> None
  let probes_out t = List.length t.probes
  let known t = Hashtbl.length t.known
  let known_member t eid = Hashtbl.find_opt t.known eid
  let current t = t.current
  let set_current t v = t.current <- Some v

  (* View [v] as a step of the kernel sees it. *)
  let context ~now ~me ~blocked ~resumed v =
    {
      now;
      me;
      view = Group_view.view v;
      addrs = Group_view.addrs v;
      pubs = Group_view.pubs v;
      coord = Group_view.coordinator_rank v;
      blocked;
      resumed;
      gone = Group_view.gone v;
      reported = Group_view.reported v;
    }

  (* {1 Helpers} *)

  let index_where p l =
    let rec go i = function [] -> None | x :: rest -> if p x then Some i else go (i + 1) rest in
    go 0 l

  let is_coordinator (x : ctx) = x.coord = x.view.View.rank

  let member_of (x : ctx) r =
    { Side.eid = x.view.View.members.(r); addr = A.to_string x.addrs.(r); pub = x.pubs.(r) }

  let addr_of (x : ctx) s =
    match A.of_string s with
    | Ok a -> Some a
    | Error e ->
        Log.warn (fun m -> m "%s: bad member address %S: %s" x.me.eid s e);
        None

  (* Members heard of outside this view, to send discovery messages to:
     learnt only from what answered a probe, an Install or a merge taken in,
     and at most [max_known] (a stranger's discovery messages add none). *)
  let remember t (m : Side.member) =
    if Hashtbl.mem t.known m.eid || Hashtbl.length t.known < max_known then
      Hashtbl.replace t.known m.eid m

  (* The members of a view this member installs. *)
  let learn t ~me members =
    List.iter (fun (m : Side.member) -> if m.eid <> me then Hashtbl.replace t.known m.eid m) members

  (* A view is installed: no merge or absorb is under way any more. *)
  let installed t =
    t.merging <- None;
    t.absorbing <- None

  (* Member [eid] moved to [addr]: the view this coordinator waits on goes
     there too. *)
  let moved t ~eid addr =
    let a = A.to_string addr in
    (match Hashtbl.find_opt t.known eid with
    | Some m -> Hashtbl.replace t.known eid { m with Side.addr = a }
    | None -> ());
    match t.pending with
    | Some (msg, targets) ->
        t.pending <-
          Some (msg, List.map (fun (e, d) -> if e = eid then (e, addr) else (e, d)) targets)
    | None -> ()

  (* Member [eid] at [src] acknowledges view [vid]: only from the member
     named, at its address. *)
  let acked t ~vid ~eid ~src =
    match t.pending with
    | Some ((Side.Install { vid = v; _ } as msg), targets) when v = vid ->
        let rest = List.filter (fun (e, a) -> not (e = eid && A.equal a src)) targets in
        t.pending <- (if rest = [] then None else Some (msg, rest))
    | _ -> ()

  (* View names are "LTIME:EID": unique because each member names views
     at logical times it never reuses, even when it names two in one view
     (a leaving coordinator whose first announcement was overtaken). *)
  let mint t at_least =
    let l = max at_least t.minted + 1 in
    t.minted <- l;
    l

  (* {1 Actions} *)

  let announce t (x : ctx) emit ~stack ~vid ~ltime ~members ~leavers ~preds =
    let msg =
      Side.Install { group = t.group; vid; ltime; members; leavers; preds; stack; keys = [] }
    in
    (* With Rekey, a fresh key for the view, wrapped for its members only:
       not for those excluded or leaving, which get the Install too. *)
    let msg, key = t.wrap ~vid ~members msg in
    let targets =
      List.filter_map
        (fun (m : Side.member) ->
          if m.eid = x.me.eid then None else Option.map (fun a -> (m.eid, a)) (addr_of x m.addr))
        members
      @ List.filter_map
          (fun eid ->
            match index_where (String.equal eid) (Array.to_list x.view.View.members) with
            | Some r when eid <> x.me.eid -> Some (eid, x.addrs.(r))
            | _ -> None)
          leavers
    in
    List.iter (fun (_, a) -> emit (Send (a, msg))) targets;
    t.pending <- Some (msg, targets);
    t.pending_since <- x.now;
    key

  let start_merge t (x : ctx) emit dst eid pvid =
    Log.info (fun m ->
        m "%s: asking to merge view %s into another partition" x.me.eid x.view.View.id);
    t.merging <- Some (dst, None);
    t.merge_into <- eid;
    t.merge_vid <- pvid;
    t.merge_heard <- 0;
    t.merge_since <- x.now;
    (* The members accept the next view from the coordinator of this view
       or from the one it merges into, no one else. *)
    emit (Merge_into eid);
    emit (Start_flush "merge")

  (* A merge starts only on direct evidence that the other partition exists
     and answers: member [who] at [at] asked whether it is in view [pvid]
     (as Suspect checks a suspicion), and [then_] done when it says so. A
     forged or corrupted discovery message or merge request costs one probe,
     no view change. At most one probe a retry period to a member about a
     view; at most [max_probes] out, the oldest forgotten first. *)
  let probe t (x : ctx) emit ~at ~who ~pvid then_ =
    let n = x.now in
    if
      not
        (List.exists
           (fun p -> p.who = who && p.pvid = pvid && n - p.since < t.install_retry)
           t.probes)
    then begin
      let nonce = Printf.sprintf "%016Lx" (Rng.bits64 t.rng) in
      let p = { nonce; at; who; pvid; since = n; then_ } in
      t.probes <- List.filteri (fun i _ -> i < max_probes - 1) (p :: t.probes);
      emit (Send (at, Side.Probe { group = t.group; vid = pvid; nonce; eid = x.me.eid; dst = who }))
    end

  (* A discovery message names the view's coordinator, whoever sends it. *)
  let gossip_msg t (x : ctx) =
    Side.Gossip
      {
        group = t.group;
        vid = x.view.View.id;
        ltime = x.view.View.ltime;
        coord = (if is_coordinator x then x.me else member_of x x.coord);
        size = Array.length x.view.View.members;
        stack = t.current_stack ();
      }

  let busy t (x : ctx) = x.blocked || t.merging <> None || t.absorbing <> None

  (* A merge request judged genuine (its sender answered a probe): take its
     members in, now or with the merge under way. *)
  let take_in t (x : ctx) emit v =
    match v with
    | Side.Merge_req { ltime; members; vid = their_vid; _ } ->
        List.iter (remember t) members;
        let from_mine =
          List.exists (fun (m : Side.member) -> Array.mem m.eid x.view.View.members) members
        in
        (* A member of this view at the address a joiner answered from is
           an incarnation that is gone (one process answers at an address):
           suspected at once, so that the flush that takes the joiner in
           excludes it, rather than waiting for its silence while the
           joiner gives up and asks again from a new view. *)
        let gone_from_addr () =
          let ranks =
            List.filter_map
              (fun r ->
                let addr = A.to_string x.addrs.(r) and eid = x.view.View.members.(r) in
                if
                  r <> x.view.View.rank
                  && List.exists (fun (m : Side.member) -> m.addr = addr && m.eid <> eid) members
                then Some r
                else None)
              (List.init (Array.length x.view.View.members) Fun.id)
          in
          if ranks <> [] then emit (Suspect { ranks; reason = "restarted at its address" })
        in
        if
          is_coordinator x && (not x.blocked) && t.merging = None && t.absorbing = None
          && not from_mine
        then begin
          Log.info (fun m -> m "%s: taking in %d members" x.me.eid (List.length members));
          t.absorbing <- Some (ltime, members, [ their_vid ]);
          emit (Start_flush "merge request");
          gone_from_addr ()
        end
        else if is_coordinator x && t.merging = None && not from_mine then begin
          match t.absorbing with
          | None when x.blocked && not (leaving t) ->
              (* A flush of this view is under way (a suspicion: often of
                 the old incarnation of this very joiner, restarted at its
                 address): the view it ends in takes these in too, rather
                 than a second view change once the joiner has given up and
                 asked again. *)
              Log.info (fun m ->
                  m "%s: taking in %d members with the flush under way" x.me.eid
                    (List.length members));
              t.absorbing <- Some (ltime, members, [ their_vid ]);
              gone_from_addr ()
          | Some (l, joiners, vids)
            when not
                   (List.exists
                      (fun (m : Side.member) ->
                        List.exists (fun (j : Side.member) -> j.eid = m.eid) joiners)
                      members) ->
              (* A flush for a merge is under way: take these in with it. *)
              Log.info (fun m -> m "%s: taking in %d more members" x.me.eid (List.length members));
              t.absorbing <- Some (max l ltime, joiners @ members, their_vid :: vids);
              gone_from_addr ()
          | _ -> ()
        end
    | _ -> ()

  (* {1 A view from another member} *)

  (* An Install naming this member: acknowledged again if it is the current view; taken, while
     this member's view is flushed, if it is a later one that {!Side.accept_install} finds follows
     the flush, on a stack this member can build, with a key it can open; then acknowledged to where
     it came from. A leaving member that a view lets go goes. *)
  let on_install t (x : ctx) emit ~src msg =
    match msg with
    | Side.Install { vid; ltime; members; leavers; preds; stack; _ } ->
        let ack () =
          emit
            (Send
               ( src,
                 Side.Install_ack { group = t.group; vid; eid = x.me.eid; dst = Side.installer vid }
               ))
        in
        let refuse why =
          t.garbage <- t.garbage + 1;
          emit (Refused { vid; src; why })
        in
        (* The coordinator this member asked to take it in, which names the view even when it
           leaves (and so is not in it). *)
        let maker =
          match t.merging with
          | Some (dst, _) when t.merge_into <> "" -> Some (A.to_string dst)
          | _ -> None
        in
        if List.exists (fun (m : Side.member) -> m.eid = x.me.eid) members then begin
          if vid = x.view.View.id then ack ()
          else if x.blocked && ltime > x.view.View.ltime then
            match
              Side.accept_install ~maker ~me:x.me.eid ~view:x.view
                ~addr:(fun r -> A.to_string x.addrs.(r))
                ~reported:x.reported ~src:(A.to_string src) ~vid ~members ~preds
            with
            | Error why -> refuse (View why)
            | Ok () -> (
                match t.buildable stack with
                | Error reason -> refuse (Stack { stack; reason })
                | Ok () -> (
                    match t.unwrap ~view_members:x.view.View.members ~pubs:x.pubs msg with
                    | Error why -> refuse (Key why)
                    | Ok key ->
                        emit (Install { vid; ltime; members; stack = Some stack; key });
                        ack ()))
        end
        else if List.mem x.me.eid leavers && leaving t then emit Exit
    | _ -> ()

  (* {1 Side-channel messages} *)

  let on_side t (x : ctx) emit ~src v =
    match v with
    | Side.Gossip { vid; coord; ltime; size; _ }
      when Array.mem coord.eid x.view.View.members
           && coord.eid <> x.me.eid && vid <> x.view.View.id && ltime > x.view.View.ltime
           && size >= Array.length x.view.View.members - 1
           && not (leaving t) ->
        (* A member of this view coordinates a later view as large as
           this one without this member, and tells this member of it
           (gossip goes only to those outside the view): this view went
           on without this member (paused past the others' suspicion, or
           cut off). Once that member answers a probe naming it (not a
           forgery), this member goes on alone and merges back, rather
           than taking casts into a view no one else is in until its own
           suspicions and flush run out. *)
        let target = match addr_of x coord.addr with Some a -> a | None -> src in
        probe t x emit ~at:target ~who:coord.eid ~pvid:vid `Moved_on
    | Side.Gossip { vid; coord; _ } -> (
        let mine = Array.mem coord.eid x.view.View.members in
        (* Merge requests go to the other view's coordinator itself. *)
        let target = match addr_of x coord.addr with Some a -> a | None -> src in
        let my_coord = x.view.View.members.(x.coord) in
        match
          Side.on_gossip ~me:x.me.eid ~my_coord ~same_view:(vid = x.view.View.id) ~in_my_view:mine
            ~coordinator:(is_coordinator x) ~busy:(busy t x) ~leaving:(leaving t)
            ~their_coord:coord.eid
        with
        | Side.Merge_into | Side.Merge_later ->
            probe t x emit ~at:target ~who:coord.eid ~pvid:vid (`Merge_into coord)
        | Side.Answer -> emit (Send (src, gossip_msg t x))
        | Side.Nothing -> ())
    | Side.Merge_req { members; vid = their_vid; _ } ->
        let from_mine =
          List.exists (fun (m : Side.member) -> Array.mem m.eid x.view.View.members) members
        in
        if is_coordinator x && t.merging = None && not from_mine then begin
          (* Taken in only once a member of that view answers a probe,
             the one at the request's address if any. *)
          let asker =
            match List.find_opt (fun (m : Side.member) -> m.addr = A.to_string src) members with
            | Some m -> Some m
            | None -> ( match members with m :: _ -> Some m | [] -> None)
          in
          match asker with
          | Some m -> (
              match addr_of x m.addr with
              | Some at -> probe t x emit ~at ~who:m.eid ~pvid:their_vid (`Take_in v)
              | None -> ())
          | None -> ()
        end
        else if
          (not (is_coordinator x))
          && (not from_mine)
          && List.exists (fun (m : Side.member) -> m.addr = A.to_string src) members
        then
          (* Asked as the coordinator of a view this member has since left:
             pass the request on, once (only a request from its author), to
             the coordinator now. *)
          let r = x.coord in
          match v with
          | Side.Merge_req m ->
              emit (Send (x.addrs.(r), Side.Merge_req { m with dst = x.view.View.members.(r) }))
          | _ -> ()
        else ()
    | Side.Probe { vid; nonce; eid; dst; _ } ->
        if dst = x.me.eid && vid = x.view.View.id then
          emit
            (Send (src, Side.Probe_ack { group = t.group; vid; nonce; eid = x.me.eid; dst = eid }))
    | Side.Probe_ack { vid; nonce; eid; _ } -> (
        match
          List.find_opt
            (fun p -> p.nonce = nonce && p.who = eid && p.pvid = vid && A.equal p.at src)
            t.probes
        with
        | None -> t.garbage <- t.garbage + 1
        | Some p -> (
            t.probes <- List.filter (fun q -> q != p) t.probes;
            match p.then_ with
            | `Merge_into coord ->
                remember t coord;
                if not (Array.mem p.who x.view.View.members) then
                  if is_coordinator x && not (busy t x) then start_merge t x emit p.at p.who p.pvid
                  else t.heard <- Some (p.at, p.who, p.pvid)
            | `Take_in req -> take_in t x emit req
            | `Still_there -> if t.merging <> None then t.merge_heard <- x.now
            | `Moved_on ->
                (* Only after a pause of this process: a member of a view
                   this one is about to install may gossip to an address
                   of this member it does not know yet (after a move). *)
                if
                  x.resumed
                  && Array.mem p.who x.view.View.members
                  && p.pvid <> x.view.View.id
                  && (not (leaving t))
                  && Array.length x.view.View.members > 1
                then begin
                  Log.info (fun m ->
                      m "%s: view %s went on without it (%s is in view %s): going on alone" x.me.eid
                        x.view.View.id p.who p.pvid);
                  (* Every other member suspected: this member's flush,
                     alone, ends the view as any flush does (what its
                     ordering layers still hold delivered), then a view
                     of one. *)
                  let others =
                    List.filter
                      (fun r -> r <> x.view.View.rank)
                      (List.init (Array.length x.view.View.members) Fun.id)
                  in
                  t.pending <- None;
                  (* Casts made now would reach no one: refused at once,
                     until the next view. *)
                  emit
                    (Dead_view
                       (Printf.sprintf
                          "view %s went on without this member (%s is in view %s): rejoining"
                          x.view.View.id p.who p.pvid));
                  emit (Suspect { ranks = others; reason = Printf.sprintf "in view %s" p.pvid })
                end))
    | Side.Install_ack { vid; eid; _ } -> acked t ~vid ~eid ~src
    | Side.Install _ -> on_install t x emit ~src v
    | Side.Switch_req _ | Side.Status_req _ | Side.Status_ans _ -> ()

  (* {1 The coordinator's flush is complete} *)

  let flushed t (x : ctx) emit ~survivors ~leavers =
    let mine = List.map (member_of x) survivors in
    let leaver_ids = List.map (fun r -> x.view.View.members.(r)) leavers in
    match t.merging with
    | Some (dst, _) ->
        let req =
          Side.Merge_req
            {
              group = t.group;
              vid = x.view.View.id;
              ltime = x.view.View.ltime;
              members = mine;
              stack = t.current_stack ();
              dst = t.merge_into;
            }
        in
        emit (Send (dst, req));
        t.merge_req <- Some req;
        t.merging <- Some (dst, Some (x.now + t.merge_timeout))
    | None ->
        let joiners, their_ltime, their_vids =
          match t.absorbing with Some (l, m, v) -> (m, l, v) | None -> ([], 0, [])
        in
        let members =
          mine
          @ List.filter
              (fun (j : Side.member) ->
                not (List.exists (fun (m : Side.member) -> m.eid = j.eid) mine))
              joiners
        in
        let preds = x.view.View.id :: their_vids in
        if List.exists (fun (m : Side.member) -> m.eid = x.me.eid) members then begin
          let ltime = mint t (max x.view.View.ltime their_ltime) in
          let vid = Printf.sprintf "%d:%s" ltime x.me.eid in
          let stack = t.next_stack () in
          let key = announce t x emit ~stack ~vid ~ltime ~members ~leavers:leaver_ids ~preds in
          emit (Install { vid; ltime; members; stack = Some stack; key })
        end
        else begin
          (* This coordinator is leaving. It names the view (view names
             are unique because each is made by one member, at a logical
             time it never reuses), sends it, and stays until every member
             has acknowledged it or the leave times out. *)
          let ltime = mint t (max x.view.View.ltime their_ltime) in
          let vid = Printf.sprintf "%d:%s" ltime x.me.eid in
          if members <> [] then
            ignore
              (announce t x emit ~stack:(t.next_stack ()) ~vid ~ltime ~members ~leavers:leaver_ids
                 ~preds);
          if t.pending = None then emit Exit
        end

  (* Excluded, or everyone else gone: a view of one. *)
  let alone t (x : ctx) emit =
    let ltime = mint t x.view.View.ltime in
    let vid = Printf.sprintf "%d:%s" ltime x.me.eid in
    emit (Install { vid; ltime; members = [ x.me ]; stack = None; key = None })

  (* {1 Periodic work} *)

  let expire_probes t ~now =
    if t.probes <> [] then
      t.probes <- List.filter (fun p -> now - p.since <= t.merge_timeout) t.probes

  (* The view this coordinator announced: resent to who has not
     acknowledged it, or given up. *)
  let retry t (x : ctx) emit =
    match t.pending with
    | Some (Side.Install { vid; _ }, targets)
      when vid = x.view.View.id && x.now > t.pending_since + t.merge_timeout ->
        (* A member that has not acknowledged this view in the time a
           joiner waits for one went on without it (its merge timed
           out): stop asking, and let a flush exclude it now rather
           than after its silence. *)
        t.pending <- None;
        let ranks =
          List.filter_map
            (fun (eid, _) ->
              match index_where (String.equal eid) (Array.to_list x.view.View.members) with
              | Some r when r <> x.view.View.rank -> Some r
              | _ -> None)
            targets
        in
        if ranks <> [] then
          emit (Suspect { ranks; reason = Printf.sprintf "did not acknowledge view %s" vid })
    | Some (msg, targets) -> List.iter (fun (_, a) -> emit (Send (a, msg))) targets
    | None -> ()

  (* The longest a merge waits on a coordinator that answers: a flush
     there outlasts a member's silence (suspect.timeout, 5 s by default) at
     most by a flush timeout. *)
  let max_merge_wait t = 4 * t.merge_timeout

  let merge_wait t (x : ctx) emit =
    let now = x.now in
    (* The other coordinator ignores requests while it changes views
       for others: ask again, during the first half of the wait. *)
    (match (t.merging, t.merge_req) with
    | Some (dst, Some deadline), Some req when x.blocked && now < deadline - (t.merge_timeout / 2)
      ->
        emit (Send (dst, req))
    | _ -> ());
    (* While it waits, the partition asks whether that coordinator is
       still in the view it asked to merge into: a flush there (for
       this merge, a member that crashed holding it up) may outlast
       the wait, and a view given up for a new one of its own would
       make the Install that comes refused. *)
    (match t.merging with
    | Some (dst, Some _) when x.blocked && t.merge_vid <> "" ->
        probe t x emit ~at:dst ~who:t.merge_into ~pvid:t.merge_vid `Still_there
    | _ -> ());
    (match t.merging with
    | Some (dst, Some deadline)
      when now > deadline && x.blocked
           && t.merge_heard > deadline - t.merge_timeout
           && now < t.merge_since + max_merge_wait t ->
        (* Answered within the wait: wait again (the request asked
           again during its first half). *)
        t.merging <- Some (dst, Some (now + t.merge_timeout))
    | _ -> ());
    (match t.merging with
    | Some (_, Some deadline) when now > deadline && x.blocked ->
        (* The other partition did not answer: carry on alone, in a
           fresh view of the same members. *)
        Log.info (fun m ->
            m "%s: merge not answered; going on with view %s" x.me.eid x.view.View.id);
        t.merging <- None;
        (* Without the members the flush excluded or let go. *)
        let members =
          List.filteri
            (fun r _ -> not (x.gone r))
            (Array.to_list (Array.mapi (fun r _ -> member_of x r) x.view.View.members))
        in
        let ltime = mint t x.view.View.ltime in
        let vid = Printf.sprintf "%d:%s" ltime x.me.eid in
        let stack = t.next_stack () in
        let key =
          announce t x emit ~stack ~vid ~ltime ~members ~leavers:[] ~preds:[ x.view.View.id ]
        in
        emit (Install { vid; ltime; members; stack = Some stack; key })
    | _ -> ());
    (* A merge whose flush never started (the stack saw no reason to
       run one) is given up rather than left waiting. *)
    match t.merging with
    | Some (_, None) when (not x.blocked) && now > t.merge_since + t.merge_timeout ->
        t.merging <- None;
        emit (Merge_into "")
    | _ -> ()

  (* A partition heard of while busy: merge into it now. *)
  let heard t (x : ctx) emit =
    match t.heard with
    | Some (dst, eid, pvid)
      when is_coordinator x && (not x.blocked) && t.merging = None && t.absorbing = None ->
        t.heard <- None;
        if not (Array.mem eid x.view.View.members) then start_merge t x emit dst eid pvid
    | _ -> ()

  (* The coordinator's discovery messages: to the peers configured, every
     member known outside the view and the discovery group. *)
  let gossip t (x : ctx) emit =
    if t.heal && is_coordinator x && (not x.blocked) && not (leaving t) then begin
      let msg = gossip_msg t x in
      let to_known =
        Hashtbl.fold
          (fun eid (m : Side.member) acc ->
            if Array.mem eid x.view.View.members then acc else m.addr :: acc)
          t.known []
        |> List.sort_uniq compare
        |> List.filter_map (addr_of x)
      in
      let dsts = t.peers @ to_known @ Option.to_list t.discovery in
      let self = A.to_string x.addrs.(x.view.View.rank) in
      List.iter
        (fun a ->
          if A.to_string a <> self && not (Array.exists (A.equal a) x.addrs) then
            emit (Send (a, msg)))
        (List.sort_uniq (fun a b -> compare (A.to_string a) (A.to_string b)) dsts)
    end

  (* This member leaves: alone, at once; else its stack's flush lets it go, and it waits (as a
     coordinator, for the view it names to be acknowledged) until [leave_timeout] at most. *)
  let leave t ~now ~alone =
    if t.leaving <> None then []
    else begin
      t.leaving <- Some (now + t.leave_timeout);
      if alone then [ Exit ] else [ Leave ]
    end

  (* A leaving member whose time is up, or a leaving coordinator whose flush is over and whose
     view is acknowledged (or given up): it goes. *)
  let leave_wait t (x : ctx) emit =
    match t.leaving with
    | Some deadline when x.now > deadline -> emit Exit
    | Some _ when t.pending = None && x.blocked && is_coordinator x -> emit Exit
    | _ -> ()

  let handle t x input =
    let out = ref [] in
    let emit a = out := a :: !out in
    (match input with
    | Side { src; msg } -> on_side t x emit ~src msg
    | Flushed { survivors; leavers } -> flushed t x emit ~survivors ~leavers
    | Alone -> alone t x emit
    | Retry -> retry t x emit
    | Merge_wait -> merge_wait t x emit
    | Heard -> heard t x emit
    | Gossip -> gossip t x emit
    | Leave_wait -> leave_wait t x emit);
    List.rev !out
end
