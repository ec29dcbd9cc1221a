open Consort

let src = Logs.Src.create "consort.loop" ~doc:"The event loop"

module Log = (val Logs.src_log src : Logs.LOG)

(* Timers live in a binary min-heap ordered by (time, seq); each knows its
   index so that cancelling removes it at once. *)
type timer = {
  time : Time.t;
  seq : int;
  f : unit -> unit;
  mutable index : int;  (* -1 once fired or cancelled *)
  heap : heap;
}

and heap = { mutable a : timer array; mutable n : int; mutable next_seq : int }

type w = { fd : Unix.file_descr; cb : unit -> unit; mutable active : bool }

type t = {
  heap : heap;
  mutable ws : w list;  (* in the order they were watched *)
  mutable fds : Unix.file_descr list;  (* cached for select *)
  mutable running : bool;
  mutable stopped : bool;
  mutable errors : int;
}

let now _ = Int64.to_int (Mtime_clock.now_ns ())

let create () =
  {
    heap = { a = [||]; n = 0; next_seq = 0 };
    ws = [];
    fds = [];
    running = false;
    stopped = false;
    errors = 0;
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
  x

let after t d f = at t (now t + d) f
let cancel x = if x.index >= 0 then remove x.heap x.index
let is_pending x = x.index >= 0
let timers t = t.heap.n

(* Descriptors. *)

let refresh t = t.fds <- List.map (fun w -> w.fd) t.ws

let watch t fd cb =
  if List.exists (fun w -> w.fd = fd) t.ws then invalid_arg "Loop.watch: descriptor already watched";
  t.ws <- t.ws @ [ { fd; cb; active = true } ];
  refresh t

let unwatch t fd =
  List.iter (fun w -> if w.fd = fd then w.active <- false) t.ws;
  t.ws <- List.filter (fun w -> w.active) t.ws;
  refresh t

let watched t = List.length t.ws
let errors t = t.errors
let stop t = t.stopped <- true

let guard t what f =
  try f ()
  with e ->
    let bt = Printexc.get_raw_backtrace () in
    t.errors <- t.errors + 1;
    Log.err (fun m ->
        m "%s raised %s@\n%s" what (Printexc.to_string e) (Printexc.raw_backtrace_to_string bt))

(* Fires the timers due at [now] that existed when the round began, so that
   a timer that sets another for now cannot keep the loop here. *)
let fire_timers t now =
  let h = t.heap in
  let limit = h.next_seq in
  let rec go () =
    if h.n > 0 && (not t.stopped) then begin
      let x = h.a.(0) in
      if x.time <= now && x.seq < limit then begin
        remove h 0;
        guard t "timer" x.f;
        go ()
      end
    end
  in
  go ()

let select fds wait =
  try
    let r, _, _ = Unix.select fds [] [] wait in
    r
  with Unix.Unix_error (Unix.EINTR, _, _) -> []

let serve t ready =
  (* [t.ws] may change under the callbacks: walk the list as it was, and
     skip what was unwatched meanwhile. *)
  List.iter
    (fun w -> if w.active && (not t.stopped) && List.mem w.fd ready then guard t "descriptor callback" w.cb)
    t.ws

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
        else if t.heap.n = 0 && t.ws = [] then ()
        else begin
          let n = now t in
          let next = if t.heap.n > 0 then min t.heap.a.(0).time deadline else deadline in
          let wait =
            if next = max_int then -1.0 else if next <= n then 0.0 else Time.to_sec (next - n)
          in
          (match t.fds with
          | [] -> if wait > 0.0 then Unix.sleepf wait
          | fds -> serve t (select fds wait));
          go ()
        end
      end
    end
  in
  Fun.protect ~finally:finish go
