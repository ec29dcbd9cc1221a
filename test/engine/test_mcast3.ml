(* Three processes exchange 10,000 reliable multicasts over kernel UDP on
   127.0.0.1, each dropping 20% of the datagrams it receives, and each
   checks exactly-once FIFO delivery (see mcast_peer.ml). *)

let peer_exe () = Filename.concat (Filename.dirname Sys.executable_name) "mcast_peer.exe"

(* Free ports: bind to port 0, note the port, let it go. *)
let free_addresses n =
  let socks =
    List.init n (fun _ ->
        let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
        Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
        s)
  in
  let addrs =
    List.map
      (fun s ->
        match Unix.getsockname s with
        | Unix.ADDR_INET (_, p) -> Printf.sprintf "127.0.0.1:%d" p
        | Unix.ADDR_UNIX _ -> assert false)
      socks
  in
  List.iter Unix.close socks;
  addrs

let read_file f =
  let ic = open_in_bin f in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  s

(* Waits for all [pids] until [limit] seconds have passed, then kills
   those still running (only these, by PID). *)
let wait_all pids limit =
  let t0 = Unix.gettimeofday () in
  let status = Hashtbl.create 3 in
  let rec go () =
    List.iter
      (fun pid ->
        if not (Hashtbl.mem status pid) then
          match Unix.waitpid [ Unix.WNOHANG ] pid with
          | 0, _ -> ()
          | _, st -> Hashtbl.replace status pid (`Exited st))
      pids;
    if Hashtbl.length status = List.length pids then ()
    else if Unix.gettimeofday () -. t0 > limit then
      List.iter
        (fun pid ->
          if not (Hashtbl.mem status pid) then begin
            (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
            ignore (Unix.waitpid [] pid);
            Hashtbl.replace status pid `Killed
          end)
        pids
    else begin
      Unix.sleepf 0.02;
      go ()
    end
  in
  go ();
  List.map (Hashtbl.find status) pids

let three_processes () =
  let exe = peer_exe () in
  if not (Sys.file_exists exe) then Alcotest.failf "peer program %s not found" exe;
  let addrs = free_addresses 3 in
  let counts = "3334,3333,3333" and loss = "0.2" and seed = "7" and deadline = "40" in
  let t0 = Unix.gettimeofday () in
  let peers =
    List.init 3 (fun rank ->
        let out = Filename.temp_file (Printf.sprintf "consort-peer%d-" rank) ".log" in
        let fd = Unix.openfile out [ Unix.O_WRONLY; Unix.O_TRUNC; Unix.O_CLOEXEC ] 0o600 in
        let argv =
          Array.of_list ((exe :: string_of_int rank :: addrs) @ [ counts; loss; seed; deadline ])
        in
        let pid = Unix.create_process exe argv Unix.stdin fd fd in
        Unix.close fd;
        (rank, pid, out))
  in
  let results = wait_all (List.map (fun (_, pid, _) -> pid) peers) 50. in
  let took = Unix.gettimeofday () -. t0 in
  let outputs =
    List.map
      (fun (rank, _, out) ->
        let s = read_file out in
        Sys.remove out;
        (rank, s))
      peers
  in
  List.iter (fun (_, s) -> print_string s) outputs;
  Printf.printf "three peers finished in %.2fs\n%!" took;
  List.iter2
    (fun (rank, _, _) result ->
      let out = List.assoc rank outputs in
      match result with
      | `Exited (Unix.WEXITED 0) -> ()
      | `Exited (Unix.WEXITED n) -> Alcotest.failf "peer %d exited %d:\n%s" rank n out
      | `Exited _ -> Alcotest.failf "peer %d died from a signal:\n%s" rank out
      | `Killed -> Alcotest.failf "peer %d timed out and was killed:\n%s" rank out)
    peers results;
  List.iter
    (fun (rank, out) ->
      let expect = Printf.sprintf "peer %d: OK delivered 10000/10000" rank in
      let has =
        let n = String.length expect in
        let rec find i =
          i + n <= String.length out && (String.sub out i n = expect || find (i + 1))
        in
        find 0
      in
      if not has then Alcotest.failf "peer %d did not report full delivery:\n%s" rank out)
    outputs

let () =
  Alcotest.run "mcast3"
    [
      ( "reliable multicast",
        [ Alcotest.test_case "3 processes, 10,000 casts, 20% loss" `Quick three_processes ] );
    ]
