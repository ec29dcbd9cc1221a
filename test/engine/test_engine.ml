(* Tests of the event loop and the kernel UDP transport, over 127.0.0.1 and,
   for IP multicast, inside a network namespace of their own. *)

open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp

let qtest ?(seed = 42) (QCheck2.Test.Test cell as t) =
  Alcotest.test_case (QCheck2.Test.get_name cell) `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let ms = Time.of_ms
let addr s = match Udp.address_of_string s with Ok a -> a | Error e -> Alcotest.fail e
let pp_error = Transport.pp_error
let error = Alcotest.testable pp_error ( = )
let ok_unit = Alcotest.(result unit error)
let get = function Ok x -> x | Error e -> Alcotest.failf "unexpected error: %a" pp_error e

let with_pool f =
  Iovec.set_checked true;
  let pool = Pool.create ~name:"test" () in
  f pool;
  Alcotest.(check int) "no leaked buffers" 0 (Pool.leak_check pool)

(* A connection that keeps what it receives. *)
type rx = { mutable got : (Udp.address * string) list; mutable closed_calls : int }

let receiver () = { got = []; closed_calls = 0 }

let handler rx _c =
  {
    Udp.recv =
      (fun ~src v ->
        rx.got <- (src, Iovec.to_string v) :: rx.got;
        Iovec.release v);
    closed = (fun () -> rx.closed_calls <- rx.closed_calls + 1);
  }

let open_rx ?pool loop =
  let rx = receiver () in
  let c = get (Udp.open_with ?pool loop (addr "127.0.0.1:0") (handler rx)) in
  (c, rx)

(* A socket whose handler counts in [n] the datagrams it receives and
   releases them. *)
let open_counting ~pool loop n =
  get
    (Udp.open_with ~pool loop (addr "127.0.0.1:0") (fun _ ->
         {
           Udp.recv =
             (fun ~src:_ v ->
               incr n;
               Iovec.release v);
           closed = ignore;
         }))

(* A plain socket, outside the engine, and the loopback address of [c]
   to send to from it. *)
let plain_sender c =
  let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
  let port =
    match Udp.local c |> Udp.address_to_string |> String.split_on_char ':' with
    | [ _; p ] -> int_of_string p
    | _ -> Alcotest.fail "address"
  in
  (s, Unix.ADDR_INET (Unix.inet_addr_loopback, port))

let wait loop ?(timeout = ms 3000) cond =
  Loop.run loop ~timeout ~until:cond;
  cond ()

(* Loop. *)

let timers_in_order () =
  let loop = Loop.create () in
  let log = ref [] in
  let t0 = Loop.now loop in
  let note x () = log := x :: !log in
  ignore (Loop.at loop (t0 + ms 30) (note "c"));
  ignore (Loop.at loop (t0 + ms 10) (note "a"));
  ignore (Loop.at loop (t0 + ms 20) (note "b1"));
  ignore (Loop.at loop (t0 + ms 20) (note "b2"));
  ignore (Loop.at loop (t0 + ms 20) (note "b3"));
  ignore (Loop.at loop (t0 - ms 5) (note "past"));
  Loop.run loop ~timeout:(ms 2000);
  Alcotest.(check (list string)) "order" [ "past"; "a"; "b1"; "b2"; "b3"; "c" ] (List.rev !log);
  Alcotest.(check bool) "not before its time" true (Loop.now loop - t0 >= ms 30);
  Alcotest.(check int) "no timer left" 0 (Loop.timers loop)

(* The loop's clock is the monotonic one (Mtime_clock's), to the
   nanosecond. *)
let clock_monotonic () =
  let loop = Loop.create () in
  let m0 = Int64.to_int (Mtime_clock.now_ns ()) in
  let t0 = Loop.now loop in
  let m1 = Int64.to_int (Mtime_clock.now_ns ()) in
  Alcotest.(check bool)
    (Printf.sprintf "read between two readings of Mtime_clock (%d, %d, %d)" m0 t0 m1)
    true
    (m0 <= t0 && t0 <= m1);
  Unix.sleepf 0.002;
  let t1 = Loop.now loop in
  Alcotest.(check bool) "2 ms later: 2 ms to 1 s more" true (t1 - t0 >= ms 2 && t1 - t0 < ms 1000)

let cancel_works () =
  let loop = Loop.create () in
  let fired = ref [] in
  let note x () = fired := x :: !fired in
  let a = Loop.after loop (ms 5) (note "a") in
  let b = Loop.after loop (ms 5) (note "b") in
  let c = Loop.after loop (ms 10) (note "c") in
  let d = Loop.after loop (ms 1) (fun () -> Loop.cancel c) in
  Loop.cancel b;
  Loop.cancel b;
  Alcotest.(check bool) "b not pending" false (Loop.is_pending b);
  Alcotest.(check bool) "a pending" true (Loop.is_pending a);
  Loop.run loop ~timeout:(ms 1000);
  Alcotest.(check (list string)) "only a" [ "a" ] !fired;
  Alcotest.(check bool) "d fired" false (Loop.is_pending d);
  Loop.cancel a;
  Alcotest.(check int) "empty" 0 (Loop.timers loop)

(* Random timers and cancellations fire in (time, order set) order. *)
let heap_order =
  QCheck.Test.make ~name:"timer heap order under cancel" ~count:200
    QCheck.(list (pair (int_range 0 20) bool))
    (fun specs ->
      let loop = Loop.create () in
      let base = Loop.now loop - ms 100 in
      let fired = ref [] in
      let ts =
        List.mapi
          (fun i (dt, keep) ->
            (i, dt, keep, Loop.at loop (base + dt) (fun () -> fired := i :: !fired)))
          specs
      in
      List.iter (fun (_, _, keep, tm) -> if not keep then Loop.cancel tm) ts;
      Loop.run loop ~timeout:(ms 1000);
      let expect =
        List.filter (fun (_, _, keep, _) -> keep) ts
        |> List.stable_sort (fun (_, a, _, _) (_, b, _, _) -> compare a b)
        |> List.map (fun (i, _, _, _) -> i)
      in
      List.rev !fired = expect)

let timeout_returns () =
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  Loop.watch loop r (fun () -> Alcotest.fail "nothing was written");
  let t0 = Loop.now loop in
  Loop.run loop ~timeout:(ms 50);
  let took = Loop.now loop - t0 in
  Alcotest.(check bool) "waited the timeout" true (took >= ms 50);
  Alcotest.(check bool) "and not much longer" true (took < ms 1000);
  (* No descriptor and no timer: nothing to wait for. *)
  Loop.unwatch loop r;
  let t0 = Loop.now loop in
  Loop.run loop;
  Alcotest.(check bool) "idle run returns at once" true (Loop.now loop - t0 < ms 100);
  Unix.close r;
  Unix.close w

let until_and_stop () =
  let loop = Loop.create () in
  let n = ref 0 in
  let rec tick () =
    incr n;
    ignore (Loop.after loop (ms 1) tick)
  in
  tick ();
  Loop.run loop ~timeout:(ms 5000) ~until:(fun () -> !n >= 5);
  Alcotest.(check int) "until" 5 !n;
  ignore (Loop.after loop (ms 2) (fun () -> Loop.stop loop));
  let before = !n in
  Loop.run loop ~timeout:(ms 5000);
  Alcotest.(check bool) "stopped early" true (!n - before < 100);
  Alcotest.check_raises "no nesting" (Invalid_argument "Loop.run: already running") (fun () ->
      let inner = ref None in
      ignore
        (Loop.after loop 0 (fun () -> try Loop.run loop ~timeout:(ms 1) with e -> inner := Some e));
      Loop.run loop ~timeout:(ms 50);
      match !inner with Some e -> raise e | None -> ())

let fd_readiness () =
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  let got = Buffer.create 16 in
  Loop.watch loop r (fun () ->
      let b = Bytes.create 16 in
      let n = Unix.read r b 0 16 in
      Buffer.add_subbytes got b 0 n);
  Alcotest.check_raises "watched twice" (Invalid_argument "Loop.watch: descriptor already watched")
    (fun () -> Loop.watch loop r ignore);
  ignore (Loop.after loop (ms 5) (fun () -> ignore (Unix.write_substring w "ping" 0 4)));
  Alcotest.(check bool) "read" true (wait loop (fun () -> Buffer.contents got = "ping"));
  Loop.unwatch loop r;
  Alcotest.(check int) "unwatched" 0 (Loop.watched loop);
  Unix.close r;
  Unix.close w

(* A wait until a deadline arms the loop's kernel timer once, not on every
   wait: 200 bytes waiting in a pipe, read one per round, with a timer 10 s
   away, make 200 kernel waits and one arming; the timer still fires when
   due, not before. *)
let timer_armed_once () =
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  ignore (Unix.write_substring w (String.make 200 'x') 0 200);
  let read = ref 0 in
  Loop.watch loop r (fun () -> if Unix.read r (Bytes.create 1) 0 1 = 1 then incr read);
  let far = Loop.after loop (Time.of_sec 10.) ignore in
  let waits0 = Loop.kernel_waits loop and arms0 = Loop.timer_arms loop in
  Alcotest.(check bool)
    "all read" true
    (wait loop ~timeout:(Time.of_sec 5.) (fun () -> !read = 200));
  Alcotest.(check int) "kernel waits" 200 (Loop.kernel_waits loop - waits0);
  Alcotest.(check int) "armings" 1 (Loop.timer_arms loop - arms0);
  Loop.cancel far;
  let t0 = Loop.now loop in
  let fired = ref 0 in
  ignore (Loop.after loop (ms 15) (fun () -> fired := Loop.now loop));
  Alcotest.(check bool) "fired" true (wait loop (fun () -> !fired > 0));
  Alcotest.(check bool) "not early" true (!fired - t0 >= ms 15);
  Alcotest.(check bool) "not 100 ms late" true (!fired - t0 < ms 115);
  Loop.unwatch loop r;
  Unix.close r;
  Unix.close w

(* A loop that watches one descriptor with a [try_read] reads it before
   asking the kernel to wait (here a pipe, and a deadline within the wait
   quantum: a UDP socket waits by reading when no deadline is that near): a
   byte already there is served with no kernel wait. Then, with nothing to
   read, a read that finds nothing is followed by kernel waits only. *)
let reads_before_waiting () =
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  Unix.set_nonblock r;
  let got = ref 0 in
  let read () =
    match Unix.read r (Bytes.create 16) 0 16 with
    | n ->
        got := !got + n;
        n > 0
    | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) -> false
  in
  Loop.watch ~try_read:read loop r (fun () -> ignore (read ()));
  ignore (Unix.write_substring w "e" 0 1);
  let far = Loop.after loop (Time.of_sec 10.) ignore in
  Alcotest.(check bool) "received" true (wait loop (fun () -> !got = 1));
  Alcotest.(check int) "kernel waits" 0 (Loop.kernel_waits loop);
  Alcotest.(check int) "early reads" 1 (Loop.early_reads loop);
  Loop.run loop ~timeout:(ms 30);
  Alcotest.(check int) "still 1 early read" 1 (Loop.early_reads loop);
  Alcotest.(check bool) "then kernel waits" true (Loop.kernel_waits loop >= 1);
  Loop.cancel far;
  Loop.unwatch loop r;
  Unix.close r;
  Unix.close w

(* A loop that watches one UDP socket, with no deadline within the wait
   quantum, waits by reading it: 200 datagrams already there are served by
   a read that may wait, with no kernel wait. Idle, a timer is not late for
   that read: the read waits at most the quantum (the socket's receive
   timeout), and the timer, due in 20 ms, fires before an alarm set for 2 s
   rings (a read that waited on past its deadline would end only when the
   alarm's signal interrupts it). *)
let waits_by_reading () =
  let loop = Loop.create () in
  let c, rx = open_rx loop in
  let s, dst = plain_sender c in
  let n = 200 in
  for i = 1 to n do
    let d = string_of_int i in
    ignore (Unix.sendto_substring s d 0 (String.length d) [] dst)
  done;
  let far = Loop.after loop (Time.of_sec 10.) ignore in
  Alcotest.(check bool) "received" true (wait loop (fun () -> List.length rx.got = n));
  Alcotest.(check (list string))
    "in order"
    (List.init n (fun i -> string_of_int (i + 1)))
    (List.rev_map snd rx.got);
  Alcotest.(check int) "kernel waits" 0 (Loop.kernel_waits loop);
  Alcotest.(check int) "early reads" 0 (Loop.early_reads loop);
  Alcotest.(check bool) "reads that waited" true (Loop.wait_reads loop >= 1);
  Loop.cancel far;
  let rang = ref false in
  let old = Sys.signal Sys.sigalrm (Sys.Signal_handle (fun _ -> rang := true)) in
  Fun.protect
    ~finally:(fun () ->
      ignore (Unix.alarm 0);
      Sys.set_signal Sys.sigalrm old)
    (fun () ->
      let t0 = Loop.now loop in
      let fired = ref 0 and before_alarm = ref false in
      ignore
        (Loop.after loop (ms 20) (fun () ->
             fired := Loop.now loop;
             before_alarm := not !rang));
      ignore (Unix.alarm 2);
      Loop.run loop ~until:(fun () -> !fired > 0) ~timeout:(Time.of_sec 10.);
      Alcotest.(check bool) "fired" true (!fired > 0);
      Alcotest.(check bool) "not early" true (!fired - t0 >= ms 20);
      Alcotest.(check bool) "before the alarm" true !before_alarm);
  Udp.close c;
  Unix.close s

(* The kernel keeps a socket's receive timeout in whole clock ticks (a
   request of 500 us is one tick: 4 ms at 250 Hz) and a read may wait up
   to one more, so a loop waits by reading only when its next deadline is
   at least two of the socket's ticks away. On an idle socket, each of 20
   timers due in 1.5 ms (less than two ticks at any tick rate up to
   1000 Hz) is waited for in the kernel, with the timer descriptor: 20
   kernel waits; a read that waited for one would have held the loop up
   to a tick or two past it (or, on a socket without a receive timeout,
   until the alarm set for 10 s interrupts it). *)
let near_deadline_waits_in_kernel () =
  let loop = Loop.create () in
  let c, _ = open_rx loop in
  let n = 20 in
  let k0 = Loop.kernel_waits loop in
  let old = Sys.signal Sys.sigalrm (Sys.Signal_handle ignore) in
  Fun.protect
    ~finally:(fun () ->
      ignore (Unix.alarm 0);
      Sys.set_signal Sys.sigalrm old)
    (fun () ->
      ignore (Unix.alarm 10);
      for _ = 1 to n do
        let t0 = Loop.now loop in
        let fired = ref 0 in
        ignore (Loop.after loop (Time.of_us 1500) (fun () -> fired := Loop.now loop));
        Loop.run loop ~until:(fun () -> !fired > 0) ~timeout:(Time.of_sec 10.);
        Alcotest.(check bool) "fired" true (!fired > 0);
        Alcotest.(check bool) "not early" true (!fired - t0 >= Time.of_us 1500)
      done);
  Alcotest.(check int) "waits in the kernel" n (Loop.kernel_waits loop - k0);
  Udp.close c

(* Spinning (Loop.set_spin) serves what comes while it polls at once, and
   delays no timer: with 300 ms of spin, a timer due in 20 ms fires then,
   and bytes another process writes 30 ms later are read then, not when
   the spin ends. *)
let spin_polls () =
  let loop = Loop.create () in
  Loop.set_spin loop (ms 300);
  let r, w = Unix.pipe ~cloexec:true () in
  let read_at = ref 0. in
  Loop.watch loop r (fun () ->
      let b = Bytes.create 16 in
      ignore (Unix.read r b 0 16);
      read_at := Unix.gettimeofday ());
  let t0 = Unix.gettimeofday () in
  let fired = ref 0. in
  ignore (Loop.after loop (ms 20) (fun () -> fired := Unix.gettimeofday ()));
  Loop.run loop ~until:(fun () -> !fired > 0.) ~timeout:(ms 2000);
  let late = !fired -. t0 in
  Alcotest.(check bool)
    (Printf.sprintf "the timer fired after %.0f ms" (late *. 1000.))
    true
    (late > 0.015 && late < 0.2);
  let pid =
    match Unix.fork () with
    | 0 ->
        Unix.sleepf 0.03;
        ignore (Unix.write_substring w "x" 0 1);
        Unix._exit 0
    | pid -> pid
  in
  let t0 = Unix.gettimeofday () in
  Loop.run loop ~until:(fun () -> !read_at > 0.) ~timeout:(ms 2000);
  ignore (Unix.waitpid [] pid);
  let after = !read_at -. t0 in
  Alcotest.(check bool)
    (Printf.sprintf "read after %.0f ms" (after *. 1000.))
    true
    (after > 0.02 && after < 0.2);
  Loop.unwatch loop r;
  Unix.close r;
  Unix.close w

let closed_without_unwatch () =
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  Loop.watch loop r (fun () -> Alcotest.fail "closed descriptor called back");
  Unix.close r;
  Unix.close w;
  Loop.run loop ~timeout:(ms 30);
  Alcotest.(check int) "no errors" 0 (Loop.errors loop);
  Loop.unwatch loop r;
  let f = Filename.temp_file "consort" ".tmp" in
  let fd = Unix.openfile f [ Unix.O_RDONLY ] 0 in
  (match Loop.watch loop fd ignore with
  | () -> Alcotest.fail "watched a regular file"
  | exception Unix.Unix_error _ -> ());
  Alcotest.(check int) "not watched" 0 (Loop.watched loop);
  Unix.close fd;
  Sys.remove f

let raising_callbacks () =
  let loop = Loop.create () in
  let after = ref false in
  ignore (Loop.after loop 0 (fun () -> failwith "boom"));
  ignore (Loop.after loop (ms 1) (fun () -> after := true));
  Loop.run loop ~timeout:(ms 1000);
  Alcotest.(check bool) "loop went on" true !after;
  Alcotest.(check int) "counted" 1 (Loop.errors loop)

(* A descriptor whose callback raises before reading: the data stays, and
   a level-triggered wait would call it again at once, for ever (a full
   disk under a member's log made 270 lines of stderr a second). It is
   called once, unwatched, and the owner told; the loop goes on. *)
let raising_descriptor () =
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  let r2, w2 = Unix.pipe ~cloexec:true () in
  let calls = ref 0 and other = ref 0 and told = ref [] in
  Loop.on_error loop (fun f -> told := f :: !told);
  Loop.watch loop r (fun () ->
      incr calls;
      raise (Sys_error "No space left on device"));
  Loop.watch loop r2 (fun () ->
      let b = Bytes.create 16 in
      ignore (Unix.read r2 b 0 16);
      incr other);
  ignore (Unix.write_substring w "x" 0 1);
  ignore (Unix.write_substring w2 "y" 0 1);
  let later = ref false in
  ignore (Loop.after loop (ms 50) (fun () -> later := true));
  Loop.run loop ~until:(fun () -> !later) ~timeout:(ms 1000);
  Alcotest.(check int) "called once" 1 !calls;
  Alcotest.(check int) "the other served" 1 !other;
  Alcotest.(check bool) "loop went on" true !later;
  Alcotest.(check int) "counted" 1 (Loop.errors loop);
  Alcotest.(check int) "unwatched" 1 (Loop.watched loop);
  (match !told with
  | [ Loop.Descriptor (fd, Sys_error _) ] when fd == r -> ()
  | _ -> Alcotest.fail "the owner was not told once, of the descriptor");
  (* With a [try_read] (the one descriptor watched): the same. *)
  Loop.unwatch loop r2;
  let tries = ref 0 in
  told := [];
  Loop.watch loop r
    ~try_read:(fun () ->
      incr tries;
      failwith "read failed")
    (fun () ->
      incr tries;
      failwith "read failed");
  let later = ref false in
  ignore (Loop.after loop (ms 50) (fun () -> later := true));
  Loop.run loop ~until:(fun () -> !later) ~timeout:(ms 1000);
  Alcotest.(check int) "tried once" 1 !tries;
  Alcotest.(check int) "nothing watched" 0 (Loop.watched loop);
  Alcotest.(check int) "counted again" 2 (Loop.errors loop);
  (match !told with
  | [ Loop.Descriptor (fd, Failure _) ] when fd == r -> ()
  | _ -> Alcotest.fail "the owner was not told of the try_read");
  (* A timer that raises: told once, as a timer. *)
  told := [];
  ignore (Loop.after loop 0 (fun () -> failwith "boom"));
  Loop.run loop ~timeout:(ms 20);
  (match !told with
  | [ Loop.Timer (Failure _) ] -> ()
  | _ -> Alcotest.fail "the owner was not told of the timer");
  List.iter Unix.close [ r; w; r2; w2 ]

let no_starvation () =
  (* A timer that re-arms itself for "now" must let descriptors run. *)
  let loop = Loop.create () in
  let r, w = Unix.pipe ~cloexec:true () in
  let read = ref false in
  Loop.watch loop r (fun () -> read := true);
  let rec spin () = ignore (Loop.at loop (Loop.now loop) spin) in
  spin ();
  ignore (Unix.write_substring w "x" 0 1);
  Alcotest.(check bool) "descriptor served" true (wait loop ~timeout:(ms 1000) (fun () -> !read));
  Unix.close r;
  Unix.close w

(* Addresses. *)

let addresses () =
  let round s = Alcotest.(check string) s s (Udp.address_to_string (addr s)) in
  List.iter round [ "127.0.0.1:0"; "0.0.0.0:65535"; "255.255.255.255:1"; "10.20.30.40:5000" ];
  List.iter
    (fun s ->
      match Udp.address_of_string s with
      | Ok a -> Alcotest.failf "%S parsed as %a" s Udp.pp_address a
      | Error _ -> ())
    [
      "";
      "127.0.0.1";
      "127.0.0.1:";
      ":80";
      "1.2.3:4";
      "1.2.3.4.5:6";
      "256.1.1.1:1";
      "1.2.3.4:65536";
      "1.2.3.4:-1";
      "1.2.3.4:0x10";
      "a.b.c.d:1";
      "localhost:80";
      "1.2.3.4:1_0";
    ];
  Alcotest.(check bool) "equal" true (Udp.equal_address (addr "1.2.3.4:5") (addr "1.2.3.4:5"));
  Alcotest.(check bool) "not equal" false (Udp.equal_address (addr "1.2.3.4:5") (addr "1.2.3.4:6"))

let address_roundtrip =
  QCheck.Test.make ~name:"address strings round-trip" ~count:500
    QCheck.(tup5 (int_bound 255) (int_bound 255) (int_bound 255) (int_bound 255) (int_bound 65535))
    (fun (a, b, c, d, p) ->
      let s = Printf.sprintf "%d.%d.%d.%d:%d" a b c d p in
      match Udp.address_of_string s with Ok x -> Udp.address_to_string x = s | Error _ -> false)

(* UDP. *)

let u8 = Codec.uint8
let u32 = Codec.uint32

(* A datagram sent allocates nothing per send but its length checked and
   the triple that names its headers, 6 words (no closure, no exception
   handler's closures): 1000 sends of a
   16-byte message with a pushed header, to one address and as a cast to
   one address. The words are counted in the minor heap around the sends
   only (the count itself allocates a float, a few words in all). *)
let sends_allocate_little () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let b, _ = open_rx ~pool loop in
  let dst = Udp.local b in
  let m = Msg.create [ Pool.of_string pool "0123456789abcdef" ] |> Msg.push u32 7 in
  let n = 1000 in
  let words f =
    let w0 = Gc.minor_words () in
    for _ = 1 to n do
      f ()
    done;
    (Gc.minor_words () -. w0) /. float n
  in
  let ok = function Ok () -> () | Error _ -> Alcotest.fail "send" in
  let send = words (fun () -> ok (Udp.send a ~dst m)) in
  let dsts = [ dst ] in
  let cast = words (fun () -> ok (Udp.cast a ~dsts m)) in
  Msg.release m;
  Udp.close a;
  Udp.close b;
  if send > 6.5 then Alcotest.failf "%.1f minor words a send (at most 6)" send;
  if cast > 6.5 then Alcotest.failf "%.1f minor words a cast (at most 6)" cast

(* A datagram received by a loop that watches one UDP socket, one at a
   time as in a round trip, costs a bounded number of minor words: the
   read, the timers' round and the descriptor served make no closure and
   no list. Each of 500 datagrams is sent from a plain socket and the loop
   runs until the handler has it (read before any wait: it is there); the
   words counted include [Loop.run]'s own. 39 words; a closure per read or
   per round of timers is 6 to 9 more. *)
let receive_allocates_little () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let got = ref 0 in
  let c = open_counting ~pool loop got in
  let s, dst = plain_sender c in
  let far = Loop.after loop (Time.of_sec 60.) ignore in
  let until () = !got > 0 in
  let timeout = Time.of_sec 5. in
  let one () =
    got := 0;
    ignore (Unix.sendto_substring s "0123456789abcdef" 0 16 [] dst);
    Loop.run loop ~until ~timeout;
    if !got <> 1 then Alcotest.failf "%d datagrams received" !got
  in
  for _ = 1 to 50 do
    one ()
  done;
  let n = 500 in
  let w0 = Gc.minor_words () in
  for _ = 1 to n do
    one ()
  done;
  let words = (Gc.minor_words () -. w0) /. float n in
  Loop.cancel far;
  Udp.close c;
  Unix.close s;
  Fmt.pr "%.1f minor words a datagram received@." words;
  if words > 40.5 then Alcotest.failf "%.1f minor words a datagram received (at most 40)" words

(* Lone datagrams, one at a time as in a round trip, are read by calls
   that ask for one and are followed by no other call: 100 datagrams, 100
   recvmmsg calls, at least 75 of them for one (after a lone datagram, 4
   calls ask for one, then one asks for 4 again). Then a burst of 1000 is
   still read in batches: at most 30 calls (a call for one that got one
   every 5 calls at most, then 4, 8, ... 64 a call). *)
let lone_then_burst () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let got = ref 0 in
  let c = open_counting ~pool loop got in
  let s, dst = plain_sender c in
  let send () = ignore (Unix.sendto_substring s "0123456789abcdef" 0 16 [] dst) in
  let one () =
    got := 0;
    send ();
    if not (wait loop (fun () -> !got > 0)) then Alcotest.fail "not received";
    if !got <> 1 then Alcotest.failf "%d datagrams received" !got
  in
  for _ = 1 to 10 do
    one ()
  done;
  let calls0 = Udp.receive_calls () and single0 = Udp.single_receive_calls () in
  for _ = 1 to 100 do
    one ()
  done;
  Alcotest.(check int) "one call a datagram" 100 (Udp.receive_calls () - calls0);
  let single = Udp.single_receive_calls () - single0 in
  if single < 75 then Alcotest.failf "%d of 100 calls asked for one datagram (at least 75)" single;
  got := 0;
  let n = 1000 in
  for _ = 1 to n do
    send ()
  done;
  let calls0 = Udp.receive_calls () in
  if not (wait loop (fun () -> !got = n)) then Alcotest.failf "%d of %d received" !got n;
  let calls = Udp.receive_calls () - calls0 in
  if calls > 30 then Alcotest.failf "%d recvmmsg calls for a burst of %d" calls n;
  Alcotest.(check int) "none dropped" 0 (Udp.query c).dropped;
  Udp.close c;
  Unix.close s

let exchange () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, rxa = open_rx ~pool loop in
  let b, rxb = open_rx ~pool loop in
  let la = Udp.local a and lb = Udp.local b in
  Alcotest.(check bool) "real port" true (Udp.address_to_string la <> "127.0.0.1:0");
  let body = [ Pool.of_string pool "hello, "; Pool.of_string pool "scatter-gather world" ] in
  let msg = Msg.create body |> Msg.push u32 0xdeadbeef |> Msg.push u8 7 in
  let expect = Msg.to_string msg in
  Alcotest.(check int) "two headers" 5 (Msg.header_length msg);
  Alcotest.check ok_unit "send" (Ok ()) (Udp.send a ~dst:lb msg);
  Alcotest.(check bool) "caller keeps the message" true (Msg.is_live msg);
  Msg.release msg;
  let reply = Msg.of_string pool "pong" in
  Alcotest.check ok_unit "reply" (Ok ()) (Udp.send b ~dst:la reply);
  Msg.release reply;
  Alcotest.(check bool) "arrived" true (wait loop (fun () -> rxb.got <> [] && rxa.got <> []));
  Alcotest.(check (list (pair string string)))
    "byte-identical, with its source"
    [ (Udp.address_to_string la, expect) ]
    (List.map (fun (s, d) -> (Udp.address_to_string s, d)) rxb.got);
  Alcotest.(check (list string)) "reply" [ "pong" ] (List.map snd rxa.got);
  let ia = Udp.query a and ib = Udp.query b in
  Alcotest.(check int) "a sent" 1 ia.sent;
  Alcotest.(check int) "b received" 1 ib.received;
  Alcotest.(check int) "mtu" 65507 ib.mtu;
  Alcotest.(check bool) "no multicast" false ib.multicast;
  let rcv, snd = Udp.buffer_sizes a in
  Alcotest.(check bool) "buffers at least 1 MiB" true (rcv >= 1 lsl 20 && snd >= 1 lsl 20);
  Udp.close a;
  Udp.close b

let pulled_and_many_pieces () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let b, rxb = open_rx ~pool loop in
  (* A received message with a header pulled is sent on from after it. *)
  let v = Pool.of_string pool "\007forwarded" in
  let m = Msg.of_iovec v in
  let h, m = match Msg.pull u8 m with Ok x -> x | Error _ -> Alcotest.fail "pull" in
  Alcotest.(check int) "header" 7 h;
  Alcotest.check ok_unit "forward" (Ok ()) (Udp.send a ~dst:(Udp.local b) m);
  Msg.release m;
  (* More pieces than one sendmsg takes: sent from one copy. *)
  let pieces = List.init 100 (fun i -> Pool.of_string pool (Printf.sprintf "<%d>" i)) in
  let big = Msg.create pieces |> Msg.push u8 1 in
  let expect = Msg.to_string big in
  Alcotest.check ok_unit "many pieces" (Ok ()) (Udp.send a ~dst:(Udp.local b) big);
  Msg.release big;
  Alcotest.(check bool) "arrived" true (wait loop (fun () -> List.length rxb.got = 2));
  Alcotest.(check (list string)) "contents" [ "forwarded"; expect ] (List.rev_map snd rxb.got);
  Udp.close a;
  Udp.close b

let batch_receive () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool (Loop.create ()) in
  let n = 1000 in
  let seqs = ref [] in
  let b =
    get
      (Udp.open_with ~pool loop (addr "127.0.0.1:0") (fun _ ->
           {
             Udp.recv =
               (fun ~src:_ v ->
                 let cs = Iovec.cstruct v in
                 seqs := Int32.to_int (Cstruct.BE.get_uint32 cs 0) :: !seqs;
                 if Cstruct.length cs <> 200 then Alcotest.failf "size %d" (Cstruct.length cs);
                 Iovec.release v);
             closed = ignore;
           }))
  in
  let payload = Bytes.make 196 'x' in
  let t0 = Loop.now loop in
  for i = 0 to n - 1 do
    let m = Msg.create [ Pool.of_string pool (Bytes.to_string payload) ] |> Msg.push u32 i in
    if Udp.send a ~dst:(Udp.local b) m <> Ok () then Alcotest.fail "send";
    Msg.release m
  done;
  let t1 = Loop.now loop in
  let calls0 = Udp.receive_calls () in
  Alcotest.(check bool) "all received" true (wait loop (fun () -> List.length !seqs = n));
  let t2 = Loop.now loop in
  (* The batch grows from 4 to 64 datagrams a call: 4 + 8 + 16 + 32, then
     64 a call, and the read that finds none left. *)
  let calls = Udp.receive_calls () - calls0 in
  if calls > 25 then Alcotest.failf "%d recvmmsg calls for %d datagrams" calls n;
  Alcotest.(check (list int)) "each once, in order" (List.init n Fun.id) (List.rev !seqs);
  Alcotest.(check int) "none dropped at the receiver" 0 (Udp.query b).dropped;
  Alcotest.(check int) "counted" n (Udp.query b).received;
  Alcotest.(check int) "none dropped" 0 (Udp.query a).dropped;
  (* Then one datagram (the next call asks for 4) and reads that find
     nothing: none of it is taken for the kernel's drop counter. *)
  let m = Msg.create [ Pool.of_string pool (Bytes.to_string payload) ] |> Msg.push u32 n in
  if Udp.send a ~dst:(Udp.local b) m <> Ok () then Alcotest.fail "send";
  Msg.release m;
  Alcotest.(check bool) "one more" true (wait loop (fun () -> List.length !seqs = n + 1));
  Loop.run loop ~timeout:(ms 30);
  Alcotest.(check int) "none dropped at the receiver" 0 (Udp.query b).dropped;
  Fmt.pr "batch: %d datagrams of 200 B sent in %a (%.0f/s), received in %a (%.0f/s)@." n Time.pp
    (t1 - t0)
    (float n /. Time.to_sec (t1 - t0))
    Time.pp (t2 - t1)
    (float n /. Time.to_sec (t2 - t1));
  Udp.close a;
  Udp.close b

(* Throughput with sending and receiving interleaved, as a protocol would. *)
let throughput () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let count = ref 0 in
  let b = open_counting ~pool loop count in
  let n = 50_000 and chunk = 200 in
  let body = Pool.of_string pool (String.make 100 'y') in
  let sent = ref 0 in
  let rec burst () =
    if !sent < n then begin
      for _ = 1 to chunk do
        let m = Msg.create [ Iovec.retain body ] |> Msg.push u32 !sent in
        ignore (Udp.send a ~dst:(Udp.local b) m);
        Msg.release m;
        incr sent
      done;
      ignore (Loop.after loop 0 burst)
    end
  in
  let t0 = Loop.now loop in
  burst ();
  let lost () = (Udp.query a).dropped + (Udp.query b).dropped in
  Loop.run loop ~timeout:(ms 10_000) ~until:(fun () -> !sent = n && !count + lost () >= n);
  let dt = Loop.now loop - t0 in
  Iovec.release body;
  Fmt.pr "throughput: %d of %d datagrams of 104 B in %a: %.0f datagrams/s (%d dropped)@." !count n
    Time.pp dt
    (float !count /. Time.to_sec dt)
    (lost ());
  Alcotest.(check int) "every datagram accounted for" n (!count + lost ());
  Alcotest.(check bool) "most arrived" true (!count >= n * 9 / 10);
  Udp.close a;
  Udp.close b

(* Datagrams kept by the receiver (as Mnak keeps bundles until stable), 300
   at a time, released, then 300 again: the second window is served from
   the slots the first one gave back, not from new segments. *)
let kept_slots_reused () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let kept = ref [] and nkept = ref 0 in
  let b =
    get
      (Udp.open_with ~pool loop (addr "127.0.0.1:0") (fun _ ->
           {
             Udp.recv =
               (fun ~src:_ v ->
                 kept := v :: !kept;
                 incr nkept);
             closed = ignore;
           }))
  in
  let n = 300 in
  let body = Pool.of_string pool (String.make 3000 'k') in
  let window () =
    nkept := 0;
    let sent = ref 0 in
    let rec burst () =
      if !sent < n then begin
        for _ = 1 to 20 do
          let m = Msg.create [ Iovec.retain body ] |> Msg.push u32 !sent in
          ignore (Udp.send a ~dst:(Udp.local b) m);
          Msg.release m;
          incr sent
        done;
        ignore (Loop.after loop (ms 1) burst)
      end
    in
    burst ();
    let lost () = (Udp.query b).dropped in
    Loop.run loop ~timeout:(ms 10_000) ~until:(fun () -> !sent = n && !nkept + lost () >= n);
    Alcotest.(check int) "every datagram kept" n !nkept;
    (* A kept datagram is a view of its slot (over 2 KiB: not copied): the
       slot must go with it, not be received into again while it is kept. *)
    let seqs = Hashtbl.create n in
    List.iter
      (fun v ->
        let cs = Iovec.cstruct v in
        Hashtbl.replace seqs (Cstruct.to_string (Cstruct.sub cs 0 4)) ();
        if Cstruct.to_string (Cstruct.shift cs 4) <> String.make 3000 'k' then
          Alcotest.fail "a kept datagram's body was written over")
      !kept;
    Alcotest.(check int) "every kept datagram still its own" n (Hashtbl.length seqs)
  in
  window ();
  let first = Udp.receive_pool_stats () in
  List.iter Iovec.release !kept;
  kept := [];
  let freed = Udp.receive_pool_stats () in
  Alcotest.(check bool)
    "the kept slots are free again" true
    (freed.Pool.segments_free >= first.Pool.segments_free + n);
  window ();
  let second = Udp.receive_pool_stats () in
  Alcotest.(check int)
    "no segment made for the second window" first.Pool.segments_created second.Pool.segments_created;
  List.iter Iovec.release !kept;
  Iovec.release body;
  Udp.close a;
  Udp.close b

let fan_out () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let rs = List.init 70 (fun _ -> open_rx ~pool loop) in
  let dsts = List.map (fun (c, _) -> Udp.local c) rs in
  let m = Msg.of_string pool "to all" |> Msg.push u8 3 in
  Alcotest.check ok_unit "cast" (Ok ()) (Udp.cast a ~dsts m);
  Msg.release m;
  let all () = List.for_all (fun (_, rx) -> rx.got <> []) rs in
  Alcotest.(check bool) "all got it" true (wait loop all);
  List.iter
    (fun (_, rx) -> Alcotest.(check (list string)) "once" [ "\003to all" ] (List.map snd rx.got))
    rs;
  Alcotest.(check int) "sent, counted per destination" 70 (Udp.query a).sent;
  Alcotest.check ok_unit "cast to nobody" (Ok ())
    (let m = Msg.of_string pool "x" in
     let r = Udp.cast a ~dsts:[] m in
     Msg.release m;
     r);
  Udp.close a;
  List.iter (fun (c, _) -> Udp.close c) rs

let drop_filter () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let b, rxb = open_rx ~pool loop in
  let seen_src = ref [] in
  let filter ~src cs =
    seen_src := src :: !seen_src;
    Cstruct.get_uint8 cs 0 land 1 = 1
  in
  Alcotest.check ok_unit "set" (Ok ()) (Udp.control b (Udp.Drop_filter (Some filter)));
  let send i =
    let m = Msg.of_string pool (String.make 1 (Char.chr i) ^ "data") in
    ignore (Udp.send a ~dst:(Udp.local b) m);
    Msg.release m
  in
  for i = 0 to 99 do
    send i
  done;
  Alcotest.(check bool) "filtered" true (wait loop (fun () -> List.length !seen_src = 100));
  let ib = Udp.query b in
  Alcotest.(check int) "dropped" 50 ib.dropped;
  Alcotest.(check int) "received" 50 ib.received;
  Alcotest.(check bool)
    "only even ones" true
    (List.for_all (fun (_, d) -> Char.code d.[0] land 1 = 0) rxb.got);
  Alcotest.(check bool)
    "filter saw the source" true
    (List.for_all (Udp.equal_address (Udp.local a)) !seen_src);
  (* A filter that raises drops, and the loop goes on. *)
  Alcotest.check ok_unit "raising" (Ok ())
    (Udp.control b (Udp.Drop_filter (Some (fun ~src:_ _ -> failwith "bad filter"))));
  send 2;
  Alcotest.(check bool) "dropped too" true (wait loop (fun () -> (Udp.query b).dropped = 51));
  Alcotest.check ok_unit "unset" (Ok ()) (Udp.control b (Udp.Drop_filter None));
  send 1;
  Alcotest.(check bool) "passes again" true (wait loop (fun () -> (Udp.query b).received = 51));
  Udp.close a;
  Udp.close b

let bad_addresses () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  (match Udp.open_ loop (addr "203.0.113.7:0") (handler (receiver ())) with
  | Error (`Bad_address s) -> Alcotest.(check string) "names it" "203.0.113.7:0" s
  | Error e -> Alcotest.failf "wrong error %a" pp_error e
  | Ok _ -> Alcotest.fail "bound a foreign address");
  let a, _ = open_rx ~pool loop in
  let m = Msg.of_string pool "x" in
  Alcotest.check ok_unit "port 0"
    (Error (`Bad_address "127.0.0.1:0"))
    (Udp.send a ~dst:(addr "127.0.0.1:0") m);
  Alcotest.check ok_unit "group not multicast"
    (Error (`Bad_address "127.0.0.1:4000"))
    (Udp.control a (Udp.Join_multicast (addr "127.0.0.1:4000")));
  Msg.release m;
  let big = Msg.create [ Pool.alloc pool 65508 ] in
  Alcotest.check ok_unit "too big"
    (Error (`Too_big (65508, 65507)))
    (Udp.send a ~dst:(Udp.local a) big);
  Msg.release big;
  let b, rxb = open_rx ~pool loop in
  let max = Msg.create [ Pool.alloc pool 65507 ] in
  Alcotest.check ok_unit "largest" (Ok ()) (Udp.send a ~dst:(Udp.local b) max);
  Msg.release max;
  Alcotest.(check bool) "largest arrives" true (wait loop (fun () -> rxb.got <> []));
  Alcotest.(check int) "whole" 65507 (String.length (snd (List.hd rxb.got)));
  Udp.close a;
  Udp.close b

let address_in_use () =
  let loop = Loop.create () in
  let a, _ = open_rx loop in
  let s = Udp.address_to_string (Udp.local a) in
  (match Udp.open_ loop (Udp.local a) (handler (receiver ())) with
  | Error (`Address_in_use s') -> Alcotest.(check string) "names it" s s'
  | Error e -> Alcotest.failf "wrong error %a" pp_error e
  | Ok _ -> Alcotest.fail "bound twice");
  Udp.close a;
  let b, _ = open_rx loop in
  Udp.close b;
  (* Once closed, the port is free again. *)
  let c = get (Udp.open_ loop (addr s) (handler (receiver ()))) in
  Udp.close c

let closing () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let b, rxb = open_rx ~pool loop in
  Alcotest.(check int) "two watched" 2 (Loop.watched loop);
  Udp.close b;
  Udp.close b;
  Alcotest.(check int) "closed handler once" 1 rxb.closed_calls;
  Alcotest.(check int) "unwatched" 1 (Loop.watched loop);
  Alcotest.(check bool) "is_closed" true (Udp.is_closed b);
  let m = Msg.of_string pool "late" in
  Alcotest.check ok_unit "send after close" (Error `Closed) (Udp.send b ~dst:(Udp.local a) m);
  Alcotest.check ok_unit "cast after close" (Error `Closed) (Udp.cast b ~dsts:[ Udp.local a ] m);
  Alcotest.check ok_unit "control after close" (Error `Closed)
    (Udp.control b (Udp.Drop_filter None));
  (* Sending to a closed port is not an error for UDP. *)
  Alcotest.check ok_unit "to a closed port" (Ok ()) (Udp.send a ~dst:(Udp.local b) m);
  Alcotest.check ok_unit "again" (Ok ()) (Udp.send a ~dst:(Udp.local b) m);
  Msg.release m;
  Loop.run loop ~timeout:(ms 20);
  (* A handler that closes its connection in the middle of a batch. *)
  let n = ref 0 in
  let c =
    get
      (Udp.open_with ~pool loop (addr "127.0.0.1:0") (fun c ->
           {
             Udp.recv =
               (fun ~src:_ v ->
                 incr n;
                 Iovec.release v;
                 if !n = 3 then Udp.close c);
             closed = ignore;
           }))
  in
  for i = 1 to 10 do
    let m = Msg.of_string pool (string_of_int i) in
    ignore (Udp.send a ~dst:(Udp.local c) m);
    Msg.release m
  done;
  Loop.run loop ~timeout:(ms 100) ~until:(fun () -> Udp.is_closed c);
  Loop.run loop ~timeout:(ms 20);
  Alcotest.(check int) "nothing after close" 3 !n;
  Alcotest.(check int) "loop unharmed" 0 (Loop.errors loop);
  Udp.close a

let raising_handler () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  let a, _ = open_rx ~pool loop in
  let n = ref 0 in
  let b =
    get
      (Udp.open_with ~pool loop (addr "127.0.0.1:0") (fun _ ->
           {
             Udp.recv =
               (fun ~src:_ v ->
                 incr n;
                 Iovec.release v;
                 if !n = 1 then invalid_arg "handler bug");
             closed = ignore;
           }))
  in
  for i = 1 to 5 do
    let m = Msg.of_string pool (string_of_int i) in
    ignore (Udp.send a ~dst:(Udp.local b) m);
    Msg.release m
  done;
  Alcotest.(check bool) "all handled" true (wait loop (fun () -> !n = 5));
  Udp.close a;
  Udp.close b

(* A handler that runs another loop, whose connection receives meanwhile:
   neither batch is disturbed. *)
let nested_loops () =
  with_pool @@ fun pool ->
  let outer = Loop.create () and inner = Loop.create () in
  let a, _ = open_rx ~pool outer in
  let x, rxx = open_rx ~pool inner in
  let got = ref [] in
  let b =
    get
      (Udp.open_with ~pool outer (addr "127.0.0.1:0") (fun _ ->
           {
             Udp.recv =
               (fun ~src:_ v ->
                 got := Iovec.to_string v :: !got;
                 Iovec.release v;
                 if List.length !got = 1 then
                   Loop.run inner ~timeout:(ms 2000) ~until:(fun () -> List.length rxx.got = 5));
             closed = ignore;
           }))
  in
  let send c dst s =
    let m = Msg.of_string pool s in
    ignore (Udp.send c ~dst m);
    Msg.release m
  in
  for i = 1 to 5 do
    send a (Udp.local x) (Printf.sprintf "inner %d" i);
    send a (Udp.local b) (Printf.sprintf "outer %d" i)
  done;
  Alcotest.(check bool) "outer done" true (wait outer (fun () -> List.length !got = 5));
  Alcotest.(check (list string))
    "outer intact"
    (List.init 5 (fun i -> Printf.sprintf "outer %d" (i + 1)))
    (List.rev !got);
  Alcotest.(check (list string))
    "inner intact"
    (List.init 5 (fun i -> Printf.sprintf "inner %d" (i + 1)))
    (List.rev_map snd rxx.got);
  List.iter Udp.close [ a; b; x ]

(* Endpoint.Make (Udp): two one-layer stacks cast to each other. *)
module E = Consort_engine.Endpoint.Make (Udp)

module Pass = Layer.Pass (struct
  let name = "pass"
end)

let endpoint_over_udp () =
  with_pool @@ fun pool ->
  let loop = Loop.create () in
  (* Reserve two free ports, then let the endpoints bind them. *)
  let p1, _ = open_rx loop and p2, _ = open_rx loop in
  let members = [| Udp.address_to_string (Udp.local p1); Udp.address_to_string (Udp.local p2) |] in
  Udp.close p1;
  Udp.close p2;
  let got = Array.make 2 [] in
  let make rank =
    let view = View.v ~group:"g" ~members ~rank () in
    let app =
      {
        Stack.deliver =
          (fun _ m ->
            got.(rank) <- Msg.to_string m :: got.(rank);
            Msg.release m);
        ctl = ignore;
      }
    in
    match E.create ~pool loop ~view ~seed:rank ~layers:[ (module Pass) ] ~app () with
    | Ok e -> e
    | Error e -> Alcotest.failf "%a" Consort_engine.Endpoint.pp_error e
  in
  let e0 = make 0 and e1 = make 1 in
  E.cast e0 (Msg.of_string pool "from 0");
  E.send e1 0 (Msg.of_string pool "from 1");
  Alcotest.(check bool) "delivered" true (wait loop (fun () -> got.(0) <> [] && got.(1) <> []));
  Alcotest.(check (list string)) "at 1" [ "from 0" ] got.(1);
  Alcotest.(check (list string)) "at 0" [ "from 1" ] got.(0);
  E.close e0;
  E.close e1;
  Alcotest.(check int) "nothing watched" 0 (Loop.watched loop)

(* IP multicast, inside a network namespace. *)

let group = "239.192.7.11:47011"

let multicast_child () =
  let fail fmt =
    Printf.ksprintf
      (fun s ->
        prerr_endline ("multicast child: " ^ s);
        exit 1)
      fmt
  in
  let get = function Ok x -> x | Error e -> fail "%s" (Fmt.str "%a" pp_error e) in
  let loop = Loop.create () in
  let pool = Pool.create () in
  let open_ () =
    let rx = receiver () in
    let c = get (Udp.open_with ~pool loop (addr "127.0.0.1:0") (handler rx)) in
    get (Udp.control c (Udp.Join_multicast (addr group)));
    (c, rx)
  in
  let a, rxa = open_ () in
  let b, rxb = open_ () in
  let c, rxc = open_ () in
  if not ((Udp.query a).multicast && (Udp.query b).multicast) then fail "not marked multicast";
  let m = Msg.of_string pool "one for all" |> Msg.push Codec.uint8 9 in
  (* No unicast destinations: only the group can carry it. *)
  get (Udp.cast a ~dsts:[] m);
  Msg.release m;
  Loop.run loop ~timeout:(ms 3000) ~until:(fun () -> rxb.got <> [] && rxc.got <> []);
  (* Give duplicates, if any, time to show. *)
  Loop.run loop ~timeout:(ms 200);
  let show rx = String.concat "|" (List.map snd rx.got) in
  let want = "\009one for all" in
  if show rxb <> want then fail "b got [%s]" (show rxb);
  if show rxc <> want then fail "c got [%s]" (show rxc);
  if rxa.got <> [] then fail "the sender got its own datagram back [%s]" (show rxa);
  if (Udp.query a).sent <> 1 then fail "sent %d datagrams, not 1" (Udp.query a).sent;
  List.iter
    (fun (x, _) ->
      if not (Udp.equal_address x (Udp.local a)) then
        fail "wrong source %s" (Udp.address_to_string x))
    (rxb.got @ rxc.got);
  List.iter Udp.close [ a; b; c ];
  print_endline "multicast child: ok";
  exit 0

let multicast () = Netns_child.run ~what:"IP multicast test" ~ns:"consort-test" ~limit:20.0

let () =
  if Array.length Sys.argv > 1 && Sys.argv.(1) = "--multicast-child" then multicast_child ();
  Logs.set_reporter (Logs.format_reporter ());
  Logs.set_level (Some Logs.Warning);
  Alcotest.run "engine"
    [
      ( "loop",
        [
          Alcotest.test_case "timers fire in order" `Quick timers_in_order;
          Alcotest.test_case "cancel" `Quick cancel_works;
          Alcotest.test_case "the clock" `Quick clock_monotonic;
          qtest heap_order;
          Alcotest.test_case "run with a timeout returns" `Quick timeout_returns;
          Alcotest.test_case "until and stop" `Quick until_and_stop;
          Alcotest.test_case "descriptor readiness" `Quick fd_readiness;
          Alcotest.test_case "kernel timer armed once" `Quick timer_armed_once;
          Alcotest.test_case "reads before waiting" `Quick reads_before_waiting;
          Alcotest.test_case "waits by reading its one socket" `Quick waits_by_reading;
          Alcotest.test_case "a near deadline is waited for in the kernel" `Quick
            near_deadline_waits_in_kernel;
          Alcotest.test_case "spinning before a wait" `Quick spin_polls;
          Alcotest.test_case "descriptors closed or unwatchable" `Quick closed_without_unwatch;
          Alcotest.test_case "raising callbacks" `Quick raising_callbacks;
          Alcotest.test_case "a raising descriptor callback is not run again" `Quick
            raising_descriptor;
          Alcotest.test_case "timers do not starve descriptors" `Quick no_starvation;
        ] );
      ( "udp",
        [
          Alcotest.test_case "addresses" `Quick addresses;
          qtest address_roundtrip;
          Alcotest.test_case "exchange, scatter-gather" `Quick exchange;
          Alcotest.test_case "pulled headers and many pieces" `Quick pulled_and_many_pieces;
          Alcotest.test_case "batch receive of 1000" `Quick batch_receive;
          Alcotest.test_case "sends allocate little" `Quick sends_allocate_little;
          Alcotest.test_case "a datagram received allocates little" `Quick receive_allocates_little;
          Alcotest.test_case "lone datagrams, then a burst" `Quick lone_then_burst;
          Alcotest.test_case "throughput" `Quick throughput;
          Alcotest.test_case "cast by fan-out" `Quick fan_out;
          Alcotest.test_case "kept datagrams: their slots come back" `Quick kept_slots_reused;
          Alcotest.test_case "drop filter" `Quick drop_filter;
          Alcotest.test_case "bad addresses, sizes" `Quick bad_addresses;
          Alcotest.test_case "address in use" `Quick address_in_use;
          Alcotest.test_case "closing" `Quick closing;
          Alcotest.test_case "raising handler" `Quick raising_handler;
          Alcotest.test_case "a handler running another loop" `Quick nested_loops;
          Alcotest.test_case "Endpoint.Make (Udp)" `Quick endpoint_over_udp;
          Alcotest.test_case "IP multicast in a namespace" `Quick multicast;
        ] );
    ]
