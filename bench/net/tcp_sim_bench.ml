open Consort
open Consort_net
open Tcp_harness

type setup = {
  connections : int;
  setup_per_sec : float;
  bytes_per_conn : int;
  accounted_per_conn : int;
}

type flow = {
  name : string;
  mbytes_per_sec : float;
  retransmitted : int;
  timeouts : int;
  probes : int;
  cpu_s : float;
}

type sack = { blocks : int; bounded_ns : float; unbounded_ns : float }
type rack = { bulk_on : flow; bulk_off : flow; short_on : flow; short_off : flow }
type report = { setup : setup; flows : flow list; rack : rack; sack : sack }

let live_words () =
  Gc.compact ();
  (Gc.stat ()).live_words

let setup n =
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"bench-setup" () in
  let net = Mem.create_net vclock pool in
  let config = { Tcp.default_config with backlog = n } in
  let (module A) = Node.make ~config net pool 1 ~seed:1 in
  let (module B) = Node.make ~config net pool 2 ~seed:2 in
  let accepted = ref 0 in
  ignore
    (B.T.passive_open B.tcp { B.T.port = 80; from = None } (fun _ ->
         incr accepted;
         { B.T.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }));
  let handler = { A.T.receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) } in
  let before = live_words () in
  let t0 = Sys.time () in
  let conns =
    List.init n (fun _ ->
        match
          A.T.active_open A.tcp { A.T.host = 2; port = 80; local_port = None } (fun _ -> handler)
        with
        | Ok c -> c
        | Error e -> Fmt.failwith "connect: %a" Protocol.pp_error e)
  in
  Clock.Virtual.advance vclock (Time.of_ms 100);
  let secs = Sys.time () -. t0 in
  if !accepted <> n then Fmt.failwith "%d of %d connections accepted" !accepted n;
  let grown = (live_words () - before) * (Sys.word_size / 8) in
  let s = B.T.query B.tcp in
  List.iter A.T.abort conns;
  Clock.Virtual.run_until_idle ~limit:(Time.of_sec 1000.) vclock;
  {
    connections = n;
    setup_per_sec = float n /. secs;
    bytes_per_conn = grown / n;
    accounted_per_conn = s.memory / n;
  }

(* One seed's run is one draw of the losses: a flow is the mean rate of
   [seeds] runs (retransmissions, timeouts and probes summed). *)
let seeds = 4

let flow name ?(impairments = { Mem.perfect with loss = 0.01; delay = Time.of_ms 10 }) config bytes
    =
  let t0 = Sys.time () in
  let rs = List.init seeds (fun i -> Transfer.run ~config ~impairments ~seed:(11 + i) bytes) in
  let sum f = List.fold_left (fun a r -> a + f r) 0 rs in
  {
    name;
    mbytes_per_sec =
      List.fold_left
        (fun a (r : Transfer.result) -> a +. (float r.bytes /. Time.to_sec r.virtual_time /. 1e6))
        0. rs
      /. float seeds;
    retransmitted = sum (fun r -> r.retransmitted);
    timeouts = sum (fun r -> r.timeouts);
    probes = sum (fun r -> r.sender.probes);
    cpu_s = Sys.time () -. t0;
  }

(* [count] transfers of [bytes] each, one after the other (a request's
   reply, say), each with its own seed: where tail losses weigh most. *)
let short_flows name ~count ~bytes config =
  let impairments = { Mem.perfect with loss = 0.01; delay = Time.of_ms 10 } in
  let t0 = Sys.time () in
  let rs = List.init count (fun i -> Transfer.run ~config ~impairments ~seed:(100 + i) bytes) in
  let sum f = List.fold_left (fun a r -> a + f r) 0 rs in
  let vt = sum (fun (r : Transfer.result) -> r.virtual_time) in
  {
    name;
    mbytes_per_sec = float (sum (fun r -> r.bytes)) /. Time.to_sec vt /. 1e6;
    retransmitted = sum (fun r -> r.retransmitted);
    timeouts = sum (fun r -> r.timeouts);
    probes = sum (fun r -> r.sender.probes);
    cpu_s = Sys.time () -. t0;
  }

(* Four new 1-byte blocks per ACK, each above all the others: the worst
   case for a sorted list. *)
let sack_cost ~blocks ~max_blocks =
  let sb = Tcp_sack.create ~max_blocks () in
  let una = Tcp_seq.zero and high = Tcp_seq.of_int 0x7FFF_FFFF in
  let ack i =
    List.init 4 (fun k ->
        let l = Tcp_seq.of_int (2 + (8 * i) + (2 * k)) in
        (l, Tcp_seq.add l 1))
  in
  for i = 0 to (blocks / 4) - 1 do
    ignore (Tcp_sack.update sb ~una ~high (ack i) : int)
  done;
  let rounds = 2000 in
  let t0 = Unix.gettimeofday () in
  for i = blocks / 4 to (blocks / 4) + rounds - 1 do
    ignore (Tcp_sack.update sb ~una ~high (ack i) : int)
  done;
  (Unix.gettimeofday () -. t0) /. float rounds *. 1e9

