open Consort

let src = Logs.Src.create "consort.udp" ~doc:"Kernel UDP transport"

module Log = (val Logs.src_log src : Logs.LOG)

type t = Loop.t

(* An address is one int, (ipv4 lsl 16) lor port, as the C stubs take it. *)
type address = int

let ip a = a lsr 16
let port a = a land 0xffff
let make_address ip port = (ip lsl 16) lor port

let address_to_string a =
  let i = ip a in
  Printf.sprintf "%d.%d.%d.%d:%d"
    ((i lsr 24) land 255)
    ((i lsr 16) land 255)
    ((i lsr 8) land 255)
    (i land 255) (port a)

let pp_address = Fmt.of_to_string address_to_string
let equal_address = Int.equal

let decimal s max =
  let n = String.length s in
  if n = 0 || n > 5 then None
  else if not (String.for_all (fun c -> c >= '0' && c <= '9') s) then None
  else
    let v = int_of_string s in
    if v > max then None else Some v

let address_of_string s =
  let bad why = Error (Printf.sprintf "%S is not an IPv4 address and port (%s)" s why) in
  match String.rindex_opt s ':' with
  | None -> bad "no port"
  | Some i -> (
      let host = String.sub s 0 i and p = String.sub s (i + 1) (String.length s - i - 1) in
      match decimal p 65535 with
      | None -> bad "port"
      | Some p -> (
          match List.map (fun o -> decimal o 255) (String.split_on_char '.' host) with
          | [ Some a; Some b; Some c; Some d ] ->
              Ok (make_address ((a lsl 24) lor (b lsl 16) lor (c lsl 8) lor d) p)
          | _ -> bad "IPv4 address"))

let inet_addr_of_ip i =
  Unix.inet_addr_of_string
    (Printf.sprintf "%d.%d.%d.%d"
       ((i lsr 24) land 255)
       ((i lsr 16) land 255)
       ((i lsr 8) land 255)
       (i land 255))

let ip_of_inet_addr a =
  match List.map int_of_string (String.split_on_char '.' (Unix.string_of_inet_addr a)) with
  | [ a; b; c; d ] -> (a lsl 24) lor (b lsl 16) lor (c lsl 8) lor d
  | _ | (exception Failure _) -> 0

let is_multicast a = ip a lsr 28 = 14
let mtu = 65507

type handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

type control =
  | Drop_filter of (src:address -> Cstruct.t -> bool) option
  | Join_multicast of address

type info = {
  local : address;
  mtu : int;
  multicast : bool;
  sent : int;
  received : int;
  dropped : int;
}

type connection = {
  loop : Loop.t;
  fd : Unix.file_descr;
  local : address;
  pool : Pool.t;
  rcvbuf : int;
  sndbuf : int;
  mutable handler : handler;
  mutable filter : (src:address -> Cstruct.t -> bool) option;
  mutable group : (address * Unix.file_descr) option;
  mutable closed : bool;
  mutable sent : int;
  mutable received : int;
  mutable dropped : int;
}

(* C stubs. *)

(* A scatter-gather list; the field order is read by the C stubs. *)
type sgl = {
  mutable hdr : Bytes.t;
  mutable hoff : int;
  mutable hlen : int;
  bufs : Cstruct.buffer array;
  offs : int array;
  lens : int array;
  mutable n : int;
}

external c_sendmsg : Unix.file_descr -> sgl -> address -> int = "consort_udp_sendmsg"

external c_sendmmsg : Unix.file_descr -> sgl -> address array -> int -> int -> int
  = "consort_udp_sendmmsg"

external c_recvmmsg_into :
  Unix.file_descr -> Cstruct.buffer array -> int array -> int -> int -> int array -> int
  = "consort_udp_recvmmsg_into_byte" "consort_udp_recvmmsg_into"

