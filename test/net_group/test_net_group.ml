(* The generic transport over this stack's UDP, and a group over it: two
   stacks on the in-memory wire, driven by the virtual clock, so every run
   is the same. *)

open Consort
open Consort_net
module S = Ipstack
module U = Udp_transport
module G = Consort_group.Group.Make (Udp_transport)

(* A cast the group refuses fails the test. *)
let accepted = function
  | Ok () -> ()
  | Error e -> Alcotest.failf "cast refused: %a" Consort_group.Group.pp_error e

let ip_a = Ipv4_addr.v 10 0 0 1
let ip_b = Ipv4_addr.v 10 0 0 2

type world = { vc : Clock.Virtual.clock; pool : Pool.t; a : S.t; b : S.t; ta : U.t; tb : U.t }

let world () =
  Iovec.set_checked true;
  let vc = Clock.Virtual.create () in
  let clock = Clock.Virtual.clock vc in
  let pool = Pool.create ~name:"net_group" () in
  let da, db =
    Mem_link.pair ~clock ~pool_a:pool ~pool_b:pool (Mac_addr.local 1) (Mac_addr.local 2)
  in
  let a = S.create ~clock ~pool ~address:{ addr = ip_a; len = 24 } da in
  let b = S.create ~clock ~pool ~address:{ addr = ip_b; len = 24 } db in
  { vc; pool; a; b; ta = U.create a; tb = U.create b }

let advance w d = Clock.Virtual.advance w.vc d
let run w = advance w (Time.of_ms 50)

(* Advances time in 10 ms steps until [cond], at most [limit]. *)
let run_until w ?(limit = Time.of_sec 30.) what cond =
  let step = Time.of_ms 10 in
  let rec go left =
    if not (cond ()) then begin
      if left <= 0 then Alcotest.failf "%s: not within %a of virtual time" what Time.pp limit;
      advance w step;
      go (left - step)
    end
  in
  go limit

let addr s = match U.address_of_string s with Ok a -> a | Error e -> Alcotest.fail e
let ok_tr = function Ok x -> x | Error e -> Alcotest.failf "%a" Transport.pp_error e
let msg w s = Msg.of_string w.pool s

let collector () =
  let got = ref [] in
  let handler _ =
    {
      U.recv =
        (fun ~src v ->
          got := (U.address_to_string src, Iovec.to_string v) :: !got;
          Iovec.release v);
      closed = ignore;
    }
  in
  (got, handler)

let no_leaks w =
  Alcotest.(check int) "no buffers in use" 0 (Pool.in_use w.pool);
  Alcotest.(check int) "no leaks" 0 (Pool.leak_check w.pool)

(* {1 The transport} *)

let addresses () =
  let a = addr "10.0.0.1:7400" in
  Alcotest.(check string) "printed back" "10.0.0.1:7400" (U.address_to_string a);
  Alcotest.(check bool) "fields" true (Ipv4_addr.equal a.ip ip_a && a.port = 7400);
  Alcotest.(check bool) "equal" true (U.equal_address a (addr "10.0.0.1:7400"));
  Alcotest.(check bool) "not equal" false (U.equal_address a (addr "10.0.0.1:7401"));
  List.iter
    (fun s ->
      match U.address_of_string s with Ok _ -> Alcotest.failf "%S accepted" s | Error _ -> ())
    [
      "";
      "10.0.0.1";
      "10.0.0.1:";
      "10.0.0.1:65536";
      "10.0.0.1:-1";
      "10.0.0:7";
      "host:7";
      "10.0.0.1:7x";
    ]

let send_and_receive () =
  let w = world () in
  let got, h = collector () in
  let cb = ok_tr (U.open_ w.tb (addr "10.0.0.2:7000") h) in
  let ca =
    ok_tr
      (U.open_ w.ta (addr "0.0.0.0:7001") (fun _ ->
           { U.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }))
  in
  Alcotest.(check string) "local address" "10.0.0.1:7001" (U.address_to_string (U.query ca).local);
  let m = msg w "hello" in
  ok_tr (U.send ca ~dst:(addr "10.0.0.2:7000") m);
  Msg.release m;
  run w;
  Alcotest.(check (list (pair string string)))
    "received with its sender"
    [ ("10.0.0.1:7001", "hello") ]
    !got;
  (* Headers pushed on a message go out in front of its body. *)
  let m = Msg.push Codec.uint16 0x4142 (msg w "body") in
  ok_tr (U.send ca ~dst:(addr "10.0.0.2:7000") m);
  Msg.release m;
  run w;
  Alcotest.(check string) "headers then body" "ABbody" (snd (List.hd !got));
  let qa = U.query ca and qb = U.query cb in
  Alcotest.(check int) "sent" 2 qa.sent;
  Alcotest.(check int) "received" 2 qb.received;
  Alcotest.(check int) "nothing dropped" 0 (qa.dropped + qb.dropped);
  Alcotest.(check int) "MTU offered" 65507 qb.mtu;
  Alcotest.(check int) "unfragmented MTU" 1472 (U.link_mtu w.tb);
  Alcotest.(check bool) "no multicast" false qb.multicast;
  Alcotest.(check int) "the datagrams crossed our UDP" 2 (S.Udp.query w.b.udp).datagrams_in;
  U.close ca;
  U.close cb;
  run w;
  no_leaks w

