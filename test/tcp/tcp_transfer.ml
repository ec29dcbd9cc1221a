(* Runs one verified transfer between two TCP stacks over the in-memory
   network and prints its figures. *)

(* The sender's congestion control, from --cc (set before [run] runs). *)
let congestion = ref Tcp.Cubic

open Cmdliner

let run bytes loss buffer reorder jitter duplicate rate delay seed sack timestamps debug =
  Consort.Iovec.set_checked false;
  Logs.set_reporter (Logs_fmt.reporter ());
  if debug then Logs.set_level (Some Logs.Debug);
  let config =
    {
      Tcp.default_config with
      send_buffer = buffer;
      receive_buffer = buffer;
      sack;
      timestamps;
      congestion = !congestion;
    }
  in
  let impairments =
    {
      Mem.loss;
      reorder;
      duplicate;
      jitter = Consort.Time.of_us jitter;
      delay = Consort.Time.of_us delay;
      rate = (if rate > 0 then Some rate else None);
      queue = (if rate > 0 then 100 * 1500 else max_int);
    }
  in
  let r = Transfer.run ~config ~seed ~impairments bytes in
  Fmt.pr "%a@.sender   %a@.receiver %a@." Transfer.pp_result r Tcp.pp_conn_info r.sender
    Tcp.pp_conn_info r.receiver

let () =
  let i n d doc = Arg.(value & opt int d & info [ n ] ~doc) in
  let f n d doc = Arg.(value & opt float d & info [ n ] ~doc) in
  let b n d doc = Arg.(value & opt bool d & info [ n ] ~doc) in
  let term =
    Term.(
      const run
      $ i "bytes" 1_000_000 "bytes to send"
      $ f "loss" 0. "loss probability"
      $ i "buffer" 262144 "send and receive buffer"
      $ f "reorder" 0. "reorder probability"
      $ i "jitter" 3000 "extra delay of a reordered frame, up to, us"
      $ f "duplicate" 0. "duplication probability"
      $ i "rate" 0 "bottleneck bytes/s (0: none)"
      $ i "delay" 1000 "one-way delay, us"
      $ i "seed" 1 "seed" $ b "sack" true "SACK" $ b "timestamps" true "timestamps"
      $ Arg.(value & flag & info [ "debug" ] ~doc:"debug logs"))
  in
  let set_cc =
    Term.(
      const (fun c -> congestion := c)
      $ Arg.(
          value
          & opt
              (enum [ ("cubic", Tcp.Cubic); ("newreno", Tcp.New_reno); ("bbr", Tcp.Bbr) ])
              Tcp.Cubic
          & info [ "cc" ] ~doc:"the sender's congestion control"))
  in
  (* [set_cc] is evaluated first: the choice is made when [run] runs. *)
  exit (Cmd.eval (Cmd.v (Cmd.info "tcp_transfer") Term.(const (fun () () -> ()) $ set_cc $ term)))
