open Consort_net
module Loop = Consort_engine.Loop
module S = Ipstack

type t = { loop : Loop.t; pool : Consort.Pool.t; tap : Tap.t; stack : S.t }

let ( let* ) = Result.bind

let udp_service (stack : S.t) port ~echo =
  let handler _ =
    {
      S.Udp.receive = (fun c p -> if echo then ignore (S.Udp.send c p) else Packet.release p);
      status = (fun _ _ -> ());
    }
  in
  match S.Udp.passive_open stack.udp (Udp.Port port) handler with
  | Ok () -> Ok ()
  | Error e -> Error (`Msg (Fmt.str "UDP port %d: %a" port Protocol.pp_error e))

let rec all = function [] -> Ok () | r :: rest -> Result.bind r (fun () -> all rest)

let start ?(mtu = 1500) ?gateway ?mac ?(udp_echo = [ 7 ]) ?(udp_discard = [ 9 ]) ?(setup = fun _ -> ())
    ?loop ~tap ~ip () =
  let loop = match loop with Some l -> l | None -> Loop.create () in
  let* address = Ipv4_addr.Prefix.of_string ip in
  let* gateway =
    match gateway with
    | None -> Ok None
    | Some g -> Result.map Option.some (Ipv4_addr.of_string g)
  in
  let* mac = match mac with None -> Ok None | Some m -> Result.map Option.some (Mac_addr.of_string m) in
  let pool = Consort.Pool.create ~name:("tap " ^ tap) () in
  let* dev = Tap.open_ ~mtu ?mac ~pool loop tap in
  let clock = Loop_clock.of_loop loop in
  let stack = S.create ?gateway ~clock ~pool ~address (Tap.device dev) in
  let t = { loop; pool; tap = dev; stack } in
  match
    all
      (List.map (udp_service stack ~echo:true) udp_echo
      @ List.map (udp_service stack ~echo:false) udp_discard)
  with
  | Error _ as e ->
      Tap.close dev;
      e
  | Ok () ->
      setup t;
      Ok t

let stop t = Tap.close t.tap

let run ?mtu ?gateway ?mac ?udp_echo ?udp_discard ?setup ?stats_every ?timeout ~tap ~ip () =
  let* t = start ?mtu ?gateway ?mac ?udp_echo ?udp_discard ?setup ~tap ~ip () in
  Fmt.pr "consort net: %s up as %s (%a), mtu %d@." (Tap.name t.tap) ip Mac_addr.pp
    (Device.mac (Tap.device t.tap))
    (Device.mtu (Tap.device t.tap));
  let stop_on s = Sys.set_signal s (Sys.Signal_handle (fun _ -> Loop.stop t.loop)) in
  stop_on Sys.sigint;
  stop_on Sys.sigterm;
  let rec tick every () =
    Fmt.pr "%a@." S.pp t.stack;
    ignore (Loop.after t.loop (Consort.Time.of_sec every) (tick every))
  in
  Option.iter (fun e -> ignore (Loop.after t.loop (Consort.Time.of_sec e) (tick e))) stats_every;
  Fun.protect
    ~finally:(fun () -> stop t)
    (fun () -> Loop.run ?timeout t.loop);
  Fmt.pr "%a@." S.pp t.stack;
  Ok ()
