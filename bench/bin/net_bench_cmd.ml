open Cmdliner
module B = Consort_net_bench.Tcp_bench
module I = Consort_net_bench.Tcp_impair_bench

(* [consort bench tcp --impair SPEC]: through the impairment relay. *)
let tcp_impair impair bytes seconds mtu buffer kernel_cc consort_cc save =
  let d = I.default in
  let cfg =
    {
      I.impair;
      bytes = Option.value bytes ~default:d.bytes;
      seconds = Option.value seconds ~default:d.seconds;
      mtu;
      buffer;
      ipv6 = true;
      kernel_cc;
      consort_cc;
    }
  in
  match (I.check_spec impair, Option.bind save Consort_cli.unwritable_dir) with
  | Error e, _ ->
      Fmt.epr "consort bench tcp: --impair: %s@." e;
      2
  | Ok (), None when Result.is_error (I.check_cc kernel_cc) ->
      Fmt.epr "consort bench tcp: --kernel-cc: %s@." (Result.get_error (I.check_cc kernel_cc));
      2
  | _, Some m ->
      Fmt.epr "consort bench tcp: --save %s: %s@." (Option.get save) m;
      2
  | Ok (), None -> (
      let progress s = Fmt.epr "bench tcp: %s@." s in
      match I.run ~progress cfg with
      | Error e ->
          Fmt.epr "consort bench tcp: %s@." e;
          1
      | Ok r -> (
          Fmt.pr "%a" I.pp_table r;
          let line = I.to_json r in
          print_endline line;
          match save with
          | None -> 0
          | Some dir -> (
              match Consort_cli.save_result ~dir ~name:"tcp-impair" line with
              | Ok f ->
                  Fmt.pr "  kept in %s@." f;
                  0
              | Error m ->
                  Fmt.epr "consort bench tcp: --save %s: %s@." dir m;
                  2)))

let tcp impair save bytes seconds rr_size rr_count mtu buffer rounds kernel_cc consort_cc verbose =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some (if verbose then Logs.Info else Logs.Warning));
  match impair with
  | Some spec -> tcp_impair spec bytes seconds mtu buffer kernel_cc consort_cc save
  | None -> (
      let bytes = Option.value bytes ~default:B.default.bytes in
      let seconds = Option.value seconds ~default:B.default.seconds in
      let cfg = { B.bytes; seconds; rr_size; rr_count; mtu; buffer; rounds } in
      let progress s = Fmt.epr "bench tcp: %s@." s in
      match B.run ~progress cfg with
      | Ok r ->
          Fmt.pr "%a" B.pp_table r;
          print_endline (B.to_json r);
          0
      | Error e ->
          Fmt.epr "consort bench tcp: %s@." e;
          1)

let cmd =
  let d = B.default in
  let bytes =
    Arg.(
      value
      & opt (some Consort_cli.positive_int) None
      & info [ "bytes" ] ~docv:"BYTES"
          ~doc:"Bytes per bulk transfer (default 200 MB; 100 MB with $(b,--impair)).")
  in
  let seconds =
    Arg.(
      value
      & opt (some Consort_cli.positive_float) None
      & info [ "seconds" ] ~docv:"SECONDS"
          ~doc:"Time bound of each transfer (default 20; 300 with $(b,--impair)).")
  in
  let impair =
    Arg.(
      value
      & opt (some string) None
      & info [ "impair" ] ~docv:"SPEC"
          ~doc:
            "Instead: throughput through the impairment relay, over IPv4 and IPv6, kernel to \
             Consort and Consort to kernel beside kernel to kernel through the same relay, SHA-256 \
             checked, with the ratios. $(i,SPEC) is comma-separated $(i,KEY)=$(i,VALUE): loss, \
             dup, reorder (2% or 0.02), delay, jitter, reorder_delay (1ms, 500us), rate (100mbit), \
             queue (bytes), mtu (a black hole above it), seed; for example \
             loss=2%,reorder=5%,delay=1ms.")
  in
  let save =
    Arg.(
      value
      & opt (some string) None
      & info [ "save" ] ~docv:"DIR"
          ~doc:
            "With $(b,--impair): also keep the JSON line in \
             $(i,DIR)/tcp-impair-$(i,DATE)-$(i,TIME).json (UTC).")
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
  let kernel_cc =
    Arg.(
      value & opt string I.default.kernel_cc
      & info [ "kernel-cc" ] ~docv:"NAME"
          ~doc:
            "With $(b,--impair): the congestion control of the kernel's senders (TCP_CONGESTION), \
             Linux's own default unless given, whatever the host's default is.")
  in
  let consort_cc =
    Arg.(
      value
      & opt (enum I.consort_ccs) I.default.consort_cc
      & info [ "consort-cc" ] ~docv:"NAME"
          ~doc:
            "With $(b,--impair): the congestion control of Consort's sender: $(b,cubic) (the \
             stack's default), $(b,newreno) or $(b,bbr).")
  in
  let verbose = Arg.(value & flag & info [ "verbose"; "v" ] ~doc:"Log the stack's counters.") in
  Cmd.v
    (Consort_cli.info ~path:"bench tcp" "tcp"
       ~doc:
         "TCP throughput, request/response latency and CPU per MB: Consort's stack over TAP \
          against the kernel, beside a C TAP bridge and veth without offloads (needs root; makes \
          and removes its own namespaces and devices).")
    Term.(
      const tcp $ impair $ save $ bytes $ seconds $ rr_size $ rr_count $ mtu $ buffer $ rounds
      $ kernel_cc $ consort_cc $ verbose)

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
