open Cmdliner
module B = Consort_net_bench.Tcp_bench

let tcp bytes seconds rr_size rr_count mtu buffer rounds verbose =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some (if verbose then Logs.Info else Logs.Warning));
  let cfg = { B.bytes; seconds; rr_size; rr_count; mtu; buffer; rounds } in
  let progress s = Fmt.epr "bench tcp: %s@." s in
  match B.run ~progress cfg with
  | Ok r ->
      Fmt.pr "%a" B.pp_table r;
      print_endline (B.to_json r);
      0
  | Error e ->
      Fmt.epr "consort bench tcp: %s@." e;
      1

let cmd =
  let d = B.default in
  let bytes =
    Arg.(
      value
      & opt Consort_cli.positive_int d.bytes
      & info [ "bytes" ] ~docv:"BYTES" ~doc:"Bytes per bulk transfer.")
  in
  let seconds =
    Arg.(
      value
      & opt Consort_cli.positive_float d.seconds
      & info [ "seconds" ] ~docv:"SECONDS" ~doc:"Time bound of each transfer.")
  in
  let rr_size =
    Arg.(
      value
      & opt Consort_cli.positive_int d.rr_size
      & info [ "rr-size" ] ~docv:"BYTES" ~doc:"Bytes per request and per response.")
  in
  let rr_count =
    Arg.(
      value
      & opt Consort_cli.positive_int d.rr_count
      & info [ "rr-count" ] ~docv:"N" ~doc:"Request/response round trips measured.")
  in
  let mtu =
    Arg.(
      value
      & opt Consort_cli.positive_int d.mtu
      & info [ "mtu" ] ~docv:"BYTES" ~doc:"MTU of every link.")
  in
  let buffer =
    Arg.(
      value
      & opt Consort_cli.positive_int d.buffer
      & info [ "buffer" ] ~docv:"BYTES" ~doc:"Consort's TCP send and receive buffers.")
  in
  let rounds =
    Arg.(
      value
      & opt Consort_cli.positive_int d.rounds
      & info [ "rounds" ] ~docv:"N" ~doc:"Transfers per setup; the fastest counts.")
  in
  let verbose = Arg.(value & flag & info [ "verbose"; "v" ] ~doc:"Log the stack's counters.") in
  Cmd.v
    (Consort_cli.info ~path:"bench tcp" "tcp"
       ~doc:
         "TCP throughput, request/response latency and CPU per MB: Consort's stack over TAP \
          against the kernel, beside a C TAP bridge and veth without offloads (needs root; makes \
          and removes its own namespaces and devices).")
    Term.(const tcp $ bytes $ seconds $ rr_size $ rr_count $ mtu $ buffer $ rounds $ verbose)

module S = Consort_net_bench.Tcp_sim_bench

let tcp_sim connections bytes =
  let r = S.run ~connections ~bytes () in
  Fmt.pr "%a" S.pp r;
  print_endline (S.to_json r);
  0

let cmd_sim =
  let connections =
    Arg.(
      value & opt Consort_cli.positive_int 5000
      & info [ "connections" ] ~docv:"N" ~doc:"Connections for the setup rate.")
  in
  let bytes =
    Arg.(
      value
      & opt Consort_cli.positive_int (8 * 1024 * 1024)
      & info [ "bytes" ] ~docv:"BYTES" ~doc:"Bytes per transfer.")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench tcp-sim" "tcp-sim"
       ~doc:
         "TCP on the in-memory network: connection setup rate and memory per connection, \
          throughput under 1% loss and through a bottleneck with NewReno and CUBIC, the cost of a \
          SACK-abusing ACK bounded and unbounded.")
    Term.(const tcp_sim $ connections $ bytes)
