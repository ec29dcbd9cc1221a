(* The one table of `make bench-peers`, and the same as JSON.

   Input, a directory written by bench/peers/bench-peers.sh:
   - meta.tsv: "key<TAB>value" lines: the machine, the versions, the load;
   - results.txt: "result k=v ..." lines from udp_raw, cpg_bench and JgBench,
     with the tags the script adds (setup=, run=, placement=, ...);
   - consort-rtt.json, consort-tput.json, consort-layering.json: the JSON
     lines of `consort bench rtt|throughput|layering --json`;
   - stack-cost.json: `bench_peers stack-cost`;
   - skipped.tsv: "what<TAB>why" for each part that could not run.
   Nothing here is measured: every figure comes from those files, and a
   figure that is missing is printed as missing, with the reason. *)

type kv = (string * string) list

let read_lines file =
  if not (Sys.file_exists file) then []
  else
    let ic = open_in file in
    let rec go acc =
      match input_line ic with
      | l -> go (l :: acc)
      | exception End_of_file ->
          close_in ic;
          List.rev acc
    in
    go []

let parse_result line : kv option =
  match String.split_on_char ' ' (String.trim line) with
  | "result" :: rest ->
      Some
        (List.filter_map
           (fun w ->
             match String.index_opt w '=' with
             | Some i -> Some (String.sub w 0 i, String.sub w (i + 1) (String.length w - i - 1))
             | None -> None)
           rest)
  | _ -> None

let get k (r : kv) = List.assoc_opt k r
let getf k r = Option.bind (get k r) float_of_string_opt
let is k v r = get k r = Some v

let machine_keys =
  [ "date"; "cpu_model"; "cores"; "kernel"; "host_memory"; "load_start"; "load_end" ]

let is_machine k = List.mem k machine_keys || (String.length k > 5 && String.sub k 0 5 = "load_")
let run_keys = [ "quick"; "reps" ]

let read_meta dir =
  List.filter_map
    (fun l ->
      match String.index_opt l '\t' with
      | Some i -> Some (String.sub l 0 i, String.sub l (i + 1) (String.length l - i - 1))
      | None -> None)
    (read_lines (Filename.concat dir "meta.tsv"))

let read_json dir name =
  let f = Filename.concat dir name in
  if not (Sys.file_exists f) then None
  else
    (* The last line that parses as JSON: the benches print a table first. *)
    List.fold_left
      (fun acc l ->
        let l = String.trim l in
        if l <> "" && (l.[0] = '{' || l.[0] = '[') then
          match Yojson.Safe.from_string l with j -> Some j | exception _ -> acc
        else acc)
      None (read_lines f)

let member k = function `Assoc l -> List.assoc_opt k l | _ -> None
let to_float = function Some (`Float f) -> Some f | Some (`Int i) -> Some (float i) | _ -> None
let to_str = function Some (`String s) -> s | _ -> ""
let to_list = function Some (`List l) -> l | _ -> []

let median l =
  match List.sort compare l with
  | [] -> nan
  | s ->
      let n = List.length s in
      if n mod 2 = 1 then List.nth s (n / 2)
      else (List.nth s ((n / 2) - 1) +. List.nth s (n / 2)) /. 2.

(* {1 Rows} *)

type rtt = {
  r_system : string;
  r_setup : string;
  r_placement : string;
  r_n : int;
  r_median : float;
  r_p99 : float;
  r_min : float;
}

type tput = {
  t_system : string;
  t_setup : string;
  t_order : string;  (** "fifo", "total" or "none" (raw UDP) *)
  t_senders : int;
  t_rate : float;  (** messages/s at the slowest receiver, median run *)
  t_runs : float list;
  t_ok : bool;
  t_check : string;  (** what was checked, or what went wrong *)
  t_count : int;
  t_bytes : int;  (** payload bytes per message (1024; raw UDP's byte limit: 60000) *)
}

(* Tags carry no spaces: the script writes them as underscores. *)
let setup_of s = String.map (function '_' -> ' ' | c -> c) s

let placement_of s =
  match s with
  | "same CPU" | "same-cpu" -> "same-cpu"
  | "different CPUs" | "different-cpus" -> "different-cpus"
  | s -> s

let rtt_rows results consort =
  let ours =
    List.filter_map
      (fun r ->
        if not (is "bench" "rtt" r) then None
        else if is "role" "pong" r then None
        else
          match (getf "median_us" r, getf "p99_us" r, getf "min_us" r) with
          | Some m, Some p, Some mn ->
              let system =
                match get "system" r with
                | Some "raw-udp" -> "raw UDP (C)"
                | Some "corosync-cpg" -> "Corosync CPG"
                | Some "jgroups" -> "JGroups " ^ Option.value ~default:"?" (get "config" r)
                | Some s -> s
                | None -> "?"
              in
              Some
                {
                  r_system = system;
                  r_setup = setup_of (Option.value ~default:"loopback" (get "setup" r));
                  r_placement = placement_of (Option.value ~default:"unpinned" (get "placement" r));
                  r_n = Option.value ~default:0 (Option.bind (get "n" r) int_of_string_opt);
                  r_median = m;
                  r_p99 = p;
                  r_min = mn;
                }
          | _ -> None)
      results
  in
  let consort_rows =
    match consort with
    | None -> []
    | Some j ->
        List.filter_map
          (fun row ->
            let kind = to_str (member "kind" row) in
            let system =
              match kind with
              | "group cast" -> Some "Consort vsync"
              | "Total seq" -> Some "Consort Total seq"
              | "Total token" -> Some "Consort Total token"
              | _ -> None
            in
            match
              ( system,
                to_float (member "median_us" row),
                to_float (member "p99_us" row),
                to_float (member "min_us" row) )
            with
            | Some system, Some m, Some p, Some mn ->
                Some
                  {
                    r_system = system;
                    r_setup = "loopback";
                    r_placement = placement_of (to_str (member "placement" row));
                    r_n = (match member "n" row with Some (`Int n) -> n | _ -> 0);
                    r_median = m;
                    r_p99 = p;
                    r_min = mn;
                  }
            | _ -> None)
          (to_list (member "rows" j))
  in
  ours @ consort_rows

