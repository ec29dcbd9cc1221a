(* The same RPC over Consort's own UDP/IPv4/Ethernet stack (Udp_transport):
   two stacks on the in-memory wire, driven by the virtual clock. *)
open Consort
open Consort_net
open Consort_cap
open Consort_crypto
module U = Udp_transport
module R = Rpc.Make (Udp_transport)

let ok = function Ok x -> x | Error e -> Alcotest.failf "unexpected error: %s" e

let own_stack () =
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = Pool.create ~name:"cap-stack" () in
  let da, db =
    Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool (Mac_addr.local 1) (Mac_addr.local 2)
  in
  let a = Ipstack.create ~clock ~pool ~address:{ addr = Ipv4_addr.v 10 0 0 1; len = 24 } da in
  let b = Ipstack.create ~clock ~pool ~address:{ addr = Ipv4_addr.v 10 0 0 2; len = 24 } db in
  let ta = U.create a and tb = U.create b in
  let addr s = match U.address_of_string s with Ok a -> a | Error e -> Alcotest.fail e in
  let g = Crypto.deterministic "stack" in
  let key = Port.Key.generate ~g () in
  let server = ok (R.create ~g tb (addr "10.0.0.2:7470")) in
  R.listen (R.serve server key) (fun r ->
      R.putrep r (Header.reply `Ok) (String.uppercase_ascii (R.data r)));
  let client = ok (R.create ~g ~locate:[ addr "10.0.0.2:7470" ] ta (addr "10.0.0.1:7471")) in
  let cap = Cap.owner (Port.Key.port key) ~obj:1 (Cap.Secret.generate ~g ()) in
  let call data =
    let res = ref None in
    R.trans client (Header.request cap 1) data (fun r -> res := Some r);
    let rec go n =
      match !res with
      | Some r -> r
      | None ->
          if n = 0 then Alcotest.fail "no answer within 60 s of virtual time";
          Clock.Virtual.advance vc (Time.of_ms 10);
          go (n - 1)
    in
    go 6000
  in
  (match call "hello" with Ok (_, "HELLO") -> () | _ -> Alcotest.fail "small call");
  let big = String.init 200_000 (fun i -> Char.chr (97 + (i mod 26))) in
  (match call big with
  | Ok (_, d) -> Alcotest.(check bool) "200 KB echoed" true (d = String.uppercase_ascii big)
  | Error e -> Alcotest.failf "large call: %a" Rpc_error.pp e);
  R.close client;
  R.close server

let tests = [ Alcotest.test_case "over Consort's own UDP/IP (Udp_transport)" `Quick own_stack ]
