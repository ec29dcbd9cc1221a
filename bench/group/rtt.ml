type row = { kind : string; placement : string; cpus : string; samples : float array }

(* (row name, peer kind, property set, more tunables) *)
let kinds =
  [
    ("raw UDP", "raw-rtt", "", "");
    ("engine UDP", "engine-rtt", "", "");
    ("group cast", "group-rtt", "vsync", "");
  ]

let total_kinds =
  [
    ("Total seq", "group-rtt", "vsync,Total", "total.protocol=sequencer");
    ("Total token", "group-rtt", "vsync,Total", "total.protocol=token");
  ]

let seal_kinds =
  [
    ("Auth", "group-rtt", "vsync,Auth", "");
    ("Privacy", "group-rtt", "vsync,Privacy", "");
    ("Privacy no Rekey", "group-rtt", "vsync,Privacy", "seal.rekey=false");
  ]

let once ~exe ~count ~warmup ~params ?(props = "") ?(extra = "") ~kind ~cpus () =
  let params = if params = "" then extra else if extra = "" then params else params ^ "," ^ extra in
  let dir = Proc.temp_dir "consort-bench-rtt" in
  let addrs = Proc.free_addresses 2 in
  let procs =
    List.mapi
      (fun i cpu ->
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
            "--warmup";
            string_of_int warmup;
            "--deadline";
            "30";
          ]
          @ (if params = "" then [] else [ "--params"; params ])
          @ if props = "" then [] else [ "--props"; props ]
        in
        Proc.spawn ?cpu ~stdin:`Null
          ~stderr:(Filename.concat dir (Printf.sprintf "peer-%d.err" i))
          ~name:kind exe args)
      cpus
  in
  let ok = Proc.finish procs ~timeout:40. in
  let err =
    Proc.read_tail (Filename.concat dir "peer-0.err")
    ^ Proc.read_tail (Filename.concat dir "peer-1.err")
  in
  Proc.remove_dir dir;
  let ping = List.hd procs in
  let result = List.find_map (fun (_, l) -> Peer.parse_result l) (Proc.lines ping) in
  match result with
  | Some pairs when ok -> (
      match List.assoc_opt "us" pairs with
      | Some us ->
          let xs = List.map float_of_string_opt (String.split_on_char ',' us) in
          if List.exists Option.is_none xs then Error (kind ^ ": malformed samples")
          else
            let a = Array.of_list (List.map Option.get xs) in
            if Array.length a <> count then Error (kind ^ ": wrong number of samples") else Ok a
      | None -> Error (kind ^ ": no samples"))
  | _ ->
      Error
        (Printf.sprintf "%s: the peers failed%s" kind
           (if err = "" then "" else ": " ^ String.trim err))

let run ~exe ?(count = 5000) ?(warmup = 500) ?(params = "") ?(placements = [ `Same; `Different ])
    ?(rounds = 3) ?(total = false) ?(seal = false) () =
  let kinds = if total then kinds @ total_kinds else kinds in
  let kinds = if seal then kinds @ seal_kinds else kinds in
  let rounds = max 1 (min rounds count) in
  let configs =
    List.concat_map
      (fun p ->
        let cpus, placement =
          if not (Proc.can_pin ()) then ([ None; None ], "unpinned")
          else
            match p with
            | `Same -> ([ Some 0; Some 0 ], "same CPU")
            | `Different -> ([ Some 0; Some 1 ], "different CPUs")
        in
        List.map (fun k -> (k, cpus, placement)) kinds)
      placements
  in
  (* Rounds go through every configuration in turn, so that a change in
     the machine's load during the run is shared by all. *)
  let per_round r = (count / rounds) + if r < count mod rounds then 1 else 0 in
  let n = List.length configs in
  Consort_cli.with_progress "consort bench rtt" ~total:(rounds * n) @@ fun progress ->
  let rec go acc r = function
    | [] -> if r + 1 >= rounds then Ok acc else go acc (r + 1) configs
    | ((_, kind, props, extra), cpus, _) :: rest as l -> (
        Consort_cli.step progress ((r * n) + (n - List.length l) + 1);
        match once ~exe ~count:(per_round r) ~warmup ~params ~props ~extra ~kind ~cpus () with
        | Error e -> Error e
        | Ok samples ->
            let i = List.length configs - List.length l in
            acc.(i) <- samples :: acc.(i);
            go acc r rest)
  in
  match go (Array.make (List.length configs) []) 0 configs with
  | Error e -> Error e
  | Ok acc ->
      Ok
        (List.mapi
           (fun i ((name, _, _, _), cpus, placement) ->
             let cpus_s =
               String.concat ","
                 (List.map (function Some c -> string_of_int c | None -> "-") cpus)
             in
             { kind = name; placement; cpus = cpus_s; samples = Array.concat (List.rev acc.(i)) })
           configs)

let pp_table ppf rows =
  Fmt.pf ppf "%-16s %-15s %5s %6s | %9s %9s %9s %9s | %s@." "kind" "placement" "cpus" "n" "min us"
    "median us" "p99 us" "mean us" "median vs raw";
  List.iter
    (fun r ->
      let raw =
        List.find_opt (fun r' -> r'.kind = "raw UDP" && r'.placement = r.placement) rows
        |> Option.map (fun r' -> Stats.median r'.samples)
      in
      let m = Stats.median r.samples in
      Fmt.pf ppf "%-16s %-15s %5s %6d | %9.1f %9.1f %9.1f %9.1f | %s@." r.kind r.placement r.cpus
        (Array.length r.samples) (Stats.min r.samples) m (Stats.percentile r.samples 99.)
        (Stats.mean r.samples)
        (match raw with
        | Some b when r.kind <> "raw UDP" -> Printf.sprintf "%+.1f us (x%.2f)" (m -. b) (m /. b)
        | _ -> "-"))
    rows;
  (* The sealed rows beside the plain group's, placement by placement. *)
  List.iter
    (fun r ->
      if List.exists (fun (k, _, _, _) -> k = r.kind) seal_kinds then
        match
          List.find_opt (fun r' -> r'.kind = "group cast" && r'.placement = r.placement) rows
        with
        | Some g ->
            let m = Stats.median r.samples and b = Stats.median g.samples in
            Fmt.pf ppf "%s, %s: %+.1f us over the group cast in clear (x%.2f)@." r.kind r.placement
              (m -. b) (m /. b)
        | None -> ())
    rows

let to_json rows =
  let f = Stats.json_float in
  "{\"bench\":\"rtt\",\"bytes\":16,\"rows\":["
  ^ String.concat ","
      (List.map
         (fun r ->
           Printf.sprintf
             "{\"kind\":%S,\"placement\":%S,\"cpus\":%S,\"n\":%d,\"min_us\":%s,\"median_us\":%s,\"p99_us\":%s,\"mean_us\":%s}"
             r.kind r.placement r.cpus (Array.length r.samples)
             (f (Stats.min r.samples))
             (f (Stats.median r.samples))
             (f (Stats.percentile r.samples 99.))
             (f (Stats.mean r.samples)))
         rows)
  ^ "]}"
