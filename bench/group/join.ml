type row = {
  stack : string;
  size : int;
  reps : int;
  start_ms : float array;
  join_ms : float array;
  formed_ms : float array;
}

(* (row name, properties, tunables, whether members get the key file) *)
let plain = [ ("vsync", "", "", false) ]

let sealed =
  [
    ("vsync", "", "", false);
    ("Privacy", "vsync,Privacy", "seal.rekey=false", true);
    ("Privacy+Rekey", "vsync,Privacy", "", true);
  ]

let once ~exe ~params ~props ~extra ~size ~rep =
  let dir = Proc.temp_dir "consort-bench-join" in
  let addrs = Proc.free_addresses size in
  let group = Printf.sprintf "join-%d-%d-%d" (Unix.getpid ()) size rep in
  let ms =
    List.mapi
      (fun i a ->
        Members.start ~exe ~dir ~group ~params ~props ~extra
          ~seed:((rep * 100) + i + 1)
          ~peers:addrs i a)
      addrs
  in
  let procs = List.map (fun m -> m.Members.proc) ms in
  let full m = Members.first_view m ~after:0. (fun l -> List.length l = size) in
  let res =
    Fun.protect
      ~finally:(fun () -> Members.stop ms)
      (fun () ->
        let formed =
          Proc.wait_until procs ~timeout:20. (fun () -> List.for_all (fun m -> full m <> None) ms)
        in
        if not formed then Error (Printf.sprintf "a group of %d did not form within 20 s" size)
        else
          let starts =
            List.map
              (fun m ->
                match Members.first_view m ~after:0. (fun _ -> true) with
                | Some (at, _) -> (at -. Proc.spawned_at m.Members.proc) *. 1e3
                | None -> nan)
              ms
          in
          let joins =
            List.map
              (fun m ->
                match full m with
                | Some (at, _) -> (at, (at -. Proc.spawned_at m.proc) *. 1e3)
                | None -> (nan, nan))
              ms
          in
          let first_spawn =
            List.fold_left (fun a m -> Float.min a (Proc.spawned_at m.Members.proc)) infinity ms
          in
          let last_view = List.fold_left (fun a (at, _) -> Float.max a at) neg_infinity joins in
          (* The logs must agree: one view, with every member. *)
          let agree () =
            match List.map Members.last_logged_view ms with
            | Some (v, members) :: rest ->
                List.length members = size && List.for_all (( = ) (Some (v, members))) rest
            | _ -> false
          in
          if Proc.wait_until procs ~timeout:2. agree then
            Ok
              ( Array.of_list starts,
                Array.of_list (List.map snd joins),
                (last_view -. first_spawn) *. 1e3 )
          else Error (Printf.sprintf "the logs of a group of %d do not end in one full view" size))
  in
  Proc.remove_dir dir;
  res

let run ~exe ?(sizes = [ 2; 3; 4; 5; 6; 7; 8 ]) ?(reps = 3) ?(params = "") ?(seal = false) () =
  (* One key for the sealed rows: a benchmark key, removed at the end. *)
  let keydir = Proc.temp_dir "consort-bench-join-key" in
  let key = Filename.concat keydir "bench.key" in
  let keyed =
    if not seal then Ok ()
    else (
      (try Sys.remove key with Sys_error _ -> ());
      Consort_seal.Seal.write_key key (Consort_seal.Seal.generate ()))
  in
  let configs = if seal then sealed else plain in
  let runs = List.concat_map (fun size -> List.map (fun c -> (size, c)) configs) sizes in
  (* Progress on a terminal: one run a group started. *)
  Consort_cli.with_progress "consort bench join" ~total:(List.length runs * reps) @@ fun progress ->
  let started = ref 0 in
  let rec sizes_loop acc = function
    | [] -> Ok (List.rev acc)
    | (size, (stack, props, extra_params, keyed)) :: rest -> (
        let params =
          if extra_params = "" then params
          else if params = "" then extra_params
          else params ^ "," ^ extra_params
        in
        let extra = if keyed then [ "--key"; key ] else [] in
        let rec reps_loop s j f rep =
          if rep > reps then Ok (s, j, f)
          else begin
            incr started;
            Consort_cli.step progress !started;
            match once ~exe ~params ~props ~extra ~size ~rep with
            | Error e -> Error (stack ^ ": " ^ e)
            | Ok (s', j', f') -> reps_loop (s' :: s) (j' :: j) (f' :: f) (rep + 1)
          end
        in
        match reps_loop [] [] [] 1 with
        | Error e -> Error e
        | Ok (s, j, f) ->
            sizes_loop
              ({
                 stack;
                 size;
                 reps;
                 start_ms = Array.concat s;
                 join_ms = Array.concat j;
                 formed_ms = Array.of_list f;
               }
              :: acc)
              rest)
  in
  let res = match keyed with Error e -> Error e | Ok () -> sizes_loop [] runs in
  Proc.remove_dir keydir;
  res

