open Consort
module Sim = Consort_engine.Sim
module R = Rpc.Make (Sim)

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;
  delivered : int;
  datagrams : int;
  end_time : Time.t;
}

let names = [ "rpc-at-most-once" ]

let describe = function
  | "rpc-at-most-once" ->
      Some
        "3 clients, 1 server that crashes and restarts; loss, duplication, reordering; each \
         request carried out at most once, every success exactly once"
  | _ -> None

let run_at_most_once ?trace ~seed () =
  let started = Hashtbl.create 64 in
  let rs = Random.State.make [| seed; 0x5eed |] in
  let net = Sim.create ~seed () in
  Sim.set_trace_channel net trace;
  let pct x = float_of_int (Random.State.int rs (x + 1)) /. 100. in
  Sim.set_default_link net
    {
      Sim.latency = Time.of_ms 1;
      jitter = Time.of_ms (Random.State.int rs 3);
      loss = pct 25;
      duplicate = pct 15;
      reorder = pct 25;
      reorder_delay = Time.of_ms 10;
    };
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
  let g = Crypto.deterministic ("rpc-at-most-once-" ^ string_of_int seed) in
  let config =
    {
      Rpc.default_config with
      fragment = 1024;
      window = 8;
      silence = Time.of_sec 2.;
      alive = Time.of_ms 300;
      locate_tries = 4;
    }
  in
  let key = Port.Key.generate ~g () in
  let port = Port.Key.port key in
  let secret = Cap.Secret.generate ~g () in
  let cap = Cap.owner port ~obj:1 secret in
  let executed : (string, int) Hashtbl.t = Hashtbl.create 64 in
  let violations = ref [] in
  let violation fmt = Printf.ksprintf (fun s -> violations := s :: !violations) fmt in
  let server = ref None in
  let start_server () =
    match R.create ~config ~g net "s" with
    | Error e -> violation "server restart failed: %s" e
    | Ok n ->
        server := Some n;
        let srv = R.serve n key in
        R.listen srv (fun r ->
            let id = R.data r in
            let id = if String.length id > 32 then String.sub id 0 32 |> String.trim else id in
            Hashtbl.replace executed id (1 + Option.value ~default:0 (Hashtbl.find_opt executed id));
            note "%d app execute %s" (Sim.now net) id;
            let delay =
              match Random.State.int rs 10 with
              | 0 -> Time.of_ms (1000 + Random.State.int rs 2000) (* long: alive probes *)
              | 1 | 2 -> Time.of_ms (Random.State.int rs 200)
              | _ -> 0
            in
            let answer () =
              if not (R.is_closed n) then
                R.putrep r (Header.reply `Ok)
                  (if String.length (R.data r) > 32 then "done-long:" ^ id else "done:" ^ id)
            in
            if delay = 0 then answer ()
            else ignore (Sim.at net (Time.add (Sim.now net) delay) answer))
  in
  start_server ();
  (* Crashes and restarts. *)
  let restarts = Random.State.int rs 4 in
  for _ = 1 to restarts do
    let at = Time.of_ms (Random.State.int rs 8000) in
    let down = Time.of_ms (10 + Random.State.int rs 800) in
    ignore
      (Sim.at net at (fun () ->
           if Sim.is_open net "s" then begin
             note "%d app crash server" (Sim.now net);
             Sim.crash net "s";
             ignore
               (Sim.at net
                  (Time.add (Sim.now net) down)
                  (fun () -> if not (Sim.is_open net "s") then start_server ()))
           end))
  done;
  let clients = 3 and per_client = 10 in
  let sent = ref 0 and succeeded = ref 0 and last = ref 0 in
  let results : (string, [ `Ok of string | `Err of Rpc_error.t ]) Hashtbl.t = Hashtbl.create 64 in
  for c = 0 to clients - 1 do
    match R.create ~config ~g ~locate:[ "s" ] net (Printf.sprintf "c%d" c) with
    | Error e -> violation "client %d: %s" c e
    | Ok node ->
        let rec go i =
          if i < per_client then begin
            let id = Printf.sprintf "c%d-r%d" c i in
            let data =
              if Random.State.int rs 4 = 0 then
                id ^ String.make (2000 + Random.State.int rs 6000) ' '
              else id
            in
            incr sent;
            Hashtbl.replace started id ();
            note "%d app trans %s" (Sim.now net) id;
            R.trans node (Header.request cap 7) data (fun r ->
                if Hashtbl.mem results id then violation "%s: a second outcome" id
                else begin
                  note "%d app outcome %s %s" (Sim.now net) id
                    (match r with Ok _ -> "ok" | Error e -> Rpc_error.to_string e);
                  Hashtbl.replace results id (match r with Ok (_, d) -> `Ok d | Error e -> `Err e);
                  (match r with Ok _ -> incr succeeded | Error _ -> ());
                  last := Sim.now net;
                  (* The next request after a short think time. *)
                  ignore
                    (Sim.at net
                       (Time.add (Sim.now net) (Time.of_ms (Random.State.int rs 300)))
                       (fun () -> go (i + 1)))
                end)
          end
        in
        ignore (Sim.at net (Time.of_ms (Random.State.int rs 500)) (fun () -> go 0))
  done;
  Sim.run ~until:(Time.of_sec 600.) ~max_events:2_000_000 net;
  let end_time = !last in
  (* The checks. *)
  Hashtbl.iter (fun id n -> if n > 1 then violation "%s carried out %d times" id n) executed;
  for c = 0 to clients - 1 do
    for i = 0 to per_client - 1 do
      let id = Printf.sprintf "c%d-r%d" c i in
      let times = Option.value ~default:0 (Hashtbl.find_opt executed id) in
      match Hashtbl.find_opt results id with
      | None -> if Hashtbl.mem started id then violation "%s: no outcome (hung)" id
      | Some (`Ok d) ->
          if times <> 1 then violation "%s reported done but carried out %d times" id times;
          if d <> "done:" ^ id && d <> "done-long:" ^ id then violation "%s: wrong reply %S" id d
      | Some (`Err e) -> (
          match Rpc_error.outcome e with
          | `Not_executed ->
              if times <> 0 then violation "%s: %s, yet carried out" id (Rpc_error.to_string e)
          | `Unknown -> ())
    done
  done;
  let stats = Sim.stats net in
  {
    violations = List.rev !violations;
    trace_hash = Sim.trace_hash net;
    sent = !sent;
    delivered = !succeeded;
    datagrams = stats.Sim.sent;
    end_time;
  }

let run ?trace name ~seed =
  match name with "rpc-at-most-once" -> Some (run_at_most_once ?trace ~seed ()) | _ -> None

let scenarios =
  Consort_sim.Scenario.of_names ~names ~describe ~run:(fun ?trace ~params:_ name ~seed ->
      Option.map
        (fun (o : outcome) ->
          {
            Consort_sim.Scenario.seed;
            violations = o.violations;
            trace_hash = o.trace_hash;
            sent = o.sent;
            delivered = o.delivered;
            datagrams = o.datagrams;
            end_time = o.end_time;
          })
        (run ?trace name ~seed))