external c_recvmmsg_into_wait :
  Unix.file_descr -> Cstruct.buffer array -> int array -> int -> int -> int array -> int
  = "consort_udp_recvmmsg_into_wait_byte" "consort_udp_recvmmsg_into_wait"

external c_count_overflow : Unix.file_descr -> unit = "consort_udp_count_overflow"
external c_set_buffer : Unix.file_descr -> bool -> int -> int = "consort_udp_set_buffer"
external c_mcast_setup : Unix.file_descr -> int -> int -> bool -> unit = "consort_udp_mcast_setup"
external c_mcast_join : Unix.file_descr -> int -> int -> unit = "consort_udp_mcast_join"

(* Must match consort_stubs.c. *)
let would_block = -1
let refused = -2
let too_big = -3
let max_pieces = 63
let max_msgs = 64
let buffer_request = 4 * 1024 * 1024

(* Process-wide scratch state: the loop is single-threaded and none of it
   is live across a callback. *)

let empty_buffer = Bigarray.(Array1.create char c_layout 0)

let sgl =
  {
    hdr = Bytes.empty;
    hoff = 0;
    hlen = 0;
    bufs = Array.make max_pieces empty_buffer;
    offs = Array.make max_pieces 0;
    lens = Array.make max_pieces 0;
    n = 0;
  }

let pieces = ref 0

let add_piece buf off len =
  let i = !pieces in
  if i < max_pieces then begin
    sgl.bufs.(i) <- buf;
    sgl.offs.(i) <- off;
    sgl.lens.(i) <- len;
    sgl.n <- i + 1
  end;
  pieces := i + 1

let clear_sgl () =
  sgl.hdr <- Bytes.empty;
  for i = 0 to sgl.n - 1 do
    sgl.bufs.(i) <- empty_buffer
  done;
  sgl.n <- 0

(* [fill_sgl pool msg] fills [sgl] with [msg]'s pieces, or with one copy
   of its bytes when it has too many pieces: the copy is returned, to be
   released with [done_sgl] once sent. *)
let fill_sgl pool msg =
  let hdr, hoff, hlen = Msg.headers msg in
  sgl.hdr <- hdr;
  sgl.hoff <- hoff;
  sgl.hlen <- hlen;
  sgl.n <- 0;
  pieces := 0;
  Msg.iter_body add_piece msg;
  if !pieces <= max_pieces then None
  else begin
    clear_sgl ();
    let v = Msg.to_iovec pool msg in
    let cs = Iovec.cstruct v in
    sgl.hoff <- 0;
    sgl.hlen <- 0;
    sgl.n <- 0;
    pieces := 0;
    add_piece cs.Cstruct.buffer cs.Cstruct.off cs.Cstruct.len;
    Some v
  end

let done_sgl copy =
  clear_sgl ();
  match copy with Some v -> Iovec.release v | None -> ()

(* [sgl] emptied after an exception [e], which goes on. *)
let done_sgl_raise copy e =
  let bt = Printexc.get_raw_backtrace () in
  done_sgl copy;
  Printexc.raise_with_backtrace e bt

(* [with_sgl pool msg f] fills [sgl] with [msg] and runs [f]. *)
let with_sgl pool msg f =
  let copy = fill_sgl pool msg in
  match f () with
  | r ->
      done_sgl copy;
      r
  | exception e -> done_sgl_raise copy e

(* Datagrams land in slots of 64 KiB, each a slice of a segment of its own
   from [receive_pool]. A datagram of more than [copybreak] bytes is handed
   up where it landed, with no copy; its slot is replaced only if something
   kept the datagram. A smaller one is copied out to a slice of its own
   size, so that a small datagram kept by a protocol never pins 64 KiB. *)
let slot = 65536
let nslots = 64
let rounds = 4
let copybreak = 2048

type landing = {
  slots : Iovec.t array;
  bufs : Cstruct.buffer array;
  offs : int array;
  results : int array;
}

