let pair ?(latency = Consort.Time.of_us 10) ?(mtu = 1500) ?(names = ("mem0", "mem1")) ~clock ~pool_a
    ~pool_b mac_a mac_b =
  let peer_a = ref None and peer_b = ref None in
  let send self_peer peer_pool p =
    let n = Packet.length p in
    if n > mtu + Ethernet_wire.sizeof_ethernet then (
      Packet.release p;
      Error (`Too_big n))
    else
      let copy = Packet.create peer_pool n in
      Cstruct.blit (Packet.cstruct p) 0 (Packet.cstruct copy) 0 n;
      Packet.release p;
      match !self_peer with
      | None ->
          Packet.release copy;
          Ok ()
      | Some d ->
          let (_ : Clock.cancel) =
            clock.Clock.at (clock.Clock.now () + latency) (fun () -> Device.deliver d copy)
          in
          Ok ()
  in
  let a = Device.v ~name:(fst names) ~mac:mac_a ~mtu ~send:(send peer_a pool_b) () in
  let b = Device.v ~name:(snd names) ~mac:mac_b ~mtu ~send:(send peer_b pool_a) () in
  peer_a := Some b;
  peer_b := Some a;
  (a, b)
