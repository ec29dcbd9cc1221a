open Consort
module Log = Group_log.Log
include Group_types

(* Datagrams between clients and servers ({!Cltsvr}): distinct from
   Bottom's (0xC1), the side channel's (0xC2), bundles' (0xC4), the
   seal's (0xC5) and migration's (0xC6). *)
let client_magic = 0xC7

let index_where p l =
  let rec go i = function [] -> None | x :: rest -> if p x then Some i else go (i + 1) rest in
  go 0 l

module Make (T : Transport.S) = struct
  module M = Group_member.Make (T)
  include M

  (* {1 Installing a view} *)

  (* The next view runs [stack] ({!Group_switch}). *)
  let adopt_stack t ~vid stack =
    match adopt t stack with
    | Ok () -> ()
    | Error e ->
        Log.err (fun m -> m "%s: view %s runs a stack this member cannot build: %s" t.me.eid vid e)

  (* The members' addresses by rank, this member's where it is, whatever the view's maker knew
     (and whether it knew an old one); [None] if one is bad. *)
  let addresses t ~vid ~rank members =
    let addrs = List.map (fun (m : Side.member) -> addr_of t m.addr) members in
    if List.exists Option.is_none addrs then begin
      Log.err (fun m -> m "%s: view %s has a bad address" t.me.eid vid);
      None
    end
    else
      let addrs = Array.of_list (List.map Option.get addrs) in
      let stale = (List.nth members rank).addr <> t.me.addr in
      addrs.(rank) <- (B.query (conn t)).B.local;
      Mv.addresses t.mv ~rank ~members:(List.map (fun (m : Side.member) -> m.eid) members) addrs;
      Some (addrs, stale)

  (* The current view [old] ends, view [vid] of [eids] comes: migration, quorum, the transitional
     view (EVS), the old stack stopped, the new key (Rekey), state transfer. *)
  let end_view t ~old ~vid ~eids ~stale ~at_old_addr key =
    Mv.install t.mv
      ~prev_vid:(match old with Some c -> V.id c | None -> "")
      ~eids ~stale ~at_old_addr ~conn:(conn t);
    Group_primary.end_view t.quorum;
    Group_evs.view_change t.evs ~ending:(Option.map V.view old) ~next:vid ~members:eids;
    (* The old stack goes first: its buffers are released now. *)
    Option.iter (stop_stack t) t.ep;
    Group_rekey.activate t.rekey ~vid key;
    t.counts.views <- t.counts.views + 1;
    Option.iter Xfer.end_view t.xfer

  let rec install ?stack ?key t ~vid ~ltime ~(members : Side.member list) =
    match index_where (fun (m : Side.member) -> m.eid = t.me.eid) members with
    | None -> ()
    | Some rank -> (
        Option.iter (adopt_stack t ~vid) stack;
        Group_switch.installed t.sw;
        Group_pause.installed t.pause ~size:(List.length members);
        match addresses t ~vid ~rank members with
        | None -> ()
        | Some (addrs, stale) -> (
            let eids = Array.of_list (List.map (fun (m : Side.member) -> m.eid) members) in
            Mb.learn t.mb ~me:t.me.eid members;
            let old = cur t in
            end_view t ~old ~vid ~eids ~stale ~at_old_addr:(List.nth members rank).addr key;
            let c = V.create ~group:t.group ~vid ~ltime ~members ~rank ~addrs ~previous:old in
            match bind t c with
            | Error e ->
                Log.err (fun m -> m "%s: cannot build the stack: %a" t.me.eid Endpoint.pp_error e)
            | Ok ep -> start_view t c ep members))

  (* View [c]'s stack, on the member's connection, its events for [c] while it is current. *)
  and bind t c =
    let cell = ref None in
    let app =
      { Stack.deliver = (fun src msg -> deliver t cell src msg); ctl = (fun e -> ctl t cell e) }
    in
    match
      Ep.Binding.bind
        ~params:
          (Params.set Bottom.stack_param
             (Params.String (Stack_id.digest (Group_switch.sid t.sw)))
             (Group_switch.params t.sw))
        ~pool:t.pool t.tr (conn t) ~view:(V.view c) ~addrs:(V.addrs c) ~rng:(Rng.split t.rng)
        ~layers:(Group_switch.layers t.sw) ~app ()
    with
    | Error e -> Error e
    | Ok ep ->
        cell := Some c;
        Ok ep

  (* View [c] is current on stack [ep]: the kernel holds it, the application is told it (and the
     quorum, with Primary), state transfer starts, the queue goes out, moves are told. *)
  and start_view t c ep members =
    let info = V.info c and vid = V.id c in
    t.ep <- Some ep;
    Mb.set_current t.mb c;
    t.blocked <- false;
    Group_queue.set_stack_flow t.queue false;
    Mb.installed t.mb;
    Log.info (fun m -> m "%s: installed %a" t.me.eid pp_view_info info);
    (* Who is gone, and why: left, or excluded and the suspicion. *)
    List.iter
      (fun (e, why) -> Log.info (fun m -> m "%s: %s is not in view %s: %s" t.me.eid e vid why))
      info.why;
    let decision =
      Group_primary.install t.quorum ~layers:(Group_switch.layers t.sw)
        ~members:(List.map (fun (m : Side.member) -> (m.eid, m.addr)) members)
    in
    t.app.cb.view info;
    Group_primary.start t.quorum ~vid ~dn_ctl:(Ep.Binding.dn_ctl ep) decision;
    Option.iter
      (fun x ->
        Xfer.start_view x ~vid ~members:(V.members c) ~rank:(V.rank c)
          ~hold_credit:(fun hold ->
            Ep.Binding.dn_ctl ep (Mflow.Hold_credit { who = "xfer"; hold; except = [] }))
          ~cast_ctl:(fun payload -> Ep.Binding.dn_ctl ep (Xfer.Out { dst = Event.Cast; payload }))
          ~send_ctl:(fun r payload ->
            Ep.Binding.dn_ctl ep (Xfer.Out { dst = Event.Send r; payload })))
      t.xfer;
    flush_queue t;
    send_moves t;
    close_old t;
    update_flow t

  and flush_queue t =
    Group_queue.flush t.queue
      ~ready:(fun () -> (not t.blocked) && (not (Group_primary.waiting t.quorum)) && cur t <> None)
      (function
        | `Cast s when Group_primary.outside_primary t.quorum ->
            let why =
              Fmt.str "view %s is not primary" (match cur t with Some c -> V.id c | None -> "")
            in
            Log.warn (fun m ->
                m "%s: a cast accepted during the view change is lost: %s" t.me.eid why);
            t.app.on_lost `Cast s why
        | `Cast s -> cast_now t s
        | `Send (dst, s) -> send_now t dst s)

  and cast_now t s =
    match current t with
    | Some (c, ep) ->
        sent t c `Cast s;
        t.counts.sent <- t.counts.sent + 1;
        Ep.Binding.cast ep (Msg.create (Iovecs.of_string t.pool s))
    | None -> ()

  (* [len] bytes of [b] at [off], copied once, into a slice of the pool. *)
  and cast_now_bytes t b off len =
    match current t with
    | Some (c, ep) ->
        (match t.app.on_sent with
        | Some f -> f ~vid:(V.id c) `Cast (Bytes.sub_string b off len)
        | None -> ());
        t.counts.sent <- t.counts.sent + 1;
        let body =
          if len = 0 then Iovecs.empty
          else begin
            let v = Pool.alloc t.pool len in
            Cstruct.blit_from_bytes b off (Iovec.cstruct v) 0 len;
            [ v ]
          end
        in
        Ep.Binding.cast ep (Msg.create body)
    | None -> ()

  and sent t c what s = match t.app.on_sent with Some f -> f ~vid:(V.id c) what s | None -> ()

  and send_now t dst s =
    match current t with
    | Some (c, ep) -> (
        match V.rank_of c dst with
        | Some r when r <> V.rank c ->
            sent t c (`Send dst) s;
            t.counts.sent <- t.counts.sent + 1;
            Ep.Binding.send ep r (Msg.create (Iovecs.of_string t.pool s))
        | Some _ ->
            sent t c (`Send dst) s;
            t.counts.sent <- t.counts.sent + 1;
            t.counts.delivered <- t.counts.delivered + 1;
            t.app.cb.send ~origin:t.me.eid s
        | None ->
            (* Accepted while the view changed, and the destination did
               not come along into the new view. *)
            t.counts.dropped_sends <- t.counts.dropped_sends + 1;
            Log.warn (fun m -> m "%s: send to %s, not in view %s: dropped" t.me.eid dst (V.id c));
            t.app.on_lost (`Send dst) s (Printf.sprintf "%s is not in view %s" dst (V.id c)))
    | None -> ()

  and deliver t cell (src : Event.src) msg =
    match (t.app.on_bytes, t.xfer, !cell, src) with
    | Some f, None, Some c, (Event.Cast_from r | Event.Send_from r) when is_current t c ->
        let kind = match src with Event.Send_from _ -> `Send | _ -> `Cast in
        let origin = (V.members c).(r) in
        Group_deliver.bytes ~pool:t.pool ~counts:t.counts msg f kind ~origin
    | _ -> deliver_string t cell src msg

  and deliver_string t cell src msg =
    Group_deliver.string ~counts:t.counts ~cb:t.app.cb ~xfer:t.xfer ~is_current:(is_current t) !cell
      src msg

  and ctl t cell e =
    match (!cell, t.ep) with
    | Some c, Some ep when is_current t c -> (
        match e with
        | Gmp.Block ->
            if not t.blocked then begin
              t.blocked <- true;
              t.app.cb.block ()
            end
        | Gevent.Suspect { ranks; reason } ->
            List.iter
              (fun r ->
                if V.suspect c r reason then
                  Log.info (fun m -> m "%s: suspects %s: %s" t.me.eid (V.members c).(r) reason))
              ranks
        | Gmp.Flushed { survivors; leavers } ->
            run t ep (Mb.handle t.mb (ctx t c) (Mb.Flushed { survivors; leavers }))
        | Gmp.Reported { coord; excluded; leaving; into } ->
            V.report c (coord, excluded, leaving, into)
        | Gmp.Excluded ->
            (* After a pause, a flush of its view that excludes it tells
               this member as much as gossip does. *)
            if recently_resumed t then
              Group_pause.dead_view t.pause ~now:(now t)
                (Printf.sprintf "view %s went on without this member (excluded): rejoining" (V.id c));
            run t ep (Mb.handle t.mb (ctx t c) Mb.Alone)
        | Event.Blocked b ->
            Group_queue.set_stack_flow t.queue b;
            update_flow t
        | Xfer.In { src; payload } -> Option.iter (fun x -> Xfer.on_ctl x ~src payload) t.xfer
        | e ->
            (* The view's quorum is decided (primary or not). *)
            if Group_primary.on_ctl t.quorum ~vid:(V.id c) ~dn_ctl:(Ep.Binding.dn_ctl ep) e then begin
              flush_queue t;
              update_flow t
            end)
    | _ -> ()

  (* What the membership kernel asks for, done in its order, on stack [ep] (the view's when it
     was asked). *)
  and run t ep actions =
    List.iter
      (function
        | Mb.Send (a, m) -> side_send t a m
        | Mb.Start_flush why -> Ep.Binding.dn_ctl ep (Gmp.Start_flush why)
        | Mb.Merge_into eid -> Ep.Binding.dn_ctl ep (Gmp.Merge_into eid)
        | Mb.Suspect { ranks; reason } ->
            Ep.Binding.dn_ctl ep (Gevent.Suspect_request { ranks; reason })
        | Mb.Install { vid; ltime; members; stack; key } ->
            install t ?key ?stack ~vid ~ltime ~members
        | Mb.Dead_view why -> Group_pause.dead_view t.pause ~now:(now t) why
        | Mb.Leave -> Ep.Binding.dn_ctl ep Gmp.Leave
        | Mb.Exit -> exit_group t
        | Mb.Refused { vid; src; why } -> (
            let refused why =
              Log.warn (fun m ->
                  m "%s: view %s from %a refused: %s" t.me.eid vid T.pp_address src why)
            in
            match why with
            | Mb.View why -> refused why
            | Mb.Key why ->
                Group_rekey.refused t.rekey;
                refused why
            | Mb.Stack { stack; reason } ->
                stack_error t
                  (Unknown_stack { peer = Side.installer vid; stack = stack.id; reason })))
      actions

  and exit_group t =
    if not t.exited then begin
      t.exited <- true;
      Group_evs.leave t.evs ~ending:(Option.map V.view (cur t)) ~me:t.me.eid;
      Option.iter (stop_stack t) t.ep;
      Option.iter T.cancel t.tick;
      Mv.close_all t.mv;
      B.close (conn t);
      Log.info (fun m -> m "%s: left the group" t.me.eid);
      t.app.cb.exit ()
    end

  (* One step of the membership kernel in view [c], its actions done on [c]'s stack [ep]. *)
  let step t (c, ep) input = run t ep (Mb.handle t.mb (ctx t c) input)

  (* {1 The side channel} *)

  (* A partition on another stack: never merge with it ({!Group_switch.other}). *)
  let other_stack t ~peer (stack : Side.stack) =
    match Group_switch.other t.sw ~peer stack with
    | Some (`Unknown (stack, reason)) -> stack_error t (Unknown_stack { peer; stack; reason })
    | Some (`Incompatible (ours, theirs)) -> stack_error t (Incompatible { peer; ours; theirs })
    | None -> ()

  (* {2 Status queries} *)

  (* What a member whose application reports nothing answers: the view as
     the runtime knows it. *)
  let default_status t c =
    Group_status.default ~group:t.group ~me:t.me.eid ~vid:(V.id c) ~members:(V.members c)
      ~rank:(V.rank c) ~blocked:t.blocked

  let my_status t c = Group_status.mine t.status ~default:(fun () -> default_status t c)

  (* Asked by member [eid] of this member's view [vid]: the answer goes to
     [eid]'s address in the view, never to where the request came from (a
     forged source cannot aim answers at a third party), at most
     [max_status_answers] a second. *)
  let answer_status t c ~vid ~nonce ~eid =
    let rank = Option.value ~default:(-1) (V.rank_of c eid) in
    if vid <> V.id c || rank < 0 || eid = t.me.eid then t.counts.garbage <- t.counts.garbage + 1
    else if not (Group_status.may_answer t.status ~now:(now t)) then
      t.counts.garbage <- t.counts.garbage + 1
    else
      side_send t (V.addr c rank)
        (Side.Status_ans
           { group = t.group; vid; nonce; eid = t.me.eid; dst = eid; status = my_status t c })

  let status_answer t ~vid ~nonce ~eid status =
    if not (Group_status.answer t.status ~cancel:T.cancel ~vid ~nonce ~eid status) then
      t.counts.garbage <- t.counts.garbage + 1

  let on_side t ~src v =
    if Side.group v <> t.group then t.counts.garbage <- t.counts.garbage + 1
    else if Side.dst v <> "" && Side.dst v <> t.me.eid then
      (* Sent to another member: a capture replayed here, or a forgery. *)
      t.counts.side_misdirected <- t.counts.side_misdirected + 1
    else
      match (v, current t) with
      | (Side.Gossip { coord = m; _ } | Side.Merge_req { members = m :: _; _ }), Some _
        when Group_rekey.enabled t.rekey <> (m.pub <> "") ->
          (* Members with and without per-view keys cannot share a view:
             one seals its stack's traffic under the secret, which the
             other refuses. Never merge; say so once. *)
          let with_keys b =
            Stack_id.describe (Group_switch.sid t.sw)
            ^ if b then " with Rekey" else " without Rekey"
          in
          stack_error t
            (Incompatible
               {
                 peer = m.eid;
                 ours = with_keys (Group_rekey.enabled t.rekey);
                 theirs = with_keys (m.pub <> "");
               })
      | Side.Gossip { coord; stack; _ }, Some _ when not (Group_switch.is_current t.sw stack) ->
          Mb.remember t.mb coord;
          other_stack t ~peer:coord.eid stack
      | Side.Gossip _, Some ce -> step t ce (Mb.Side { src; msg = v })
      | Side.Merge_req { members; stack; _ }, Some _ when not (Group_switch.is_current t.sw stack)
        ->
          other_stack t
            ~peer:(match members with m :: _ -> m.eid | [] -> T.address_to_string src)
            stack
      | Side.Switch_req { vid; stack; _ }, Some (c, _) ->
          (* From a member of this view, about this view's stack. *)
          if vid = V.id c && Array.exists (fun a -> T.equal_address a src) (V.addrs c) then
            Group_switch.asked t.sw stack
      | Side.Merge_req _, Some ce -> step t ce (Mb.Side { src; msg = v })
      | Side.Status_req { vid; nonce; eid; _ }, Some (c, _) -> answer_status t c ~vid ~nonce ~eid
      | Side.Status_ans { vid; nonce; eid; status; _ }, Some _ ->
          status_answer t ~vid ~nonce ~eid status
      | (Side.Probe _ | Side.Probe_ack _), Some ce -> step t ce (Mb.Side { src; msg = v })
      | Side.Install _, Some ce -> step t ce (Mb.Side { src; msg = v })
      | Side.Install_ack { vid; eid; _ }, _ -> Mb.acked t.mb ~vid ~eid ~src
      | _, None -> ()

  (* Another member moved, or acknowledges this member's move. *)
  let on_migrate t ~src m =
    let cur = current t in
    Mv.on_msg t.mv
      ~view:(Option.map (fun (c, _) -> (V.view c, V.addrs c)) cur)
      ~src ~send:(migrate_send t)
      ~close_old:(fun () -> close_old t)
      ~moved:(fun r eid ->
        match cur with
        | Some (_, ep) ->
            Ep.Binding.set_addr ep r src;
            (* Known there, and a view this coordinator waits on goes there too. *)
            Mb.moved t.mb ~eid src
        | None -> ())
      m

  let recv t ~src v =
    let cs = Iovec.cstruct v in
    let magic = if Cstruct.length cs > 0 then Cstruct.get_uint8 cs 0 else -1 in
    if t.exited then Iovec.release v
    else if magic = client_magic then begin
      let s = Cstruct.to_string cs in
      Iovec.release v;
      match t.clients with
      | Some f -> f ~src:(T.address_to_string src) s
      | None -> t.counts.garbage <- t.counts.garbage + 1
    end
    else if magic = Migrate.magic then begin
      (match Codec.decode_exact Migrate.codec cs with
      | Ok m -> on_migrate t ~src m
      | Error e ->
          Mv.garbage t.mv;
          Log.debug (fun m -> m "%s: bad migration message: %a" t.me.eid Codec.pp_error e));
      Iovec.release v
    end
    else if magic = Side.magic then begin
      (match Codec.decode_exact Side.codec cs with
      | Ok side -> on_side t ~src side
      | Error e ->
          t.counts.garbage <- t.counts.garbage + 1;
          Log.debug (fun m -> m "%s: bad side message: %a" t.me.eid Codec.pp_error e));
      Iovec.release v
    end
    else match t.ep with Some ep -> Ep.Binding.recv ep v | None -> Iovec.release v

  (* {1 Periodic work} *)

  let rec tick t =
    t.tick <- None;
    Group_pause.tick t.pause ~now:(now t);
    Mb.expire_probes t.mb ~now:(now t);
    if not t.exited then begin
      (match current t with
      | Some ce ->
          (* The view this coordinator announced: resent, or given up. *)
          step t ce Mb.Retry;
          (* A merge under way: asked again, waited on, or given up (a fresh
             view of this partition). *)
          step t ce Mb.Merge_wait;
          (* Leaving: gone once the time is up or the view it named is acknowledged. *)
          (match current t with
          | Some ce -> step t ce Mb.Leave_wait
          | None -> ());
          (* A switch asked for: the coordinator runs it (the view it makes
             next runs the new stack); another member asks the coordinator. *)
          (match current t with
          | Some (c, ep) when not t.exited -> (
              let idle () = not (Mb.merging t.mb || Mb.absorbing t.mb || Mb.leaving t.mb) in
              match
                Group_switch.due t.sw ~vid:(V.id c) ~coordinator:(is_coordinator t) ~idle
                  ~blocked:t.blocked
              with
              | Some `Flush -> Ep.Binding.dn_ctl ep (Gmp.Start_flush "switch")
              | Some (`Ask stack) ->
                  let r = V.coordinator_rank c in
                  side_send t (V.addr c r)
                    (Side.Switch_req
                       { group = t.group; vid = V.id c; stack; dst = (V.members c).(r) })
              | None -> ())
          | _ -> ());
          (* The view may have changed above: look at the current one. *)
          (match current t with Some ce when not t.exited -> step t ce Mb.Heard | _ -> ());
          (match current t with Some ce when not t.exited -> step t ce Mb.Gossip | _ -> ());
          (* A move not yet acknowledged by everyone: told again, or
             undone. *)
          if not t.exited then
            Mv.tick t.mv ~now:(now t) ~go_back:(move_back t)
              ~send_moves:(fun () -> send_moves t)
              ~close_old:(fun () -> close_old t)
      | None -> ());
      let period = Group_join.period t.timing ~hurry:(Mb.hurry t.mb ~blocked:t.blocked) in
      if not t.exited then t.tick <- Some (T.at t.tr (now t + period) (fun () -> tick t))
    end

  (* {1 The application's side} *)

  (* What a connection of the member does with what it receives; only the
     current one's going away ends the member (an old one closes after a
     move). *)
  let handler self c =
    {
      B.recv = (fun ~src v -> match !self with Some t -> recv t ~src v | None -> Iovec.release v);
      closed =
        (fun () ->
          match !self with
          | Some t ->
              if (not t.exited) && Lazy.is_val t.conn && Lazy.force t.conn == c then exit_group t
          | None -> ());
    }

  let join ?(params = Params.empty) ?(pool = Pool.default) ?(peers = []) ?seed ?on_sent
      ?(on_lost = fun _ _ _ -> ()) ?on_bytes ?discovery ?(heal = true) ?(take_state = fun () -> "")
      ?(install_state = fun _ -> ()) ?durable_state ?(on_stack_error = fun _ -> ()) ?rekey
      ?transitional ?(primary = fun _ -> ()) ~layers tr ~group ~addr cb =
    let seed =
      match seed with Some s -> s | None -> Random.State.bits (Random.State.make_self_init ())
    in
    let rng = Rng.create seed in
    let incarnation = Printf.sprintf "%08x" (Rng.int rng 0x3fffffff) in
    match Group_join.check ~parse:T.address_of_string ~params ~layers ~addr ~discovery ~peers with
    | Error e -> Error e
    | Ok (local, discovery, peers, primary_config) -> (
        let self = ref None in
        match
          Oc.conn
            ~size:(Params.int params Bundle.Param.size)
            ~pool tr ~discovery local (handler self)
        with
        | Error (`Cannot_open e) -> Error (Cannot_open e)
        | Error (`Cannot_join e) -> Error (Cannot_join_discovery e)
        | Ok conn ->
            let info = B.query conn in
            let addr = T.address_to_string info.B.local in
            let max_message = Group_join.max_message_of params layers info.B.mtu in
            let eid = addr ^ "#" ^ incarnation in
            let on_primary = primary in
            let xfer =
              Group_join.xfer ?durable:durable_state ~params ~layers ~max_message ~me:eid
                ~take:take_state ~install:install_state cb
            in
            let sw =
              Group_switch.create ~me:eid ~params ~layers
                ~xfer:(Group_join.has_layer Xfer.name layers)
            in
            let rekey_keys = rekey in
            let rekey = Group_rekey.create ~me:eid rekey_keys in
            let t =
              {
                tr;
                conn = Lazy.from_val conn;
                me =
                  {
                    Side.eid;
                    addr;
                    pub = (match rekey_keys with Some r -> r.Group_rekey.public | None -> "");
                  };
                mv =
                  Mv.create ~group ~me:eid
                    ~drain:(Params.time params Param.migrate_drain)
                    ~timeout:(Params.time params Param.migrate_timeout)
                    ~retry:(Params.time params Param.install_retry);
                clients = None;
                group;
                layers;
                params;
                pool;
                rng;
                app = { cb; on_sent; on_lost; on_bytes };
                counts = Group_counters.create ();
                discovery;
                mb =
                  Mb.create ~group ~rng ~peers ?discovery ~heal
                    ~merge_timeout:(Params.time params Param.merge_timeout)
                    ~install_retry:(Params.time params Param.install_retry)
                    ~leave_timeout:(Params.time params Param.leave_timeout)
                    ~current_stack:(fun () -> Group_switch.current sw)
                    ~next_stack:(fun () -> Group_switch.next sw)
                    ~wrap:(Group_rekey.wrap rekey) ~buildable:(Group_switch.buildable sw)
                    ~unwrap:(Group_rekey.view_key rekey) ();
                ep = None;
                blocked = false;
                queue =
                  Group_queue.create ~limit:(max 0 (Params.int params Param.queue)) ~flow:cb.flow;
                max_message;
                status = Group_status.create ();
                pause = Group_pause.create ~merge_timeout:(Params.time params Param.merge_timeout);
                exited = false;
                xfer;
                sw;
                on_stack_error;
                evs = Group_evs.create transitional;
                quorum = Group_primary.create ~me:eid ~config:primary_config ~on_primary;
                told = [];
                tick = None;
                rekey;
                timing = Group_join.timing params;
              }
            in
            self := Some t;
            List.iter Stack_id.register layers;
            install t ~vid:(Printf.sprintf "0:%s" t.me.eid) ~ltime:0 ~members:[ t.me ];
            tick t;
            Ok t)

  (* Whether the application may hand over a message of [size] bytes
     now ({!Group_queue.admit}). *)
  let admit t size =
    Group_queue.admit t.queue ~exited:t.exited ~leaving:(Mb.leaving t.mb) ~max_message:t.max_message
      ~blocked:t.blocked size

  let refuse t e = Group_queue.refuse t.queue e

  (* Whether a cast of [len] bytes is taken: [Ok true] to go now, [Ok
     false] to wait in the queue. *)
  let cast_admit t len =
    match admit t len with
    | Error e -> refuse t e
    | Ok () when Group_pause.refusal t.pause ~now:(now t) <> None ->
        refuse t (Not_primary (Option.get (Group_pause.refusal t.pause ~now:(now t))))
    | Ok () when Group_primary.refusal t.quorum <> None ->
        refuse t (Not_primary (Option.get (Group_primary.refusal t.quorum)))
    | Ok () ->
        Ok (not (t.blocked || Group_primary.waiting t.quorum || not (Group_queue.is_empty t.queue)))

  let queue_cast t s = Group_queue.push t.queue (`Cast s)

  let cast t s =
    match cast_admit t (String.length s) with
    | Error e -> Error e
    | Ok true ->
        cast_now t s;
        Ok ()
    | Ok false ->
        queue_cast t s;
        Ok ()

  let cast_bytes t b ~off ~len =
    if off < 0 || len < 0 || off > Bytes.length b - len then
      invalid_arg
        (Printf.sprintf "Group.cast_bytes: range [%d,%d) outside %d bytes" off (off + len)
           (Bytes.length b));
    match cast_admit t len with
    | Error e -> Error e
    | Ok true ->
        cast_now_bytes t b off len;
        Ok ()
    | Ok false ->
        queue_cast t (Bytes.sub_string b off len);
        Ok ()

  let send t dst s =
    match admit t (String.length s) with
    | Error e -> refuse t e
    | Ok () -> (
        match cur t with
        | Some c when not (Array.mem dst (V.members c)) -> refuse t (Not_member dst)
        | _ ->
            if t.blocked || not (Group_queue.is_empty t.queue) then
              Group_queue.push t.queue (`Send (dst, s))
            else send_now t dst s;
            Ok ())

  let switch ?params t layers =
    if t.exited then Error Not_running
    else
      match Stack.check ~requires:[ Gmp.membership ] layers with
      | Error e -> Error (Not_a_stack e)
      | Ok () ->
          if Group_join.has_layer Xfer.name layers <> (t.xfer <> None) then Error Changes_xfer
          else begin
            List.iter Stack_id.register layers;
            let params =
              match params with Some p -> Params.override t.params ~by:p | None -> t.params
            in
            Group_switch.want t.sw (Stack_id.of_layers ~params layers);
            Ok ()
          end

  let migrate t addr =
    if t.exited then Error Gone
    else
      match T.address_of_string addr with
      | Error reason -> Error (Bad_new_address { addr; reason })
      | Ok a -> (
          match
            Oc.conn
              ~size:(Params.int t.params Bundle.Param.size)
              ~pool:t.pool t.tr ~discovery:t.discovery a
              (handler (ref (Some t)))
          with
          | Error (`Cannot_open e | `Cannot_join e) -> Error (Cannot_move e)
          | Ok nc ->
              let old = conn t in
              let local = (B.query nc).B.local in
              t.conn <- Lazy.from_val nc;
              t.me <- { t.me with addr = T.address_to_string local };
              Mv.moved t.mv ~now:(now t) ~old ~local ~members:(Option.map V.members (cur t));
              rebind t nc local;
              if Option.is_some (current t) then close_old t;
              Ok ())

  let address t = t.me.addr
  let set_client_handler t f = t.clients <- Some f
  let set_status_handler t f = Group_status.set_handler t.status f

  let query_status ?(timeout = Time.of_sec 2.) t k =
    match cur t with
    | _ when t.exited -> k (Error "this member has left the group")
    | None -> k (Error "this member is not in a view yet")
    | Some c -> (
        match Group_status.refusal t.status with
        | Some e -> k (Error e)
        | None ->
            let vid = V.id c in
            let nonce = Printf.sprintf "%016Lx" (Rng.bits64 t.rng) in
            Group_status.ask t.status ~nonce ~vid ~members:(V.members c)
              ~me:(t.me.eid, my_status t c)
              ~timeout ~cancel:T.cancel
              ~at:(fun finish -> T.at t.tr (now t + timeout) finish)
              ~ask:(fun r id ->
                side_send t (V.addr c r)
                  (Side.Status_req { group = t.group; vid; nonce; eid = t.me.eid; dst = id }))
              k)

  let send_client t ~dst s =
    if (not t.exited) && String.length s > 0 && Char.code s.[0] = client_magic then
      match T.address_of_string dst with
      | Error _ -> ()
      | Ok a ->
          let msg = Msg.create (Iovecs.of_string t.pool s) in
          report t (B.send_alone (conn t) ~dst:a msg);
          Msg.release msg

  let member_address t id =
    match cur t with
    | Some c -> (
        match V.rank_of c id with Some r -> Some (T.address_to_string (V.addr c r)) | None -> None)
    | None -> None

  let unmoved t = Mv.unmoved t.mv
  let stack_id t = Stack_id.digest (Group_switch.sid t.sw)
  let stack_name t = Stack_id.describe (Group_switch.sid t.sw)
  let stack_epoch t = Group_switch.epoch t.sw
  let max_message t = t.max_message
  let refused t = Group_queue.refused t.queue
  let dropped_sends t = t.counts.dropped_sends

  let leave t =
    if not t.exited then
      match current t with
      | Some (c, ep) -> run t ep (Mb.leave t.mb ~now:(now t) ~alone:(V.size c = 1))
      | None -> if Mb.leave t.mb ~now:(now t) ~alone:true <> [] then exit_group t

  let suspect t ids =
    match current t with
    | Some (c, ep) when not t.exited ->
        let ranks = List.filter_map (V.rank_of c) ids in
        if ranks <> [] then
          Ep.Binding.dn_ctl ep
            (Gevent.Suspect_request { ranks; reason = "asked by the application" })
    | _ -> ()

  let connection t = B.inner (conn t)
  let bundle_stats t = B.stats (conn t)
  let copies t = (t.counts.copies, t.counts.copied_bytes)
  let view t = match cur t with Some c -> V.info c | None -> invalid_arg "Group.view: no view"
  let stack t = Option.map Ep.Binding.stack t.ep
  let queued t = Group_queue.length t.queue
  let garbage t = t.counts.garbage + Mb.garbage t.mb

  let counters t =
    let cur =
      match t.ep with
      | Some ep when not t.exited -> Group_counters.of_stack (Ep.Binding.stack ep)
      | _ -> []
    in
    Group_counters.report t.counts
      ~garbage:(t.counts.garbage + Mb.garbage t.mb)
      ~refused:(Group_queue.refused t.queue) ~no_view_key:(Group_rekey.no_key t.rekey)
      ~migration:(Mv.counters t.mv)
      ~bundle:(Bundle.counters (B.stats (conn t)))
      cur

  let needs_state t = match t.xfer with Some x -> Xfer.needs_state x | None -> false

  let delivery_view t =
    match t.xfer with
    | Some x -> ( match Xfer.delivery_view x with Some v -> v | None -> (view t).vid)
    | None -> (view t).vid

  let xfer_counters t = match t.xfer with Some x -> Xfer.counters x | None -> []
  let crash t = exit_group t
end
