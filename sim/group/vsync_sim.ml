open Consort
module Sim = Consort_engine.Sim
module Seal = Consort_seal.Seal
module S = Consort_seal.Seal.Make (Sim)

(* Members run over the seal: datagrams pass as they are unless sim.props
   has Auth, Privacy or Rekey. *)
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))
module Log = Consort_spec.Log
module Vsync = Consort_spec.Vsync

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;
  delivered : int;
  datagrams : int;
  views : int;
  end_time : Time.t;
}

let digest s = String.sub (Sha256.to_hex (Sha256.string s)) 0 16

(* One process: an address, and the successive incarnations run there. *)
type proc = {
  addr : string;
  mutable g : G.t option;
  mutable incarnation : int;
  mutable kill : unit -> unit;
  mutable next_seq : int; (* of the current incarnation: the last message number given *)
  mutable accepted : int; (* casts the API accepted from the current incarnation *)
}

(* What the application of process [i], member [id], does with its state
   (scenarios with state transfer). *)
type hooks = {
  take : int -> string -> string;
  install : int -> string -> string -> unit;
  applied : int -> string -> view:string -> [ `Cast | `Send ] -> origin:string -> string -> unit;
  viewed : int -> string -> Consort_group.Group.view_info -> unit;
  stack_error : int -> string -> Consort_group.Group.stack_error -> unit;
}

let no_hooks =
  {
    take = (fun _ _ -> "");
    install = (fun _ _ _ -> ());
    applied = (fun _ _ ~view:_ _ ~origin:_ _ -> ());
    viewed = (fun _ _ _ -> ());
    stack_error = (fun _ _ _ -> ());
  }

