open Consort
module Sim = Consort_engine.Sim
module G = Consort_group.Group.Make (Sim)
module C = Consort_group.Cltsvr.Make (Sim)
module Cltsvr = Consort_group.Cltsvr

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;
  delivered : int;
  datagrams : int;
  end_time : Time.t;
  view_change : Time.t option;  (** from the crash of a server to the survivors' view without it *)
  flush : Time.t option;
      (** from the first block at a survivor after the crash to the last install *)
}

let s = Time.of_sec

type server = {
  saddr : string;
  mutable g : G.t option;
  srv : C.Server.t;
  got : (string, (int * string) list) Hashtbl.t; (* by session: requests delivered, newest first *)
  notes : (string * int, string) Hashtbl.t; (* (session, n) -> notification numbered here *)
  mutable dead : bool;
  mutable views : (Time.t * int) list; (* when, and how many members *)
  mutable blocks : Time.t list;
}

type client = {
  caddr : string;
  mutable c : C.Client.t option;
  mutable made : (int * string) list; (* requests accepted, newest first *)
  mutable heard : string option list; (* notifications in order, None for lost; newest first *)
  mutable expired : bool;
  mutable busy : int;
  mutable gone : bool; (* crashed or said bye *)
}

let layers =
  match Consort_group.Properties.(layers (vsync @ [ Total; Agree ])) with
  | Ok l -> l
  | Error e -> Fmt.failwith "%a" Consort_group.Properties.pp_error e

let base_params =
  List.fold_left
    (fun p (k, v) -> Params.set k v p)
    Params.empty
    [
      (Cltsvr.Param.client_timeout, Params.Time (s 3.));
      (Cltsvr.Param.failover, Params.Time (Time.of_ms 800));
      (Cltsvr.Param.retry, Params.Time (Time.of_ms 150));
    ]

