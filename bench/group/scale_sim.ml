(* How the default stack's cost grows with the group, in the simulator:
   N members start at once and merge into one view; then 5 s idle, 5 s
   with every member casting once a second, and a crash. Per member and
   virtual second: datagrams sent, Suspect's heartbeats, Mnak's status
   casts (stability); the virtual time to form the group and to install
   the view without the crashed member; and the CPU time of each phase.
   The baseline is the smallest size of the run: the ratios say how each
   figure grows against the group size. *)

open Consort
module V = Consort_sim_group.Vsync_sim
module Sim = Consort_engine.Sim
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))

type row = {
  stack : string;
  size : int;
  formed : float option;
      (** virtual seconds from the first start to one view of all; [None] if not within the bound *)
  form_cpu : float;
  idle_datagrams : float;  (** per member and virtual second *)
  heartbeats : float;  (** per member and virtual second *)
  load_datagrams : float;
  status : float;  (** Mnak status casts per member and virtual second, under load *)
  credits : float;  (** Mflow credit casts per member and virtual second, under load *)
  acks : float;  (** Pt2pt acknowledgements per member and virtual second, under load *)
  view_change : float option;  (** crash to the last survivor's view without it, virtual seconds *)
  steady_cpu : float;  (** CPU seconds for the 10 virtual seconds of idle and load *)
  change_cpu : float;
  slanders : int;
  slander_deliveries : int;
}

let cpu () = Sys.time ()

(* The sum over members of counter [key] of the first of [layers] that the
   stack has (Suspect or Ringfd, Mnak or mnak_tree). *)
let counter w key layers =
  let sum = ref 0 in
  for i = 0 to V.nprocs w - 1 do
    match V.member w i with
    | Some (_, st) -> (
        let cs = Stack.counters st in
        match List.find_map (fun l -> List.assoc_opt l cs) layers with
        | Some cs -> sum := !sum + Option.value ~default:0 (List.assoc_opt key cs)
        | None -> ())
    | None -> ()
  done;
  !sum

let heartbeats w = counter w "heartbeats_sent" [ "suspect"; "ringfd" ]

(* Stability messages: Mnak's status casts, or mnak_tree's reports and
   the root's casts. *)
let stability w =
  counter w "status_sent" [ "mnak" ]
  + counter w "reports_sent" [ "mnak_tree" ]
  + counter w "stability_sent" [ "mnak_tree" ]

(* Members that cast under load: all of them up to 64, then 64, so that the
   application's own traffic stays the same beyond 64 members. *)
let max_senders = 64

(* Every live member in one view of [n]. *)
let formed w n =
  let views =
    List.filter_map
      (fun i -> Option.map (fun g -> (G.view g).Consort_group.Group.vid) (V.group w i))
      (List.init (V.nprocs w) Fun.id)
  in
  List.length views = n
  && (match views with v :: rest -> List.for_all (String.equal v) rest | [] -> false)
  && match V.group w 0 with Some g -> Array.length (G.view g).members = n | None -> false

(* Runs the simulator in steps of [step] until [ok] or [bound]; the
   virtual time it took. *)
let run_until ?(each = ignore) w ~step ~bound ok =
  let net = V.net w in
  let t0 = Sim.now net in
  let rec go () =
    each ();
    if ok () then Some (Time.to_sec (Sim.now net - t0))
    else if Sim.now net - t0 >= bound then None
    else begin
      Sim.run ~until:(Sim.now net + step) net;
      go ()
    end
  in
  go ()

(* Slander's casts and deliveries over a view change: each member's stack
   is replaced by the new view's, so each stack's last counts are added up
   when it goes ([sample] at each step, [total] at the end). *)
let slander_counts w =
  let n = V.nprocs w in
  let last = Array.make n None in
  let sent = ref 0 and got = ref 0 in
  let count st key =
    match List.assoc_opt "slander" (Stack.counters st) with
    | Some cs -> Option.value ~default:0 (List.assoc_opt key cs)
    | None -> 0
  in
  let close i =
    match last.(i) with
    | Some (_, s, r) ->
        sent := !sent + s;
        got := !got + r;
        last.(i) <- None
    | None -> ()
  in
  let sample () =
    for i = 0 to n - 1 do
      let cur = V.member w i in
      (match (last.(i), cur) with
      | Some (st, _, _), Some (_, st') when st == st' ->
          last.(i) <- Some (st, count st "slanders_sent", count st "slanders_received")
      | Some _, _ -> close i
      | None, _ -> ());
      match (last.(i), cur) with
      | None, Some (_, st) ->
          last.(i) <- Some (st, count st "slanders_sent", count st "slanders_received")
      | _ -> ()
    done
  in
  let total () =
    for i = 0 to n - 1 do
      close i
    done;
    (!sent, !got)
  in
  (sample, total)

let one ~seed ~params ~stack n =
  let w = V.make ~params ~seed ~n ~link:Sim.default_link () in
  let net = V.net w in
  for i = 0 to n - 1 do
    V.at w (Rng.int (V.rng w) 300_000_000) (fun () -> V.start w i)
  done;
  let c0 = cpu () in
  let formed_at =
    run_until w ~step:(Time.of_ms 100) ~bound:(Time.of_sec 120.) (fun () -> formed w n)
  in
  let form_cpu = cpu () -. c0 in
  let window = 5. in
  let sent () = (Sim.stats net).Sim.sent in
  (* Idle. *)
  let c1 = cpu () in
  let s0 = sent () and h0 = heartbeats w in
  Sim.run ~until:(Sim.now net + Time.of_sec window) net;
  let s1 = sent () and h1 = heartbeats w in
  (* Every member casts once a second (at most [max_senders] of them). *)
  let t = Sim.now net in
  for i = 0 to min n max_senders - 1 do
    for k = 0 to int_of_float window - 1 do
      V.at w
        (t + Time.of_sec (float_of_int k) + Rng.int (V.rng w) 1_000_000_000)
        (fun () -> V.cast ~size:100 w i)
    done
  done;
  let st0 = stability w
  and cr0 = counter w "credits_sent" [ "mflow" ]
  and a0 = counter w "acks_sent" [ "pt2pt" ] in
  Sim.run ~until:(t + Time.of_sec window) net;
  let s2 = sent () and st1 = stability w in
  let cr1 = counter w "credits_sent" [ "mflow" ] and a1 = counter w "acks_sent" [ "pt2pt" ] in
  let steady_cpu = cpu () -. c1 in
  (* A crash of a member that is not the coordinator. *)
  let victim = n - 1 in
  let c2 = cpu () in
  let gone () =
    List.for_all
      (fun i ->
        i = victim
        || match V.group w i with Some g -> Array.length (G.view g).members = n - 1 | None -> true)
      (List.init n Fun.id)
  in
  let sample, total = slander_counts w in
  sample ();
  let t_crash = Sim.now net in
  V.crash w victim;
  (* No suspicion before the timeout (5 s): then steps of 1 ms, to count
     every stack's slanders before the view change replaces it. *)
  let early = run_until w ~step:(Time.of_ms 20) ~bound:(Time.of_sec 4.) gone in
  let view_change =
    match early with
    | Some _ as v -> v
    | None ->
        Option.map
          (fun _ -> Time.to_sec (Sim.now net - t_crash))
          (run_until ~each:sample w ~step:(Time.of_ms 1) ~bound:(Time.of_sec 56.) gone)
  in
  let slanders, slander_deliveries = total () in
  let change_cpu = cpu () -. c2 in
  let per x = float_of_int x /. float_of_int n /. window in
  {
    stack;
    size = n;
    formed = formed_at;
    form_cpu;
    idle_datagrams = per (s1 - s0);
    heartbeats = per (h1 - h0);
    load_datagrams = per (s2 - s1);
    status = per (st1 - st0);
    credits = per (cr1 - cr0);
    acks = per (a1 - a0);
    view_change;
    steady_cpu;
    change_cpu;
    slanders;
    slander_deliveries;
  }

(* Credit and stability status batched over 100 ms instead of 2 and 20 ms. *)
let batched =
  [
    ("mflow.credit_delay", Params.Time (Time.of_ms 100));
    ("mnak.status_interval", Params.Time (Time.of_ms 100));
  ]

let run ?(sizes = [ 16; 32; 64 ]) ?(scale_sizes = [ 64; 256; 1024 ]) ?(params = Params.empty) () =
  let tuned =
    Params.override
      (List.fold_left (fun ps (k, v) -> Params.set k v ps) Params.empty batched)
      ~by:params
  in
  let scale =
    Params.override (Params.set "sim.props" (Params.String "vsync+Scale") Params.empty) ~by:params
  in
  List.concat_map
    (fun n ->
      [ one ~seed:1 ~params ~stack:"vsync" n; one ~seed:1 ~params:tuned ~stack:"batched" n ])
    sizes
  @ List.map (fun n -> one ~seed:1 ~params:scale ~stack:"scale" n) scale_sizes

let opt = function Some x -> Printf.sprintf "%.2f" x | None -> "-"

let pp_table ppf rows =
  Fmt.pf ppf "%-8s %7s %9s %7s | %8s %8s | %8s %8s %8s %8s | %7s %9s %7s %11s | %7s %7s@." "stack"
    "members" "formed s" "cpu s" "dgram/s" "beats/s" "dgram/s" "status/s" "credit/s" "acks/s"
    "cpu s" "change s" "cpu s" "slanders" "idle x" "load x";
  Fmt.pf ppf "%-8s %7s %9s %7s | %17s | %35s | %7s %9s %7s %11s | %15s@." "" "" "(virtual)" ""
    "idle, per member" "load, per member" "10 s" "(virtual)" "" "(delivered)" "per member";
  match rows with
  | [] -> ()
  | first :: _ ->
      List.iter
        (fun r ->
          let base = List.find (fun b -> b.stack = r.stack) rows in
          let x a b = if b > 0. then a /. b else 0. in
          Fmt.pf ppf
            "%-8s %7d %9s %7.1f | %8.1f %8.1f | %8.1f %8.1f %8.1f %8.1f | %7.1f %9s %7.1f %11s | \
             %7.2f %7.2f@."
            r.stack r.size (opt r.formed) r.form_cpu r.idle_datagrams r.heartbeats r.load_datagrams
            r.status r.credits r.acks r.steady_cpu (opt r.view_change) r.change_cpu
            (Printf.sprintf "%d (%d)" r.slanders r.slander_deliveries)
            (x r.idle_datagrams base.idle_datagrams)
            (x r.load_datagrams base.load_datagrams))
        rows;
      Fmt.pf ppf
        "idle x, load x: datagrams per member beside the smallest group of the same stack (%d \
         members); linear growth per member is x%s@."
        first.size
        (String.concat ", x"
           (List.sort_uniq compare
              (List.map
                 (fun r -> Printf.sprintf "%.0f" (float_of_int r.size /. float_of_int first.size))
                 rows)));
      Fmt.pf ppf
        "batched: mflow.credit_delay=100ms, mnak.status_interval=100ms (the vsync stack credits \
         and reports stability@.";
      Fmt.pf ppf
        "after 2 and 20 ms: at low rates one credit cast per delivery, to every member, so its \
         cost per member grows@.";
      Fmt.pf ppf
        "with the square of the group; the status rate of busy members rises to its cap as the \
         group grows)@."

let to_json rows =
  let f = function Some x -> Printf.sprintf "%.3f" x | None -> "null" in
  Printf.sprintf "{\"bench\":\"scale-sim\",\"rows\":[%s]}"
    (String.concat ","
       (List.map
          (fun r ->
            Printf.sprintf
              "{\"stack\":%S,\"members\":%d,\"formed_s\":%s,\"form_cpu_s\":%.2f,\"idle_datagrams_per_member_s\":%.1f,\"heartbeats_per_member_s\":%.1f,\"load_datagrams_per_member_s\":%.1f,\"status_per_member_s\":%.1f,\"credits_per_member_s\":%.1f,\"acks_per_member_s\":%.1f,\"steady_cpu_s\":%.2f,\"view_change_s\":%s,\"change_cpu_s\":%.2f,\"slanders\":%d,\"slander_deliveries\":%d}"
              r.stack r.size (f r.formed) r.form_cpu r.idle_datagrams r.heartbeats r.load_datagrams
              r.status r.credits r.acks r.steady_cpu (f r.view_change) r.change_cpu r.slanders
              r.slander_deliveries)
          rows))