(* Member lines of one run of a peer, grouped by the run tag. *)
(* A run of a peer is good (every member has every message, each sender's
   in order, and with total order one order at every member), wrong (a
   member saw a duplicate, a gap or disorder, or the members' orders
   differ: the row fails), or unfinished (a member gave no result or was
   still short at the deadline: the run is left out and counted). *)
type run_class = Good of float | Wrong of string | Unfinished

let classify ms =
  let first = List.hd ms in
  let members = Option.value ~default:0 (Option.bind (get "members" first) int_of_string_opt) in
  let order = Option.value ~default:"total" (get "order" first) in
  let answered = List.filter (fun m -> not (is "no_result" "1" m)) ms in
  if List.exists (fun m -> not (is "errors" "0" m)) answered then
    Wrong "WRONG DELIVERIES (a duplicate, a gap or disorder)"
  else if
    List.length answered <> members
    || List.exists (fun m -> get "delivered" m <> get "expected" m) answered
  then Unfinished
  else if
    order = "total"
    && List.length (List.sort_uniq compare (List.filter_map (get "order_hash") answered)) <> 1
  then Wrong "MEMBERS DELIVERED IN DIFFERENT ORDERS"
  else
    let rates = List.filter_map (getf "msgs_per_s") answered in
    if List.length rates <> members then Unfinished
    else Good (List.fold_left Float.min infinity rates)

let peer_tput results ~system ~label =
  let lines = List.filter (fun r -> is "bench" "tput" r && is "system" system r) results in
  let runs = List.sort_uniq compare (List.filter_map (get "run") lines) in
  let per_run =
    List.map
      (fun run ->
        let ms = List.filter (is "run" run) lines in
        (List.hd ms, classify ms))
      runs
  in
  (* One row per (setup, config and variant, order, senders). *)
  let key (first, _) =
    ( Option.value ~default:"" (get "setup" first),
      (Option.value ~default:"" (get "config" first)
      ^ match get "variant" first with Some v -> " " ^ v | None -> ""),
      Option.value ~default:"total" (get "order" first),
      Option.value ~default:"1" (get "senders" first) )
  in
  let keys = List.sort_uniq compare (List.map key per_run) in
  List.map
    (fun ((setup, config, order, senders) as k) ->
      let rs = List.filter (fun r -> key r = k) per_run in
      let rates = List.filter_map (function _, Good r -> Some r | _ -> None) rs in
      let wrong = List.filter_map (function _, Wrong w -> Some w | _ -> None) rs in
      let unfinished =
        List.length (List.filter (function _, Unfinished -> true | _ -> false) rs)
      in
      let first = fst (List.hd rs) in
      let ok = wrong = [] && rates <> [] in
      let base =
        if order = "total" then
          "all delivered, per-sender order kept, one delivery order at every member"
        else "all delivered, per-sender order kept"
      in
      let check =
        match wrong with
        | w :: _ -> w
        | [] when rates = [] ->
            Printf.sprintf
              "NO RUN FINISHED (%d of %d: a member gave no result or was short at the deadline)"
              unfinished (List.length rs)
        | [] when unfinished > 0 ->
            Printf.sprintf
              "%s; %d of %d runs did not finish (a member gave no result or was short at the \
               deadline) and are left out"
              base unfinished (List.length rs)
        | [] -> base
      in
      {
        t_system = label config order;
        t_setup = setup_of setup;
        t_order = order;
        t_senders = int_of_string senders;
        t_rate = median rates;
        t_runs = rates;
        t_ok = ok;
        t_check = check;
        t_count = Option.value ~default:0 (Option.bind (get "count" first) int_of_string_opt);
        t_bytes = Option.value ~default:1024 (Option.bind (get "bytes" first) int_of_string_opt);
      })
    keys

(* Under Total (sequencer), whether a sender was the sequencer changes
   what its casts wait for: the runs say how often. With senders chosen
   by rank ([consort bench throughput --sender-not-sequencer]), the
   sequencer casts only when every member does. *)
