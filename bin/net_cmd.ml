open Cmdliner

let up tap ip gateway mtu seconds =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some Logs.Warning);
  let timeout = Option.map Consort.Time.of_sec seconds in
  match Consort_net_unix.Up.run ?gateway ?mtu ?timeout ~udp_echo:[ 7 ] ~udp_discard:[ 9 ] ~stats_every:10. ~tap ~ip () with
  | Ok () -> 0
  | Error (`Msg e) ->
      Fmt.epr "consort net up: %s@." e;
      1

let up_cmd =
  let tap = Arg.(required & opt (some string) None & info [ "tap" ] ~docv:"NAME" ~doc:"TAP device to create or attach to.") in
  let ip = Arg.(required & opt (some string) None & info [ "ip" ] ~docv:"ADDR/LEN" ~doc:"This stack's IPv4 address and prefix length.") in
  let gateway = Arg.(value & opt (some string) None & info [ "gateway" ] ~docv:"ADDR" ~doc:"Default gateway.") in
  let mtu = Arg.(value & opt (some int) None & info [ "mtu" ] ~docv:"BYTES" ~doc:"Link MTU (default 1500).") in
  let seconds = Arg.(value & opt (some float) None & info [ "for" ] ~docv:"SECONDS" ~doc:"Stop after this long.") in
  Cmd.v
    (Cmd.info "up" ~doc:"Run the stack on a TAP device: answer ARP and ping, UDP echo on port 7 and discard on port 9.")
    Term.(const up $ tap $ ip $ gateway $ mtu $ seconds)

let cmd = Cmd.group (Cmd.info "net" ~doc:"Consort's user-space TCP/IP stack.") [ up_cmd ]

let bench_checksum () =
  let rows = Consort_net_bench.Checksum_bench.run () in
  Fmt.pr "Internet checksum (C stub) beside memcpy of the same bytes, same run:@.";
  Fmt.pr "%a" Consort_net_bench.Checksum_bench.pp_table rows;
  0

let bench_checksum =
  Cmd.v (Cmd.info "checksum" ~doc:"Checksum GB/s beside memcpy GB/s.") Term.(const bench_checksum $ const ())