let run ?(connections = 5000) ?(bytes = 8 * 1024 * 1024) () =
  let setup = setup connections in
  let buf = { Tcp.default_config with send_buffer = 1 lsl 20; receive_buffer = 1 lsl 20 } in
  let flows =
    [
      flow "newreno, 1% loss, 10 ms" buf bytes;
      flow "cubic, 1% loss, 10 ms" { buf with congestion = Cubic } bytes;
      flow "newreno, 10 MB/s bottleneck" buf bytes
        ~impairments:
          { Mem.perfect with rate = Some 10_000_000; queue = 64 * 1024; delay = Time.of_ms 5 };
      flow "cubic, 10 MB/s bottleneck" { buf with congestion = Cubic } bytes
        ~impairments:
          { Mem.perfect with rate = Some 10_000_000; queue = 64 * 1024; delay = Time.of_ms 5 };
    ]
  in
  let rack =
    let off = { buf with rack = false } in
    {
      bulk_on = flow "RACK-TLP, 1% loss, 10 ms" buf bytes;
      bulk_off = flow "no RACK-TLP, 1% loss, 10 ms" off bytes;
      short_on = short_flows "RACK-TLP, 200 x 64 KiB" ~count:200 ~bytes:(64 * 1024) buf;
      short_off = short_flows "no RACK-TLP, 200 x 64 KiB" ~count:200 ~bytes:(64 * 1024) off;
    }
  in
  let blocks = 20_000 in
  let sack =
    {
      blocks;
      bounded_ns = sack_cost ~blocks ~max_blocks:Tcp_sack.default_max_blocks;
      unbounded_ns = sack_cost ~blocks ~max_blocks:max_int;
    }
  in
  { setup; flows; rack; sack }

let pp ppf r =
  Fmt.pf ppf "@[<v>TCP on the in-memory network (each flow: the mean of %d seeds)@," seeds;
  Fmt.pf ppf
    "  setup: %d connections, %.0f handshakes/s of CPU, %d bytes of heap and %d accounted per \
     connection@,"
    r.setup.connections r.setup.setup_per_sec r.setup.bytes_per_conn r.setup.accounted_per_conn;
  let pp_flow f =
    Fmt.pf ppf "  %-30s %6.2f MB/s virtual, %4d retransmitted, %d timeouts, %d probes, %.2f s CPU@,"
      f.name f.mbytes_per_sec f.retransmitted f.timeouts f.probes f.cpu_s
  in
  List.iter pp_flow r.flows;
  List.iter pp_flow [ r.rack.bulk_on; r.rack.bulk_off; r.rack.short_on; r.rack.short_off ];
  Fmt.pf ppf "  RACK-TLP / without: %.2f for one 1%%-loss transfer, %.2f for short transfers@,"
    (r.rack.bulk_on.mbytes_per_sec /. r.rack.bulk_off.mbytes_per_sec)
    (r.rack.short_on.mbytes_per_sec /. r.rack.short_off.mbytes_per_sec);
  (match r.flows with
  | [ nr; cu; nrb; cub ] ->
      Fmt.pf ppf "  cubic / newreno: %.2f at 1%% loss, %.2f through the bottleneck@,"
        (cu.mbytes_per_sec /. nr.mbytes_per_sec)
        (cub.mbytes_per_sec /. nrb.mbytes_per_sec)
  | _ -> ());
  Fmt.pf ppf
    "  SACK-abusing ACK over %d blocks: %.0f ns bounded, %.0f ns unbounded (ratio %.1f)@]@."
    r.sack.blocks r.sack.bounded_ns r.sack.unbounded_ns
    (r.sack.unbounded_ns /. r.sack.bounded_ns)

let to_json r =
  let flows =
    String.concat ","
      (List.map
         (fun f ->
           Printf.sprintf
             "{\"name\":%S,\"mbytes_per_sec\":%.3f,\"retransmitted\":%d,\"timeouts\":%d,\"probes\":%d}"
             f.name f.mbytes_per_sec f.retransmitted f.timeouts f.probes)
         (r.flows @ [ r.rack.bulk_on; r.rack.bulk_off; r.rack.short_on; r.rack.short_off ]))
  in
  Printf.sprintf
    "{\"bench\":\"tcp-sim\",\"setup_per_sec\":%.0f,\"bytes_per_conn\":%d,\"accounted_per_conn\":%d,\"flows\":[%s],\"rack_ratio_bulk\":%.3f,\"rack_ratio_short\":%.3f,\"sack_bounded_ns\":%.0f,\"sack_unbounded_ns\":%.0f}"
    r.setup.setup_per_sec r.setup.bytes_per_conn r.setup.accounted_per_conn flows
    (r.rack.bulk_on.mbytes_per_sec /. r.rack.bulk_off.mbytes_per_sec)
    (r.rack.short_on.mbytes_per_sec /. r.rack.short_off.mbytes_per_sec)
    r.sack.bounded_ns r.sack.unbounded_ns
