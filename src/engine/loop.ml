open Consort

let src = Logs.Src.create "consort.loop" ~doc:"The event loop"

module Log = (val Logs.src_log src : Logs.LOG)

(* Timers live in a binary min-heap ordered by (time, seq); each knows its
   index so that cancelling removes it at once. *)
type timer = {
  time : Time.t;
  seq : int;
  f : unit -> unit;
  mutable index : int; (* -1 once fired or cancelled *)
  heap : heap;
}

and heap = { mutable a : timer array; mutable n : int; mutable next_seq : int }

type w = {
  fd : Unix.file_descr;
  cb : unit -> unit;
  try_read : (unit -> bool) option;
  wait_read : (unit -> bool) option;
  within : Time.t; (* the longest a [wait_read] may wait *)
  order : int;
  mutable active : bool;
}

type failure = Timer of exn | Descriptor of Unix.file_descr * exn

type t = {
  heap : heap;
  ws : (Unix.file_descr, w) Hashtbl.t;
  mutable next_order : int;
  mutable epfd : Unix.file_descr option; (* while something is watched *)
  ready : Unix.file_descr array;
  mutable running : bool;
  mutable stopped : bool;
  mutable errors : int;
  mutable on_error : (failure -> unit) option; (* the owner's, told of each callback that raised *)
  mutable pinned : bool; (* the epoll descriptor was given out: keep it *)
  mutable wakeup : unit -> unit; (* called when the earliest deadline moves earlier *)
  mutable spin : int; (* nanoseconds to poll before a wait blocks *)
  mutable spin_yield : bool; (* yield the CPU between two polls *)
  mutable only : w option; (* the one watched descriptor, when it can be read without a wait *)
  mutable skip : int; (* waits left before the next read without a wait *)
  mutable backoff : int; (* waits skipped after the last read that found nothing *)
  mutable kernel_waits : int;
  mutable early_reads : int;
  mutable tfd : Unix.file_descr option; (* the timer descriptor, in [epfd] *)
  mutable armed : Time.t; (* when it expires; [max_int] once that was seen, or never armed *)
  mutable timer_arms : int;
  mutable wskip : int; (* waits left before the next [wait_read] *)
  mutable wbackoff : int; (* waits skipped after the last [wait_read] that found nothing *)
  mutable wait_reads : int;
}

external epoll_create : unit -> Unix.file_descr = "consort_epoll_create"
external epoll_ctl : Unix.file_descr -> Unix.file_descr -> bool -> unit = "consort_epoll_ctl"
external epoll_wait : Unix.file_descr -> Unix.file_descr array -> int -> int = "consort_epoll_wait"
external sched_yield : unit -> unit = "consort_sched_yield" [@@noalloc]
external timerfd_create : Unix.file_descr -> Unix.file_descr = "consort_timerfd_create"
external timerfd_arm : Unix.file_descr -> int -> unit = "consort_timerfd_arm"

external clock_ns : unit -> (int[@untagged]) = "consort_clock_ns_byte" "consort_clock_ns"
[@@noalloc]

let now _ = clock_ns ()
let clock () = clock_ns ()

let create () =
  {
    heap = { a = [||]; n = 0; next_seq = 0 };
    ws = Hashtbl.create 8;
    next_order = 0;
    epfd = None;
    ready = Array.make 64 Unix.stdin;
    running = false;
    stopped = false;
    errors = 0;
    on_error = None;
    pinned = false;
    wakeup = ignore;
    spin = 0;
    spin_yield = false;
    only = None;
    skip = 0;
    backoff = 0;
    kernel_waits = 0;
    early_reads = 0;
    tfd = None;
    armed = max_int;
    timer_arms = 0;
    wskip = 0;
    wbackoff = 0;
    wait_reads = 0;
  }

(* Heap. *)

let before x y = x.time < y.time || (x.time = y.time && x.seq < y.seq)

let set h i x =
  h.a.(i) <- x;
  x.index <- i

let rec sift_up h i =
  if i > 0 then begin
    let p = (i - 1) / 2 in
    let x = h.a.(i) and y = h.a.(p) in
    if before x y then begin
      set h i y;
      set h p x;
      sift_up h p
    end
  end

let rec sift_down h i =
  let l = (2 * i) + 1 in
  if l < h.n then begin
    let r = l + 1 in
    let c = if r < h.n && before h.a.(r) h.a.(l) then r else l in
    let x = h.a.(i) and y = h.a.(c) in
    if before y x then begin
      set h i y;
      set h c x;
      sift_down h c
    end
  end

let push h x =
  if h.n = Array.length h.a then begin
    let a = Array.make (max 16 (2 * h.n)) x in
    Array.blit h.a 0 a 0 h.n;
    h.a <- a
  end;
  set h h.n x;
  h.n <- h.n + 1;
  sift_up h (h.n - 1)

let remove h i =
  let x = h.a.(i) in
  x.index <- -1;
  h.n <- h.n - 1;
  if i < h.n then begin
    set h i h.a.(h.n);
    sift_down h i;
    sift_up h i
  end;
  (* Let the collector have the removed closure. *)
  h.a.(h.n) <- h.a.(0)

let at t time f =
  let h = t.heap in
  let x = { time; seq = h.next_seq; f; index = -1; heap = h } in
  h.next_seq <- h.next_seq + 1;
  push h x;
  if x.index = 0 then t.wakeup ();
  x

let after t d f = at t (now t + d) f
let cancel x = if x.index >= 0 then remove x.heap x.index
let is_pending x = x.index >= 0
let timers t = t.heap.n

(* Descriptors. *)

(* The one watched descriptor that has a [try_read], if that is all. *)
let update_only t =
  t.only <-
    (if Hashtbl.length t.ws <> 1 then None
     else Hashtbl.fold (fun _ w _ -> if w.try_read = None then None else Some w) t.ws None);
  t.skip <- 0;
  t.backoff <- 0;
  t.wskip <- 0;
  t.wbackoff <- 0

let wait_quantum = 500_000

let watch ?try_read ?wait_read ?(wait_within = wait_quantum) t fd cb =
  if Hashtbl.mem t.ws fd then invalid_arg "Loop.watch: descriptor already watched";
  let ep = match t.epfd with Some ep -> ep | None -> epoll_create () in
  (try epoll_ctl ep fd true
   with e ->
     if Hashtbl.length t.ws = 0 then Unix.close ep;
     raise e);
  t.epfd <- Some ep;
  Hashtbl.replace t.ws fd
    {
      fd;
      cb;
      try_read;
      wait_read;
      within = Int.max wait_quantum wait_within;
      order = t.next_order;
      active = true;
    };
  t.next_order <- t.next_order + 1;
  update_only t

let unwatch t fd =
  match Hashtbl.find_opt t.ws fd with
  | None -> ()
  | Some w -> (
      w.active <- false;
      Hashtbl.remove t.ws fd;
      update_only t;
      match t.epfd with
      | None -> ()
      | Some ep ->
          (* The descriptor may be closed already, which unregisters it. *)
          (try epoll_ctl ep fd false with Unix.Unix_error _ -> ());
          if Hashtbl.length t.ws = 0 && not t.pinned then begin
            t.epfd <- None;
            Unix.close ep;
            Option.iter (fun f -> try Unix.close f with Unix.Unix_error _ -> ()) t.tfd;
            t.tfd <- None;
            t.armed <- max_int
          end)

let watched t = Hashtbl.length t.ws

let set_spin ?(yield = false) t ns =
  t.spin <- max 0 ns;
  t.spin_yield <- yield

let yield = sched_yield
let errors t = t.errors
let kernel_waits t = t.kernel_waits
let timer_arms t = t.timer_arms
let early_reads t = t.early_reads
let wait_reads t = t.wait_reads
let stop t = t.stopped <- true
let on_error t f = t.on_error <- Some f

(* A callback raised: logged once, counted, and the owner told. *)
let report t what e bt failure =
  t.errors <- t.errors + 1;
  Log.err (fun m ->
      m "%s raised %s@\n%s" what (Printexc.to_string e) (Printexc.raw_backtrace_to_string bt));
  match t.on_error with
  | None -> ()
  | Some f -> (
      try f failure
      with e2 -> Log.err (fun m -> m "the error handler raised %s" (Printexc.to_string e2)))

(* A timer fires once: one that raised is not called again. *)
let guard t f =
  try f ()
  with e ->
    let bt = Printexc.get_raw_backtrace () in
    report t "timer" e bt (Timer e)

(* A descriptor callback that raised is unwatched before anything else:
   its descriptor is most likely still readable (the callback failed
   before it consumed what is there), and a level-triggered wait would
   call it again at once, for ever. *)
let remove_failed t w =
  match Hashtbl.find_opt t.ws w.fd with Some w' when w' == w -> unwatch t w.fd | _ -> ()

let guard_fd t w f =
  try f ()
  with e ->
    let bt = Printexc.get_raw_backtrace () in
    remove_failed t w;
    report t "descriptor callback" e bt (Descriptor (w.fd, e))

(* Fires the timers due at [now] that existed when the round began, so that
   a timer that sets another for now cannot keep the loop here. *)
let rec fire_due t h now limit =
  if h.n > 0 && not t.stopped then begin
    let x = h.a.(0) in
    if x.time <= now && x.seq < limit then begin
      remove h 0;
      guard t x.f;
      fire_due t h now limit
    end
  end

let fire_timers t now = fire_due t t.heap now t.heap.next_seq

(* Before a wait that may block, a loop that watches one descriptor with a
   [try_read] reads it without waiting: in a ping-pong between two
   processes on one CPU, the answer is often there already (the peer ran
   when our datagram woke it), and the read saves the [epoll_wait] that
   would only say so. A read that finds nothing costs a system call: after
   one, the next [backoff] waits (doubling up to [max_backoff], back to 0
   when a read finds something) go straight to the kernel, so that a loop
   whose answers never come early pays for one read in [max_backoff]
   waits. [true] if the read served something (the loop then fires its
   timers and comes back here). *)
let max_backoff = 64

let read_early t wait =
  match t.only with
  | Some w when wait <> 0 && t.spin = 0 ->
      if t.skip > 0 then begin
        t.skip <- t.skip - 1;
        false
      end
      else begin
        let got =
          match w.try_read with
          | Some f when w.active -> (
              try f ()
              with e ->
                guard_fd t w (fun () -> raise e);
                false)
          | _ -> false
        in
        if got then begin
          t.early_reads <- t.early_reads + 1;
          t.backoff <- 0
        end
        else begin
          t.backoff <- (if t.backoff = 0 then 1 else Int.min max_backoff (2 * t.backoff));
          t.skip <- t.backoff
        end;
        got
      end
  | _ -> false

(* A loop that watches one descriptor with a [wait_read], no spin, and no
   deadline within its [within], waits by reading it: [wait_read] blocks
   until a datagram comes or at most [within] (the socket's receive
   timeout as the kernel applies it: whole clock ticks) has passed, and
   serves what came. One system call where the wait in [epoll_wait] and
   the read after it are two. A deadline nearer than [within] is waited
   for by [epoll_wait] with the timer descriptor, so a timer is never late
   for it. A [wait_read] that found
   nothing (the quantum passed: the descriptor is idle) is followed by
   waits in the kernel (1, 2, 4, up to [max_backoff] of them, back to none
   once a [wait_read] finds something), so that an idle loop wakes at most
   once in [max_backoff] waits for nothing. [true] if the wait was made
   (the loop then fires its timers and comes back here). *)
let read_waiting t wait =
  match t.only with
  | Some ({ wait_read = Some f; _ } as w)
    when w.active && t.spin = 0 && (not t.pinned) && (wait < 0 || wait >= w.within) ->
      if t.wskip > 0 then begin
        t.wskip <- t.wskip - 1;
        false
      end
      else begin
        let got =
          try f ()
          with e ->
            guard_fd t w (fun () -> raise e);
            false
        in
        if got then begin
          t.wait_reads <- t.wait_reads + 1;
          t.wbackoff <- 0
        end
        else begin
          t.wbackoff <- (if t.wbackoff = 0 then 1 else Int.min max_backoff (2 * t.wbackoff));
          t.wskip <- t.wbackoff
        end;
        true
      end
  | _ -> false

(* The descriptors that [epoll_wait] found ready, [n] of them in
   [t.ready], served in the order they were watched. *)
let serve_many t n =
  let ready = ref [] in
  for i = 0 to n - 1 do
    let fd = t.ready.(i) in
    match t.tfd with
    | Some f when f == fd -> t.armed <- max_int
    | _ -> ( match Hashtbl.find_opt t.ws fd with Some w -> ready := w :: !ready | None -> ())
  done;
  let ready =
    match !ready with
    | ([] | [ _ ]) as l -> l
    | l -> List.sort (fun a b -> compare a.order b.order) l
  in
  (* Callbacks may unwatch others: skip what is no longer active. *)
  List.iter (fun w -> if w.active && not t.stopped then guard_fd t w w.cb) ready

(* One ready descriptor, the common case: no list, and no lookup when it
   is the only one watched. *)
let serve_one t fd =
  match t.tfd with
  | Some f when f == fd -> t.armed <- max_int
  | _ -> (
      let w =
        match t.only with Some w when w.fd == fd -> t.only | _ -> Hashtbl.find_opt t.ws fd
      in
      match w with Some w -> if w.active && not t.stopped then guard_fd t w w.cb | None -> ())

(* Waits at most [wait] nanoseconds (forever if negative) and serves the
   descriptors that became readable, in the order they were watched. *)
let wait_and_serve ?(next = max_int) t wait =
  if read_waiting t wait then ()
  else if read_early t wait then ()
  else
    match t.epfd with
    | None -> if wait > 0 then Unix.sleepf (Time.to_sec wait)
    | Some ep ->
        (* With [spin], poll first: what comes within it is served without
         the wake-up of a sleeping process (tens of microseconds on an idle
         virtual CPU). *)
        let rec poll until =
          let n = epoll_wait ep t.ready 0 in
          if n > 0 then n
          else
            let left = until - now t in
            if left > 0 then begin
              if t.spin_yield then sched_yield ();
              poll until
            end
            else if wait < 0 then epoll_wait ep t.ready (-1)
            else epoll_wait ep t.ready (max 0 (wait - t.spin))
        in
        if wait <> 0 then t.kernel_waits <- t.kernel_waits + 1;
        let n =
          if t.spin > 0 && wait <> 0 then poll (now t + if wait < 0 then t.spin else min wait t.spin)
          else if wait > 0 then begin
            (* A wait with a timeout would arm a kernel timer and cancel it
             when a datagram comes first, each time: on a virtual machine,
             each of those can reprogram the CPU's timer (a trap to the
             hypervisor, microseconds). The timer descriptor is armed only
             when the deadline comes before the time it is armed for (or
             that time was seen); an earlier expiry wakes the loop early,
             which then arms it again. Without one (out of descriptors),
             the wait has its timeout. *)
            let tfd =
              match t.tfd with
              | Some _ as f -> f
              | None -> (
                  match timerfd_create ep with
                  | f ->
                      t.tfd <- Some f;
                      t.tfd
                  | exception Unix.Unix_error (e, fn, _) ->
                      Log.debug (fun m -> m "%s: %s" fn (Unix.error_message e));
                      None)
            in
            match tfd with
            | None -> epoll_wait ep t.ready wait
            | Some tfd ->
                let target = if next = max_int then now t + wait else next in
                if t.armed > target then begin
                  timerfd_arm tfd (target - now t);
                  t.armed <- target;
                  t.timer_arms <- t.timer_arms + 1
                end;
                epoll_wait ep t.ready (-1)
          end
          else epoll_wait ep t.ready wait
        in
        if n = 1 then serve_one t t.ready.(0) else serve_many t n