let sequencer_note kind row runs =
  let n = List.length runs in
  match
    (kind, member "senders" row, member "sender_first_runs" row, member "sender_not_sequencer" row)
  with
  | "Total seq", Some (`Int s), Some (`Int k), Some (`Bool true) ->
      Printf.sprintf
        "; senders chosen by rank, not the sequencer (rank 0) unless all %s: the sequencer cast in \
         %d of %d runs"
        (if s = 1 then "(1 sender)" else Printf.sprintf "(%d senders)" s)
        k n
  | "Total seq", Some (`Int 1), Some (`Int k), _ ->
      Printf.sprintf "; the sender was the sequencer in %d of %d runs" k n
  | _ -> ""

let tput_rows results consort =
  let raw =
    List.filter_map
      (fun r ->
        if is "bench" "tput" r && is "system" "raw-udp" r && not (is "mode" "flow" r) then
          Option.map (fun rate -> (rate, r)) (getf "msgs_per_s" r)
        else None)
      results
  in
  let raw_rows =
    match raw with
    | [] -> []
    | (_, first) :: _ as l ->
        let rates = List.map fst l in
        [
          {
            t_system = "raw UDP (C)";
            t_setup = "loopback, 1 sender -> 2 receivers";
            t_order = "none";
            t_senders = 1;
            t_rate = median rates;
            t_runs = rates;
            t_ok = true;
            t_check =
              Printf.sprintf "a sendto per datagram, no flow control: %s%% lost (median run)"
                (Option.value ~default:"?"
                   (get "lost_pct" (snd (List.nth (List.sort compare l) (List.length l / 2)))));
            t_count = Option.value ~default:0 (Option.bind (get "count" first) int_of_string_opt);
            t_bytes = Option.value ~default:1024 (Option.bind (get "bytes" first) int_of_string_opt);
          };
        ]
  in
  (* Raw UDP with sendmmsg/recvmmsg and a credit window: one row per
     datagram size and number of senders. A run that lost, reordered or
     did not finish fails its row. *)
  let flow =
    List.filter
      (fun r -> is "bench" "tput" r && is "system" "raw-udp" r && is "mode" "flow" r)
      results
  in
  let flow_keys =
    List.sort_uniq compare
      (List.filter_map
         (fun r ->
           match
             ( Option.bind (get "bytes" r) int_of_string_opt,
               Option.bind (get "senders" r) int_of_string_opt )
           with
           | Some b, Some s -> Some (b, s)
           | _ -> None)
         flow)
  in
  let flow_rows =
    List.map
      (fun (bytes, senders) ->
        let rs =
          List.filter
            (fun r ->
              get "bytes" r = Some (string_of_int bytes)
              && get "senders" r = Some (string_of_int senders))
            flow
        in
        let n k r = Option.value ~default:(-1) (Option.bind (get k r) int_of_string_opt) in
        let bad =
          List.filter (fun r -> n "lost" r <> 0 || n "disorder" r <> 0 || n "late" r <> 0) rs
        in
        let rates =
          List.filter_map (getf "msgs_per_s") (List.filter (fun r -> not (List.memq r bad)) rs)
        in
        let first = List.hd rs in
        {
          t_system =
            (if bytes >= 60000 then "raw UDP (C), byte limit" else "raw UDP (C), datagram limit");
          t_setup =
            Printf.sprintf "loopback, %d processes, %s datagrams, sendmmsg/recvmmsg, credit window"
              (max 1 (n "members" first))
              (if bytes >= 1000 && bytes mod 1000 = 0 then Printf.sprintf "%d KB" (bytes / 1000)
               else if bytes = 1024 then "1 KB"
               else Printf.sprintf "%d-byte" bytes);
          t_order = "none";
          t_senders = senders;
          t_rate = median rates;
          t_runs = rates;
          t_ok = bad = [] && rates <> [];
          t_check =
            (match bad with
            | r :: _ ->
                Printf.sprintf "LOST %d, DISORDER %d, LATE %d (a credit window must lose nothing)"
                  (n "lost" r) (n "disorder" r) (n "late" r)
            | [] ->
                Printf.sprintf
                  "lossless: every datagram counted at every receiver, none lost or out of order \
                   (window %s datagrams per sender and receiver)"
                  (Option.value ~default:"?" (get "window" first)));
          t_count = n "count" first;
          t_bytes = bytes;
        })
      flow_keys
  in
  let consort_rows =
    let rows = List.concat_map (fun j -> to_list (member "rows" j)) consort in
    (* The same configuration from several rounds: one row, every run. *)
    let key row = (to_str (member "kind" row), member "senders" row) in
    let rank (kind, senders) =
      ( (match kind with
        | "vsync FIFO" | "group cast" -> 0
        | "Total seq" -> 1
        | "Total token" -> 2
        | _ -> 3),
        kind,
        senders )
    in
    let keys = List.sort_uniq (fun a b -> compare (rank a) (rank b)) (List.map key rows) in
    let merged =
      List.map
        (fun k ->
          let rs = List.filter (fun r -> key r = k) rows in
          let runs =
            List.concat_map (fun r -> to_list (member "runs_slowest_messages_per_s" r)) rs
          in
          let ok = List.for_all (fun r -> member "ok" r = Some (`Bool true)) rs in
          (* Runs in which rank 0 of the view, Total's sequencer, cast (its
             casts then wait for no order): the member says whether it cast
             ("role"); in files without it, the first [senders] cast. *)
          let sender_first =
            List.length
              (List.filter
                 (fun r ->
                   let senders = match member "senders" r with Some (`Int n) -> n | _ -> 1 in
                   List.exists
                     (fun m ->
                       member "rank" m = Some (`Int 0)
                       &&
                       match (member "role" m, member "index" m) with
                       | Some (`String role), _ -> role = "sender+receiver"
                       | None, Some (`Int i) -> i < senders
                       | _ -> false)
                     (to_list (member "members" r)))
                 rs)
          in
          (* Senders chosen by rank in every run of the row. *)
          let not_sequencer =
            List.for_all (fun r -> member "sender_not_sequencer" r = Some (`Bool true)) rs
          in
          match List.hd rs with
          | `Assoc l ->
              `Assoc
                (("runs_slowest_messages_per_s", `List runs)
                :: ("ok", `Bool ok)
                :: ("sender_first_runs", `Int sender_first)
                :: ("sender_not_sequencer", `Bool not_sequencer)
                :: List.filter
                     (fun (n, _) ->
                       n <> "runs_slowest_messages_per_s"
                       && n <> "ok" && n <> "sender_not_sequencer")
                     l)
          | j -> j)
        keys
    in
    match merged with
    | [] -> []
    | _ ->
        List.filter_map
          (fun row ->
            let kind = to_str (member "kind" row) in
            let system, order =
              match kind with
              | "vsync FIFO" | "group cast" -> ("Consort vsync", "fifo")
              | "Total seq" -> ("Consort Total seq", "total")
              | "Total token" -> ("Consort Total token", "total")
              | _ -> ("", "")
            in
            if system = "" then None
            else
              let runs =
                List.filter_map
                  (fun x -> to_float (Some x))
                  (to_list (member "runs_slowest_messages_per_s" row))
              in
              let ok = member "ok" row = Some (`Bool true) in
              Some
                {
                  t_system = system;
                  t_setup = "loopback";
                  t_order = order;
                  t_senders = (match member "senders" row with Some (`Int n) -> n | _ -> 0);
                  t_rate = median runs;
                  t_runs = runs;
                  t_ok = ok;
                  t_check =
                    (if ok && order = "total" then
                       "checked by consort bench: every cast once, in order, intact, one order"
                     else if ok then "checked by consort bench: every cast once, in order, intact"
                     else "DELIVERIES INCOMPLETE OR WRONG")
                    ^ sequencer_note kind row runs;
                  t_count = (match member "count" row with Some (`Int n) -> n | _ -> 0);
                  t_bytes = (match member "bytes" row with Some (`Int n) -> n | _ -> 1024);
                })
          merged
  in
  let cpg = peer_tput results ~system:"corosync-cpg" ~label:(fun _ _ -> "Corosync CPG") in
  (* CPG has one ordering, agreed: total order. There is no FIFO mode. *)
  let cpg =
    List.map
      (fun r -> { r with t_check = "CPG_TYPE_AGREED (CPG's only order, total): " ^ r.t_check })
      cpg
  in
  (* "udp.xml best": at its best (fixed heap, G1, long warm-up, timed rounds
     in one JVM, lock-free counting), a row of its own beside today's. *)
  let jg =
    peer_tput results ~system:"jgroups" ~label:(fun c order ->
        let seq = if order = "total" then "+SEQUENCER" else "" in
        match String.split_on_char ' ' c with
        | [ cfg; "best" ] -> "JGroups " ^ cfg ^ seq ^ ", at its best"
        | _ -> "JGroups " ^ c ^ seq)
  in
  let jg =
    List.map
      (fun r ->
        let suffix = ", at its best" in
        let n = String.length r.t_system and k = String.length suffix in
        if n > k && String.sub r.t_system (n - k) k = suffix then
          {
            r with
            t_check =
              "1 GB heap, G1, warmed up, each member's median of its timed rounds in one JVM: "
              ^ r.t_check;
          }
        else r)
      jg
  in
  raw_rows @ flow_rows @ consort_rows @ cpg @ jg

(* {1 Stack cost} *)

type cost = {
  c_what : string;
  c_path : string;
  c_layers : int option;
  c_ns : float option;
  c_words : float option;
  c_major : float option;  (** major words per message (promoted or allocated there) *)
  c_note : string;
}

let cost_rows stack_cost layering =
  let sc =
    match stack_cost with
    | None -> []
    | Some j ->
        List.map
          (fun r ->
            {
              c_what = to_str (member "stack" r) ^ ", 2 members back to back";
              c_path = to_str (member "path" r);
              c_layers = (match member "layers" r with Some (`Int n) -> Some n | _ -> None);
              c_ns = to_float (member "ns_per_msg" r);
              c_words = to_float (member "minor_words_per_msg" r);
              c_major = to_float (member "major_words_per_msg" r);
              c_note =
                Printf.sprintf "major words/msg %.3f"
                  (Option.value ~default:nan (to_float (member "major_words_per_msg" r)));
            })
          (to_list (Some j))
  in
  let lay = match layering with None -> [] | Some j -> to_list (Some j) in
  let lrow kind layers =
    List.find_opt
      (fun r -> to_str (member "kind" r) = kind && member "layers" r = Some (`Int layers))
      lay
  in
  let of_l what path r note =
    {
      c_what = what;
      c_path = path;
      c_layers = (match member "layers" r with Some (`Int n) -> Some n | _ -> None);
      c_ns = to_float (member "ns_per_msg" r);
      c_words = to_float (member "words_per_msg" r);
      c_major = None;
      c_note = note;
    }
  in
  let layered =
    List.filter_map Fun.id
      [
        Option.map
          (fun r -> of_l "direct call, no layer (baseline)" "-" r "consort bench layering")
          (lrow "direct" 0);
        Option.map
          (fun r ->
            of_l "10 layers, a varint header each, 1 stack down and up" "layered" r
              "consort bench layering")
          (lrow "seq" 10);
      ]
  in
  (* A fused path, once `consort bench layering` measures one, appears here
     by itself; until then the row says it is not built. *)
  let fused =
    List.filter
      (fun r ->
        let k = to_str (member "kind" r) in
        String.length k >= 5 && String.sub k 0 5 = "fused")
      lay
  in
  let fused =
    if fused <> [] then
      List.map (fun r -> of_l (to_str (member "kind" r)) "fused" r "consort bench layering") fused
    else if List.exists (fun c -> c.c_path = "fused") sc then []
    else if fused = [] then
      [
        {
          c_what = "fused fast path";
          c_path = "fused";
          c_layers = None;
          c_ns = None;
          c_words = None;
          c_major = None;
          c_note = "not built: no fused path in this tree";
        };
      ]
    else []
  in
  sc @ layered @ fused

