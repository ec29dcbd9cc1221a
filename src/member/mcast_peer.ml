(* One member of a reliable multicast group of processes over kernel UDP:
   the stack [Mnak; Bottom], a seeded receive filter dropping a fraction of
   the datagrams, casts paced from a timer, and delivery checked with the
   FIFO specification. *)

open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module E = Consort_engine.Endpoint.Make (Udp)
module Fifo = Consort_spec.Fifo

(* Casts per tick, and the tick. *)
let batch = 10
let tick = Time.of_ms 1
let padding = 48

(* Payload: origin (uint8), sequence number (uint32), then [padding] bytes
   determined by both. *)
let pad_byte origin seq i = (origin + (seq * 7) + (i * 13)) land 255

let payload pool origin seq =
  let v = Pool.alloc pool (5 + padding) in
  let cs = Iovec.cstruct v in
  Cstruct.set_uint8 cs 0 origin;
  Cstruct.BE.set_uint32 cs 1 (Int32.of_int seq);
  for i = 0 to padding - 1 do
    Cstruct.set_uint8 cs (5 + i) (pad_byte origin seq i)
  done;
  Msg.create [ v ]

let decode msg =
  let s = Msg.to_string msg in
  if String.length s <> 5 + padding then
    Error (Printf.sprintf "payload of %d bytes" (String.length s))
  else
    let origin = Char.code s.[0] in
    let seq = Int32.to_int (String.get_int32_be s 1) land 0xffff_ffff in
    let rec pad i = i = padding || (Char.code s.[5 + i] = pad_byte origin seq i && pad (i + 1)) in
    if pad 0 then Ok (origin, seq) else Error (Printf.sprintf "corrupt padding in %d/%d" origin seq)

type error =
  | Bad_argument of string
  | Endpoint of Consort_engine.Endpoint.error
  | Drop_filter of Transport.error

let pp_error ppf = function
  | Bad_argument e -> Fmt.string ppf e
  | Endpoint e -> Consort_engine.Endpoint.pp_error ppf e
  | Drop_filter e -> Fmt.pf ppf "cannot set the drop filter: %a" Transport.pp_error e

exception Setup of error

