(* The same RPC over kernel UDP on loopback, with the blocking calls and
   the standard operations. *)
open Consort_cap
module Udp = Consort_engine.Udp
module Loop = Consort_engine.Loop
module R = Rpc_udp

let ok = function Ok x -> x | Error e -> Alcotest.failf "unexpected error: %s" e

let objects secret destroyed =
  {
    Std.secret = (fun obj -> if obj = 1 && not !destroyed then Some secret else None);
    info = (fun obj -> Printf.sprintf "object %d" obj);
    destroy = (fun _ -> destroyed := true; `Ok);
    touch = ignore;
    age = ignore;
    status = (fun () -> "fine");
  }

let loopback () =
  let loop = Loop.create () in
  let g = Crypto.deterministic "udp" in
  let key = Port.Key.generate ~g () in
  let server = ok (R.open_node ~g ~multicast:None ~bind:"127.0.0.1:0" loop) in
  let addr = Udp.address_to_string (Udp.local (R.connection server)) in
  let srv = R.serve server key in
  let secret = Cap.Secret.generate ~g () in
  let destroyed = ref false in
  R.serve_std srv (objects secret destroyed) (fun r -> R.putrep r (Header.reply `Ok) (String.uppercase_ascii (R.data r)));
  let client = ok (R.open_node ~g ~multicast:None ~locate:addr ~bind:"127.0.0.1:0" loop) in
  let owner = Cap.owner (Port.Key.port key) ~obj:1 secret in
  (match R.Sync.trans client (Header.request owner 1) "hello" with
  | Ok (_, "HELLO") -> ()
  | Ok (_, d) -> Alcotest.failf "got %S" d
  | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e);
  let big = String.init 2_000_000 (fun i -> Char.chr (i land 0xff)) in
  let sent = ref [] and received = ref [] in
  let progress dir d total =
    match dir with `Sent -> sent := (d, total) :: !sent | `Received -> received := (d, total) :: !received
  in
  (match R.Sync.trans client ~progress (Header.request owner 1) big with
  | Ok (_, d) -> Alcotest.(check bool) "2 MB echoed" true (d = String.uppercase_ascii big)
  | Error e -> Alcotest.failf "trans: %a" Rpc_error.pp e);
  let check_progress what l =
    let l = List.rev l in
    Alcotest.(check bool) (what ^ ": reported") true (List.length l > 2);
    Alcotest.(check (pair int int)) (what ^ ": ends at the total") (String.length big, String.length big) (List.hd (List.rev l));
    ignore (List.fold_left (fun prev (d, _) -> if d < prev then Alcotest.failf "%s went back" what; d) 0 l)
  in
  check_progress "sent" !sent;
  check_progress "received" !received;
  (match R.Sync.std_info client owner with Ok "object 1" -> () | _ -> Alcotest.fail "std_info");
  (match R.Sync.std_status client owner with Ok "fine" -> () | _ -> Alcotest.fail "std_status");
  let reader = ok (Result.map_error (Fmt.str "%a" Rpc.pp_call_error) (R.Sync.std_restrict client owner Rights.read)) in
  (* Narrowing a restricted capability needs the server. *)
  let none = ok (Result.map_error (Fmt.str "%a" Rpc.pp_call_error) (R.Sync.std_restrict client reader Rights.none)) in
  Alcotest.(check string) "narrowed by the server" "none" (Rights.to_string none.Cap.rights);
  (match R.Sync.std_destroy client reader with
  | Error (`Status `Denied) -> ()
  | _ -> Alcotest.fail "destroy with a read-only capability");
  let forged = ok (Cap.v ~port:owner.Cap.port ~obj:1 ~rights:Rights.all ~check:(String.make 16 'x')) in
  (match R.Sync.std_destroy client forged with
  | Error (`Status `Capbad) -> ()
  | _ -> Alcotest.fail "destroy with a forged capability");
  (match R.Sync.std_age client reader with Error (`Status `Denied) -> () | _ -> Alcotest.fail "age without admin");
  (match R.Sync.std_destroy client owner with Ok () -> () | _ -> Alcotest.fail "destroy");
  (match R.Sync.std_info client owner with Error (`Status `Notfound) -> () | _ -> Alcotest.fail "destroyed object");
  R.close client;
  R.close server

let tests = [ Alcotest.test_case "loopback UDP, blocking calls, standard operations" `Quick loopback ]
