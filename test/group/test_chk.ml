(* The debugging layers (property Debug): a deliberately broken layer put
   into the stack of one member of a group over the simulator, and the
   checking layers must report what it did, with the events that led to
   it; with the broken layer idle they report nothing. The fault layers:
   their tunables change what arrives, and the group still agrees. *)

open Consort
module Sim = Consort_engine.Sim
module Group = Consort_group.Group
module G = Group.Make (Sim)
module P = Consort_group.Properties
module Chk = Consort_group.Chk

let sec = Time.of_sec
let layers ps = match P.layers ps with Ok l -> l | Error e -> Alcotest.failf "%a" P.pp_error e

(* {1 The broken layer} *)

type fault =
  | Swap_fifo  (** two consecutive casts of one origin delivered the other way round *)
  | Swap_any  (** two consecutive casts delivered the other way round *)
  | Forget  (** a cast never delivered *)

(* At the member of rank 1 of a view of three or more, the 5th cast of
   another member (Swap_fifo, Forget: of the first origin to reach 5) or
   the 5th cast (Swap_any) is held back or dropped. [active] turns it off
   for the control runs: same stack, nothing done. *)
let active = ref true

module Broken (F : sig
  val fault : fault
end) : Layer.S = struct
  type header = unit

  let name = "broken"
  let codec = Codec.unit
  let pp_header ppf () = Fmt.string ppf "-"
  let provides = []
  let requires = []

  type t = {
    out : header Layer.out;
    on : bool;
    counts : int array;
    mutable all : int;
    mutable held : (int * Msg.t) option;
    mutable fired : bool;
  }

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      on = !active && ctx.view.rank = 1 && n >= 3;
      counts = Array.make n 0;
      all = 0;
      held = None;
      fired = false;
    }

  let dn t dst msg = t.out.dn dst () msg

  let up t src () msg =
    match src with
    | Event.Cast_from o when t.on && o <> 1 -> (
        t.counts.(o) <- t.counts.(o) + 1;
        t.all <- t.all + 1;
        match (F.fault, t.held) with
        | _, Some (h, m) when F.fault = Swap_any || h = o ->
            t.held <- None;
            t.out.up src msg;
            t.out.up (Event.Cast_from h) m
        | (Swap_fifo | Forget), None when (not t.fired) && t.counts.(o) = 5 ->
            t.fired <- true;
            if F.fault = Forget then Msg.release msg else t.held <- Some (o, msg)
        | Swap_any, None when (not t.fired) && t.all = 5 ->
            t.fired <- true;
            t.held <- Some (o, msg)
        | _ -> t.out.up src msg)
    | _ -> t.out.up src msg

  let up_ctl t e = t.out.up_ctl e

  let dn_ctl t e =
    (match e with
    | Event.Stop -> (
        match t.held with
        | Some (_, m) ->
            t.held <- None;
            Msg.release m
        | None -> ())
    | _ -> ());
    t.out.dn_ctl e

  let timer _ _ = ()
  let counters _ = []
end

let broken fault : Layer.t =
  (module Broken (struct
    let fault = fault
  end))

(* [l] with [x] put just under the layer named [above]. *)
let insert_under above x l =
  List.concat_map (fun layer -> if Layer.name layer = above then [ layer; x ] else [ layer ]) l

(* {1 A group of three over the simulator} *)

let addrs = [ "a"; "b"; "c" ]

let cb casts =
  {
    Group.view = ignore;
    cast = (fun ~origin:_ s -> casts := s :: !casts);
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

(* Three members form a group; each casts 20 messages; then [c] crashes
   and [a] and [b] cast 5 more each in the next view. Returns the reports
   of the checking layers and the counters of [b]'s layers at the end. *)
let run ?(params = Params.empty) ~seed l =
  Chk.reset ();
  let reports = ref [] in
  Chk.on_violation (fun v -> reports := v :: !reports);
  Fun.protect ~finally:Chk.reset_handler (fun () ->
      let net = Sim.create ~seed () in
      let casts = Array.init 3 (fun _ -> ref []) in
      let gs =
        List.mapi
          (fun i addr ->
            match
              G.join ~params ~seed:(seed + i) ~peers:addrs ~layers:l net ~group:"chk" ~addr
                (cb casts.(i))
            with
            | Ok g -> g
            | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e)
          addrs
      in
      let g = Array.of_list gs in
      Sim.run ~until:(sec 6.) net;
      Array.iter
        (fun x -> Alcotest.(check int) "three members" 3 (Array.length (G.view x).members))
        g;
      for k = 1 to 20 do
        Array.iteri (fun i x -> ignore (G.cast x (Printf.sprintf "%d.%d" i k))) g;
        Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 20)) net
      done;
      Sim.run ~until:(Time.add (Sim.now net) (sec 2.)) net;
      G.crash g.(2);
      Sim.run ~until:(Time.add (Sim.now net) (sec 15.)) net;
      Alcotest.(check int) "c excluded" 2 (Array.length (G.view g.(0)).members);
      for k = 21 to 25 do
        Array.iteri (fun i x -> if i < 2 then ignore (G.cast x (Printf.sprintf "%d.%d" i k))) g;
        Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 20)) net
      done;
      Sim.run ~until:(Time.add (Sim.now net) (sec 2.)) net;
      let counters = G.counters g.(1) in
      G.leave g.(0);
      G.leave g.(1);
      Sim.run ~until:(Time.add (Sim.now net) (sec 5.)) net;
      (List.rev !reports, counters))