type world = {
  net : Sim.t;
  rng : Rng.t;
  layers : Layer.t list;
  extra_props : Consort_group.Properties.t list;
      (* ordering properties asked for with sim.props: checked too *)
  params : Params.t;
  procs : proc array;
  logs : (string, Log.event list ref) Hashtbl.t; (* by member id, newest first *)
  order : string list ref; (* member ids in order of creation *)
  crashed : string list ref;
  mutable sent : int;
  mutable made : int; (* payloads made: each is unique *)
  mutable refused : int;
  mutable delivered : int;
  mutable views : int;
  mutable problems : string list;
  trace : out_channel option;
  mutable hooks : hooks;
  mutable held : bool; (* deliveries may name earlier views (state transfer) *)
  seal : (Seal.secret * Seal.mode) option; (* with Auth, Privacy or Rekey *)
  rekey : bool;
  seed : int;
  evs : bool; (* members log their transitional views (Evs) *)
  mutable on_block : int -> unit; (* process [i]'s member was blocked (a view change starts) *)
}

let note w fmt =
  Printf.ksprintf
    (fun s ->
      match w.trace with
      | Some oc ->
          output_string oc s;
          output_char oc '\n'
      | None -> ())
    fmt

let record w me e =
  let l =
    match Hashtbl.find_opt w.logs me with
    | Some l -> l
    | None ->
        let l = ref [] in
        Hashtbl.replace w.logs me l;
        w.order := me :: !(w.order);
        l
  in
  l := e :: !l;
  note w "%d %s" (Sim.now w.net) (Log.to_line e)

let alive p = match p.g with Some g -> not (G.has_exited g) | None -> false

(* Every payload starts with its message number: "SEQ|...". *)
let seq_of s =
  match String.index_opt s '|' with
  | Some i -> Option.value ~default:0 (int_of_string_opt (String.sub s 0 i))
  | None -> 0

let refused w g kind dst s reason =
  let me = G.me g in
  record w me
    (Log.Refused
       {
         t = Sim.now w.net;
         me;
         view = (G.view g).Consort_group.Group.vid;
         kind;
         dst;
         seq = seq_of s;
         len = String.length s;
         digest = digest s;
         reason;
       })

let start ?layers ?params w i =
  let p = w.procs.(i) in
  p.incarnation <- p.incarnation + 1;
  p.next_seq <- 0;
  p.accepted <- 0;
  let self = ref "" and mine = ref None and dead = ref false and last_vid = ref "" in
  let cur_view () = match !mine with Some g -> (G.view g).Consort_group.Group.vid | None -> "" in
  let deliver kind ~origin s =
    w.delivered <- w.delivered + 1;
    let view = match !mine with Some g -> G.delivery_view g | None -> cur_view () in
    w.hooks.applied i !self ~view kind ~origin s;
    record w !self
      (Log.Deliver
         {
           t = Sim.now w.net;
           me = !self;
           view;
           from = origin;
           kind;
           seq = seq_of s;
           len = String.length s;
           digest = digest s;
         })
  in
  let cb =
    {
      Consort_group.Group.view =
        (fun v ->
          (* The first view is installed from inside [join]: the member's id
             is its own entry in the view. *)
          self := v.members.(v.rank);
          last_vid := v.vid;
          w.views <- w.views + 1;
          w.hooks.viewed i !self v;
          record w !self
            (Log.View
               { t = Sim.now w.net; me = !self; view = v.vid; members = Array.to_list v.members }));
      cast = deliver `Cast;
      send = deliver `Send;
      block =
        (fun () ->
          record w !self (Log.Block { t = Sim.now w.net; me = !self; view = cur_view () });
          w.on_block i);
      flow = ignore;
      exit =
        (fun () -> if not !dead then record w !self (Log.Exit { t = Sim.now w.net; me = !self }));
    }
  in
  let on_sent ~vid kind s =
    w.sent <- w.sent + 1;
    let t = Sim.now w.net and me = !self and seq = seq_of s and len = String.length s in
    match kind with
    | `Cast -> record w me (Log.Cast { t; me; view = vid; seq; len; digest = digest s })
    | `Send dst -> record w me (Log.Send { t; me; view = vid; dst; seq; len; digest = digest s })
  in
  let peers = Array.to_list (Array.map (fun p -> p.addr) w.procs) in
  let seed = Rng.int w.rng 0x3fffffff in
  let on_lost kind s reason =
    record w !self
      (Log.Lost
         {
           t = Sim.now w.net;
           me = !self;
           kind = (match kind with `Cast -> `Cast | `Send _ -> `Send);
           seq = seq_of s;
           reason;
         })
  in
  let tr =
    match w.seal with
    | None -> S.wrap w.net None
    | Some _ ->
        (* Keys and sender ids drawn from the run's seed; the seal's clock
           is the simulator's. *)
        S.wrap ~rekey:w.rekey
          ~g:
            (Consort_crypto.Crypto.deterministic
               (Printf.sprintf "sim-%d-%s-%d" w.seed p.addr p.incarnation))
          ~wall:(fun () -> 1_700_000_000. +. Time.to_sec (Sim.now w.net))
          ~group:"sim" w.net w.seal
  in
  match
    G.join
      ~params:(match params with Some p -> Params.override w.params ~by:p | None -> w.params)
      ~peers ~seed ~on_sent ~on_lost ?rekey:(S.rekey tr)
      ?transitional:
        (if w.evs then
           Some
             (fun (tv : Consort_group.Group.transitional) ->
               (* Logged even as the process is killed: the stack's last
                  deliveries, which come after it, are logged too. *)
               record w !self
                 (Log.Trans
                    {
                      t = Sim.now w.net;
                      me = !self;
                      view = tv.ending;
                      next = (if tv.next = "" then None else Some tv.next);
                      members = Array.to_list tv.survivors;
                    }))
         else None)
      ~primary:(fun (q : Consort_group.Primary.quorum) ->
        record w !self
          (Log.Quorum
             {
               t = Sim.now w.net;
               me = !self;
               view = !last_vid;
               primary = q.primary;
               votes = q.votes;
               needed = q.needed;
             }))
      ~layers:(Option.value layers ~default:w.layers)
      ~on_stack_error:(fun e -> w.hooks.stack_error i !self e)
      ~take_state:(fun () -> w.hooks.take i !self)
      ~install_state:(fun s -> w.hooks.install i !self s)
      tr ~group:"sim" ~addr:p.addr cb
  with
  | Ok g ->
      mine := Some g;
      p.g <- Some g;
      p.kill <- (fun () -> dead := true)
  | Error e ->
      w.problems <-
        Fmt.str "%s could not join: %a" p.addr Consort_group.Group.pp_join_error e :: w.problems

let crash w i =
  let p = w.procs.(i) in
  if alive p then begin
    note w "%d crash %s" (Sim.now w.net) p.addr;
    (* A killed process logs nothing more, not even its exit. *)
    p.kill ();
    (match p.g with Some g -> w.crashed := G.me g :: !(w.crashed) | None -> ());
    p.g <- None;
    Sim.crash w.net p.addr
  end

(* The API call, as the application makes it: each attempt has the next
   message number; a refusal is logged (a refused message is counted by no
   one), and a refusal that has no reason to be is a problem. *)
let submit w p g kind dst s r =
  let size = String.length s in
  match r with
  | Ok () ->
      (match kind with `Cast -> p.accepted <- p.accepted + 1 | `Send _ -> ());
      if size > G.max_message g then
        w.problems <-
          Printf.sprintf "%s accepted a message of %d bytes, over %d" (G.me g) size
            (G.max_message g)
          :: w.problems
  | Error e -> (
      w.refused <- w.refused + 1;
      refused w g
        (match kind with `Cast -> `Cast | `Send _ -> `Send)
        dst s
        (Fmt.str "%a" Consort_group.Group.pp_error e);
      match e with
      | Consort_group.Group.Too_big { size = s'; max } when s' > max -> ()
      | Consort_group.Group.Flow_control | Consort_group.Group.Leaving
      | Consort_group.Group.Not_primary _ ->
          ()
      | e ->
          w.problems <-
            Fmt.str "%s refused a message: %a" (G.me g) Consort_group.Group.pp_error e :: w.problems
      )

(* A cast of a unique payload, of [size] bytes or of a random length. *)
let cast ?size w i =
  let p = w.procs.(i) in
  match p.g with
  | Some g when alive p ->
      w.made <- w.made + 1;
      p.next_seq <- p.next_seq + 1;
      let head = Printf.sprintf "%d|%s|%d|" p.next_seq (G.me g) w.made in
      let pad =
        match size with Some n -> max 0 (n - String.length head) | None -> Rng.int w.rng 64
      in
      let m = head ^ String.make pad 'x' in
      submit w p g `Cast None m (G.cast g m)
  | _ -> ()

(* The same to a random other member of the view. *)
let send ?size w i =
  let p = w.procs.(i) in
  match p.g with
  | Some g when alive p -> (
      let v = G.view g in
      match List.filter (fun m -> m <> G.me g) (Array.to_list v.members) with
      | [] -> ()
      | others ->
          let dst = List.nth others (Rng.int w.rng (List.length others)) in
          w.made <- w.made + 1;
          p.next_seq <- p.next_seq + 1;
          let head = Printf.sprintf "%d|%s>%s|%d|" p.next_seq (G.me g) dst w.made in
          let m =
            head
            ^ String.make
                (match size with Some n -> max 0 (n - String.length head) | None -> 0)
                'z'
          in
          submit w p g (`Send dst) (Some dst) m (G.send g dst m))
  | _ -> ()

let at w t f = ignore (Sim.at w.net t f)
let on_block w f = w.on_block <- f

(* Casts and a few sends from random live members at random times in
   [from, until). *)
let workload w ~from ~until ~count =
  for _ = 1 to count do
    let t = from + Rng.int w.rng (max 1 (until - from)) in
    let i = Rng.int w.rng (Array.length w.procs) in
    let kind = Rng.int w.rng 10 in
    at w t (fun () -> if kind = 0 then send w i else cast w i)
  done

let sim_props = "sim.props"

let () =
  Params.register sim_props (Params.String "vsync")
    ~doc:
      "consort sim: the property set of the members' stack in the vsync-* scenarios, names joined \
       by + (vsync+Total); the ordering properties it adds are checked too; with Auth, Privacy or \
       Rekey the members seal their datagrams (per-view keys unless seal.rekey=false)"

let props_of params =
  Consort_group.Properties.of_string
    (String.map (function '+' -> ',' | c -> c) (Params.string params sim_props))

let check_params params =
  match props_of params with
  | Error e -> Error (Fmt.str "%s: %a" sim_props Consort_group.Properties.pp_error e)
  | Ok p -> (
      match Consort_group.Properties.layers p with
      | Error e -> Error (Fmt.str "%s: %a" sim_props Consort_group.Properties.pp_error e)
      | Ok _ -> Consort_group.Total.check_params params)

let make ?trace ?(params = Params.empty) ?props ~seed ~n ~link () =
  let rng = Rng.create seed in
  let net = Sim.create ~seed:(Rng.int rng 0x3fffffff) ~link () in
  Sim.set_trace_channel net trace;
  let props, extra_props =
    match props with
    | Some p -> (p, [])
    | None -> (
        match props_of params with
        | Ok p -> (p, List.filter (fun x -> not (List.mem x Consort_group.Properties.vsync)) p)
        | Error e -> Fmt.failwith "%s: %a" sim_props Consort_group.Properties.pp_error e)
  in
  let layers =
    match Consort_group.Properties.layers props with
    | Ok l -> l
    | Error e -> Fmt.failwith "%a" Consort_group.Properties.pp_error e
  in
  let has p = List.mem p props in
  let seal =
    let open Consort_group.Properties in
    if has Privacy then Some Seal.Privacy
    else if has Auth || has Rekey then Some Seal.Auth
    else None
  in
  {
    net;
    rng;
    layers;
    extra_props;
    params;
    procs =
      Array.init n (fun i ->
          {
            addr = Printf.sprintf "p%d" i;
            g = None;
            incarnation = 0;
            kill = ignore;
            next_seq = 0;
            accepted = 0;
          });
    logs = Hashtbl.create 16;
    order = ref [];
    crashed = ref [];
    sent = 0;
    made = 0;
    refused = 0;
    delivered = 0;
    views = 0;
    problems = [];
    trace;
    hooks = no_hooks;
    held = List.mem Consort_group.Properties.Xfer props;
    seal =
      Option.map
        (fun mode ->
          ( (match Seal.secret_of_string (String.make 32 's') with
            | Ok s -> s
            | Error e -> failwith e),
            mode ))
        seal;
    rekey = has Consort_group.Properties.Rekey || Params.bool params Seal.rekey_param;
    seed;
    evs = has Consort_group.Properties.Evs;
    on_block = ignore;
  }

(* Sealed, no member forges: no datagram fails its tag or comes under the
   wrong key, and, with Rekey, each live member installed a key with each
   view it installed. *)
let sealed w =
  if w.seal = None then []
  else
    List.concat_map
      (fun p ->
        match p.g with
        | Some g when alive p ->
            let st = S.stats (G.connection g) in
            let views =
              try List.assoc "views" (List.assoc "group" (G.counters g)) with Not_found -> -1
            in
            (if st.Seal.bad_tag + st.wrong_key + st.unsent > 0 then
               [ Fmt.str "%s: seal dropped datagrams of members: %a" (G.me g) Seal.pp_stats st ]
             else [])
            @
            if w.rekey && st.rekeys <> views then
              [ Fmt.str "%s installed %d views and %d view keys" (G.me g) views st.rekeys ]
            else []
        | _ -> [])
      (Array.to_list w.procs)

(* Every live member ends in one view whose members are exactly the live
   members. *)
let converged w =
  let live = List.filter_map (fun p -> if alive p then p.g else None) (Array.to_list w.procs) in
  match live with
  | [] -> [ "no member is alive at the end" ]
  | g :: _ ->
      let v = G.view g in
      let ids = List.sort compare (List.map G.me live) in
      let agree = List.for_all (fun g' -> (G.view g').Consort_group.Group.vid = v.vid) live in
      let state g =
        let counters =
          match G.stack g with
          | Some st ->
              List.concat_map
                (fun (layer, cs) ->
                  List.filter_map
                    (fun (k, v) ->
                      if v <> 0 then Some (Printf.sprintf "%s.%s=%d" layer k v) else None)
                    cs)
                (Stack.counters st)
          | None -> []
        in
        Printf.sprintf "%s in %s%s [%s]" (G.me g) (G.view g).Consort_group.Group.vid
          (if G.is_blocked g then " (blocked)" else "")
          (String.concat " " counters)
      in
      if not agree then
        [
          Printf.sprintf "live members end in different views: %s"
            (String.concat "; " (List.map state live));
        ]
      else if List.sort compare (Array.to_list v.members) <> ids then
        [
          Printf.sprintf "final view %s has [%s], the live members are [%s]" v.vid
            (String.concat ", " (Array.to_list v.members))
            (String.concat ", " ids);
        ]
      else []