let big_datagrams () =
  let w = world () in
  let got, h = collector () in
  let _cb = ok_tr (U.open_ w.tb (addr "10.0.0.2:7000") h) in
  let ca =
    ok_tr
      (U.open_ w.ta (addr "10.0.0.1:7001") (fun _ ->
           { U.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }))
  in
  (* The first datagram to a peer waits for ARP in a short queue: a small
     one resolves the peer first. *)
  let m = msg w "hi" in
  ok_tr (U.send ca ~dst:(addr "10.0.0.2:7000") m);
  Msg.release m;
  run w;
  got := [];
  let data = String.init U.mtu (fun i -> Char.chr (i * 31 land 255)) in
  let m = msg w data in
  ok_tr (U.send ca ~dst:(addr "10.0.0.2:7000") m);
  Msg.release m;
  run w;
  (match !got with
  | [ (_, d) ] -> Alcotest.(check bool) "65507 bytes, byte for byte" true (d = data)
  | l -> Alcotest.failf "%d datagrams received" (List.length l));
  Alcotest.(check bool) "sent in fragments" true ((S.Ip.query w.a.ip).fragments_sent >= 45);
  let m = msg w (data ^ "x") in
  (match U.send ca ~dst:(addr "10.0.0.2:7000") m with
  | Error (`Too_big (65508, 65507)) -> ()
  | Ok () -> Alcotest.fail "65508 bytes accepted"
  | Error e -> Alcotest.failf "wrong error: %a" Transport.pp_error e);
  Msg.release m;
  run w;
  no_leaks w

let fan_out_and_loopback () =
  let w = world () in
  let got1, h1 = collector () and got2, h2 = collector () and got3, h3 = collector () in
  let c1 = ok_tr (U.open_ w.ta (addr "10.0.0.1:7400") h1) in
  let _c2 = ok_tr (U.open_ w.ta (addr "10.0.0.1:7401") h2) in
  let _c3 = ok_tr (U.open_ w.tb (addr "10.0.0.2:7400") h3) in
  Alcotest.(check int) "two connections on A" 2 (U.connections w.ta);
  let m = msg w "to all" in
  ok_tr (U.cast c1 ~dsts:[ addr "10.0.0.1:7401"; addr "10.0.0.2:7400" ] m);
  Alcotest.(check (list (pair string string))) "loopback waits for the clock" [] !got2;
  Msg.release m;
  run w;
  Alcotest.(check (list (pair string string)))
    "same stack, other port"
    [ ("10.0.0.1:7400", "to all") ]
    !got2;
  Alcotest.(check (list (pair string string))) "other stack" [ ("10.0.0.1:7400", "to all") ] !got3;
  Alcotest.(check (list (pair string string))) "not to itself" [] !got1;
  Alcotest.(check int) "two sent" 2 (U.query c1).sent;
  (* A port nobody opened on our own address: gone, as on a host. *)
  let m = msg w "nobody" in
  ok_tr (U.send c1 ~dst:(addr "10.0.0.1:9999") m);
  Msg.release m;
  run w;
  no_leaks w

let errors_and_controls () =
  let w = world () in
  let closed = ref 0 in
  let got, h = collector () in
  let h c = { (h c) with U.closed = (fun () -> incr closed) } in
  let cb = ok_tr (U.open_ w.tb (addr "10.0.0.2:7000") h) in
  (match U.open_ w.tb (addr "10.0.0.2:7000") h with
  | Error (`Address_in_use _) -> ()
  | _ -> Alcotest.fail "a port in use was opened twice");
  (match U.open_ w.tb (addr "10.0.0.9:7000") h with
  | Error (`Bad_address _) -> ()
  | _ -> Alcotest.fail "an address not the stack's was opened");
  let e1 = ok_tr (U.open_ w.tb (addr "0.0.0.0:0") h) in
  let e2 = ok_tr (U.open_ w.tb (addr "10.0.0.2:0") h) in
  Alcotest.(check (list int))
    "ephemeral ports" [ 49152; 49153 ]
    [ (U.query e1).local.port; (U.query e2).local.port ];
  (match U.control cb (U.Join_multicast (addr "239.1.2.3:7500")) with
  | Error (`Unsupported _) -> ()
  | _ -> Alcotest.fail "multicast accepted");
  let ca = ok_tr (U.open_ w.ta (addr "10.0.0.1:7001") h) in
  let send s =
    let m = msg w s in
    let r = U.send ca ~dst:(addr "10.0.0.2:7000") m in
    Msg.release m;
    r
  in
  (* The filter sees the datagram and its sender. *)
  ok_tr
    (U.control cb
       (U.Drop_filter
          (Some
             (fun ~src cs ->
               U.address_to_string src = "10.0.0.1:7001" && Cstruct.to_string cs = "drop me"))));
  ok_tr (send "drop me");
  ok_tr (send "keep me");
  run w;
  Alcotest.(check (list string)) "filtered" [ "keep me" ] (List.map snd !got);
  Alcotest.(check int) "counted as dropped" 1 (U.query cb).dropped;
  ok_tr (U.control cb (U.Drop_filter None));
  ok_tr (send "drop me");
  run w;
  Alcotest.(check int) "filter removed" 2 (List.length !got);
  (match
     let m = msg w "x" in
     Fun.protect ~finally:(fun () -> Msg.release m) (fun () -> U.send ca ~dst:(addr "10.0.0.2:0") m)
   with
  | Error (`Bad_address _) -> ()
  | _ -> Alcotest.fail "port 0 accepted as a destination");
  (match
     let m = msg w "x" in
     Fun.protect
       ~finally:(fun () -> Msg.release m)
       (fun () -> U.send ca ~dst:(addr "192.168.1.1:7") m)
   with
  | Error (`Unreachable _) -> ()
  | r -> Alcotest.failf "no route, yet %a" Fmt.(result ~ok:nop ~error:Transport.pp_error) r);
  U.close cb;
  U.close cb;
  Alcotest.(check int) "closed called once" 1 !closed;
  (match send "after close" with
  | Ok () -> ()
  | Error e -> Alcotest.failf "%a" Transport.pp_error e);
  run w;
  Alcotest.(check int) "after close: port unreachable" 1 (S.Udp.query w.b.udp).no_port;
  U.close ca;
  (match send "closed" with
  | Error `Closed -> ()
  | _ -> Alcotest.fail "send on a closed connection");
  (match U.control ca (U.Drop_filter None) with
  | Error `Closed -> ()
  | _ -> Alcotest.fail "control on a closed connection");
  (* The port is free again. *)
  let again = ok_tr (U.open_ w.tb (addr "10.0.0.2:7000") h) in
  List.iter U.close [ again; e1; e2 ];
  Alcotest.(check int) "no connection left" 0 (U.connections w.tb);
  run w;
  no_leaks w

