open Cmdliner
open Consort_cap
module Store = Consort_capfs.Store
module Fs_server = Consort_capfs_server.Fs_server
module Fs_client = Consort_capfs_server.Fs_client
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module R = Rpc_udp

let clock () = int_of_float (Unix.gettimeofday () *. 1e9)

(* The size of a read, as consort cap fs get reads. *)
let read_size = 1 lsl 20

(* consort bench fs: reading a 100 MB file from the server beside cat. *)

let bench_fs size_mb rounds json =
  let exe = Consort_bench.Exe.consort () in
  let dir = Consort_local.temp_dir "consort-bench-fs" in
  let server = ref None in
  let cleanup_server () =
    match !server with
    | Some pid -> (
        server := None;
        (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
        try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ())
    | None -> ()
  in
  let cleanup () =
    cleanup_server ();
    Consort_local.rm_rf dir
  in
  Fun.protect ~finally:cleanup @@ fun () ->
  let file = Filename.concat dir "file" and data = Filename.concat dir "data" in
  let size = size_mb * 1_000_000 in
  let oc = open_out_bin file in
  let st = Random.State.make [| 42 |] in
  let chunk = Bytes.create 1_000_000 in
  for _ = 1 to size_mb do
    for i = 0 to Bytes.length chunk - 1 do
      Bytes.unsafe_set chunk i (Char.unsafe_chr (Random.State.bits st land 255))
    done;
    output_bytes oc chunk
  done;
  close_out oc;
  let addr = Printf.sprintf "127.0.0.1:%d" (Consort_local.free_port ()) in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
  (* Starts the server; its first line. *)
  let start_server params =
    let r, w = Unix.pipe ~cloexec:true () in
    let pid =
      Unix.create_process exe
        (Array.append
           [| exe; "cap"; "fs"; "serve"; "--new"; "--data"; data; "--bind"; addr |]
           params)
        devnull w devnull
    in
    server := Some pid;
    Unix.close w;
    let ic = Unix.in_channel_of_descr r in
    let line = try input_line ic with End_of_file -> "" in
    close_in ic;
    line
  in
  let line = start_server [||] in
  let env = Array.append [| "CONSORT_LOCATE=" ^ addr |] (Unix.environment ()) in
  (* The server's CPU time so far (Linux: /proc/PID/stat, in clock ticks of
     1/100 s), or nan. *)
  let server_time () =
    match !server with
    | None -> nan
    | Some pid -> (
        try
          let ic = open_in (Printf.sprintf "/proc/%d/stat" pid) in
          let l = Fun.protect ~finally:(fun () -> close_in ic) (fun () -> input_line ic) in
          let rest =
            String.sub l (String.rindex l ')' + 2) (String.length l - String.rindex l ')' - 2)
          in
          match String.split_on_char ' ' rest with
          | _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: _ :: ut :: st :: _ ->
              (float_of_string ut /. 100.) +. (float_of_string st /. 100.)
          | _ -> nan
        with _ -> nan)
  in
  (* Runs [argv]: its exit status, wall time, CPU time, and the server's CPU
     time meanwhile. *)
  let run argv ~stdout =
    let t0 = Unix.gettimeofday () and c0 = Unix.times () and s0 = server_time () in
    let pid = Unix.create_process_env argv.(0) argv env devnull stdout Unix.stderr in
    let _, st = Unix.waitpid [] pid in
    let c1 = Unix.times () and s1 = server_time () in
    ( st,
      Unix.gettimeofday () -. t0,
      c1.tms_cutime +. c1.tms_cstime -. c0.tms_cutime -. c0.tms_cstime,
      s1 -. s0 )
  in
  match String.split_on_char ' ' line with
  | [ "server"; scap ] -> (
      let out = Filename.concat dir "cap" in
      let o =
        Unix.openfile out [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600
      in
      let st, put_s, _, _ = run [| exe; "cap"; "fs"; "put"; "--server"; scap; file |] ~stdout:o in
      Unix.close o;
      match st with
      | Unix.WEXITED 0 -> (
          let cap =
            let ic = open_in_bin out in
            Fun.protect ~finally:(fun () -> close_in ic) (fun () -> String.trim (input_line ic))
          in
          let blob =
            match Sys.readdir (Filename.concat data "blobs") with
            | [| b |] -> Filename.concat (Filename.concat data "blobs") b
            | _ -> file
          in
          (* Each round: cat, then the get, then (as between machines) the get
             with 8 KB fragments; every ratio is of one round's figures. *)
          let lan = [| "--params"; "rpc.loopback_fragment=0" |] in
          match
            List.init rounds (fun _ ->
                let st1, t_cat, c_cat, _ = run [| "cat"; blob |] ~stdout:devnull in
                let st2, t_get, c_get, s_get =
                  run [| exe; "cap"; "fs"; "get"; cap |] ~stdout:devnull
                in
                let st3, t_lan, _, _ =
                  run (Array.append [| exe; "cap"; "fs"; "get"; cap |] lan) ~stdout:devnull
                in
                if st1 <> Unix.WEXITED 0 || st2 <> Unix.WEXITED 0 || st3 <> Unix.WEXITED 0 then
                  raise Exit;
                (t_cat, t_get, t_lan, c_cat, c_get, s_get))
          with
          | exception Exit ->
              Fmt.epr "consort: bench fs: a read failed@.";
              1
          | rounds_l ->
              Unix.close devnull;
              (* The store alone, in this process, once the server is gone. *)
              cleanup_server ();
              let t_store =
                match Store.open_ ~clock data with
                | Error _ -> nan
                | Ok (store, _) ->
                    Fun.protect ~finally:(fun () -> Store.close store) @@ fun () ->
                    let obj = List.hd (Store.files store) in
                    let buf = Bytes.create read_size in
                    let best = ref infinity in
                    for _ = 1 to rounds do
                      let t0 = Unix.gettimeofday () in
                      let rec go off =
                        match Store.read_into store obj ~off buf 0 (Bytes.length buf) with
                        | Ok 0 | Error _ -> ()
                        | Ok n -> go (off + n)
                      in
                      go 0;
                      best := min !best (Unix.gettimeofday () -. t0)
                    done;
                    !best
              in
              let mbs t = float size /. 1e6 /. t in
              let load =
                try
                  let ic = open_in "/proc/loadavg" in
                  Fun.protect
                    ~finally:(fun () -> close_in ic)
                    (fun () -> List.hd (String.split_on_char ' ' (input_line ic)))
                with _ -> "?"
              in
              Fmt.pr
                "File server: reading a %d MB file, %d rounds (load %s; the put took %.2f s, %.1f \
                 MB/s)@."
                size_mb rounds load put_s (mbs put_s);
              List.iteri
                (fun i (t_cat, t_get, t_lan, c_cat, c_get, s_get) ->
                  Fmt.pr
                    "  round %d: cat %.1f MB/s, get %.1f MB/s (8 KB fragments %.1f), ratio %.3f; \
                     CPU: cat %.3f s, get %.3f s, server %.3f s@."
                    (i + 1) (mbs t_cat) (mbs t_get) (mbs t_lan) (t_cat /. t_get) c_cat c_get s_get)
                rounds_l;
              let median key =
                let a = Array.of_list rounds_l in
                Array.sort (fun x y -> compare (key x) (key y)) a;
                a.(Array.length a / 2)
              in
              let t_cat, t_get, _, _, _, _ = median (fun (c, g, _, _, _, _) -> c /. g) in
              let t_cat8, _, t_lan, _, _, _ = median (fun (c, _, l, _, _, _) -> c /. l) in
              Fmt.pr "  the median round of each comparison, both sides from that round:@.";
              Fmt.pr "  %-36s %8s  %8s@." "" "rate" "time";
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s@." "cat of the stored file" (mbs t_cat) t_cat;
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s  ratio get / cat %.3f@."
                "consort cap fs get (RPC, loopback)" (mbs t_get) t_get (t_cat /. t_get);
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s  ratio to cat %.3f (cat %.1f MB/s)@."
                "the same, 8 KB fragments (LAN)" (mbs t_lan) t_lan (t_cat8 /. t_lan) (mbs t_cat8);
              Fmt.pr "  %-36s %8.1f MB/s  %7.3f s@." "the store alone (in process)" (mbs t_store)
                t_store;
              (* Per second of CPU of the busier process (server or reader: they
             run side by side), which other load does not change. *)
              let _, _, _, c_cat, c_get, s_get =
                median (fun (_, _, _, c, g, sv) -> c /. Float.max g sv)
              in
              let busier = Float.max c_get s_get in
              Fmt.pr
                "  per second of CPU (cat's; the busier of server and reader): cat %.1f MB/s, get \
                 %.1f MB/s, ratio %.3f@."
                (mbs c_cat) (mbs busier) (c_cat /. busier);
              (* Every byte read is sealed by the server and opened by the client
             (two processes, so the two overlap): the cipher's rate on one
             side bounds any encrypted read. *)
              let seal = Consort_cap_bench.Rpc_bench.gcm_seal (size / 2) in
              Fmt.pr
                "  what bounds it: AES-256-GCM sealing 60 KB fragments alone, %.1f MB/s per second \
                 of CPU: ratio to cat %.3f;@."
                seal
                (seal /. mbs c_cat);
              Fmt.pr "  the get reaches %.0f%% of that (per second of CPU of the busier side)@."
                (100. *. mbs busier /. seal);
              if json then
                Fmt.pr
                  "{\"bench\":\"fs\",\"size_mb\":%d,\"cat_mbs\":%.1f,\"get_mbs\":%.1f,\"ratio\":%.4f,\"cat_cpu_s\":%.3f,\"get_cpu_s\":%.3f,\"server_cpu_s\":%.3f,\"store_mbs\":%.1f,\"put_mbs\":%.1f,\"gcm_seal_mbs\":%.1f,\"get_cpu_mbs\":%.1f,\"cat_cpu_mbs\":%.1f,\"get_8k_mbs\":%.1f}@."
                  size_mb (mbs t_cat) (mbs t_get) (t_cat /. t_get) c_cat c_get s_get (mbs t_store)
                  (mbs put_s) seal (mbs busier) (mbs c_cat) (mbs t_lan);
              0)
      | _ ->
          Fmt.epr "consort: bench fs: the put failed@.";
          1)
  | _ ->
      Fmt.epr "consort: bench fs: the server did not start@.";
      1

let bench =
  let size =
    Arg.(
      value & opt Consort_cli.positive_int 100 & info [ "size" ] ~docv:"MB" ~doc:"File size in MB.")
  in
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "rounds" ] ~docv:"N"
          ~doc:
            "Rounds, each timing cat and the reads; the median round of each comparison is shown.")
  in
  let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.") in
  Cmd.v
    (Consort_cli.info ~path:"bench fs" "fs"
       ~doc:"File server read throughput of a 100 MB file beside cat of the same file.")
    Term.(const bench_fs $ size $ rounds $ json)