(* Extended virtual synchrony (Consort_spec.Evs), for runs whose members
   log their transitional views. *)
let evs logs =
  match Consort_spec.Evs.check logs with
  | Ok () -> []
  | Error vs -> List.map (Fmt.str "evs: %a" Consort_spec.Evs.pp_violation) vs

let finish ?(extra = []) ?(checks = []) w =
  (* The run ended after a quiet period, the network healed: every live
     member is live and connected. *)
  Array.iter
    (fun p ->
      match p.g with
      | Some g when alive p ->
          record w (G.me g) (Log.Live { t = Sim.now w.net; me = G.me g; casts = p.accepted })
      | _ -> ())
    w.procs;
  let logs = List.rev_map (fun id -> (id, List.rev !(Hashtbl.find w.logs id))) !(w.order) in
  let logs =
    if w.held then List.map (fun (id, l) -> (id, Consort_spec.Xfer.normalize l)) logs else logs
  in
  let spec =
    match Vsync.check ~quiescent:true ~crashed:!(w.crashed) logs with
    | Ok () -> []
    | Error vs -> List.map (Fmt.str "%a" Vsync.pp_violation) vs
  in
  let order name f =
    match f logs with
    | Ok () -> []
    | Error vs -> List.map (Fmt.str "%s: %a" name Consort_spec.Order.pp_violation) vs
  in
  let auto =
    List.concat_map
      (function
        | Consort_group.Properties.Total -> order "total" Consort_spec.Order.check_total
        | Causal -> order "causal" Consort_spec.Order.check_causal
        | Agree -> order "safe" Consort_spec.Order.check_safe
        | Evs -> evs logs
        | _ -> [])
      w.extra_props
  in
  let more = List.concat_map (fun f -> f logs) checks @ auto @ sealed w in
  let stats = Sim.stats w.net in
  {
    violations = List.rev w.problems @ spec @ more @ converged w @ extra;
    trace_hash = Sim.trace_hash w.net;
    sent = w.sent;
    delivered = w.delivered;
    datagrams = stats.Sim.sent;
    views = w.views;
    end_time = Sim.now w.net;
  }

let s x = Time.of_sec x

let lossy loss =
  {
    Sim.default_link with
    loss;
    jitter = Time.of_ms 2;
    reorder = loss;
    reorder_delay = Time.of_ms 5;
  }

let crash_scenario ?trace ?params seed =
  let w = make ?trace ?params ~seed ~n:5 ~link:(lossy 0.02) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 500_000_000) (fun () -> start w i)) w.procs;
  workload w ~from:(s 3.) ~until:(s 15.) ~count:120;
  let victims = 1 + Rng.int w.rng 2 in
  let chosen = ref [] in
  while List.length !chosen < victims do
    let v = Rng.int w.rng 5 in
    if not (List.mem v !chosen) then chosen := v :: !chosen
  done;
  List.iter (fun v -> at w (s 5. + Rng.int w.rng (s 5.)) (fun () -> crash w v)) !chosen;
  Sim.run ~until:(s 45.) w.net;
  finish w

let join_leave_scenario ?trace ?params seed =
  let w = make ?trace ?params ~seed ~n:5 ~link:(lossy 0.02) () in
  for i = 0 to 2 do
    at w (Rng.int w.rng 300_000_000) (fun () -> start w i)
  done;
  at w (s 4. + Rng.int w.rng (s 4.)) (fun () -> start w 3);
  at w (s 4. + Rng.int w.rng (s 4.)) (fun () -> start w 4);
  let leaver = Rng.int w.rng 5 in
  at w
    (s 9. + Rng.int w.rng (s 3.))
    (fun () ->
      match w.procs.(leaver).g with Some g when alive w.procs.(leaver) -> G.leave g | _ -> ());
  workload w ~from:(s 2.) ~until:(s 16.) ~count:120;
  Sim.run ~until:(s 40.) w.net;
  finish w

let partition_scenario ?trace ?params seed =
  let w = make ?trace ?params ~seed ~n:5 ~link:(lossy 0.02) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 300_000_000) (fun () -> start w i)) w.procs;
  let addrs = Array.to_list (Array.map (fun p -> p.addr) w.procs) in
  (* Two random members against the other three. *)
  let shuffled =
    List.map snd (List.sort compare (List.map (fun a -> (Rng.bits64 w.rng, a)) addrs))
  in
  let side_a = List.filteri (fun i _ -> i < 2) shuffled
  and side_b = List.filteri (fun i _ -> i >= 2) shuffled in
  let cut = s 5. + Rng.int w.rng (s 3.) in
  at w cut (fun () ->
      note w "%d partition" (Sim.now w.net);
      Sim.partition w.net [ side_a; side_b ]);
  at w
    (cut + s 12.)
    (fun () ->
      note w "%d heal" (Sim.now w.net);
      Sim.heal w.net);
  workload w ~from:(s 2.) ~until:(cut + s 16.) ~count:160;
  Sim.run ~until:(cut + s 45.) w.net;
  finish w

let churn_scenario ?trace ?params seed =
  let n = 6 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.10) () in
  for i = 0 to 3 do
    at w (Rng.int w.rng 500_000_000) (fun () -> start w i)
  done;
  let horizon = s 40. in
  for _ = 1 to 8 do
    let t = s 3. + Rng.int w.rng (horizon - s 3.) in
    let i = Rng.int w.rng n in
    match Rng.int w.rng 5 with
    | 0 -> at w t (fun () -> if not (alive w.procs.(i)) then start w i)
    | 1 ->
        at w t (fun () ->
            match w.procs.(i).g with Some g when alive w.procs.(i) -> G.leave g | _ -> ())
    | 2 -> at w t (fun () -> crash w i)
    | 3 ->
        at w t (fun () ->
            let a, b =
              List.partition
                (fun _ -> Rng.bool w.rng)
                (Array.to_list (Array.map (fun p -> p.addr) w.procs))
            in
            note w "%d partition" (Sim.now w.net);
            Sim.partition w.net [ a; b ])
    | _ ->
        at w t (fun () ->
            note w "%d heal" (Sim.now w.net);
            Sim.heal w.net)
  done;
  (* At the end: the network heals, and the first members come back. *)
  at w horizon (fun () ->
      Sim.heal w.net;
      for i = 0 to 1 do
        if not (alive w.procs.(i)) then start w i
      done);
  workload w ~from:(s 2.) ~until:(horizon + s 5.) ~count:200;
  Sim.run ~until:(horizon + s 60.) w.net;
  finish w

(* {1 Adversarial scenarios} *)

(* A live member that ends blocked is a wedged group. *)
let not_wedged w =
  List.filter_map
    (fun p ->
      match p.g with
      | Some g when alive p && G.is_blocked g ->
          Some (Printf.sprintf "%s ends blocked in view %s" (G.me g) (G.view g).vid)
      | _ -> None)
    (Array.to_list w.procs)

