(* consort bench dir: the directory server beside the key-value store, both
   with 3 replicas as processes on loopback, the same number of client
   processes, each one operation at a time: lookups beside gets (both
   ordered, linearizable reads), then installs beside puts (both written to
   every replica's log and synced before the answer). The directory's
   clients use the capability RPC (sealed, over UDP); the store's, TCP. *)

open Cmdliner
module K = Consort_kv_bench.Kv_bench
module Cap = Consort_cap.Cap
module Dir = Consort_capdir.Dir
module Dir_client = Consort_capdir.Dir_client
module Rpc_udp = Consort_cap.Rpc_udp
module Loop = Consort_engine.Loop

let ( / ) = Filename.concat
let rows = 100

let read_root file =
  let t0 = Unix.gettimeofday () in
  let rec go () =
    let line =
      try
        let ic = open_in file in
        Fun.protect ~finally:(fun () -> close_in ic) (fun () -> Some (input_line ic))
      with Sys_error _ | End_of_file -> None
    in
    match Option.map (String.split_on_char ' ') line with
    | Some [ "root"; c ] -> Cap.of_string c |> Result.to_option
    | _ ->
        if Unix.gettimeofday () -. t0 > 20. then None
        else (
          Unix.sleepf 0.1;
          go ())
  in
  go ()

let dir_cluster ~dir =
  let rpcs = List.init 3 (fun _ -> Printf.sprintf "127.0.0.1:%d" (K.free_port Unix.SOCK_DGRAM)) in
  let groups = List.init 3 (fun _ -> Printf.sprintf "127.0.0.1:%d" (K.free_port Unix.SOCK_DGRAM)) in
  Unix.putenv "CONSORT_MULTICAST" "off";
  let pids =
    List.mapi
      (fun i (r, g) ->
        let pid =
          K.spawn
            ~out:(dir / Printf.sprintf "dir%d.log" i)
            (Consort_bench.Exe.consort ())
            [
              "cap";
              "dir";
              "serve";
              "--new";
              "--data";
              dir / Printf.sprintf "dir%d" i;
              "--key";
              dir / "dir.key";
              "--bind";
              r;
              "--group";
              g;
              "--peers";
              String.concat "," (List.filter (( <> ) g) groups);
            ]
        in
        (* The first makes the key the others load. *)
        if i = 0 then ignore (read_root (dir / "dir0.log"));
        pid)
      (List.combine rpcs groups)
  in
  (pids, rpcs)

let client rpcs c =
  let loop = Loop.create () in
  let n = List.length rpcs in
  let locate = String.concat "," (List.init n (fun i -> List.nth rpcs ((c + i) mod n))) in
  match Rpc_udp.open_node ~locate ~multicast:None loop with
  | Error e -> failwith e
  | Ok node -> Dir_client.create (fun ~idempotent h d -> Rpc_udp.Sync.trans node ~idempotent h d)

let file_cap =
  Cap.owner
    (Consort_cap.Port.of_raw (String.make 16 'f') |> Result.get_ok)
    ~obj:1
    (Cap.Secret.of_raw (String.make 32 's') |> Result.get_ok)

let row i =
  {
    Dir.name = Printf.sprintf "k%03d" (i mod rows);
    masks = [ Consort_cap.Rights.all ];
    caps = [ file_cap ];
  }

let install cl root i =
  match Dir_client.call cl (Dir.Install { dir = root; expect = None; rows = [ row i ] }) with
  | Ok (Dir.Done _) -> true
  | _ -> false

let dir_ready rpcs root =
  let t0 = Unix.gettimeofday () in
  List.for_all
    (fun r ->
      let cl = client [ r ] 0 in
      let rec go () =
        install cl root 0
        || Unix.gettimeofday () -. t0 < 30.
           &&
           (Unix.sleepf 0.2;
            go ())
      in
      go ())
    rpcs

let pp_row base ppf (r : K.result) =
  Fmt.pf ppf "%-34s %8.0f ops/s  p50 %7.2f ms  p99 %7.2f ms  %s" r.name
    (float r.ops /. r.seconds)
    r.p50 r.p99
    (match base with
    | Some (b : K.result) when b.ops > 0 ->
        Printf.sprintf "x%.2f of the kv's" (float r.ops /. r.seconds /. (float b.ops /. b.seconds))
    | _ -> "");
  if r.failed > 0 then Fmt.pf ppf "  (%d failed)" r.failed

let run clients seconds =
  let dir = Filename.temp_file "consort-dir-bench" "" in
  Sys.remove dir;
  Unix.mkdir dir 0o700;
  Fun.protect ~finally:(fun () -> K.rm_rf dir) @@ fun () ->
  Fmt.pr
    "Directory server beside the key-value store, 3 replicas each on loopback: %d client \
     processes, each one operation at a time for %.0f s@."
    clients seconds;
  let kv =
    let pids, listens = K.consort_cluster ~dir ~n:3 () in
    Fun.protect ~finally:(fun () -> K.stop pids) @@ fun () ->
    if not (K.consort_ready listens) then Error "the key-value replicas did not start"
    else
      let op get c =
        let n = List.length listens in
        let cl =
          Result.get_ok
            (Consort_kv.Client.create ~timeout:10.
               (List.init n (fun i -> List.nth listens ((c + i) mod n))))
        in
        fun i ->
          let o =
            if get then Consort_kv.Op.Get (K.key i c) else Consort_kv.Op.Put (K.key i c, K.value)
          in
          match Consort_kv.Client.call cl o with
          | Consort_kv.Wire.Done (Consort_kv.Op.Ok | Consort_kv.Op.Value _ | Consort_kv.Op.Not_found)
            ->
              true
          | _ -> false
      in
      let gets = K.load ~name:"kv get (ordered read)" ~clients ~seconds ~dir (op true) in
      let puts = K.load ~name:"kv put (100 bytes)" ~clients ~seconds ~dir (op false) in
      Ok (gets, puts)
  in
  let dr =
    let pids, rpcs = dir_cluster ~dir in
    Fun.protect ~finally:(fun () -> K.stop pids) @@ fun () ->
    match read_root (dir / "dir0.log") with
    | None -> Error "the directory replicas did not start"
    | Some root ->
        if not (dir_ready rpcs root) then Error "the directory replicas did not answer"
        else begin
          let cl = client rpcs 0 in
          for i = 0 to rows - 1 do
            ignore (install cl root i)
          done;
          let lookup c =
            let cl = client rpcs c in
            fun i ->
              match Dir_client.lookup cl root (Printf.sprintf "k%03d" ((i + c) mod rows)) with
              | Ok [ Dir.Narrowed _ ] -> true
              | _ -> false
          in
          let lookups = K.load ~name:"dir lookup (ordered read)" ~clients ~seconds ~dir lookup in
          let installs =
            K.load ~name:"dir install (one row)" ~clients ~seconds ~dir (fun c ->
                let cl = client rpcs c in
                install cl root)
          in
          Ok (lookups, installs)
        end
  in
  (try
     let ic = open_in "/proc/loadavg" in
     let l = input_line ic in
     close_in ic;
     Fmt.pr "load average (1, 5, 15 min) at the end: %s@."
       (String.concat " " (List.filteri (fun i _ -> i < 3) (String.split_on_char ' ' l)))
   with _ -> ());
  match (kv, dr) with
  | Ok (g, p), Ok (l, i) ->
      Fmt.pr "%a@.%a@.%a@.%a@." (pp_row None) g (pp_row (Some g)) l (pp_row None) p
        (pp_row (Some p)) i;
      0
  | Error e, _ | _, Error e ->
      Fmt.pr "%s@." e;
      1

let cmd =
  let clients =
    Arg.(
      value & opt Consort_cli.positive_int 4 & info [ "clients" ] ~docv:"N" ~doc:"Client processes.")
  in
  let seconds =
    Arg.(
      value & opt Consort_cli.positive_float 3.
      & info [ "seconds" ] ~docv:"S" ~doc:"Duration of each run.")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench dir" "dir"
       ~doc:
         "Directory lookups and installs per second and their latency with 3 replicas, beside the \
          key-value store's gets and puts.")
    Term.(const run $ clients $ seconds)
