(* Locating by IP multicast, with no configured addresses: a server and a
   client over kernel UDP inside a network namespace of their own. *)
open Consort_cap
open Consort_crypto
module Udp = Consort_engine.Udp
module Loop = Consort_engine.Loop
module R = Rpc_udp

let group = "239.192.67.80:47470"

let child () =
  let fail fmt =
    Printf.ksprintf
      (fun s ->
        prerr_endline ("multicast child: " ^ s);
        exit 1)
      fmt
  in
  let get = function Ok x -> x | Error e -> fail "%s" e in
  Unix.putenv "CONSORT_LOCATE" "";
  let loop = Loop.create () in
  let g = Crypto.deterministic "mcast" in
  let key = Port.Key.generate ~g () in
  let server = get (R.open_node ~g ~multicast:(Some group) ~bind:"127.0.0.1:0" loop) in
  if not (Udp.query (R.connection server)).Udp.multicast then
    fail "the server did not join the group";
  R.listen (R.serve server key) (fun r -> R.putrep r (Header.reply `Ok) ("mcast:" ^ R.data r));
  let client = get (R.open_node ~g ~multicast:(Some group) ~bind:"127.0.0.1:0" loop) in
  let cap = Cap.owner (Port.Key.port key) ~obj:1 (Cap.Secret.generate ~g ()) in
  (match R.Sync.trans client (Header.request cap 1) "x" with
  | Ok (_, "mcast:x") -> ()
  | Ok (_, d) -> fail "wrong reply %S" d
  | Error e -> fail "%s" (Rpc_error.to_string e));
  (* A node without the group and without addresses finds nothing. *)
  let lonely = get (R.open_node ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  (match R.Sync.trans lonely (Header.request cap 1) "x" with
  | Error `Notfound -> ()
  | _ -> fail "found without multicast or addresses");
  print_endline "multicast child: ok";
  exit 0

let multicast () = Netns_child.run ~what:"the multicast test" ~ns:"consort-cap" ~limit:30.0
let tests = [ Alcotest.test_case "locate by IP multicast (network namespace)" `Quick multicast ]
