(* A counter server behind a capability, reached by port, in the simulator:
   the owner reads and increments it; a read-only capability made from the
   owner's can read but not increment; a forged one is refused. *)
open Consort_cap
open Consort_crypto
module Sim = Consort_engine.Sim
module R = Rpc.Make (Sim)

let incr_cmd = 1
let read_cmd = 2

let () =
  let net = Sim.create ~seed:1 () in
  let g = Crypto.deterministic "example" in
  let key = Port.Key.generate ~g () in
  let port = Port.Key.port key in
  let secret = Cap.Secret.generate ~g () in
  let counter = ref 0 in
  let objects =
    {
      Std.secret = (fun obj -> if obj = 1 then Some secret else None);
      info = (fun _ -> Printf.sprintf "counter at %d" !counter);
      destroy = (fun _ -> `Denied);
      touch = ignore;
      age = ignore;
      status = (fun () -> "one counter");
    }
  in
  let server = Result.get_ok (R.create ~g net "server") in
  R.serve_std (R.serve server key) objects (fun req ->
      let h = R.header req in
      let answer status v = R.putrep req (Header.reply ~size:v status) "" in
      if h.Header.command = incr_cmd then
        match Std.validate port objects ~need:Rights.modify h with
        | Ok _ -> incr counter; answer `Ok !counter
        | Error s -> answer s 0
      else if h.Header.command = read_cmd then
        match Std.validate port objects ~need:Rights.read h with Ok _ -> answer `Ok !counter | Error s -> answer s 0
      else answer `Combad 0);
  let client = Result.get_ok (R.create ~g ~locate:[ "server" ] net "client") in
  let owner = Cap.owner port ~obj:1 secret in
  let reader = Result.get_ok (Cap.restrict owner Rights.read) in
  let forged = Result.get_ok (Cap.v ~port ~obj:1 ~rights:Rights.all ~check:(String.make 16 '!')) in
  let call name cap cmd =
    R.trans client (Header.request cap cmd) "" (function
      | Ok (h, _) -> Fmt.pr "%-22s %a, value %d@." name Status.pp h.Header.status h.Header.size
      | Error e -> Fmt.pr "%-22s %a@." name Rpc_error.pp e);
    Sim.run net
  in
  Fmt.pr "reader: %s@." (Cap.to_string reader);
  call "owner increments" owner incr_cmd;
  call "owner increments" owner incr_cmd;
  call "reader reads" reader read_cmd;
  call "reader increments" reader incr_cmd;
  call "forged increments" forged incr_cmd;
  R.std_info client reader (function
    | Ok s -> Fmt.pr "std_info               %s@." s
    | Error e -> Fmt.pr "std_info               %a@." Rpc.pp_call_error e);
  Sim.run net