let run_world ?trace ?(params = Params.empty) ~seed ~nservers ~nclients ~requests ~loss
    ~crash_server ?(cut_coord = false) ~crash_clients ~pause_client () =
  let params = Params.override base_params ~by:params in
  let rng = Rng.create seed in
  let net =
    Sim.create ~seed:(Rng.int rng 0x3fffffff)
      ~link:
        {
          Sim.default_link with
          loss;
          jitter = Time.of_ms 2;
          reorder = loss;
          reorder_delay = Time.of_ms 5;
        }
      ()
  in
  Sim.set_trace_channel net trace;
  let at t f = ignore (Sim.at net t f) in
  let problems = ref [] in
  let problem fmt = Printf.ksprintf (fun m -> problems := m :: !problems) fmt in
  let saddrs = List.init nservers (Printf.sprintf "s%d") in
  let servers =
    List.map
      (fun saddr ->
        let got = Hashtbl.create 64 and notes = Hashtbl.create 64 in
        let me = ref None in
        let srv =
          C.Server.create ~params net ~group:"cs"
            {
              C.Server.request =
                (fun ~client ~seq payload ->
                  let l = Option.value ~default:[] (Hashtbl.find_opt got client) in
                  Hashtbl.replace got client ((seq, payload) :: l);
                  (* The coordinator answers each request. *)
                  match !me with
                  | Some { g = Some g; srv; _ } when (G.view g).Consort_group.Group.rank = 0 ->
                      ignore (C.Server.notify srv ~client (Printf.sprintf "re:%s" payload))
                  | _ -> ());
              opened = (fun ~client:_ -> ());
              closed = (fun ~client:_ ~why:_ -> ());
              noted =
                (fun ~client ~n payload ->
                  if Hashtbl.mem notes (client, n) then
                    problem "%s numbered notification %d of %s twice" saddr n client;
                  Hashtbl.replace notes (client, n) payload);
              cast = (fun ~origin:_ _ -> ());
            }
        in
        let sv = { saddr; g = None; srv; got; notes; dead = false; views = []; blocks = [] } in
        me := Some sv;
        sv)
      saddrs
  in
  let servers = Array.of_list servers in
  Array.iteri
    (fun i sv ->
      at (Rng.int rng 300_000_000) (fun () ->
          let cb =
            {
              Consort_group.Group.view =
                (fun v -> sv.views <- (Sim.now net, Array.length v.members) :: sv.views);
              cast = (fun ~origin:_ _ -> ());
              send = (fun ~origin:_ _ -> ());
              block = (fun () -> sv.blocks <- Sim.now net :: sv.blocks);
              flow = ignore;
              exit = ignore;
            }
          in
          match
            G.join ~params ~peers:saddrs ~seed:(Rng.int rng 0x3fffffff) ~layers net ~group:"cs"
              ~addr:sv.saddr (C.Server.callbacks sv.srv cb)
          with
          | Error e -> problem "server %d: %s" i (Fmt.str "%a" Consort_group.Group.pp_join_error e)
          | Ok g -> (
              sv.g <- Some g;
              match C.Server.attach sv.srv g with
              | Ok () -> ()
              | Error e -> problem "%s" (Fmt.str "%a" Cltsvr.pp_attach_error e))))
    servers;
  let clients =
    Array.init nclients (fun i ->
        {
          caddr = Printf.sprintf "c%d" i;
          c = None;
          made = [];
          heard = [];
          expired = false;
          busy = 0;
          gone = false;
        })
  in
  let t_clients = s 2. in
  Array.iter
    (fun cl ->
      at
        (t_clients + Rng.int rng (s 1.))
        (fun () ->
          match
            C.Client.connect ~params ~seed:(Rng.int rng 0x3fffffff) net ~group:"cs" ~addr:cl.caddr
              ~servers:saddrs
              {
                C.Client.note = (fun p -> cl.heard <- Some p :: cl.heard);
                lost =
                  (fun k ->
                    for _ = 1 to k do
                      cl.heard <- None :: cl.heard
                    done);
                status =
                  (function
                  | Cltsvr.Expired_session -> cl.expired <- true
                  | Busy_refused -> cl.busy <- cl.busy + 1
                  | _ -> ());
              }
          with
          | Ok c -> cl.c <- Some c
          | Error e -> problem "client %s: %s" cl.caddr e))
    clients;
  (* Requests at random times; the coordinator answers each, and now and
     then tells every client something. *)
  let t_end = t_clients + s 6. in
  let sent = ref 0 in
  Array.iter
    (fun cl ->
      for _ = 1 to requests do
        at
          (t_clients + s 1. + Rng.int rng (t_end - t_clients - s 1.))
          (fun () ->
            match cl.c with
            | Some c when (not cl.gone) && not (C.Client.is_closed c) -> (
                let payload =
                  Printf.sprintf "%s-%d-%s" cl.caddr
                    (List.length cl.made + 1)
                    (String.make (Rng.int rng 40) 'q')
                in
                match C.Client.request c payload with
                | Ok seq ->
                    incr sent;
                    cl.made <- (seq, payload) :: cl.made
                | Error Cltsvr.Flow_control -> ()
                | Error e ->
                    problem "%s: request refused: %s" cl.caddr (Fmt.str "%a" Cltsvr.pp_error e))
            | _ -> ())
      done)
    clients;
  for k = 1 to 5 do
    at
      (t_clients + s 1. + Rng.int rng (t_end - t_clients - s 1.))
      (fun () ->
        Array.iter
          (fun sv ->
            match sv.g with
            | Some g when (not sv.dead) && (G.view g).Consort_group.Group.rank = 0 ->
                ignore (C.Server.notify_all sv.srv (Printf.sprintf "all-%d" k))
            | _ -> ())
          servers)
  done;
  (* A server crashes while requests flow; its clients turn to others. *)
  let crash_at = ref None in
  if crash_server then begin
    let victim = Rng.int rng nservers in
    let t = t_clients + s 2. + Rng.int rng (s 2.) in
    at t (fun () ->
        let sv = servers.(victim) in
        sv.dead <- true;
        crash_at := Some t;
        Option.iter G.crash sv.g;
        C.Server.stop sv.srv;
        Sim.crash net sv.saddr)
  end;
  (* The coordinator (the sequencer of Total) is the contact of some
     clients; its datagrams to the other servers are lost from now on, its
     clients send it a request each, and it crashes 20 ms after it delivered
     the first of them (a crash with the loss of its last datagrams), or
     after 300 ms if it delivers none. *)
  if cut_coord then begin
    let t = t_clients + s 2. + Rng.int rng (s 2.) in
    at t (fun () ->
        let coord =
          List.find_opt
            (fun sv ->
              (not sv.dead)
              && match sv.g with Some g -> (G.view g).Consort_group.Group.rank = 0 | None -> false)
            (Array.to_list servers)
        in
        match coord with
        | None -> problem "no coordinator to cut off"
        | Some coord ->
            Array.iter
              (fun sv ->
                if sv != coord then
                  Sim.set_link net ~src:coord.saddr ~dst:sv.saddr
                    { (Sim.link net ~src:coord.saddr ~dst:sv.saddr) with loss = 1.0 })
              servers;
            let before = Hashtbl.fold (fun _ l a -> a + List.length l) coord.got 0 in
            let asked = ref 0 in
            Array.iter
              (fun cl ->
                match cl.c with
                | Some c
                  when (not cl.gone)
                       && (not (C.Client.is_closed c))
                       && C.Client.server c = coord.saddr -> (
                    let payload = Printf.sprintf "%s-%d-cut" cl.caddr (List.length cl.made + 1) in
                    match C.Client.request c payload with
                    | Ok seq ->
                        incr sent;
                        incr asked;
                        cl.made <- (seq, payload) :: cl.made
                    | Error _ -> ())
                | _ -> ())
              clients;
            if !asked = 0 then problem "no client of the coordinator to ask it";
            (* 20 ms after it delivered one (or 300 ms after the requests,
               if it delivers none: with safe delivery it cannot). *)
            let rec watch k =
              if Hashtbl.fold (fun _ l a -> a + List.length l) coord.got 0 > before || k = 0 then
                at
                  (Sim.now net + Time.of_ms 20)
                  (fun () ->
                    coord.dead <- true;
                    crash_at := Some (Sim.now net);
                    Option.iter G.crash coord.g;
                    C.Server.stop coord.srv;
                    Sim.crash net coord.saddr;
                    Array.iter
                      (fun sv ->
                        if sv != coord then Sim.clear_link net ~src:coord.saddr ~dst:sv.saddr)
                      servers)
              else at (Sim.now net + Time.of_ms 1) (fun () -> watch (k - 1))
            in
            watch 280)
  end;
  (* Some clients crash: the servers forget them. *)
  for k = 1 to crash_clients do
    let cl = clients.(k mod nclients) in
    at
      (t_clients + s 2. + Rng.int rng (s 3.))
      (fun () ->
        cl.gone <- true;
        Option.iter C.Client.crash cl.c;
        Sim.crash net cl.caddr)
  done;
  (* One client says bye. *)
  if nclients > 3 then begin
    let cl = clients.(nclients - 1) in
    at
      (t_end - s 0.5)
      (fun () ->
        (* Once what it sent is acknowledged. *)
        let rec bye () =
          match cl.c with
          | Some c when C.Client.outstanding c > 0 -> at (Sim.now net + Time.of_ms 200) bye
          | Some c ->
              cl.gone <- true;
              C.Client.close c
          | None -> ()
        in
        bye ())
  end;
  (* A client cut off from every server for longer than the timeout: its
     session expires, and it is told so. *)
  let paused = if pause_client && nclients > 4 then Some clients.(nclients - 2) else None in
  Option.iter
    (fun cl ->
      let t = t_clients + s 3. in
      at t (fun () ->
          Sim.partition net
            [
              cl.caddr :: [];
              saddrs
              @ List.filter (( <> ) cl.caddr) (Array.to_list (Array.map (fun c -> c.caddr) clients));
            ]);
      at (t + s 12.) (fun () -> Sim.heal net))
    paused;
  let horizon = t_end + s 14. in
  Sim.run ~until:horizon net;
  (* {2 Checks} *)
  let live = List.filter (fun sv -> not sv.dead) (Array.to_list servers) in
  let payload_of cl seq = List.assoc_opt seq cl.made in
  let session cl = match cl.c with Some c -> C.Client.session c | None -> "" in
  (* Requests: 1, 2, ... with the client's payloads, at most once; the same
     at every live server; a crashed server's a prefix. *)
  Array.iter
    (fun cl ->
      let sess = session cl in
      let lists =
        List.map
          (fun sv -> (sv, List.rev (Option.value ~default:[] (Hashtbl.find_opt sv.got sess))))
          (Array.to_list servers)
      in
      List.iter
        (fun (sv, l) ->
          List.iteri
            (fun i (seq, p) ->
              if seq <> i + 1 then
                problem "%s delivered request %d of %s in place %d" sv.saddr seq cl.caddr (i + 1)
              else if payload_of cl seq <> Some p then
                problem "%s delivered request %d of %s with another payload" sv.saddr seq cl.caddr)
            l)
        lists;
      (match List.filter (fun (sv, _) -> not sv.dead) lists with
      | (sv0, l0) :: rest ->
          List.iter
            (fun (sv, l) ->
              if l <> l0 then
                problem "%s and %s delivered different requests of %s (%d and %d)" sv0.saddr
                  sv.saddr cl.caddr (List.length l0) (List.length l))
            rest;
          List.iter
            (fun (sv, l) ->
              if
                sv.dead
                && not
                     (List.length l <= List.length l0
                     && List.filteri (fun i _ -> i < List.length l) l0 = l)
              then
                problem
                  "crashed %s delivered requests of %s that are not a prefix of the survivors'"
                  sv.saddr cl.caddr)
            lists;
          (* Every request of a client that stayed is delivered. *)
          if (not cl.gone) && (not cl.expired) && List.length l0 <> List.length cl.made then
            problem "%s made %d requests, %d delivered at %s" cl.caddr (List.length cl.made)
              (List.length l0) sv0.saddr
      | [] -> ());
      (* Notifications: numbered alike at every live server; heard in that
         order, each once, losses told; all heard by a client that stayed. *)
      let numbered sv =
        List.sort compare
          (Hashtbl.fold (fun (c, n) p acc -> if c = sess then (n, p) :: acc else acc) sv.notes [])
      in
      match live with
      | sv0 :: rest ->
          let n0 = numbered sv0 in
          List.iter
            (fun sv ->
              if numbered sv <> n0 then
                problem "%s and %s numbered the notifications of %s differently" sv0.saddr sv.saddr
                  cl.caddr)
            rest;
          let heard = List.rev cl.heard in
          List.iteri
            (fun i h ->
              match (h, List.assoc_opt (i + 1) n0) with
              | Some p, Some q when p <> q ->
                  problem "%s heard %S as notification %d, numbered %S" cl.caddr p (i + 1) q
              | Some p, None ->
                  problem "%s heard %S as notification %d, which no server numbered" cl.caddr p
                    (i + 1)
              | _ -> ())
            heard;
          if (not cl.gone) && (not cl.expired) && List.length heard <> List.length n0 then
            problem "%s heard %d notifications of %d" cl.caddr (List.length heard) (List.length n0)
      | [] -> ())
    clients;
  (* Sessions: exactly the clients that stayed, at every live server. *)
  let staying =
    List.sort compare
      (List.filter_map
         (fun cl -> if cl.gone || cl.expired || cl.c = None then None else Some (session cl))
         (Array.to_list clients))
  in
  List.iter
    (fun sv ->
      let held = C.Server.clients sv.srv in
      if held <> staying then
        problem "%s holds %d sessions at the end, %d clients stayed (forgotten or kept wrongly: %s)"
          sv.saddr (List.length held) (List.length staying)
          (String.concat " "
             (List.filter (fun c -> not (List.mem c staying)) held
             @ List.filter (fun c -> not (List.mem c held)) staying));
      match sv.g with
      | Some g ->
          let v = G.view g in
          if Array.length v.members <> List.length live then
            problem "%s ends in a view of %d, %d servers live" sv.saddr (Array.length v.members)
              (List.length live)
      | None -> ())
    live;
  Option.iter
    (fun cl ->
      if not cl.expired then
        problem "%s, cut off for longer than the timeout, was not told its session expired" cl.caddr)
    paused;
  Array.iter
    (fun cl ->
      if cl.expired && not (match paused with Some p -> p == cl | None -> false) then
        problem "%s was told its session expired, though it never stopped talking" cl.caddr;
      if cl.busy > 0 then problem "%s was refused as busy, under the bound" cl.caddr)
    clients;
  (* The schedule did what it is for. *)
  if
    (crash_server || cut_coord)
    && Array.for_all
         (fun cl -> match cl.c with Some c -> C.Client.failovers c = 0 | None -> true)
         clients
  then problem "no client failed over after the crash of a server";
  if Array.for_all (fun cl -> List.for_all Option.is_none cl.heard) clients then
    problem "no client heard a notification";
  (* View change time: from the crash to the last survivor's view without the victim. *)
  let view_change =
    match !crash_at with
    | None -> None
    | Some t ->
        let installs =
          List.filter_map
            (fun sv ->
              List.find_opt (fun (at, n) -> at > t && n = List.length live) (List.rev sv.views))
            live
        in
        if List.length installs = List.length live then
          Some (List.fold_left (fun acc (at, _) -> max acc (at - t)) 0 installs)
        else None
  in
  let flush =
    match (!crash_at, view_change) with
    | Some t, Some vc ->
        let first =
          List.fold_left
            (fun acc sv -> List.fold_left (fun a b -> if b > t then min a b else a) acc sv.blocks)
            max_int live
        in
        if first = max_int then None else Some (t + vc - first)
    | _ -> None
  in
  let stats = Sim.stats net in
  let delivered =
    List.fold_left
      (fun acc sv -> acc + Hashtbl.fold (fun _ l a -> a + List.length l) sv.got 0)
      0 live
  in
  {
    violations = List.rev !problems;
    trace_hash = Sim.trace_hash net;
    sent = !sent;
    delivered;
    datagrams = stats.Sim.sent;
    end_time = Sim.now net;
    view_change;
    flush;
  }

let cltsvr_scenario ?trace ?params seed =
  run_world ?trace ?params ~seed ~nservers:3 ~nclients:24 ~requests:8 ~loss:0.02 ~crash_server:true
    ~crash_clients:2 ~pause_client:true ()

let cut_coord_scenario ?trace ?params seed =
  run_world ?trace ?params ~seed ~nservers:3 ~nclients:24 ~requests:4 ~loss:0.01 ~crash_server:false
    ~cut_coord:true ~crash_clients:0 ~pause_client:false ()

let scenarios =
  [
    ( "cltsvr",
      "3 servers (vsync+Total) and 24 clients that are not in their view: requests at most once, \
       in order, each delivered; notifications numbered alike and heard in order; a server crashes \
       (its clients fail over), 2 clients crash and one says bye (forgotten), one is cut off past \
       the timeout (told its session expired); 2% loss",
      cltsvr_scenario );
    ( "cltsvr-cut-coord",
      "3 servers and 24 clients: the coordinator (Total's sequencer) is cut off from the other \
       servers one way, its clients send it a request each, it crashes 20 ms after it delivers \
       one: every request acknowledged is delivered by the survivors, the sessions go on, \
       notifications are numbered alike; 1% loss",
      cut_coord_scenario );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None

let scenarios =
  Consort_sim.Scenario.of_names ~names ~describe ~run:(fun ?trace ~params name ~seed ->
      Option.map
        (fun (o : outcome) ->
          {
            Consort_sim.Scenario.seed;
            violations = o.violations;
            trace_hash = o.trace_hash;
            sent = o.sent;
            delivered = o.delivered;
            datagrams = o.datagrams;
            end_time = o.end_time;
          })
        (run ?trace ~params name ~seed))
