(* Virtual circuits: the host's buffers and the ends, directly and over the
   RPC in the simulator, under attack: a reader that never reads, a peer
   that lies, a peer that dies, a host that lies. *)

open Consort_cap
open Consort_crypto
module Vc = Consort_capvc.Vc
module E = Consort_capvc.Vc_end
module P = Consort_capvc.Vc_proto
module Sim = Consort_engine.Sim
module R = Rpc.Make (Sim)
module Time = Consort.Time

let g = Crypto.deterministic "test-vc"
let key = Port.Key.generate ~g ()
let port = Port.Key.port key

let config =
  {
    Vc.default_config with
    capacity = 4096;
    hold = Time.of_ms 100;
    silence = Time.of_sec 2.;
    linger = Time.of_sec 1.;
  }

(* A host and its two ends, both local, on a clock we move by hand. *)
let setup ?(config = config) () =
  let clock = ref 0 in
  let host = Vc.create_host ~config ~g port in
  let c = Result.get_ok (Vc.create host ~now:!clock) in
  let now () = !clock in
  (host, clock, c, E.local host ~now c.Vc.a, E.local host ~now c.Vc.b)

let pattern n = String.init n (fun i -> Char.chr (((i * 7) + (i / 251)) land 0xff))

(* Read everything to the end of file into a buffer. *)
let drain e buf on_end =
  let rec go () =
    E.read e (function
      | `Data d ->
          Buffer.add_string buf d;
          go ()
      | `Intr -> go ()
      | `Eof -> on_end `Eof
      | `Hangup w -> on_end (`Hangup w))
  in
  go ()

let test_transfer () =
  let _, _, _, a, b = setup () in
  let data = pattern 100_000 in
  let got = Buffer.create 16 and ended = ref None and wrote = ref None in
  drain b got (fun r -> ended := Some r);
  E.write a data (fun r ->
      wrote := Some r;
      E.close a (fun _ -> ()));
  Alcotest.(check bool) "write done" true (!wrote = Some (Ok ()));
  Alcotest.(check bool) "eof" true (!ended = Some `Eof);
  Alcotest.(check bool) "bytes in order" true (Buffer.contents got = data)

let test_full_duplex () =
  let _, _, _, a, b = setup () in
  let da = pattern 30_000 and db = String.map Char.uppercase_ascii (pattern 20_000) in
  let ga = Buffer.create 16 and gb = Buffer.create 16 and ea = ref None and eb = ref None in
  drain a ga (fun r -> ea := Some r);
  drain b gb (fun r -> eb := Some r);
  E.write a da (fun _ -> E.close a ignore);
  E.write b db (fun _ -> E.close b ignore);
  Alcotest.(check bool) "a got b's" true (Buffer.contents ga = db && !ea = Some `Eof);
  Alcotest.(check bool) "b got a's" true (Buffer.contents gb = da && !eb = Some `Eof)

(* A reader that never reads: the writer is held, the host keeps at most
   its capacity, and nothing grows however long it goes on. *)
let test_reader_never_reads () =
  let host, clock, _, a, b = setup () in
  let wrote = ref None in
  E.write a (pattern 1_000_000) (fun r -> wrote := Some r);
  for _ = 1 to 50 do
    clock := !clock + Time.of_ms 50;
    Vc.tick host ~now:!clock;
    E.touch b;
    let s = Vc.stats host in
    Alcotest.(check bool) "buffered within capacity" true (s.buffered <= config.capacity);
    Alcotest.(check bool) "at most one held write" true (s.held <= 1)
  done;
  Alcotest.(check bool) "writer still waiting" true (!wrote = None);
  Alcotest.(check int) "exactly a buffer's worth accepted" config.capacity (E.written a);
  (* Reading a little lets the writer go on by as much. *)
  let got = ref 0 in
  E.read b ~max:1000 (function `Data d -> got := String.length d | _ -> ());
  E.read b ~max:1000 (function `Data d -> got := !got + String.length d | _ -> ());
  Alcotest.(check int) "read" 2000 !got;
  Alcotest.(check int) "writer moved by what was read" (config.capacity + 1000) (E.written a);
  E.hangup b (fun _ -> ());
  Alcotest.(check bool)
    "writer told of the hang-up" true
    (match !wrote with Some (Error _) -> true | _ -> false)

let test_eof_and_interrupt () =
  let _, _, _, a, b = setup () in
  let evs = ref [] in
  let rec go n =
    if n > 0 then
      E.read b (fun ev ->
          evs := ev :: !evs;
          go (n - 1))
  in
  go 4;
  (* The read is held: an interrupt releases it at once. *)
  E.intr a ignore;
  E.write a "last words" ignore;
  E.close a ignore;
  Alcotest.(check bool)
    "interrupt, data, eof" true
    (List.rev !evs = [ `Intr; `Data "last words"; `Eof; `Eof ])

let test_hangup_wakes_everyone () =
  let _, _, _, a, b = setup () in
  let ra = ref None and rb = ref None in
  E.read a (fun ev -> ra := Some ev);
  E.read b (fun ev -> rb := Some ev);
  E.hangup a ignore;
  (match (!ra, !rb) with
  | Some (`Hangup _), Some (`Hangup w) -> Alcotest.(check string) "reason" "end A hung up" w
  | _ -> Alcotest.fail "held reads not answered by the hang-up");
  let w = ref None in
  E.write b "x" (fun r -> w := Some r);
  Alcotest.(check bool)
    "write after hang-up refused" true
    (match !w with Some (Error _) -> true | _ -> false)

(* A peer that dies: its end falls silent; the other end is told. *)
let test_peer_silent () =
  let host, clock, _, a, b = setup () in
  ignore b;
  let r = ref None in
  let rec read () = E.read a (function `Hangup w -> r := Some w | _ -> read ()) in
  read ();
  let steps = ref 0 in
  while !r = None && !steps < 100 do
    incr steps;
    clock := !clock + Time.of_ms 100;
    Vc.tick host ~now:!clock
  done;
  Alcotest.(check (option string)) "hung up for silence" (Some "end B fell silent") !r;
  Alcotest.(check bool)
    "within silence and a hold" true
    (!clock <= config.silence + config.hold + Time.of_ms 100);
  (* Forgotten after linger. *)
  clock := !clock + config.linger;
  Vc.tick host ~now:!clock;
  Alcotest.(check int) "forgotten" 0 (Vc.stats host).circuits

