open Consort_net
module Loop = Consort_engine.Loop
module S = Ipstack

type ip6 = { ip6 : S.Ip6.t; udp6 : S.Udp6.t }
type t = { loop : Loop.t; pool : Consort.Pool.t; tap : Tap.t; stack : S.t; v6 : ip6 option }

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

let udp6_service udp6 port ~echo =
  let handler _ =
    {
      S.Udp6.receive = (fun c p -> if echo then ignore (S.Udp6.send c p) else Packet.release p);
      status = (fun _ _ -> ());
    }
  in
  match S.Udp6.passive_open udp6 (Udp.Port port) handler with
  | Ok () -> Ok ()
  | Error e -> Error (`Msg (Fmt.str "UDP (IPv6) port %d: %a" port Protocol.pp_error e))

let rec all = function [] -> Ok () | r :: rest -> Result.bind r (fun () -> all rest)

let start ?ip6 ?(mtu = 1500) ?gateway ?mac ?(udp_echo = [ 7 ]) ?(udp_discard = [ 9 ])
    ?(setup = fun _ -> ()) ?loop ~tap ~ip () =
  let loop = match loop with Some l -> l | None -> Loop.create () in
  let* address = Ipv4_addr.Prefix.of_string ip in
  let* gateway =
    match gateway with None -> Ok None | Some g -> Result.map Option.some (Ipv4_addr.of_string g)
  in
  let* mac =
    match mac with None -> Ok None | Some m -> Result.map Option.some (Mac_addr.of_string m)
  in
  let* prefix6 =
    match ip6 with
    | None -> Ok None
    | Some a -> (
        match Ipv6_addr.Prefix.of_string a with
        | Ok p when Ipv6_addr.is_multicast p.addr || Ipv6_addr.equal p.addr Ipv6_addr.unspecified ->
            Error (`Msg (Printf.sprintf "--ip6 %s: not a unicast address" a))
        | Ok p -> Ok (Some p)
        | Error (`Msg m) -> Error (`Msg ("--ip6: " ^ m)))
  in
  let pool = Consort.Pool.create ~name:("tap " ^ tap) () in
  let* dev = Tap.open_ ~mtu ?mac ~pool loop tap in
  let clock = Loop_clock.of_loop loop in
  let stack = S.create ?gateway ~clock ~pool ~address (Tap.device dev) in
  let v6 =
    Option.map
      (fun address ->
        let ip6 = S.Ip6.create ~address ~clock ~pool stack.eth in
        { ip6; udp6 = S.Udp6.create ip6 })
      prefix6
  in
  let t = { loop; pool; tap = dev; stack; v6 } in
  let services6 =
    match v6 with
    | None -> []
    | Some v ->
        List.map (udp6_service v.udp6 ~echo:true) udp_echo
        @ List.map (udp6_service v.udp6 ~echo:false) udp_discard
  in
  match
    all
      (List.map (udp_service stack ~echo:true) udp_echo
      @ List.map (udp_service stack ~echo:false) udp_discard
      @ services6)
  with
  | Error _ as e ->
      Tap.close dev;
      e
  | Ok () ->
      setup t;
      Ok t

let stop t = Tap.close t.tap

let pp_stats ppf t =
  S.pp ppf t.stack;
  Option.iter (fun v -> Fmt.pf ppf "@.ipv6: %a" Ipv6.pp_info (S.Ip6.query v.ip6)) t.v6

let run ?ip6 ?mtu ?gateway ?mac ?udp_echo ?udp_discard ?setup ?stats_every ?timeout ~tap ~ip () =
  let* t = start ?ip6 ?mtu ?gateway ?mac ?udp_echo ?udp_discard ?setup ~tap ~ip () in
  Fmt.pr "consort net: %s up as %s%s (%a), mtu %d@." (Tap.name t.tap) ip
    (match t.v6 with
    | Some v ->
        Fmt.str " and %a"
          Fmt.(list ~sep:(any " and ") Ipv6_addr.pp)
          (S.Ip6.query v.ip6).version.addresses
    | None -> "")
    Mac_addr.pp
    (Device.mac (Tap.device t.tap))
    (Device.mtu (Tap.device t.tap));
  let stop_on s = Sys.set_signal s (Sys.Signal_handle (fun _ -> Loop.stop t.loop)) in
  stop_on Sys.sigint;
  stop_on Sys.sigterm;
  let rec tick every () =
    Fmt.pr "%a@." pp_stats t;
    ignore (Loop.after t.loop (Consort.Time.of_sec every) (tick every))
  in
  Option.iter (fun e -> ignore (Loop.after t.loop (Consort.Time.of_sec e) (tick e))) stats_every;
  Fun.protect ~finally:(fun () -> stop t) (fun () -> Loop.run ?timeout t.loop);
  Fmt.pr "%a@." pp_stats t;
  Ok ()