(* The scenario's own tunables, under those given on the command line. *)
let with_params w l =
  let defaults = List.fold_left (fun ps (k, v) -> Params.set k v ps) Params.empty l in
  { w with params = Params.override defaults ~by:w.params }

(* Large fragmented casts from every member, beyond the flow window, while
   members join and crash: casts wait in flow control when flushes start. *)
let flow_flush_scenario ?trace ?params seed =
  let w = make ?trace ?params ~seed ~n:5 ~link:(lossy 0.02) () in
  let w =
    with_params w
      [
        ("frag.size", Params.Int 2000);
        ("mflow.window", Params.Int 8_000);
        ("mflow.queue", Params.Int 32_000);
      ]
  in
  for i = 0 to 2 do
    at w (Rng.int w.rng 300_000_000) (fun () -> start w i)
  done;
  at w (s 3. + Rng.int w.rng (s 3.)) (fun () -> start w 3);
  at w (s 4. + Rng.int w.rng (s 4.)) (fun () -> start w 4);
  let victim = Rng.int w.rng 5 in
  at w (s 6. + Rng.int w.rng (s 4.)) (fun () -> crash w victim);
  (* Every 20 to 80 ms, a member casts 2 to 20 KB (1 to 10 fragments). *)
  let t = ref (s 2.) in
  while !t < s 11. do
    let i = Rng.int w.rng 5 and size = 2000 + Rng.int w.rng 18_000 in
    at w !t (fun () -> cast ~size w i);
    t := !t + Time.of_ms 20 + Rng.int w.rng (Time.of_ms 60)
  done;
  workload w ~from:(s 2.) ~until:(s 12.) ~count:40;
  Sim.run ~until:(s 45.) w.net;
  finish ~extra:(not_wedged w) w

(* Casts and sends over the largest message mixed with normal traffic,
   while a member joins and another crashes. *)
let oversize_scenario ?trace ?params seed =
  let w = make ?trace ?params ~seed ~n:4 ~link:(lossy 0.02) () in
  let w =
    with_params w [ ("frag.size", Params.Int 8000); ("frag.max_message", Params.Int 40_000) ]
  in
  for i = 0 to 2 do
    at w (Rng.int w.rng 300_000_000) (fun () -> start w i)
  done;
  at w (s 4. + Rng.int w.rng (s 4.)) (fun () -> start w 3);
  at w (s 9. + Rng.int w.rng (s 3.)) (fun () -> crash w (Rng.int w.rng 4));
  for _ = 1 to 12 do
    let at_ = s 2. + Rng.int w.rng (s 12.) and i = Rng.int w.rng 4 in
    let size = 40_001 + Rng.int w.rng 20_000 in
    if Rng.bool w.rng then at w at_ (fun () -> cast ~size w i)
    else at w at_ (fun () -> send ~size w i)
  done;
  workload w ~from:(s 2.) ~until:(s 14.) ~count:80;
  Sim.run ~until:(s 40.) w.net;
  finish ~extra:(not_wedged w) w

(* One member stops hearing anything for 8 s (it can still send): it must
   be the one excluded; the others stay together. *)
let deaf_scenario ?trace ?params seed =
  let n = 5 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.02) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 300_000_000) (fun () -> start w i)) w.procs;
  let deaf = Rng.int w.rng n in
  let from = s 5. + Rng.int w.rng (s 2.) in
  let until = from + s 8. in
  let healthy = List.filter (fun i -> i <> deaf) (List.init n Fun.id) in
  let healthy_ids = ref [] in
  (* How many events each healthy member had logged when the other went
     deaf: only the views after count. *)
  let before = Hashtbl.create 8 in
  at w from (fun () ->
      note w "%d deaf %s" (Sim.now w.net) w.procs.(deaf).addr;
      healthy_ids := List.filter_map (fun i -> Option.map G.me w.procs.(i).g) healthy;
      List.iter
        (fun id ->
          Hashtbl.replace before id
            (match Hashtbl.find_opt w.logs id with Some l -> List.length !l | None -> 0))
        !healthy_ids;
      List.iter
        (fun i ->
          Sim.set_link w.net ~src:w.procs.(i).addr ~dst:w.procs.(deaf).addr
            { (lossy 0.02) with loss = 1.0 })
        healthy);
  at w until (fun () ->
      note w "%d hears again %s" (Sim.now w.net) w.procs.(deaf).addr;
      List.iter
        (fun i -> Sim.clear_link w.net ~src:w.procs.(i).addr ~dst:w.procs.(deaf).addr)
        healthy);
  workload w ~from:(s 2.) ~until:(s 20.) ~count:150;
  Sim.run ~until:(s 50.) w.net;
  (* Every view a healthy member installs while the other is deaf holds
     every healthy member. *)
  let split =
    List.concat_map
      (fun id ->
        match Hashtbl.find_opt w.logs id with
        | None -> []
        | Some l ->
            let after = List.filteri (fun i _ -> i < List.length !l - Hashtbl.find before id) !l in
            List.filter_map
              (function
                | Log.View { me; view; members; _ }
                  when List.exists (fun h -> not (List.mem h members)) !healthy_ids ->
                    Some
                      (Printf.sprintf "%s installed %s [%s] without every healthy member" me view
                         (String.concat ", " members))
                | _ -> None)
              after)
      !healthy_ids
  in
  (* Once excluded, the deaf member is not taken back while it is deaf: no
     healthy member installs, before it hears again, a view with it after
     one without it. *)
  let readmitted =
    List.concat_map
      (fun id ->
        match Hashtbl.find_opt w.logs id with
        | None -> []
        | Some l ->
            let excluded = ref false in
            List.filter_map
              (function
                | Log.View { t; me; view; members } when t >= from && t < until ->
                    let has_all_healthy = List.for_all (fun h -> List.mem h members) !healthy_ids in
                    let extra = List.filter (fun m -> not (List.mem m !healthy_ids)) members in
                    if has_all_healthy && extra = [] then (
                      excluded := true;
                      None)
                    else if !excluded && extra <> [] then begin
                      Some
                        (Printf.sprintf "%s installed %s with %s, still deaf, after excluding it" me
                           view (String.concat ", " extra))
                    end
                    else None
                | _ -> None)
              (List.rev !l))
      !healthy_ids
  in
  finish ~extra:(not_wedged w @ split @ readmitted) w

(* No phantom views: every member a view names installs it, unless that
   member crashed (a view a member refuses leaves the others running with
   a member that never takes part). *)
let no_phantoms logs ~crashed =
  let installed = Hashtbl.create 64 in
  List.iter
    (fun (_, l) ->
      List.iter
        (function Log.View { me; view; _ } -> Hashtbl.replace installed (me, view) () | _ -> ())
        l)
    logs;
  let seen = Hashtbl.create 16 in
  List.concat_map
    (fun (_, l) ->
      List.concat_map
        (function
          | Log.View { view; members; _ } when not (Hashtbl.mem seen view) ->
              Hashtbl.replace seen view ();
              List.filter_map
                (fun m ->
                  if Hashtbl.mem installed (m, view) || List.mem m crashed then None
                  else
                    Some
                      (Printf.sprintf "view %s names %s, which never installs it (phantom)" view m))
                members
          | _ -> [])
        l)
    logs

(* Members crash and restart at the same address 0.5-2.5 s later while
   casts flow: no phantom view, each restart costs the members that stay
   one view change (the view that drops the old incarnation takes the new
   one in), and the restarted member is taken in at its first request. *)