let counter counters layer name =
  match List.assoc_opt layer counters with
  | Some l -> (
      match List.assoc_opt name l with
      | Some v -> v
      | None -> Alcotest.failf "no counter %s.%s" layer name)
  | None -> Alcotest.failf "no layer %s in the counters" layer

let by layer reports = List.filter (fun (v : Chk.violation) -> v.layer = layer) reports
let show reports = String.concat "\n" (List.map (Fmt.str "%a" Chk.pp_violation) reports)

(* A report names what happened and carries the events before it. *)
let well_formed (v : Chk.violation) =
  if v.events = [] then Alcotest.failf "a report without its events: %a" Chk.pp_violation v;
  if List.length v.events > 32 then
    Alcotest.failf "more events than chk.history: %d" (List.length v.events)

let control ps () =
  active := false;
  let reports, counters =
    Fun.protect ~finally:(fun () -> active := true) (fun () -> run ~seed:3 (layers ps))
  in
  if reports <> [] then Alcotest.failf "a correct stack, yet:\n%s" (show reports);
  (* The checks ran. *)
  Alcotest.(check bool) "chk_fifo checked casts" true (counter counters "chk_fifo" "checked" >= 10);
  Alcotest.(check bool)
    "chk_sync compared digests" true
    (counter counters "chk_sync" "compared" >= 1);
  if List.mem P.Total ps then
    Alcotest.(check bool)
      "chk_total checked claims" true
      (counter counters "chk_total" "checked" >= 1)

let fifo_swap () =
  let l = insert_under "chk_fifo" (broken Swap_fifo) (layers (P.vsync @ [ P.Debug ])) in
  let reports, _ = run ~seed:4 l in
  Fmt.epr "%s@." (show reports);
  match by "chk_fifo" reports with
  | [] -> Alcotest.failf "chk_fifo said nothing of two casts swapped:\n%s" (show reports)
  | v :: _ as fifo ->
      well_formed v;
      Alcotest.(check bool)
        "at b, the member that swapped" true
        (List.for_all
           (fun (v : Chk.violation) -> String.length v.member > 0 && v.member.[0] = 'b')
           fifo);
      Alcotest.(check bool) "the report says what came out of order" true (String.length v.what > 0)

let total_swap protocol () =
  let params = Params.set "total.protocol" (Params.String protocol) Params.empty in
  let l = insert_under "chk_total" (broken Swap_any) (layers (P.vsync @ [ P.Total; P.Debug ])) in
  let reports, _ = run ~params ~seed:5 l in
  Fmt.epr "%s@." (show reports);
  match by "chk_total" reports with
  | [] ->
      Alcotest.failf "chk_total said nothing of two casts swapped at one member:\n%s" (show reports)
  | v :: _ -> well_formed v

let sync_forget () =
  let l = insert_under "chk_sync" (broken Forget) (layers (P.vsync @ [ P.Debug ])) in
  let reports, _ = run ~seed:6 l in
  Fmt.epr "%s@." (show reports);
  (match by "chk_sync" reports with
  | [] -> Alcotest.failf "chk_sync said nothing of a cast b never delivered:\n%s" (show reports)
  | v :: _ ->
      well_formed v;
      Alcotest.(check bool) "it names the view both came from" true (String.length v.what > 0));
  (* The gap, seen at once by chk_fifo above it. *)
  Alcotest.(check bool) "chk_fifo saw the gap" true (by "chk_fifo" reports <> [])

(* Reports are bounded: a layer that breaks every message yields at most
   chk.reports reports per view, the rest counted. *)
let bounded_reports () =
  let params = Params.set Chk.Param.reports (Params.Int 2) Params.empty in
  let l = insert_under "chk_total" (broken Swap_any) (layers (P.vsync @ [ P.Total; P.Debug ])) in
  let reports, _ = run ~params ~seed:5 l in
  let per = Hashtbl.create 4 in
  List.iter
    (fun (v : Chk.violation) ->
      let k = (v.layer, v.member, v.view) in
      Hashtbl.replace per k (1 + Option.value ~default:0 (Hashtbl.find_opt per k)))
    reports;
  Hashtbl.iter
    (fun _ n ->
      if n > 2 then Alcotest.failf "%d reports from one layer in one view, chk.reports=2" n)
    per

