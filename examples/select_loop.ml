(* A group driven from a loop that is not Consort's: a hand-written
   Unix.select loop that also serves its own descriptor (a pipe it writes
   ticks into), with no thread and no polling. Consort's loop gives one
   descriptor to wait on (Loop.descriptor), its next deadline
   (Loop.next_deadline) and a step function (Loop.step). This loop reads
   the deadline again at each turn; a host that sets its timer once would
   also use Loop.on_wakeup, called when a new timer comes earlier.
   Two members over real UDP on 127.0.0.1:7496-7497 form a view, cast, and
   leave. Run with: dune exec examples/select_loop.exe *)

module Loop = Consort_engine.Loop
module Group = Consort_group.Group
module G = Group.Make (Consort_engine.Udp)

let loop = Loop.create ()
let layers = Result.get_ok (Consort_group.Properties.(layers vsync))
let addrs = [ "127.0.0.1:7496"; "127.0.0.1:7497" ]
let members_seen = ref 0 and delivered = ref 0 and left = ref 0

let member addr =
  let callbacks =
    { Group.view = (fun v -> members_seen := Array.length v.members);
      cast = (fun ~origin s -> Fmt.pr "%s: %s says %S@." addr origin s; incr delivered);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = (fun () -> incr left) }
  in
  match G.join ~layers ~peers:addrs loop ~group:"select-chat" ~addr callbacks with
  | Ok g -> g
  | Error e -> Fmt.failwith "%s cannot join: %a" addr Group.pp_join_error e

(* The host loop: Consort's descriptor and the host's own, and a timeout
   that is the earlier of Consort's next deadline and the host's own tick. *)
let consort_fd = Loop.descriptor loop
let ticks_r, ticks_w = Unix.pipe ~cloexec:true ()
let steps = ref 0 and ticks = ref 0 and next_tick = ref (Unix.gettimeofday ())

let turn () =
  let now = Unix.gettimeofday () in
  let until_tick = Float.max 0. (!next_tick -. now) in
  let until_consort =
    match Loop.next_deadline loop with
    | None -> until_tick
    | Some d -> Float.max 0. (Consort.Time.to_sec (Consort.Time.diff d (Loop.now loop)))
  in
  let timeout = Float.min until_tick until_consort in
  let ready, _, _ =
    try Unix.select [ consort_fd; ticks_r ] [] [] timeout
    with Unix.Unix_error (Unix.EINTR, _, _) -> ([], [], [])
  in
  if List.mem ticks_r ready then ignore (Unix.read ticks_r (Bytes.create 64) 0 64);
  if Unix.gettimeofday () >= !next_tick then begin
    (* The host's own work: a tick every 10 ms, through its own pipe. *)
    incr ticks;
    next_tick := !next_tick +. 0.01;
    ignore (Unix.write_substring ticks_w "t" 0 1)
  end;
  (* Consort's turn: only when its descriptor is ready or its deadline passed. *)
  let due =
    match Loop.next_deadline loop with Some d -> compare d (Loop.now loop) <= 0 | None -> false
  in
  if List.mem consort_fd ready || due then begin
    incr steps;
    Loop.step loop
  end

let run_until what secs cond =
  let deadline = Unix.gettimeofday () +. secs in
  while not (cond ()) do
    if Unix.gettimeofday () > deadline then (Fmt.epr "timed out waiting for %s@." what; exit 1);
    turn ()
  done

let () =
  let a = member "127.0.0.1:7496" and b = member "127.0.0.1:7497" in
  run_until "a view of two" 10. (fun () -> !members_seen = 2);
  ignore (G.cast a "hello from a select loop");
  run_until "two deliveries" 10. (fun () -> !delivered = 2);
  G.leave a;
  G.leave b;
  run_until "both to leave" 10. (fun () -> !left = 2);
  Fmt.pr "done: the host ticked %d times meanwhile, Consort's loop was stepped %d times@." !ticks
    !steps