let restart_scenario ?(late = false) ?trace ?params seed =
  let n = 5 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.02) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 300_000_000) (fun () -> start w i)) w.procs;
  (* One or two restarts, 15 s apart, of members other than the
     coordinator of the first view (rank 0 is the least id: any member
     may be it, so the victims are chosen when they crash). *)
  (* Why each member that left a view was excluded, as the others say. *)
  let whys = ref [] in
  w.hooks <- { no_hooks with viewed = (fun _ _ v -> whys := v.Consort_group.Group.why @ !whys) };
  let restarts = 1 + Rng.int w.rng 2 in
  let first = s 4. + Rng.int w.rng (s 2.) in
  let victims = ref [] in
  let steady = ref [] in
  for k = 0 to restarts - 1 do
    let t = first + (k * s 15.) in
    let pick = Rng.int w.rng 1000 and back = s 0.5 + Rng.int w.rng (s 2.) in
    let lag = if late then Rng.int w.rng (Consort.Time.of_ms 20) else 0 in
    at w t (fun () ->
        (* A live member that does not coordinate its view. *)
        let candidates =
          List.filter
            (fun i ->
              match w.procs.(i).g with
              | Some g when alive w.procs.(i) ->
                  let v = G.view g in
                  v.Consort_group.Group.members.(0) <> G.me g && not (List.mem i !victims)
              | _ -> false)
            (List.init n Fun.id)
        in
        match candidates with
        | [] -> ()
        | l ->
            let i = List.nth l (pick mod List.length l) in
            victims := i :: !victims;
            if k = 0 then
              steady :=
                List.filter_map
                  (fun j -> if j = i then None else Option.map G.me w.procs.(j).g)
                  (List.init n Fun.id);
            crash w i;
            let restart () =
              note w "%d restart %s" (Sim.now w.net) w.procs.(i).addr;
              start w i
            in
            if not late then at w (Sim.now w.net + back) restart
            else begin
              (* Late: as the coordinator blocks for the flush that
                 excludes the old incarnation (or 9 s after the crash,
                 whichever comes first), 0-20 ms later. *)
              let crashed_at = Sim.now w.net in
              (* Flushes take 600 ms or more from here (the other survivors'
                 links to the coordinator take 300 ms), as between real
                 processes under load: the restarted member's merge request
                 comes within one, whatever the discovery's phase. *)
              Array.iter
                (fun (c : proc) ->
                  match c.g with
                  | Some g when alive c && (G.view g).Consort_group.Group.members.(0) = G.me g ->
                      Array.iter
                        (fun (p : proc) ->
                          if p == w.procs.(i) then
                            Sim.set_link w.net ~src:p.addr ~dst:c.addr (lossy 0.02)
                          else if p != c then
                            Sim.set_link w.net ~src:p.addr ~dst:c.addr
                              { (lossy 0.02) with latency = Consort.Time.of_ms 300 })
                        w.procs
                  | _ -> ())
                w.procs;
              let rec poll () =
                let blocked =
                  Array.exists
                    (fun p ->
                      alive p
                      &&
                      match p.g with
                      | Some g ->
                          (G.view g).Consort_group.Group.members.(0) = G.me g && G.is_blocked g
                      | None -> false)
                    w.procs
                in
                if blocked || Sim.now w.net > crashed_at + s 9. then
                  at w (Sim.now w.net + lag) restart
                else at w (Sim.now w.net + Consort.Time.of_ms 1) poll
              in
              at w (crashed_at + s 3.) poll
            end)
  done;
  workload w ~from:(s 2.) ~until:(first + (restarts * s 15.)) ~count:200;
  Sim.run ~until:(first + (restarts * s 15.) + s 25.) w.net;
  let logs = List.rev_map (fun id -> (id, List.rev !(Hashtbl.find w.logs id))) !(w.order) in
  let phantoms = no_phantoms logs ~crashed:!(w.crashed) in
  (* Views installed after the first crash by the members that were never
     restarted (victims of a later restart are counted up to it). *)
  let victim_ids = !(w.crashed) in
  let extra_views =
    List.filter_map
      (fun id ->
        if List.mem id victim_ids then None
        else
          let views =
            List.length
              (List.filter
                 (function Log.View { t; _ } -> t > first | _ -> false)
                 (match List.assoc_opt id logs with Some l -> l | None -> []))
          in
          let restarted = List.length !victims in
          if views > restarted then
            Some
              (Printf.sprintf "%s installed %d views after the first crash for %d restarts" id views
                 restarted)
          else None)
      !steady
  in
  (* A restarted member joins with its first request: the view that takes
     it in comes before any second view of its own. *)
  let second_tries =
    List.filter_map
      (fun i ->
        match w.procs.(i).g with
        | Some g when alive w.procs.(i) ->
            let id = G.me g in
            let rec own n = function
              | Log.View { members = [ _ ]; _ } :: rest -> own (n + 1) rest
              | Log.View _ :: _ | [] -> n
              | _ :: rest -> own n rest
            in
            let n = own 0 (match List.assoc_opt id logs with Some l -> l | None -> []) in
            if n > 1 then
              Some
                (Printf.sprintf "%s, restarted, installed %d views of its own before joining" id n)
            else None
        | _ -> None)
      !victims
  in
  (* The old incarnation is excluded because it restarted (the new one
     answered at its address), not after its silence; unless (late) the
     restart came when the flush for its silence was under way. *)
  let late =
    List.filter_map
      (fun (id, why) ->
        if
          List.mem id victim_ids
          && (not (String.ends_with ~suffix:"restarted at its address" why))
          && not
               (late
               && String.starts_with ~prefix:"excluded: " why
               && (String.ends_with ~suffix:"silent here too" why
                  || String.starts_with ~prefix:"excluded: silent" why))
        then Some (Printf.sprintf "%s left the view on restart as %S" id why)
        else None)
      (List.sort_uniq compare !whys)
  in
  finish ~extra:(not_wedged w @ phantoms @ extra_views @ second_tries @ late) w

(* A member crashes for good and, 0-1 s later, a new member joins while
   casts flow: the coordinator's flush for the joiner waits on the dead
   member longer than the joiner waits for its view, so the joiner asks
   again from new views of its own. No phantom view, and the members that
   stay install at most two views (the crash and the join, or both in
   one). *)
let join_dead_scenario ?trace ?params seed =
  let n = 5 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.02) () in
  for i = 0 to n - 2 do
    at w (Rng.int w.rng 300_000_000) (fun () -> start w i)
  done;
  let cut = s 4. + Rng.int w.rng (s 2.) in
  let victim = 1 + Rng.int w.rng (n - 2) in
  let steady = ref [] in
  at w cut (fun () ->
      steady :=
        List.filter_map
          (fun j -> if j = victim then None else Option.map G.me w.procs.(j).g)
          (List.init (n - 1) Fun.id);
      crash w victim);
  at w (cut + Rng.int w.rng (s 1.)) (fun () -> start w (n - 1));
  workload w ~from:(s 2.) ~until:(cut + s 12.) ~count:150;
  Sim.run ~until:(cut + s 30.) w.net;
  let logs = List.rev_map (fun id -> (id, List.rev !(Hashtbl.find w.logs id))) !(w.order) in
  let extra_views =
    List.filter_map
      (fun id ->
        let views =
          List.length
            (List.filter
               (function Log.View { t; _ } -> t > cut | _ -> false)
               (match List.assoc_opt id logs with Some l -> l | None -> []))
        in
        if views > 2 then
          Some (Printf.sprintf "%s installed %d views after a crash and a join" id views)
        else None)
      !steady
  in
  finish ~extra:(not_wedged w @ no_phantoms logs ~crashed:!(w.crashed) @ extra_views) w