let run ?(until = fun () -> false) ?timeout t =
  if t.running then invalid_arg "Loop.run: already running";
  t.running <- true;
  t.stopped <- false;
  let deadline = match timeout with Some d -> now t + max 0 d | None -> max_int in
  let finish () =
    t.running <- false;
    t.stopped <- false
  in
  let rec go () =
    if t.stopped || until () then ()
    else begin
      let n = now t in
      if n >= deadline then ()
      else begin
        fire_timers t n;
        if t.stopped || until () then ()
        else if t.heap.n = 0 && Hashtbl.length t.ws = 0 then ()
        else begin
          let n = now t in
          let next = if t.heap.n > 0 then Int.min t.heap.a.(0).time deadline else deadline in
          let wait = if next = max_int then -1 else Int.max 0 (next - n) in
          wait_and_serve ~next t wait;
          go ()
        end
      end
    end
  in
  Fun.protect ~finally:finish go

(* Driving the loop from another event loop. *)

let descriptor t =
  let ep = match t.epfd with Some ep -> ep | None -> epoll_create () in
  t.epfd <- Some ep;
  t.pinned <- true;
  ep

let next_deadline t = if t.heap.n > 0 then Some t.heap.a.(0).time else None
let on_wakeup t f = t.wakeup <- f

let step t =
  if t.running then invalid_arg "Loop.step: the loop is running";
  t.running <- true;
  t.stopped <- false;
  Fun.protect
    ~finally:(fun () ->
      t.running <- false;
      t.stopped <- false)
    (fun () ->
      fire_timers t (now t);
      match t.epfd with Some _ when not t.stopped -> wait_and_serve t 0 | _ -> ())