(* {1 Targets} *)

type target = {
  g_what : string;
  g_value : float option;
  g_goal : string;
  g_met : bool option;
  g_detail : string;
}

let best l =
  List.fold_left
    (fun acc r ->
      match acc with
      | Some b when b.t_rate >= r.t_rate -> acc
      | _ -> if Float.is_nan r.t_rate then acc else Some r)
    None l

let targets tputs rtts costs =
  let find p = List.filter (fun r -> p r && r.t_ok) tputs in
  let per_senders =
    List.sort_uniq compare
      (List.filter_map
         (fun r ->
           if String.length r.t_system > 7 && String.sub r.t_system 0 7 = "Consort" then
             Some r.t_senders
           else None)
         tputs)
  in
  let starts p s = String.length s >= String.length p && String.sub s 0 (String.length p) = p in
  let ratio_target what mine theirs goal =
    match (mine, theirs) with
    | Some m, Some t ->
        let x = m.t_rate /. t.t_rate in
        {
          g_what = what;
          g_value = Some x;
          g_goal = Printf.sprintf ">= %.1fx" goal;
          g_met = Some (x >= goal);
          g_detail =
            Printf.sprintf "%s %.0f/s vs %s (%s) %.0f/s%s" m.t_system m.t_rate t.t_system t.t_setup
              t.t_rate
              (if x >= goal then ""
               else
                 Printf.sprintf "; short by %.0f/s (needs %.0f/s)"
                   ((goal *. t.t_rate) -. m.t_rate)
                   (goal *. t.t_rate));
        }
    | None, _ ->
        {
          g_what = what;
          g_value = None;
          g_goal = Printf.sprintf ">= %.1fx" goal;
          g_met = None;
          g_detail = "Consort's figure is missing or failed its checks";
        }
    | _, None ->
        {
          g_what = what;
          g_value = None;
          g_goal = Printf.sprintf ">= %.1fx" goal;
          g_met = None;
          g_detail = "the peer's figure is missing or failed its checks (see skipped)";
        }
  in
  let payload r = r.t_rate *. float r.t_bytes in
  let thr =
    List.concat_map
      (fun s ->
        let consort_fifo = best (find (fun r -> r.t_system = "Consort vsync" && r.t_senders = s)) in
        let consort_total =
          best (find (fun r -> starts "Consort Total" r.t_system && r.t_senders = s))
        in
        let jg_fifo =
          best
            (find (fun r -> starts "JGroups" r.t_system && r.t_order = "fifo" && r.t_senders = s))
        in
        let jg_total =
          best
            (find (fun r -> starts "JGroups" r.t_system && r.t_order = "total" && r.t_senders = s))
        in
        let cpg = best (find (fun r -> r.t_system = "Corosync CPG" && r.t_senders = s)) in
        let byte_limit =
          best (find (fun r -> r.t_system = "raw UDP (C), byte limit" && r.t_senders = s))
        in
        let fraction =
          let what =
            Printf.sprintf
              "FIFO payload, 3 processes, %d sender(s): Consort / raw UDP byte limit (60 KB \
               datagrams)"
              s
          in
          match (consort_fifo, byte_limit) with
          | Some c, Some b ->
              let x = payload c /. payload b in
              {
                g_what = what;
                g_value = Some x;
                g_goal = ">= 0.40";
                g_met = Some (x >= 0.4);
                g_detail =
                  Printf.sprintf "%.0f MB/s of 1 KB casts vs %.0f MB/s of 60 KB datagrams%s"
                    (payload c /. 1e6)
                    (payload b /. 1e6)
                    (if x >= 0.4 then ""
                     else
                       Printf.sprintf "; short by %.0f MB/s"
                         (((0.4 *. payload b) -. payload c) /. 1e6));
              }
          | None, _ ->
              {
                g_what = what;
                g_value = None;
                g_goal = ">= 0.40";
                g_met = None;
                g_detail = "Consort's figure is missing or failed its checks";
              }
          | _, None ->
              {
                g_what = what;
                g_value = None;
                g_goal = ">= 0.40";
                g_met = None;
                g_detail = "the byte limit is missing or failed its checks (see skipped)";
              }
        in
        [
          ratio_target
            (Printf.sprintf
               "FIFO 1 KB, 3 processes, %d sender(s): Consort / best JGroups FIFO (either \
                configuration)"
               s)
            consort_fifo jg_fifo 1.5;
          fraction;
          ratio_target
            (Printf.sprintf "total 1 KB, 3 processes, %d sender(s): Consort total / Consort FIFO" s)
            consort_total consort_fifo 0.9;
          ratio_target
            (Printf.sprintf "total 1 KB, 3 processes, %d sender(s): Consort / best JGroups total" s)
            consort_total jg_total 2.0;
          ratio_target
            (Printf.sprintf "total 1 KB, 3 processes, %d sender(s): Consort / best Corosync CPG" s)
            consort_total cpg 3.0;
        ])
      per_senders
  in
  let rt =
    List.filter_map
      (fun pl ->
        let raw = List.find_opt (fun r -> r.r_system = "raw UDP (C)" && r.r_placement = pl) rtts in
        let c = List.find_opt (fun r -> r.r_system = "Consort vsync" && r.r_placement = pl) rtts in
        match (raw, c) with
        | Some raw, Some c ->
            let d = c.r_median -. raw.r_median in
            Some
              {
                g_what =
                  Printf.sprintf "round trip 16 B, %s: Consort vsync - raw UDP (C), medians" pl;
                g_value = Some d;
                g_goal = "<= +3.0 us";
                g_met = Some (d <= 3.);
                g_detail =
                  Printf.sprintf "%.1f us vs %.1f us%s" c.r_median raw.r_median
                    (if d <= 3. then "" else Printf.sprintf "; over by %.1f us" (d -. 3.));
              }
        | _ -> None)
      [ "same-cpu"; "different-cpus" ]
  in
  let fused =
    match
      List.find_opt
        (fun c -> c.c_path = "fused" && c.c_ns <> None && starts "default" c.c_what)
        costs
    with
    | Some _ as f -> f
    | None -> List.find_opt (fun c -> c.c_path = "fused" && c.c_ns <> None) costs
  in
  let layered_default =
    List.find_opt (fun c -> c.c_path = "layered" && starts "default" c.c_what) costs
  in
  (* Quoted as the range over the stacks measured, not the best row. *)
  let pairs =
    List.filter_map
      (fun (label, prefix) ->
        let f = List.find_opt (fun c -> c.c_path = "fused" && starts prefix c.c_what) costs in
        let l = List.find_opt (fun c -> c.c_path = "layered" && starts prefix c.c_what) costs in
        match (f, l) with
        | Some { c_ns = Some fns; _ }, Some { c_ns = Some lns; _ } when lns > 0. ->
            Some (label, fns /. lns, fns, lns)
        | _ -> None)
      [
        ("FIFO casts", "default");
        ("sends", "sends, default");
        ("total, from the sequencer", "total order (");
        ("total, from another member", "total order, another");
      ]
  in
  let fu =
    match pairs with
    | [] ->
        [
          {
            g_what = "stack cost: fused / layered, range over the stacks measured";
            g_value = None;
            g_goal = "<= 0.33x";
            g_met = None;
            g_detail =
              (match (fused, layered_default) with
              | Some _, Some _ -> "no stack measured on both paths"
              | _ -> "not measured: the fused path is not built");
          };
        ]
    | _ ->
        let lo = List.fold_left (fun a (_, x, _, _) -> Float.min a x) infinity pairs in
        let hi = List.fold_left (fun a (_, x, _, _) -> Float.max a x) neg_infinity pairs in
        [
          {
            g_what = "stack cost: fused / layered, range over the stacks measured (the worst shown)";
            g_value = Some hi;
            g_goal = "<= 0.33x";
            g_met = Some (hi <= 1. /. 3.);
            g_detail =
              Printf.sprintf "%.2f to %.2f: " lo hi
              ^ String.concat "; "
                  (List.map
                     (fun (label, x, fns, lns) ->
                       Printf.sprintf "%s %.2f (%.0f / %.0f ns)" label x fns lns)
                     pairs);
          };
        ]
  in
  let fused_default =
    List.find_opt (fun c -> c.c_path = "fused" && starts "default" c.c_what) costs
  in
  (* The harness makes and copies a datagram per cast: Bottom alone in the
     same harness is what no layer above it costs, and the layers above
     are measured against it. *)
  let bottom_alone =
    List.find_map (fun c -> if starts "Bottom alone" c.c_what then c.c_words else None) costs
  in
  let words =
    match match fused_default with Some _ -> fused_default | None -> layered_default with
    | Some { c_words = Some w; c_layers = Some n; c_path; _ } ->
        let per, detail =
          match bottom_alone with
          | Some b when n > 1 ->
              ( (w -. b) /. float (2 * (n - 1)),
                Printf.sprintf
                  "%.1f words, Bottom alone in the same harness %.1f: %+.1f for the %d layers \
                   above it, down and up"
                  w b (w -. b) (n - 1) )
          | _ -> (w /. float (2 * n), Printf.sprintf "%.1f words for %d layers down and %d up" w n n)
        in
        [
          {
            g_what =
              Printf.sprintf "minor words per message per layer, default stack (%s path)" c_path;
            g_value = Some per;
            g_goal = "< 1.0";
            g_met = Some (per < 1.);
            g_detail = detail;
          };
        ]
    | _ -> []
  in
  (* Steady state: no allocation goes to the major heap per message; what a
     minor collection finds live (the casts not yet stable, the last
     status) is promoted, a few dozen words per collection, whatever the
     number of messages between collections. A message that allocated or
     kept anything in the major heap would cost at least one word. *)
  let major =
    match fused_default with
    | Some { c_major = Some mw; _ } ->
        [
          {
            g_what = "major words per message in steady state, default stack (fused path)";
            g_value = Some mw;
            g_goal = "0 (< 0.1: promotions at minor collections)";
            g_met = Some (mw < 0.1);
            g_detail =
              Printf.sprintf
                "%.3f words per message: what minor collections promote (fewer with a larger minor \
                 heap), no allocation per message"
                mw;
          };
        ]
    | _ -> []
  in
  thr @ rt @ fu @ words @ major