(* A slot kept by a protocol (a bundle kept until stable) is replaced from
   the pool, and comes back to it when released. The free list holds up to
   512 slots (32 MiB): a window of kept datagrams that empties and fills
   again is served from it, not by new segments (each one a [malloc], page
   faults, and off-heap memory that hastens the major GC). *)
let receive_pool =
  lazy (Pool.create ~segment_size:slot ~max_free:(8 * nslots) ~name:"udp-receive" ())

let receive_pool_stats () = Pool.stats (Lazy.force receive_pool)

let set_slot l i v =
  let cs = Iovec.cstruct v in
  l.slots.(i) <- v;
  l.bufs.(i) <- cs.Cstruct.buffer;
  l.offs.(i) <- cs.Cstruct.off

let make_landing () =
  let pool = Lazy.force receive_pool in
  let slots = Array.init nslots (fun _ -> Pool.alloc pool slot) in
  let l =
    {
      slots;
      bufs = Array.map (fun v -> (Iovec.cstruct v).Cstruct.buffer) slots;
      offs = Array.make nslots 0;
      results = Array.make ((2 * nslots) + 1) 0;
    }
  in
  Array.iteri (fun i v -> set_slot l i v) slots;
  l

let release_landing l = Array.iter Iovec.release l.slots

(* One landing serves the process; a receive that starts while it is in
   use (a handler running another loop) gets one of its own. *)
let shared_landing = lazy (make_landing ())
let landing_busy = ref false
let dsts_buf = ref (Array.make 64 0)

(* Errors. *)

