open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module Seal = Consort_seal.Seal
module S = Seal.Make (Udp)
module G = Consort_group.Group.Make (S)

(* With Auth or Privacy among the properties, the peers seal under one
   benchmark secret, the same in every peer process (a fixed value: it
   protects nothing, it only costs what a real secret costs), with per-view
   keys unless seal.rekey=false, as consort member does. *)
let transport loop ~params props =
  let rekey = Params.bool params Seal.rekey_param in
  match Consort_group.Properties.of_string props with
  | Ok ps when List.mem Consort_group.Properties.Privacy ps ->
      S.wrap ~rekey loop
        (Some (Result.get_ok (Seal.secret_of_string (String.make 32 'b')), Seal.Privacy))
  | Ok ps
    when List.mem Consort_group.Properties.Auth ps || List.mem Consort_group.Properties.Rekey ps ->
      S.wrap ~rekey loop
        (Some (Result.get_ok (Seal.secret_of_string (String.make 32 'b')), Seal.Auth))
  | _ -> S.wrap loop None

type kind = Group_rtt | Engine_rtt | Raw_rtt | Group_tput | Raw_tput

let kinds =
  [
    ("group-rtt", Group_rtt);
    ("engine-rtt", Engine_rtt);
    ("raw-rtt", Raw_rtt);
    ("group-tput", Group_tput);
    ("raw-tput", Raw_tput);
  ]