(* {1 Output} *)

let payload_mb r = r.t_rate *. float r.t_bytes /. 1e6

(* A row's payload as a fraction of raw UDP's byte limit (60 KB datagrams,
   credit window) with as many senders, in the same run. *)
let limit_fraction tputs r =
  match
    List.find_opt
      (fun b -> b.t_system = "raw UDP (C), byte limit" && b.t_senders = r.t_senders && b.t_ok)
      tputs
  with
  | Some b when Float.is_finite (payload_mb b) && payload_mb b > 0. ->
      let x = payload_mb r /. payload_mb b in
      if Float.is_finite x then Some x else None
  | _ -> None

let pr = Printf.printf
let opt_f fmt = function Some x when not (Float.is_nan x) -> Printf.sprintf fmt x | _ -> "-"

let print meta rtts tputs costs tgs skipped =
  let m k = Option.value ~default:"?" (List.assoc_opt k meta) in
  pr "Peers side by side: every figure below measured in this run, on this machine.\n";
  let quick = List.assoc_opt "quick" meta = Some "1" in
  if quick then
    pr "QUICK RUN: tiny counts, to try the machinery; these figures and ratios mean nothing.\n";
  pr "%s; %s, %s CPUs, kernel %s; load at start %s, at end %s\n" (m "date") (m "cpu_model")
    (m "cores") (m "kernel") (m "load_start") (m "load_end");
  let loads =
    List.filter_map
      (fun (k, v) ->
        if String.length k > 5 && String.sub k 0 5 = "load_" && k <> "load_start" && k <> "load_end"
        then
          Some
            (String.map (function '_' -> ' ' | c -> c) (String.sub k 5 (String.length k - 5))
            ^ " " ^ v)
        else None)
      meta
  in
  if loads <> [] then pr "load average at the start of: %s\n" (String.concat "; " loads);
  pr "Consort %s; %s; %s; %s; %s\n" (m "consort_commit") (m "corosync") (m "jgroups") (m "java")
    (m "gcc");
  pr "\n== Round trip, 16 bytes, 2 processes (us; vs raw UDP in C in the same placement)\n";
  let width h f l = List.fold_left (fun a r -> max a (String.length (f r))) (String.length h) l in
  let ws = width "system" (fun r -> r.r_system) rtts
  and wu = width "setup" (fun r -> r.r_setup) rtts in
  pr "%-*s %-*s %-15s %6s %9s %9s %9s  %s\n" ws "system" wu "setup" "placement" "n" "min" "median"
    "p99" "median vs raw UDP";
  List.iter
    (fun pl ->
      let raw = List.find_opt (fun r -> r.r_system = "raw UDP (C)" && r.r_placement = pl) rtts in
      List.iter
        (fun r ->
          if r.r_placement = pl then
            pr "%-*s %-*s %-15s %6d %9.1f %9.1f %9.1f  %s\n" ws r.r_system wu r.r_setup
              r.r_placement r.r_n r.r_min r.r_median r.r_p99
              (match raw with
              | Some b when r.r_system <> b.r_system ->
                  Printf.sprintf "%+.1f us (x%.2f)" (r.r_median -. b.r_median)
                    (r.r_median /. b.r_median)
              | _ -> "-"))
        rtts)
    (let rank = function "same-cpu" -> 0 | "different-cpus" -> 1 | _ -> 2 in
     List.sort_uniq
       (fun a b -> compare (rank a, a) (rank b, b))
       (List.map (fun r -> r.r_placement) rtts));
  pr
    "\n\
     == Multicast throughput, 3 processes (messages/s delivered at the slowest member, median run; \
     payload MB/s, 1 MB = 10^6 bytes; the fraction of raw UDP's byte limit with as many senders)\n";
  let ws = width "system" (fun r -> r.t_system) tputs
  and wu = width "setup" (fun r -> r.t_setup) tputs in
  pr "%-*s %-*s %-5s %7s %6s %10s %8s %9s  %s\n" ws "system" wu "setup" "order" "senders" "bytes"
    "msgs/s" "MB/s" "of limit" "runs; checks";
  List.iter
    (fun r ->
      pr "%-*s %-*s %-5s %7d %6d %10s %8s %9s  %s; %s\n" ws r.t_system wu r.t_setup r.t_order
        r.t_senders r.t_bytes (opt_f "%.0f" (Some r.t_rate))
        (opt_f "%.1f" (Some (payload_mb r)))
        (opt_f "%.2f" (limit_fraction tputs r))
        (String.concat "," (List.map (Printf.sprintf "%.0f") r.t_runs))
        r.t_check)
    tputs;
  pr "\n== Stack cost per message, in one process (no system call)\n";
  let wc = width "stack" (fun c -> c.c_what) costs in
  pr "%-*s %-8s %6s %9s %11s  %s\n" wc "stack" "path" "layers" "ns/msg" "words/msg" "";
  List.iter
    (fun c ->
      pr "%-*s %-8s %6s %9s %11s  %s\n" wc c.c_what c.c_path
        (match c.c_layers with Some n -> string_of_int n | None -> "-")
        (opt_f "%.0f" c.c_ns) (opt_f "%.1f" c.c_words) c.c_note)
    costs;
  pr "\n== Targets of issue 33, as ratios in this run\n";
  List.iter
    (fun g ->
      pr "%-4s %-86s %9s  goal %-10s %s\n"
        (match g.g_met with Some true -> "MET" | Some false -> "SHORT" | None -> "n/a")
        g.g_what (opt_f "%.2f" g.g_value) g.g_goal g.g_detail)
    tgs;
  if quick then pr "\nQUICK RUN: tiny counts; these figures and ratios mean nothing.\n";
  if skipped <> [] then begin
    pr "\n== Not measured in this run\n";
    List.iter (fun (w, why) -> pr "%s: %s\n" w why) skipped
  end