(* A peer that lies: requests that name positions outside the stream,
   oversize chunks, forged or narrowed capabilities. Each is refused, and
   the stream goes on exactly as before. *)
let test_lying_peer () =
  let host, clock, c, a, b = setup () in
  let raw h d =
    let r = ref None in
    Vc.handle host ~now:!clock h d (fun x -> r := Some x);
    match !r with Some (h, _) -> h.Header.status | None -> `Other 999 (* held *)
  in
  let st = Alcotest.testable Status.pp Status.equal in
  E.write a "0123456789" ignore;
  Alcotest.check st "write past the end" `Argbad
    (raw (Header.request ~offset:20 c.Vc.a P.vc_write) "zz");
  Alcotest.check st "oversize write" `Argbad
    (raw (Header.request ~offset:10 c.Vc.a P.vc_write) (String.make (P.max_chunk + 1) 'z'));
  Alcotest.check st "read past the end" `Argbad
    (raw (Header.request ~offset:11 ~size:10 c.Vc.b P.vc_read) "");
  Alcotest.check st "zero-size read" `Argbad
    (raw (Header.request ~offset:0 ~size:0 c.Vc.b P.vc_read) "");
  Alcotest.check st "close at a wrong place" `Argbad
    (raw (Header.request ~offset:3 c.Vc.a P.vc_close) "");
  let read_only = Result.get_ok (Cap.restrict c.Vc.a Rights.read) in
  Alcotest.check st "write without the right" `Denied
    (raw (Header.request ~offset:10 read_only P.vc_write) "zz");
  let forged =
    Result.get_ok
      (Cap.v ~port ~obj:c.Vc.a.Cap.obj ~rights:Rights.all ~check:(String.make Cap.check_length 'x'))
  in
  Alcotest.check st "forged" `Capbad (raw (Header.request ~offset:10 forged P.vc_write) "zz");
  let other =
    Result.get_ok (Cap.v ~port ~obj:(c.Vc.a.Cap.obj + 2) ~rights:Rights.all ~check:c.Vc.a.Cap.check)
  in
  Alcotest.check st "no such circuit" `Notfound
    (raw (Header.request ~offset:0 other P.vc_write) "zz");
  (* A resent write (same bytes at the same place) is not taken twice. *)
  Alcotest.check st "resent write" `Ok (raw (Header.request ~offset:5 c.Vc.a P.vc_write) "56789");
  let got = ref "" in
  E.read b (function `Data d -> got := d | _ -> ());
  Alcotest.(check string) "stream unchanged" "0123456789" !got;
  (* The next read acknowledges the first ten bytes. *)
  E.read b (function
    | `Data d -> got := d
    | _ -> ());
  Alcotest.check st "read before what was acknowledged" `Argbad
    (raw (Header.request ~offset:5 ~size:10 c.Vc.b P.vc_read) "");
  E.write a "abc" ignore;
  Alcotest.(check string) "goes on" "abc" !got;
  Alcotest.(check bool) "not hung up" true (E.hung a = None && E.hung b = None)

(* A host that lies: replies with positions that go back or jump ahead
   hang the end up instead of looping or losing bytes. *)
let test_lying_host () =
  let cap = Cap.owner port ~obj:2 (Cap.Secret.generate ~g ()) in
  let calls = ref 0 in
  let liar reply ~idempotent:_ _h _d k =
    incr calls;
    k (Ok (reply ()))
  in
  let e = E.create (liar (fun () -> (Header.reply ~offset:1_000_000 `Ok, ""))) cap in
  let r = ref None in
  E.write e "hello" (fun x -> r := Some x);
  Alcotest.(check bool)
    "write: jump ahead refused" true
    (match !r with Some (Error _) -> true | _ -> false);
  let e = E.create (liar (fun () -> (Header.reply ~offset:7 `Ok, "abc"))) cap in
  let r = ref None in
  E.read e (fun x -> r := Some x);
  Alcotest.(check bool)
    "read: wrong position refused" true
    (match !r with Some (`Hangup _) -> true | _ -> false);
  let e =
    E.create (liar (fun () -> (Header.reply ~offset:0 `Ok, String.make (P.max_chunk + 1) 'x'))) cap
  in
  let r = ref None in
  E.read e ~max:10 (fun x -> r := Some x);
  Alcotest.(check bool)
    "read: more than asked refused" true
    (match !r with Some (`Hangup _) -> true | _ -> false);
  Alcotest.(check bool) "few calls" true (!calls <= 3)

let test_bounded_circuits () =
  let host = Vc.create_host ~config:{ config with max_circuits = 3 } ~g port in
  for _ = 1 to 3 do
    ignore (Result.get_ok (Vc.create host ~now:0))
  done;
  Alcotest.(check bool) "fourth refused" true (Vc.create host ~now:0 = Error `Full)

(* Over the RPC, in the simulator: lossy, duplicating, reordering links;
   both directions at once; every byte in order, each seed. Then the
   remote process crashes: the host's end is told; and the host crashes:
   the remote end is told. *)
let over_rpc ~seed ~crash =
  let net = Sim.create ~seed () in
  let rs = Random.State.make [| seed |] in
  Sim.set_default_link net
    {
      Sim.latency = Time.of_ms 1;
      jitter = Time.of_ms 2;
      loss = 0.1;
      duplicate = 0.05;
      reorder = 0.1;
      reorder_delay = Time.of_ms 5;
    };
  let g = Crypto.deterministic ("vc-" ^ string_of_int seed) in
  let rpc = { Rpc.default_config with fragment = 1024; window = 8; silence = Time.of_sec 2. } in
  let hn = Result.get_ok (R.create ~config:rpc ~g net "host") in
  let rn = Result.get_ok (R.create ~config:rpc ~g ~locate:[ "host" ] net "remote") in
  let vcfg = { config with hold = Time.of_ms 300; silence = Time.of_sec 3. } in
  let host = Vc.create_host ~config:vcfg ~g port in
  let srv = R.serve hn key in
  R.listen srv (fun r ->
      Vc.handle host ~now:(Sim.now net) (R.header r) (R.data r) (fun (h, d) -> R.putrep r h d));
  let rec tick () =
    Vc.tick host ~now:(Sim.now net);
    ignore (Sim.at net (Time.add (Sim.now net) (Time.of_ms 100)) tick)
  in
  tick ();
  let c = Result.get_ok (Vc.create host ~now:(Sim.now net)) in
  let a = E.local host ~now:(fun () -> Sim.now net) c.Vc.a in
  let b = E.create (fun ~idempotent h d k -> R.trans rn ~idempotent h d k) c.Vc.b in
  let da = pattern (20_000 + Random.State.int rs 20_000)
  and db = String.map Char.lowercase_ascii (pattern 15_000) in
  let ga = Buffer.create 16 and gb = Buffer.create 16 and ea = ref None and eb = ref None in
  drain a ga (fun r -> ea := Some r);
  drain b gb (fun r -> eb := Some r);
  E.write a da (fun _ -> E.close a ignore);
  E.write b db (fun _ -> E.close b ignore);
  Sim.run ~until:(Time.of_sec 120.) ~max_events:2_000_000 net;
  if Buffer.contents ga <> db || Buffer.contents gb <> da then
    Alcotest.failf "seed %d: bytes differ (%d/%d, %d/%d)" seed (Buffer.length ga) (String.length db)
      (Buffer.length gb) (String.length da);
  if !ea <> Some `Eof || !eb <> Some `Eof then Alcotest.failf "seed %d: no end of file" seed;
  (* A second circuit, whose remote end dies or whose host dies. *)
  let c = Result.get_ok (Vc.create host ~now:(Sim.now net)) in
  let a = E.local host ~now:(fun () -> Sim.now net) c.Vc.a in
  let b = E.create (fun ~idempotent h d k -> R.trans rn ~idempotent h d k) c.Vc.b in
  let ra = ref None and rb = ref None in
  let rec ka () = E.read a (function `Hangup w -> ra := Some w | _ -> ka ()) in
  let rec kb () = E.read b (function `Hangup w -> rb := Some w | _ -> kb ()) in
  ka ();
  kb ();
  let t0 = Sim.now net in
  ignore
    (Sim.at net
       (Time.add t0 (Time.of_ms 500))
       (fun () -> Sim.crash net (if crash = `Remote then "remote" else "host")));
  Sim.run ~until:(Time.add t0 (Time.of_sec 60.)) ~max_events:2_000_000 net;
  match crash with
  | `Remote ->
      if !ra <> Some "end B fell silent" then
        Alcotest.failf "seed %d: host's end not told of the dead peer" seed
  | `Host -> (
      match !rb with
      | Some w when String.length w > 0 -> ()
      | _ -> Alcotest.failf "seed %d: remote end not told of the dead host" seed)

let test_over_rpc () =
  for seed = 1 to 60 do
    over_rpc ~seed ~crash:(if seed mod 2 = 0 then `Remote else `Host)
  done

let () =
  Alcotest.run "capvc"
    [
      ( "circuit",
        [
          Alcotest.test_case "transfer" `Quick test_transfer;
          Alcotest.test_case "full duplex" `Quick test_full_duplex;
          Alcotest.test_case "reader never reads" `Quick test_reader_never_reads;
          Alcotest.test_case "eof and interrupt" `Quick test_eof_and_interrupt;
          Alcotest.test_case "hang-up" `Quick test_hangup_wakes_everyone;
          Alcotest.test_case "peer silent" `Quick test_peer_silent;
          Alcotest.test_case "lying peer" `Quick test_lying_peer;
          Alcotest.test_case "lying host" `Quick test_lying_host;
          Alcotest.test_case "bounded circuits" `Quick test_bounded_circuits;
        ] );
      ("rpc", [ Alcotest.test_case "lossy sim, crashes" `Quick test_over_rpc ]);
    ]