let pp_table ppf rows =
  Fmt.pf ppf "%-14s %-7s %5s | %23s | %23s | %13s@." "stack" "members" "groups"
    "start: median / max ms" "join: median / max ms" "formed: median";
  List.iter
    (fun r ->
      Fmt.pf ppf "%-14s %-7d %5d | %11.1f / %8.1f | %11.1f / %8.1f | %10.1f ms@." r.stack r.size
        r.reps (Stats.median r.start_ms) (Stats.max r.start_ms) (Stats.median r.join_ms)
        (Stats.max r.join_ms) (Stats.median r.formed_ms))
    rows;
  (* Sealed rows: the cost beside the plain row of the same size. *)
  List.iter
    (fun r ->
      if r.stack <> "vsync" then
        match List.find_opt (fun b -> b.stack = "vsync" && b.size = r.size) rows with
        | Some b ->
            (* The merge itself: from a member's first view (alone) to the
               full view. *)
            let merge r = Stats.median (Array.map2 ( -. ) r.join_ms r.start_ms) in
            Fmt.pf ppf
              "%s, %d members: formed in %.2fx the time of vsync in clear; merge (join - start) \
               %.1f ms, in clear %.1f ms@."
              r.stack r.size
              (Stats.median r.formed_ms /. Stats.median b.formed_ms)
              (merge r) (merge b)
        | None -> ())
    rows

let to_json rows =
  let f = Stats.json_float in
  "{\"bench\":\"join\",\"rows\":["
  ^ String.concat ","
      (List.map
         (fun r ->
           Printf.sprintf
             "{\"stack\":%S,\"members\":%d,\"groups\":%d,\"start_median_ms\":%s,\"start_max_ms\":%s,\"join_median_ms\":%s,\"join_max_ms\":%s,\"formed_median_ms\":%s}"
             r.stack r.size r.reps
             (f (Stats.median r.start_ms))
             (f (Stats.max r.start_ms))
             (f (Stats.median r.join_ms))
             (f (Stats.max r.join_ms))
             (f (Stats.median r.formed_ms)))
         rows)
  ^ "]}"

(* The cryptography of one rekey, in this process: the maker of a view of
   [n] draws a key and wraps it for the [n - 1] others (one X25519 each);
   a member unwraps its own (one X25519). Medians of [reps], microseconds. *)
let rekey_cost ?(reps = 50) n =
  let module Sim = Consort_engine.Sim in
  let module S = Consort_seal.Seal.Make (Sim) in
  let net = Sim.create () in
  let secret = Result.get_ok (Consort_seal.Seal.secret_of_string (String.make 32 'b')) in
  let ring () =
    match S.rekey (S.wrap ~rekey:true net (Some (secret, Consort_seal.Seal.Privacy))) with
    | Some r -> r
    | None -> invalid_arg "rekey_cost"
  in
  let maker = ring () and others = List.init (max 1 (n - 1)) (fun _ -> ring ()) in
  let members =
    List.mapi (fun i (r : Consort_group.Group.rekey) -> (Printf.sprintf "m%d" i, r.public)) others
  in
  let time f =
    Stats.median
      (Array.init reps (fun _ ->
           let t0 = Unix.gettimeofday () in
           f ();
           (Unix.gettimeofday () -. t0) *. 1e6))
  in
  let wrapped = ref [] in
  let draw =
    time (fun () ->
        wrapped := fst (maker.draw ~vid:"1:maker" ~me:"maker" ~context:"install" members))
  in
  let w = List.assoc "m0" !wrapped in
  let first = List.hd others in
  let unwrap =
    time (fun () ->
        ignore
          (first.unwrap ~vid:"1:maker" ~me:"m0" ~context:"install"
             ~installer:("maker", maker.public) w))
  in
  (draw, unwrap)