(* A member (the coordinator on half the seeds) is paused for 6-9 s, past
   suspect.timeout, while casts flow, and resumes with its stale view: it
   leaves that view within 2 s of resuming (four discovery periods: the
   others' gossip tells it the view moved on), its application's casts
   stop going into it, and it rejoins: the others install at most three
   views (its exclusion, its return, and a merge into it tried while it
   was paused), it at most two (a view of its own, the group's). *)
let pause_scenario ?trace ?params seed =
  let n = 5 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.02) () in
  (* Each member runs as the code of its address, so that a pause stops
     its timers too, as a stopped process's. *)
  Array.iteri
    (fun i p ->
      at w (Rng.int w.rng 300_000_000) (fun () -> Sim.within w.net p.addr (fun () -> start w i)))
    w.procs;
  let from = s 5. + Rng.int w.rng (s 2.) in
  let until = from + s 6. + Rng.int w.rng (s 3.) in
  let coord = Rng.bool w.rng and pick = Rng.int w.rng 1000 in
  let paused = ref (-1) and stale = ref "" and others = ref [] in
  at w from (fun () ->
      let live = List.filter (fun i -> alive w.procs.(i)) (List.init n Fun.id) in
      let is_coord i =
        match w.procs.(i).g with
        | Some g -> (G.view g).Consort_group.Group.members.(0) = G.me g
        | None -> false
      in
      let l = List.filter (fun i -> is_coord i = coord) live in
      match l with
      | [] -> ()
      | l ->
          let i = List.nth l (pick mod List.length l) in
          paused := i;
          (match w.procs.(i).g with
          | Some g -> stale := (G.view g).Consort_group.Group.vid
          | None -> ());
          others :=
            List.filter_map
              (fun j -> if j = i then None else Option.map G.me w.procs.(j).g)
              (List.init n Fun.id);
          note w "%d pause %s until %d" (Sim.now w.net) w.procs.(i).addr until;
          Sim.pause w.net w.procs.(i).addr ~until);
  (* Once resumed, the paused member blocks in its dead view when it learns
     that the view went on without it: its application casts then, and
     must be refused (the cast would reach no one), until its next view. *)
  let accepted_dead = ref 0 and tried_dead = ref 0 and learnt = ref false in
  let rec try_dead i k =
    match w.procs.(i).g with
    | Some g
      when alive w.procs.(i)
           && k > 0
           && (Array.length (G.view g).Consort_group.Group.members = 1 || (G.view g).vid = !stale)
      ->
        let before = w.refused in
        incr tried_dead;
        cast w i;
        if w.refused = before then incr accepted_dead;
        at w (Sim.now w.net + Time.of_ms 10) (fun () -> try_dead i (k - 1))
    | _ -> ()
  in
  (* From its first block after it resumed (in its dead view: it learnt,
     from gossip or from a flush that excludes it), every 10 ms for up to
     1 s, until it is in a view with others again. *)
  w.on_block <-
    (fun i ->
      if i = !paused && Sim.now w.net >= until && not !learnt then
        match w.procs.(i).g with
        | Some g when (G.view g).Consort_group.Group.vid = !stale ->
            learnt := true;
            (* Once the block is over (a flush that excludes it blocks it,
               then tells it so). *)
            at w (Sim.now w.net) (fun () -> try_dead i 100)
        | _ -> ());
  (* Casts every 20-80 ms from a member that runs (a paused application
     makes none). *)
  let t = ref (s 2.) in
  while !t < until + s 8. do
    let i = Rng.int w.rng n in
    at w !t (fun () -> if not (Sim.is_paused w.net w.procs.(i).addr) then cast w i);
    t := !t + Time.of_ms 20 + Rng.int w.rng (Time.of_ms 60)
  done;
  Sim.run ~until:(until + s 30.) w.net;
  let logs = List.rev_map (fun id -> (id, List.rev !(Hashtbl.find w.logs id))) !(w.order) in
  let views_of id pred =
    List.filter
      (function Log.View { t; _ } -> pred t | _ -> false)
      (match List.assoc_opt id logs with Some l -> l | None -> [])
  in
  let problems =
    if !paused < 0 then []
    else
      let me = match w.procs.(!paused).g with Some g -> G.me g | None -> "" in
      let after = views_of me (fun t -> t >= until) in
      let left =
        match after with
        | Log.View { t; _ } :: _ when t <= until + s 2. -> []
        | Log.View { t; _ } :: _ ->
            [
              Printf.sprintf "%s stayed in its dead view %s for %.2f s after it resumed" me !stale
                (Time.to_sec (t - until));
            ]
        | _ -> [ Printf.sprintf "%s never left its dead view %s" me !stale ]
      in
      let mine =
        if List.length after > 2 then
          [ Printf.sprintf "%s installed %d views after it resumed" me (List.length after) ]
        else []
      in
      let theirs =
        List.filter_map
          (fun id ->
            let k = List.length (views_of id (fun t -> t > from)) in
            (* A third when the coordinator that excluded it had asked, just
               then, to merge into the paused member's partition, and went
               on in a new view when no answer came (seed 70 of 150). *)
            if k > 3 then
              Some (Printf.sprintf "%s installed %d views for one pause of another member" id k)
            else None)
          !others
      in
      let dead =
        if !accepted_dead > 0 then
          [
            Printf.sprintf
              "%s accepted %d cast(s) in its dead view %s after it learnt that view went on \
               without it"
              me !accepted_dead !stale;
          ]
        else []
      in
      note w "dead view casts tried %d" !tried_dead;
      left @ mine @ theirs @ dead
  in
  finish ~extra:(not_wedged w @ no_phantoms logs ~crashed:!(w.crashed) @ problems) w

(* Flushes cut into bursts: every member casts a burst and, 0-3 ms later,
   the application suspects one of them, under 15% loss, so that at the
   flush some member lacks the last casts of some origin and must fetch
   them up to the target before it reports Done (aimed at the flush's
   delivery up to its target). *)
let flush_burst_scenario ?trace ?params seed =
  let n = 4 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.15) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 300_000_000) (fun () -> start w i)) w.procs;
  for k = 0 to 3 do
    let t = s 3. + (k * s 6.) + Rng.int w.rng (s 1.) in
    let by = Rng.int w.rng n and victim = Rng.int w.rng n and gap = Rng.int w.rng (Time.of_ms 3) in
    at w t (fun () ->
        for i = 0 to n - 1 do
          for _ = 1 to 6 do
            cast w i
          done
        done;
        at w
          (Sim.now w.net + gap)
          (fun () ->
            match (w.procs.(by).g, w.procs.(victim).g) with
            | Some g, Some v when alive w.procs.(by) && alive w.procs.(victim) && by <> victim ->
                note w "%d %s suspects %s" (Sim.now w.net) (G.me g) (G.me v);
                G.suspect g [ G.me v ]
            | _ -> ()))
  done;
  Sim.run ~until:(s 45.) w.net;
  finish ~extra:(not_wedged w) w

(* The application suspects a live member while its casts are in flight,
   under 10% loss: it is excluded, then merges back. *)
let slander_scenario ?trace ?params seed =
  let n = 4 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.10) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 300_000_000) (fun () -> start w i)) w.procs;
  for _ = 1 to 2 do
    let t = s 4. + Rng.int w.rng (s 8.) in
    let by = Rng.int w.rng n and victim = Rng.int w.rng n in
    at w t (fun () ->
        match (w.procs.(by).g, w.procs.(victim).g) with
        | Some g, Some v when alive w.procs.(by) && alive w.procs.(victim) && by <> victim ->
            (* The victim has a burst in flight when it is suspected: some
               of it reaches some members only after they reported. *)
            for _ = 1 to 10 do
              cast w victim
            done;
            note w "%d %s suspects %s" (Sim.now w.net) (G.me g) (G.me v);
            G.suspect g [ G.me v ]
        | _ -> ())
  done;
  (* The victims cast in bursts, so that casts are in flight. *)
  workload w ~from:(s 2.) ~until:(s 16.) ~count:250;
  Sim.run ~until:(s 45.) w.net;
  finish ~extra:(not_wedged w) w

