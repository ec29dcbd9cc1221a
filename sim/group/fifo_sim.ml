open Consort
module Sim = Consort_engine.Sim
module Ep = Consort_engine.Endpoint.Make (Sim)
module Fifo = Consort_spec.Fifo

type workload = Casts | Sends

type spec = {
  name : string;
  doc : string;
  layers : Layer.t list;
  requires : Contract.t list;
  workload : workload;
  endpoints : int;
  per_sender : int;
}

let lossy =
  {
    Sim.latency = Time.of_ms 1;
    jitter = Time.of_ms 2;
    loss = 0.30;
    duplicate = 0.10;
    reorder = 0.20;
    reorder_delay = Time.of_ms 10;
  }

let scenarios =
  [
    {
      name = "pt2pt-lossy";
      doc =
        "5 endpoints send point-to-point messages to random peers; loss 30%, duplication 10%, \
         reordering";
      layers = [ Consort_group.Pt2pt.layer; Consort_group.Bottom.layer ];
      requires = [ Contract.reliable_send ];
      workload = Sends;
      endpoints = 5;
      per_sender = 30;
    };
    {
      name = "mnak-lossy";
      doc = "5 endpoints cast to the group; loss 30%, duplication 10%, reordering";
      layers = [ Consort_group.Mnak.layer; Consort_group.Bottom.layer ];
      requires = [ Contract.reliable_cast ];
      workload = Casts;
      endpoints = 5;
      per_sender = 30;
    };
  ]

(* Application payload: sender and sequence number, then padding of a
   random length so that messages differ in size. *)
let payload_codec = Codec.(tup3 varint varint (string ~max:4096 ()))

let run_spec ?trace ?params spec ~seed =
  let rng = Rng.create seed in
  let pool = Pool.create ~segment_size:65536 ~name:spec.name () in
  let net = Sim.create ~pool ~seed:(Rng.int rng 0x3fff_ffff) () in
  Sim.set_trace_channel net trace;
  Sim.set_default_link net lossy;
  let n = spec.endpoints in
  let members = Array.init n (Printf.sprintf "p%d") in
  let events = ref [] in
  let record e = events := e :: !events in
  let note fmt =
    Printf.ksprintf
      (fun s ->
        Option.iter
          (fun oc ->
            output_string oc s;
            output_char oc '\n')
          trace)
      fmt
  in
  let violations = ref [] in
  let delivered = ref 0 in
  let last = ref 0 in
  let endpoints =
    Array.init n (fun rank ->
        let view = View.v ~group:spec.name ~members ~rank () in
        let deliver src msg =
          let body = Msg.body msg in
          Msg.release msg;
          let s = Iovecs.to_string body in
          Iovecs.release body;
          match (Codec.decode_string payload_codec s, src) with
          | Ok (sender, seq, _), (Event.Cast_from o | Event.Send_from o) when o = sender ->
              incr delivered;
              last := Sim.now net;
              note "%d app deliver at=%d from=%d seq=%d" (Sim.now net) rank sender seq;
              record
                (Fifo.Delivered
                   {
                     receiver = rank;
                     sender;
                     cast = (match src with Event.Cast_from _ -> true | _ -> false);
                     seq;
                   })
          | Ok (sender, seq, _), _ ->
              violations :=
                Printf.sprintf "endpoint %d: message (%d,%d) delivered as %s" rank sender seq
                  (Fmt.str "%a" Event.pp_src src)
                :: !violations
          | Error e, _ ->
              violations :=
                Fmt.str "endpoint %d: undecodable payload delivered (%a)" rank Codec.pp_error e
                :: !violations
        in
        let app = { Stack.deliver; ctl = (fun _ -> ()) } in
        match
          Ep.create ?params ~pool ~requires:spec.requires net ~view ~seed:(Rng.int rng 0x3fff_ffff)
            ~layers:spec.layers ~app ()
        with
        | Ok ep -> ep
        | Error e -> Fmt.failwith "scenario %s: %a" spec.name Consort_engine.Endpoint.pp_error e)
  in
  (* Each sender's messages at random times in the first second. *)
  let sent = ref 0 in
  for sender = 0 to n - 1 do
    let times =
      List.init spec.per_sender (fun _ -> Rng.int rng 1_000_000_000) |> List.sort compare
    in
    List.iteri
      (fun seq at ->
        let kind =
          match spec.workload with
          | Casts -> Fifo.Cast
          | Sends -> Fifo.Send ((sender + 1 + Rng.int rng (n - 1)) mod n)
        in
        let pad = String.make (Rng.int rng 200) (Char.chr (97 + (seq mod 26))) in
        ignore
          (Sim.at net at (fun () ->
               let msg =
                 Msg.create
                   (Iovecs.of_string pool (Codec.encode_string payload_codec (sender, seq, pad)))
               in
               incr sent;
               record (Fifo.Sent { sender; kind; seq });
               note "%d app send from=%d seq=%d" (Sim.now net) sender seq;
               match kind with
               | Fifo.Cast -> Ep.cast endpoints.(sender) msg
               | Fifo.Send dst -> Ep.send endpoints.(sender) dst msg)))
      times
  done;
  Sim.run ~until:(Time.of_sec 120.) ~max_events:5_000_000 net;
  let end_time = !last in
  let fifo =
    match Fifo.check ~n (List.rev !events) with
    | Ok () -> []
    | Error vs -> List.map (Fmt.str "%a" Fifo.pp_violation) vs
  in
  Array.iter Ep.close endpoints;
  let held =
    match Pool.in_use pool with
    | 0 -> []
    | k -> [ Printf.sprintf "%d buffer segments still referenced after every endpoint closed" k ]
  in
  let stats = Sim.stats net in
  {
    Consort_sim.Scenario.seed;
    violations = List.rev !violations @ fifo @ held;
    trace_hash = Sim.trace_hash net;
    sent = !sent;
    delivered = !delivered;
    datagrams = stats.Sim.sent;
    end_time;
  }

let scenarios =
  List.map
    (fun spec ->
      {
        Consort_sim.Scenario.name = spec.name;
        doc = spec.doc;
        run = (fun ?trace ~params ~seed () -> run_spec ?trace ~params spec ~seed);
      })
    scenarios
