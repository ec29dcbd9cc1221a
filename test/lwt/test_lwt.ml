(* A group inside Lwt's main loop: two members over real UDP on loopback,
   driven by Lwt_engine alone (no thread, no polling), while other Lwt
   work goes on. *)

module Loop = Consort_engine.Loop
module Group = Consort_group.Group
module G = Group.Make (Consort_engine.Udp)

let ( let* ) = Lwt.bind

let with_timeout secs what p =
  Lwt.pick
    [
      p;
      (let* () = Lwt_unix.sleep secs in
       Alcotest.failf "timed out after %.0f s waiting for %s" secs what);
    ]

let group_in_lwt () =
  let loop = Loop.create () in
  let attached = Consort_lwt.attach loop in
  let layers = Result.get_ok Consort_group.Properties.(layers vsync) in
  let addrs = [ "127.0.0.1:7481"; "127.0.0.1:7482" ] in
  let views = Array.make 2 0 and delivered = Array.make 2 [] and left = ref 0 in
  let member i addr =
    let cb =
      {
        Group.view = (fun v -> views.(i) <- Array.length v.members);
        cast = (fun ~origin:_ s -> delivered.(i) <- s :: delivered.(i));
        send = (fun ~origin:_ _ -> ());
        block = ignore;
        flow = ignore;
        exit = (fun () -> incr left);
      }
    in
    match G.join ~layers ~peers:addrs loop ~group:"lwt" ~addr cb with
    | Ok g -> g
    | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e
  in
  let a = member 0 "127.0.0.1:7481" and b = member 1 "127.0.0.1:7482" in
  (* Other Lwt work, which must keep running. *)
  let ticks = ref 0 and ticking = ref true in
  let rec tick () =
    if !ticking then (
      incr ticks;
      let* () = Lwt_unix.sleep 0.01 in
      tick ())
    else Lwt.return_unit
  in
  let program =
    let* () =
      with_timeout 10. "a view of two"
        (Consort_lwt.wait attached (fun () -> views.(0) = 2 && views.(1) = 2))
    in
    (* Casts given from Lwt code, outside any step of the loop. *)
    for k = 1 to 50 do
      ignore (G.cast a (Printf.sprintf "a%d" k));
      ignore (G.cast b (Printf.sprintf "b%d" k))
    done;
    let* () =
      with_timeout 10. "100 deliveries at each"
        (Consort_lwt.wait attached (fun () ->
             List.length delivered.(0) = 100 && List.length delivered.(1) = 100))
    in
    G.leave a;
    G.leave b;
    let* () = with_timeout 10. "both to leave" (Consort_lwt.wait attached (fun () -> !left = 2)) in
    ticking := false;
    Lwt.return_unit
  in
  let t0 = Unix.gettimeofday () in
  Lwt_main.run (Lwt.join [ program; tick () ]);
  let elapsed = Unix.gettimeofday () -. t0 in
  Consort_lwt.detach attached;
  (* FIFO from each sender, at both. *)
  let from p l = List.filter (fun s -> s.[0] = p) (List.rev l) in
  Array.iter
    (fun l ->
      Alcotest.(check (list string))
        "a's casts in order"
        (List.init 50 (fun k -> Printf.sprintf "a%d" (k + 1)))
        (from 'a' l);
      Alcotest.(check (list string))
        "b's casts in order"
        (List.init 50 (fun k -> Printf.sprintf "b%d" (k + 1)))
        (from 'b' l))
    delivered;
  if !ticks < int_of_float (elapsed /. 0.01 /. 4.) then
    Alcotest.failf "Lwt starved: %d ticks in %.2f s" !ticks elapsed;
  (* Driven by events, not by polling: a polling driver steps thousands of
     times a second. *)
  let per_sec = float_of_int (Consort_lwt.steps attached) /. elapsed in
  Printf.printf "%d steps in %.2f s (%.0f a second), %d Lwt ticks\n" (Consort_lwt.steps attached)
    elapsed per_sec !ticks;
  if per_sec > 300. then Alcotest.failf "%.0f steps a second: the loop is polled" per_sec

let timer_set_from_lwt () =
  (* A loop with no other timer and no descriptor: only on_wakeup can make
     Lwt wait for a timer set from Lwt code. *)
  let loop = Loop.create () in
  let attached = Consort_lwt.attach loop in
  let fired = ref false in
  let p =
    let* () = Lwt_unix.sleep 0.02 in
    ignore (Loop.after loop (Consort.Time.of_ms 50) (fun () -> fired := true));
    with_timeout 3. "a timer set from Lwt code" (Consort_lwt.wait attached (fun () -> !fired))
  in
  Lwt_main.run p;
  Consort_lwt.detach attached;
  Alcotest.(check bool) "fired" true !fired

let () =
  Alcotest.run "lwt"
    [
      ( "lwt",
        [
          Alcotest.test_case "a group in Lwt's main loop" `Quick group_in_lwt;
          Alcotest.test_case "a timer set from Lwt code" `Quick timer_set_from_lwt;
        ] );
    ]