(* The coordinator leaves while casts flow and a member joins. *)
let leave_coord_scenario ?trace ?params seed =
  let n = 5 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.03) () in
  for i = 0 to 3 do
    at w (Rng.int w.rng 300_000_000) (fun () -> start w i)
  done;
  let t = s 5. + Rng.int w.rng (s 4.) in
  at w t (fun () ->
      let live = List.filter_map (fun p -> if alive p then p.g else None) (Array.to_list w.procs) in
      match live with
      | g :: _ ->
          let v = G.view g in
          let coord = v.members.(0) in
          List.iter
            (fun g' ->
              if G.me g' = coord then (
                note w "%d coordinator %s leaves" (Sim.now w.net) coord;
                G.leave g'))
            live
      | [] -> ());
  at w (t - s 1. + Rng.int w.rng (s 2.)) (fun () -> start w 4);
  workload w ~from:(s 2.) ~until:(s 15.) ~count:200;
  Sim.run ~until:(s 40.) w.net;
  finish ~extra:(not_wedged w) w

(* Bursts of 5 to 40 casts and sends of up to 1.5 KB from one member in
   one step, so that most go in bundles, under 3% loss with reordering and
   duplicates, while a member crashes, another joins and one leaves, each
   in the same step as a burst: the flush starts with bundles in flight.
   The members must have sent and received bundles, and none malformed. *)
let bundle_scenario ?trace ?params seed =
  let n = 5 in
  let w = make ?trace ?params ~seed ~n ~link:{ (lossy 0.03) with Sim.duplicate = 0.01 } () in
  for i = 0 to 3 do
    at w (Rng.int w.rng 300_000_000) (fun () -> start w i)
  done;
  let burst i =
    for _ = 1 to 5 + Rng.int w.rng 36 do
      let size = 1 + Rng.int w.rng 1500 in
      if Rng.int w.rng 8 = 0 then send ~size w i else cast ~size w i
    done
  in
  for _ = 1 to 40 do
    let t = s 2. + Rng.int w.rng (s 14.) in
    let i = Rng.int w.rng n in
    at w t (fun () -> burst i)
  done;
  let victim = Rng.int w.rng 4 in
  at w
    (s 5. + Rng.int w.rng (s 2.))
    (fun () ->
      burst victim;
      burst ((victim + 1) mod 4);
      crash w victim);
  at w
    (s 8. + Rng.int w.rng (s 2.))
    (fun () ->
      burst ((victim + 2) mod 4);
      start w 4);
  let leaver = (victim + 3) mod 4 in
  at w
    (s 12. + Rng.int w.rng (s 2.))
    (fun () ->
      burst leaver;
      burst 4;
      match w.procs.(leaver).g with Some g when alive w.procs.(leaver) -> G.leave g | _ -> ());
  Sim.run ~until:(s 40.) w.net;
  let stats =
    List.filter_map
      (fun p -> match p.g with Some g when alive p -> Some (G.bundle_stats g) | _ -> None)
      (Array.to_list w.procs)
  in
  let sum f = List.fold_left (fun acc st -> acc + f st) 0 stats in
  let bundling =
    (if sum (fun st -> st.Consort_group.Bundle.bundled) = 0 then [ "no datagram went in a bundle" ]
     else [])
    @ (if sum (fun st -> st.Consort_group.Bundle.unbundled) = 0 then [ "no bundle was received" ]
       else [])
    @ if sum (fun st -> st.Consort_group.Bundle.malformed) > 0 then [ "malformed bundles" ] else []
  in
  finish ~extra:(not_wedged w @ bundling) w

(* Many members starved at once (the scheduler runs other processes, a
   garbage collection stops them): five of nine stop running at about the
   same time, for longer than the suspicion timeout, while the other four
   go on casting and a tenth process joins; then all run again. The
   members that kept running suspect the starved ones, which is right;
   what must not happen is that a member is excluded as a slanderer (a
   member whose accusations contradict what the others hear): no member
   here stopped hearing, so every exclusion for slander is a violation,
   and virtual synchrony holds. *)
let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

let slow_many_scenario ?trace ?params seed =
  let n = 10 in
  let w = make ?trace ?params ~seed ~n ~link:(lossy 0.02) () in
  let within i f () = Sim.within w.net w.procs.(i).addr f in
  let running i = not (Sim.is_paused w.net w.procs.(i).addr) in
  for i = 0 to n - 2 do
    at w (Rng.int w.rng 300_000_000) (within i (fun () -> start w i))
  done;
  let starved =
    List.filteri
      (fun k _ -> k < 5)
      (List.map snd (List.sort compare (List.init (n - 1) (fun i -> (Rng.bits64 w.rng, i)))))
  in
  let from = s 6. + Rng.int w.rng (s 2.) in
  let last = ref 0 in
  List.iter
    (fun i ->
      let t = from + Rng.int w.rng (Time.of_ms 500) and d = s 6. + Rng.int w.rng (s 4.) in
      last := max !last (t + d);
      at w t (fun () ->
          note w "%d starved %s" (Sim.now w.net) w.procs.(i).addr;
          Sim.pause w.net w.procs.(i).addr ~until:(t + d)))
    starved;
  at w (from + s 2. + Rng.int w.rng (s 3.)) (within (n - 1) (fun () -> start w (n - 1)));
  for _ = 1 to 200 do
    let t = s 2. + Rng.int w.rng (!last + s 3. - s 2.) and i = Rng.int w.rng n in
    at w t (within i (fun () -> if running i then cast w i))
  done;
  let slandered = ref [] in
  w.hooks <-
    {
      no_hooks with
      viewed =
        (fun _ me v ->
          List.iter
            (fun (who, why) ->
              if contains why "some of which this member hears" then
                slandered :=
                  Printf.sprintf "%s excluded %s for slander (%s) in %s" me who why v.vid
                  :: !slandered)
            v.why);
    };
  Sim.run ~until:(!last + s 40.) w.net;
  finish ~extra:(not_wedged w @ List.rev !slandered) w

(* A large group on the Scale stack (sim.props, with Scale added): [n]
   members start within a second and merge into one view, casts and sends
   flow from random members, two members crash (one of them, at random, a
   monitor of the other on the ring, so that its silence has one witness
   fewer) and, on half the seeds, one more member is cut off from everyone
   for a while; 2% loss. *)
let scale_scenario ~n ?trace ?(params = Params.empty) seed =
  let props =
    match props_of params with
    | Ok p -> List.sort_uniq compare (Consort_group.Properties.Scale :: p)
    | Error e -> Fmt.failwith "%s: %a" sim_props Consort_group.Properties.pp_error e
  in
  let w = make ?trace ~params ~props ~seed ~n ~link:(lossy 0.02) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 1_000_000_000) (fun () -> start w i)) w.procs;
  workload w ~from:(s 6.) ~until:(s 24.) ~count:300;
  let v1 = Rng.int w.rng n in
  let v2 =
    if Rng.bool w.rng then (v1 + 1 + Rng.int w.rng 3) mod n
    else (v1 + 1 + Rng.int w.rng (n - 1)) mod n
  in
  let t1 = s 8. + Rng.int w.rng (s 4.) in
  at w t1 (fun () -> crash w v1);
  at w (t1 + Rng.int w.rng (s 2.)) (fun () -> crash w v2);
  if Rng.bool w.rng then begin
    let cut = ref ((v2 + 1 + Rng.int w.rng (n - 2)) mod n) in
    while !cut = v1 || !cut = v2 do
      cut := (!cut + 1) mod n
    done;
    let addrs = Array.to_list (Array.map (fun p -> p.addr) w.procs) in
    let alone = w.procs.(!cut).addr in
    let at_cut = s 14. + Rng.int w.rng (s 4.) in
    at w at_cut (fun () ->
        note w "%d partition" (Sim.now w.net);
        Sim.partition w.net [ [ alone ]; List.filter (fun a -> a <> alone) addrs ]);
    at w
      (at_cut + s 10.)
      (fun () ->
        note w "%d heal" (Sim.now w.net);
        Sim.heal w.net)
  end;
  Sim.run ~until:(s 60.) w.net;
  finish w

(* The index of the process a member id runs at. *)
let proc_of w id =
  let r = ref None in
  Array.iteri
    (fun i p -> match p.g with Some g when alive p && G.me g = id -> r := Some i | _ -> ())
    w.procs;
  !r

(* A one-way fault on the Scale stack: [n] members under 1% loss; from a
   random time, one live member W stops hearing one other X for 15 s while
   everyone else hears X (X is W's ring predecessor, which W watches, if
   [coord] is false; the coordinator, if [coord] is true). During the
   fault W sends to X and casts, X sends to W. Virtual synchrony must
   hold: what is sent is delivered, or a view change comes; with [coord],
   no view a member that kept hearing everyone installs lacks more than W
   and X (the group does not collapse). *)
