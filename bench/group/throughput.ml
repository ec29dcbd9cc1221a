type member = {
  index : int;
  role : string;
  received : int;
  expected : int;
  errors : int;
  seconds : float;
  detail : (string * string) list;
}

type row = {
  kind : string;
  senders : int;
  size : int;
  count : int;
  members : member list;
  ok : bool;
  ordered : bool;
  not_sequencer : bool;
  runs : float list;
}

(* Processes in a run: 3 unless [run ~members] says otherwise. *)
let members_n = ref 3
let rate _ m = if m.seconds > 0. && m.received > 1 then float (m.received - 1) /. m.seconds else nan

let spawn_peers ?(props = "vsync") ?(not_sequencer = false) ~exe ~dir ~kind ~count ~size ~senders
    ~params ~deadline () =
  let addrs = Proc.free_addresses !members_n in
  List.init !members_n (fun i ->
      let args =
        [
          "bench";
          "peer";
          "--kind";
          kind;
          "--index";
          string_of_int i;
          "--addrs";
          String.concat "," addrs;
          "--count";
          string_of_int count;
          "--size";
          string_of_int size;
          "--senders";
          string_of_int senders;
          "--deadline";
          Printf.sprintf "%.1f" deadline;
        ]
        @ (if params = "" then [] else [ "--params"; params ])
        @ (if not_sequencer then [ "--not-sequencer" ] else [])
        @ [ "--props"; props ]
      in
      Proc.spawn ~stdin:`Null
        ~stderr:(Filename.concat dir (Printf.sprintf "peer-%d.err" i))
        ~name:kind exe args)

let results procs =
  List.map (fun p -> List.find_map (fun (_, l) -> Peer.parse_result l) (Proc.lines p)) procs

let int_of pairs k =
  Option.bind (List.assoc_opt k pairs) int_of_string_opt |> Option.value ~default:0

let float_of pairs k =
  Option.bind (List.assoc_opt k pairs) float_of_string_opt |> Option.value ~default:nan

let errs dir =
  String.trim
    (String.concat ""
       (List.init !members_n (fun i ->
            Proc.read_tail ~max:600 (Filename.concat dir (Printf.sprintf "peer-%d.err" i)))))

(* Members of a total-order run delivered in one order: each one's hash of
   its deliveries, in order, is the others'. *)
let same_order members =
  match List.map (fun m -> List.assoc_opt "order_hash" m.detail) members with
  | [] -> true
  | h :: rest -> h <> None && List.for_all (( = ) h) rest

let group ?(label = "group cast") ?props ?(not_sequencer = false) ~exe ~count ~size ~senders ~params
    ~deadline () =
  let dir = Proc.temp_dir "consort-bench-tput" in
  let procs =
    spawn_peers ?props ~not_sequencer ~exe ~dir ~kind:"group-tput" ~count ~size ~senders ~params
      ~deadline ()
  in
  let finished = Proc.finish procs ~timeout:(deadline +. 5.) in
  let err = errs dir in
  Proc.remove_dir dir;
  let rs = results procs in
  if List.exists Option.is_none rs then
    Error
      (Printf.sprintf "group throughput: a member gave no result%s"
         (if err = "" then "" else ": " ^ err))
  else
    let members =
      List.mapi
        (fun i r ->
          let pairs = Option.get r in
          let known = [ "index"; "delivered"; "expected"; "errors"; "span_s" ] in
          {
            index = i;
            role =
              (* The member says whether it cast (chosen by rank with
                 [not_sequencer]); the first [senders] otherwise. *)
              (match List.assoc_opt "sender" pairs with
              | Some "1" -> "sender+receiver"
              | Some _ -> "receiver"
              | None -> if i < senders then "sender+receiver" else "receiver");
            received = int_of pairs "delivered";
            expected = int_of pairs "expected";
            errors = int_of pairs "errors";
            seconds = float_of pairs "span_s";
            detail = List.filter (fun (k, _) -> not (List.mem k known)) pairs;
          })
        rs
    in
    let ordered =
      match props with Some p -> List.mem "Total" (String.split_on_char ',' p) | None -> false
    in
    let ok =
      finished
      && List.for_all (fun m -> m.errors = 0 && m.received = m.expected) members
      && ((not ordered) || same_order members)
    in
    Ok { kind = label; senders; size; count; members; ok; ordered; not_sequencer; runs = [] }

let raw ~exe ~count ~size ~deadline =
  let dir = Proc.temp_dir "consort-bench-tput" in
  let procs =
    spawn_peers ~exe ~dir ~kind:"raw-tput" ~count ~size ~senders:1 ~params:"" ~deadline ()
  in
  let finished = Proc.finish procs ~timeout:(deadline +. 5.) in
  let err = errs dir in
  Proc.remove_dir dir;
  match results procs with
  | Some s :: receivers when List.for_all Option.is_some receivers ->
      let sender =
        {
          index = 0;
          role = "sender";
          received = int_of s "sent";
          expected = count * (!members_n - 1);
          errors = int_of s "failed";
          seconds = float_of s "span_s";
          detail = [];
        }
      in
      let rs =
        List.mapi
          (fun i r ->
            let pairs = Option.get r in
            {
              index = i + 1;
              role = "receiver";
              received = int_of pairs "received";
              expected = count;
              errors = int_of pairs "disorder";
              seconds = float_of pairs "span_s";
              detail = [];
            })
          receivers
      in
      Ok
        {
          kind = "raw UDP";
          senders = 1;
          size;
          count;
          members = sender :: rs;
          ok = finished;
          ordered = false;
          not_sequencer = false;
          runs = [];
        }
  | _ ->
      Error
        (Printf.sprintf "raw UDP throughput: a process gave no result%s"
           (if err = "" then "" else ": " ^ err))

let slowest r =
  List.fold_left
    (fun acc m -> if m.role = "sender" then acc else Float.min acc (rate r m))
    infinity r.members

(* The median run by its slowest receiver; a failed run is the result. *)
let repeat reps f =
  let rec go acc k =
    if k = 0 then Ok (List.rev acc)
    else
      match f () with
      | Error e -> Error e
      | Ok r when not r.ok -> Ok [ r ]
      | Ok r -> go (r :: acc) (k - 1)
  in
  match go [] (max 1 reps) with
  | Error e -> Error e
  | Ok rows ->
      let sorted = List.sort (fun a b -> Float.compare (slowest a) (slowest b)) rows in
      let median = List.nth sorted (List.length sorted / 2) in
      Ok { median with runs = List.map slowest rows }

let run ~exe ?(count = 20000) ?(size = 1024) ?(senders = [ 1; 3 ]) ?(params = "")
    ?(stacks = [ ("group cast", "vsync", "") ]) ?(members = 3) ?(not_sequencer = false)
    ?(deadline = 30.) ?(reps = 3) () =
  members_n := members;
  if size < 11 || size > 65000 then Error "size between 11 and 65000 bytes"
  else if members < 2 || members > 32 then Error "members between 2 and 32"
  else if List.exists (fun s -> s < 1 || s > members) senders then
    Error (Printf.sprintf "senders between 1 and %d" members)
  else
    (* Progress on a terminal: one run each of raw UDP's and every row's reps. *)
    let total = (1 + (List.length stacks * List.length senders)) * max 1 reps in
    Consort_cli.with_progress "consort bench throughput" ~total @@ fun progress ->
    let started = ref 0 in
    let repeat reps f =
      repeat reps (fun () ->
          incr started;
          Consort_cli.step progress !started;
          f ())
    in
    match repeat reps (fun () -> raw ~exe ~count ~size ~deadline) with
    | Error e -> Error e
    | Ok r ->
        let join a b = if a = "" then b else if b = "" then a else a ^ "," ^ b in
        let runs = List.concat_map (fun st -> List.map (fun s -> (st, s)) senders) stacks in
        let rec go acc = function
          | [] -> Ok (List.rev acc)
          | ((label, props, extra), s) :: rest -> (
              match
                repeat reps (fun () ->
                    group ~label ~props ~not_sequencer ~exe ~count ~size ~senders:s
                      ~params:(join params extra) ~deadline ())
              with
              | Error e -> Error e
              | Ok row -> go (row :: acc) rest)
        in
        go [ r ] runs

let mb row m = rate row m *. float row.size /. 1e6
let rank_of m = Option.bind (List.assoc_opt "rank" m.detail) int_of_string_opt
let casters r = List.filter (fun m -> m.role = "sender+receiver") r.members

let sequencer r =
  Option.map (fun m -> m.index) (List.find_opt (fun m -> rank_of m = Some 0) r.members)

let sequencer_cast r = List.exists (fun m -> rank_of m = Some 0) (casters r)

(* Each group row's slowest receiver against raw UDP's, and a bundled row
   against the unbundled one with as many senders, all from this run. *)
let pp_ratios ppf rows =
  let raw = List.find_opt (fun r -> r.kind = "raw UDP") rows in
  List.iter
    (fun r ->
      if r.kind <> "raw UDP" then begin
        (match raw with
        | Some u ->
            Fmt.pf ppf "ratio %s, %d sender(s) / raw UDP: %.2f@." r.kind r.senders
              (slowest r /. slowest u)
        | None -> ());
        if r.kind <> "unbundled" then
          match List.find_opt (fun u -> u.kind = "unbundled" && u.senders = r.senders) rows with
          | Some u ->
              Fmt.pf ppf "ratio %s / unbundled, %d sender(s): %.2f@." r.kind r.senders
                (slowest r /. slowest u)
          | None -> ()
      end)
    rows

let pp_table ppf rows =
  Fmt.pf ppf "%-17s %7s %-16s | %8s / %-8s %6s | %8s | %12s %8s@." "kind" "senders" "process"
    "messages" "expected" "errors" "seconds" "messages/s" "MB/s";
  List.iter
    (fun r ->
      List.iter
        (fun m ->
          Fmt.pf ppf "%-17s %7d %-16s | %8d / %-8d %6d | %8.3f | %12.0f %8.1f@." r.kind r.senders
            (Printf.sprintf "%d %s" m.index m.role)
            m.received m.expected m.errors m.seconds (rate r m) (mb r m))
        r.members;
      Fmt.pf ppf "  runs (slowest receiver, messages/s): %s; the rows above are the median run@."
        (String.concat ", " (List.map (Printf.sprintf "%.0f") r.runs));
      if r.kind <> "raw UDP" then
        Fmt.pf ppf "  rank 0 (Total's sequencer): process %s; cast: process%s %s%s@."
          (match sequencer r with Some i -> string_of_int i | None -> "unknown")
          (if List.length (casters r) = 1 then "" else "es")
          (String.concat ", " (List.map (fun m -> string_of_int m.index) (casters r)))
          (if r.not_sequencer then
             if sequencer_cast r then " (chosen by rank: every member casts, rank 0 too)"
             else " (chosen by rank: not rank 0)"
           else "");
      if r.kind <> "raw UDP" then
        Fmt.pf ppf "  %s; %s@."
          (if r.ok && r.ordered then
             "every member delivered every cast once, in order, intact, all in the same order"
           else if r.ok then "every member delivered every cast once, in order, intact"
           else "DELIVERIES INCOMPLETE OR WRONG")
          (String.concat ", "
             (List.map
                (fun m ->
                  Printf.sprintf "%d: %s" m.index
                    (String.concat " "
                       (List.filter_map
                          (fun (k, v) ->
                            if
                              List.mem k
                                [
                                  "rank";
                                  "mflow_credits_sent";
                                  "mnak_naks";
                                  "mnak_retrans";
                                  "fused_sent";
                                  "fused_received";
                                  "fused_delivered";
                                  "fused_held";
                                  "fused_released";
                                  "fused_left";
                                  "dgrams_dropped";
                                  "msgs_per_bundle";
                                  "minor_words_per_msg";
                                  "promoted_words_per_msg";
                                  "copies_per_msg";
                                  "copied_bytes_per_msg";
                                ]
                            then Some (k ^ "=" ^ v)
                            else None)
                          m.detail)))
                r.members))
      else begin
        let recv = List.filter (fun m -> m.role = "receiver") r.members in
        let got = List.fold_left (fun a m -> a + m.received) 0 recv
        and want = List.fold_left (fun a m -> a + m.expected) 0 recv in
        Fmt.pf ppf "  received %d of %d datagrams sent (%.1f%% lost, no flow control)@." got want
          (100. *. float (want - got) /. float (max 1 want))
      end)
    rows;
  pp_ratios ppf rows;
  (* Each group row beside the first group row of as many senders (the
     plain stack), median runs: the cost of what it adds. *)
  let med r = Stats.median (Array.of_list r.runs) in
  List.iter
    (fun r ->
      match List.find_opt (fun b -> b.kind <> "raw UDP" && b.senders = r.senders) rows with
      | Some b when b != r && r.kind <> "raw UDP" && med b > 0. ->
          Fmt.pf ppf "%s, %d sender%s: %.0f%% of %s's throughput (costs %.0f%%)@." r.kind r.senders
            (if r.senders = 1 then "" else "s")
            (100. *. med r /. med b)
            b.kind
            (100. *. (1. -. (med r /. med b)))
      | _ -> ())
    rows

let to_json rows =
  let f = Stats.json_float in
  "{\"bench\":\"throughput\",\"rows\":["
  ^ String.concat ","
      (List.map
         (fun r ->
           Printf.sprintf
             "{\"kind\":%S,\"senders\":%d,\"bytes\":%d,\"count\":%d,\"ok\":%b,\"runs_slowest_messages_per_s\":[%s],\"members\":[%s],\"sender_not_sequencer\":%b,\"sequencer_index\":%d,\"sender_indexes\":[%s],\"sequencer_cast\":%b}"
             r.kind r.senders r.size r.count r.ok
             (String.concat "," (List.map f r.runs))
             (String.concat ","
                (List.map
                   (fun m ->
                     Printf.sprintf
                       "{\"index\":%d,\"role\":%S,\"rank\":%d,\"messages\":%d,\"expected\":%d,\"errors\":%d,\"seconds\":%s,\"messages_per_s\":%s,\"mb_per_s\":%s}"
                       m.index m.role
                       (Option.value ~default:(-1)
                          (Option.bind (List.assoc_opt "rank" m.detail) int_of_string_opt))
                       m.received m.expected m.errors (f m.seconds)
                       (f (rate r m))
                       (f (mb r m)))
                   r.members))
             r.not_sequencer
             (Option.value ~default:(-1) (sequencer r))
             (String.concat "," (List.map (fun m -> string_of_int m.index) (casters r)))
             (sequencer_cast r))
         rows)
  ^ "]}"