(* {1 Fault layers} *)

(* Drop, delay and duplication on what arrives: the reliable layers repair
   it, the checks hold, and the counters show the faults happened. *)
let faults () =
  let params =
    match
      Params.of_string "drop.rate=0.1,dup.rate=0.1,delay.rate=0.3,delay.max=20ms,fault.seed=7"
    with
    | Ok p -> p
    | Error e -> Alcotest.failf "%a" Params.pp_error e
  in
  active := false;
  let reports, counters =
    Fun.protect
      ~finally:(fun () -> active := true)
      (fun () -> run ~params ~seed:8 (layers (P.vsync @ [ P.Total; P.Debug ])))
  in
  if reports <> [] then
    Alcotest.failf "faults below the reliable layers broke a check:\n%s" (show reports);
  Alcotest.(check bool) "dropped" true (counter counters "drop" "dropped" > 0);
  Alcotest.(check bool) "duplicated" true (counter counters "dup" "duplicated" > 0);
  Alcotest.(check bool) "delayed" true (counter counters "delay" "delayed" > 0)

(* partition.sets cuts the stack's traffic between sets: without Heal, the
   group splits as the sets say and stays split. *)
(* partition.sets cuts the stack's traffic between sets, not the side
   channel: c is excluded, merges back, is excluded again, while casts
   flow; the checks hold throughout. *)
let partition () =
  Alcotest.(check (list (list string)))
    "sets"
    [ [ "a"; "b" ]; [ "c" ] ]
    (Consort_group.Fault.parse_sets "a+b/c");
  Alcotest.(check (list (list string))) "none" [] (Consort_group.Fault.parse_sets " ");
  let params =
    match Params.of_string "partition.sets=a+b/c" with
    | Ok p -> p
    | Error e -> Alcotest.failf "%a" Params.pp_error e
  in
  let l = layers (P.vsync @ [ P.Total; P.Debug ]) in
  Chk.reset ();
  let reports = ref [] in
  Chk.on_violation (fun v -> reports := v :: !reports);
  Fun.protect ~finally:Chk.reset_handler (fun () ->
      let net = Sim.create ~seed:10 () in
      let delivered = Array.init 3 (fun _ -> ref []) in
      let g =
        Array.of_list
          (List.mapi
             (fun i addr ->
               match
                 G.join ~params ~seed:i ~peers:addrs ~layers:l net ~group:"p" ~addr
                   (cb delivered.(i))
               with
               | Ok g -> g
               | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e)
             addrs)
      in
      let views_c = ref [] in
      for k = 1 to 400 do
        Array.iteri (fun i x -> ignore (G.cast x (Printf.sprintf "%d.%d" i k))) g;
        Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 100)) net;
        let v = G.view g.(2) in
        if not (List.mem v.vid !views_c) then views_c := v.vid :: !views_c
      done;
      let cut =
        counter (G.counters g.(0)) "partition" "cut" + counter (G.counters g.(2)) "partition" "cut"
      in
      if !reports <> [] then Alcotest.failf "under a partition:\n%s" (show !reports);
      Alcotest.(check bool) "datagrams were cut" true (cut > 0 || List.length !views_c > 4);
      Alcotest.(check bool)
        "c excluded and merged back, again and again" true
        (List.length !views_c >= 4);
      (* a and b hear each other all along. *)
      let from_b = List.length (List.filter (fun s -> s.[0] = '1') !(delivered.(0))) in
      Alcotest.(check bool) "a delivered b's casts" true (from_b >= 300))

(* The delay layer on its own, over a perfect network (1 ms): every
   datagram held between delay.min and delay.max, longer than a second
   included, and never more than delay.queue at once (the rest dropped and
   counted). *)
let delay_bounds () =
  let params =
    match Params.of_string "delay.rate=1,delay.min=2s,delay.max=5s,delay.queue=8,fault.seed=3" with
    | Ok p -> p
    | Error e -> Alcotest.failf "%a" Params.pp_error e
  in
  let pool = Pool.create () in
  let times = ref [] in
  let h = ref None in
  let deliver _ _ msg =
    Msg.release msg;
    match !h with Some h -> times := Harness.now h :: !times | None -> ()
  in
  let g =
    Harness.create ~params ~net:Harness.perfect ~seed:1 ~pool ~n:2
      ~layers:[ Consort_group.Fault.delay; Consort_group.Bottom.layer ]
      ~deliver ()
  in
  h := Some g;
  for _ = 1 to 20 do
    Stack.cast (Harness.stack g 0) (Msg.of_string pool "x")
  done;
  ignore (Harness.run ~until:(sec 60.) g);
  let n = List.length !times in
  Alcotest.(check int) "delay.queue held, the rest dropped" 8 n;
  Alcotest.(check int) "overflow counted" 12 (Harness.counter g 1 "delay" "overflow");
  List.iter
    (fun t ->
      if t < sec 2. || t > Time.add (sec 5.) (Time.of_ms 2) then
        Alcotest.failf "delivered at %a, outside [2 s, 5 s]" Time.pp t)
    !times;
  Alcotest.(check bool)
    "delays over a second drawn too" true
    (List.exists (fun t -> t > sec 3.2) !times);
  Harness.stop g