let system e fn = `System (Printf.sprintf "%s: %s" fn (Unix.error_message e))

let send_error dst e fn =
  match e with
  | Unix.ENETUNREACH | Unix.EHOSTUNREACH -> `Unreachable (address_to_string dst)
  | Unix.EINVAL | Unix.EADDRNOTAVAIL | Unix.EAFNOSUPPORT -> `Bad_address (address_to_string dst)
  | e -> system e fn

(* Receiving. *)

let copies_made = ref 0
let bytes_copied = ref 0
let copies () = (!copies_made, !bytes_copied)
let is_self c src = src = c.local || (ip c.local = 0 && port src = port c.local)

let handle c ~src v =
  c.received <- c.received + 1;
  try c.handler.recv ~src v
  with e ->
    Log.err (fun m -> m "%a: receive handler raised %s" pp_address c.local (Printexc.to_string e))

let deliver c ~group l i len src =
  if len < 0 then c.dropped <- c.dropped + 1
  else if group && is_self c src then ()
  else begin
    let slot_v = l.slots.(i) in
    let drop =
      match c.filter with
      | None -> false
      | Some f -> (
          try f ~src (Cstruct.sub (Iovec.cstruct slot_v) 0 len)
          with e ->
            Log.err (fun m -> m "drop filter raised %s; datagram dropped" (Printexc.to_string e));
            true)
    in
    if drop then c.dropped <- c.dropped + 1
    else if len <= copybreak then begin
      let v = Pool.alloc c.pool len in
      Cstruct.blit (Iovec.cstruct slot_v) 0 (Iovec.cstruct v) 0 len;
      incr copies_made;
      bytes_copied := !bytes_copied + len;
      handle c ~src v
    end
    else begin
      handle c ~src (Iovec.sub slot_v ~off:0 ~len);
      if Segment.count (Iovec.segment slot_v) > 1 then begin
        (* Kept: the slot goes with the datagram. *)
        Iovec.release slot_v;
        set_slot l i (Pool.alloc (Lazy.force receive_pool) slot)
      end
    end
  end

(* Takes what [fd] holds, up to [rounds * nslots] datagrams; [true] if the
   first [recvmmsg] found something. Each call asks for [!batch] datagrams:
   twice as many as the last call got (at least [min_batch]), or twice as
   many as it asked for when it got them all; so that a lone datagram (a
   round trip) does not pay for preparing [nslots] slots, and a burst soon
   gets them all. A call that got one datagram alone makes the next
   [lone_run] calls ask for one: a call that asks for more and gets one
   makes the kernel try again for the second and find nothing, in every
   round trip; a call for one that got it is followed by none (what else
   came is read by the next wait, at once), and after [lone_run] of them
   the next call asks for [min_batch] again, so that a burst is soon read
   in batches. [last] is the socket's kernel drop counter as last seen. *)
let min_batch = 4
let lone_run = 4
let receive_calls_made = ref 0
let single_calls_made = ref 0
let receive_calls () = !receive_calls_made
let single_receive_calls () = !single_calls_made

(* A function of its own, not a closure made for each read. *)
let rec round c ~group ~wait fd last batch lone l budget =
  if budget > 0 && not c.closed then begin
    let ask = Int.min !batch budget in
    incr receive_calls_made;
    if ask = 1 then incr single_calls_made;
    match
      if wait then c_recvmmsg_into_wait fd l.bufs l.offs slot ask l.results
      else c_recvmmsg_into fd l.bufs l.offs slot ask l.results
    with
    | exception Unix.Unix_error (e, fn, _) ->
        Log.err (fun m -> m "%a: %s: %s" pp_address c.local fn (Unix.error_message e));
        false
    | r ->
        (* The kernel's drop counter is written only when something was
           received (the slot after [ask] results may hold an earlier
           call's result otherwise). *)
        let o = if r > 0 then l.results.(2 * ask) else -1 in
        if o >= 0 then begin
          c.dropped <- c.dropped + ((o - !last) land 0xffff_ffff);
          last := o
        end;
        let i = ref 0 in
        while !i < r && not c.closed do
          deliver c ~group l !i l.results.(2 * !i) l.results.((2 * !i) + 1);
          incr i
        done;
        if r = 1 && ask = 1 then begin
          if !lone > 0 then decr lone else batch := min_batch
        end
        else if r = ask then begin
          batch := Int.min nslots (Int.max !batch (2 * ask));
          ignore (round c ~group ~wait:false fd last batch lone l (budget - r) : bool)
        end
        else if r = 1 then begin
          batch := 1;
          lone := lone_run
        end
        else if r > 0 then batch := Int.min nslots (Int.max min_batch (2 * r));
        r > 0
  end
  else false

let receive c ~group ~wait fd last batch lone l =
  round c ~group ~wait fd last batch lone l (rounds * nslots)

(* The readers of [fd] for the loop: when readable, without a wait
   ({!Loop.watch}'s [try_read]), and waiting at most the socket's receive
   timeout ([wait_read]; the socket in blocking mode, every other call on
   it with MSG_DONTWAIT). *)
let reader c ~group fd =
  let last = ref 0 and batch = ref min_batch and lone = ref 0 in
  let read wait =
    if !landing_busy then begin
      let l = make_landing () in
      Fun.protect
        ~finally:(fun () -> release_landing l)
        (fun () -> receive c ~group ~wait fd last batch lone l)
    end
    else begin
      (* The common case, without the closures of [Fun.protect]. *)
      landing_busy := true;
      match receive c ~group ~wait fd last batch lone (Lazy.force shared_landing) with
      | got ->
          landing_busy := false;
          got
      | exception e ->
          let bt = Printexc.get_raw_backtrace () in
          landing_busy := false;
          Printexc.raise_with_backtrace e bt
    end
  in
  ((fun () -> ignore (read false : bool)), (fun () -> read false), fun () -> read true)

(* Opening and closing. *)

let close_quietly fd = try Unix.close fd with Unix.Unix_error _ -> ()

let set_buffer fd rcv =
  try c_set_buffer fd rcv buffer_request
  with Unix.Unix_error (e, _, _) ->
    Log.warn (fun m -> m "socket buffer: %s" (Unix.error_message e));
    0

let no_handler = { recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }

let open_with ?(pool = Pool.default) loop addr f =
  let name = address_to_string addr in
  match Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 with
  | exception Unix.Unix_error (e, fn, _) -> Error (system e fn)
  | fd -> (
      let setup () =
        (* Blocking mode, with a receive timeout of the loop's quantum: the
           loop may wait in a read ([Loop.watch ~wait_read]); every other
           call on [fd] says MSG_DONTWAIT. *)
        Unix.clear_nonblock fd;
        Unix.setsockopt_float fd Unix.SO_RCVTIMEO (Time.to_sec Loop.wait_quantum);
        (* The kernel keeps the timeout in whole clock ticks (500 us is one
           tick: 4 ms at 250 Hz) and reports what it kept; a read may wait
           up to one tick more. *)
        let within = 2 * Time.of_sec (Unix.getsockopt_float fd Unix.SO_RCVTIMEO) in
        let rcvbuf = set_buffer fd true in
        let sndbuf = set_buffer fd false in
        (try c_count_overflow fd with Unix.Unix_error _ -> ());
        Unix.bind fd (Unix.ADDR_INET (inet_addr_of_ip (ip addr), port addr));
        let local =
          match Unix.getsockname fd with
          | Unix.ADDR_INET (a, p) -> make_address (ip_of_inet_addr a) p
          | Unix.ADDR_UNIX _ -> addr
        in
        (local, rcvbuf, sndbuf, within)
      in
      match setup () with
      | exception Unix.Unix_error (e, fn, _) ->
          close_quietly fd;
          Error
            (match e with
            | Unix.EADDRINUSE -> `Address_in_use name
            | Unix.EADDRNOTAVAIL | Unix.EINVAL | Unix.EAFNOSUPPORT -> `Bad_address name
            | e -> system e fn)
      | local, rcvbuf, sndbuf, within ->
          let c =
            {
              loop;
              fd;
              local;
              pool;
              rcvbuf;
              sndbuf;
              handler = no_handler;
              filter = None;
              group = None;
              closed = false;
              sent = 0;
              received = 0;
              dropped = 0;
            }
          in
          c.handler <- f c;
          let on_readable, try_read, wait_read = reader c ~group:false fd in
          Loop.watch ~try_read ~wait_read ~wait_within:within loop fd on_readable;
          Log.debug (fun m -> m "opened %a" pp_address local);
          Ok c)

let open_ loop addr f = open_with loop addr f

let close c =
  if not c.closed then begin
    c.closed <- true;
    Loop.unwatch c.loop c.fd;
    close_quietly c.fd;
    (match c.group with
    | Some (_, gfd) ->
        Loop.unwatch c.loop gfd;
        close_quietly gfd
    | None -> ());
    c.filter <- None;
    Log.debug (fun m -> m "closed %a" pp_address c.local);
    try c.handler.closed ()
    with e ->
      Log.err (fun m -> m "%a: close handler raised %s" pp_address c.local (Printexc.to_string e))
  end

(* Sending. *)

let send_one c dst len =
  match c_sendmsg c.fd sgl dst with
  | exception Unix.Unix_error (e, fn, _) -> Error (send_error dst e fn)
  | r when r >= 0 ->
      c.sent <- c.sent + 1;
      Ok ()
  | r when r = would_block ->
      c.dropped <- c.dropped + 1;
      Ok ()
  | r when r = refused -> Ok ()
  | r when r = too_big -> Error (`Too_big (len, mtu))
  | r -> Error (`System (Printf.sprintf "sendmsg: unexpected result %d" r))

let check_send c msg =
  if c.closed then Error `Closed
  else
    let len = Msg.length msg in
    if len > mtu then Error (`Too_big (len, mtu)) else Ok len

(* One datagram to one address: [with_sgl] without a closure per datagram. *)
let send_sgl c dst len msg =
  let copy = fill_sgl c.pool msg in
  match send_one c dst len with
  | r ->
      done_sgl copy;
      r
  | exception e -> done_sgl_raise copy e

let send c ~dst msg =
  match check_send c msg with Error _ as e -> e | Ok len -> send_sgl c dst len msg

(* Sends to [dsts.(0 .. n-1)], by [sendmmsg] in runs of [max_msgs]; tries
   every destination and returns the first error. *)
let fan_out c dsts n len =
  let first = ref (Ok ()) in
  let note e = match !first with Ok () -> first := e | Error _ -> () in
  let i = ref 0 in
  while !i < n do
    let count = min max_msgs (n - !i) in
    match c_sendmmsg c.fd sgl dsts !i count with
    | exception Unix.Unix_error (e, fn, _) ->
        note (Error (send_error dsts.(!i) e fn));
        incr i
    | r when r > 0 ->
        c.sent <- c.sent + r;
        i := !i + r
    | r when r = would_block ->
        c.dropped <- c.dropped + 1;
        incr i
    | r when r = refused -> incr i
    | r when r = too_big ->
        note (Error (`Too_big (len, mtu)));
        incr i
    | r ->
        note (Error (`System (Printf.sprintf "sendmmsg: unexpected result %d" r)));
        incr i
  done;
  !first

let cast c ~dsts msg =
  match check_send c msg with
  | Error _ as e -> e
  | Ok len -> (
      match c.group with
      | Some (g, _) -> send_sgl c g len msg
      | None -> (
          match dsts with
          | [] -> Ok ()
          | [ dst ] -> send_sgl c dst len msg
          | dsts ->
              let n = List.length dsts in
              if Array.length !dsts_buf < n then dsts_buf := Array.make n 0;
              let a = !dsts_buf in
              List.iteri (fun i d -> a.(i) <- d) dsts;
              with_sgl c.pool msg (fun () -> fan_out c a n len)))

(* Control and query. *)

let join c g =
  if c.closed then Error `Closed
  else if not (is_multicast g && port g <> 0) then Error (`Bad_address (address_to_string g))
  else
    match c.group with
    | Some (g', _) when g' = g -> Ok ()
    | Some (g', _) -> Error (`Unsupported ("already in multicast group " ^ address_to_string g'))
    | None -> (
        match Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 with
        | exception Unix.Unix_error (e, fn, _) -> Error (system e fn)
        | gfd -> (
            let setup () =
              Unix.set_nonblock gfd;
              Unix.setsockopt gfd Unix.SO_REUSEADDR true;
              ignore (set_buffer gfd true);
              (try c_count_overflow gfd with Unix.Unix_error _ -> ());
              Unix.bind gfd (Unix.ADDR_INET (inet_addr_of_ip (ip g), port g));
              c_mcast_join gfd (ip g) (ip c.local);
              c_mcast_setup c.fd (ip c.local) 1 true
            in
            match setup () with
            | exception Unix.Unix_error (e, fn, _) ->
                close_quietly gfd;
                Error
                  (match e with
                  | Unix.EADDRINUSE -> `Address_in_use (address_to_string g)
                  | Unix.ENODEV | Unix.EADDRNOTAVAIL -> `Unreachable (address_to_string g)
                  | e -> system e fn)
            | () ->
                c.group <- Some (g, gfd);
                let on_readable, try_read, _ = reader c ~group:true gfd in
                Loop.watch ~try_read c.loop gfd on_readable;
                Log.debug (fun m -> m "%a joined %a" pp_address c.local pp_address g);
                Ok ()))

let control c = function
  | Drop_filter f ->
      if c.closed then Error `Closed
      else begin
        c.filter <- f;
        Ok ()
      end
  | Join_multicast g -> join c g

let query c =
  {
    local = c.local;
    mtu;
    multicast = c.group <> None;
    sent = c.sent;
    received = c.received;
    dropped = c.dropped;
  }

let local c = c.local
let buffer_sizes c = (c.rcvbuf, c.sndbuf)
let is_closed c = c.closed

(* Time. *)

let now = Loop.now

type timer = Loop.timer

let at = Loop.at
let cancel = Loop.cancel