let run_checked ~rank ~members ~counts ~loss ~seed ~deadline:deadline_s =
  let n = Array.length members in
  let pool = Pool.default in
  let loop = Loop.create () in
  let t0 = Loop.now loop in
  let deadline = t0 + Time.of_sec deadline_s in
  (* Delivery checking: every member casts its messages in order, so the
     trace starts with all the casts; this process adds its deliveries. *)
  let fifo = Fifo.create ~n in
  Array.iteri
    (fun sender c ->
      for seq = 0 to c - 1 do
        Fifo.add fifo (Fifo.Sent { sender; kind = Fifo.Cast; seq })
      done)
    counts;
  let next = Array.make n 0 in
  let errors = ref [] and nerrors = ref 0 in
  let error fmt =
    Printf.ksprintf
      (fun s ->
        incr nerrors;
        if !nerrors <= 10 then errors := s :: !errors)
      fmt
  in
  let complete () = Array.for_all2 ( = ) next counts in
  let completed_at = ref None in
  let deliver src msg =
    (match src with
    | Event.Cast_from o -> (
        match decode msg with
        | Error e -> error "from %d: %s" o e
        | Ok (origin, seq) ->
            if origin <> o then error "cast %d/%d delivered as from %d" origin seq o
            else begin
              Fifo.add fifo (Fifo.Delivered { receiver = rank; sender = o; cast = true; seq });
              if seq = next.(o) then next.(o) <- seq + 1;
              if !completed_at = None && complete () then completed_at := Some (Loop.now loop)
            end)
    | src -> error "unexpected delivery %s" (Fmt.str "%a" Event.pp_src src));
    Msg.release msg
  in
  let blocked = ref false in
  let ctl = function
    | Event.Blocked b -> blocked := b
    | Event.Lost_message r -> error "the stack gave up on messages from %d" r
    | e -> Logs.info (fun m -> m "peer %d: %a" rank Event.pp_up_ctl e)
  in
  let view = View.v ~group:"mcast3" ~members ~rank () in
  let ep =
    match
      E.create ~pool loop ~view ~seed:(seed + rank)
        ~layers:[ Consort_group.Mnak.layer; Consort_group.Bottom.layer ]
        ~app:{ Stack.deliver; ctl } ()
    with
    | Ok e -> e
    | Error e -> raise (Setup (Endpoint e))
  in
  (* A seeded filter dropping [loss] of the datagrams received. *)
  let rng = Rng.create ((seed * 31) + rank) in
  let seen = ref 0 and filtered = ref 0 in
  let filter ~src:_ _ =
    incr seen;
    let drop = Rng.chance rng loss in
    if drop then incr filtered;
    drop
  in
  (match Udp.control (E.connection ep) (Udp.Drop_filter (Some filter)) with
  | Ok () -> ()
  | Error e -> raise (Setup (Drop_filter e)));
  (* Casting, a few at a time. *)
  let sent = ref 0 in
  let rec cast_some () =
    if !sent < counts.(rank) && not (E.is_closed ep) then begin
      if not !blocked then begin
        let k = min batch (counts.(rank) - !sent) in
        for _ = 1 to k do
          E.cast ep (payload pool rank !sent);
          incr sent
        done
      end;
      ignore (Loop.after loop tick cast_some)
    end
  in
  (* Give the other processes time to bind before the first cast. *)
  ignore (Loop.after loop (Time.of_ms 100) cast_some);
  let counter layer name =
    match List.assoc_opt layer (Stack.counters (E.stack ep)) with
    | Some cs -> List.assoc_opt name cs
    | None -> None
  in
  (* Everything delivered here, and every cast stable (received by all). *)
  let settled () =
    complete ()
    &&
    match counter Consort_group.Mnak.name "buffered" with
    | Some 0 -> true
    | Some _ -> false
    | None -> true
  in
  let grace = Time.of_ms 300 in
  Loop.run loop
    ~timeout:(deadline - Loop.now loop)
    ~until:(fun () ->
      settled ()
      || match !completed_at with Some t -> Loop.now loop - t > Time.of_sec 5. | None -> false);
  (* Stay a little to answer late requests, still checking deliveries. *)
  Loop.run loop ~timeout:(min grace (max 0 (deadline - Loop.now loop)));
  let elapsed = Loop.now loop - t0 in
  let info = Udp.query (E.connection ep) in
  let mnak =
    match List.assoc_opt Consort_group.Mnak.name (Stack.counters (E.stack ep)) with
    | Some c -> c
    | None -> []
  in
  E.close ep;
  let leaks = Pool.leak_check pool in
  if leaks > 0 then error "%d buffers leaked" leaks;
  (* Only this process's deliveries are in the trace: the others' are
     missing from it by construction. *)
  let missing = Array.make n 0 in
  List.iter
    (function
      | Fifo.Missing { receiver; sender; _ } ->
          if receiver = rank then missing.(sender) <- missing.(sender) + 1
      | v -> error "%s" (Fmt.str "%a" Fifo.pp_violation v))
    (Fifo.finish fifo);
  Array.iteri (fun o k -> if k > 0 then error "%d casts of %d never delivered" k o) missing;
  if not (complete ()) then
    error "incomplete: delivered [%s] of [%s] in order"
      (String.concat "," (Array.to_list (Array.map string_of_int next)))
      (String.concat "," (Array.to_list (Array.map string_of_int counts)));
  if Loop.errors loop > 0 then error "%d callbacks raised" (Loop.errors loop);
  let ok = !nerrors = 0 in
  Printf.printf
    "peer %d: %s delivered %d/%d (%s) in %s; udp sent %d received %d dropped %d (filter %d of %d = \
     %.1f%%); mnak %s\n\
     %!"
    rank
    (if ok then "OK" else "FAILED")
    (Array.fold_left ( + ) 0 next) (Array.fold_left ( + ) 0 counts)
    (String.concat "," (Array.to_list (Array.map string_of_int next)))
    (Fmt.str "%a" Time.pp elapsed) info.sent info.received info.dropped !filtered !seen
    (if !seen = 0 then 0. else 100. *. float !filtered /. float !seen)
    (String.concat " " (List.map (fun (k, v) -> Printf.sprintf "%s=%d" k v) mnak));
  List.iter (fun e -> Printf.printf "peer %d: error: %s\n%!" rank e) (List.rev !errors);
  if !nerrors > 10 then Printf.printf "peer %d: and %d more errors\n%!" rank (!nerrors - 10);
  ok

let run ~rank ~members ~counts ~loss ~seed ~deadline =
  let n = Array.length members in
  if rank < 0 || rank >= n then
    Error (Bad_argument (Printf.sprintf "rank %d outside the %d members" rank n))
  else if Array.length counts <> n then Error (Bad_argument "one count per member")
  else if Array.exists (fun c -> c < 0) counts then
    Error (Bad_argument "counts must not be negative")
  else if not (loss >= 0. && loss < 1.) then
    Error (Bad_argument (Printf.sprintf "loss %g outside [0, 1)" loss))
  else
    match run_checked ~rank ~members ~counts ~loss ~seed ~deadline with
    | ok -> Ok ok
    | exception Setup e -> Error e