let kind_to_string k = fst (List.find (fun (_, k') -> k = k') kinds)

let kind_of_string s =
  match List.assoc_opt s kinds with
  | Some k -> Ok k
  | None ->
      Error
        (Printf.sprintf "unknown kind %S (one of %s)" s (String.concat ", " (List.map fst kinds)))

type config = {
  kind : kind;
  index : int;
  addrs : string list;
  count : int;
  warmup : int;
  size : int;
  senders : int;
  not_sequencer : bool;
  deadline : float;
  params : Params.t;
  props : string;
}

let result pairs = String.concat " " ("result" :: List.map (fun (k, v) -> k ^ "=" ^ v) pairs)

let parse_result line =
  match String.split_on_char ' ' line with
  | "result" :: pairs ->
      Some
        (List.filter_map
           (fun p ->
             match String.index_opt p '=' with
             | Some i -> Some (String.sub p 0 i, String.sub p (i + 1) (String.length p - i - 1))
             | None -> None)
           pairs)
  | _ -> None

let ns_now () = Int64.to_int (Mtime.Span.to_uint64_ns (Mtime_clock.elapsed ()))

(* Round-trip samples, in microseconds, as one comma-separated value. *)
let samples_field a = String.concat "," (Array.to_list (Array.map (Printf.sprintf "%.3f") a))

(* ["p"] and [seq] in 15 digits, without Printf: the round trip measures
   the system under test, not the formatting of its payload. *)
let ping_msg seq =
  if seq < 0 || seq > 999_999_999_999_999 then Printf.sprintf "p%015d" seq
  else begin
    let b = Bytes.make 16 '0' in
    Bytes.unsafe_set b 0 'p';
    let rec digits i n =
      if n > 0 then begin
        Bytes.unsafe_set b i (Char.unsafe_chr (48 + (n mod 10)));
        digits (i - 1) (n / 10)
      end
    in
    digits 15 seq;
    Bytes.unsafe_to_string b
  end

(* {1 Throughput payloads} *)

let filler seq i = Char.unsafe_chr (97 + ((seq + (i * 7)) mod 26))

let payload_slow ~seq ~size =
  if size < 11 then invalid_arg "Peer.payload: size below 11";
  let b = Bytes.create size in
  Bytes.blit_string (Printf.sprintf "d%010d" seq) 0 b 0 11;
  for i = 11 to size - 1 do
    Bytes.unsafe_set b i (filler seq i)
  done;
  Bytes.unsafe_to_string b

(* The filler depends on [seq mod 26] only: one template per residue, for
   the size in use (one size per process), as a string and as a bigarray. *)
type templates = { t_size : int; strs : string array; bufs : Cstruct.buffer array }

let templates = ref { t_size = -1; strs = [||]; bufs = [||] }

let templates_of size =
  let t = !templates in
  if t.t_size = size then t
  else begin
    let strs = Array.init 26 (fun r -> payload_slow ~seq:r ~size) in
    let bufs = Array.map (fun s -> (Cstruct.of_string s).Cstruct.buffer) strs in
    let t = { t_size = size; strs; bufs } in
    templates := t;
    t
  end

let template ~size r = (templates_of size).strs.(r)

(* [payload ~seq ~size]: the template of [seq mod 26] with [seq]'s number
   written in, without formatting or filling byte by byte. *)
let write_payload b ~seq ~size =
  Bytes.blit_string (template ~size (seq mod 26)) 0 b 0 size;
  let rec digits i n =
    if i >= 1 then begin
      Bytes.unsafe_set b i (Char.unsafe_chr (48 + (n mod 10)));
      digits (i - 1) (n / 10)
    end
  in
  digits 10 seq

let payload ~seq ~size =
  if size < 11 || seq < 0 || seq > 9_999_999_999 then payload_slow ~seq ~size
  else begin
    let b = Bytes.create size in
    write_payload b ~seq ~size;
    Bytes.unsafe_to_string b
  end

let payload_into b ~seq ~size =
  if size < 11 || seq < 0 || seq > 9_999_999_999 || Bytes.length b < size then
    invalid_arg "Peer.payload_into: size below 11, number out of range or buffer too short";
  write_payload b ~seq ~size

let check_payload s ~size =
  if String.length s <> size || size < 11 || s.[0] <> 'd' then None
  else
    match int_of_string_opt (String.sub s 1 10) with
    | None -> None
    | Some seq when seq < 0 -> None
    | Some seq ->
        let t = template ~size (seq mod 26) in
        let rec words i =
          i + 8 > size || (String.get_int64_ne s i = String.get_int64_ne t i && words (i + 8))
        in
        let rec bytes i =
          i >= size || (String.unsafe_get s i = String.unsafe_get t i && bytes (i + 1))
        in
        let tail = 11 + ((size - 11) / 8 * 8) in
        if words 11 && bytes tail then Some seq else None

external compare_bigstring : Cstruct.buffer -> int -> Cstruct.buffer -> int -> int -> int
  = "caml_compare_bigstring"
[@@noalloc]

(* The same, on a view of the received bytes, without copying them: the
   filler is compared with the template's by one [memcmp]. *)
(* [seq_of_payload_cs]: the number of the payload, or -1. *)
let seq_of_payload_cs cs ~size =
  if Cstruct.length cs <> size || size < 11 || Cstruct.get_char cs 0 <> 'd' then -1
  else
    let buf = cs.Cstruct.buffer and off = cs.Cstruct.off in
    let rec digits i acc =
      if i > 10 then acc
      else
        match Bigarray.Array1.unsafe_get buf (off + i) with
        | '0' .. '9' as c -> digits (i + 1) ((acc * 10) + Char.code c - 48)
        | _ -> -1
    in
    let seq = digits 1 0 in
    if seq < 0 then -1
    else
      let t = (templates_of size).bufs.(seq mod 26) in
      if compare_bigstring buf (off + 11) t 11 (size - 11) = 0 then seq else -1

let check_payload_cs cs ~size =
  let seq = seq_of_payload_cs cs ~size in
  if seq < 0 then None else Some seq

let addr_part eid = match String.index_opt eid '#' with Some i -> String.sub eid 0 i | None -> eid
let others cfg = List.filteri (fun i _ -> i <> cfg.index) cfg.addrs
let me cfg = List.nth cfg.addrs cfg.index

(* The stack of the property set [props] ("vsync", "vsync,Total", ...). *)
let layers_of props =
  Result.map_error
    (Fmt.str "%a" Consort_group.Properties.pp_error)
    (Result.bind (Consort_group.Properties.of_string props) Consort_group.Properties.layers)

let transport_fields g =
  let i = S.query (G.connection g) in
  [
    ("dgrams_sent", string_of_int i.S.sent);
    ("dgrams_received", string_of_int i.received);
    ("dgrams_dropped", string_of_int i.dropped);
  ]

(* How the loop waited: kernel waits that may block, reads that found
   something without one, and reads that waited and found something. *)
let loop_fields loop =
  [
    ("kernel_waits", string_of_int (Loop.kernel_waits loop));
    ("early_reads", string_of_int (Loop.early_reads loop));
    ("wait_reads", string_of_int (Loop.wait_reads loop));
    ("timer_arms", string_of_int (Loop.timer_arms loop));
  ]

let fused_counter g name =
  match G.stack g with
  | None -> 0
  | Some s -> Option.value ~default:0 (List.assoc_opt name (Stack.fused_counters s))

let counter g layer name =
  match G.stack g with
  | None -> 0
  | Some s -> (
      match List.assoc_opt layer (Stack.counters s) with
      | Some cs -> Option.value ~default:0 (List.assoc_opt name cs)
      | None -> 0)

(* {1 Round trip in a group} *)

let group_rtt cfg =
  match layers_of cfg.props with
  | Error e -> Error e
  | Ok layers -> (
      let loop = Loop.create () in
      let pinger = cfg.index = 0 in
      let total = cfg.warmup + cfg.count in
      let samples = Array.make cfg.count 0. in
      let g = ref None in
      let self () = match !g with Some g -> G.me g | None -> "" in
      let cast s = match !g with Some g -> ignore (G.cast g s) | None -> () in
      let seq = ref (-1) and sent_at = ref 0 and finished = ref false and stray = ref 0 in
      let next () =
        incr seq;
        sent_at := Loop.now loop;
        cast (ping_msg !seq)
      in
      let on_cast ~origin s =
        if origin <> self () && not !finished then
          if pinger then begin
            if s = "ready" then (if !seq < 0 then next ())
            else if !seq >= 0 && s = ping_msg !seq then begin
              let rtt = Loop.now loop - !sent_at in
              if !seq >= cfg.warmup then samples.(!seq - cfg.warmup) <- float rtt /. 1e3;
              if !seq + 1 < total then next ()
              else begin
                cast "stop";
                finished := true
              end
            end
            else incr stray
          end
          else if s = "stop" then finished := true
          else if String.length s = 16 && s.[0] = 'p' then cast s
          else incr stray
      in
      let cb =
        {
          Consort_group.Group.view =
            (fun v -> if (not pinger) && Array.length v.members = 2 then cast "ready");
          cast = on_cast;
          send = (fun ~origin:_ _ -> ());
          block = ignore;
          flow = ignore;
          exit = ignore;
        }
      in
      let tr = transport loop ~params:cfg.params cfg.props in
      match
        G.join ~params:cfg.params ~peers:(others cfg) ~seed:(cfg.index + 1) ?rekey:(S.rekey tr)
          ~layers tr ~group:"bench-rtt" ~addr:(me cfg) cb
      with
      | Error e -> Error (Fmt.str "%a" Consort_group.Group.pp_join_error e)
      | Ok grp ->
          g := Some grp;
          let t0 = Loop.now loop in
          Loop.run loop ~until:(fun () -> !finished) ~timeout:(Time.of_sec cfg.deadline);
          (* The last cast ("stop") must get out before this process ends. *)
          if pinger && !finished then Loop.run loop ~timeout:(Time.of_ms 50);
          let elapsed = Time.to_sec (Loop.now loop - t0) in
          let fields =
            transport_fields grp @ loop_fields loop
            @ List.map
                (fun (k, v) -> ("fused_" ^ k, string_of_int v))
                (match G.stack grp with Some s -> Stack.fused_counters s | None -> [])
          in
          G.crash grp;
          if not !finished then
            Error
              (Printf.sprintf "gave up after %.1f s at round trip %d of %d" elapsed (!seq + 1) total)
          else if pinger then
            Ok
              (result
                 ([
                    ("role", "ping"); ("n", string_of_int cfg.count); ("stray", string_of_int !stray);
                  ]
                 @ fields
                 @ [ ("us", samples_field samples) ]))
          else Ok (result ([ ("role", "pong"); ("stray", string_of_int !stray) ] @ fields)))

(* {1 Round trip over the engine, no layers} *)

let engine_rtt cfg =
  match (Udp.address_of_string (me cfg), Udp.address_of_string (List.hd (others cfg))) with
  | Error e, _ | _, Error e -> Error e
  | Ok local, Ok peer -> (
      let loop = Loop.create () in
      let pinger = cfg.index = 0 in
      let total = cfg.warmup + cfg.count in
      let samples = Array.make cfg.count 0. in
      let conn = ref None in
      let send dst s =
        match !conn with
        | Some c ->
            let m = Msg.of_string Pool.default s in
            ignore (Udp.send c ~dst m);
            Msg.release m
        | None -> ()
      in
      let seq = ref (-1) and sent_at = ref 0 and finished = ref false and greeted = ref false in
      (* The greeting's timer, cancelled once answered: a pending deadline
         within two clock ticks makes the loop wait in the kernel, not by
         reading, and would stay in the first round trips measured. *)
      let greeting = ref None in
      let next () =
        incr seq;
        sent_at := Loop.now loop;
        send peer (ping_msg !seq)
      in
      let recv ~src v =
        let s = Iovec.to_string v in
        Iovec.release v;
        if pinger then begin
          if s = "hello" then begin
            if not !greeted then begin
              greeted := true;
              Option.iter Loop.cancel !greeting;
              next ()
            end
          end
          else if !seq >= 0 && s = ping_msg !seq && not !finished then begin
            let rtt = Loop.now loop - !sent_at in
            if !seq >= cfg.warmup then samples.(!seq - cfg.warmup) <- float rtt /. 1e3;
            if !seq + 1 < total then next ()
            else begin
              for _ = 1 to 3 do
                send peer "stop"
              done;
              finished := true
            end
          end
        end
        else if s = "stop" then finished := true
        else send src s
      in
      match Udp.open_ loop local (fun _ -> { Udp.recv; closed = ignore }) with
      | Error e -> Error (Fmt.str "%a" Transport.pp_error e)
      | Ok c ->
          conn := Some c;
          (* Greet until the other side answers: it may not be bound yet. *)
          let rec greet () =
            if pinger && not !greeted then begin
              send peer "hello";
              greeting := Some (Loop.after loop (Time.of_ms 10) greet)
            end
          in
          greet ();
          Loop.run loop ~until:(fun () -> !finished) ~timeout:(Time.of_sec cfg.deadline);
          Udp.close c;
          if not !finished then
            Error (Printf.sprintf "gave up at round trip %d of %d" (!seq + 1) total)
          else if pinger then
            Ok
              (result
                 ([ ("role", "ping"); ("n", string_of_int cfg.count) ]
                 @ loop_fields loop
                 @ [ ("us", samples_field samples) ]))
          else Ok (result ([ ("role", "pong") ] @ loop_fields loop)))

(* {1 Round trip over blocking sockets} *)

let inet a =
  match String.rindex_opt a ':' with
  | Some i -> (
      match int_of_string_opt (String.sub a (i + 1) (String.length a - i - 1)) with
      | Some port -> Ok (Unix.ADDR_INET (Unix.inet_addr_of_string (String.sub a 0 i), port))
      | None -> Error ("bad address " ^ a))
  | None -> Error ("bad address " ^ a)

let udp_socket local ~rcvbuf ~timeout =
  let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
  Unix.bind s local;
  (if rcvbuf > 0 then try Unix.setsockopt_int s Unix.SO_RCVBUF rcvbuf with Unix.Unix_error _ -> ());
  Unix.setsockopt_float s Unix.SO_RCVTIMEO timeout;
  s

(* [recv] is [None] on timeout. *)
let recv_opt s buf =
  match Unix.recvfrom s buf 0 (Bytes.length buf) [] with
  | n, src -> Some (n, src)
  | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> None

let raw_rtt cfg =
  match (inet (me cfg), inet (List.hd (others cfg))) with
  | Error e, _ | _, Error e -> Error e
  | Ok local, Ok peer ->
      let s = udp_socket local ~rcvbuf:0 ~timeout:0.1 in
      let buf = Bytes.create 2048 in
      let deadline = Proc.now () +. cfg.deadline in
      let send dst m = ignore (Unix.sendto_substring s m 0 (String.length m) [] dst) in
      let got n m = n = String.length m && Bytes.sub_string buf 0 n = m in
      let res =
        if cfg.index = 0 then begin
          let rec greet () =
            if Proc.now () > deadline then false
            else begin
              send peer "hello";
              match recv_opt s buf with Some (n, _) when got n "hello" -> true | _ -> greet ()
            end
          in
          if not (greet ()) then Error "no answer to hello"
          else begin
            let total = cfg.warmup + cfg.count in
            let samples = Array.make cfg.count 0. and resent = ref 0 in
            let rec one seq =
              if seq >= total then true
              else if Proc.now () > deadline then false
              else begin
                let m = ping_msg seq in
                let t0 = ns_now () in
                send peer m;
                let rec wait () =
                  match recv_opt s buf with
                  | Some (n, _) when got n m -> true
                  | Some _ -> wait ()
                  | None -> false
                in
                if wait () then begin
                  if seq >= cfg.warmup then
                    samples.(seq - cfg.warmup) <- float (ns_now () - t0) /. 1e3;
                  one (seq + 1)
                end
                else begin
                  incr resent;
                  one seq
                end
              end
            in
            let ok = one 0 in
            for _ = 1 to 3 do
              send peer "stop"
            done;
            if ok then
              Ok
                (result
                   [
                     ("role", "ping");
                     ("n", string_of_int cfg.count);
                     ("resent", string_of_int !resent);
                     ("us", samples_field samples);
                   ])
            else Error "gave up before the last round trip"
          end
        end
        else begin
          let rec serve () =
            if Proc.now () > deadline then false
            else
              match recv_opt s buf with
              | Some (n, _) when got n "stop" -> true
              | Some (n, src) ->
                  ignore (Unix.sendto s buf 0 n [] src);
                  serve ()
              | None -> serve ()
          in
          if serve () then Ok (result [ ("role", "pong") ]) else Error "no stop before the deadline"
        end
      in
      Unix.close s;
      res

(* {1 Throughput in a group} *)

(* Casts queued in the stack (made, not yet delivered back to this member,
   which happens as Mflow lets them go) stay below this, so the application
   never piles up more than Mflow's own queue would take. *)
let max_queued = 256

(* FNV-1a's constants, on OCaml's 63-bit integers. *)
let fnv_basis = 0x4bf29ce484222325
let fnv_prime = 0x100000001b3

let group_tput cfg =
  match layers_of cfg.props with
  | Error e -> Error e
  | Ok layers -> (
      let loop = Loop.create () in
      let n = List.length cfg.addrs in
      (* The members that cast: the first [senders] of [addrs], or with
         [not_sequencer] those of the [senders] highest ranks of the first
         view of all (rank 0, Total's sequencer, casts only when every
         member does), chosen again at each view of all until the start. *)
      let sender_addrs =
        ref (if cfg.not_sequencer then [] else List.filteri (fun i _ -> i < cfg.senders) cfg.addrs)
      in
      let i_send = ref ((not cfg.not_sequencer) && cfg.index < cfg.senders) in
      let choose_senders (v : Consort_group.Group.view_info) =
        let k = Array.length v.members in
        sender_addrs :=
          List.filteri
            (fun r _ -> r >= k - cfg.senders)
            (Array.to_list (Array.map addr_part v.members));
        i_send := v.rank >= k - cfg.senders
      in
      let expected = cfg.count * cfg.senders in
      let g = ref None in
      let self () = match !g with Some g -> G.me g | None -> "" in
      (* [try_cast s]: whether the group took [s]; flow control refuses
         when full, and says [flow false] when it may go on. *)
      let try_cast s = match !g with Some g -> Result.is_ok (G.cast g s) | None -> false in
      (* Each payload is written into one buffer, which the group copies
         from before [cast_bytes] returns. *)
      let out = Bytes.create cfg.size in
      let try_cast_payload seq =
        match !g with
        | Some g when seq <= 9_999_999_999 && cfg.size >= 11 ->
            payload_into out ~seq ~size:cfg.size;
            Result.is_ok (G.cast_bytes g out ~off:0 ~len:cfg.size)
        | Some _ -> try_cast (payload ~seq ~size:cfg.size)
        | None -> false
      in
      let cast s = ignore (try_cast s) in
      let readies = Hashtbl.create 8 and dones = Hashtbl.create 8 in
      let next = Hashtbl.create 8 in
      let delivered = ref 0 and errors = ref 0 and first = ref 0 and last = ref 0 in
      (* Every delivery in order, hashed: with Total, the members' hashes
         must be equal. *)
      let order_hash = ref fnv_basis in
      let made = ref 0 and own = ref 0 and started = ref false and started_at = ref 0 in
      let said_done = ref false and views = ref 0 and rank = ref (-1) in
      let fill_pending = ref false in
      let rec fill () =
        fill_pending := false;
        while !made < cfg.count && !made - !own < max_queued && try_cast_payload !made do
          incr made
        done
      and schedule_fill () =
        if !i_send && !started && (not !fill_pending) && !made < cfg.count then begin
          fill_pending := true;
          ignore (Loop.after loop 0 fill)
        end
      in
      let finished () = Hashtbl.length dones >= n in
      let gc0 = ref (0., 0., 0.) and gc1 = ref (0., 0., 0.) in
      let gc_now () =
        let st = Gc.quick_stat () in
        (st.Gc.minor_words, st.promoted_words, st.major_words)
      in
      (* What is known of an origin, found by the identity of its string
         (the view's), so that a delivery costs no hashing or compare. *)
      let origins = ref [] in
      let origin_state origin =
        match List.assq_opt origin !origins with
        | Some st -> st
        | None ->
            let from = addr_part origin in
            let want =
              match Hashtbl.find_opt next from with
              | Some r -> r
              | None ->
                  let r = ref 0 in
                  Hashtbl.replace next from r;
                  r
            in
            let rank =
              let rec find i = function
                | [] -> -1
                | a :: rest -> if a = from then i else find (i + 1) rest
              in
              find 0 cfg.addrs
            in
            let st = (List.mem from !sender_addrs, want, origin = self (), rank) in
            origins := (origin, st) :: !origins;
            st
      in
      (* The clock is read at the first delivery and at the last one
         expected (or at the end of a run that falls short). *)
      let on_checked ~origin checked =
        if !delivered = 0 then begin
          first := Loop.now loop;
          gc0 := gc_now ()
        end;
        incr delivered;
        if !delivered = expected then last := Loop.now loop;
        let is_sender, want, mine, rank = origin_state origin in
        order_hash := !order_hash lxor ((rank lsl 40) lor (checked land 0xff_ffff_ffff)) * fnv_prime;
        if checked >= 0 && is_sender then begin
          if checked <> !want then incr errors;
          want := checked + 1
        end
        else incr errors;
        if mine then begin
          incr own;
          schedule_fill ()
        end;
        if !delivered >= expected && not !said_done then begin
          gc1 := gc_now ();
          said_done := true;
          cast "done"
        end
      in
      let on_data ~origin s =
        on_checked ~origin (Option.value (check_payload s ~size:cfg.size) ~default:(-1))
      in
      let on_data_cs ~origin cs = on_checked ~origin (seq_of_payload_cs cs ~size:cfg.size) in
      let on_cast ~origin s =
        if String.length s = cfg.size then on_data ~origin s
        else if s = "ready" then begin
          Hashtbl.replace readies origin ();
          if Hashtbl.length readies >= n && not !started then begin
            started := true;
            started_at := Loop.now loop;
            if !i_send then fill ()
            else if expected = 0 then begin
              said_done := true;
              cast "done"
            end
          end
        end
        else if s = "done" then Hashtbl.replace dones origin ()
        else incr errors
      in
      let cb =
        {
          Consort_group.Group.view =
            (fun v ->
              incr views;
              rank := v.rank;
              if Array.length v.members = n && cfg.not_sequencer && not !started then
                choose_senders v;
              if Array.length v.members = n && Hashtbl.length readies = 0 then cast "ready");
          cast = on_cast;
          send = (fun ~origin:_ _ -> ());
          block = ignore;
          flow = (fun b -> if not b then schedule_fill ());
          exit = ignore;
        }
      in
      (* Deliveries as views of the received bytes: the payload is checked
         in place, and copied only when it is not a payload. *)
      let on_bytes _kind ~origin cs =
        if Cstruct.length cs = cfg.size then on_data_cs ~origin cs
        else on_cast ~origin (Cstruct.to_string cs)
      in
      let tr = transport loop ~params:cfg.params cfg.props in
      match
        G.join ~params:cfg.params ~peers:(others cfg) ~seed:(cfg.index + 1) ~on_bytes
          ?rekey:(S.rekey tr) ~layers tr ~group:"bench-tput" ~addr:(me cfg) cb
      with
      | Error e -> Error (Fmt.str "%a" Consort_group.Group.pp_join_error e)
      | Ok grp ->
          g := Some grp;
          Loop.run loop ~until:finished ~timeout:(Time.of_sec cfg.deadline);
          if !delivered < expected then last := Loop.now loop;
          (* Stay a moment, in case others still need a cast of ours. *)
          if finished () then Loop.run loop ~timeout:(Time.of_ms 200);
          let fields =
            [
              ("index", string_of_int cfg.index);
              ("delivered", string_of_int !delivered);
              ("expected", string_of_int expected);
              ("errors", string_of_int !errors);
              ("order_hash", Printf.sprintf "%x" (!order_hash land max_int));
              ("span_s", Printf.sprintf "%.6f" (Time.to_sec (!last - !first)));
              ("since_start_s", Printf.sprintf "%.6f" (Time.to_sec (!last - !started_at)));
              ("views", string_of_int !views);
              (* Rank 0 of the view is Total's sequencer: with one sender,
                 whether it is the sender changes what is held. *)
              ("rank", string_of_int !rank);
              ("sender", if !i_send then "1" else "0");
              ("mflow_blocked", string_of_int (counter grp "mflow" "blocked"));
              ("mflow_credits_sent", string_of_int (counter grp "mflow" "credits_sent"));
              ("mnak_naks", string_of_int (counter grp "mnak" "naks_sent"));
              ("mnak_retrans", string_of_int (counter grp "mnak" "retransmissions"));
              ("mnak_beyond_window", string_of_int (counter grp "mnak" "beyond_window"));
              ("fused_sent", string_of_int (fused_counter grp "sent"));
              ("fused_delivered", string_of_int (fused_counter grp "delivered"));
              ("fused_received", string_of_int (fused_counter grp "received"));
              ("fused_held", string_of_int (fused_counter grp "held"));
              ("fused_released", string_of_int (fused_counter grp "released"));
              ( "fused_left",
                match G.stack grp with
                | None -> "-"
                | Some s ->
                    String.concat ";"
                      (List.filter_map
                         (fun (k, v) ->
                           if String.length k > 8 && String.sub k 0 8 = "layered " then
                             Some
                               (Printf.sprintf "%s=%d"
                                  (String.map (function ' ' -> '_' | c -> c) k)
                                  v)
                           else None)
                         (Stack.fused_counters s)) );
            ]
            @ (let (m0, p0, j0), (m1, p1, j1) = (!gc0, !gc1) in
               let per x = Printf.sprintf "%.2f" (x /. float (max 1 (!delivered - 1))) in
               let copies, gbytes = G.copies grp and b = G.bundle_stats grp in
               let udp_copies, ubytes = Udp.copies () in
               [
                 ("minor_words_per_msg", per (m1 -. m0));
                 ("promoted_words_per_msg", per (p1 -. p0));
                 ("major_words_per_msg", per (j1 -. j0));
                 ("copies_per_msg", per (float copies));
                 ("udp_copies_per_msg", per (float udp_copies));
                 ("copied_bytes_per_msg", per (float (gbytes + ubytes)));
                 ( "msgs_per_bundle",
                   Printf.sprintf "%.1f"
                     (float b.Consort_group.Bundle.bundled /. float (max 1 b.bundles_sent)) );
               ])
            @ transport_fields grp
          in
          G.crash grp;
          if finished () then Ok (result fields)
          else Error (String.concat " " ("gave up:" :: List.map (fun (k, v) -> k ^ "=" ^ v) fields))
      )

(* {1 Throughput over blocking sockets, no flow control} *)

let raw_tput cfg =
  let addrs = List.map inet cfg.addrs in
  match List.find_opt Result.is_error addrs with
  | Some (Error e) -> Error e
  | _ ->
      let addrs = List.map Result.get_ok addrs in
      let local = List.nth addrs cfg.index in
      let deadline = Proc.now () +. cfg.deadline in
      let buf = Bytes.create 65536 in
      let got n m = n = String.length m && Bytes.sub_string buf 0 n = m in
      let res =
        if cfg.index = 0 then begin
          let s = udp_socket local ~rcvbuf:0 ~timeout:0.01 in
          let send dst m =
            try ignore (Unix.sendto_substring s m 0 (String.length m) [] dst)
            with Unix.Unix_error _ -> ()
          in
          let receivers = List.tl addrs in
          let answered = Hashtbl.create 4 in
          let rec greet () =
            if Hashtbl.length answered >= List.length receivers then true
            else if Proc.now () > deadline then false
            else begin
              List.iter (fun r -> if not (Hashtbl.mem answered r) then send r "hello") receivers;
              let rec drain () =
                match recv_opt s buf with
                | Some (n, src) when got n "hello" ->
                    Hashtbl.replace answered src ();
                    drain ()
                | Some _ -> drain ()
                | None -> ()
              in
              drain ();
              greet ()
            end
          in
          let res =
            if not (greet ()) then Error "receivers did not answer"
            else begin
              let b = Bytes.of_string (payload ~seq:0 ~size:cfg.size) in
              let failed = ref 0 in
              let t0 = ns_now () in
              for seq = 0 to cfg.count - 1 do
                Bytes.blit_string (Printf.sprintf "d%010d" seq) 0 b 0 11;
                List.iter
                  (fun r ->
                    try ignore (Unix.sendto s b 0 cfg.size [] r)
                    with Unix.Unix_error _ -> incr failed)
                  receivers
              done;
              let span = float (ns_now () - t0) /. 1e9 in
              for _ = 1 to 5 do
                List.iter (fun r -> send r "end") receivers;
                Unix.sleepf 0.01
              done;
              Ok
                (result
                   [
                     ("role", "sender");
                     ("sent", string_of_int (cfg.count * List.length receivers));
                     ("failed", string_of_int !failed);
                     ("span_s", Printf.sprintf "%.6f" span);
                   ])
            end
          in
          Unix.close s;
          res
        end
        else begin
          let s = udp_socket local ~rcvbuf:(4 * 1024 * 1024) ~timeout:0.5 in
          let received = ref 0
          and disorder = ref 0
          and next = ref 0
          and first = ref 0
          and last = ref 0 in
          let rec serve () =
            if Proc.now () > deadline then false
            else
              match recv_opt s buf with
              | Some (n, _) when got n "end" -> true
              | Some (n, src) when got n "hello" ->
                  ignore (Unix.sendto s buf 0 n [] src);
                  serve ()
              | Some (n, _) when n = cfg.size ->
                  let now = ns_now () in
                  if !received = 0 then first := now;
                  last := now;
                  incr received;
                  (match int_of_string_opt (Bytes.sub_string buf 1 10) with
                  | Some seq ->
                      if seq < !next then incr disorder;
                      next := seq + 1
                  | None -> incr disorder);
                  serve ()
              | Some _ -> serve ()
              | None -> !received = 0 && serve ()
          in
          let ok = serve () in
          Unix.close s;
          let fields =
            [
              ("role", "receiver");
              ("received", string_of_int !received);
              ("disorder", string_of_int !disorder);
              ("span_s", Printf.sprintf "%.6f" (float (!last - !first) /. 1e9));
            ]
          in
          if ok || !received > 0 then Ok (result fields)
          else Error "nothing received before the deadline"
        end
      in
      res

let run cfg =
  let n = List.length cfg.addrs in
  if cfg.index < 0 || cfg.index >= n then Error "index outside the addresses"
  else if n < 2 then Error "at least two addresses"
  else
    match cfg.kind with
    | Group_rtt -> group_rtt cfg
    | Engine_rtt -> engine_rtt cfg
    | Raw_rtt -> raw_rtt cfg
    | Group_tput -> group_tput cfg
    | Raw_tput -> raw_tput cfg
