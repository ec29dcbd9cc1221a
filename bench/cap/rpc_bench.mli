(** [consort bench rpc]: the capability RPC beside raw UDP, in one run.

    Both sides run in one process on one event loop over kernel UDP on
    127.0.0.1, so the RPC and its baselines share the same placement:
    - null RPC latency (an empty request and reply, encrypted, at most
      once) beside a raw UDP round trip of an empty datagram;
    - 1 MB [trans] throughput (a 1 MB request, an empty reply) beside raw
      UDP one-way throughput of 8 KB datagrams.
    Each prints the ratio; every round's figures are shown, and the
    cipher's own rate, which bounds the throughput ratio. Then the
    same null call and 1 MB request with gRPC (a Go program in
    [bench/cap/grpc], built by the benchmark from the Go module proxy),
    over plain TCP and over TLS 1.3: in the same placement (client and
    server in one process, [GOMAXPROCS=1]: one thread runs Go code, as one
    event loop runs ours), then as Go runs by default, on every core. *)

type figures = {
  null_us : float;  (** median null RPC, microseconds *)
  raw_rtt_us : float;  (** median raw UDP round trip *)
  trans_mbps : float;  (** 1 MB trans, MB/s (10{^6} bytes), default 8 KB fragments *)
  trans_big_mbps : float;  (** the same with 60 KB fragments *)
  raw_mbps : float;  (** raw UDP one-way, 8 KB datagrams, MB/s *)
  gcm_mbps : float;
      (** AES-256-GCM sealing then opening 8 KB messages, MB/s: with the raw
          UDP rate, the ceiling of a transfer whose every byte is sealed and
          opened in this one process *)
  trans_cpu_mbps : float;  (** 1 MB trans per second of this process's CPU time (user and system) *)
  raw_cpu_mbps : float;  (** raw UDP one-way per second of CPU time: other load does not change these two *)
}

val run : ?calls:int -> ?transfers:int -> ?rounds:int -> unit -> (figures, string) result
(** [run ()] times [rounds] rounds, each with every figure and its
    baseline, and keeps the best of each (lowest latency, highest
    throughput). *)

val gcm_seal : int -> float
(** [gcm_seal bytes] seals [bytes] in 8 KB messages with AES-256-GCM and
    is the rate, MB/s: what one side of an encrypted transfer can do at
    best. *)

val cmd : int Cmdliner.Cmd.t
