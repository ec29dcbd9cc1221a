(* Three members cast reliably over a simulated network that loses a quarter
   of all datagrams. Run with: dune exec examples/reliable_cast.exe *)

open Consort
module Sim = Consort_engine.Sim
module Ep = Consort_engine.Endpoint.Make (Sim)

let () =
  let net = Sim.create ~seed:7 () in
  Sim.set_default_link net { Sim.default_link with loss = 0.25; jitter = Time.of_ms 3 };
  let members = [| "alice"; "bob"; "carol" |] in
  let layers = [ Consort_group.Mnak.layer; Consort_group.Bottom.layer ] in
  Fmt.pr "stack: %s@." (Stack.describe layers);
  let endpoint rank =
    let view = View.v ~group:"example" ~members ~rank () in
    let deliver src msg =
      let body = Msg.body msg in
      Msg.release msg;
      (match src with
      | Event.Cast_from o ->
          Fmt.pr "%a  %s got %S from %s@." Time.pp (Sim.now net) members.(rank) (Iovecs.to_string body)
            members.(o)
      | _ -> ());
      Iovecs.release body
    in
    match
      Ep.create net ~view ~seed:rank ~layers ~requires:[ Contract.reliable_cast ]
        ~app:{ Stack.deliver; ctl = ignore } ()
    with
    | Ok ep -> ep
    | Error e -> Fmt.failwith "%a" Consort_engine.Endpoint.pp_error e
  in
  let eps = Array.init 3 endpoint in
  Array.iteri
    (fun rank ep ->
      for i = 1 to 2 do
        ignore
          (Sim.at net (Time.of_ms (10 * i + rank)) (fun () ->
               Ep.cast ep (Msg.of_string Pool.default (Printf.sprintf "hello #%d" i))))
      done)
    eps;
  Sim.run ~until:(Time.of_sec 5.) net;
  Array.iter Ep.close eps;
  Fmt.pr "network: %a@." Sim.pp_stats (Sim.stats net)