(* {1 Over real sockets} *)

module Udp = Consort_engine.Udp
module Loop = Consort_engine.Loop
module GU = Group.Make (Udp)

(* Ports the kernel says are free now. *)
let free_ports n =
  let socks =
    List.init n (fun _ ->
        let s = Unix.socket PF_INET SOCK_DGRAM 0 in
        Unix.bind s (ADDR_INET (Unix.inet_addr_loopback, 0));
        s)
  in
  let ports =
    List.map
      (fun s -> match Unix.getsockname s with ADDR_INET (_, p) -> p | _ -> assert false)
      socks
  in
  List.iter Unix.close socks;
  ports

(* Three members over UDP on 127.0.0.1, b's stack with the broken layer
   that swaps two casts of one origin under chk_fifo: chk_fifo at b
   reports it. The waits are bounded; nothing depends on how long a step
   takes. *)
let udp_swap () =
  let addrs = List.map (Printf.sprintf "127.0.0.1:%d") (free_ports 3) in
  let l = insert_under "chk_fifo" (broken Swap_fifo) (layers (P.vsync @ [ P.Debug ])) in
  let reports = ref [] in
  Chk.reset ();
  Chk.on_violation (fun v -> reports := v :: !reports);
  Fun.protect ~finally:Chk.reset_handler (fun () ->
      let loop = Loop.create () in
      let delivered = Array.init 3 (fun _ -> ref []) in
      let g =
        Array.of_list
          (List.mapi
             (fun i addr ->
               match
                 GU.join ~peers:addrs ~layers:l loop ~group:"chk-udp" ~addr (cb delivered.(i))
               with
               | Ok g -> g
               | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e)
             addrs)
      in
      let all_three () =
        Array.for_all
          (fun x -> Array.length (GU.view x).members = 3 && (GU.view x).vid = (GU.view g.(0)).vid)
          g
      in
      Loop.run ~timeout:(sec 30.) ~until:all_three loop;
      if not (all_three ()) then Alcotest.fail "no view of three within 30 s";
      let members = (GU.view g.(0)).members in
      for k = 1 to 20 do
        Array.iteri (fun i x -> ignore (GU.cast x (Printf.sprintf "%d.%d" i k))) g
      done;
      let heard () = Array.for_all (fun d -> List.length !d >= 60) delivered in
      Loop.run ~timeout:(sec 30.) ~until:heard loop;
      Array.iter GU.leave g;
      Loop.run ~timeout:(sec 5.) loop;
      let fifo = by "chk_fifo" !reports in
      if fifo = [] then
        Alcotest.failf "chk_fifo said nothing over UDP (b delivered %d casts):\n%s"
          (List.length !(delivered.(1)))
          (show !reports);
      List.iter well_formed fifo;
      (* The broken layer acts at rank 1. *)
      Alcotest.(check bool)
        "reported at the member of rank 1" true
        (List.for_all (fun (v : Chk.violation) -> v.member = members.(1)) fifo))

let () =
  Alcotest.run "chk"
    [
      ( "checks",
        [
          Alcotest.test_case "a correct stack: no report, the checks ran" `Quick
            (control (P.vsync @ [ P.Debug ]));
          Alcotest.test_case "a correct stack with Total: no report" `Quick
            (control (P.vsync @ [ P.Total; P.Debug ]));
          Alcotest.test_case "chk_fifo: two casts of one origin swapped" `Quick fifo_swap;
          Alcotest.test_case "chk_total: two casts swapped at one member (sequencer)" `Quick
            (total_swap "sequencer");
          Alcotest.test_case "chk_total: two casts swapped at one member (token)" `Quick
            (total_swap "token");
          Alcotest.test_case "chk_sync: a cast one member never delivered" `Quick sync_forget;
          Alcotest.test_case "reports bounded by chk.reports" `Quick bounded_reports;
        ] );
      ("udp", [ Alcotest.test_case "chk_fifo over UDP on 127.0.0.1" `Quick udp_swap ]);
      ( "delay",
        [ Alcotest.test_case "delays within their bounds, queue bounded" `Quick delay_bounds ] );
      ( "faults",
        [
          Alcotest.test_case "drop, dup, delay under the reliable layers" `Quick faults;
          Alcotest.test_case "partition" `Quick partition;
        ] );
    ]