(* {1 The chart}

   An SVG of the throughput table, written here (no library): one
   horizontal bar per row of payload MB/s, scaled to the largest, with the
   row's messages/s, MB/s and fraction of the byte limit beside it, then
   the targets. Each bar carries its row's figures as data- attributes
   (test/bench_peers_smoke reads them back). *)

let xml_escape s =
  let b = Buffer.create (String.length s) in
  String.iter
    (function
      | '&' -> Buffer.add_string b "&amp;"
      | '<' -> Buffer.add_string b "&lt;"
      | '>' -> Buffer.add_string b "&gt;"
      | '"' -> Buffer.add_string b "&quot;"
      | '\'' -> Buffer.add_string b "&apos;"
      | c when Char.code c < 0x20 && c <> '\t' && c <> '\n' -> Buffer.add_char b ' '
      | c -> Buffer.add_char b c)
    s;
  Buffer.contents b

let svg meta tputs tgs =
  let m k = Option.value ~default:"?" (List.assoc_opt k meta) in
  let b = Buffer.create 16384 in
  let add fmt = Printf.bprintf b fmt in
  let row_h = 22 and label_w = 560 and bar_w = 360 and top = 70 in
  let n = List.length tputs in
  let tg_top = top + (n * row_h) + 30 in
  let height = tg_top + (List.length tgs * 18) + 30 in
  let width = label_w + bar_w + 330 in
  let mx =
    List.fold_left
      (fun a r -> if Float.is_finite (payload_mb r) then Float.max a (payload_mb r) else a)
      0. tputs
  in
  add "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  add
    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" \
     font-family=\"sans-serif\" font-size=\"12\">\n"
    width height width height;
  add "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n" width height;
  add "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">%s</text>\n"
    (xml_escape
       "make bench-peers: payload throughput, 3 processes on loopback (MB/s at the slowest member, \
        median run)");
  add "<text x=\"10\" y=\"38\">%s</text>\n"
    (xml_escape
       (Printf.sprintf "%s; %s, %s CPUs; load average at start %s, at end %s%s" (m "date")
          (m "cpu_model") (m "cores") (m "load_start") (m "load_end")
          (if List.assoc_opt "quick" meta = Some "1" then "; QUICK RUN: figures mean nothing"
           else "")));
  add "<text x=\"10\" y=\"56\">%s</text>\n"
    (xml_escape
       (Printf.sprintf "Consort %s; %s; %s; %s" (m "consort_commit") (m "corosync") (m "jgroups")
          (m "java")));
  List.iteri
    (fun i r ->
      let y = top + (i * row_h) in
      let mb = payload_mb r in
      let w =
        if Float.is_finite mb && mx > 0. then Float.max 0. (float bar_w *. mb /. mx) else 0.
      in
      let color =
        if not r.t_ok then "#cc3333"
        else if String.length r.t_system >= 7 && String.sub r.t_system 0 7 = "Consort" then
          "#2a6fbb"
        else if String.length r.t_system >= 3 && String.sub r.t_system 0 3 = "raw" then "#888888"
        else "#e0a030"
      in
      let label =
        Printf.sprintf "%s, %s, %d sender%s%s" r.t_system
          (if r.t_order = "none" then "no order" else r.t_order)
          r.t_senders
          (if r.t_senders = 1 then "" else "s")
          (if String.length r.t_setup > 0 then " (" ^ r.t_setup ^ ")" else "")
      in
      let label = if String.length label > 92 then String.sub label 0 89 ^ "..." else label in
      add "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"11\">%s</text>\n" (label_w - 6)
        (y + 15) (xml_escape label);
      add
        "<rect class=\"bar\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" \
         data-system=\"%s\" data-setup=\"%s\" data-order=\"%s\" data-senders=\"%d\" \
         data-bytes=\"%d\" data-msgs-per-s=\"%s\" data-mb-per-s=\"%s\" data-ok=\"%b\"/>\n"
        label_w (y + 3) w (row_h - 6) color (xml_escape r.t_system) (xml_escape r.t_setup)
        (xml_escape r.t_order) r.t_senders r.t_bytes
        (if Float.is_finite r.t_rate then Printf.sprintf "%.0f" r.t_rate else "")
        (if Float.is_finite mb then Printf.sprintf "%.1f" mb else "")
        r.t_ok;
      add "<text x=\"%.1f\" y=\"%d\">%s</text>\n"
        (float label_w +. w +. 6.)
        (y + 15)
        (xml_escape
           (if Float.is_finite mb then
              Printf.sprintf "%.1f MB/s, %.0f msgs/s%s%s" mb r.t_rate
                (match limit_fraction tputs r with
                | Some x when not (r.t_system = "raw UDP (C), byte limit") ->
                    Printf.sprintf ", %.2f of the byte limit" x
                | _ -> "")
                (if r.t_ok then "" else " (FAILED ITS CHECKS)")
            else "no figure: " ^ r.t_check)))
    tputs;
  add "<text x=\"10\" y=\"%d\" font-weight=\"bold\">%s</text>\n" (tg_top - 8)
    (xml_escape "Targets of issue 33, as ratios in this run");
  List.iteri
    (fun i g ->
      add "<text x=\"10\" y=\"%d\">%s</text>\n"
        (tg_top + 10 + (i * 18))
        (xml_escape
           (Printf.sprintf "%s %s: %s (goal %s)"
              (match g.g_met with Some true -> "MET" | Some false -> "SHORT" | None -> "n/a")
              g.g_what
              (match g.g_value with
              | Some x when Float.is_finite x -> Printf.sprintf "%.2f" x
              | _ -> "-")
              g.g_goal)))
    tgs;
  add "</svg>\n";
  Buffer.contents b