let timers () =
  let w = world () in
  let t0 = U.now w.ta in
  let fired = ref [] in
  let (_ : U.timer) = U.at w.ta (t0 + Time.of_ms 20) (fun () -> fired := 20 :: !fired) in
  let tm = U.at w.ta (t0 + Time.of_ms 10) (fun () -> fired := 10 :: !fired) in
  let (_ : U.timer) = U.at w.ta (t0 + Time.of_ms 5) (fun () -> fired := 5 :: !fired) in
  U.cancel tm;
  advance w (Time.of_ms 30);
  Alcotest.(check (list int)) "in time order, cancelled one not" [ 20; 5 ] !fired;
  Alcotest.(check int) "the stack's clock" (t0 + Time.of_ms 30) (U.now w.tb)

(* {1 A group over it} *)

let layers () =
  match Consort_group.Properties.(layers vsync) with
  | Ok l -> l
  | Error e -> Alcotest.failf "%a" Consort_group.Properties.pp_error e

type member = {
  g : G.t;
  views : Consort_group.Group.view_info list ref;
  casts : (string * string) list ref; (* origin, payload; newest first *)
}

let join w gpool tr addr ~peers ~seed =
  let views = ref [] and casts = ref [] in
  let cb =
    {
      Consort_group.Group.view = (fun v -> views := v :: !views);
      cast = (fun ~origin s -> casts := (origin, s) :: !casts);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  ignore w;
  match G.join ~pool:gpool ~peers ~seed ~layers:(layers ()) tr ~group:"net" ~addr cb with
  | Ok g -> { g; views; casts }
  | Error e -> Alcotest.failf "%s could not join: %a" addr Consort_group.Group.pp_join_error e

let one_view ms =
  match ms with
  | [] -> false
  | m :: _ ->
      let v = G.view m.g in
      Array.length v.members = List.length ms
      && List.for_all (fun m' -> (G.view m'.g).vid = v.vid && not (G.is_blocked m'.g)) ms

let group_over_our_udp () =
  let w = world () in
  let gpool = Pool.create ~name:"group" () in
  let addrs = [ "10.0.0.1:7400"; "10.0.0.1:7401"; "10.0.0.2:7400" ] in
  let trs = [ w.ta; w.ta; w.tb ] in
  let ms =
    List.mapi
      (fun i (tr, a) -> join w gpool tr a ~peers:addrs ~seed:(100 + i))
      (List.combine trs addrs)
  in
  run_until w "one view of three" (fun () -> one_view ms);
  let v = G.view (List.hd ms).g in
  Alcotest.(check int) "three members" 3 (Array.length v.members);
  List.iter (fun m -> Alcotest.(check string) "same view everywhere" v.vid (G.view m.g).vid) ms;
  List.iteri (fun i m -> accepted (G.cast m.g (Printf.sprintf "cast %d from %s" i (G.me m.g)))) ms;
  run_until w "every cast everywhere" (fun () ->
      List.for_all (fun m -> List.length !(m.casts) = 3) ms);
  let expected =
    List.sort compare
      (List.mapi (fun i m -> (G.me m.g, Printf.sprintf "cast %d from %s" i (G.me m.g))) ms)
  in
  List.iter
    (fun m ->
      Alcotest.(check (list (pair string string)))
        "casts delivered, with origins" expected (List.sort compare !(m.casts)))
    ms;
  (* Casts from one origin arrive in order. *)
  let first = List.hd ms in
  for i = 1 to 20 do
    accepted (G.cast first.g (Printf.sprintf "seq %02d" i))
  done;
  run_until w "twenty more casts" (fun () -> List.for_all (fun m -> List.length !(m.casts) = 23) ms);
  List.iter
    (fun m ->
      let seq =
        List.rev
          (List.filter_map (fun (o, s) -> if o = G.me first.g then Some s else None) !(m.casts))
      in
      Alcotest.(check (list string))
        "FIFO from one origin"
        (List.hd seq :: List.init 20 (fun i -> Printf.sprintf "seq %02d" (i + 1)))
        seq)
    ms;
  Alcotest.(check bool)
    "datagrams crossed the wire both ways" true
    ((S.Udp.query w.a.udp).datagrams_in > 0 && (S.Udp.query w.b.udp).datagrams_in > 0);
  (* A leave: the others install a view of two. *)
  let last = List.nth ms 2 in
  G.leave last.g;
  let rest = [ List.nth ms 0; List.nth ms 1 ] in
  run_until w "a view of two after the leave" (fun () -> G.has_exited last.g && one_view rest);
  List.iter (fun m -> G.leave m.g) rest;
  run_until w "everyone gone" (fun () -> List.for_all (fun m -> G.has_exited m.g) rest);
  Alcotest.(check int) "connections closed" 0 (U.connections w.ta + U.connections w.tb);
  advance w (Time.of_sec 5.);
  no_leaks w;
  Alcotest.(check int) "group buffers" 0 (Pool.leak_check gpool)

let () =
  Alcotest.run "net_group"
    [
      ( "transport",
        [
          Alcotest.test_case "addresses" `Quick addresses;
          Alcotest.test_case "send and receive over our UDP" `Quick send_and_receive;
          Alcotest.test_case "65507-byte datagrams, in fragments" `Quick big_datagrams;
          Alcotest.test_case "cast: fan-out, loopback" `Quick fan_out_and_loopback;
          Alcotest.test_case "errors, drop filter, close" `Quick errors_and_controls;
          Alcotest.test_case "time and timers from the stack's clock" `Quick timers;
        ] );
      ( "group",
        [ Alcotest.test_case "vsync group over our UDP/IP/Ethernet" `Quick group_over_our_udp ] );
    ]