let oneway_scenario ~n ~coord ?trace ?(params = Params.empty) seed =
  let props =
    match props_of params with
    | Ok p -> List.sort_uniq compare (Consort_group.Properties.Scale :: p)
    | Error e -> Fmt.failwith "%s: %a" sim_props Consort_group.Properties.pp_error e
  in
  let w = make ?trace ~params ~props ~seed ~n ~link:(lossy 0.01) () in
  Array.iteri (fun i _ -> at w (Rng.int w.rng 1_000_000_000) (fun () -> start w i)) w.procs;
  workload w ~from:(s 6.) ~until:(s 30.) ~count:150;
  let from = s 8. + Rng.int w.rng (s 3.) in
  let pick = Rng.int w.rng n in
  let fine = ref [] and before = Hashtbl.create 32 in
  at w from (fun () ->
      match w.procs.(pick).g with
      | Some g when alive w.procs.(pick) -> (
          let v = G.view g in
          let m = Array.length v.members in
          let x_rank = if coord then 0 else Rng.int w.rng m in
          let w_rank = if coord then 1 + Rng.int w.rng (m - 1) else (x_rank + 1) mod m in
          match (proc_of w v.members.(w_rank), proc_of w v.members.(x_rank)) with
          | Some wi, Some xi when m = n && wi <> xi ->
              note w "%d %s deaf to %s" (Sim.now w.net) w.procs.(wi).addr w.procs.(xi).addr;
              Sim.set_link w.net ~src:w.procs.(xi).addr ~dst:w.procs.(wi).addr
                { (lossy 0.01) with loss = 1.0 };
              fine :=
                List.filter_map
                  (fun i -> if i = wi || i = xi then None else Option.map G.me w.procs.(i).g)
                  (List.init n Fun.id);
              List.iter
                (fun id ->
                  Hashtbl.replace before id
                    (match Hashtbl.find_opt w.logs id with Some l -> List.length !l | None -> 0))
                !fine;
              let send_to i j =
                match (w.procs.(i).g, w.procs.(j).g) with
                | Some g, Some h
                  when alive w.procs.(i)
                       && alive w.procs.(j)
                       && Array.mem (G.me h) (G.view g).Consort_group.Group.members ->
                    let p = w.procs.(i) in
                    w.made <- w.made + 1;
                    p.next_seq <- p.next_seq + 1;
                    let dst = G.me h in
                    let msg = Printf.sprintf "%d|%s>%s|%d|oneway" p.next_seq (G.me g) dst w.made in
                    submit w p g (`Send dst) (Some dst) msg (G.send g dst msg)
                | _ -> ()
              in
              for k = 0 to 11 do
                at w
                  (from + s 1. + (k * Time.of_ms 1200))
                  (fun () ->
                    send_to wi xi;
                    send_to xi wi;
                    cast w wi)
              done;
              at w
                (from + s 15.)
                (fun () ->
                  note w "%d %s hears %s again" (Sim.now w.net) w.procs.(wi).addr w.procs.(xi).addr;
                  Sim.clear_link w.net ~src:w.procs.(xi).addr ~dst:w.procs.(wi).addr)
          | _ -> w.problems <- "the group had not merged when the fault was due" :: w.problems)
      | _ -> w.problems <- "no live member to pick the pair from" :: w.problems);
  Sim.run ~until:(s 60.) w.net;
  (* No view that a member hearing everyone installs during the fault lacks
     any other such member. *)
  let split =
    if not coord then []
    else
      List.concat_map
        (fun id ->
          match Hashtbl.find_opt w.logs id with
          | None -> []
          | Some l ->
              let after =
                List.filteri (fun i _ -> i < List.length !l - Hashtbl.find before id) !l
              in
              List.filter_map
                (function
                  | Log.View { me; view; members; _ }
                    when List.exists (fun h -> not (List.mem h members)) !fine ->
                      Some
                        (Printf.sprintf
                           "%s installed %s of %d members, without every member that heard everyone"
                           me view (List.length members))
                  | _ -> None)
                after)
        !fine
  in
  finish ~extra:(not_wedged w @ split) w

let scenarios =
  [
    ("vsync-crash", "5 members; one or two crash while casts flow; 2% loss", crash_scenario);
    ( "vsync-join-leave",
      "3 members, 2 join later, one leaves, casts and sends flow; 2% loss",
      join_leave_scenario );
    ( "vsync-partition-merge",
      "5 members split 2/3 for 12 s while both sides cast, then heal and merge; 2% loss",
      partition_scenario );
    ( "vsync-churn",
      "random joins, leaves, crashes, partitions and heals under 10% loss and reordering, then a \
       final heal",
      churn_scenario );
    ( "vsync-flow-flush",
      "5 members cast 2-20 KB fragmented messages beyond a small flow window while two join and \
       one crashes; 2% loss",
      flow_flush_scenario );
    ( "vsync-oversize",
      "casts and sends over frag.max_message mixed with normal traffic while a member joins and \
       one crashes",
      oversize_scenario );
    ( "vsync-deaf",
      "one of 5 members hears nothing for 8 s: it alone is excluded, then merges back",
      deaf_scenario );
    ( "vsync-restart",
      "one or two of 5 members crash and restart at the same address 0.5-2.5 s later while casts \
       flow; 2% loss: no phantom view, one view change per restart",
      restart_scenario ~late:false );
    ( "vsync-restart-late",
      "vsync-restart with the restart 0-20 ms after the coordinator blocks for the flush that \
       excludes the old incarnation (its silence, suspect.timeout 5 s), that flush slowed to 600 \
       ms: the merge request comes during it; one view change per restart",
      restart_scenario ~late:true );
    ( "vsync-join-dead",
      "a member of 4 crashes and a fifth joins 0-1 s later while casts flow; 2% loss: no phantom \
       view, at most two view changes",
      join_dead_scenario );
    ( "vsync-pause",
      "one of 5 members, the coordinator on half the seeds, paused 6-9 s past suspect.timeout \
       while casts flow: it leaves its dead view within 2 s of resuming and rejoins; 2% loss",
      pause_scenario );
    ( "vsync-flush-burst",
      "4 members cast bursts and the application suspects one of them 0-3 ms later, four times, \
       under 15% loss: flushes with casts in flight",
      flush_burst_scenario );
    ( "vsync-slander",
      "the application suspects live members while they cast, under 10% loss",
      slander_scenario );
    ( "vsync-leave-coord",
      "the coordinator leaves while casts flow and a member joins; 3% loss",
      leave_coord_scenario );
    ( "vsync-bundle",
      "bursts of casts and sends that go in bundles while a member crashes, one joins and one \
       leaves, each with a burst in flight; 3% loss",
      bundle_scenario );
    ( "vsync-slow-many",
      "5 of 9 members starved at once for 6-10 s while the others cast and one joins; no member is \
       excluded for slander",
      slow_many_scenario );
    ( "scale-256",
      "256 members on the Scale stack (Ringfd, mnak_tree) merge, casts and sends flow, two crash \
       (often ring neighbours), one is cut off for 10 s on half the seeds; 2% loss",
      scale_scenario ~n:256 );
    ("scale-64", "scale-256 with 64 members (for many seeds)", scale_scenario ~n:64);
    ( "scale-oneway",
      "24 members on the Scale stack, 1% loss: one stops hearing its ring predecessor for 15 s \
       (everyone else hears it) while the two send to each other: what is sent is delivered, or a \
       view change comes",
      oneway_scenario ~n:24 ~coord:false );
    ( "scale-deaf-coord",
      "24 members on the Scale stack, 1% loss: one stops hearing the coordinator for 15 s \
       (everyone else hears it): no view of the others lacks any but those two, virtual synchrony \
       holds",
      oneway_scenario ~n:24 ~coord:true );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None

(* {1 Building blocks for scenarios in other modules} *)

let net w = w.net
let rng w = w.rng
let nprocs w = Array.length w.procs
let addr w i = w.procs.(i).addr
let views w = w.views
let problem w p = w.problems <- p :: w.problems
let set_hooks w h = w.hooks <- h
let group w i = match w.procs.(i).g with Some g when alive w.procs.(i) -> Some g | _ -> None
let crashed w = !(w.crashed)

let member w i =
  let p = w.procs.(i) in
  match p.g with
  | Some g when alive p -> ( match G.stack g with Some st -> Some (G.me g, st) | None -> None)
  | _ -> None

let addr_of_member w eid =
  Array.to_list w.procs
  |> List.find_map (fun p ->
         match p.g with Some g when alive p && G.me g = eid -> Some p.addr | _ -> None)

let leave w i = match w.procs.(i).g with Some g when alive w.procs.(i) -> G.leave g | _ -> ()
let is_alive w i = alive w.procs.(i)
let params w = w.params

let to_outcome ~seed (o : outcome) =
  {
    Consort_sim.Scenario.seed;
    violations = o.violations;
    trace_hash = o.trace_hash;
    sent = o.sent;
    delivered = o.delivered;
    datagrams = o.datagrams;
    end_time = o.end_time;
  }

let scenarios_of ~names ~describe
    ~(run : ?trace:out_channel -> ?params:Params.t -> string -> seed:int -> outcome option) =
  Consort_sim.Scenario.of_names ~names ~describe ~run:(fun ?trace ~params name ~seed ->
      Option.map (to_outcome ~seed) (run ?trace ~params name ~seed))

let scenarios = scenarios_of ~names ~describe ~run