let json meta rtts tputs costs tgs skipped =
  let f x = if Float.is_finite x then `Float x else `Null in
  let fo = function Some x -> f x | None -> `Null in
  `Assoc
    [
      ("bench", `String "peers");
      ( "machine",
        `Assoc
          (List.filter_map (fun (k, v) -> if is_machine k then Some (k, `String v) else None) meta)
      );
      ( "run",
        `Assoc
          (List.filter_map
             (fun (k, v) -> if List.mem k run_keys then Some (k, `String v) else None)
             meta) );
      ( "versions",
        `Assoc
          (List.filter_map
             (fun (k, v) ->
               if is_machine k || List.mem k run_keys then None else Some (k, `String v))
             meta) );
      ( "rtt",
        `List
          (List.map
             (fun r ->
               `Assoc
                 [
                   ("system", `String r.r_system);
                   ("setup", `String r.r_setup);
                   ("placement", `String r.r_placement);
                   ("bytes", `Int 16);
                   ("n", `Int r.r_n);
                   ("min_us", f r.r_min);
                   ("median_us", f r.r_median);
                   ("p99_us", f r.r_p99);
                 ])
             rtts) );
      ( "throughput",
        `List
          (List.map
             (fun r ->
               `Assoc
                 [
                   ("system", `String r.t_system);
                   ("setup", `String r.t_setup);
                   ("order", `String r.t_order);
                   ("senders", `Int r.t_senders);
                   ("bytes", `Int r.t_bytes);
                   ("count_per_sender", `Int r.t_count);
                   ("msgs_per_s", f r.t_rate);
                   ("payload_mb_per_s", f (payload_mb r));
                   ("fraction_of_byte_limit", fo (limit_fraction tputs r));
                   ("runs_msgs_per_s", `List (List.map f r.t_runs));
                   ("ok", `Bool r.t_ok);
                   ("checks", `String r.t_check);
                 ])
             tputs) );
      ( "stack_cost",
        `List
          (List.map
             (fun c ->
               `Assoc
                 [
                   ("stack", `String c.c_what);
                   ("path", `String c.c_path);
                   ("layers", match c.c_layers with Some n -> `Int n | None -> `Null);
                   ("ns_per_msg", fo c.c_ns);
                   ("minor_words_per_msg", fo c.c_words);
                   ("note", `String c.c_note);
                 ])
             costs) );
      ( "targets",
        `List
          (List.map
             (fun g ->
               `Assoc
                 [
                   ("target", `String g.g_what);
                   ("value", fo g.g_value);
                   ("goal", `String g.g_goal);
                   ("met", match g.g_met with Some b -> `Bool b | None -> `Null);
                   ("detail", `String g.g_detail);
                 ])
             tgs) );
      ( "skipped",
        `List
          (List.map (fun (w, why) -> `Assoc [ ("what", `String w); ("why", `String why) ]) skipped)
      );
    ]

let run ?svg:svg_out ~dir ~out () =
  if not (Sys.file_exists dir && Sys.is_directory dir) then Error (dir ^ ": no such directory")
  else
    let meta = read_meta dir in
    let results = List.filter_map parse_result (read_lines (Filename.concat dir "results.txt")) in
    let rtts = rtt_rows results (read_json dir "consort-rtt.json") in
    let consort_tput =
      (* One file per round (consort-tput-R.json), or one for all. *)
      let files = try Array.to_list (Sys.readdir dir) with Sys_error _ -> [] in
      let files =
        List.sort compare
          (List.filter
             (fun f ->
               String.length f > 17
               && String.sub f 0 12 = "consort-tput"
               && Filename.check_suffix f ".json")
             files
          @ if List.mem "consort-tput.json" files then [ "consort-tput.json" ] else [])
      in
      List.filter_map (read_json dir) files
    in
    let tputs = tput_rows results consort_tput in
    let costs =
      cost_rows (read_json dir "stack-cost.json") (read_json dir "consort-layering.json")
    in
    let tgs = targets tputs rtts costs in
    let skipped =
      List.filter_map
        (fun l ->
          match String.index_opt l '\t' with
          | Some i -> Some (String.sub l 0 i, String.sub l (i + 1) (String.length l - i - 1))
          | None -> None)
        (read_lines (Filename.concat dir "skipped.tsv"))
    in
    if rtts = [] && tputs = [] && List.for_all (fun c -> c.c_ns = None) costs then
      Error (dir ^ ": no results to report")
    else begin
      print meta rtts tputs costs tgs skipped;
      let json_ok =
        match out with
        | None -> Ok ()
        | Some file -> (
            match Yojson.Safe.to_file file (json meta rtts tputs costs tgs skipped) with
            | () ->
                pr "\nJSON: %s\n" file;
                Ok ()
            | exception Sys_error e -> Error e)
      in
      match (json_ok, svg_out) with
      | (Error _ as e), _ | e, None -> e
      | Ok (), Some file -> (
          match
            let oc = open_out_bin file in
            Fun.protect
              ~finally:(fun () -> close_out_noerr oc)
              (fun () -> output_string oc (svg meta tputs tgs))
          with
          | () ->
              pr "SVG: %s\n" file;
              Ok ()
          | exception Sys_error e -> Error e)
    end
